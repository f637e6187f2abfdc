//! The registers the torture run's holders read and write: rows in a PostgreSQL server
//! of their own (never the lock server, so a fault on the lock server does not touch
//! them).
//!
//! - The **fenced** register refuses a fence lower than the highest it has seen for
//!   the key, reads included, in the statement's `WHERE`: one statement, atomic under
//!   the row lock. Each operation it accepts is also appended to a log in the same
//!   statement, so the checker can read the register's own order.
//! - The **unfenced** register, the control, takes every write.
//!
//! Each accepted write stores one more than the value its holder read and counts itself
//! in `writes`, so `writes - value` is the number of updates lost.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::history::{Logged, Totals};
use crate::BoxError;

/// Both registers, one row per key each.
#[derive(Debug, Clone)]
pub(crate) struct Registers {
    pool: PgPool,
}

const SETUP: [&str; 6] = [
    "DROP TABLE IF EXISTS torture_fenced, torture_unfenced, torture_log",
    "CREATE TABLE torture_fenced (key int PRIMARY KEY, value bigint NOT NULL, fence bigint NOT NULL, writes bigint NOT NULL)",
    "CREATE TABLE torture_unfenced (key int PRIMARY KEY, value bigint NOT NULL, writes bigint NOT NULL)",
    "CREATE TABLE torture_log (seq bigserial PRIMARY KEY, key int NOT NULL, fence bigint NOT NULL, write boolean NOT NULL)",
    "INSERT INTO torture_fenced SELECT k, 0, 0, 0 FROM generate_series(0, $1 - 1) AS k",
    "INSERT INTO torture_unfenced SELECT k, 0, 0 FROM generate_series(0, $1 - 1) AS k",
];

impl Registers {
    /// Connects to `url` and sets up fresh registers for `keys` keys.
    pub(crate) async fn new(url: &str, keys: usize, connections: u32) -> Result<Self, BoxError> {
        // The registers are never restarted: their commits need not wait for the disk,
        // which would otherwise bound the whole run's pace.
        let options = url
            .parse::<PgConnectOptions>()?
            .options([("synchronous_commit", "off")]);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect_with(options)
            .await?;
        let registers = Registers { pool };
        registers.reset(keys).await?;
        Ok(registers)
    }

    /// Empties the registers for a new backend's run.
    pub(crate) async fn reset(&self, keys: usize) -> Result<(), BoxError> {
        let keys = i32::try_from(keys)?;
        for statement in SETUP {
            let query = sqlx::query(statement);
            // Only the inserts take the number of keys.
            let query = if statement.contains("$1") {
                query.bind(keys)
            } else {
                query
            };
            query.persistent(false).execute(&self.pool).await?;
        }
        Ok(())
    }

    /// Reads the fenced register under `fence`: its value, or `None` when it has
    /// already seen a larger fence (then it records nothing).
    pub(crate) async fn fenced_read(
        &self,
        key: usize,
        fence: u64,
    ) -> Result<Option<i64>, BoxError> {
        let value: Option<i64> = sqlx::query_scalar(
            "WITH r AS (UPDATE torture_fenced SET fence = $2 WHERE key = $1 AND fence <= $2 RETURNING value), \
                  l AS (INSERT INTO torture_log (key, fence, write) SELECT $1, $2, false FROM r) \
             SELECT value FROM r",
        )
        .bind(i32::try_from(key)?)
        .bind(i64::try_from(fence)?)
        .fetch_optional(&self.pool)
        .await?;
        Ok(value)
    }

    /// Writes `value` to the fenced register under `fence`: whether it was accepted.
    pub(crate) async fn fenced_write(
        &self,
        key: usize,
        fence: u64,
        value: i64,
    ) -> Result<bool, BoxError> {
        let accepted: i64 = sqlx::query_scalar(
            "WITH w AS (UPDATE torture_fenced SET value = $3, fence = $2, writes = writes + 1 \
                        WHERE key = $1 AND fence <= $2 RETURNING 1), \
                  l AS (INSERT INTO torture_log (key, fence, write) SELECT $1, $2, true FROM w) \
             SELECT count(*) FROM w",
        )
        .bind(i32::try_from(key)?)
        .bind(i64::try_from(fence)?)
        .bind(value)
        .fetch_one(&self.pool)
        .await?;
        Ok(accepted == 1)
    }

    /// Reads the unfenced register.
    pub(crate) async fn unfenced_read(&self, key: usize) -> Result<i64, BoxError> {
        Ok(
            sqlx::query_scalar("SELECT value FROM torture_unfenced WHERE key = $1")
                .bind(i32::try_from(key)?)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Writes `value` to the unfenced register.
    pub(crate) async fn unfenced_write(&self, key: usize, value: i64) -> Result<(), BoxError> {
        sqlx::query("UPDATE torture_unfenced SET value = $2, writes = writes + 1 WHERE key = $1")
            .bind(i32::try_from(key)?)
            .bind(value)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The fenced register's log, in its own order.
    pub(crate) async fn log(&self) -> Result<Vec<Logged>, BoxError> {
        let rows: Vec<(i32, i64, bool)> =
            sqlx::query_as("SELECT key, fence, write FROM torture_log ORDER BY seq")
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|(key, fence, write)| {
                Ok(Logged {
                    key: usize::try_from(key)?,
                    fence: u64::try_from(fence)?,
                    write,
                })
            })
            .collect()
    }

    /// The final state of the fenced and the unfenced register, key by key.
    pub(crate) async fn totals(&self) -> Result<(Vec<Totals>, Vec<Totals>), BoxError> {
        let read = |table: &'static str| {
            let pool = self.pool.clone();
            async move {
                let rows: Vec<(i64, i64)> =
                    sqlx::query_as(&format!("SELECT value, writes FROM {table} ORDER BY key"))
                        .fetch_all(&pool)
                        .await?;
                Ok::<_, BoxError>(
                    rows.into_iter()
                        .map(|(value, writes)| Totals { value, writes })
                        .collect::<Vec<_>>(),
                )
            }
        };
        Ok((
            read("torture_fenced").await?,
            read("torture_unfenced").await?,
        ))
    }
}
