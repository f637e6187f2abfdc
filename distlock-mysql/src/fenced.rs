//! Fenced writes on MySQL and MariaDB: [`FencedTable`], fenced statements on your own
//! tables in your own transactions, and [`MySqlStore`], a fenced store on a table of
//! its own (the contract is `distlock_core::FencedStore`'s).
//!
//! # How a statement on your table is fenced
//!
//! A fenced table has a `fence BIGINT` column and a `BEFORE UPDATE` trigger, both
//! added by [`FencedTable::migrate`]. A fenced statement sets the column to its fence
//! beside its own assignments (`UPDATE accounts SET balance = balance + ?, fence = ?
//! WHERE id = ?`, or an upsert's `ON DUPLICATE KEY UPDATE … fence = VALUES(fence)`).
//! InnoDB runs the trigger on each row the statement changes, under the row's lock and
//! on its latest version, so a writer that committed a higher fence first is seen: the
//! compare and the write are one step. Where a row has seen a higher fence, the
//! trigger raises SQLSTATE `45000` with a message naming both fences; the statement is
//! undone whole (however many rows it had changed) and [`execute`] returns an
//! [`ErrorKind::StaleFence`] error. Unlike PostgreSQL, MySQL does not abort the
//! transaction the statement ran in: roll it back yourself.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::MySqlPool, fence: distlock_core::FencingToken) -> distlock_core::Result<()> {
//! use distlock_mysql::fenced::{self, FencedTable};
//!
//! let accounts = FencedTable::new("accounts")?;
//! let mut conn = pool.acquire().await.map_err(fenced::from_sqlx)?;
//! accounts.migrate(&mut conn).await?; // once: the column and the trigger
//!
//! // Inside the caller's own transaction.
//! let mut tx = pool.begin().await.map_err(fenced::from_sqlx)?;
//! let query = sqlx::query("UPDATE accounts SET balance = balance + ?, fence = ? WHERE id = ?")
//!     .bind(100_i64)
//!     .bind(fenced::fence_arg(fence)?)
//!     .bind(7_i64);
//! match fenced::execute(query, &mut *tx).await {
//!     Ok(_rows) => tx.commit().await.map_err(fenced::from_sqlx)?,
//!     Err(stale) => {
//!         tx.rollback().await.map_err(fenced::from_sqlx)?;
//!         return Err(stale);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Each row is its own resource. A statement that leaves the column as it is (an
//! unfenced write) is not refused: the trigger only keeps the fence from going down.

use async_trait::async_trait;
use distlock_core::backend::FenceCheck;
use distlock_core::{Error, ErrorKind, FencedStore, FencedValue, FencingToken, LockKey, Result};
use sqlx::mysql::{MySqlArguments, MySqlConnection};
use sqlx::{Connection as _, Executor as _, MySql, MySqlExecutor, Row as _};

use crate::backend::{on_conn, MySqlBackend};
use crate::error::number;

const NAME: &str = "mysql";

/// What the trigger's error message starts with.
const STALE_PREFIX: &str = "distlock: stale fence";

/// A table of yours whose rows are written under a fence: see the module's docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedTable {
    /// The table, unquoted (checked: no quoting needed).
    table: String,
    /// The fence's column, unquoted.
    column: String,
}

/// Checks a table or column name: ASCII letters, digits and `_`, not starting with a
/// digit, at most 64 bytes; names are written into statements, so nothing else is let
/// through.
fn check_name(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok && rest_ok && name.len() <= 64 {
        Ok(())
    } else {
        Err(distlock_core::backend::config_error(
            NAME,
            format!(
                "the {what} name {name:?} is not allowed: use 1 to 64 ASCII letters, digits or _, not starting with a digit"
            ),
        ))
    }
}

impl FencedTable {
    /// Your table `table` (in the connection's database), with its fence in the column
    /// `fence`. A [`ErrorKind::Configuration`] error for a name that is not a plain
    /// identifier.
    pub fn new(table: &str) -> Result<Self> {
        check_name("table", table)?;
        Ok(FencedTable {
            table: table.to_owned(),
            column: "fence".to_owned(),
        })
    }

    /// Keeps the fence in `column` rather than `fence`.
    pub fn with_column(mut self, column: &str) -> Result<Self> {
        check_name("column", column)?;
        self.column = column.to_owned();
        Ok(self)
    }

