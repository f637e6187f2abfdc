//! [`ZooKeeperBackend`]: the lock contract on ZooKeeper's TTL nodes.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ClockDrift, ExtendRequest, FenceDurability, Grant,
    OwnerToken, ReleaseOutcome, Renewal, RoundTrips,
};
use distlock_core::{Error, FencingToken, LockBackend, LockInfo, LockKey, Result};
use futures_util::future::join_all;
use zookeeper_client::Error as ZkError;
use zookeeper_client::{
    Acls, Client, CreateMode, CreateOptions, EventType, MultiWriteError, MultiWriteResult, Stat,
};

use crate::config::ZooKeeperConfig;
use crate::error::{ends_session, from_zk, timed_out};

/// The shortest TTL accepted: a few round trips to an ensemble, with room for the
/// clock-skew allowance.
const MIN_TTL: Duration = Duration::from_millis(50);

/// A lock backend on ZooKeeper (3.5.3 or later, with TTL nodes enabled); see the
/// crate's docs for how the contract maps onto it. Clones share the session.
#[derive(Clone)]
pub struct ZooKeeperBackend {
    inner: Arc<Inner>,
    capabilities: Capabilities,
}

/// The session, shared with the watches' streams: a new one is made when the last
/// one expired or was closed.
struct Inner {
    config: ZooKeeperConfig,
    session: Mutex<Option<Client>>,
    connecting: tokio::sync::Mutex<()>,
}

impl fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What a node under a key's node is: a lease (`l-<owner>`) or a fair waiter's place
/// (`p-<owner>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lease,
    Place,
}

/// A lease or place as read: its name, what it is, its TTL and its stat.
#[derive(Debug, Clone)]
struct Node {
    path: String,
    kind: Kind,
    owner: String,
    ttl_ms: i64,
    stat: Stat,
}

impl Node {
    /// The server time (ms since the epoch) after which it has expired.
    fn expires_at(&self) -> i64 {
        self.stat.mtime.saturating_add(self.ttl_ms)
    }

    /// Whether it was still unexpired at server time `now`.
    fn live_at(&self, now: i64) -> bool {
        now <= self.expires_at()
    }

    fn remaining_at(&self, now: i64) -> Duration {
        Duration::from_millis(u64::try_from(self.expires_at() - now).unwrap_or(0))
    }

    fn fence(&self) -> FencingToken {
        fence_of(&self.stat)
    }
}

fn fence_of(stat: &Stat) -> FencingToken {
    FencingToken::new(u64::try_from(stat.czxid).unwrap_or(0))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The key a segment made by [`encode_key`](crate::config::encode_key) names; `None` for any other node.
fn decode_key(segment: &str) -> Option<LockKey> {
    let encoded = segment.strip_prefix("k-")?;
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    LockKey::new(String::from_utf8(bytes).ok()?).ok()
}

/// A node's name and data read back as a lease or place; `None` for anything else.
fn parse_node(dir: &str, name: &str, data: &[u8], stat: Stat) -> Option<Node> {
    let (kind, owner) = if let Some(owner) = name.strip_prefix("l-") {
        (Kind::Lease, owner)
    } else if let Some(owner) = name.strip_prefix("p-") {
        (Kind::Place, owner)
    } else {
        return None;
    };
    let ttl_ms = i64::from_be_bytes(data.try_into().ok()?);
    Some(Node {
        path: format!("{dir}/{name}"),
        kind,
        owner: owner.to_owned(),
        ttl_ms,
        stat,
    })
}

/// Whether a driver error is only "the node is not there".
fn gone<T>(result: std::result::Result<T, ZkError>) -> std::result::Result<Option<T>, ZkError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(e),
    }
}

