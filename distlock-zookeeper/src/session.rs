//! The backend's ZooKeeper session: made on first use and again when the last one
//! expired or closed, every operation run on it within the response time-out, and the
//! paths and node options of a key's leases and places.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use distlock_core::backend::OwnerToken;
use distlock_core::{Error, LockKey, Result};
use zookeeper_client::Error as ZkError;
use zookeeper_client::{Acls, Client, Connector, CreateMode, CreateOptions, SessionState, Stat};

use crate::config::ZooKeeperConfig;
use crate::error::{ends_session, from_zk, timed_out};
use crate::node::millis;

/// The session, shared with the watches' streams: a new one is made when the last
/// one expired or was closed.
pub(crate) struct Inner {
    pub(crate) config: ZooKeeperConfig,
    /// The service's own connector, when the backend was made from one: each session
    /// is made from a clone of it, with its settings as the service made them.
    pub(crate) connector: Option<Connector>,
    pub(crate) session: Mutex<Option<Client>>,
    pub(crate) connecting: tokio::sync::Mutex<()>,
    /// The key nodes this backend made or found lately, so that an acquire makes the
    /// key's node first only when it may be missing; cleared when full.
    pub(crate) known_dirs: Mutex<HashSet<String>>,
    /// What this backend last wrote to each lease it granted or renewed lately, so
    /// that their release need not read them first; cleared when full.
    pub(crate) written: Mutex<HashMap<String, Written>>,
}

/// What a backend last wrote to one of its leases, by the lease node's path.
///
/// Only the lease's owner writes its node (the path names the acquisition), so its
/// last write this backend heard back from is the node's last write, or one before a
/// write whose answer was lost: the node's expiry as that write set it is never later
/// than the node's own (short of a new leader whose clock is behind, which the clock
/// skew allowance covers), and a lease judged live by it was live.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Written {
    /// The write's zxid, which orders the writes to the node as the server applied
    /// them.
    pub(crate) zxid: i64,
    /// The node's modification time as the write set it (server time, ms since the
    /// epoch).
    pub(crate) at: i64,
    /// The lease's TTL in ms, as its node holds it.
    pub(crate) ttl_ms: i64,
    /// Whether the lease's grant made the key's node: its release deletes that node
    /// too when nothing else is under it, in the same write, rather than leaving the
    /// emptied node to the server (a write of its own).
    pub(crate) made_dir: bool,
}

impl Written {
    /// A write whose answer was `stat`, to a lease of `ttl`.
    pub(crate) fn new(stat: &Stat, ttl: Duration, made_dir: bool) -> Self {
        Written {
            zxid: stat.mzxid,
            at: stat.mtime,
            ttl_ms: millis(ttl),
            made_dir,
        }
    }

    /// Whether the lease was still unexpired at server time `now`.
    pub(crate) fn live_at(&self, now: i64) -> bool {
        now <= self.at.saturating_add(self.ttl_ms)
    }
}

/// How many key nodes [`Inner::known_dirs`] remembers before it starts afresh.
const KNOWN_DIRS: usize = 4096;

/// How many leases [`Inner::written`] remembers before it starts afresh.
const KNOWN_LEASES: usize = 4096;

impl Inner {
    pub(crate) fn acls(&self) -> Acls<'static> {
        if self.config.creator_acl() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    /// The session, made (and the root node created) when there is none or the last
    /// one ended.
    pub(crate) async fn client(&self) -> Result<Client> {
        let cached = |slot: &Option<Client>| {
            slot.as_ref()
                .filter(|c| !c.state().is_terminated())
                .cloned()
        };
        if let Some(c) = cached(&self.session.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(c);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = cached(&self.session.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(c);
        }
        let config = &self.config;
        let mut connector = match &self.connector {
            Some(service) => service.clone(),
            None => Client::connector()
                .with_session_timeout(config.session_timeout)
                .with_connection_timeout(config.connect_timeout)
                .with_fail_eagerly(),
        };
        if let Some((user, password)) = &config.user {
            connector = connector.with_auth("digest", format!("{user}:{password}").as_bytes());
        }
        let servers = config.servers().join(",");
        let connect = async {
            let client = connector.connect(&servers).await?;
            let options = CreateMode::Persistent.with_acls(self.acls());
            client.mkdir(&config.root, &options).await?;
            Ok::<_, ZkError>(client)
        };
        let started = std::time::Instant::now();
        let client =
            match tokio::time::timeout(config.connect_timeout + config.timeout, connect).await {
                Ok(Ok(client)) => client,
                // Every server refused, or none answered within the connect time-out.
                // The driver does not say which; the time it took does: an answer
                // before the connect time-out means that each server failed at once.
                Ok(Err(ZkError::NoHosts)) => {
                    let fast = started.elapsed() < config.connect_timeout;
                    // A quick failure may also be a server of another protocol, which
                    // took the connection and answered what the driver could not read.
                    if fast && self.connector.is_none() {
                        if let Some(err) = foreign_server(config).await {
                            return Err(err);
                        }
                    }
                    let why = if fast {
                        "each refused the connection, or its name did not resolve".to_owned()
                    } else {
                        format!(
                            "each refused the connection or did not answer within {:?} (connect_timeout_ms={})",
                            config.connect_timeout,
                            config.connect_timeout.as_millis()
                        )
                    };
                    return Err(Error::new(
                        distlock_core::ErrorKind::Unavailable,
                        format!("no server of {servers} could be reached: {why}"),
                    )
                    .with_backend("zookeeper"));
                }
                Ok(Err(e)) => return Err(from_zk(config, e)),
                Err(_) => {
                    return Err(Error::new(
                        distlock_core::ErrorKind::Unavailable,
                        format!(
                            "no session with {} within {:?} (connect_timeout_ms={} + response_timeout_ms={})",
                            servers,
                            config.connect_timeout + config.timeout,
                            config.connect_timeout.as_millis(),
                            config.timeout.as_millis()
                        ),
                    )
                    .with_backend("zookeeper"))
                }
            };
        *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(client.clone());
        Ok(client)
    }

    /// Runs one operation on the session, within the timeout; a session that ended
    /// is dropped, so that the next call makes a new one.
    pub(crate) async fn run<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, ZkError>>,
    {
        // Without a session, the operation is never sent.
        let client = self.client().await.map_err(Error::with_not_sent)?;
        // While the session is disconnected, the driver keeps new requests and sends
        // them once it has reconnected, whenever that is: a grant sent now could be
        // made long after its caller was told it failed, and hold the key for a TTL
        // under an owner nobody knows. Nothing is sent until the session is back.
        if client.state() == SessionState::Disconnected {
            return Err(from_zk(&self.config, ZkError::ConnectionLoss).with_not_sent());
        }
        match tokio::time::timeout(self.config.timeout, op(client)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if ends_session(&e) {
                    *self.session.lock().unwrap_or_else(PoisonError::into_inner) = None;
                }
                Err(from_zk(&self.config, e))
            }
            Err(_) => Err(timed_out(&self.config)),
        }
    }