    /// The trigger's name: one per table and column.
    fn trigger(&self) -> String {
        let name = format!("distlock_fence_{}_{}", self.table, self.column);
        // MySQL's names are at most 64 bytes; a longer one is cut and made unique
        // again by a hash of the whole.
        if name.len() <= 64 {
            return name;
        }
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{}_{hash:016x}", &name[..47])
    }

    /// The statements that add the fence column (`BIGINT NOT NULL DEFAULT 0`, so
    /// existing rows accept any fence) and the trigger that refuses to lower it, for a
    /// migration tool of your own. MySQL has no `ADD COLUMN IF NOT EXISTS`: run the
    /// first only where the column is missing ([`migrate`](Self::migrate) checks).
    pub fn migration(&self) -> Vec<String> {
        let (t, c, trigger) = (&self.table, &self.column, self.trigger());
        vec![
            format!("ALTER TABLE `{t}` ADD COLUMN `{c}` BIGINT NOT NULL DEFAULT 0"),
            format!("DROP TRIGGER IF EXISTS `{trigger}`"),
            format!(
                "CREATE TRIGGER `{trigger}` BEFORE UPDATE ON `{t}` FOR EACH ROW \
                 BEGIN \
                   DECLARE refusal VARCHAR(128); \
                   IF NEW.`{c}` < OLD.`{c}` THEN \
                     SET refusal = CONCAT('{STALE_PREFIX}: ', NEW.`{c}`, ' is below ', OLD.`{c}`); \
                     SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = refusal; \
                   END IF; \
                 END"
            ),
        ]
    }

    /// Adds the column where it is missing, and (re)creates the trigger: idempotent.
    /// Needs the `ALTER` and `TRIGGER` privileges on the table.
    pub async fn migrate(&self, conn: &mut MySqlConnection) -> Result<()> {
        let present: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ? AND column_name = ?",
        )
        .bind(&self.table)
        .bind(&self.column)
        .fetch_one(&mut *conn)
        .await
        .map_err(from_sqlx)?;
        let migration = self.migration();
        let skip = usize::from(present > 0);
        for statement in &migration[skip..] {
            conn.execute(statement.as_str()).await.map_err(from_sqlx)?;
        }
        Ok(())
    }
}

pub use distlock_sql::fence_arg;

/// Runs a fenced statement on `executor` (a pool, a connection, or `&mut *tx` for your
/// transaction) and returns the number of rows it matched; an
/// [`ErrorKind::StaleFence`] error when a row had seen a higher fence (the statement
/// is undone; the transaction is yours to roll back).
pub async fn execute<'e, 'q, E>(
    query: sqlx::query::Query<'q, MySql, MySqlArguments>,
    executor: E,
) -> Result<u64>
where
    E: MySqlExecutor<'e>,
{
    let done = distlock_sql::execute(query, executor, from_sqlx).await?;
    Ok(done.rows_affected())
}

/// Maps a sqlx error from a fenced statement (or anything around it) to distlock's:
/// the trigger's refusal is [`ErrorKind::StaleFence`], naming the row's fence; the
/// rest as the backend maps them. The error keeps the driver's message, never a
/// connection string.
pub fn from_sqlx(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e {
        if let Some(rest) = db.message().strip_prefix(STALE_PREFIX) {
            return Error::new(
                ErrorKind::StaleFence,
                format!("a row's fence is higher than the statement's{rest}"),
            )
            .with_backend(NAME);
        }
    }
    let kind = crate::error::kind_of(&e);
    distlock_core::backend::driver_error(kind, NAME, e.to_string())
}

/// A fenced store on the backend's database: one row per resource in
/// `<table>_fenced` (`name`, `fence`, `value`), created by [`MySqlStore::new`].
///
/// - A write is one statement, one round trip: `INSERT … ON DUPLICATE KEY UPDATE`
///   that stores the value and the fence only where the fence offered is not below the
///   stored one. The statement reports the stored fence it compared with in its OK
///   packet (`LAST_INSERT_ID(fence)`), so a refusal names the current fence without a
///   second read.
/// - A claiming read is one short transaction: the same upsert of the fence, then the
///   value read under the row lock the upsert holds until commit, so no write comes
///   between the claim and the read. A deadlock the server broke (two first claims of
///   one resource) is retried.
#[derive(Debug, Clone)]
pub struct MySqlStore {
    backend: MySqlBackend,
    put: String,
    claim: String,
    read: String,
}

/// How often a claim that the server rolled back as a deadlock is tried.
const CLAIM_TRIES: usize = 5;

