//! Fenced statements on your own tables ([`FencedTable`]), and [`PostgresStore`], a
//! fenced store on a table of its own.
//!
//! # How a statement is fenced
//!
//! A fenced table has a `fence bigint` column (added by [`FencedTable::migrate`]). A
//! fenced statement sets it with
//!
//! ```sql
//! fence = CASE WHEN t.fence <= $1 THEN $1 ELSE distlock_stale_fence(t.fence, $1) END
//! ```
//!
//! beside the statement's own assignments. PostgreSQL evaluates it on each row it
//! writes, under the row's lock and, at `READ COMMITTED` (its default, and what the
//! tests run), on the row's latest version: a concurrent writer that committed first is
//! seen. So the compare and the write are one step, in the statement's one round
//! trip. (At `REPEATABLE READ` and `SERIALIZABLE`, PostgreSQL itself refuses to update
//! a row another transaction changed meanwhile, with a serialization failure; the
//! tests here do not run those levels.) Where the row has seen a
//! higher fence, `distlock_stale_fence` raises SQLSTATE `DLF01`: the whole statement
//! fails, however many rows it had written, and the transaction it ran in is aborted.
//! [`execute`] turns that into an [`ErrorKind::StaleFence`] error.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool, fence: distlock_core::FencingToken) -> distlock_core::Result<()> {
//! use distlock_postgres::fenced::{self, FencedTable};
//!
//! let accounts = FencedTable::new("accounts")?;
//! let mut conn = pool.acquire().await.map_err(fenced::from_sqlx)?;
//! accounts.migrate(&mut conn).await?; // once: the function and the column
//!
//! // Inside the caller's own transaction: the fence is always $1.
//! let sql = accounts.update("balance = balance + $2", "id = $3");
//! let mut tx = pool.begin().await.map_err(fenced::from_sqlx)?;
//! let query = sqlx::query(&sql).bind(fenced::fence_arg(fence)?).bind(100_i64).bind(7_i64);
//! let rows = fenced::execute(query, &mut *tx).await?; // StaleFence: tx is aborted
//! tx.commit().await.map_err(fenced::from_sqlx)?;
//! # let _ = rows; Ok(()) }
//! ```
//!
//! Each row is its own resource: a statement that writes several rows is refused if
//! any of them has seen a higher fence. An upsert is fenced the same way, with
//! [`FencedTable::assignment`] in its `ON CONFLICT … DO UPDATE SET` (a new row takes
//! the fence from its `VALUES`).

use async_trait::async_trait;
use distlock_core::backend::FenceCheck;
use distlock_core::{Error, ErrorKind, FencedStore, FencedValue, FencingToken, LockKey, Result};
use sqlx::postgres::{PgArguments, PgDatabaseError};
use sqlx::{Connection, PgConnection, PgExecutor, Postgres, Row};

use crate::backend::PostgresBackend;
use crate::config::check_identifier;
use crate::sql::Arg;

/// The SQLSTATE the check raises on a stale fence.
pub const STALE_FENCE_SQLSTATE: &str = "DLF01";

/// The SQLSTATE the table's trigger raises when any statement would lower a fence.
pub const LOWERED_FENCE_SQLSTATE: &str = "DLF02";

/// The name of the function that refuses a stale fence, created by
/// [`FencedTable::migrate`] in the table's schema.
pub const STALE_FENCE_FUNCTION: &str = "distlock_stale_fence";

/// The name of the trigger function that refuses to lower a fence, created beside it.
const LOWERED_FENCE_FUNCTION: &str = "distlock_fence_lowered";

const NAME: &str = "postgres";

/// A table of yours whose rows are written under a fence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedTable {
    /// `"schema"."table"`, or `"table"` (found on the search path).
    table: String,
    /// `"table"`, without its schema: how the statements name the row being written
    /// (an upsert's target included).
    name: String,
    /// `"column"`.
    column: String,
    /// The check function, in the table's schema.
    function: String,
    /// The trigger function, in the table's schema.
    trigger_function: String,
}

