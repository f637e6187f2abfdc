//! [`PostgresBackend`]: the contract on a PostgreSQL lock table, one statement per
//! operation.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FairBackend, FenceDurability, Grant,
    HandoffBook, Handoffs, HolderRecords, OperatorBackend, OwnerToken, ReleaseOutcome, Renewal,
    SetBackend, SetGrant, WakeRegistry,
};
use distlock_core::{Error, FencingToken, LockBackend, LockInfo, LockKey, Result};
use distlock_sql::{stored_holder, timed_out, Checkout, Pool, Setting};
use sqlx::postgres::{PgListener, PgPool, PgRow};
use sqlx::Postgres;
use sqlx::{Connection as _, Row as _};
use tracing::debug;

use crate::config::{PostgresConfig, SynchronousCommit};
use crate::error::{from_sqlx, is_contention};
use crate::sql::{inline, set_refused_at, Arg, Statements};

const NAME: &str = "postgres";

/// [`distlock_sql::on_conn!`] on `$backend`'s pool and settings.
macro_rules! on_conn {
    ($backend:expr, $conn:ident => $body:expr) => {
        distlock_sql::on_conn!($backend.inner.pool, &$backend.inner.config, $conn => $body)
    };
}

/// A lock backend on a PostgreSQL table.
///
/// Every operation is one statement in autocommit mode, so one round trip, and needs
/// no session state: the backend stays correct behind PgBouncer in transaction pooling
/// mode (where `notify=false` turns waiting into polling). Clones share the pool.
#[derive(Clone)]
pub struct PostgresBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: PostgresConfig,
    capabilities: Capabilities,
    pool: Pool<Postgres>,
    sql: Statements,
    /// In PgBouncer mode, what goes before each statement in its batch: the session
    /// settings, for this transaction only.
    batch_prefix: Option<String>,
    watcher: tokio::sync::Mutex<Option<Listener>>,
    /// This process's fair waiters, and the grants releases handed them.
    handoffs: Arc<HandoffBook>,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// Connects with the settings of a `postgres://` or `postgresql://` URL (see
    /// [`PostgresConfig`]) and creates the lock table if it is missing (unless
    /// `migrate=false`). Wrong credentials fail here, at once, with
    /// [`ErrorKind::Authentication`](distlock_core::ErrorKind::Authentication).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(PostgresConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed, after [checking](PostgresConfig::check)
    /// it, on a pool of the backend's own (`pool_size` connections).
    pub async fn connect_with(config: PostgresConfig) -> Result<Self> {
        config.check()?;
        let pool = Pool::new(
            config.connect_options(),
            config.common.pool_size,
            config.common.acquire_timeout,
            None,
        );
        let batched = config.pgbouncer;
        Self::start(config, pool, batched, 1).await
    }

    /// A backend on the service's own sqlx `pool`: no pool of its own. From `config`
    /// only the lock settings are read (schema, table, time-outs, `notify`,
    /// `migrate`, purge, commit durability); the connection settings are the pool's.
    ///
    /// What it does with the pool: each operation takes one connection for one
    /// round trip, waiting at most the acquire timeout, and gives it back, or closes
    /// it when a statement ended in an unknown state (cancelled, or cut off). It never
    /// changes a session's settings: each statement goes in one simple-protocol batch
    /// that sets its statement timeout (and commit durability) with `SET LOCAL`, for
    /// its own transaction only, as in the PgBouncer mode; so it prepares nothing.
    /// What it needs besides the pool: with notifications on, one connection of its
    /// own for `LISTEN`, opened with the pool's connect options on the first wait
    /// (`notify=false` makes waiters poll instead). The migration (unless turned off)
    /// runs on a pooled connection, as the operations do.
    ///
    /// A pool that tests each connection before handing it out (sqlx's default,
    /// `test_before_acquire`) adds a round trip to every operation: the capabilities
    /// then declare two ([`Capabilities::round_trips`]); with
    /// `PgPoolOptions::test_before_acquire(false)` each operation is one.
    pub async fn from_pool(pool: PgPool, config: PostgresConfig) -> Result<Self> {
        config.check()?;
        let pinged = pool.options().get_test_before_acquire();
        let pool = Pool::shared(pool, config.common.acquire_timeout);
        Self::start(config, pool, true, if pinged { 2 } else { 1 }).await
    }

    /// The backend on `pool`, its statements batched (`batched`) or prepared, each
    /// operation `trips` round trips; then the migration (or the check that the
    /// tables are there), and the purge.
    async fn start(
        config: PostgresConfig,
        pool: Pool<Postgres>,
        batched: bool,
        trips: u32,
    ) -> Result<Self> {
        let mut capabilities = Capabilities::default();
        capabilities.round_trips = distlock_core::backend::RoundTrips::new(trips, trips, trips);
        capabilities.min_ttl = Duration::from_millis(10);
        capabilities.fence_durability = if config.durable_commits() {
            FenceDurability::Durable
        } else {
            FenceDurability::BestEffort
        };
        capabilities.leases_survive_restart = config.durable_commits() && !config.unlogged;
        capabilities.change_notification = config.notify();
        capabilities.holder_records = HolderRecords::ServerClock;
        // The server ends each statement at its statement_timeout, the response
        // timeout. Behind PgBouncer a batch may first wait in the pooler's queue for as
        // long as its query_wait_timeout, which the backend cannot see.
        capabilities.applied_within = (!config.pgbouncer).then_some(config.common.response_timeout);
        let sql = Statements::new(&config.schema, &config.common.table, config.unlogged);
        let batch_prefix = batched.then(|| {
            config
                .session_settings()
                .into_iter()
                .map(|(name, value)| format!("SET LOCAL {name} = '{value}'; "))
                .collect::<String>()
        });
        let mut backend = PostgresBackend {
            inner: Arc::new(Inner {
                config,
                capabilities,
                pool,
                sql,
                batch_prefix,
                watcher: tokio::sync::Mutex::new(None),
                handoffs: Arc::new(HandoffBook::new()),
            }),
        };
        // Connects (so that wrong credentials fail here) and creates the tables, or
        // checks that a DBA did.
        if backend.inner.config.common.migrate {
            backend.migrate().await?;
        } else {
            backend.check_tables().await?;
        }
        if backend.inner.config.synchronous_commit == SynchronousCommit::Server {
            backend.declare_the_servers_commits().await?;
        }
        if let Some(every) = backend.inner.config.common.purge_every {
            tokio::spawn(purge_on_its_own(Arc::downgrade(&backend.inner), every));
        }
        Ok(backend)
    }

    /// Reads the `synchronous_commit` the server gives this backend's sessions, and
    /// declares fences durable (and leases surviving a crash) only where it is not
    /// `off`: a commit answered before its flush may be lost in a crash, and the
    /// sequence handed out again.
    async fn declare_the_servers_commits(&mut self) -> Result<()> {
        let rows = self.statement("SHOW synchronous_commit", &[]).await?;
        let setting = rows
            .first()
            .and_then(|row| row.try_get::<String, _>(0).ok())
            .unwrap_or_default();
        if setting == "off" {
            if let Some(inner) = Arc::get_mut(&mut self.inner) {
                inner.capabilities.fence_durability = FenceDurability::BestEffort;
                inner.capabilities.leases_survive_restart = false;
            }
        }
        Ok(())
    }

    /// The statements [`migrate`](Self::migrate) runs for `config`'s lock table, in
    /// order, for a DBA or a migration tool to run in one transaction (then connect
    /// with `migrate=false`). `distlock migrate --print` prints them.
    pub fn migration_sql(config: &PostgresConfig) -> Vec<String> {
        Statements::new(&config.schema, &config.common.table, config.unlogged).migrate
    }

    /// Checks that the migration's tables, sequence and function are there: a
    /// [`Configuration`](distlock_core::ErrorKind::Configuration) error names those
    /// missing.
    async fn check_tables(&self) -> Result<()> {
        let sql = &self.inner.sql;
        let literal = |names: &[String]| {
            names
                .iter()
                .map(|n| format!("('{n}')"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let statement = format!(
            "SELECT n FROM (VALUES {}) AS r(n) WHERE to_regclass(n) IS NULL \
             UNION ALL SELECT n FROM (VALUES {}) AS f(n) WHERE to_regproc(n) IS NULL",
            literal(&sql.relations),
            literal(&sql.functions)
        );
        let rows = self.statement(&statement, &[]).await?;
        let missing: Vec<String> = rows
            .iter()
            .filter_map(|row| row.try_get::<String, _>(0).ok())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(distlock_core::backend::config_error(
            NAME,
            format!(
                "migrate=false, but the lock tables are not all there: {} missing on {}; \
                 run the statements of PostgresBackend::migration_sql (`distlock migrate --print`), \
                 or connect once with migrate=true",
                missing.join(", "),
                self.inner.config.endpoint()
            ),
        ))
    }

    /// The settings in force.
    pub fn config(&self) -> &PostgresConfig {
        &self.inner.config
    }

    /// Creates the schema, the lock table and the fence sequence if they are missing.
    /// Idempotent, and safe to run from many processes at once. [`connect`](Self::connect)
    /// runs it unless the configuration turned it off (`migrate=false`).
    pub async fn migrate(&self) -> Result<()> {
        self.migrate_with(&self.inner.sql.migrate).await
    }

    /// Runs `statements` as [`migrate`](Self::migrate) runs its own: in one
    /// transaction (one batch behind PgBouncer).
    pub(crate) async fn migrate_with(&self, statements: &[String]) -> Result<()> {
        let result = self
            .bounded(on_conn!(self, conn => async {
                if let Some(prefix) = &self.inner.batch_prefix {
                    let batch = format!("{prefix}{}", statements.join("; "));
                    return sqlx::Executor::execute(&mut *conn, sqlx::raw_sql(&batch))
                        .await
                        .map(|_| ());
                }
                let mut tx = conn.begin().await?;
                for statement in statements {
                    sqlx::query(statement).execute(&mut *tx).await?;
                }
                tx.commit().await
            }))
            .await?;
        result.map_err(|e| from_sqlx(&self.inner.config, e))
    }

    /// One statement with `args`, within the response timeout: its rows, or the
    /// driver's error for the caller to classify.
    pub(crate) async fn statement_rows(
        &self,
        statement: &str,
        args: &[Arg<'_>],
    ) -> Result<Result<Vec<PgRow>, sqlx::Error>> {
        self.bounded(self.rows(statement, args)).await
    }

    /// A driver error as this backend reports it (credentials scrubbed).
    pub(crate) fn driver_error(&self, e: sqlx::Error) -> Error {
        from_sqlx(&self.inner.config, e)
    }

    /// Deletes rows whose lease ended more than `older_than` ago; returns how many.
    /// A released lease is marked ended, not deleted; the backend runs this on its own
    /// every `purge_every_ms` (30 s unless set; `purge=false` turns it off), with
    /// `older_than` at its floor, so a row stays at most about that long after its
    /// lease ended.
    ///
    /// `older_than` must be at least twice the response timeout (the server-side
    /// `statement_timeout`): a shorter one is an
    /// [`ErrorKind::InvalidInput`](distlock_core::ErrorKind::InvalidInput) error, since it
    /// could let a slow acquisition mint a fence below an earlier one.
    pub async fn purge_expired(&self, older_than: Duration) -> Result<u64> {
        let floor = self.purge_floor();
        if older_than < floor {
            return Err(Error::new(
                distlock_core::ErrorKind::InvalidInput,
                format!("purge_expired needs older_than of at least {floor:?} (twice the response timeout)"),
            )
            .with_backend(NAME));
        }
        let ms = older_than.as_secs_f64() * 1000.0;
        let rows = self
            .run(self.rows(&self.inner.sql.purge, &[Arg::Float(ms)]))
            .await?;
        let deleted: i64 = rows
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| from_sqlx(&self.inner.config, e))?
            .unwrap_or(0);
        Ok(u64::try_from(deleted).unwrap_or(0))
    }

    /// An acquire statement (`sql.acquire` or `sql.acquire_in_turn`) and its answer,
    /// with, for a fair step not granted, the fence sequence's value when it ran.
    async fn grant(&self, statement: &str, args: &[Arg<'_>]) -> Result<(Grant, Option<u64>)> {
        let reply = self
            .bounded(self.rows(statement, args))
            .await?
            .and_then(|rows| {
                rows.first()
                    .map(|row| {
                        let latest = if row.len() > 3 {
                            row.try_get::<Option<i64>, _>(3)?
                        } else {
                            None
                        };
                        Ok::<_, sqlx::Error>((
                            row.try_get::<bool, _>(0)?,
                            row.try_get::<Option<i64>, _>(1)?,
                            row.try_get::<Option<i64>, _>(2)?,
                            latest.and_then(|v| u64::try_from(v).ok()),
                        ))
                    })
                    .transpose()
            });
        let row = match reply {
            Err(e) if is_contention(&e) => {
                debug!(error = %e, "contention: not acquired");
                return Ok((Grant::Held { remaining: None }, None));
            }
            Err(e) => return Err(from_sqlx(&self.inner.config, e)),
            Ok(row) => row,
        };
        Ok(match row {
            Some((true, Some(raw_fence), _, _)) => (Grant::Granted(fence(raw_fence)?), None),
            Some((true, None, _, _)) => {
                return Err(Error::new(
                    distlock_core::ErrorKind::Backend,
                    "the acquire statement answered a grant without its fence",
                )
                .with_backend(NAME))
            }
            Some((false, _, remaining_ms, latest)) => (
                Grant::Held {
                    remaining: remaining(remaining_ms),
                },
                latest,
            ),
            // A concurrent grant the statement's snapshot could not see.
            None => (Grant::Held { remaining: None }, None),
        })
    }

    /// The statements of this table.
    pub(crate) fn sql(&self) -> &Statements {
        &self.inner.sql
    }

    /// One statement with `args`, within the response timeout: its rows.
    pub(crate) async fn statement(&self, statement: &str, args: &[Arg<'_>]) -> Result<Vec<PgRow>> {
        self.run(self.rows(statement, args)).await
    }

    /// Listens for the notifications whose payload is `payload`, where notifications
    /// are on; `None` means "poll".
    pub(crate) async fn listen(&self, payload: &str) -> Result<Option<ChangeStream>> {
        self.listen_as(payload, None).await
    }

    /// [`listen`](Self::listen), for a fair waiter when `owner` is given: woken by a
    /// release that names it as the head of the queue, not by one that names another.
    async fn listen_as(
        &self,
        payload: &str,
        owner: Option<&OwnerToken>,
    ) -> Result<Option<ChangeStream>> {
        if !self.inner.config.notify() {
            return Ok(None);
        }
        let mut slot = self.inner.watcher.lock().await;
        if slot.as_ref().is_none_or(|l| !l.waiters.is_open()) {
            let cfg = &self.inner.config;
            let listen = async {
                let pool = PgPool::connect_lazy_with(self.inner.pool.connect_options());
                let mut listener = PgListener::connect_with(&pool).await?;
                listener.listen(&self.inner.sql.channel).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            let listener = tokio::time::timeout(cfg.common.response_timeout, listen)
                .await
                .map_err(|_| timed_out(cfg, Setting::Response))?
                .map_err(|e| from_sqlx(cfg, e))?;
            *slot = Some(Listener::start(listener, self.inner.handoffs.clone()));
        }
        let Some(listener) = slot.as_ref() else {
            return Ok(None);
        };
        let registration = match owner {
            Some(owner) => listener.waiters.register_tagged(payload, &owner.to_hex()),
            None => listener.waiters.register(payload),
        };
        Ok(Some(registration.changes))
    }

    /// What wakes a waiter of `key`: a fair one (`owner`) only when a release names it
    /// as the head of the queue, a racing one at every release.
    async fn watch_as(
        &self,
        key: &LockKey,
        owner: Option<&OwnerToken>,
    ) -> Result<Option<ChangeStream>> {
        let Some(changes) = self.listen_as(key.as_str(), owner).await? else {
            return Ok(None);
        };
        // Releases notify only names marked as waited for; the mark comes after LISTEN
        // and before the caller's first attempt, so no release in between goes unheard.
        let args = [Arg::Text(key.as_str())];
        self.run(self.rows(&self.inner.sql.mark_waited, &args))
            .await?;
        Ok(Some(changes))
    }

    /// The shortest `older_than` [`purge_expired`](Self::purge_expired) takes.
    fn purge_floor(&self) -> Duration {
        self.inner.config.common.response_timeout * 2
    }

    /// A pooled connection (see [`Pool::checkout`]).
    async fn checkout(&self) -> Result<Checkout<'_, Postgres>> {
        self.inner.pool.checkout(&self.inner.config).await
    }

    /// Runs one statement with `args` on a pooled connection and returns its rows:
    /// bound to a prepared statement, or in PgBouncer mode written into one
    /// simple-protocol batch after the session settings (one round trip either way).
    async fn rows(
        &self,
        statement: &str,
        args: &[Arg<'_>],
    ) -> Result<Result<Vec<PgRow>, sqlx::Error>> {
        let mut checkout = self.checkout().await?;
        let conn = checkout.conn();
        let result = match &self.inner.batch_prefix {
            Some(prefix) => {
                let batch = format!("{prefix}{}", inline(statement, args));
                sqlx::Executor::fetch_all(conn, sqlx::raw_sql(&batch)).await
            }
            None => {
                let mut query = sqlx::query(statement);
                for arg in args {
                    query = match *arg {
                        Arg::Text(text) => query.bind(text),
                        Arg::Bytes(bytes) => query.bind(bytes),
                        Arg::Float(value) => query.bind(value),
                        Arg::Int(value) => query.bind(value),
                        Arg::Bool(value) => query.bind(value),
                    };
                }
                sqlx::Executor::fetch_all(conn, query).await
            }
        };
        checkout.settle(&result);
        Ok(result)
    }

    /// Runs `op` within the response timeout (see [`distlock_sql::bounded`]).
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<Result<T, sqlx::Error>>>,
    ) -> Result<Result<T, sqlx::Error>> {
        distlock_sql::bounded(&self.inner.config, op).await
    }

    /// One statement on a pooled connection, within the response timeout.
    async fn run<T>(&self, op: impl Future<Output = Result<Result<T, sqlx::Error>>>) -> Result<T> {
        distlock_sql::run(&self.inner.config, op).await
    }
}

pub(crate) fn ttl_ms(ttl: Duration) -> f64 {
    ttl.as_secs_f64() * 1000.0
}

/// The fence a statement answered; a value no fence can be is a backend error.
pub(crate) fn fence(raw: i64) -> Result<FencingToken> {
    FencingToken::from_server(raw).map_err(|e| e.with_backend(NAME))
}

fn remaining(raw_ms: Option<i64>) -> Option<Duration> {
    raw_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis)
}

/// Deletes ended rows every `every`, for as long as the backend lives: the purge that
/// keeps the table bounded. A failure is logged and tried again next time.
async fn purge_on_its_own(backend: std::sync::Weak<Inner>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(inner) = backend.upgrade() else {
            return;
        };
        let backend = PostgresBackend { inner };
        match backend.purge_expired(backend.purge_floor()).await {
            Ok(deleted) => tracing::debug!(deleted, "purged the rows of ended leases"),
            Err(e) => tracing::debug!(error = %e, "purging the rows of ended leases failed"),
        }
    }
}

#[async_trait]
impl LockBackend for PostgresBackend {
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
            Arg::Text(request.key().as_str()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
            Arg::Float(ttl_ms(request.ttl())),
            Arg::Text(request.holder().encoded()),
        ];
        self.grant(&self.inner.sql.acquire, &args)
            .await
            .map(|(grant, _)| grant)
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let args = [Arg::Text(key.as_str()), Arg::Bytes(&owner.as_bytes()[..])];
        let rows = self.run(self.rows(&self.inner.sql.release, &args)).await?;
        Ok(if rows.is_empty() {
            ReleaseOutcome::NotHeld
        } else {
            ReleaseOutcome::Released
        })
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let args = [
            Arg::Text(request.key().as_str()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
            Arg::Float(ttl_ms(request.ttl())),
        ];
        let rows = self.run(self.rows(&self.inner.sql.extend, &args)).await?;
        Ok(if rows.is_empty() {
            Renewal::NotHeld
        } else {
            Renewal::Renewed
        })
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let args = [Arg::Text(key.as_str())];
        let rows = self.run(self.rows(&self.inner.sql.inspect, &args)).await?;
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
        let (raw, ms, holder, granted) = decoded.map_err(|e| from_sqlx(&self.inner.config, e))?;
        let (holder, granted_at) = stored_holder(holder, granted);
        Ok(Some(
            LockInfo::new(fence(raw)?, remaining(ms).unwrap_or_default())
                .held_by(holder, granted_at),
        ))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.watch_as(key, None).await
    }

    fn permits(&self) -> Option<&dyn distlock_core::backend::PermitBackend> {
        Some(self)
    }
}

impl PostgresBackend {
    /// The fair step (contract point 10): a grant whose request carries a place.
    async fn grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
        let args = [
            Arg::Text(request.key().as_str()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
            Arg::Float(ttl_ms(request.ttl())),
            Arg::Float(ttl_ms(place)),
            Arg::Text(request.holder().encoded()),
        ];
        let (key, owner) = (request.key().as_str(), *request.owner());
        let sent_at = tokio::time::Instant::now();
        let (grant, latest) = self.grant(&self.inner.sql.acquire_in_turn, &args).await?;
        match (&grant, latest) {
            (Grant::Held { .. }, Some(latest)) => {
                self.inner.handoffs.turned_down(key, owner, sent_at, latest);
            }
            (Grant::Held { .. }, None) => {}
            // Granted by its own step: the wait is over.
            (Grant::Granted(_), _) => self.inner.handoffs.forget(key, owner),
            _ => {}
        }
        Ok(grant)
    }
}

#[async_trait]
impl FairBackend for PostgresBackend {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        self.inner.handoffs.forget(key.as_str(), *owner);
        let args = [Arg::Text(key.as_str()), Arg::Bytes(&owner.as_bytes()[..])];
        self.run(self.rows(&self.inner.sql.leave_queue, &args))
            .await
            .map(drop)
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        // A release grants the key to the head of the queue and names it
        // (`hand_over`): only it is woken, and told of the grant it was handed.
        self.inner.handoffs.expect(key.as_str(), *owner);
        self.watch_as(key, Some(owner)).await
    }

    fn handoffs(&self) -> Option<&dyn Handoffs> {
        // Releases hand the key to the head of its queue whatever the settings; the
        // waiter hears of it without a request only through a notification.
        let book: &dyn Handoffs = &*self.inner.handoffs;
        self.inner.config.notify().then_some(book)
    }
}

#[async_trait]
impl SetBackend for PostgresBackend {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let ttls: Vec<f64> = requests.iter().map(|r| ttl_ms(r.ttl())).collect();
        let mut args = Vec::with_capacity(3 * requests.len());
        for (request, ms) in requests.iter().zip(&ttls) {
            args.push(Arg::Text(request.key().as_str()));
            args.push(Arg::Bytes(&request.owner().as_bytes()[..]));
            args.push(Arg::Float(*ms));
        }
        // Core asks for a set with one holder.
        if let Some(first) = requests.first() {
            args.push(Arg::Text(first.holder().encoded()));
        }
        let statement = self.inner.sql.acquire_all(requests.len());
        let reply = self
            .bounded(self.rows(&statement, &args))
            .await?
            .and_then(|rows| {
                rows.iter()
                    .map(|row| {
                        Ok::<_, sqlx::Error>((
                            row.try_get::<i32, _>(0)?,
                            row.try_get::<Option<i64>, _>(1)?,
                            row.try_get::<Option<i64>, _>(2)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, _>>()
            });
        let rows = match reply {
            Err(sqlx::Error::Database(db)) if set_refused_at(db.message()).is_some() => {
                // Granted in part, and undone by the statement itself.
                let index = set_refused_at(db.message()).unwrap_or(0);
                return Ok(SetGrant::Held {
                    index,
                    remaining: None,
                });
            }
            Err(e) if is_contention(&e) => {
                debug!(error = %e, "contention: the set was not acquired");
                return Ok(SetGrant::Held {
                    index: 0,
                    remaining: None,
                });
            }
            Err(e) => return Err(from_sqlx(&self.inner.config, e)),
            Ok(rows) => rows,
        };
        let position = |raw: i32| usize::try_from(raw).unwrap_or(0);
        match rows.first() {
            Some((index, None, remaining_ms)) => Ok(SetGrant::Held {
                index: position(*index),
                remaining: remaining(*remaining_ms),
            }),
            _ => rows
                .iter()
                .map(|(_, raw, _)| {
                    raw.map(fence).unwrap_or_else(|| {
                        Err(Error::new(
                            distlock_core::ErrorKind::Backend,
                            "the set's statement answered a grant without its fence",
                        )
                        .with_backend(NAME))
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(SetGrant::Granted),
        }
    }
}

#[async_trait]
impl OperatorBackend for PostgresBackend {
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let args = [Arg::Text(prefix)];
        let rows = self.run(self.rows(&self.inner.sql.list, &args)).await?;
        let mut held = Vec::with_capacity(rows.len());
        for row in &rows {
            let decoded = (|| {
                Ok::<_, sqlx::Error>((
                    row.try_get::<String, _>(0)?,
                    row.try_get::<i64, _>(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                    row.try_get(4)?,
                ))
            })();
            let (key, raw, ms, holder, granted) =
                decoded.map_err(|e| from_sqlx(&self.inner.config, e))?;
            // A row whose name is no lock key (written by hand, say) is not a lock.
            let Ok(key) = LockKey::new(key) else { continue };
            let (holder, granted_at) = stored_holder(holder, granted);
            let info = LockInfo::new(fence(raw)?, remaining(ms).unwrap_or_default())
                .held_by(holder, granted_at);
            held.push((key, info));
        }
        Ok(held)
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let args = [Arg::Text(key.as_str())];
        let rows = self
            .run(self.rows(&self.inner.sql.force_release, &args))
            .await?;
        Ok(!rows.is_empty())
    }
}

/// The LISTEN connection; a notification's payload is the released key, whose waiters
/// are kept in a [`WakeRegistry`], then, after a newline, the owner token of the fair
/// waiter at the head of its queue, if any: of the key's fair waiters only that one is
/// woken. `<owner>:<fence>` says the release handed it the key with that fence; the
/// grant goes into the [`HandoffBook`].
struct Listener {
    waiters: Arc<WakeRegistry>,
}

impl Listener {
    fn start(mut listener: PgListener, handoffs: Arc<HandoffBook>) -> Self {
        let waiters = Arc::new(WakeRegistry::new());
        let dispatch = waiters.clone();
        tokio::spawn(async move {
            // `try_recv` reports a lost connection as `None` instead of reconnecting in
            // silence: notifications sent meanwhile are lost, so waiters must poll.
            while let Ok(Some(note)) = listener.try_recv().await {
                match note.payload().split_once('\n') {
                    Some((key, head)) => {
                        let head = match head.split_once(':') {
                            Some((owner, fence)) => {
                                if let (Some(token), Ok(fence)) =
                                    (OwnerToken::from_hex(owner), fence.parse::<u64>())
                                {
                                    handoffs.hand_over(key, token, fence);
                                }
                                owner
                            }
                            None => head,
                        };
                        dispatch.wake_tagged(key, head);
                    }
                    None => dispatch.wake(note.payload()),
                }
            }
            dispatch.close_all();
        });
        Listener { waiters }
    }
}
