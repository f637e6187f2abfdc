//! The connections a SQL backend runs its statements on, and the one pooling policy
//! both SQL backends follow.
//!
//! sqlx's pool pings every connection on its way back to the pool (and, by default,
//! before handing it out): a round trip of its own for each one-statement lock
//! operation, which doubles the server's work per operation. Here a connection goes
//! back only after its work finished cleanly ([`Checkout::settle`] or
//! [`Checkout::finish`]), and is closed otherwise (an I/O error, a future cancelled
//! mid-statement, a transaction that did not end), so the pool never holds a
//! connection in an unknown state and never needs to test one.
//!
//! A connection that sat idle in the pool for [`IDLE_LIMIT`] is closed rather than
//! handed out, as sqlx's pool closes one by default: a server or a proxy between
//! may have cut it meanwhile (MariaDB's `wait_timeout`, say), and then the next
//! statement would fail on it.
//!
//! A service's own sqlx pool ([`Pool::shared`]) is used as it is, with the same rule:
//! a connection in an unknown state is closed rather than given back.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use distlock_core::Result;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Database, Executor};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::{timed_out, Setting, Settings};

/// How long a connection of a pool of the backend's own may sit idle and still be
/// handed out: sqlx's pool's default idle time-out.
pub const IDLE_LIMIT: Duration = Duration::from_secs(10 * 60);

/// The options a connection of `DB` is made with.
pub type ConnectOptions<DB> = <<DB as Database>::Connection as Connection>::Options;

/// A backend's connections: a pool of its own, or the service's sqlx pool.
pub struct Pool<DB: Database> {
    kind: Kind<DB>,
}

enum Kind<DB: Database> {
    Own(Box<OwnPool<DB>>),
    Shared {
        pool: sqlx::Pool<DB>,
        acquire_timeout: Duration,
    },
}

struct OwnPool<DB: Database> {
    options: ConnectOptions<DB>,
    on_connect: Option<String>,
    /// The connections given back, each with when; the latest last.
    idle: Mutex<Vec<(DB::Connection, Instant)>>,
    idle_limit: Duration,
    permits: Arc<Semaphore>,
    acquire_timeout: Duration,
}

impl<DB: Database> std::fmt::Debug for Pool<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Own(_) => "own",
            Kind::Shared { .. } => "shared",
        };
        f.debug_struct("Pool")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

/// A connection out of the pool. It goes back on drop only once [settled](Checkout::settle)
/// or [finished](Checkout::finish) as fit for the next statement; otherwise it is closed.
pub struct Checkout<'p, DB: Database> {
    held: Held<'p, DB>,
    reusable: bool,
}

enum Held<'p, DB: Database> {
    Own {
        pool: &'p OwnPool<DB>,
        conn: Option<DB::Connection>,
        _permit: OwnedSemaphorePermit,
    },
    Shared(PoolConnection<DB>),
}

impl<DB: Database> Pool<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    /// A pool of the backend's own: at most `size` connections made with `options`,
    /// each running `on_connect` (a session setting) once when it is made, and
    /// closed once it has sat idle for [`IDLE_LIMIT`].
    pub fn new(
        options: ConnectOptions<DB>,
        size: u32,
        acquire_timeout: Duration,
        on_connect: Option<String>,
    ) -> Self {
        Pool {
            kind: Kind::Own(Box::new(OwnPool {
                options,
                on_connect,
                idle: Mutex::new(Vec::new()),
                idle_limit: IDLE_LIMIT,
                permits: Arc::new(Semaphore::new(size as usize)),
                acquire_timeout,
            })),
        }
    }

    /// The same pool, closing a connection once it has sat idle for `limit` rather
    /// than [`IDLE_LIMIT`]. No effect on a [shared](Self::shared) pool, whose own
    /// settings rule.
    pub fn with_idle_limit(mut self, limit: Duration) -> Self {
        if let Kind::Own(own) = &mut self.kind {
            own.idle_limit = limit;
        }
        self
    }

    /// The service's own `pool`, waited on for at most `acquire_timeout`.
    pub fn shared(pool: sqlx::Pool<DB>, acquire_timeout: Duration) -> Self {
        Pool {
            kind: Kind::Shared {
                pool,
                acquire_timeout,
            },
        }
    }

    /// The options a new connection to the same server is made with.
    pub fn connect_options(&self) -> ConnectOptions<DB> {
        match &self.kind {
            Kind::Own(own) => own.options.clone(),
            Kind::Shared { pool, .. } => (*pool.connect_options()).clone(),
        }
    }

    /// A connection, within the acquire time-out. Its failure is an error of a
    /// request that never left this process: no statement is sent before a
    /// connection is had.
    pub async fn checkout(&self, settings: &impl Settings) -> Result<Checkout<'_, DB>> {
        self.try_checkout().await.map_err(|e| {
            match e {
                Some(e) => crate::connect_error(settings, e),
                None => timed_out(settings, Setting::Acquire),
            }
            .with_not_sent()
        })
    }

    /// A connection; `Err(None)` when none could be had within the acquire time-out.
    async fn try_checkout(&self) -> std::result::Result<Checkout<'_, DB>, Option<sqlx::Error>> {
        let held = match &self.kind {
            Kind::Own(own) => own.checkout().await?,
            Kind::Shared {
                pool,
                acquire_timeout,
            } => Held::Shared(
                tokio::time::timeout(*acquire_timeout, pool.acquire())
                    .await
                    .map_err(|_| None)?
                    .map_err(Some)?,
            ),
        };
        Ok(Checkout {
            held,
            reusable: false,
        })
    }
}

