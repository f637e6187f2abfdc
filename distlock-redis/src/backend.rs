//! [`RedisBackend`]: the contract on one Redis server, one Lua script per operation.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireRequest, Capabilities, ChangeStream, Error, ErrorKind, ExtendRequest, FenceDurability,
    FencingToken, Grant, LockBackend, LockInfo, LockKey, OwnerToken, ReleaseOutcome, Renewal,
    Result, WakeRegistry,
};
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink};
use redis::{FromRedisValue, Script, ServerErrorKind, ToRedisArgs};
use tracing::debug;

use crate::config::RedisConfig;
use crate::error::{from_redis, unexpected};

const NAME: &str = "redis";

struct Scripts {
    acquire: Script,
    release: Script,
    extend: Script,
    inspect: Script,
    force_release: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: Script::new(include_str!("scripts/acquire.lua")),
            release: Script::new(include_str!("scripts/release.lua")),
            extend: Script::new(include_str!("scripts/extend.lua")),
            inspect: Script::new(include_str!("scripts/inspect.lua")),
            force_release: Script::new(include_str!("scripts/force_release.lua")),
        }
    }
}

/// A lock backend on one Redis server (or the primary of a replicated set).
///
/// One multiplexed connection serves every operation and reconnects by itself; a
/// second connection, opened on first use, carries release notifications (pub/sub).
/// Each operation is one Lua script called by hash (`EVALSHA`), falling back to
/// loading it when the server has forgotten it. Clones share the connections.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: RedisConfig,
    capabilities: Capabilities,
    conn: ConnectionManager,
    client: redis::Client,
    scripts: Scripts,
    watcher: tokio::sync::Mutex<Option<Subscriber>>,
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
        Self::with_config(RedisConfig::from_url(url)?).await
    }

    /// Connects with `config`.
    pub async fn with_config(config: RedisConfig) -> Result<Self> {
        let client = client(&config)?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = client
            .get_connection_manager_with_config(manager_config)
            .await
            .map_err(|e| from_redis(&config, e))?;
        let mut capabilities = Capabilities::default();
        capabilities.min_ttl = Duration::from_millis(10);
        capabilities.fence_durability = FenceDurability::FailsClosed;
        capabilities.leases_survive_restart = false;
        capabilities.change_notification = true;
        capabilities.force_release = true;
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                config,
                capabilities,
                conn,
                client,
                scripts: Scripts::new(),
                watcher: tokio::sync::Mutex::new(None),
            }),
        })
    }

    /// The settings in force.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    fn lock_key(&self, key: &LockKey) -> String {
        // The hash tag keeps the lock and its fence counter in one cluster slot.
        format!("{}{{{}}}", self.inner.config.prefix, key)
    }

    fn channel(&self, key: &LockKey) -> String {
        format!("{}released:{{{}}}", self.inner.config.prefix, key)
    }

    fn error(&self, e: redis::RedisError) -> Error {
        from_redis(&self.inner.config, e)
    }

    /// Runs `script` in one round trip: `EVALSHA`, and `WAIT` in the same pipeline when
    /// replicas are to be waited for; on `NOSCRIPT` the script is loaded and run again.
    pub(crate) async fn run<T: FromRedisValue, A: ToRedisArgs>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[A],
        wait: bool,
    ) -> Result<T> {
        let mut conn = self.inner.conn.clone();
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        let replicas = self.inner.config.wait_replicas;
        for attempt in 0..2 {
            let result = if wait && replicas > 0 {
                let timeout_ms =
                    u64::try_from(self.inner.config.wait_timeout.as_millis()).unwrap_or(u64::MAX);
                let mut pipe = redis::pipe();
                pipe.add_command(evalsha.clone())
                    .cmd("WAIT")
                    .arg(replicas)
                    .arg(timeout_ms);
                match pipe.query_async::<(T, u32)>(&mut conn).await {
                    Ok((value, acked)) if acked >= replicas => Ok(value),
                    Ok((_, acked)) => {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            format!(
                            "only {acked} of {replicas} replicas acknowledged the write in time"
                        ),
                        )
                        .with_backend(NAME))
                    }
                    Err(e) => Err(e),
                }
            } else {
                evalsha.query_async::<T>(&mut conn).await
            };
            match result {
                Err(e) if attempt == 0 && is_noscript(&e) => {
                    debug!("the server had no copy of the script; loading it");
                    script
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| self.error(e))?;
                }
                other => return other.map_err(|e| self.error(e)),
            }
        }
        Err(unexpected("the script could not be loaded"))
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
        || e.to_string().contains("NOSCRIPT")
}

fn millis(ttl: Duration) -> String {
    ttl.as_millis().to_string()
}

fn parse_u64(text: &str, what: &str) -> Result<u64> {
    text.parse().map_err(|_| unexpected(what))
}