impl MySqlStore {
    /// The store beside `backend`'s lock table, on its pool; creates its table if it
    /// is missing.
    pub async fn new(backend: &MySqlBackend) -> Result<Self> {
        let s = format!("`{}_fenced`", backend.config().table());
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {s} (\
               name VARBINARY(256) NOT NULL, \
               fence BIGINT NOT NULL, \
               value LONGBLOB NULL, \
               PRIMARY KEY (name)) ENGINE=InnoDB"
        );
        let done = backend
            .bounded(on_conn!(backend, conn => conn.execute(create.as_str())))
            .await?;
        done.map_err(|e| backend.driver_error(e))?;
        // `value` first, from the stored fence; then the fence, whose old value goes
        // to the OK packet (0 when the row is new: no LAST_INSERT_ID call).
        let upsert = |value: &str| {
            format!(
                "INSERT INTO {s} (name, fence, value) VALUES (?, ?, {value}) \
                 ON DUPLICATE KEY UPDATE \
                   {} \
                   fence = IF(VALUES(fence) >= LAST_INSERT_ID({s}.fence), VALUES(fence), {s}.fence)",
                if value == "NULL" {
                    String::new()
                } else {
                    format!("value = IF(VALUES(fence) >= {s}.fence, VALUES(value), {s}.value),")
                }
            )
        };
        Ok(MySqlStore {
            backend: backend.clone(),
            put: upsert("?"),
            claim: upsert("NULL"),
            read: format!("SELECT fence, value FROM {s} WHERE name = ?"),
        })
    }

    /// Whether the step under `offered` was accepted, given the fence the statement
    /// compared with (0 for a new row).
    fn check(offered: i64, compared: u64) -> FenceCheck<()> {
        if u64::try_from(offered).unwrap_or(0) >= compared {
            FenceCheck::Accepted(())
        } else {
            FenceCheck::Stale {
                current: FencingToken::new(compared),
            }
        }
    }

    async fn claim_once(
        &self,
        conn: &mut MySqlConnection,
        name: &[u8],
        fence: i64,
    ) -> std::result::Result<FenceCheck<Option<Vec<u8>>>, sqlx::Error> {
        let mut tx = conn.begin().await?;
        let done = tx
            .execute(sqlx::query(&self.claim).bind(name).bind(fence))
            .await?;
        let check = Self::check(fence, done.last_insert_id());
        if let FenceCheck::Stale { current } = check {
            tx.rollback().await?;
            return Ok(FenceCheck::Stale { current });
        }
        let row = tx
            .fetch_optional(sqlx::query(&self.read).bind(name))
            .await?;
        let value = match row {
            Some(row) => row.try_get::<Option<Vec<u8>>, _>(1)?,
            None => None,
        };
        tx.commit().await?;
        Ok(FenceCheck::Accepted(value))
    }
}

#[async_trait]
impl FencedStore for MySqlStore {
    fn name(&self) -> &str {
        NAME
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        let offered = fence_arg(fence)?;
        let query = sqlx::query(&self.put)
            .bind(resource.as_str().as_bytes())
            .bind(offered)
            .bind(value);
        let done = self
            .backend
            .bounded(on_conn!(self.backend, conn => query.execute(conn)))
            .await?
            .map_err(|e| self.backend.driver_error(e))?;
        Ok(Self::check(offered, done.last_insert_id()))
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        let offered = fence_arg(fence)?;
        let name = resource.as_str().as_bytes();
        let mut tries = 0;
        loop {
            tries += 1;
            let claim =
                on_conn!(self.backend, transaction conn => self.claim_once(conn, name, offered));
            match self.backend.bounded(claim).await? {
                Err(e) if number(&e) == Some(1213) && tries < CLAIM_TRIES => continue,
                result => return result.map_err(|e| self.backend.driver_error(e)),
            }
        }
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        let query = sqlx::query(&self.read).bind(resource.as_str().as_bytes());
        let row = self
            .backend
            .bounded(on_conn!(self.backend, conn => query.fetch_optional(conn)))
            .await?
            .map_err(|e| self.backend.driver_error(e))?;
        let Some(row) = row else { return Ok(None) };
        let decoded = (|| {
            Ok::<_, sqlx::Error>((
                row.try_get::<i64, _>(0)?,
                row.try_get::<Option<Vec<u8>>, _>(1)?,
            ))
        })();
        let (raw, value) = decoded.map_err(|e| self.backend.driver_error(e))?;
        Ok(Some(FencedValue::new(crate::backend::fence(raw)?, value)))
    }
}