impl FencedTable {
    /// The table `table` (`name` or `schema.name`, each 1 to 63 lowercase letters,
    /// digits or `_`) with its fence in the column `fence`. A
    /// [`ErrorKind::Configuration`] error for any other name: names are written into
    /// statements, so nothing else is let through.
    pub fn new(table: &str) -> Result<Self> {
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) => (Some(schema), name),
            None => (None, table),
        };
        check_identifier("table", name)?;
        let (table, qualifier) = match schema {
            Some(schema) => {
                check_identifier("schema", schema)?;
                (format!("\"{schema}\".\"{name}\""), format!("\"{schema}\"."))
            }
            None => (format!("\"{name}\""), String::new()),
        };
        Ok(FencedTable {
            table,
            name: format!("\"{name}\""),
            column: "\"fence\"".to_owned(),
            function: format!("{qualifier}{STALE_FENCE_FUNCTION}"),
            trigger_function: format!("{qualifier}{LOWERED_FENCE_FUNCTION}"),
        })
    }

    /// Keeps the fence in `column` rather than `fence`.
    pub fn with_column(mut self, column: &str) -> Result<Self> {
        check_identifier("column", column)?;
        self.column = format!("\"{column}\"");
        Ok(self)
    }

    /// The statements [`migrate`](Self::migrate) runs, for a migration tool of your
    /// own: the check function (replaced if present), the fence column (added if
    /// missing, `bigint NOT NULL DEFAULT 0`, so existing rows accept any fence), and a
    /// trigger that refuses any statement, fenced or not, that would lower a row's
    /// fence (SQLSTATE `DLF02`).
    pub fn migration(&self) -> Vec<String> {
        let trigger = format!(
            "\"distlock_fence_never_lowers_{}\"",
            self.column.trim_matches('"')
        );
        vec![
            format!(
                "CREATE OR REPLACE FUNCTION {f}(current_fence bigint, offered bigint) \
                 RETURNS bigint LANGUAGE plpgsql VOLATILE AS $distlock$ \
                 BEGIN \
                   RAISE EXCEPTION 'stale fence: % is below %', offered, current_fence \
                     USING ERRCODE = '{STALE_FENCE_SQLSTATE}', DETAIL = current_fence::text; \
                 END $distlock$",
                f = self.function
            ),
            format!(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} bigint NOT NULL DEFAULT 0",
                self.table, self.column
            ),
            format!(
                "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $distlock$ \
                 BEGIN \
                   RAISE EXCEPTION 'a fence never goes down' USING ERRCODE = '{LOWERED_FENCE_SQLSTATE}'; \
                 END $distlock$",
                self.trigger_function
            ),
            format!("DROP TRIGGER IF EXISTS {trigger} ON {}", self.table),
            format!(
                "CREATE TRIGGER {trigger} BEFORE UPDATE OF {c} ON {t} FOR EACH ROW \
                 WHEN (NEW.{c} < OLD.{c}) EXECUTE FUNCTION {f}()",
                c = self.column,
                t = self.table,
                f = self.trigger_function
            ),
        ]
    }

    /// Runs [`migration`](Self::migration) in a transaction of its own, one process
    /// at a time (an advisory lock): idempotent, and safe to run at every start.
    pub async fn migrate(&self, conn: &mut PgConnection) -> Result<()> {
        let mut tx = conn.begin().await.map_err(from_sqlx)?;
        sqlx::query("SELECT pg_advisory_xact_lock(7346010365046529)")
            .execute(&mut *tx)
            .await
            .map_err(from_sqlx)?;
        for statement in self.migration() {
            sqlx::query(&statement)
                .execute(&mut *tx)
                .await
                .map_err(from_sqlx)?;
        }
        tx.commit().await.map_err(from_sqlx)
    }

    /// The assignment that compares and stores the fence, `$1`: put it in any
    /// statement's `SET` (an `UPDATE`, or an upsert's `ON CONFLICT … DO UPDATE SET`).
    pub fn assignment(&self) -> String {
        self.assignment_of(1)
    }

    fn assignment_of(&self, param: usize) -> String {
        let (c, f) = (&self.column, &self.function);
        // The row's current fence, qualified: in an upsert a bare name would be
        // ambiguous with the proposed row's.
        let old = format!("{}.{c}", self.name);
        format!("{c} = CASE WHEN {old} <= ${param}::bigint THEN ${param}::bigint ELSE {f}({old}, ${param}::bigint) END")
    }

    /// `UPDATE <table> SET <set>, <the fence assignment> WHERE <filter>`: bind the
    /// fence as `$1` ([`fence_arg`]) and your own parameters from `$2`. An empty `set`
    /// only claims the rows (raises their fence), as a fenced read before a
    /// read-modify-write. `set` and `filter` are SQL, written into the statement as
    /// they are: never build them from untrusted text.
    pub fn update(&self, set: &str, filter: &str) -> String {
        let assignment = self.assignment();
        let set = if set.trim().is_empty() {
            assignment
        } else {
            format!("{set}, {assignment}")
        };
        format!("UPDATE {} SET {set} WHERE {filter}", self.table)
    }
}

