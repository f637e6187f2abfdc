//! [`RedisBackend`]: the contract on one Redis server, one Lua script per operation.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FairBackend, FenceDurability, Grant,
    Handoff, HandoffBook, Handoffs, HolderRecords, OperatorBackend, OwnerToken, PermitBackend,
    ReleaseOutcome, Renewal, SetBackend, SetGrant, WakeRegistry,
};
use distlock_core::{
    Error, ErrorKind, FencingToken, Holder, LockBackend, LockInfo, LockKey, Result,
};
use redis::{FromRedisValue, ToRedisArgs};
use tokio::time::Instant;
use tracing::debug;

use crate::config::RedisConfig;
use crate::connection::{client, manager_config, Conn, Subscriber};
use crate::error::{connect_error, connect_timed_out, from_redis, from_redis_after, unexpected};
use crate::scripts::{is_noscript, Lua, Scripts, SOURCES};

const NAME: &str = "redis";

/// A lock backend on one Redis server (or the primary of a replicated set).
///
/// One multiplexed connection serves every operation and reconnects by itself; a
/// second connection, opened on first use, carries release notifications (pub/sub).
/// Each operation is one Lua script called by hash (`EVALSHA`), falling back to
/// loading it when the server has forgotten it. Clones share the connections.
#[derive(Clone)]
pub struct RedisBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    config: RedisConfig,
    capabilities: Capabilities,
    pub(crate) conn: Conn,
    client: redis::Client,
    pub(crate) scripts: Scripts,
    watcher: tokio::sync::Mutex<Option<Subscriber>>,
    /// This process's fair waiters, and the grants releases handed them.
    handoffs: Arc<HandoffBook>,
    /// Whether a release hands the key to the head of its queue.
    hands_over: bool,
    /// Whether a set of keys is taken in one step (one server, not a Redlock master).
    sets: bool,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// Connects with the settings of a `redis://` or `rediss://` URL (see
    /// [`RedisConfig`]). Wrong credentials fail here, at once, with
    /// [`ErrorKind::Authentication`].
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(RedisConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed (see [`RedisConfig`]), after
    /// [checking](RedisConfig::check) it.
    pub async fn connect_with(config: RedisConfig) -> Result<Self> {
        config.check()?;
        #[cfg(feature = "cluster")]
        if config.cluster {
            let cluster = redis::cluster::ClusterClient::builder(config.driver_urls())
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.response_timeout)
                .build()
                .map_err(|e| from_redis(&config, e))?;
            return Self::from_cluster_client(&cluster, config).await;
        }
        #[cfg(feature = "sentinel")]
        if config.master_name.is_some() {
            return Self::behind_sentinel(config).await;
        }
        let client = client(&config)?;
        Self::from_client(client, config).await
    }

    /// A backend on the master the Sentinels of `config` name, found again after a
    /// failover (see the crate docs on Sentinel).
    #[cfg(feature = "sentinel")]
    async fn behind_sentinel(config: RedisConfig) -> Result<Self> {
        let conn = crate::sentinel::SentinelConn::connect(&config, manager_config(&config)).await;
        Self::on_sentinel(conn, config).await
    }

    /// A backend on the master that the service's own Sentinel `client` finds (its
    /// Sentinels, master name, credentials and database, configured once; it must
    /// look for the master, not a replica). From `config` only the lock settings and
    /// time-outs are read, as [`from_client`](Self::from_client) reads them; its
    /// endpoints name the Sentinels in errors. The master is found at once and again
    /// after a failover, as for a `redis-sentinel://` URL (see the crate docs on
    /// Sentinel).
    #[cfg(feature = "sentinel")]
    pub async fn from_sentinel_client(
        client: redis::sentinel::SentinelClient,
        config: RedisConfig,
    ) -> Result<Self> {
        distlock_core::backend::key_prefix("redis", &config.prefix)?;
        let conn =
            crate::sentinel::SentinelConn::with_client(client, &config, manager_config(&config))
                .await;
        Self::on_sentinel(conn, config).await
    }

    /// The backend on a Sentinel connection just made (or the error making it).
    #[cfg(feature = "sentinel")]
    async fn on_sentinel(
        conn: redis::RedisResult<crate::sentinel::SentinelConn>,
        config: RedisConfig,
    ) -> Result<Self> {
        let conn = conn.map_err(|e| match e.kind() {
            redis::ErrorKind::MasterNameNotFoundBySentinel => distlock_core::backend::config_error(
                NAME,
                format!(
                    "the Sentinels at {} monitor no master named {:?}",
                    config.endpoint_list(),
                    config.master_name.as_deref().unwrap_or_default()
                ),
            ),
            _ => connect_error(&config, e),
        })?;
        let client = conn.client().await.map_err(|e| connect_error(&config, e))?;
        Ok(Self::assemble(config, client, Conn::Sentinel(conn)))
    }

    /// A backend on the service's own redis `client`: its server, credentials, TLS
    /// and database, configured once. From `config` only the lock settings are read
    /// (`prefix`, `wait_replicas`, time-outs, `fence_grace`); its address and
    /// credentials are the client's.
    ///
    /// What it opens with the client: one multiplexed connection (a
    /// `ConnectionManager` with `config`'s connect and response time-outs, which
    /// reconnects by itself) for every operation, and, on the first wait, one pub/sub
    /// connection for release notifications. It does not take the service's own
    /// `ConnectionManager`: a manager's time-outs and retries are the whole
    /// connection's, and the lock's bounds would then be the service's to keep. It
    /// never changes the client or the database beyond the keys under its prefix.
    /// Wrong credentials fail here, at once.
    pub async fn from_client(client: redis::Client, config: RedisConfig) -> Result<Self> {
        distlock_core::backend::key_prefix("redis", &config.prefix)?;
        let connect = client.get_connection_manager_with_config(manager_config(&config));
        let conn = tokio::time::timeout(config.connect_timeout + config.response_timeout, connect)
            .await
            .map_err(|_| connect_timed_out(&config))?
            .map_err(|e| match e.is_timeout() {
                true => connect_timed_out(&config),
                false => connect_error(&config, e),
            })?;
        Ok(Self::assemble(config, client, Conn::Single(conn)))
    }

    /// A backend on the service's own Redis Cluster `client` (its seeds,
    /// credentials and time-outs): one cluster connection made from it. `config`'s
    /// lock settings are read as [`from_client`](Self::from_client) reads them, and
    /// its endpoints name the cluster in errors; release notifications go through a
    /// connection to its first endpoint.
    #[cfg(feature = "cluster")]
    pub async fn from_cluster_client(
        cluster: &redis::cluster::ClusterClient,
        config: RedisConfig,
    ) -> Result<Self> {
        distlock_core::backend::key_prefix("redis", &config.prefix)?;
        let client = client(&config)?;
        let conn = cluster
            .get_async_connection()
            .await
            .map_err(|e| connect_error(&config, e))?;
        Ok(Self::assemble(config, client, Conn::Cluster(conn)))
    }

    /// A backend whose connection opens on first use: a Redlock master that may be
    /// down when the Redlock starts.
    pub(crate) fn connect_lazily(config: RedisConfig) -> Result<Self> {
        let client = client(&config)?;
        let conn = client
            .get_connection_manager_lazy(manager_config(&config))
            .map_err(|e| from_redis(&config, e))?;
        Ok(Self::assemble(config, client, Conn::Single(conn)))
    }

    fn assemble(config: RedisConfig, client: redis::Client, conn: Conn) -> Self {
        let mut capabilities = Capabilities::default();
        capabilities.min_ttl = Duration::from_millis(10);
        capabilities.fence_durability = FenceDurability::FailsClosed;
        capabilities.leases_survive_restart = false;
        capabilities.change_notification = true;
        // acquire.lua stores the holder with its grant time by the server's clock.
        capabilities.holder_records = HolderRecords::ServerClock;
        // An efficiency lock's plain grant is one `SET NX` (`grant_unfenced`).
        capabilities.unfenced_grants = true;
        // A release hands the lock to the head of its queue: not on a Redlock master
        // (the Redlock's majority decides a grant, not one master's release), nor where
        // grants wait for replicas (the release does not, and the waiter would hear of
        // a grant the replicas may not have).
        let hands_over = !config.redlock_member && config.wait_replicas == 0;
        // A release whose short form finds a fair waiter's mark sends the full one
        // (`release_telling`); an efficiency lock's acquire that finds the key held
        // marks the grant it found (`grant_unfenced`).
        capabilities.round_trips.release = 2;
        capabilities.round_trips.acquire = 2;
        // One script takes a set: on one server, where every key is. A cluster spreads
        // the keys over slots, and a Redlock master answers to the Redlock's majority.
        let sets = !conn.is_cluster() && !config.redlock_member;
        RedisBackend {
            inner: Arc::new(Inner {
                config,
                capabilities,
                conn,
                client,
                scripts: Scripts::new(),
                watcher: tokio::sync::Mutex::new(None),
                handoffs: Arc::new(HandoffBook::new()),
                hands_over,
                sets,
            }),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    fn lock_key(&self, key: &LockKey) -> String {
        // The hash tag keeps the lock and its fence counter in one cluster slot.
        joined(&[&self.inner.config.prefix, "{", key.as_str(), "}"])
    }

    fn channel(&self, key: &LockKey) -> String {
        joined(&[&self.inner.config.prefix, "released:{", key.as_str(), "}"])
    }

    /// The name of a lock's fence counter.
    fn fence_key(lock: &str) -> String {
        joined(&[lock, ":fence"])
    }

    /// The key names beside a lock's own: its queue of fair waiters, their places,
    /// their TTLs and its fence counter.
    fn queue_keys(lock: &str) -> [String; 4] {
        [
            joined(&[lock, ":queue"]),
            joined(&[lock, ":places"]),
            joined(&[lock, ":ttls"]),
            Self::fence_key(lock),
        ]
    }

    /// The release channel of `key`, or '' to tell no one.
    fn channel_if(&self, key: &LockKey, tell: bool) -> String {
        if tell {
            self.channel(key)
        } else {
            String::new()
        }
    }

    /// What release.lua and leave.lua take besides the owner and the channel: whether
    /// to hand the lock over; the counter's grace.
    fn release_args(&self, tell: bool) -> (&'static str, String) {
        let handoff = tell && self.inner.hands_over;
        (
            if handoff { "1" } else { "0" },
            millis(self.inner.config.fence_grace),
        )
    }

    pub(crate) fn error(&self, e: redis::RedisError) -> Error {
        from_redis(&self.inner.config, e)
    }

    /// Runs `script` in one round trip: `EVALSHA`, and `WAIT` in the same pipeline when
    /// replicas are to be waited for; on `NOSCRIPT` the script is sent whole (`EVAL`,
    /// which the server also keeps for the next `EVALSHA`), to the node that serves
    /// the keys.
    pub(crate) async fn run<T: FromRedisValue, A: ToRedisArgs>(
        &self,
        script: &Lua,
        keys: &[&str],
        args: &[A],
        wait: bool,
    ) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        // Sized once for the whole `EVALSHA` (its 40-digit hash, the keys, and room for
        // the arguments), so that writing the arguments does not grow it.
        let data = 40 + keys.iter().map(|k| k.len()).sum::<usize>() + 48 * args.len();
        let call = |name: &str, script: &str| {
            let mut call =
                redis::Cmd::with_capacity(3 + keys.len() + args.len(), data + name.len());
            call.arg(name)
                .arg(script)
                .arg(keys.len())
                .arg(keys)
                .arg(args);
            call
        };
        let mut evalsha = call("EVALSHA", script.script.get_hash());
        // Once each: a script the server forgot is sent whole, and a request on a
        // connection the server dropped (a restart, say) is sent again on a new one.
        // Sending again is safe: every script is idempotent for its owner token.
        let (mut reloaded, mut resent) = (false, false);
        loop {
            match self.query(&mut conn, &evalsha, wait).await? {
                Err(e) if !reloaded && is_noscript(&e) => {
                    reloaded = true;
                    debug!("the server had no copy of the script; sending it whole");
                    evalsha = call("EVAL", script.source);
                }
                Err(e) if !resent && e.is_connection_dropped() => {
                    resent = true;
                    debug!(error = %e, "the connection was dropped; sending again");
                }
                // After a drop, the first send may have been applied: whatever the
                // resend met, the request is not "not sent".
                other => return other.map_err(|e| from_redis_after(&self.inner.config, e, resent)),
            }
        }
    }

    /// Sends one command as [`run`](Self::run) sends a script: with `WAIT` in the same
    /// pipeline when replicas are to be waited for, and once more on a new connection
    /// when the server dropped it. The command must be idempotent for its owner token.
    pub(crate) async fn send<T: FromRedisValue>(&self, cmd: &redis::Cmd, wait: bool) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        match self.query(&mut conn, cmd, wait).await? {
            Err(e) if e.is_connection_dropped() => {
                debug!(error = %e, "the connection was dropped; sending again");
                // The first send may have been applied: the resend's error is not
                // "not sent", whatever it met.
                self.query(&mut conn, cmd, wait)
                    .await?
                    .map_err(|e| from_redis_after(&self.inner.config, e, true))
            }
            other => other.map_err(|e| self.error(e)),
        }
    }

    /// One request: `cmd`, and `WAIT` in the same pipeline when `wait` and replicas
    /// are to be waited for. The driver's error is left for the caller to act on; too
    /// few replicas acknowledging is an [`ErrorKind::Unavailable`] error.
    async fn query<T: FromRedisValue>(
        &self,
        conn: &mut Conn,
        cmd: &redis::Cmd,
        wait: bool,
    ) -> Result<redis::RedisResult<T>> {
        let replicas = self.inner.config.wait_replicas;
        if !(wait && replicas > 0) {
            return Ok(cmd.query_async::<T>(conn).await);
        }
        let timeout_ms =
            u64::try_from(self.inner.config.wait_timeout.as_millis()).unwrap_or(u64::MAX);
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(replicas)
            .arg(timeout_ms);
        match pipe.query_async::<(T, u32)>(conn).await {
            Ok((value, acked)) if acked >= replicas => Ok(Ok(value)),
            Ok((_, acked)) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("only {acked} of {replicas} replicas acknowledged the write in time"),
            )
            .with_backend(NAME)),
            Err(e) => Ok(Err(e)),
        }
    }

    /// Redlock's second step on this master: makes `fence` the fence of the grant
    /// `request` took here and raises the key's counter to it. `false` when the owner
    /// no longer holds the key here.
    pub(crate) async fn commit_fence(&self, request: &AcquireRequest, fence: u64) -> Result<bool> {
        let lock = self.lock_key(request.key());
        let committed: i64 = self
            .run(
                &self.inner.scripts.commit,
                &[&lock, &Self::fence_key(&lock)],
                &[
                    &request.owner().to_hex(),
                    &fence.to_string(),
                    &millis(request.ttl() + self.inner.config.fence_grace),
                ],
                false,
            )
            .await?;
        Ok(committed == 1)
    }

    /// Compare-and-delete of `owner`'s lease on `key`; the key's waiters are told
    /// (its release channel) only when `tell`: a Redlock attempt that won only a
    /// minority of masters takes its grants back without waking anyone.
    ///
    /// The release first names the lock alone (release_plain.lua): a request of half
    /// the bytes of the full one, which is what an uncontended cycle's client CPU and
    /// throughput turn on (distlock/guides/benchmarks.md). A grant that fair waiters queued for is
    /// left to release.lua, which hands the lock to the head of the queue in its own
    /// step, one round trip later. A fair lock's release, where waiters are expected,
    /// sends release.lua at once (`FairBackend::release_in_turn`).
    pub(crate) async fn release_telling(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        tell: bool,
    ) -> Result<ReleaseOutcome> {
        let lock = self.lock_key(key);
        let owner = owner.to_hex();
        if let Some(released) = self.release_plain(&lock, &owner, tell).await? {
            return Ok(released);
        }
        self.release_full(key, &lock, &owner, tell).await
    }

    /// release_plain.lua: the release naming the lock alone. `None` where a fair
    /// waiter queued for the grant, which is still held.
    async fn release_plain(
        &self,
        lock: &str,
        owner: &str,
        tell: bool,
    ) -> Result<Option<ReleaseOutcome>> {
        // The channel's name is made from the lock's by the script, where it
        // publishes: the prefix's length is all it needs.
        let prefix = match tell {
            true => self.inner.config.prefix.len().to_string(),
            false => String::new(),
        };
        let released: i64 = self
            .run(
                &self.inner.scripts.release_plain,
                &[lock],
                &[owner, prefix.as_str()],
                false,
            )
            .await?;
        Ok(match released {
            1 => Some(ReleaseOutcome::Released),
            0 => Some(ReleaseOutcome::NotHeld),
            // 2: a fair waiter queued for this grant, which is still held.
            _ => None,
        })
    }

    /// release.lua: the release that hands the lock to the head of its queue in the
    /// same step.
    async fn release_full(
        &self,
        key: &LockKey,
        lock: &str,
        owner: &str,
        tell: bool,
    ) -> Result<ReleaseOutcome> {
        let channel = self.channel_if(key, tell);
        let [queue, places, ttls, fence] = Self::queue_keys(lock);
        let (handoff, grace) = self.release_args(tell);
        let released: i64 = self
            .run(
                &self.inner.scripts.release,
                &[lock, &queue, &places, &ttls, &fence],
                &[owner, &channel, handoff, &grace],
                false,
            )
            .await?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    /// The holder of `key` here and its owner token (kept inside the crate), or `None`.
    pub(crate) async fn holder(&self, key: &LockKey) -> Result<Option<(LockInfo, String)>> {
        let found: Option<(String, String, String, String)> = self
            .run(
                &self.inner.scripts.inspect,
                &[&self.lock_key(key)],
                &[] as &[&str],
                false,
            )
            .await?;
        let Some((fence, pttl, owner, rest)) = found else {
            return Ok(None);
        };
        let remaining = pttl
            .parse::<i64>()
            .ok()
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(0);
        let (holder, granted_at) = stored_holder(&rest);
        let info = LockInfo::new(
            parse_stored_fence(&fence)?,
            Duration::from_millis(remaining),
        )
        .held_by(holder, granted_at);
        Ok(Some((info, owner)))
    }

    /// The keys whose lock records exist here under `prefix`, free or not: `SCAN` on
    /// one server (in batches, so the server is never blocked for long), `KEYS` on a
    /// Redis Cluster, which sends it to every master and joins their answers (each
    /// master walks its keys at once).
    pub(crate) async fn lock_keys(&self, prefix: &str) -> Result<Vec<LockKey>> {
        let start = format!("{}{{", self.inner.config.prefix);
        let pattern = format!("{}{}*}}", glob_escape(&start), glob_escape(prefix));
        let mut conn = self.inner.conn.clone();
        let mut found: Vec<String> = Vec::new();
        if conn.is_cluster() {
            found = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.error(e))?;
        } else {
            let mut cursor = 0u64;
            loop {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| self.error(e))?;
                found.extend(batch);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        // A lock's record is exactly `<prefix>{key}`: its fence counter and queue keys
        // end otherwise, and a name that is no lock key is not one of ours.
        Ok(found
            .iter()
            .filter_map(|full| full.strip_prefix(&start)?.strip_suffix('}'))
            .filter_map(|name| LockKey::new(name).ok())
            .filter(|key| key.as_str().starts_with(prefix))
            .collect())
    }

    /// The acquire step: plain, or in turn with a place in the key's queue that lasts
    /// `place`. On a Redlock master, `granted_at` is the grant's time, which the
    /// Redlock reads once for all its masters.
    pub(crate) async fn grant(
        &self,
        request: &AcquireRequest,
        place: Option<Duration>,
        granted_at: SystemTime,
    ) -> Result<Grant> {
        if place.is_none() && !request.fenced() {
            return self.grant_unfenced(request, granted_at).await;
        }
        let lock = self.lock_key(request.key());
        let fence_key = Self::fence_key(&lock);
        // The queue's keys only for the fair step.
        let [queue, places, ttls, _] = match place {
            Some(_) => Self::queue_keys(&lock),
            None => Default::default(),
        };
        let owner = request.owner().to_hex();
        let (ttl, counter_ttl) = (
            millis(request.ttl()),
            millis(request.ttl() + self.inner.config.fence_grace),
        );
        // A Redlock master's flag, the fair step's place ('0' outside it), the holder
        // stored with the grant, and on a Redlock master the grant's time by this
        // client's clock, so that every master stores the same one.
        let flag = if self.inner.config.redlock_member {
            "1"
        } else {
            "0"
        };
        let place_ms = place.map_or_else(|| "0".to_owned(), millis);
        let granted_ms = granted_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
            .to_string();
        let mut args = vec![
            owner.as_str(),
            &ttl,
            &counter_ttl,
            flag,
            &place_ms,
            request.holder().encoded(),
        ];
        if self.inner.config.redlock_member {
            args.push(&granted_ms);
        }
        let (script, keys) = match place {
            None => (&self.inner.scripts.acquire, vec![&*lock, &*fence_key]),
            Some(_) => (
                &self.inner.scripts.queued,
                vec![&*lock, &*fence_key, &*queue, &*places, &*ttls],
            ),
        };
        let sent_at = Instant::now();
        let reply: Result<Vec<String>> = self.run(script, &keys, &args, true).await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if self.inner.config.wait_replicas > 0 && e.kind() == ErrorKind::Unavailable => {
                // The primary may have granted what too few replicas saw: give it back.
                let _ = self.release(request.key(), request.owner()).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let [granted, value, rest @ ..] = reply.as_slice() else {
            return Err(unexpected("a reply of fewer than two values"));
        };
        let channel = place.map(|_| self.channel(request.key()));
        if granted == "0" {
            if let (Some(channel), [latest]) = (&channel, rest) {
                let latest = parse_u64(latest, "a latest fence that is not a number")?;
                let owner = *request.owner();
                self.inner
                    .handoffs
                    .turned_down(channel, owner, sent_at, latest);
            }
            let pttl = value
                .parse::<i64>()
                .ok()
                .and_then(|ms| u64::try_from(ms).ok());
            return Ok(Grant::Held {
                remaining: pttl.map(Duration::from_millis),
            });
        }
        if let Some(channel) = &channel {
            // Granted by its own step: the wait is over.
            self.inner.handoffs.forget(channel, *request.owner());
        }
        Ok(Grant::Granted(parse_fence(value)?))
    }

    /// An efficiency lock's plain grant: one `SET NX PX GET`, no script and no fence, as
    /// cheap as the unfenced Redis locks' acquire. The value is a fenced grant's with
    /// fence 0 (`"<owner>:0/<ms>/<holder>/"`, acquire.lua), so that every other step
    /// reads it as it reads theirs; its grant time is `granted_at`, the client's
    /// clock. The value `GET` returns tells a retry of this very request whose reply
    /// was lost (the grant is this owner's already: its expiry is restarted, as
    /// extend.lua restarts it) from another holder, whose grant the waiter then marks
    /// as waited for (mark.lua, a second round trip that only a waiter takes), so that
    /// its release tells the waiters, as acquire.lua marks it in its own step.
    async fn grant_unfenced(
        &self,
        request: &AcquireRequest,
        granted_at: SystemTime,
    ) -> Result<Grant> {
        let lock = self.lock_key(request.key());
        let owner = request.owner().to_hex();
        let granted_ms = granted_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let value = format!("{owner}:0/{granted_ms}/{}/", request.holder().encoded());
        let mut set = redis::Cmd::with_capacity(7, lock.len() + value.len() + 32);
        set.arg("SET")
            .arg(&lock)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(millis(request.ttl()))
            .arg("GET");
        let previous: Option<String> = match self.send(&set, true).await {
            Ok(previous) => previous,
            Err(e) if self.inner.config.wait_replicas > 0 && e.kind() == ErrorKind::Unavailable => {
                // The primary may have granted what too few replicas saw: give it back.
                let _ = self.release(request.key(), request.owner()).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let Some(current) = previous else {
            return Ok(Grant::Granted(FencingToken::NONE));
        };
        let mine = current.len() > owner.len()
            && current.starts_with(&owner)
            && current.as_bytes()[owner.len()] == b':';
        if !mine {
            if current.ends_with('!') {
                return Ok(Grant::Held { remaining: None });
            }
            let marked: i64 = self
                .run(&self.inner.scripts.mark, &[&lock], &[&current], false)
                .await?;
            // Released or taken again between the two steps: no release will tell
            // this waiter, so it asks again at once.
            let remaining = (marked == 0).then_some(Duration::ZERO);
            return Ok(Grant::Held { remaining });
        }
        match self.restart_expiry(&lock, &owner, request.ttl()).await? {
            Some(fence) => Ok(Grant::Granted(parse_stored_fence(&fence)?)),
            // It ran out since: the key is free, or another's.
            None => Ok(Grant::Held { remaining: None }),
        }
    }

    /// extend.lua: restarts the expiry of `owner`'s lease on `lock` at `ttl`. The
    /// lease's fence as stored ("0" for an efficiency lock's), or `None` when `owner`
    /// no longer holds it.
    async fn restart_expiry(
        &self,
        lock: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<String>> {
        self.run(
            &self.inner.scripts.extend,
            &[lock, &Self::fence_key(lock)],
            &[
                owner,
                &millis(ttl),
                &millis(ttl + self.inner.config.fence_grace),
            ],
            true,
        )
        .await
    }

    /// Loads every script (one pipeline): whether the server answers and accepts the
    /// credentials, and the first acquire finds its script there.
    pub(crate) async fn prepare(&self) -> Result<()> {
        let mut conn = self.inner.conn.clone();
        let mut pipe = redis::pipe();
        for source in SOURCES {
            pipe.cmd("SCRIPT").arg("LOAD").arg(source);
        }
        pipe.query_async::<Vec<String>>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| self.error(e))
    }
}

/// The holder and grant time a lock's value stores after its fence (acquire.lua):
/// `rest` is the value from the fence on, `"<fence>/<ms>/<holder>/"` and any marks.
/// `None`s for a value stored without them.
pub(crate) fn stored_holder(rest: &str) -> (Option<Holder>, Option<SystemTime>) {
    let stored = rest
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches('!')
        .strip_prefix('/')
        .and_then(|s| s.strip_suffix('/'))
        .and_then(|s| s.split_once('/'));
    let Some((ms, holder)) = stored else {
        return (None, None);
    };
    let granted_at = ms
        .parse::<u64>()
        .ok()
        .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    match Holder::decode(holder) {
        Some(holder) => (Some(holder), granted_at),
        None => (None, None),
    }
}

/// `text` with the characters a Redis glob pattern gives meaning to escaped.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

pub(crate) fn millis(ttl: Duration) -> String {
    use std::fmt::Write as _;
    // Sized for any u128 at once: `to_string` would grow it as it writes.
    let mut text = String::with_capacity(39);
    let _ = write!(text, "{}", ttl.as_millis());
    text
}

/// `parts` joined, in a string sized for them at once: a `format!` that starts with
/// an argument grows its buffer as it writes, and these names are made on every lock
/// operation.
fn joined(parts: &[&str]) -> String {
    let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        text.push_str(part);
    }
    text
}

pub(crate) fn parse_u64(text: &str, what: &str) -> Result<u64> {
    text.parse().map_err(|_| unexpected(what))
}

/// A fence a script answered: a positive integer, or an unexpected answer.
pub(crate) fn parse_fence(text: &str) -> Result<FencingToken> {
    let raw = text
        .parse()
        .map_err(|_| unexpected("a fence that is not a number"))?;
    FencingToken::from_server(raw).map_err(|e| e.with_backend(NAME))
}

/// A lock's fence as its value stores it: a fence, or "0" for an efficiency lock's
/// grant, which carries none.
pub(crate) fn parse_stored_fence(text: &str) -> Result<FencingToken> {
    match text {
        "0" => Ok(FencingToken::NONE),
        text => parse_fence(text),
    }
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.grant(request, request.place(), SystemTime::now())
            .await
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        self.inner.sets.then_some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.release_telling(key, owner, true).await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let lock = self.lock_key(request.key());
        let fence = self
            .restart_expiry(&lock, &request.owner().to_hex(), request.ttl())
            .await?;
        Ok(match fence {
            None => Renewal::NotHeld,
            Some(_) => Renewal::Renewed,
        })
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        Ok(self.holder(key).await?.map(|(info, _)| info))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.watch_channel(self.channel(key), None).await
    }

    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }
}

