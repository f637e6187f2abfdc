//! A small connection pool that costs no round trips of its own.
//!
//! sqlx's pool pings every connection on its way back (and, by default, before
//! handing it out), which doubles the round trips of a one-statement lock operation.
//! Here a connection goes back only after a statement finished cleanly — a reply was
//! read to its end, or the server reported a statement-level error — and is dropped
//! otherwise (an I/O error, or a future cancelled mid-statement), so the pool never
//! holds a connection in an unknown state and never needs to test one.

use std::sync::Mutex;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(crate) struct Pool {
    options: PgConnectOptions,
    idle: Mutex<Vec<PgConnection>>,
    permits: std::sync::Arc<Semaphore>,
    acquire_timeout: Duration,
}

/// A connection out of the pool; it goes back on drop only if marked [`Checkout::reusable`].
pub(crate) struct Checkout<'p> {
    pool: &'p Pool,
    conn: Option<PgConnection>,
    reusable: bool,
    _permit: OwnedSemaphorePermit,
}

impl Pool {
    pub(crate) fn new(options: PgConnectOptions, size: u32, acquire_timeout: Duration) -> Self {
        Pool {
            options,
            idle: Mutex::new(Vec::new()),
            permits: std::sync::Arc::new(Semaphore::new(size as usize)),
            acquire_timeout,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<PgConnection>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection: an idle one, or a new one. `Err(None)` when none could be had
    /// within the acquire timeout.
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_>, Option<sqlx::Error>> {
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
        Ok(Checkout {
            pool: self,
            conn: Some(conn),
            reusable: false,
            _permit: permit,
        })
    }
}

impl Checkout<'_> {
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        self.conn
            .as_mut()
            .expect("a checkout holds its connection until dropped")
    }

    /// Judges the connection by how its statement ended: after a full reply or a
    /// statement-level server error it is fit for the next statement.
    pub(crate) fn settle<T>(&mut self, result: &Result<T, sqlx::Error>) {
        self.reusable = matches!(result, Ok(_) | Err(sqlx::Error::Database(_)));
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.reusable {
                self.pool.idle().push(conn);
            }
        }
    }
}