pub use distlock_sql::fence_arg;

/// Runs a fenced statement on `executor` (a pool, a connection, or `&mut *tx` for your
/// transaction) and returns the number of rows it wrote; an
/// [`ErrorKind::StaleFence`] error when a row had seen a higher fence (nothing is
/// written, and the transaction is aborted).
pub async fn execute<'e, 'q, E>(
    query: sqlx::query::Query<'q, Postgres, PgArguments>,
    executor: E,
) -> Result<u64>
where
    E: PgExecutor<'e>,
{
    let done = distlock_sql::execute(query, executor, from_sqlx).await?;
    Ok(done.rows_affected())
}

/// Maps a sqlx error from a fenced statement (or anything around it) to distlock's:
/// SQLSTATEs `DLF01` (a stale fence) and `DLF02` (a fence lowered) are
/// [`ErrorKind::StaleFence`], the rest as the backend maps them.
/// The error keeps the driver's message, never a connection string.
pub fn from_sqlx(e: sqlx::Error) -> Error {
    if let Some(current) = stale_fence(&e) {
        let seen = match current {
            Some(current) => format!("fence {current}"),
            None => "a higher fence".to_owned(),
        };
        return Error::new(
            ErrorKind::StaleFence,
            format!("a row has seen {seen}; the statement's fence is stale"),
        )
        .with_backend(NAME);
    }
    if crate::error::sqlstate(&e).as_deref() == Some(LOWERED_FENCE_SQLSTATE) {
        return Error::new(
            ErrorKind::StaleFence,
            "the statement would lower a row's fence; a fence never goes down",
        )
        .with_backend(NAME);
    }
    let kind = crate::error::kind_of(&e);
    distlock_core::backend::driver_error(kind, NAME, e.to_string())
}

/// For a `DLF01` error, the current fence its detail reports (`None` inside where the
/// detail is not one); `None` for any other error.
fn stale_fence(e: &sqlx::Error) -> Option<Option<FencingToken>> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    let pg = db.try_downcast_ref::<PgDatabaseError>()?;
    (pg.code() == STALE_FENCE_SQLSTATE).then(|| {
        pg.detail()
            .and_then(|d| d.parse::<i64>().ok())
            .and_then(|current| FencingToken::from_server(current).ok())
    })
}

/// A fenced store on a table of its own, `<schema>.distlock_fenced` (the backend's
/// schema): one row per resource, `resource text PRIMARY KEY`, `fence bigint`,
/// `value bytea`. Each step is one statement on the backend's pool, fenced as
/// [`FencedTable`]'s statements are, so the conformance suite checks the same check
/// your statements use. Works behind PgBouncer where the backend does.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    backend: PostgresBackend,
    put: String,
    claim: String,
    inspect: String,
}

