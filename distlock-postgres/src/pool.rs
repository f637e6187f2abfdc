//! A small connection pool that costs no round trips of its own.
//!
//! sqlx's pool pings every connection on its way back (and, by default, before
//! handing it out), which doubles the round trips of a one-statement lock operation.
//! Here a connection goes back only after a statement finished cleanly — a reply was
//! read to its end, or the server reported a statement-level error — and is dropped
//! otherwise (an I/O error, or a future cancelled mid-statement), so the pool never
//! holds a connection in an unknown state and never needs to test one.
//!
//! A service's own sqlx pool ([`Pool::shared`]) is used as it is: a connection in an
//! unknown state is closed rather than given back.

use std::sync::Mutex;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{Connection, Postgres};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The backend's connections: its own pool, or the service's.
pub(crate) enum Pool {
    Own(Box<OwnPool>),
    Shared {
        pool: PgPool,
        acquire_timeout: Duration,
    },
}

pub(crate) struct OwnPool {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    permits: std::sync::Arc<Semaphore>,
    acquire_timeout: Duration,
}

/// A connection out of the pool; it goes back on drop only if [settled](Checkout::settle)
/// as fit for the next statement.
pub(crate) struct Checkout<'p> {
    held: Held<'p>,
    reusable: bool,
}

enum Held<'p> {
    Own {
        pool: &'p OwnPool,
        conn: Option<PgConnection>,
        _permit: OwnedSemaphorePermit,
    },
    Shared(PoolConnection<Postgres>),
}

impl Pool {
    /// The backend's own pool of at most `size` connections made with `options`.
    pub(crate) fn new(options: PgConnectOptions, size: u32, acquire_timeout: Duration) -> Self {
        Pool::Own(Box::new(OwnPool {
            options,
            idle: Mutex::new(Vec::new()),
            permits: std::sync::Arc::new(Semaphore::new(size as usize)),
            acquire_timeout,
        }))
    }

    /// The service's own `pool`, waited on for at most `acquire_timeout`.
    pub(crate) fn shared(pool: PgPool, acquire_timeout: Duration) -> Self {
        Pool::Shared {
            pool,
            acquire_timeout,
        }
    }

    /// The options a new connection to the same server is made with.
    pub(crate) fn connect_options(&self) -> PgConnectOptions {
        match self {
            Pool::Own(own) => own.options.clone(),
            Pool::Shared { pool, .. } => (*pool.connect_options()).clone(),
        }
    }

    /// A connection. `Err(None)` when none could be had within the acquire timeout.
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_>, Option<sqlx::Error>> {
        let held = match self {
            Pool::Own(own) => own.checkout().await?,
            Pool::Shared {
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

impl OwnPool {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<PgConnection>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection: an idle one, or a new one. `Err(None)` when none could be had
    /// within the acquire timeout.
    async fn checkout(&self) -> Result<Held<'_>, Option<sqlx::Error>> {
        let permit =
            tokio::time::timeout(self.acquire_timeout, self.permits.clone().acquire_owned())
                .await
                .map_err(|_| None)?
                .map_err(|_| Some(sqlx::Error::PoolClosed))?;
        let idle = self.idle().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => tokio::time::timeout(
                self.acquire_timeout,
                PgConnection::connect_with(&self.options),
            )
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
}

impl Checkout<'_> {
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        match &mut self.held {
            Held::Own { conn, .. } => conn
                .as_mut()
                .expect("a checkout holds its connection until dropped"),
            Held::Shared(conn) => conn,
        }
    }

    /// Judges the connection by how its statement ended: after a full reply or a
    /// statement-level server error it is fit for the next statement.
    pub(crate) fn settle<T>(&mut self, result: &Result<T, sqlx::Error>) {
        self.reusable = matches!(result, Ok(_) | Err(sqlx::Error::Database(_)));
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        match &mut self.held {
            Held::Own { pool, conn, .. } => {
                if let Some(conn) = conn.take() {
                    if self.reusable {
                        pool.idle().push(conn);
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
