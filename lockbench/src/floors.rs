//! The raw floors: the fewest round trips a lock cycle can take on each server, on the
//! same driver the backend uses, with none of distlock in the way; and one round trip
//! (a read), the unit the handoff target is counted in.
//!
//! Each floor is a [`Contender`], so S1 measures it side by side with distlock.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{MySql, Postgres};

use crate::run::BoxError;
use crate::scenarios::{Contender, FloorRole, S1Entry, SCENARIO_TTL};

fn owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// What a floor's `take` does: floors are measured uncontended only.
fn no_waiting<T>() -> Result<T, BoxError> {
    Err("a raw floor does not wait for a lock".into())
}

/// What a Redis floor's cycle does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RedisCycle {
    /// One `PING`.
    Ping,
    /// `SET NX PX`, then the compare-and-delete script.
    Bare,
    /// [`FENCED_GRANT`], then the same compare-and-delete script.
    Fenced,
    /// distlock's own requests for one cycle, byte for byte, on the bare driver: the
    /// efficiency lock's `SET NX PX GET` of its stored value (or, `fenced`, the
    /// fenced lock's acquire script), then its release script. What a cycle's
    /// requests cost the client and the server, apart from the client's steps around
    /// them.
    Requests { fenced: bool },
}

/// The key prefix of the requests floor: as long as the backend's default
/// (`distlock:`), so that its requests are as long as the backend's, and apart from
/// it, so that the two never share a key.
const REQUESTS_PREFIX: &str = "lbfloor1:";

/// The cheapest grant that also mints a fence: the lock's `SET NX PX`, and only when
/// it succeeds the next fence, one above the key's last and never below the server's
/// clock in microseconds (so that fences do not go down after a restart that lost the
/// counter), kept in a counter beside the lock. One script, one round trip. It leaves
/// out what distlock's acquire adds: the retry of a grant whose reply was lost, the
/// holder's remaining TTL when busy, the counter's expiry and the waiter's mark.
const FENCED_GRANT: &str = "\
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = string.format('%.0f', math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now))
redis.call('SET', KEYS[2], fence)
return fence";

/// Redis: one `PING`; or a grant (bare, or fenced) then the compare-and-delete script.
#[derive(Clone)]
struct RedisFloor {
    conn: redis::aio::MultiplexedConnection,
    release: Arc<redis::Script>,
    fenced_grant: Arc<redis::Script>,
    /// The backend's own acquire and release scripts, for [`RedisCycle::Requests`].
    backend_acquire: Arc<redis::Script>,
    backend_release: Arc<redis::Script>,
    /// The TTL and the fence counter's life, in milliseconds, that the backend sends
    /// for the scenarios' TTL on the same URL, for [`RedisCycle::Requests`].
    requests_ttl_ms: Arc<str>,
    requests_counter_ms: Arc<str>,
    cycle: RedisCycle,
}

impl Contender for RedisFloor {
    type Held = Option<(String, String)>;