impl PostgresStore {
    /// A store on `backend`'s server and pool; creates its table and the check
    /// function if they are missing.
    pub async fn new(backend: &PostgresBackend) -> Result<Self> {
        let schema = backend.config().schema();
        let table = FencedTable::new(&format!("{schema}.distlock_fenced"))?;
        let t = &table.table;
        let mut migration = vec![
            // One migrating process at a time: CREATE OR REPLACE FUNCTION is not safe
            // to run concurrently.
            "SELECT pg_advisory_xact_lock(7346010365046529)".to_owned(),
            format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""),
            format!(
                "CREATE TABLE IF NOT EXISTS {t} (resource text PRIMARY KEY, \
                 fence bigint NOT NULL, value bytea)"
            ),
        ];
        migration.extend(table.migration());
        backend.migrate_with(&migration).await?;
        let assign = table.assignment_of(2);
        Ok(PostgresStore {
            backend: backend.clone(),
            put: format!(
                "INSERT INTO {t} (resource, fence, value) VALUES ($1, $2::bigint, $3) \
                 ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value, {assign}"
            ),
            claim: format!(
                "INSERT INTO {t} (resource, fence) VALUES ($1, $2::bigint) \
                 ON CONFLICT (resource) DO UPDATE SET {assign} RETURNING value"
            ),
            inspect: format!("SELECT fence, value FROM {t} WHERE resource = $1"),
        })
    }

    async fn step(
        &self,
        statement: &str,
        resource: &LockKey,
        fence: FencingToken,
        value: Option<&[u8]>,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        let fence_i64 = fence_arg(fence)?;
        let mut args = vec![Arg::Text(resource.as_str()), Arg::Int(fence_i64)];
        args.extend(value.map(Arg::Bytes));
        match self.backend.statement_rows(statement, &args).await? {
            Ok(rows) => {
                let value = rows
                    .first()
                    .map(|row| row.try_get::<Option<Vec<u8>>, _>(0))
                    .transpose()
                    .map_err(from_sqlx)?
                    .flatten();
                Ok(FenceCheck::Accepted(value))
            }
            Err(e) => match stale_fence(&e) {
                Some(Some(current)) => Ok(FenceCheck::Stale { current }),
                // A refusal that does not say which fence refused it: no figure is
                // made up for it.
                Some(None) => Err(Error::new(
                    ErrorKind::Backend,
                    "the server refused a stale fence without reporting the row's fence",
                )
                .with_backend(NAME)),
                None => Err(self.backend.driver_error(e)),
            },
        }
    }
}

#[async_trait]
impl FencedStore for PostgresStore {
    fn name(&self) -> &str {
        NAME
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        Ok(self
            .step(&self.put, resource, fence, Some(value))
            .await?
            .map(drop))
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        self.step(&self.claim, resource, fence, None).await
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        let rows = self
            .backend
            .statement_rows(&self.inspect, &[Arg::Text(resource.as_str())])
            .await?
            .map_err(|e| self.backend.driver_error(e))?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let (fence, value): (i64, Option<Vec<u8>>) = (
            row.try_get(0).map_err(from_sqlx)?,
            row.try_get(1).map_err(from_sqlx)?,
        );
        Ok(Some(FencedValue::new(crate::backend::fence(fence)?, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_quoted() {
        let t = FencedTable::new("billing.accounts").expect("valid");
        assert_eq!(
            t.update("balance = $2", "id = $3"),
            "UPDATE \"billing\".\"accounts\" SET balance = $2, \"fence\" = CASE WHEN \"accounts\".\"fence\" \
             <= $1::bigint THEN $1::bigint ELSE \"billing\".distlock_stale_fence(\"accounts\".\"fence\", \
             $1::bigint) END WHERE id = $3"
        );
        for bad in ["", "Accounts", "a;drop table x", "a.b.c", "x\"y", "1abc"] {
            let err = FencedTable::new(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}");
        }
        let err = FencedTable::new("t")
            .and_then(|t| t.with_column("Fence"))
            .expect_err("column");
        assert_eq!(err.kind(), ErrorKind::Configuration);
    }

    #[test]
    fn an_empty_set_only_claims() {
        let t = FencedTable::new("jobs").expect("valid");
        assert!(t
            .update(" ", "id = $2")
            .starts_with("UPDATE \"jobs\" SET \"fence\" = CASE"));
    }
}
