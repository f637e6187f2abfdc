//! A master behind Redis Sentinel (`redis-sentinel://`): found through the Sentinels
//! before the first request, and found again after a request shows it lost (its
//! connection gone, or a write refused by a server that is now a replica).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{RedisError, RedisFuture, ServerErrorKind};
use tracing::debug;

use crate::config::RedisConfig;

/// The connection to whichever server the Sentinels name master. Clones share it.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<Shared>,
}

struct Shared {
    config: RedisConfig,
    /// The settings of each master's connection manager.
    manager: ConnectionManagerConfig,
    /// Asks the Sentinels; one lookup at a time.
    lookup: tokio::sync::Mutex<SentinelClient>,
    /// The master found last, until a request shows it lost.
    master: Mutex<Option<Master>>,
    /// How many lookups have found a master: each master's number.
    lookups: AtomicU64,
}

/// A master the Sentinels named, with the connection to it.
#[derive(Clone)]
struct Master {
    client: redis::Client,
    conn: ConnectionManager,
    /// Which lookup found it: a request that shows it lost forgets this one only, not
    /// a master found since (a request sent to the old master may fail after the
    /// new one was found).
    found: u64,
}

impl SentinelConn {
    /// The Sentinels of `config`, asked for the master at once (its connection made
    /// with `manager`): wrong credentials and a master name the Sentinels do not
    /// monitor fail here.
    pub(crate) async fn connect(
        config: &RedisConfig,
        manager: ConnectionManagerConfig,
    ) -> Result<Self, RedisError> {
        let sentinels: Vec<String> = config
            .endpoints
            .iter()
            .map(|e| format!("redis://{e}"))
            .collect();
        // The data servers' credentials, database and protocol, as a URL gives them.
        let settings = redis::Client::open(config.driver_url())?
            .get_connection_info()
            .redis_settings()
            .clone();
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(settings);
        let name = config.master_name.clone().unwrap_or_default();
        let lookup =
            SentinelClient::build(sentinels, name, Some(node), SentinelServerType::Master)?;
        Self::with_client(lookup, config, manager).await
    }

    /// A service's own Sentinel client, asked for the master at once.
    pub(crate) async fn with_client(
        lookup: SentinelClient,
        config: &RedisConfig,
        manager: ConnectionManagerConfig,
    ) -> Result<Self, RedisError> {
        let conn = SentinelConn {
            shared: Arc::new(Shared {
                config: config.clone(),
                manager,
                lookup: tokio::sync::Mutex::new(lookup),
                master: Mutex::new(None),
                lookups: AtomicU64::new(0),
            }),
        };
        conn.master().await?;
        Ok(conn)
    }

    /// The driver's client of the master (for the pub/sub connection).
    pub(crate) async fn client(&self) -> Result<redis::Client, RedisError> {
        Ok(self.master().await?.client)
    }

    /// The master found last, or, when there is none, the one the Sentinels name now:
    /// the whole step (waiting for another caller's lookup included) within the
    /// connect and response time-outs.
    async fn master(&self) -> Result<Master, RedisError> {
        if let Some(master) = self.shared.current() {
            return Ok(master);
        }
        let config = &self.shared.config;
        let budget = config.connect_timeout + config.response_timeout;
        let found = tokio::time::timeout(budget, async {
            let mut lookup = self.shared.lookup.lock().await;
            // Found by the caller this one waited behind.
            if let Some(master) = self.shared.current() {
                return Ok(master);
            }
            let client = lookup.async_get_client().await?;
            let conn = client
                .get_connection_manager_with_config(self.shared.manager.clone())
                .await?;
            let found = self.shared.lookups.fetch_add(1, Ordering::Relaxed) + 1;
            let master = Master {
                client,
                conn,
                found,
            };
            debug!(master = %master.client.get_connection_info().addr(), "the Sentinels named a master");
            *self.shared.slot() = Some(master.clone());
            Ok(master)
        })
        .await;
        match found {
            Ok(found) => found,
            Err(_) => Err(not_found(
                config,
                &format!(
                    "no answer within {budget:?} (connect_timeout_ms={}, then response_timeout_ms={})",
                    config.connect_timeout.as_millis(),
                    config.response_timeout.as_millis()
                ),
            )),
        }
    }

    /// [`master`](Self::master) for a request: where there is none, the request is
    /// not sent, and its error says so (as a refused connection's does), with what the
    /// Sentinels answered; refused credentials stay what they are.
    async fn routed(&self) -> Result<Master, RedisError> {
        self.master().await.map_err(|e| {
            let refused = matches!(e.kind(), redis::ErrorKind::AuthenticationFailed)
                || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
            match refused || e.is_connection_refusal() {
                true => e,
                false => not_found(&self.shared.config, &e.to_string()),
            }
        })
    }

    /// Forgets `master` after a request that shows it is no longer reachable or no
    /// longer master: the next request asks the Sentinels again.
    fn forget_if_lost(&self, master: &Master, error: &RedisError) {
        let lost = error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || matches!(
                error.kind(),
                redis::ErrorKind::Server(ServerErrorKind::ReadOnly)
            )
            || matches!(
                error.code(),
                Some("READONLY" | "NOREPLICAS" | "MASTERDOWN" | "LOADING")
            );
        if lost {
            let mut slot = self.shared.slot();
            if slot.as_ref().is_some_and(|m| m.found == master.found) {
                debug!(%error, "the master is lost; the Sentinels are asked again");
                *slot = None;
            }
        }
    }
}

impl Shared {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Master>> {
        self.master.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self) -> Option<Master> {
        self.slot().clone()
    }
}

/// No master to send to: the request never left this process, as with a refused
/// connection (which is what the driver's error says, so that the backend's errors
/// say "not sent").
fn not_found(config: &RedisConfig, why: &str) -> RedisError {
    let name = config.master_name.as_deref().unwrap_or_default();
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!(
            "no master {name:?} found through the Sentinels at {}: {}",
            config.endpoint_list(),
            config.scrub(why.to_owned())
        ),
    ))
}

impl redis::aio::ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let mut master = self.routed().await?;
            let reply = master.conn.req_packed_command(cmd).await;
            if let Err(error) = &reply {
                self.forget_if_lost(&master, error);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let mut master = self.routed().await?;
            let reply = master
                .conn
                .req_packed_commands(pipeline, offset, count)
                .await;
            if let Err(error) = &reply {
                self.forget_if_lost(&master, error);
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.config.db
    }
}