#[async_trait]
impl FairBackend for RedisBackend {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let lock = self.lock_key(key);
        let [queue, places, ttls, fence] = Self::queue_keys(&lock);
        let channel = self.channel(key);
        let (handoff, grace) = self.release_args(true);
        self.inner.handoffs.forget(&channel, *owner);
        let _: i64 = self
            .run(
                &self.inner.scripts.leave,
                &[&queue, &places, &ttls, &lock, &fence],
                &[&owner.to_hex(), &channel, handoff, &grace],
                false,
            )
            .await?;
        Ok(())
    }

    /// The full release at once: a fair lock's grant is where fair waiters queue, and
    /// the plain release would find their mark and send this one a round trip later.
    async fn release_in_turn(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let lock = self.lock_key(key);
        self.release_full(key, &lock, &owner.to_hex(), true).await
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        // A release names the head of the queue (handoff.lua): only it is woken, and
        // told of the grant it was handed.
        let channel = self.channel(key);
        self.inner.handoffs.expect(&channel, *owner);
        self.watch_channel(channel, Some(&owner.to_hex())).await
    }

    fn handoffs(&self) -> Option<&dyn Handoffs> {
        self.inner.hands_over.then_some(self)
    }
}

impl Handoffs for RedisBackend {
    fn handed_over(&self, key: &LockKey, owner: &OwnerToken) -> Option<Handoff> {
        self.inner.handoffs.take(&self.channel(key), *owner)
    }
}