    async fn try_take(&self, key: &str) -> Result<Option<Self::Held>, BoxError> {
        let mut conn = self.conn.clone();
        let owner = owner();
        match self.cycle {
            RedisCycle::Ping => {
                let _: String = redis::cmd("PING").query_async(&mut conn).await?;
                return Ok(Some(None));
            }
            RedisCycle::Fenced => {
                let fence: Option<String> = self
                    .fenced_grant
                    .key(key)
                    .key(format!("{key}:fence"))
                    .arg(&owner)
                    .arg(30_000)
                    .invoke_async(&mut conn)
                    .await?;
                return Ok(fence.map(|_| Some((key.to_owned(), owner))));
            }
            RedisCycle::Requests { fenced } => {
                let (ttl_ms, counter_ms) = (&*self.requests_ttl_ms, &*self.requests_counter_ms);
                let lock = format!("{REQUESTS_PREFIX}{{{key}}}");
                let holder = distlock::Holder::this_process();
                let granted = if fenced {
                    let reply: Vec<String> = self
                        .backend_acquire
                        .key(&lock)
                        .key(format!("{lock}:fence"))
                        .arg(&owner)
                        .arg(ttl_ms)
                        .arg(counter_ms)
                        .arg("0")
                        .arg("0")
                        .arg(holder.encoded())
                        .invoke_async(&mut conn)
                        .await?;
                    reply.first().is_some_and(|granted| granted == "1")
                } else {
                    let ms = SystemTime::now()
                        .duration_since(SystemTime::UNIX_EPOCH)?
                        .as_millis();
                    let value = format!("{owner}:0/{ms}/{}/", holder.encoded());
                    let previous: Option<String> = redis::cmd("SET")
                        .arg(&lock)
                        .arg(&value)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms)
                        .arg("GET")
                        .query_async(&mut conn)
                        .await?;
                    previous.is_none()
                };
                return Ok(granted.then_some(Some((lock, owner))));
            }
            RedisCycle::Bare => {}
        }
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&owner)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut conn)
            .await?;
        Ok(set.map(|_| Some((key.to_owned(), owner))))
    }

    async fn take(&self, _: &str, _: Duration) -> Result<Self::Held, BoxError> {
        no_waiting()
    }

    async fn give_back(&self, held: Self::Held) -> Result<(), BoxError> {
        let Some((key, owner)) = held else {
            return Ok(());
        };
        let mut conn = self.conn.clone();
        let released: i64 = match self.cycle {
            // The backend's release: it names the prefix's length, to tell waiters.
            RedisCycle::Requests { .. } => {
                self.backend_release
                    .key(key)
                    .arg(owner)
                    .arg(REQUESTS_PREFIX.len())
                    .invoke_async(&mut conn)
                    .await?
            }
            _ => {
                self.release
                    .key(key)
                    .arg(owner)
                    .invoke_async(&mut conn)
                    .await?
            }
        };
        if released != 1 {
            return Err(format!("a floor's release answered {released}, not released").into());
        }
        Ok(())
    }
}

/// Redis's floors: a round trip, the raw cycle, the fenced cycle, and distlock's own
/// requests for each lock on the bare driver.
pub(crate) async fn redis(url: &str) -> Result<Vec<S1Entry>, BoxError> {
    let conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let release = Arc::new(redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    ));
    let fenced_grant = Arc::new(redis::Script::new(FENCED_GRANT));
    let backend_acquire = Arc::new(redis::Script::new(include_str!(
        "../../distlock-redis/src/scripts/acquire.lua"
    )));
    let backend_release = Arc::new(redis::Script::new(include_str!(
        "../../distlock-redis/src/scripts/release_plain.lua"
    )));
    // The backend's fence counter outlives a lease by its fence grace, as configured
    // for this URL.
    let grace = distlock::redis::RedisConfig::from_url(url)?.fence_grace();
    let requests_ttl_ms: Arc<str> = SCENARIO_TTL.as_millis().to_string().into();
    let requests_counter_ms: Arc<str> = (SCENARIO_TTL + grace).as_millis().to_string().into();
    let floor = |cycle| RedisFloor {
        conn: conn.clone(),
        release: release.clone(),
        fenced_grant: fenced_grant.clone(),
        backend_acquire: backend_acquire.clone(),
        backend_release: backend_release.clone(),
        requests_ttl_ms: requests_ttl_ms.clone(),
        requests_counter_ms: requests_counter_ms.clone(),
        cycle,
    };
    Ok(vec![
        S1Entry::floor(
            FloorRole::RoundTrip,
            "PING (one round trip)",
            floor(RedisCycle::Ping),
        ),
        S1Entry::floor(
            FloorRole::Cycle,
            "SET NX PX + compare-and-delete",
            floor(RedisCycle::Bare),
        ),
        S1Entry::floor(
            FloorRole::FencedCycle,
            "fenced grant (SET NX PX + a fence from TIME and a counter, one script) + compare-and-delete",
            floor(RedisCycle::Fenced),
        ),
        S1Entry::floor(
            FloorRole::Requests,
            "the efficiency lock's requests (SET NX PX GET + release script), bare driver",
            floor(RedisCycle::Requests { fenced: false }),
        ),
        S1Entry::floor(
            FloorRole::Requests,
            "the fenced lock's requests (acquire script + release script), bare driver",
            floor(RedisCycle::Requests { fenced: true }),
        ),
    ])
}

/// Which PostgreSQL statements a floor cycle runs.
#[derive(Clone, Copy)]
enum PgCycle {
    Select1,
    Table,
    Advisory,
}

/// PostgreSQL, on a pool of its own as large as the backend's (10 connections), so
/// that S2 runs both at the same concurrency and connection count.
#[derive(Clone)]
struct PgFloor {
    pool: PgPool,
    cycle: PgCycle,
}