impl Inner {
    fn acls(&self) -> Acls<'static> {
        if self.config.user.is_some() {
            Acls::creator_all()
        } else {
            Acls::anyone_all()
        }
    }

    /// The session, made (and the root node created) when there is none or the last
    /// one ended.
    async fn client(&self) -> Result<Client> {
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
        let mut connector = Client::connector()
            .with_session_timeout(config.session_timeout)
            .with_connection_timeout(config.connect_timeout)
            .with_fail_eagerly();
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
        let client =
            match tokio::time::timeout(config.connect_timeout + config.timeout, connect).await {
                Ok(Ok(client)) => client,
                // Every server refused, or none answered within the connect time-out.
                Ok(Err(ZkError::NoHosts)) => {
                    return Err(Error::new(
                        distlock_core::ErrorKind::Unavailable,
                        format!(
                            "no server of {servers} could be reached within {:?} each (connect_timeout_ms={})",
                            config.connect_timeout,
                            config.connect_timeout.as_millis()
                        ),
                    )
                    .with_backend("zookeeper"))
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
    async fn run<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, ZkError>>,
    {
        let client = self.client().await?;
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

    fn dir(&self, key: &LockKey) -> String {
        self.config.key_node(key)
    }

    fn lease_path(&self, key: &LockKey, owner: &OwnerToken) -> String {
        format!("{}/l-{}", self.dir(key), owner.to_hex())
    }

    fn place_path(&self, key: &LockKey, owner: &OwnerToken) -> String {
        format!("{}/p-{}", self.dir(key), owner.to_hex())
    }

    /// A TTL node's options: ZooKeeper deletes it once it has gone unmodified for
    /// `ttl` (and has no children), which frees what a vanished client left.
    fn ttl_node(&self, ttl: Duration) -> CreateOptions<'static> {
        CreateMode::Persistent.with_acls(self.acls()).with_ttl(ttl)
    }

    /// The server's time now, in ms since the epoch: the modification time a write to
    /// the root node gets from the leader.
    fn server_now(
        &self,
        client: &Client,
    ) -> impl Future<Output = std::result::Result<i64, ZkError>> {
        let write = client.set_data(&self.config.root, &[], None);
        async move { Ok(write.await?.mtime) }
    }
}

/// The leases and places under `dir`, read in one round trip after `names` (the
/// children listed), each request sent before any answer is awaited.
async fn read_nodes(
    client: &Client,
    dir: &str,
    names: Vec<String>,
) -> std::result::Result<Vec<Node>, ZkError> {
    let reads = join_all(
        names
            .iter()
            .map(|name| client.get_data(&format!("{dir}/{name}"))),
    );
    let mut nodes = Vec::new();
    for (name, read) in names.iter().zip(reads.await) {
        if let Some((data, stat)) = gone(read)? {
            nodes.extend(parse_node(dir, name, &data, stat));
        }
    }
    Ok(nodes)
}

/// The owner's own lease node at `path`, as read: its data and what it says; `None`
/// when it is gone (or holds something else).
async fn own_lease(
    client: &Client,
    path: &str,
) -> std::result::Result<Option<(Vec<u8>, Node)>, ZkError> {
    let Some((data, stat)) = gone(client.get_data(path).await)? else {
        return Ok(None);
    };
    Ok(parse_node("", "l-", &data, stat).map(|node| (data, node)))
}

/// The children of `dir`, none when it does not exist.
async fn children(client: &Client, dir: &str) -> std::result::Result<Vec<String>, ZkError> {
    Ok(gone(client.list_children(dir).await)?.unwrap_or_default())
}

/// The holder among `nodes` at server time `now`: the live lease created first.
fn holder(nodes: &[Node], now: i64) -> Option<&Node> {
    nodes
        .iter()
        .filter(|n| n.kind == Kind::Lease && n.live_at(now))
        .min_by_key(|n| n.stat.czxid)
}

impl ZooKeeperBackend {
    /// Connects to the ensemble a `zookeeper://` URL names (see [`ZooKeeperConfig`])
    /// and makes sure the root node exists.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(ZooKeeperConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed (see [`ZooKeeperConfig`]), after
    /// [checking](ZooKeeperConfig::check) it.
    pub async fn connect_with(config: ZooKeeperConfig) -> Result<Self> {
        config.check()?;
        let mut capabilities = Capabilities::default();
        capabilities.min_ttl = MIN_TTL.max(config.max_clock_skew * 4);
        // ZooKeeper keeps a TTL in 40 bits of milliseconds; a year is well within.
        capabilities.fence_durability = FenceDurability::Durable;
        capabilities.leases_survive_restart = true;
        capabilities.change_notification = true;
        capabilities.force_release = true;
        capabilities.list = true;
        // A TTL node's TTL is fixed when it is created.
        capabilities.extend_any_ttl = false;
        capabilities.round_trips = RoundTrips {
            acquire: 4,
            release: 2,
            extend: 2,
        };
        capabilities.clock_drift = ClockDrift {
            per_million: 0,
            fixed: config.max_clock_skew,
        };
        capabilities.fair = true;
        let inner = Arc::new(Inner {
            config,
            session: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        });
        inner.client().await?;
        Ok(ZooKeeperBackend {
            inner,
            capabilities,
        })
    }

    /// The configuration it was made with.
    pub fn config(&self) -> &ZooKeeperConfig {
        &self.inner.config
    }

    /// Runs one operation on the backend's session, within its timeout, with its
    /// errors mapped as the backend's are (for the fenced store).
    pub(crate) async fn run<T, F, Fut>(&self, op: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, ZkError>>,
    {
        self.inner.run(op).await
    }

    /// The options of a persistent node with the backend's ACLs.
    pub(crate) fn persistent(&self) -> CreateOptions<'static> {
        CreateMode::Persistent.with_acls(self.inner.acls())
    }

    /// The plain grant: creates the owner's lease node, then reads the leases created
    /// before it. Granted when none of them is live (the expired ones are deleted,
    /// each only if unchanged since it was judged); otherwise its node is deleted
    /// again.
    async fn grant(
        inner: &Inner,
        client: &Client,
        key: &LockKey,
        owner: &OwnerToken,
        ttl: Duration,
    ) -> std::result::Result<Grant, ZkError> {
        let dir = inner.dir(key);
        let me = inner.lease_path(key, owner);
        let data = millis(ttl).to_be_bytes();
        let mut attempts = 0;
        // First round trip: the create, and the listing after it.
        let (mine, names) = loop {
            attempts += 1;
            let create = client.create(&me, &data, &inner.ttl_node(ttl));
            let listing = client.list_children(&dir);
            match create.await {
                Ok((stat, _)) => break (stat, listing.await?),
                Err(ZkError::NodeExists) => {
                    // A retry of a grant whose reply was lost: refresh it, and judge
                    // it afresh below.
                    let _ = listing.await;
                    match gone(client.set_data(&me, &data, None).await)? {
                        Some(stat) => break (stat, client.list_children(&dir).await?),
                        None if attempts < 3 => continue,
                        None => return Err(ZkError::NoNode),
                    }
                }
                Err(ZkError::NoNode) if attempts < 3 => {
                    // No node for the key yet: make it and the lease in one step. Any
                    // other lease in it is then younger than this one.
                    let _ = listing.await;
                    let mut multi = client.new_multi_writer();
                    multi.add_create(&dir, &[], &CreateMode::Container.with_acls(inner.acls()))?;
                    multi.add_create(&me, &data, &inner.ttl_node(ttl))?;
                    match multi.commit().await {
                        Ok(results) => {
                            let stat = match results.into_iter().nth(1) {
                                Some(MultiWriteResult::Create { stat, .. }) if stat.czxid > 0 => {
                                    stat
                                }
                                // Servers before 3.6.3 leave a create's stat in a multi
                                // empty (ZOOKEEPER-4026): read it back.
                                _ => client.get_data(&me).await?.1,
                            };
                            return Ok(Grant::Granted(fence_of(&stat)));
                        }
                        Err(MultiWriteError::OperationFailed {
                            source: ZkError::NodeExists,
                            ..
                        }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let now = mine.mtime;
        let mine_name = format!("l-{}", owner.to_hex());
        let others: Vec<String> = names
            .into_iter()
            .filter(|n| n.starts_with("l-") && *n != mine_name)
            .collect();
        // Second round trip: the leases ahead.
        let ahead: Vec<Node> = read_nodes(client, &dir, others)
            .await?
            .into_iter()
            .filter(|n| n.stat.czxid < mine.czxid)
            .collect();
        if let Some(holder) = holder(&ahead, now) {
            let remaining = holder.remaining_at(now);
            gone(client.delete(&me, None).await)?;
            return Ok(Grant::Held {
                remaining: Some(remaining),
            });
        }
        // Third: the expired leases ahead go, each only as it was judged.
        let deletes = join_all(
            ahead
                .iter()
                .map(|n| client.delete(&n.path, Some(n.stat.version))),
        );
        let mut renewed_meanwhile = false;
        for result in deletes.await {
            match result {
                Ok(()) | Err(ZkError::NoNode) => {}
                Err(ZkError::BadVersion) => renewed_meanwhile = true,
                Err(e) => return Err(e),
            }
        }
        if renewed_meanwhile {
            gone(client.delete(&me, None).await)?;
            return Ok(Grant::Held { remaining: None });
        }
        Ok(Grant::Granted(fence_of(&mine)))
    }

    /// What wakes a waiter next: the node it should watch (the first lease; for a fair
    /// waiter with a place, the place before its own), or `None` when nothing is
    /// ahead.
    async fn watched(
        client: &Client,
        dir: &str,
        owner: Option<&str>,
    ) -> std::result::Result<Option<String>, ZkError> {
        let nodes = read_nodes(client, dir, children(client, dir).await?).await?;
        let mine = owner.and_then(|o| nodes.iter().find(|n| n.kind == Kind::Place && n.owner == o));
        if let Some(mine) = mine {
            let before = nodes
                .iter()
                .filter(|n| n.kind == Kind::Place && n.stat.czxid < mine.stat.czxid)
                .max_by_key(|n| n.stat.czxid);
            if let Some(before) = before {
                return Ok(Some(before.path.clone()));
            }
        }
        Ok(nodes
            .iter()
            .filter(|n| n.kind == Kind::Lease && Some(n.owner.as_str()) != owner)
            .min_by_key(|n| n.stat.czxid)
            .map(|n| n.path.clone()))
    }

    /// A stream that yields when the node [`watched`](Self::watched) picks is deleted
    /// (a renewal's write only re-arms it), and at once when nothing is ahead: the
    /// waiter asks for its next item after an attempt that found the key held, so
    /// nothing ahead now means the key was freed since.
    fn changes(&self, key: &LockKey, owner: Option<&OwnerToken>) -> ChangeStream {
        let state = (
            self.inner.clone(),
            self.inner.dir(key),
            owner.map(OwnerToken::to_hex),
        );
        Box::pin(futures_util::stream::unfold(state, |state| async move {
            let (inner, dir, owner) = &state;
            loop {
                let client = inner.client().await.ok()?;
                let target = tokio::time::timeout(
                    inner.config.timeout,
                    Self::watched(&client, dir, owner.as_deref()),
                )
                .await
                .ok()?
                .ok()?;
                let Some(path) = target else {
                    break;
                };
                let watcher = match client.check_and_watch_stat(&path).await.ok()? {
                    (Some(_), watcher) => watcher,
                    (None, _) => break,
                };
                let event = watcher.changed().await;
                match event.event_type {
                    EventType::NodeDataChanged => continue,
                    EventType::Session if event.session_state.is_terminated() => return None,
                    _ => break,
                }
            }
            Some(((), state))
        }))
    }
}

#[async_trait]
impl LockBackend for ZooKeeperBackend {
    fn name(&self) -> &str {
        "zookeeper"
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        let inner = &self.inner;
        inner
            .run(|client| async move {
                Self::grant(
                    inner,
                    &client,
                    request.key(),
                    request.owner(),
                    request.ttl(),
                )
                .await
            })
            .await
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let me = self.inner.lease_path(key, owner);
        self.inner
            .run(|client| async move {
                // A renewal between the read and the delete changes the version: read
                // again, a few times.
                for _ in 0..5 {
                    let Some((data, node)) = own_lease(&client, &me).await? else {
                        return Ok(ReleaseOutcome::NotHeld);
                    };
                    let stat = node.stat;
                    // The delete, only of the version read; the write before it tells
                    // the server's time, to say whether the lease had already run out.
                    let mut multi = client.new_multi_writer();
                    multi.add_set_data(&me, &data, Some(stat.version))?;
                    multi.add_delete(&me, Some(stat.version.wrapping_add(1)))?;
                    match multi.commit().await {
                        Ok(results) => {
                            let now = match results.first() {
                                Some(MultiWriteResult::SetData { stat }) => stat.mtime,
                                _ => i64::MAX,
                            };
                            return Ok(if node.live_at(now) {
                                ReleaseOutcome::Released
                            } else {
                                ReleaseOutcome::NotHeld
                            });
                        }
                        Err(MultiWriteError::OperationFailed {
                            source: ZkError::NoNode,
                            ..
                        }) => return Ok(ReleaseOutcome::NotHeld),
                        Err(MultiWriteError::OperationFailed {
                            source: ZkError::BadVersion,
                            ..
                        }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(ZkError::BadVersion)
            })
            .await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let me = self.inner.lease_path(request.key(), request.owner());
        let fence = request.fence();
        self.inner
            .run(|client| async move {
                // Another renewal of the same lease between the read and the write
                // changes the version: read again, a few times.
                for _ in 0..5 {
                    let Some((data, node)) = own_lease(&client, &me).await? else {
                        return Ok(Renewal::NotHeld);
                    };
                    let stat = node.stat;
                    if node.fence() != fence {
                        return Ok(Renewal::NotHeld);
                    }
                    let renewed = match client.set_data(&me, &data, Some(stat.version)).await {
                        Ok(renewed) => renewed,
                        Err(ZkError::NoNode) => return Ok(Renewal::NotHeld),
                        Err(ZkError::BadVersion) => continue,
                        Err(e) => return Err(e),
                    };
                    if node.live_at(renewed.mtime) {
                        return Ok(Renewal::Renewed);
                    }
                    // It had run out before this write revived it: it goes, unanswered
                    // (a failed delete leaves a node that runs out again at its TTL).
                    drop(client.delete(&me, Some(renewed.version)));
                    return Ok(Renewal::NotHeld);
                }
                Err(ZkError::BadVersion)
            })
            .await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let inner = &self.inner;
        let dir = inner.dir(key);
        inner
            .run(|client| async move {
                let now = inner.server_now(&client);
                let names = children(&client, &dir);
                let (now, names) = (now.await?, names.await?);
                let nodes = read_nodes(&client, &dir, names).await?;
                Ok(holder(&nodes, now).map(|h| LockInfo {
                    fence: h.fence(),
                    remaining: h.remaining_at(now),
                }))
            })
            .await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        Ok(Some(self.changes(key, None)))
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        Ok(Some(self.changes(key, Some(owner))))
    }

    async fn try_grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
        let inner = &self.inner;
        let (key, owner) = (request.key(), request.owner());
        let dir = inner.dir(key);
        let mine = inner.place_path(key, owner);
        let data = millis(place).to_be_bytes();
        inner
            .run(|client| async move {
                // The place is made once and refreshed on every call; the write tells
                // the server's time.
                let mut attempts = 0;
                let (stat, names) = loop {
                    attempts += 1;
                    let create = client.create(&mine, &data, &inner.ttl_node(place));
                    let refresh = client.set_data(&mine, &data, None);
                    let listing = client.list_children(&dir);
                    match create.await {
                        Ok(_) | Err(ZkError::NodeExists) => {}
                        Err(ZkError::NoNode) if attempts < 3 => {
                            let _ = (refresh.await, listing.await);
                            let options = CreateMode::Container.with_acls(inner.acls());
                            match client.create(&dir, &[], &options).await {
                                Ok(_) | Err(ZkError::NodeExists) => continue,
                                Err(e) => return Err(e),
                            }
                        }
                        Err(e) => return Err(e),
                    }
                    match gone(refresh.await)? {
                        Some(stat) => break (stat, listing.await?),
                        // Deleted between the two (a force release of the queue).
                        None if attempts < 3 => continue,
                        None => return Err(ZkError::NoNode),
                    }
                };
                let now = stat.mtime;
                let mine_name = format!("p-{}", owner.to_hex());
                let lease_name = format!("l-{}", owner.to_hex());
                let others: Vec<String> = names
                    .into_iter()
                    .filter(|n| *n != mine_name && *n != lease_name)
                    .collect();
                let nodes = read_nodes(&client, &dir, others).await?;
                if let Some(h) = holder(&nodes, now) {
                    return Ok(Grant::Held {
                        remaining: Some(h.remaining_at(now)),
                    });
                }
                let ahead = nodes
                    .iter()
                    .any(|n| n.kind == Kind::Place && n.stat.czxid < stat.czxid && n.live_at(now));
                if ahead {
                    return Ok(Grant::Held { remaining: None });
                }
                let grant = Self::grant(inner, &client, key, owner, request.ttl()).await?;
                if let Grant::Granted(_) = grant {
                    gone(client.delete(&mine, None).await)?;
                }
                Ok(grant)
            })
            .await
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let mine = self.inner.place_path(key, owner);
        self.inner
            .run(|client| async move {
                gone(client.delete(&mine, None).await)?;
                Ok(())
            })
            .await
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let inner = &self.inner;
        let dir = inner.dir(key);
        inner
            .run(|client| async move {
                let now = inner.server_now(&client);
                let names = children(&client, &dir);
                let (now, names) = (now.await?, names.await?);
                let leases = names.into_iter().filter(|n| n.starts_with("l-")).collect();
                let nodes = read_nodes(&client, &dir, leases).await?;
                let held = holder(&nodes, now).is_some();
                for result in join_all(nodes.iter().map(|n| client.delete(&n.path, None))).await {
                    gone(result)?;
                }
                Ok(held)
            })
            .await
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let inner = &self.inner;
        inner
            .run(|client| async move {
                let now = inner.server_now(&client);
                let dirs = client.list_children(&inner.config.root);
                let (now, dirs) = (now.await?, dirs.await?);
                let keys: Vec<(LockKey, String)> = dirs
                    .into_iter()
                    .filter_map(|d| decode_key(&d).map(|k| (k, d)))
                    .filter(|(k, _)| k.as_str().starts_with(prefix))
                    .map(|(k, d)| (k, format!("{}/{d}", inner.config.root)))
                    .collect();
                let listings = join_all(keys.iter().map(|(_, dir)| client.list_children(dir)));
                let listings = listings.await;
                let reads = join_all(keys.iter().zip(listings).map(|((_, dir), names)| {
                    let client = &client;
                    async move {
                        let names = gone(names)?.unwrap_or_default();
                        let leases = names.into_iter().filter(|n| n.starts_with("l-")).collect();
                        read_nodes(client, dir, leases).await
                    }
                }));
                let mut held = Vec::new();
                for ((key, _), nodes) in keys.iter().zip(reads.await) {
                    if let Some(h) = holder(&nodes?, now) {
                        held.push((
                            key.clone(),
                            LockInfo {
                                fence: h.fence(),
                                remaining: h.remaining_at(now),
                            },
                        ));
                    }
                }
                Ok(held)
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::encode_key;

    #[test]
    fn keys_are_one_path_segment_and_come_back() {
        for key in [
            "a",
            ".",
            "..",
            "jobs/nightly",
            "zookeeper",
            "ключ 1",
            "100%",
            "k-x",
        ] {
            let segment = encode_key(key);
            assert!(
                !segment.contains('/') && segment.starts_with("k-"),
                "{segment}"
            );
            assert!(segment.is_ascii(), "{segment}");
            let back = decode_key(&segment).expect(key);
            assert_eq!(back.as_str(), key);
        }
        assert_eq!(decode_key("other"), None);
        assert_eq!(decode_key("k-%G1"), None);
        assert_eq!(decode_key("k-%4"), None);
    }
}