#[async_trait]
impl SetBackend for RedisBackend {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        if !self.inner.sets {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "a set of keys is taken in one step on one Redis server only, not on a cluster or a Redlock master",
            )
            .with_backend(NAME));
        }
        let mut keys = Vec::with_capacity(2 * requests.len());
        let mut args = Vec::with_capacity(3 * requests.len());
        for request in requests {
            let lock = self.lock_key(request.key());
            let fence = Self::fence_key(&lock);
            keys.push(lock);
            keys.push(fence);
            args.push(request.owner().to_hex());
            args.push(millis(request.ttl()));
            args.push(millis(request.ttl() + self.inner.config.fence_grace));
        }
        // Core asks for a set with one holder.
        if let Some(first) = requests.first() {
            args.push(first.holder().encoded().to_owned());
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let reply: Result<Vec<String>> = self
            .run(&self.inner.scripts.acquire_all, &keys, &args, true)
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) if self.inner.config.wait_replicas > 0 && e.kind() == ErrorKind::Unavailable => {
                // The primary may have granted what too few replicas saw: give it back.
                for request in requests {
                    let _ = self.release(request.key(), request.owner()).await;
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        match reply.split_first() {
            Some((granted, fences)) if granted == "1" => fences
                .iter()
                .map(|f| parse_fence(f))
                .collect::<Result<Vec<_>>>()
                .map(SetGrant::Granted),
            Some((_, held)) => {
                let index = held
                    .first()
                    .and_then(|i| i.parse::<usize>().ok())
                    .and_then(|i| i.checked_sub(1))
                    .unwrap_or(0);
                let remaining = held
                    .get(1)
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .map(Duration::from_millis);
                Ok(SetGrant::Held { index, remaining })
            }
            None => Err(
                Error::new(ErrorKind::Backend, "the set's script answered nothing")
                    .with_backend(NAME),
            ),
        }
    }
}

