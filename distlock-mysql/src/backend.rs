//! [`MySqlBackend`]: the contract on a MySQL or MariaDB lock table, one statement per
//! operation.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ExtendRequest, FairBackend, FenceDurability, Grant,
    HolderRecords, OperatorBackend, OwnerToken, ReleaseOutcome, Renewal, RoundTrips, SetBackend,
    SetGrant,
};
use distlock_core::{Error, FencingToken, Holder, LockBackend, LockInfo, LockKey, Result};
use distlock_sql::{timed_out, Pool, Setting};
use sqlx::mysql::{MySqlConnection, MySqlPool, MySqlQueryResult, MySqlRow};
use sqlx::MySql;
use sqlx::{Connection as _, Executor as _, Row as _};
use tracing::debug;

use crate::config::MySqlConfig;
use crate::error::{from_sqlx, is_contention};
use crate::sql::{SetRequest, Statements, REFUSED};

const NAME: &str = "mysql";

/// [`distlock_sql::on_conn!`] on `$backend`'s pool and settings. A step that opens a
/// transaction (`transaction`) gives its connection back only when it finished: one
/// dropped while a statement was in flight (its deadline passed), or failed part way,
/// may leave the server inside a transaction holding row locks, and one the driver
/// does not know of where the drop came while a `BEGIN` was in flight. Given back, the
/// connection would run the next caller's statements inside it, uncommitted; closed,
/// the server rolls the transaction back.
macro_rules! on_conn {
    ($backend:expr, $($rest:tt)+) => {
        distlock_sql::on_conn!($backend.pool(), $backend.settings(), $($rest)+)
    };
}
pub(crate) use on_conn;

/// A lock backend on a MySQL or MariaDB (InnoDB) table.
///
/// Every operation is one statement in autocommit mode, so one round trip, and needs
/// no session state. Clones share the pool.
#[derive(Clone)]
pub struct MySqlBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: MySqlConfig,
    capabilities: Capabilities,
    pool: Pool<MySql>,
    sql: Statements,
}

impl fmt::Debug for MySqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// One argument of a statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

