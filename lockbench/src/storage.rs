//! S5, bounded storage: lock and release many distinct names, then count what the
//! server still keeps of them, at once and once each backend's own bound has passed
//! (Redis: the lease plus the fence counter's grace; PostgreSQL and MySQL: their
//! purge; etcd: the lease).
//!
//! Counted on the server, by each server's own means: keys matching the names on
//! Redis, rows on PostgreSQL and MariaDB, keys under the names' prefix on etcd.

use std::sync::Arc;
use std::time::Duration;

use distlock::backend::LockBackendExt;
use distlock::{DynLockBackend, LockKey};
use futures_util::future::try_join_all;
use serde::Serialize;
use tokio::time::{sleep, Instant};

use crate::run::BoxError;

/// What S5 found on one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Storage {
    /// Distinct lock names locked and released once each.
    pub(crate) names: usize,
    /// Keys or rows of those names on the server right after the last release (a
    /// purge may already have run while the names were being locked).
    pub(crate) left_at_once: u64,
    /// Keys or rows left once the backend's bound had passed.
    pub(crate) left_after: u64,
    /// How long after the last release that was counted, in seconds.
    pub(crate) after_s: f64,
    /// The URL options the step ran with, if any (shorter bounds outside the soak).
    pub(crate) options: String,
}

/// The URL options S5 connects with, and how long after the last release it counts
/// again: each backend's bound, with a margin.
pub(crate) fn bound(server: &str, short: bool) -> (&'static str, Duration) {
    match (server, short) {
        // The fence counter outlives the lease by the grace (one minute by default).
        ("redis", false) => ("", Duration::from_secs(65)),
        ("redis", true) => ("fence_grace_ms=1000", Duration::from_secs(5)),
        // Rows that ended twice the response timeout ago go at the next purge.
        ("postgres", false) => ("", Duration::from_secs(45)),
        ("postgres", true) => (
            "purge_every_ms=1000&response_timeout_ms=1000",
            Duration::from_secs(6),
        ),
        // Rows that ended `purge_after_ms` ago (a minute) go at the next purge (every
        // 30 s).
        ("mariadb", false) => ("", Duration::from_secs(95)),
        ("mariadb", true) => (
            "purge_every_ms=1000&purge_after_ms=1000",
            Duration::from_secs(4),
        ),
        // A key's node is a container: ZooKeeper deletes it once empty, at its next
        // check (every second on the test servers; every minute by default).
        ("zookeeper", _) => ("", Duration::from_secs(5)),
        // A key goes with its lease: on release, or at the TTL.
        _ => ("", Duration::from_secs(4)),
    }
}

/// Locks and releases `names` distinct names on `backend`, 32 at a time, then counts
/// at once and after `wait`.
pub(crate) async fn measure(
    server: &str,
    url: &str,
    backend: Arc<DynLockBackend>,
    names: usize,
    wait: Duration,
    options: &str,
) -> Result<Storage, BoxError> {
    let run: u32 = rand::random();
    let prefix = format!("lockbench-storage/{run:08x}/");
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(1));
    let tasks = (0..32).map(|task| {
        let (backend, prefix) = (backend.clone(), prefix.clone());
        async move {
            for i in (task..names).step_by(32) {
                let key = LockKey::new(format!("{prefix}{i}"))?;
                if let Some(lease) = backend.acquire_once(key.as_str(), ttl).await? {
                    backend.release_lease(&lease).await?;
                }
            }
            Ok::<_, BoxError>(())
        }
    });
    try_join_all(tasks).await?;
    let released = Instant::now();
    let counter = Counter::connect(server, url).await?;
    let left_at_once = counter.count(&prefix).await?;
    sleep(wait.saturating_sub(released.elapsed())).await;
    let left_after = counter.count(&prefix).await?;
    Ok(Storage {
        names,
        left_at_once,
        left_after,
        after_s: released.elapsed().as_secs_f64(),
        options: options.to_owned(),
    })
}

/// Counts, on the server, what is kept of the names under a prefix.
enum Counter {
    Redis(redis::aio::MultiplexedConnection),
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    Etcd(Box<etcd_client::Client>),
    /// The session, and the backend's configuration (where its key nodes live).
    ZooKeeper(
        zookeeper_client::Client,
        Box<distlock::zookeeper::ZooKeeperConfig>,
    ),
}

impl Counter {
    async fn connect(server: &str, url: &str) -> Result<Self, BoxError> {
        Ok(match server {
            "redis" => Counter::Redis(
                redis::Client::open(url.split('?').next().unwrap_or(url))?
                    .get_multiplexed_async_connection()
                    .await?,
            ),
            "postgres" => Counter::Postgres(sqlx::PgPool::connect(url).await?),
            "mariadb" => {
                let server = url.split('?').next().unwrap_or(url);
                Counter::MySql(
                    sqlx::MySqlPool::connect(&server.replacen("mariadb://", "mysql://", 1)).await?,
                )
            }
            "zookeeper" => {
                let config = distlock::zookeeper::ZooKeeperConfig::from_url(url)?;
                let client = zookeeper_client::Client::connect(&config.servers().join(",")).await?;
                Counter::ZooKeeper(client, Box::new(config))
            }
            "etcd" => {
                let endpoints: Vec<String> = url
                    .trim_start_matches("etcd://")
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|e| format!("http://{e}"))
                    .collect();
                Counter::Etcd(Box::new(
                    etcd_client::Client::connect(endpoints, None).await?,
                ))
            }
            other => return Err(format!("lockbench cannot count what {other} keeps").into()),
        })
    }

    async fn count(&self, prefix: &str) -> Result<u64, BoxError> {
        match self {
            // The backend's own key layout: `distlock:{<name>}`, and `...:fence`.
            Counter::Redis(conn) => {
                let mut conn = conn.clone();
                let pattern = format!("distlock:{{{prefix}*");
                let mut cursor: u64 = 0;
                let mut found = 0;
                loop {
                    let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(10_000)
                        .query_async(&mut conn)
                        .await?;
                    found += keys.len() as u64;
                    if next == 0 {
                        return Ok(found);
                    }
                    cursor = next;
                }
            }
            Counter::Postgres(pool) => {
                let n: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM distlock_locks WHERE key LIKE $1")
                        .bind(format!("{prefix}%"))
                        .fetch_one(pool)
                        .await?;
                Ok(u64::try_from(n)?)
            }
            Counter::MySql(pool) => {
                let n: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM distlock_locks WHERE name LIKE ?")
                        .bind(format!("{prefix}%").into_bytes())
                        .fetch_one(pool)
                        .await?;
                Ok(u64::try_from(n)?)
            }
            Counter::Etcd(client) => {
                let mut client = (**client).clone();
                let options = etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only();
                let reply = client
                    .get(format!("distlock/{prefix}"), Some(options))
                    .await?;
                Ok(u64::try_from(reply.count())?)
            }
            // A key's node: `<root>/k-<the key, percent-encoded>`; the prefix encodes
            // to a prefix of it.
            Counter::ZooKeeper(client, config) => {
                let node = config.key_node(&LockKey::new(prefix)?);
                let (root, segment) = node.rsplit_once('/').unwrap_or_default();
                let children = client.list_children(root).await?;
                Ok(children.iter().filter(|c| c.starts_with(segment)).count() as u64)
            }
        }
    }
}