#[async_trait]
impl OperatorBackend for RedisBackend {
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let mut held = Vec::new();
        for key in self.lock_keys(prefix).await? {
            if let Some((info, _owner)) = self.holder(&key).await? {
                held.push((key, info));
            }
        }
        Ok(held)
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let deleted: i64 = self
            .run(
                &self.inner.scripts.force_release,
                &[&self.lock_key(key)],
                &[&self.channel(key)],
                false,
            )
            .await?;
        Ok(deleted == 1)
    }
}

impl RedisBackend {
    /// Waits on `channel`: the release notifications of a lock or of a name's permits.
    ///
    /// Every step is bounded by the backend's own time-outs (the pub/sub connection by
    /// `connect_timeout_ms` then `response_timeout_ms`, each `SUBSCRIBE` by
    /// `response_timeout_ms`), so that a stalled server holds the backend's other
    /// waiters, queued behind this one, no longer than that; and the step is
    /// cancel-safe: a caller dropped mid-subscribe (its deadline passed) leaves no
    /// registration that the next waiter of the channel would take for a subscription.
    pub(crate) async fn watch_channel(
        &self,
        channel: String,
        tag: Option<&str>,
    ) -> Result<Option<ChangeStream>> {
        let config = &self.inner.config;
        let mut slot = self.inner.watcher.lock().await;
        if slot.as_ref().is_none_or(|s| !s.waiters.is_open()) {
            let conn = &self.inner.conn;
            let connect = async {
                conn.pubsub_client(&self.inner.client)
                    .await?
                    .get_async_pubsub()
                    .await
            };
            let pubsub =
                tokio::time::timeout(config.connect_timeout + config.response_timeout, connect)
                    .await
                    .map_err(|_| connect_timed_out(config))?
                    .map_err(|e| self.error(e))?;
            *slot = Some(Subscriber::start(pubsub, self.inner.handoffs.clone()));
        }
        let Some(subscriber) = slot.as_mut() else {
            return Err(unexpected("no subscriber"));
        };
        let registration = match tag {
            Some(tag) => subscriber.waiters.register_tagged(&channel, tag),
            None => subscriber.waiters.register(&channel),
        };
        if registration.first {
            // Until the server confirms, the registration is forgotten if this future
            // is dropped, and the next waiter subscribes again.
            let mut unconfirmed = Unconfirmed(Some((subscriber.waiters.clone(), channel.clone())));
            let subscribe = subscriber.sink.subscribe(&channel);
            match tokio::time::timeout(config.response_timeout, subscribe).await {
                Ok(Ok(())) => unconfirmed.0 = None,
                Ok(Err(e)) => return Err(self.error(e)),
                Err(_) => {
                    // What the connection will still deliver is unknown: the next
                    // waiter starts a connection of its own.
                    *slot = None;
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "redis did not confirm a SUBSCRIBE within {:?} (response_timeout_ms={}) ({})",
                            config.response_timeout,
                            config.response_timeout.as_millis(),
                            config.endpoint_list()
                        ),
                    )
                    .with_backend("redis"));
                }
            }
        }
        for unused in registration.pruned {
            let unsubscribe = subscriber.sink.unsubscribe(&unused);
            match tokio::time::timeout(config.response_timeout, unsubscribe).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(error = %e, "unsubscribe failed"),
                Err(_) => debug!("unsubscribe was not confirmed in time"),
            }
        }
        Ok(Some(registration.changes))
    }
}

