//! The backend's connections: the one every operation is sent on (one server through a
//! connection manager, or a Redis Cluster), the driver's client made from the
//! settings (TLS files read here), and the pub/sub connection that carries release
//! notifications to waiters.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{HandoffBook, OwnerToken, WakeRegistry};
use distlock_core::Result;
use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSubSink};

use crate::config::RedisConfig;
use crate::error::from_redis;

/// The connection every operation is sent on: to one server (reconnecting by itself),
/// to a Redis Cluster (following its slots and redirections), or to the master the
/// Sentinels name (following a failover).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
    #[cfg(feature = "sentinel")]
    Sentinel(crate::sentinel::SentinelConn),
}

impl Conn {
    /// Whether this is a Redis Cluster's connection.
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            Conn::Single(_) => false,
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => true,
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => false,
        }
    }

    /// The driver's client to open the pub/sub connection with: `fixed`, the
    /// backend's own, except behind Sentinel, where it is the current master's.
    pub(crate) async fn pubsub_client(
        &self,
        fixed: &redis::Client,
    ) -> redis::RedisResult<redis::Client> {
        match self {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(sentinel) => sentinel.client().await,
            _ => Ok(fixed.clone()),
        }
    }
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.get_db(),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

/// The settings of the connection manager the backend opens: its time-outs and
/// reconnection.
///
/// A Redlock master's connection has no response time-out of its own: the Redlock
/// bounds every call it makes to a master by the node time-out, which is never longer
/// than `response_timeout` ([`RedlockConfig::node_timeout`](crate::RedlockConfig::node_timeout)),
/// so the driver's timer would only double the Redlock's, one more timer set and
/// cleared per call on every master.
pub(crate) fn manager_config(config: &RedisConfig) -> ConnectionManagerConfig {
    let response_timeout = (!config.redlock_member).then_some(config.response_timeout);
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(response_timeout)
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

/// The driver's client: with the URL's own CA and client certificate where it names
/// them (`rediss://` with this crate's `tls` feature).
pub(crate) fn client(config: &RedisConfig) -> Result<redis::Client> {
    // rustls needs a process-wide crypto provider; where the application chose none,
    // this crate's (ring) is installed. One already installed is kept.
    #[cfg(feature = "tls")]
    if config.tls && rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let files = &config.tls_files;
    if files.ca.is_none() && files.cert.is_none() {
        return redis::Client::open(config.driver_url()).map_err(|e| from_redis(config, e));
    }
    #[cfg(feature = "tls")]
    {
        let read = |path: &std::path::Path| {
            std::fs::read(path).map_err(|e| {
                distlock_core::backend::config_error(
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
        redis::Client::build_with_tls(config.driver_url(), certificates)
            .map_err(|e| from_redis(config, e))
    }
    #[cfg(not(feature = "tls"))]
    Err(distlock_core::backend::config_error(
        "redis",
        "ca_file and cert_file need the `tls` feature of distlock-redis",
    ))
}

/// The pub/sub connection; its waiters are kept per channel in a [`WakeRegistry`].
pub(crate) struct Subscriber {
    pub(crate) sink: PubSubSink,
    pub(crate) waiters: Arc<WakeRegistry>,
}

impl Subscriber {
    /// Starts dispatching the messages of `pubsub`: a release's message wakes the
    /// channel's waiters, and a handoff's also goes into `handoffs`.
    pub(crate) fn start(pubsub: redis::aio::PubSub, handoffs: Arc<HandoffBook>) -> Self {
        let (sink, mut stream) = pubsub.split();
        let waiters = Arc::new(WakeRegistry::new());
        let dispatch = waiters.clone();
        tokio::spawn(async move {
            while let Some(msg) = stream.next().await {
                let channel = msg.get_channel_name();
                // "<owner>:<fence>": a release handed the lock to that fair waiter;
                // "<owner>": it is the head of the queue; both wake it (and any racing
                // waiters). An empty message wakes every waiter of the channel.
                match std::str::from_utf8(msg.get_payload_bytes()) {
                    Ok(tag) if !tag.is_empty() => {
                        let (tag, fence) = match tag.split_once(':') {
                            Some((owner, fence)) => (owner, fence.parse::<u64>().ok()),
                            None => (tag, None),
                        };
                        if let (Some(owner), Some(fence)) = (OwnerToken::from_hex(tag), fence) {
                            handoffs.hand_over(channel, owner, fence);
                        }
                        dispatch.wake_tagged(channel, tag);
                    }
                    _ => dispatch.wake(channel),
                }
            }
            // The connection is gone: ending every stream makes waiters poll instead.
            dispatch.close_all();
        });
        Subscriber { sink, waiters }
    }
}