/// The driver's client: with the URL's own CA and client certificate where it names
/// them (`rediss://` with this crate's `tls` feature).
fn client(config: &RedisConfig) -> Result<redis::Client> {
    // rustls needs a process-wide crypto provider; where the application chose none,
    // this crate's (ring) is installed. One already installed is kept.
    #[cfg(feature = "tls")]
    if config.driver_url.starts_with("rediss:")
        && rustls::crypto::CryptoProvider::get_default().is_none()
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let files = &config.tls_files;
    if files.ca.is_none() && files.cert.is_none() {
        return redis::Client::open(config.driver_url.as_str()).map_err(|e| from_redis(config, e));
    }
    #[cfg(feature = "tls")]
    {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| {
                distlock_core::support::config_error(
                    "redis",
                    format!("cannot read {}: {e}", path.display()),
                )
            })
        };
        let root_cert = files.ca.as_deref().map(read).transpose()?;
        let client_tls = match (&files.cert, &files.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        let certificates = redis::TlsCertificates {
            client_tls,
            root_cert,
        };
        redis::Client::build_with_tls(config.driver_url.as_str(), certificates)
            .map_err(|e| from_redis(config, e))
    }
    #[cfg(not(feature = "tls"))]
    Err(distlock_core::support::config_error(
        "redis",
        "ca_file and cert_file need the `tls` feature of distlock-redis",
    ))
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
        let lock = self.lock_key(request.key());
        let fence_key = format!("{lock}:fence");
        let owner = request.owner().to_hex();
        let reply: Result<(i64, String)> = self
            .run(
                &self.inner.scripts.acquire,
                &[&lock, &fence_key],
                &[
                    &owner,
                    &millis(request.ttl()),
                    &millis(request.ttl() + self.inner.config.fence_grace),
                ],
                true,
            )
            .await;
        let (granted, value) = match reply {
            Ok(reply) => reply,
            Err(e) if self.inner.config.wait_replicas > 0 && e.kind() == ErrorKind::Unavailable => {
                // The primary may have granted what too few replicas saw: give it back.
                let _ = self.release(request.key(), request.owner()).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        if granted == 0 {
            let pttl = value
                .parse::<i64>()
                .ok()
                .and_then(|ms| u64::try_from(ms).ok());
            return Ok(Grant::Held {
                remaining: pttl.map(Duration::from_millis),
            });
        }
        Ok(Grant::Granted(FencingToken::new(parse_u64(
            &value,
            "a fence that is not a number",
        )?)))
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let released: i64 = self
            .run(
                &self.inner.scripts.release,
                &[&self.lock_key(key)],
                &[&owner.to_hex(), &self.channel(key)],
                false,
            )
            .await?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let lock = self.lock_key(request.key());
        let fence: Option<String> = self
            .run(
                &self.inner.scripts.extend,
                &[&lock, &format!("{lock}:fence")],
                &[
                    &request.owner().to_hex(),
                    &millis(request.ttl()),
                    &millis(request.ttl() + self.inner.config.fence_grace),
                ],
                true,
            )
            .await?;
        Ok(match fence {
            None => Renewal::NotHeld,
            Some(_) => Renewal::Renewed,
        })
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let found: Option<(String, String)> = self
            .run(
                &self.inner.scripts.inspect,
                &[&self.lock_key(key)],
                &[] as &[&str],
                false,
            )
            .await?;
        let Some((fence, pttl)) = found else {
            return Ok(None);
        };
        let remaining = pttl
            .parse::<i64>()
            .ok()
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(0);
        Ok(Some(LockInfo {
            fence: FencingToken::new(parse_u64(&fence, "a fence that is not a number")?),
            remaining: Duration::from_millis(remaining),
        }))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let channel = self.channel(key);
        let mut slot = self.inner.watcher.lock().await;
        if slot.as_ref().is_none_or(|s| !s.waiters.is_open()) {
            let pubsub = self
                .inner
                .client
                .get_async_pubsub()
                .await
                .map_err(|e| self.error(e))?;
            *slot = Some(Subscriber::start(pubsub));
        }
        let Some(subscriber) = slot.as_mut() else {
            return Err(unexpected("no subscriber"));
        };
        let registration = subscriber.waiters.register(&channel);
        if registration.first {
            if let Err(e) = subscriber.sink.subscribe(&channel).await {
                subscriber.waiters.forget(&channel);
                return Err(self.error(e));
            }
        }
        for unused in registration.pruned {
            if let Err(e) = subscriber.sink.unsubscribe(&unused).await {
                debug!(error = %e, "unsubscribe failed");
            }
        }
        Ok(Some(registration.changes))
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

/// The pub/sub connection; its waiters are kept per channel in a [`WakeRegistry`].
struct Subscriber {
    sink: PubSubSink,
    waiters: Arc<WakeRegistry>,
}

impl Subscriber {
    fn start(pubsub: redis::aio::PubSub) -> Self {
        let (sink, mut stream) = pubsub.split();
        let waiters = Arc::new(WakeRegistry::new());
        let dispatch = waiters.clone();
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                dispatch.wake(msg.get_channel_name());
            }
            // The connection is gone: ending every stream makes waiters poll instead.
            dispatch.close_all();
        });
        Subscriber { sink, waiters }
    }
}