/// A channel's first registration until the server confirms its `SUBSCRIBE`: dropped
/// armed, it forgets the registration.
struct Unconfirmed(Option<(Arc<WakeRegistry>, String)>);

impl Drop for Unconfirmed {
    fn drop(&mut self) {
        if let Some((waiters, channel)) = self.0.take() {
            waiters.forget(&channel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RedlockConfig;

    /// Built without a connection (lazily): no request is sent.
    fn lazily(config: RedisConfig) -> RedisBackend {
        RedisBackend::connect_lazily(config).expect("a lazy backend")
    }

    #[tokio::test]
    async fn a_release_hands_over_alone_and_without_replicas_to_wait_for() {
        let url = "redis://127.0.0.1:6379";
        let config = RedisConfig::from_url(url).expect("url");
        assert!(lazily(config.clone()).handoffs().is_some());
        // Grants that wait for replicas: the release does not, so it hands nothing over.
        let waiting = config.with_wait_replicas(1, Duration::from_millis(100));
        assert!(lazily(waiting).handoffs().is_none());
        // A Redlock master: the majority decides a grant, not one master's release.
        let redlock =
            RedlockConfig::from_url("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3").expect("url");
        for member in redlock.members() {
            let master = lazily(member.clone());
            assert!(master.fair().is_some());
            assert!(master.handoffs().is_none());
        }
    }
}