impl<DB: Database> OwnPool<DB> {
    fn idle(&self) -> MutexGuard<'_, Vec<(DB::Connection, Instant)>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection given back last, unless it sat idle past the limit: then it
    /// and every one given back before it are closed.
    fn take_idle(&self) -> Option<DB::Connection> {
        let mut idle = self.idle();
        let (conn, since) = idle.pop()?;
        if since.elapsed() < self.idle_limit {
            return Some(conn);
        }
        drop(conn);
        idle.clear();
        None
    }
}

impl<DB: Database> OwnPool<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    async fn checkout(&self) -> std::result::Result<Held<'_, DB>, Option<sqlx::Error>> {
        let permit =
            tokio::time::timeout(self.acquire_timeout, self.permits.clone().acquire_owned())
                .await
                .map_err(|_| None)?
                .map_err(|_| Some(sqlx::Error::PoolClosed))?;
        let idle = self.take_idle();
        let conn = match idle {
            Some(conn) => conn,
            None => tokio::time::timeout(self.acquire_timeout, self.connect())
                .await
                .map_err(|_| None)?
                .map_err(Some)?,
        };
        Ok(Held::Own {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        })
    }

    async fn connect(&self) -> std::result::Result<DB::Connection, sqlx::Error> {
        let mut conn = DB::Connection::connect_with(&self.options).await?;
        if let Some(statement) = &self.on_connect {
            conn.execute(sqlx::raw_sql(statement)).await?;
        }
        Ok(conn)
    }
}

impl<DB: Database> Checkout<'_, DB> {
    /// The connection.
    pub fn conn(&mut self) -> &mut DB::Connection {
        match &mut self.held {
            Held::Own { conn, .. } => conn
                .as_mut()
                .expect("a checkout holds its connection until dropped"),
            Held::Shared(conn) => conn,
        }
    }

    /// Judges the connection by how its one statement ended: after a full reply, or
    /// an error the server reported for the statement alone, it is fit for the next
    /// statement. Not for a transaction: one that failed part way may still be open
    /// (see [`finish`](Self::finish)).
    pub fn settle<T>(&mut self, result: &std::result::Result<T, sqlx::Error>) {
        self.reusable = matches!(result, Ok(_) | Err(sqlx::Error::Database(_)));
    }

    /// Marks the connection fit for the next statement: its work (a transaction, or a
    /// batch) ended cleanly.
    pub fn finish(&mut self) {
        self.reusable = true;
    }
}

impl<DB: Database> Drop for Checkout<'_, DB> {
    fn drop(&mut self) {
        match &mut self.held {
            Held::Own { pool, conn, .. } => {
                if let Some(conn) = conn.take() {
                    if self.reusable {
                        pool.idle().push((conn, Instant::now()));
                    }
                }
            }
            Held::Shared(conn) => {
                if !self.reusable {
                    conn.close_on_drop();
                }
            }
        }
    }
}