/// The backend's default `pool_size`.
const PG_POOL: u32 = 10;

/// An advisory-lock id for `key`.
fn advisory_id(key: &str) -> i64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    i64::from_ne_bytes(hasher.finish().to_ne_bytes())
}

impl Contender for PgFloor {
    /// The key, the owner, and (for an advisory lock, which belongs to its session) the
    /// connection that holds it.
    type Held = Option<(String, [u8; 16], Option<PoolConnection<Postgres>>)>;

    async fn try_take(&self, key: &str) -> Result<Option<Self::Held>, BoxError> {
        let mut conn = self.pool.acquire().await?;
        match self.cycle {
            PgCycle::Select1 => {
                let _: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut *conn).await?;
                Ok(Some(None))
            }
            PgCycle::Table => {
                let owner = rand::random::<u128>().to_be_bytes();
                let got = sqlx::query(
                    "INSERT INTO lockbench_floor VALUES ($1, $2, clock_timestamp() + interval '30 seconds') ON CONFLICT DO NOTHING",
                )
                .bind(key)
                .bind(&owner[..])
                .execute(&mut *conn)
                .await?;
                Ok((got.rows_affected() == 1).then(|| Some((key.to_owned(), owner, None))))
            }
            PgCycle::Advisory => {
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(advisory_id(key))
                    .fetch_one(&mut *conn)
                    .await?;
                Ok(got.then(|| Some((key.to_owned(), [0; 16], Some(conn)))))
            }
        }
    }

    async fn take(&self, _: &str, _: Duration) -> Result<Self::Held, BoxError> {
        no_waiting()
    }

    async fn give_back(&self, held: Self::Held) -> Result<(), BoxError> {
        let Some((key, owner, session)) = held else {
            return Ok(());
        };
        let mut conn = match session {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        match self.cycle {
            PgCycle::Select1 => {}
            PgCycle::Table => {
                sqlx::query("DELETE FROM lockbench_floor WHERE key = $1 AND owner = $2")
                    .bind(key)
                    .bind(&owner[..])
                    .execute(&mut *conn)
                    .await?;
            }
            PgCycle::Advisory => {
                let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                    .bind(advisory_id(&key))
                    .fetch_one(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// PostgreSQL's floors: `SELECT 1`; the bare insert-or-nothing and delete statements
/// on a lock table; and the advisory-lock pair users would pick instead.
pub(crate) async fn postgres(url: &str) -> Result<Vec<S1Entry>, BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(PG_POOL)
        .connect(url)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS lockbench_floor (key text PRIMARY KEY, owner bytea NOT NULL, expires_at timestamptz NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let floor = |cycle| PgFloor {
        pool: pool.clone(),
        cycle,
    };
    Ok(vec![
        S1Entry::floor(
            FloorRole::RoundTrip,
            "SELECT 1 (one round trip)",
            floor(PgCycle::Select1),
        ),
        S1Entry::floor(
            FloorRole::Cycle,
            "bare INSERT + DELETE on a lock table",
            floor(PgCycle::Table),
        ),
        S1Entry::new(
            "pg_try_advisory_lock + pg_advisory_unlock",
            floor(PgCycle::Advisory),
        ),
    ])
}

/// Which MySQL statements a floor cycle runs.
#[derive(Clone, Copy)]
enum MySqlCycle {
    Select1,
    Table,
    SessionLock,
}

/// MySQL or MariaDB, on a pool of its own as large as the backend's (10
/// connections), so that S2 runs both at the same concurrency and connection count.
#[derive(Clone)]
struct MySqlFloor {
    pool: MySqlPool,
    cycle: MySqlCycle,
}

impl Contender for MySqlFloor {
    /// The key, the owner, and (for `GET_LOCK`, which belongs to its session) the
    /// connection that holds it.
    type Held = Option<(String, [u8; 16], Option<PoolConnection<MySql>>)>;

    async fn try_take(&self, key: &str) -> Result<Option<Self::Held>, BoxError> {
        let mut conn = self.pool.acquire().await?;
        match self.cycle {
            MySqlCycle::Select1 => {
                let _: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut *conn).await?;
                Ok(Some(None))
            }
            MySqlCycle::Table => {
                let owner = rand::random::<u128>().to_be_bytes();
                let got = sqlx::query(
                    "INSERT IGNORE INTO lockbench_floor VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND)",
                )
                .bind(key.as_bytes())
                .bind(&owner[..])
                .execute(&mut *conn)
                .await?;
                Ok((got.rows_affected() == 1).then(|| Some((key.to_owned(), owner, None))))
            }
            MySqlCycle::SessionLock => {
                // GET_LOCK names are at most 64 characters: a hash of the key.
                let got: Option<i32> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                    .bind(format!("{:016x}", advisory_id(key)))
                    .fetch_one(&mut *conn)
                    .await?;
                Ok((got == Some(1)).then(|| Some((key.to_owned(), [0; 16], Some(conn)))))
            }
        }
    }

    async fn take(&self, _: &str, _: Duration) -> Result<Self::Held, BoxError> {
        no_waiting()
    }

    async fn give_back(&self, held: Self::Held) -> Result<(), BoxError> {
        let Some((key, owner, session)) = held else {
            return Ok(());
        };
        let mut conn = match session {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        match self.cycle {
            MySqlCycle::Select1 => {}
            MySqlCycle::Table => {
                sqlx::query("DELETE FROM lockbench_floor WHERE name = ? AND owner = ?")
                    .bind(key.as_bytes())
                    .bind(&owner[..])
                    .execute(&mut *conn)
                    .await?;
            }
            MySqlCycle::SessionLock => {
                let _: Option<i32> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
                    .bind(format!("{:016x}", advisory_id(&key)))
                    .fetch_one(&mut *conn)
                    .await?;
            }
        }
        Ok(())
    }
}

/// MySQL's and MariaDB's floors: `SELECT 1`; the bare insert-or-nothing and delete
/// statements on a lock table (what services write by hand, without a fence); and the
/// `GET_LOCK`/`RELEASE_LOCK` session-lock pair users would pick instead. `url` is a
/// `mysql://` URL of the server.
pub(crate) async fn mysql(url: &str) -> Result<Vec<S1Entry>, BoxError> {
    let pool = MySqlPoolOptions::new()
        .max_connections(PG_POOL)
        // As the backend's pool: no ping before each statement.
        .test_before_acquire(false)
        .connect(url)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS lockbench_floor (name VARBINARY(256) PRIMARY KEY, owner VARBINARY(64) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
    )
    .execute(&pool)
    .await?;
    let floor = |cycle| MySqlFloor {
        pool: pool.clone(),
        cycle,
    };
    Ok(vec![
        S1Entry::floor(
            FloorRole::RoundTrip,
            "SELECT 1 (one round trip)",
            floor(MySqlCycle::Select1),
        ),
        S1Entry::floor(
            FloorRole::Cycle,
            "bare INSERT IGNORE + DELETE on a lock table",
            floor(MySqlCycle::Table),
        ),
        S1Entry::new(
            "GET_LOCK + RELEASE_LOCK (session lock)",
            floor(MySqlCycle::SessionLock),
        ),
    ])
}

/// Which etcd requests a floor cycle makes.
#[derive(Clone, Copy)]
enum EtcdCycle {
    Get,
    /// Whether the lease is revoked after the delete (in the background, as distlock's
    /// release does) or left to expire at its TTL, when etcd's leader revokes it then.
    Txn {
        revoke: bool,
    },
    LockApi,
}

/// etcd, on a client of its own.
#[derive(Clone)]
struct EtcdFloor {
    client: etcd_client::Client,
    cycle: EtcdCycle,
}

impl Contender for EtcdFloor {
    /// The key, the owner (the Lock API's own key, for it) and the lease.
    type Held = Option<(Vec<u8>, String, i64)>;

    async fn try_take(&self, key: &str) -> Result<Option<Self::Held>, BoxError> {
        let mut c = self.client.clone();
        match self.cycle {
            EtcdCycle::Get => {
                c.get("floor-ping", None).await?;
                Ok(Some(None))
            }
            EtcdCycle::Txn { .. } => {
                let owner = owner();
                let lease = c.lease_grant(30, None).await?.id();
                let put = Txn::new()
                    .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key,
                        owner.clone(),
                        Some(PutOptions::new().with_lease(lease)),
                    )]);
                let won = c.txn(put).await?.succeeded();
                Ok(won.then(|| Some((key.as_bytes().to_vec(), owner, lease))))
            }
            EtcdCycle::LockApi => {
                let lease = c.lease_grant(30, None).await?.id();
                let locked = c
                    .lock(key, Some(etcd_client::LockOptions::new().with_lease(lease)))
                    .await?;
                Ok(Some(Some((locked.key().to_vec(), String::new(), lease))))
            }
        }
    }

    async fn take(&self, _: &str, _: Duration) -> Result<Self::Held, BoxError> {
        no_waiting()
    }

    async fn give_back(&self, held: Self::Held) -> Result<(), BoxError> {
        let Some((key, owner, lease)) = held else {
            return Ok(());
        };
        let mut c = self.client.clone();
        match self.cycle {
            EtcdCycle::Get => {}
            EtcdCycle::Txn { revoke } => {
                let delete = Txn::new()
                    .when([Compare::value(key.clone(), CompareOp::Equal, owner)])
                    .and_then([TxnOp::delete(key, None)]);
                c.txn(delete).await?;
                if revoke {
                    tokio::spawn(async move {
                        let _ = c.lease_revoke(lease).await;
                    });
                }
            }
            EtcdCycle::LockApi => {
                c.unlock(key).await?;
            }
        }
        Ok(())
    }
}

/// etcd's floors: a `get`; a lease grant with a put-if-absent and a delete
/// transaction, the lease then revoked in the background (the cycle floor: what a
/// lock with a lease of its own must write, as distlock's does), or left to expire
/// (its revoke then comes from etcd's leader at the TTL, possibly during another
/// measurement); and etcd's own Lock API (lease grant, lock, unlock).
pub(crate) async fn etcd(endpoint: &str) -> Result<Vec<S1Entry>, BoxError> {
    let client = etcd_client::Client::connect([endpoint], None).await?;
    let floor = |cycle| EtcdFloor {
        client: client.clone(),
        cycle,
    };
    Ok(vec![
        S1Entry::floor(
            FloorRole::RoundTrip,
            "get (one round trip)",
            floor(EtcdCycle::Get),
        ),
        S1Entry::floor(
            FloorRole::Cycle,
            "lease grant + put-if-absent txn + delete txn + lease revoke (in the background)",
            floor(EtcdCycle::Txn { revoke: true }),
        ),
        S1Entry::new(
            "lease grant + put-if-absent txn + delete txn (lease left to expire)",
            floor(EtcdCycle::Txn { revoke: false }),
        ),
        S1Entry::new(
            "etcd Lock API (lease grant + lock + unlock)",
            floor(EtcdCycle::LockApi),
        ),
    ])
}

/// ZooKeeper: an `exists` of the root; or a lock node created as a TTL node (failing
/// when it exists) then deleted at the version created, as a lock with a node per
/// lease must write.
#[derive(Clone)]
struct ZooKeeperFloor {
    client: zookeeper_client::Client,
    exists: bool,
}

impl Contender for ZooKeeperFloor {
    type Held = Option<String>;

    async fn try_take(&self, key: &str) -> Result<Option<Self::Held>, BoxError> {
        if self.exists {
            self.client.check_stat("/").await?;
            return Ok(Some(None));
        }
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        let path = format!("{ZK_FLOOR_DIR}/{:016x}", hasher.finish());
        let options = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all())
            .with_ttl(Duration::from_secs(30));
        match self
            .client
            .create(&path, owner().as_bytes(), &options)
            .await
        {
            Ok(_) => Ok(Some(Some(path))),
            Err(zookeeper_client::Error::NodeExists) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn take(&self, _: &str, _: Duration) -> Result<Self::Held, BoxError> {
        no_waiting()
    }

    async fn give_back(&self, held: Self::Held) -> Result<(), BoxError> {
        if let Some(path) = held {
            self.client.delete(&path, Some(0)).await?;
        }
        Ok(())
    }
}

const ZK_FLOOR_DIR: &str = "/lockbench-floor";

/// ZooKeeper's floors, on the zookeeper-client the backend uses: a round trip, and
/// the raw cycle of a TTL node created and deleted.
pub(crate) async fn zookeeper(servers: &str) -> Result<Vec<S1Entry>, BoxError> {
    let client = zookeeper_client::Client::connect(servers).await?;
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.mkdir(ZK_FLOOR_DIR, &options).await?;
    let floor = |exists| ZooKeeperFloor {
        client: client.clone(),
        exists,
    };
    Ok(vec![
        S1Entry::floor(FloorRole::RoundTrip, "exists (one round trip)", floor(true)),
        S1Entry::floor(
            FloorRole::Cycle,
            "create TTL node (fails if present) + delete at its version",
            floor(false),
        ),
    ])
}