impl MySqlBackend {
    /// Connects with the settings of a `mysql://` or `mariadb://` URL (see
    /// [`MySqlConfig`]) and creates the lock tables if they are missing (unless
    /// `migrate=false`). Wrong credentials fail here, at once, with
    /// [`ErrorKind::Authentication`](distlock_core::ErrorKind::Authentication); so
    /// does a server that refuses the connection, with
    /// [`ErrorKind::Unavailable`](distlock_core::ErrorKind::Unavailable) and the
    /// driver's reason, and one that does not answer within `acquire_timeout_ms`.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(MySqlConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed, after [checking](MySqlConfig::check)
    /// it, on a pool of the backend's own (`pool_size` connections). Each connection
    /// sets `innodb_lock_wait_timeout` to the response timeout (rounded up to whole
    /// seconds), so that no statement waits on a row lock longer than the backend
    /// waits for it.
    pub async fn connect_with(config: MySqlConfig) -> Result<Self> {
        config.check()?;
        // One connection first, outside the pool, and closed again: sqlx's pool
        // retries a refused connection until the acquire time-out and then says only
        // that the time ran out, where this says why, at once.
        let first = tokio::time::timeout(
            config.common.acquire_timeout,
            MySqlConnection::connect_with(&config.connect),
        )
        .await
        .map_err(|_| timed_out(&config, Setting::Acquire))?
        .map_err(|e| distlock_sql::connect_error(&config, e))?;
        let _ = tokio::time::timeout(config.common.response_timeout, first.close()).await;
        let lock_wait = config.common.response_timeout.as_secs_f64().ceil().max(1.0) as u64;
        // Each connection of the pool runs this once, when it is made.
        let on_connect = format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}");
        let pool = Pool::new(
            config.connect.clone(),
            config.common.pool_size,
            config.common.acquire_timeout,
            Some(on_connect),
        );
        Self::start(config, pool, 1).await
    }

    /// A backend on the service's own sqlx `pool`: no pool of its own. From `config`
    /// only the lock settings are read (table, time-outs, `migrate`, purge); the
    /// connection settings are the pool's.
    ///
    /// What it does with the pool: each operation takes one connection for one
    /// statement (a fair step or a purge: for one short transaction), waiting at most
    /// the acquire timeout, and gives it back. It changes no session setting: the fair
    /// step and the purge set `READ COMMITTED` with `SET TRANSACTION`, which holds for
    /// the next transaction only, and begin that transaction at once. A set of keys
    /// (`lock_all`) is one batch of statements that sets `READ COMMITTED` the same way,
    /// runs its own short transaction and leaves the user variable `@distlock_set` on
    /// the session. A fair step, a purge or a set that does not finish (its deadline
    /// passed, or a statement failed) closes its connection instead of giving it back,
    /// since it may still be inside its transaction. A row-lock
    /// wait is bounded by the pool's own `innodb_lock_wait_timeout`; the backend gives
    /// up on a statement at its response timeout either way. A pool that tests each connection before handing it out
    /// (sqlx's default, `test_before_acquire`) adds a round trip to every operation:
    /// the capabilities then declare two; with
    /// `MySqlPoolOptions::test_before_acquire(false)` each operation is one.
    pub async fn from_pool(pool: MySqlPool, config: MySqlConfig) -> Result<Self> {
        config.check()?;
        let trips = if pool.options().get_test_before_acquire() {
            2
        } else {
            1
        };
        let pool = Pool::shared(pool, config.common.acquire_timeout);
        Self::start(config, pool, trips).await
    }

    async fn start(config: MySqlConfig, pool: Pool<MySql>, trips: u32) -> Result<Self> {
        let mut capabilities = Capabilities::default();
        capabilities.round_trips = RoundTrips::new(trips, trips, trips);
        capabilities.min_ttl = Duration::from_millis(10);
        capabilities.fence_durability = FenceDurability::Durable;
        capabilities.leases_survive_restart = true;
        capabilities.holder_records = HolderRecords::ServerClock;
        // MySQL has no notifications: waiters poll, with backoff.
        capabilities.change_notification = false;
        let sql = Statements::new(&config.common.table);
        let backend = MySqlBackend {
            inner: Arc::new(Inner {
                config,
                capabilities,
                pool,
                sql,
            }),
        };
        // Connects (so that wrong credentials fail here) and creates the tables, or
        // checks that a DBA did.
        if backend.inner.config.common.migrate {
            backend.migrate().await?;
        } else {
            backend.check_tables().await?;
        }
        if let Some(every) = backend.inner.config.common.purge_every {
            tokio::spawn(purge_on_its_own(Arc::downgrade(&backend.inner), every));
        }
        Ok(backend)
    }

    /// The statements [`migrate`](Self::migrate) runs for `config`'s lock table, in
    /// order, for a DBA or a migration tool to run (then connect with
    /// `migrate=false`). `distlock migrate --print` prints them.
    pub fn migration_sql(config: &MySqlConfig) -> Vec<String> {
        Statements::new(&config.common.table).migrate
    }

    /// The settings in force.
    pub fn config(&self) -> &MySqlConfig {
        &self.inner.config
    }

    /// Creates the lock table and its fence floor if they are missing. Idempotent, and
    /// safe to run from many processes at once. [`connect`](Self::connect) runs it
    /// unless the configuration turned it off (`migrate=false`).
    pub async fn migrate(&self) -> Result<()> {
        for statement in &self.inner.sql.migrate {
            // Each as text, on one connection: a statement may be a batch (the one
            // that adds a column only where it is missing).
            let run =
                on_conn!(self, conn => sqlx::Executor::execute(conn, sqlx::raw_sql(statement)));
            match self.bounded(run).await? {
                Ok(_) => {}
                // Another process added the column between this one's check and its
                // change.
                Err(e) if crate::error::number(&e) == Some(1060) => {}
                Err(e) => return Err(self.driver_error(e)),
            }
        }
        Ok(())
    }

    /// Checks that the migration's tables, and the floor's one row, are there: a
    /// [`Configuration`](distlock_core::ErrorKind::Configuration) error says what to run.
    async fn check_tables(&self) -> Result<()> {
        let rows = match self.rows(&self.inner.sql.check, &[]).await? {
            Ok(rows) => rows,
            // The floor table is missing: the count cannot even be read.
            Err(e) if crate::error::number(&e) == Some(1146) => Vec::new(),
            Err(e) => return Err(self.driver_error(e)),
        };
        let counts = rows.first().and_then(|row| {
            Some((
                row.try_get::<i64, _>(0).ok()?,
                row.try_get::<i64, _>(1).ok()?,
                row.try_get::<i64, _>(2).ok()?,
            ))
        });
        if counts == Some((self.inner.sql.tables.len() as i64, 1, 1)) {
            return Ok(());
        }
        Err(distlock_core::backend::config_error(
            NAME,
            format!(
                "migrate=false, but the lock tables ({}, with the floor's row and the holder's columns) are not all there on {}; \
                 run the statements of MySqlBackend::migration_sql (`distlock migrate --print`), \
                 or connect once with migrate=true",
                self.inner.sql.tables.join(", "),
                self.inner.config.endpoint()
            ),
        ))
    }

    /// Deletes the rows of released leases and of leases that ran out more than
    /// `older_than` ago, and returns how many. A released lease's row is kept (it holds the name's fence); the
    /// backend runs this on its own every `purge_every_ms` (30 s unless set;
    /// `purge=false` turns it off) with `older_than` of `purge_after_ms` (a minute
    /// unless set).
    ///
    /// It is safe at any age: the floor of fences is raised over every deleted row in
    /// the same transaction, which no grant overlaps (see the crate's docs).
    pub async fn purge_expired(&self, older_than: Duration) -> Result<u64> {
        let us = micros(older_than);
        let config = &self.inner.config;
        let sql = &self.inner.sql;
        let work = on_conn!(self, transaction conn => async {
            // Read committed, for this transaction only: its reads of the lock table
            // lock nothing, and its delete keeps locks on the rows it deletes alone,
            // so a release or extend meanwhile waits for it (or it for them) but
            // never both (under repeatable read a scan's shared locks, upgraded to
            // delete, deadlocked with releases).
            conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                .await?;
            let mut tx = sqlx::Connection::begin(conn).await?;
            tx.execute(sqlx::query(&sql.lock_floor)).await?;
            tx.execute(sqlx::query(&sql.raise_floor).bind(us)).await?;
            let done = tx.execute(sqlx::query(&sql.purge).bind(us)).await?;
            tx.execute(sqlx::query(&sql.purge_places).bind(us)).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(done.rows_affected())
        });
        distlock_sql::run(config, work).await
    }

    /// A driver error as this backend reports it (credentials scrubbed).
    pub(crate) fn driver_error(&self, e: sqlx::Error) -> Error {
        from_sqlx(&self.inner.config, e)
    }

    /// The backend's settings, as the shared SQL code reads them.
    pub(crate) fn settings(&self) -> &MySqlConfig {
        &self.inner.config
    }

    /// The pool the backend runs its statements on.
    pub(crate) fn pool(&self) -> &Pool<MySql> {
        &self.inner.pool
    }

    /// Runs `op` within the response timeout (see [`distlock_sql::bounded`]).
    pub(crate) async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<std::result::Result<T, sqlx::Error>>>,
    ) -> Result<std::result::Result<T, sqlx::Error>> {
        distlock_sql::bounded(&self.inner.config, op).await
    }

    /// One statement with `args`: its rows, or the driver's error for the caller to
    /// classify.
    async fn rows(
        &self,
        statement: &str,
        args: &[Arg<'_>],
    ) -> Result<std::result::Result<Vec<MySqlRow>, sqlx::Error>> {
        self.bounded(on_conn!(self, conn => bind(statement, args).fetch_all(conn)))
            .await
    }

    /// One statement with `args` that returns no rows: its OK packet, or the driver's
    /// error for the caller to classify.
    async fn done(
        &self,
        statement: &str,
        args: &[Arg<'_>],
    ) -> Result<std::result::Result<MySqlQueryResult, sqlx::Error>> {
        self.bounded(on_conn!(self, conn => bind(statement, args).execute(conn)))
            .await
    }

    /// [`done`](Self::done), with the driver's error as this backend's.
    async fn execute(&self, statement: &str, args: &[Arg<'_>]) -> Result<MySqlQueryResult> {
        self.done(statement, args)
            .await?
            .map_err(|e| self.driver_error(e))
    }

    /// [`rows`](Self::rows), with the driver's error as this backend's.
    async fn fetch(&self, statement: &str, args: &[Arg<'_>]) -> Result<Vec<MySqlRow>> {
        self.rows(statement, args)
            .await?
            .map_err(|e| self.driver_error(e))
    }
}

impl MySqlBackend {
    /// The fair step (see `sql.rs`'s `FairSql`): one transaction at `READ COMMITTED`,
    /// under the key's row lock.
    async fn fair_step(
        &self,
        conn: &mut MySqlConnection,
        request: &AcquireRequest,
        place: Duration,
    ) -> std::result::Result<Grant, sqlx::Error> {
        let sql = &self.inner.sql;
        let name = request.key().as_str().as_bytes();
        let owner = &request.owner().as_bytes()[..];
        conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            .await?;
        let mut tx = sqlx::Connection::begin(conn).await?;
        tx.execute(sqlx::query(&sql.fair.lock_key).bind(name))
            .await?;
        let mine: i64 = sqlx::query_scalar(&sql.fair.mine)
            .bind(name)
            .bind(owner)
            .fetch_one(&mut *tx)
            .await?;
        tx.execute(sqlx::query(&sql.fair.drop_run_out).bind(name).bind(owner))
            .await?;
        tx.execute(
            sqlx::query(&sql.fair.queue)
                .bind(name)
                .bind(owner)
                .bind(micros(place)),
        )
        .await?;
        let head: Option<Vec<u8>> = sqlx::query_scalar(&sql.fair.head)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?;
        let first = mine > 0 || head.as_deref() == Some(owner);
        let grant = if first {
            let done = tx
                .execute(
                    sqlx::query(&sql.acquire)
                        .bind(name)
                        .bind(owner)
                        .bind(micros(request.ttl()))
                        .bind(request.holder().encoded().as_bytes()),
                )
                .await?;
            let grant = answer(done.last_insert_id());
            if matches!(grant, Grant::Granted(_)) {
                tx.execute(sqlx::query(&sql.fair.leave).bind(name).bind(owner))
                    .await?;
            }
            grant
        } else {
            let remaining: Option<i64> = sqlx::query_scalar(&sql.inspect_remaining)
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
            Grant::Held {
                remaining: remaining
                    .and_then(|us| u64::try_from(us).ok())
                    .map(Duration::from_micros),
            }
        };
        tx.commit().await?;
        Ok(grant)
    }
}

impl MySqlBackend {
    /// The set step's batch (see `sql.rs`) on a connection of the pool, and the rows
    /// it reads after its commit: each key's name, owner, fence and remaining TTL.
    ///
    /// The batch opens a transaction that the driver does not know of. A connection
    /// whose batch did not finish (cancelled, cut off, or failed part way, as a lock
    /// wait that ran out fails only its statement) may still be inside it, holding
    /// row locks, so it is closed, never handed out again: the server then rolls the
    /// transaction back.
    async fn set_step(
        conn: &mut MySqlConnection,
        batch: &str,
    ) -> std::result::Result<Vec<MySqlRow>, sqlx::Error> {
        sqlx::Executor::fetch_all(conn, sqlx::raw_sql(batch)).await
    }
}

/// The holder a row stores (its bytes) and its grant time in microseconds since the
/// Unix epoch.
fn holder_of(
    holder: Option<Vec<u8>>,
    granted_us: Option<i64>,
) -> (Option<Holder>, Option<std::time::SystemTime>) {
    let holder = holder.and_then(|bytes| String::from_utf8(bytes).ok());
    distlock_sql::stored_holder(holder, granted_us.map(|us| us.div_euclid(1000)))
}

/// The set step's answer from the rows it read after its commit: every key held by
/// its request's owner (a grant, with each key's fence), or the first that is not.
fn set_answer(requests: &[AcquireRequest], rows: &[MySqlRow]) -> Result<SetGrant> {
    let mut seen = Vec::with_capacity(rows.len());
    for row in rows {
        let decoded = (|| {
            Ok::<_, sqlx::Error>((
                row.try_get::<Vec<u8>, _>(0)?,
                row.try_get::<Vec<u8>, _>(1)?,
                row.try_get::<i64, _>(2)?,
                row.try_get::<Option<i64>, _>(3)?,
            ))
        })();
        seen.push(decoded.map_err(|e| {
            Error::new(
                distlock_core::ErrorKind::Backend,
                format!("the set's answer could not be read: {e}"),
            )
            .with_backend(NAME)
        })?);
    }
    // Each request's key as the server has it now: its owner, fence and remaining
    // TTL, when it has a live lease.
    let live: Vec<Option<(&[u8], i64, u64)>> = requests
        .iter()
        .map(|request| {
            seen.iter()
                .find(|(name, ..)| name.as_slice() == request.key().as_str().as_bytes())
                .and_then(|(_, owner, raw, us)| {
                    let us = u64::try_from(us.unwrap_or(0)).ok().filter(|us| *us > 0)?;
                    Some((owner.as_slice(), *raw, us))
                })
        })
        .collect();
    let mine = |n: usize| -> Option<i64> {
        live[n]
            .filter(|(owner, ..)| *owner == &requests[n].owner().as_bytes()[..])
            .map(|(_, raw, _)| raw)
    };
    if let Some(fences) = (0..requests.len()).map(mine).collect::<Option<Vec<_>>>() {
        return Ok(SetGrant::Granted(
            fences.into_iter().map(fence).collect::<Result<_>>()?,
        ));
    }
    // Not all held by this set: its own leases were ended before the commit. The
    // first key another lease holds, with that holder's remaining TTL; else (that
    // holder left meanwhile) the first key this set does not hold.
    let other = (0..requests.len()).find(|n| live[*n].is_some() && mine(*n).is_none());
    let index = other
        .or_else(|| (0..requests.len()).find(|n| mine(*n).is_none()))
        .unwrap_or(0);
    Ok(SetGrant::Held {
        index,
        remaining: other
            .and_then(|n| live[n])
            .map(|(_, _, us)| Duration::from_micros(us)),
    })
}

/// An acquire statement's answer, from the insert id of its OK packet (see `sql.rs`).
fn answer(raw: u64) -> Grant {
    match raw {
        // No row was written at all (no floor row).
        0 => Grant::Held { remaining: None },
        raw if raw >= REFUSED => Grant::Held {
            remaining: Some(Duration::from_micros(raw - REFUSED)),
        },
        raw => Grant::Granted(FencingToken::new(raw)),
    }
}

/// `statement` with `args` bound, in order.
fn bind<'q>(
    statement: &'q str,
    args: &[Arg<'q>],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let mut query = sqlx::query(statement);
    for arg in args {
        query = match *arg {
            Arg::Bytes(bytes) => query.bind(bytes),
            Arg::Int(value) => query.bind(value),
        };
    }
    query
}

/// `duration` in whole microseconds, as MySQL's `INTERVAL ... MICROSECOND` takes it.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The fence a row holds; a value no fence can be is a backend error.
pub(crate) fn fence(raw: i64) -> Result<FencingToken> {
    FencingToken::from_server(raw).map_err(|e| e.with_backend(NAME))
}

fn remaining(raw_us: Option<i64>) -> Duration {
    raw_us
        .and_then(|us| u64::try_from(us).ok())
        .map(Duration::from_micros)
        .unwrap_or_default()
}

/// Deletes the rows of ended leases every `every`, for as long as the backend lives.
/// A failure is logged and tried again next time.
async fn purge_on_its_own(backend: std::sync::Weak<Inner>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(inner) = backend.upgrade() else {
            return;
        };
        let backend = MySqlBackend { inner };
        let after = backend.inner.config.purge_after;
        match backend.purge_expired(after).await {
            Ok(deleted) => debug!(deleted, "purged the rows of ended leases"),
            Err(e) => debug!(error = %e, "purging the rows of ended leases failed"),
        }
    }
}

#[async_trait]
impl LockBackend for MySqlBackend {
    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        if let Some(place) = request.place() {
            return self.grant_in_turn(request, place).await;
        }
        let args = [
            Arg::Bytes(request.key().as_str().as_bytes()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
            Arg::Int(micros(request.ttl())),
            Arg::Bytes(request.holder().encoded().as_bytes()),
        ];
        match self.done(&self.inner.sql.acquire, &args).await? {
            Ok(done) => Ok(answer(done.last_insert_id())),
            Err(e) if is_contention(&e) => {
                debug!(error = %e, "contention: not acquired");
                Ok(Grant::Held { remaining: None })
            }
            Err(e) => Err(self.driver_error(e)),
        }
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let args = [
            Arg::Bytes(key.as_str().as_bytes()),
            Arg::Bytes(&owner.as_bytes()[..]),
        ];
        let done = self.execute(&self.inner.sql.release, &args).await?;
        Ok(if done.rows_affected() == 0 {
            ReleaseOutcome::NotHeld
        } else {
            ReleaseOutcome::Released
        })
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let args = [
            Arg::Int(micros(request.ttl())),
            Arg::Bytes(request.key().as_str().as_bytes()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
        ];
        let done = self.execute(&self.inner.sql.extend, &args).await?;
        Ok(if done.rows_affected() == 0 {
            Renewal::NotHeld
        } else {
            Renewal::Renewed
        })
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let args = [Arg::Bytes(key.as_str().as_bytes())];
        let rows = self.fetch(&self.inner.sql.inspect, &args).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let decoded = (|| {
            Ok::<_, sqlx::Error>((
                row.try_get::<i64, _>(0)?,
                row.try_get(1)?,
                row.try_get(2)?,
                row.try_get(3)?,
            ))
        })();
        let (raw, us, holder, granted) = decoded.map_err(|e| self.driver_error(e))?;
        let (holder, granted_at) = holder_of(holder, granted);
        Ok(Some(
            LockInfo::new(fence(raw)?, remaining(us)).held_by(holder, granted_at),
        ))
    }
}

impl MySqlBackend {
    /// The fair step (contract point 10): a grant whose request carries a place.
    async fn grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
        let step = on_conn!(self, transaction conn => self.fair_step(conn, request, place));
        match self.bounded(step).await? {
            Ok(grant) => Ok(grant),
            Err(e) if is_contention(&e) => {
                debug!(error = %e, "contention: not acquired in turn");
                Ok(Grant::Held { remaining: None })
            }
            Err(e) => Err(self.driver_error(e)),
        }
    }
}

#[async_trait]
impl FairBackend for MySqlBackend {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let args = [
            Arg::Bytes(key.as_str().as_bytes()),
            Arg::Bytes(&owner.as_bytes()[..]),
        ];
        self.execute(&self.inner.sql.fair.leave, &args)
            .await
            .map(drop)
    }
}

#[async_trait]
impl SetBackend for MySqlBackend {
    /// One batch of statements: a short transaction, then a read of its outcome.
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let batch = {
            let owners: Vec<_> = requests.iter().map(|r| r.owner().as_bytes()).collect();
            let set: Vec<SetRequest<'_>> = requests
                .iter()
                .zip(&owners)
                .map(|(r, owner)| (r.key().as_str().as_bytes(), &owner[..], micros(r.ttl())))
                .collect();
            // Core asks for a set with one holder.
            let holder = requests.first().map(|r| r.holder().encoded());
            self.inner
                .sql
                .acquire_all(&set, holder.unwrap_or_default().as_bytes())
        };
        let step = on_conn!(self, transaction conn => Self::set_step(conn, &batch));
        match self.bounded(step).await? {
            Ok(rows) => set_answer(requests, &rows),
            Err(e) if is_contention(&e) => {
                debug!(error = %e, "contention: the set was not acquired");
                Ok(SetGrant::Held {
                    index: 0,
                    remaining: None,
                })
            }
            Err(e) => Err(self.driver_error(e)),
        }
    }
}

#[async_trait]
impl OperatorBackend for MySqlBackend {
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let args = [Arg::Bytes(prefix.as_bytes()), Arg::Bytes(prefix.as_bytes())];
        let rows = self.fetch(&self.inner.sql.list, &args).await?;
        let mut held = Vec::with_capacity(rows.len());
        for row in &rows {
            let decoded = (|| {
                Ok::<_, sqlx::Error>((
                    row.try_get::<Vec<u8>, _>(0)?,
                    row.try_get::<i64, _>(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                ))
            })();
            let (name, raw, us, holder, granted) = decoded.map_err(|e| self.driver_error(e))?;
            // A row whose name is no lock key (written by hand, say) is not a lock.
            let Ok(key) = String::from_utf8(name)
                .map_err(drop)
                .and_then(|name| LockKey::new(name).map_err(drop))
            else {
                continue;
            };
            let (holder, granted_at) = holder_of(holder, granted);
            let info = LockInfo::new(fence(raw)?, remaining(us)).held_by(holder, granted_at);
            held.push((key, info));
        }
        Ok(held)
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let args = [Arg::Bytes(key.as_str().as_bytes())];
        let done = self.execute(&self.inner.sql.force_release, &args).await?;
        Ok(done.rows_affected() > 0)
    }
}
