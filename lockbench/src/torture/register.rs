//! The registers the torture run's holders read and write, never on the lock server
//! itself, so that a fault on the lock server does not touch them:
//!
//! - The **fenced** register is distlock's own fenced-store adapter of the backend's
//!   kind, on a server of its own: `RedisStore` on a Redis of its own (for Redis,
//!   Redlock and the cluster), `PostgresStore` on a second PostgreSQL, `MySqlStore`
//!   on a second MariaDB, `EtcdStore` on a second etcd, `ZooKeeperStore` on a second ZooKeeper, `MemoryStore` for
//!   memory.
//!   Holders read it with a claiming read and write it under their fence; the run
//!   logs each operation the adapter accepted, with when it was sent and when it
//!   answered, and counts the writes it accepted.
//! - The **unfenced** register, the control, is a row in the run's PostgreSQL server
//!   that takes every write.
//!
//! Each accepted write stores one more than the value its holder read, so
//! `writes - value` is the number of updates lost.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use distlock::etcd::fenced::EtcdStore;
use distlock::mysql::fenced::MySqlStore;
use distlock::mysql::MySqlBackend;
use distlock::postgres::fenced::PostgresStore;
use distlock::redis::fenced::RedisStore;
use distlock::zookeeper::fenced::ZooKeeperStore;
use distlock::zookeeper::ZooKeeperBackend;
use distlock::{DynFencedStore, ErrorKind, FencedStoreExt, FencingToken, MemoryStore};
use distlock_testservers::{Etcd, MariaDb, Redis, ServerHandle, ZooKeeper};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use tokio::time::Instant;

use super::history::{Logged, Totals};
use crate::rows::Row;
use crate::run::BoxError;

/// The fenced register's store for one backend's run, and what runs it.
pub(crate) struct FencedRegister {
    pub(crate) store: Arc<DynFencedStore>,
    /// Where it runs, for the report.
    pub(crate) server: String,
    /// The register's own server, when one was started for it.
    pub(crate) _handle: Option<ServerHandle>,
}

impl FencedRegister {
    /// The adapter of `row`'s kind, on a server other than the lock servers: a new
    /// container for the Redis family (one Redis, Redlock, a cluster), MariaDB, etcd
    /// and ZooKeeper, the control's PostgreSQL server for PostgreSQL, and the in-process
    /// store for the in-process backend.
    pub(crate) async fn start(row: Row, control_url: &str) -> Result<Self, BoxError> {
        let family = match row {
            Row::Redlock { .. } | Row::Cluster { .. } | Row::Sentinel { .. } => "redis",
            _ => row.backend_name(),
        };
        let (store, server, handle): (Arc<DynFencedStore>, &str, _) = match family {
            "redis" => {
                let handle = ServerHandle::start(&Redis).await?;
                let lock_backend = distlock::redis::RedisBackend::connect(&handle.url()).await?;
                (
                    Arc::new(RedisStore::new(&lock_backend)),
                    "RedisStore on a Redis of its own",
                    Some(handle),
                )
            }
            "etcd" => {
                let handle = ServerHandle::start(&Etcd).await?;
                let lock_backend = distlock::etcd::EtcdBackend::connect(&handle.url()).await?;
                (
                    Arc::new(EtcdStore::new(&lock_backend)),
                    "EtcdStore on an etcd of its own",
                    Some(handle),
                )
            }
            "postgres" => {
                let lock_backend =
                    distlock::postgres::PostgresBackend::connect(control_url).await?;
                (
                    Arc::new(PostgresStore::new(&lock_backend).await?),
                    "PostgresStore on a PostgreSQL of its own",
                    None,
                )
            }
            "mysql" => {
                let handle = ServerHandle::start(&MariaDb).await?;
                let lock_backend = MySqlBackend::connect(&handle.url()).await?;
                (
                    Arc::new(MySqlStore::new(&lock_backend).await?),
                    "MySqlStore on a MariaDB of its own",
                    Some(handle),
                )
            }
            "zookeeper" => {
                let handle = ServerHandle::start(&ZooKeeper).await?;
                let lock_backend = ZooKeeperBackend::connect(&handle.url()).await?;
                (
                    Arc::new(ZooKeeperStore::new(&lock_backend)),
                    "ZooKeeperStore on a ZooKeeper of its own",
                    Some(handle),
                )
            }
            "memory" => (Arc::new(MemoryStore::new()), "MemoryStore in process", None),
            other => return Err(format!("no fenced register for a {other:?} backend").into()),
        };
        Ok(FencedRegister {
            store,
            server: server.to_owned(),
            _handle: handle,
        })
    }
}

/// The unfenced control: one row per key in a PostgreSQL server.
#[derive(Debug, Clone)]
pub(crate) struct Control {
    pool: PgPool,
}

const SETUP: [&str; 3] = [
    "DROP TABLE IF EXISTS torture_unfenced",
    "CREATE TABLE torture_unfenced (key int PRIMARY KEY, value bigint NOT NULL, writes bigint NOT NULL)",
    "INSERT INTO torture_unfenced SELECT k, 0, 0 FROM generate_series(0, $1 - 1) AS k",
];

impl Control {
    /// Connects to `url`.
    pub(crate) async fn new(url: &str, connections: u32) -> Result<Self, BoxError> {
        // The control is never restarted: its commits need not wait for the disk,
        // which would otherwise bound the whole run's pace.
        let options = url
            .parse::<PgConnectOptions>()?
            .options([("synchronous_commit", "off")]);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect_with(options)
            .await?;
        Ok(Control { pool })
    }