    /// Whether the key node `dir` was made or found lately (it may have gone since).
    pub(crate) fn dir_known(&self, dir: &str) -> bool {
        self.known_dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(dir)
    }

    /// Remembers that the key node `dir` exists.
    pub(crate) fn remember_dir(&self, dir: &str) {
        let mut known = self
            .known_dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if known.contains(dir) {
            return;
        }
        if known.len() >= KNOWN_DIRS {
            known.clear();
        }
        known.insert(dir.to_owned());
    }

    /// Forgets the key node `dir`: it was found gone.
    pub(crate) fn forget_dir(&self, dir: &str) {
        self.known_dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(dir);
    }

    /// Remembers a write to the lease at `lease` (a grant or a renewal), unless one
    /// applied after it is remembered already; `made_dir` is kept once set.
    pub(crate) fn wrote(&self, lease: &str, written: Written) {
        let mut all = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = all.get_mut(lease) {
            if written.zxid > known.zxid {
                let made_dir = known.made_dir;
                *known = Written {
                    made_dir: made_dir || written.made_dir,
                    ..written
                };
            }
            return;
        }
        if all.len() >= KNOWN_LEASES {
            all.clear();
        }
        all.insert(lease.to_owned(), written);
    }

    /// What was last written to the lease at `lease`, forgotten as it is told.
    pub(crate) fn take_written(&self, lease: &str) -> Option<Written> {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(lease)
    }

    pub(crate) fn dir(&self, key: &LockKey) -> String {
        self.config.key_node(key)
    }

    pub(crate) fn lease_path(&self, key: &LockKey, owner: &OwnerToken) -> String {
        format!("{}/l-{}", self.dir(key), owner.to_hex())
    }

    pub(crate) fn place_path(&self, key: &LockKey, owner: &OwnerToken) -> String {
        format!("{}/p-{}", self.dir(key), owner.to_hex())
    }

    /// A TTL node's options: ZooKeeper deletes it once it has gone unmodified for
    /// `ttl` (and has no children), which frees what a vanished client left.
    pub(crate) fn ttl_node(&self, ttl: Duration) -> CreateOptions<'static> {
        CreateMode::Persistent.with_acls(self.acls()).with_ttl(ttl)
    }

    /// The server's time now, in ms since the epoch: the modification time a write to
    /// the root node gets from the leader.
    pub(crate) fn server_now(
        &self,
        client: &Client,
    ) -> impl Future<Output = std::result::Result<i64, ZkError>> {
        let write = client.set_data(&self.config.root, &[], None);
        async move { Ok(write.await?.mtime) }
    }
}

/// What [`foreign_server`] sends: an HTTP request, which an HTTP server answers at
/// once, and whose first four bytes a ZooKeeper server reads as a frame length above
/// its limit, closing the connection without a word.
const PROBE: &[u8] = b"HEAD / HTTP/1.0\r\n\r\n";

/// The error for the first of `config`'s servers that answers [`PROBE`] (a ZooKeeper
/// server never does): it speaks another protocol. `None` where none answers.
async fn foreign_server(config: &ZooKeeperConfig) -> Option<Error> {
    let within = config
        .connect_timeout
        .min(std::time::Duration::from_secs(1));
    for server in config.servers() {
        let probe = distlock_core::backend::probe_endpoint(&server, PROBE, within).await;
        if matches!(probe, distlock_core::backend::Probe::Answered(_)) {
            let said = match probe.first_line() {
                Some(line) => format!(
                    "it answered {line:?} to a request a ZooKeeper server leaves unanswered"
                ),
                None => "it answered a request a ZooKeeper server leaves unanswered".to_owned(),
            };
            return Some(distlock_core::backend::wrong_protocol(
                "zookeeper",
                &server,
                "ZooKeeper",
                said,
            ));
        }
    }
    None
}