    /// A fresh control register for `keys` keys.
    async fn reset(&self, keys: usize) -> Result<(), BoxError> {
        let keys = i32::try_from(keys)?;
        for statement in SETUP {
            let query = sqlx::query(statement);
            // Only the insert takes the number of keys.
            let query = if statement.contains("$1") {
                query.bind(keys)
            } else {
                query
            };
            query.persistent(false).execute(&self.pool).await?;
        }
        Ok(())
    }
}

/// Both registers for one backend's run.
#[derive(Debug, Clone)]
pub(crate) struct Registers {
    control: Control,
    fenced: Arc<DynFencedStore>,
    /// The fenced register's resource per key, fresh for the run.
    resources: Arc<Vec<String>>,
    start: Instant,
    log: Arc<Mutex<Vec<Logged>>>,
    writes: Arc<Vec<AtomicI64>>,
}

impl Registers {
    /// Fresh registers for `keys` keys: the control emptied, new resources on
    /// `fenced`. Times in the log count from `start`.
    pub(crate) async fn new(
        control: &Control,
        fenced: Arc<DynFencedStore>,
        keys: usize,
        start: Instant,
    ) -> Result<Self, BoxError> {
        control.reset(keys).await?;
        let run: u32 = rand::random();
        Ok(Registers {
            control: control.clone(),
            fenced,
            resources: Arc::new(
                (0..keys)
                    .map(|k| format!("lockbench-torture/{run:08x}/register/{k}"))
                    .collect(),
            ),
            start,
            log: Arc::default(),
            writes: Arc::new((0..keys).map(|_| AtomicI64::new(0)).collect()),
        })
    }

    fn at(&self, instant: Instant) -> f64 {
        instant.saturating_duration_since(self.start).as_secs_f64()
    }

    fn logged(&self, key: usize, fence: u64, write: bool, invoked: Instant) {
        let entry = Logged {
            key,
            fence,
            write,
            invoked: self.at(invoked),
            completed: self.at(Instant::now()),
        };
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry);
    }

    /// Reads the fenced register under `fence` (a claiming read): its value, or
    /// `None` when it has already seen a larger fence.
    pub(crate) async fn fenced_read(
        &self,
        key: usize,
        fence: u64,
    ) -> Result<Option<i64>, BoxError> {
        let invoked = Instant::now();
        match self
            .fenced
            .read(&self.resources[key], FencingToken::new(fence))
            .await
        {
            Ok(value) => {
                self.logged(key, fence, false, invoked);
                Ok(Some(value.map(|v| number(&v)).transpose()?.unwrap_or(0)))
            }
            Err(e) if e.kind() == ErrorKind::StaleFence => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `value` to the fenced register under `fence`: whether it was accepted.
    pub(crate) async fn fenced_write(
        &self,
        key: usize,
        fence: u64,
        value: i64,
    ) -> Result<bool, BoxError> {
        let invoked = Instant::now();
        match self
            .fenced
            .write(
                &self.resources[key],
                FencingToken::new(fence),
                value.to_string().as_bytes(),
            )
            .await
        {
            Ok(()) => {
                self.writes[key].fetch_add(1, Ordering::SeqCst);
                self.logged(key, fence, true, invoked);
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::StaleFence => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads the unfenced register.
    pub(crate) async fn unfenced_read(&self, key: usize) -> Result<i64, BoxError> {
        Ok(
            sqlx::query_scalar("SELECT value FROM torture_unfenced WHERE key = $1")
                .bind(i32::try_from(key)?)
                .fetch_one(&self.control.pool)
                .await?,
        )
    }

    /// Writes `value` to the unfenced register.
    pub(crate) async fn unfenced_write(&self, key: usize, value: i64) -> Result<(), BoxError> {
        sqlx::query("UPDATE torture_unfenced SET value = $2, writes = writes + 1 WHERE key = $1")
            .bind(i32::try_from(key)?)
            .bind(value)
            .execute(&self.control.pool)
            .await?;
        Ok(())
    }

    /// Every operation the fenced register accepted, as the holders saw them.
    pub(crate) fn log(&self) -> Vec<Logged> {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The final state of the fenced and the unfenced register, key by key, and the
    /// fence the fenced register keeps for each key.
    pub(crate) async fn totals(&self) -> Result<(Vec<Totals>, Vec<Totals>, Vec<u64>), BoxError> {
        let mut fenced = Vec::new();
        let mut fences = Vec::new();
        for (key, resource) in self.resources.iter().enumerate() {
            let stored = self.fenced.inspect(resource).await?;
            let value = stored
                .as_ref()
                .and_then(|s| s.value.as_deref())
                .map(number)
                .transpose()?
                .unwrap_or(0);
            fences.push(stored.map_or(0, |s| s.fence.get()));
            fenced.push(Totals {
                value,
                writes: self.writes[key].load(Ordering::SeqCst),
            });
        }
        let rows: Vec<(i64, i64)> =
            sqlx::query_as("SELECT value, writes FROM torture_unfenced ORDER BY key")
                .fetch_all(&self.control.pool)
                .await?;
        let unfenced = rows
            .into_iter()
            .map(|(value, writes)| Totals { value, writes })
            .collect();
        Ok((fenced, unfenced, fences))
    }
}

/// A register's value as stored: a decimal number.
fn number(raw: &[u8]) -> Result<i64, BoxError> {
    Ok(std::str::from_utf8(raw)?.parse()?)
}
