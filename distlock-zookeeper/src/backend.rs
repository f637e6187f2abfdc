//! [`ZooKeeperBackend`]: the lock contract on ZooKeeper's TTL nodes.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ClockDrift, ExtendRequest, FairBackend,
    FenceDurability, Grant, HolderRecords, OperatorBackend, OwnerToken, ReleaseOutcome, Renewal,
    RoundTrips,
};
use distlock_core::{LockBackend, LockInfo, LockKey, Result};
use futures_util::future::join_all;
use zookeeper_client::Error as ZkError;
use zookeeper_client::{
    Client, Connector, CreateMode, CreateOptions, EventType, MultiWriteError, MultiWriteResult,
    Stat,
};

use crate::config::ZooKeeperConfig;
use crate::node::{
    children, decode_key, fence_of, gone, holder, lease_data, millis, own_lease, parse_node,
    read_nodes, Kind, Node,
};
use crate::session::{Inner, Written};

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

impl fmt::Debug for ZooKeeperBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How many times a grant step tries again when a node it needed was deleted under
/// it: the key's node emptied and deleted by another client's release, or a lease
/// node gone between its create and its refresh. Each such try means another client
/// made progress; under churn from several clients on an ensemble three tries were
/// not enough (a try answered an error while the key was only busy).
const CHURN_TRIES: u32 = 10;

impl ZooKeeperBackend {
    /// Connects to the ensemble a `zookeeper://` URL names (see [`ZooKeeperConfig`])
    /// and makes sure the root node exists.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(ZooKeeperConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed (see [`ZooKeeperConfig`]), after
    /// [checking](ZooKeeperConfig::check) it.
    pub async fn connect_with(config: ZooKeeperConfig) -> Result<Self> {
        Self::open(config, None).await
    }

    /// Makes the backend's sessions from the service's own `connector`, with the
    /// service's settings (its TLS, SASL or digest authentication, session and
    /// connection time-outs); `config` gives the servers and the lock settings (root,
    /// response time-out, clock-skew allowance).
    ///
    /// The backend takes a connector, not a [`Client`]: a ZooKeeper session can
    /// expire, and the backend must then make a new one, which only a connector can.
    /// It clones the connector for each session and never changes the service's;
    /// to it, it adds only `config`'s credentials, when there are any. The sessions are
    /// the backend's own (one at a time), apart from the service's. Making a session
    /// is bounded by `connect_timeout_ms` + `response_timeout_ms` whatever the
    /// connector's time-outs.
    ///
    /// A connector that authenticates by itself creates world-readable nodes unless
    /// `config` asks for [`with_creator_acl`](ZooKeeperConfig::with_creator_acl).
    ///
    /// ```no_run
    /// # async fn demo() -> distlock_core::Result<()> {
    /// use distlock_zookeeper::zookeeper_client::Client;
    /// use distlock_zookeeper::{Endpoint, ZooKeeperBackend, ZooKeeperConfig};
    ///
    /// // The service's connector, as it already builds it.
    /// let connector = Client::connector().with_auth("digest", b"svc:secret");
    /// let config = ZooKeeperConfig::new([Endpoint::new("zk1", 2181)])
    ///     .with_root("/svc/locks")
    ///     .with_creator_acl();
    /// let backend = ZooKeeperBackend::from_connector(connector, config).await?;
    /// # Ok(()) }
    /// ```
    pub async fn from_connector(connector: Connector, config: ZooKeeperConfig) -> Result<Self> {
        Self::open(config, Some(connector)).await
    }

    async fn open(config: ZooKeeperConfig, connector: Option<Connector>) -> Result<Self> {
        config.check()?;
        let mut capabilities = Capabilities::default();
        capabilities.min_ttl = MIN_TTL.max(config.max_clock_skew * 4);
        // ZooKeeper keeps a TTL in 40 bits of milliseconds; a year is well within.
        capabilities.fence_durability = FenceDurability::Durable;
        capabilities.leases_survive_restart = true;
        capabilities.change_notification = true;
        capabilities.holder_records = HolderRecords::ServerClock;
        // A TTL node's TTL is fixed when it is created.
        capabilities.extend_any_ttl = false;
        capabilities.round_trips = RoundTrips::new(5, 2, 2);
        capabilities.clock_drift = ClockDrift::new(0, config.max_clock_skew);
        let inner = Arc::new(Inner {
            config,
            connector,
            session: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            known_dirs: Mutex::default(),
            written: Mutex::default(),
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
        request: &AcquireRequest,
    ) -> std::result::Result<Grant, ZkError> {
        let (key, ttl) = (request.key(), request.ttl());
        let dir = inner.dir(key);
        let me = inner.lease_path(key, request.owner());
        let data = lease_data(ttl, request.holder());
        let mut attempts = 0;
        let (mine, names) = loop {
            attempts += 1;
            if !inner.dir_known(&dir) {
                // A key this backend has not seen lately, as every fresh key is: its
                // node and the lease in one `multi`, one write to the log. When it
                // succeeds the key's node is new, so no lease is ahead of this one.
                // When the node is there already, nothing is written, and the plain
                // create below follows.
                if let Some(stat) = Self::grant_fresh(inner, client, &dir, &me, &data, ttl).await? {
                    let fence = fence_of(&stat)?;
                    inner.wrote(&me, Written::new(&stat, ttl, true));
                    return Ok(Grant::Granted(fence));
                }
            }
            // The create and the listing after it, both sent before either answer is
            // awaited: a session's requests are applied in the order they were sent.
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
                        None if attempts < CHURN_TRIES => continue,
                        None => return Err(ZkError::NoNode),
                    }
                }
                Err(ZkError::NoNode) if attempts < CHURN_TRIES => {
                    // The key's node went since this backend last saw it (ZooKeeper
                    // deletes an empty container): make it again, next time round.
                    let _ = listing.await;
                    inner.forget_dir(&dir);
                }
                Err(e) => return Err(e),
            }
        };
        let now = mine.mtime;
        let mine_name = format!("l-{}", request.owner().to_hex());
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
        let fence = fence_of(&mine)?;
        inner.wrote(&me, Written::new(&mine, ttl, false));
        Ok(Grant::Granted(fence))
    }

    /// The grant on a key whose node this backend has not seen lately: the key's node
    /// and the lease created in one `multi`. The stat of the granted lease, or `None`
    /// when the key's node was there already (then remembered).
    async fn grant_fresh(
        inner: &Inner,
        client: &Client,
        dir: &str,
        me: &str,
        data: &[u8],
        ttl: Duration,
    ) -> std::result::Result<Option<Stat>, ZkError> {
        let mut multi = client.new_multi_writer();
        multi.add_create(dir, &[], &CreateMode::Container.with_acls(inner.acls()))?;
        multi.add_create(me, data, &inner.ttl_node(ttl))?;
        match multi.commit().await {
            Ok(results) => {
                inner.remember_dir(dir);
                let answered = results.into_iter().nth(1).and_then(|r| match r {
                    MultiWriteResult::Create { stat, .. } if !stat.is_invalid() => Some(stat),
                    _ => None,
                });
                match answered {
                    Some(stat) => Ok(Some(stat)),
                    // Some servers answer a create in a `multi` without its stat
                    // (ZOOKEEPER-4026; 3.8.0 answers a TTL node's): read it. Made in
                    // this very step, so gone only by a force release since; the
                    // caller is then not told it holds the key.
                    None => client
                        .check_stat(me)
                        .await?
                        .map(Some)
                        .ok_or(ZkError::NoNode),
                }
            }
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source: ZkError::NodeExists,
            }) => {
                inner.remember_dir(dir);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
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

impl ZooKeeperBackend {
    /// Writes the owner's lease node again, restarting its count from the write's
    /// time, if it is still the owner's and live: with the TTL its data holds, or with
    /// `ttl` where that is shorter (never longer: the node's own TTL, fixed at its
    /// creation, is the most the server keeps it). A lease that had run out before the
    /// write is deleted and not held.
    async fn write_lease(&self, request: &ExtendRequest, ttl: Option<Duration>) -> Result<Renewal> {
        let inner = &self.inner;
        let me = inner.lease_path(request.key(), request.owner());
        let fence = request.fence();
        inner
            .run(|client| async move {
                // Another renewal of the same lease between the read and the write
                // changes the version: read again, a few times.
                for _ in 0..5 {
                    let Some((mut data, node)) = own_lease(&client, &me).await? else {
                        return Ok(Renewal::NotHeld);
                    };
                    let stat = node.stat;
                    if node.fence()? != fence {
                        return Ok(Renewal::NotHeld);
                    }
                    let ttl_ms = ttl.map_or(node.ttl_ms, |ttl| millis(ttl).min(node.ttl_ms));
                    data.splice(..8, ttl_ms.to_be_bytes());
                    let renewed = match client.set_data(&me, &data, Some(stat.version)).await {
                        Ok(renewed) => renewed,
                        Err(ZkError::NoNode) => return Ok(Renewal::NotHeld),
                        Err(ZkError::BadVersion) => continue,
                        Err(e) => return Err(e),
                    };
                    if node.live_at(renewed.mtime) {
                        let written = Written {
                            zxid: renewed.mzxid,
                            at: renewed.mtime,
                            ttl_ms,
                            made_dir: false,
                        };
                        inner.wrote(&me, written);
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
}

#[async_trait]
impl LockBackend for ZooKeeperBackend {
    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn name(&self) -> &str {
        "zookeeper"
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        if let Some(place) = request.place() {
            return self.grant_in_turn(request, place).await;
        }
        let inner = &self.inner;
        inner
            .run(|client| async move { Self::grant(inner, &client, request).await })
            .await
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let inner = &self.inner;
        let me = inner.lease_path(key, owner);
        let dir = inner.dir(key);
        let written = inner.take_written(&me);
        let mut with_dir = written.is_some_and(|w| w.made_dir);
        inner
            .run(|client| async move {
                // One `multi` writes the lease (the write tells the server's time, to
                // say whether the lease had already run out) and deletes it. The path
                // names this acquisition alone, so no version is needed to delete only
                // its lease. Whether it had run out is judged from the last write this
                // backend made to it (its grant or a renewal); a lease it has not
                // written lately is read first, in the same round trip: the session
                // applies its requests in the order sent, so the read sees the lease
                // as the delete finds it, unless a renewal of this very lease was sent
                // in between (then the lease is judged as it was just before it).
                let read = written.is_none().then(|| client.get_data(&me));
                let mut write = release_write(&client, &me, with_dir.then_some(&*dir))?;
                let lease = match read {
                    Some(read) => Some(gone(read.await)),
                    None => None,
                };
                let results = loop {
                    match write.await {
                        Ok(results) => break results,
                        // Another lease or a waiter's place is under the key's node:
                        // nothing was written, and the lease alone goes.
                        Err(MultiWriteError::OperationFailed {
                            index: 2,
                            source: ZkError::NotEmpty,
                        }) if with_dir => {
                            with_dir = false;
                            write = release_write(&client, &me, None)?;
                        }
                        Err(MultiWriteError::OperationFailed {
                            source: ZkError::NoNode,
                            ..
                        }) => return Ok(ReleaseOutcome::NotHeld),
                        Err(e) => return Err(e.into()),
                    }
                };
                if with_dir {
                    inner.forget_dir(&dir);
                }
                let now = match results.first() {
                    Some(MultiWriteResult::SetData { stat }) => stat.mtime,
                    _ => i64::MAX,
                };
                let live = match (written, lease) {
                    (Some(written), _) => written.live_at(now),
                    (None, Some(lease)) => match lease? {
                        Some((data, stat)) => {
                            parse_node("", "l-", &data, stat).is_some_and(|node| node.live_at(now))
                        }
                        // Gone when read, yet there to delete: a retried grant made
                        // it again in between. Not this release's to call held.
                        None => false,
                    },
                    (None, None) => false,
                };
                Ok(if live {
                    ReleaseOutcome::Released
                } else {
                    ReleaseOutcome::NotHeld
                })
            })
            .await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.write_lease(request, None).await
    }

    /// A TTL node's own TTL is fixed when it is created, but the TTL a lease is judged
    /// by is the one its data holds: the early release writes the shorter one there,
    /// in the write that restarts its count, and the server's own deletion, at the
    /// longer TTL, comes after.
    async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
        let written = self.write_lease(request, Some(request.ttl())).await?;
        // `write_lease` answers renewed or not held.
        Ok(if written == Renewal::Renewed {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
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
                holder(&nodes, now).map(|h| h.info(now)).transpose()
            })
            .await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        Ok(Some(self.changes(key, None)))
    }
}

impl ZooKeeperBackend {
    /// The fair step (contract point 10): a grant whose request carries a place.
    async fn grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
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
                        // The key's node is there: a grant below need not make it.
                        Ok(_) | Err(ZkError::NodeExists) => inner.remember_dir(&dir),
                        Err(ZkError::NoNode) if attempts < CHURN_TRIES => {
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
                        None if attempts < CHURN_TRIES => continue,
                        None => return Err(ZkError::NoNode),
                    }
                };
                let now = stat.mtime;
                let mine_name = format!("p-{}", owner.to_hex());
                let lease_name = format!("l-{}", owner.to_hex());
                // An owner with a lease node of its own (a retry whose reply was lost,
                // this place made again behind waiters queued since) is not judged by
                // its place: the plain grant recognises its lease, refreshes it and
                // judges it against the leases ahead, as contract point 10 asks.
                let own_lease = names.contains(&lease_name);
                let others: Vec<String> = names
                    .into_iter()
                    .filter(|n| *n != mine_name && *n != lease_name)
                    .collect();
                if !own_lease {
                    let nodes = read_nodes(&client, &dir, others).await?;
                    if let Some(h) = holder(&nodes, now) {
                        return Ok(Grant::Held {
                            remaining: Some(h.remaining_at(now)),
                        });
                    }
                    let ahead = nodes.iter().any(|n| {
                        n.kind == Kind::Place && n.stat.czxid < stat.czxid && n.live_at(now)
                    });
                    if ahead {
                        return Ok(Grant::Held { remaining: None });
                    }
                }
                let grant = Self::grant(inner, &client, request).await?;
                if let Grant::Granted(_) = grant {
                    gone(client.delete(&mine, None).await)?;
                }
                Ok(grant)
            })
            .await
    }
}

#[async_trait]
impl FairBackend for ZooKeeperBackend {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let mine = self.inner.place_path(key, owner);
        self.inner
            .run(|client| async move {
                gone(client.delete(&mine, None).await)?;
                Ok(())
            })
            .await
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        Ok(Some(self.changes(key, Some(owner))))
    }
}

#[async_trait]
impl OperatorBackend for ZooKeeperBackend {
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
                        held.push((key.clone(), h.info(now)?));
                    }
                }
                Ok(held)
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
}

/// A release's write, sent at once: the lease touched (its new stat tells the
/// server's time) and deleted, and with `dir` the key's node deleted after it, all or
/// nothing.
fn release_write<'a>(
    client: &'a Client,
    lease: &str,
    dir: Option<&str>,
) -> std::result::Result<
    impl Future<Output = std::result::Result<Vec<MultiWriteResult>, MultiWriteError>> + Send + 'a,
    ZkError,
> {
    let mut multi = client.new_multi_writer();
    multi.add_set_data(lease, &[], None)?;
    multi.add_delete(lease, None)?;
    if let Some(dir) = dir {
        multi.add_delete(dir, None)?;
    }
    Ok(multi.commit())
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
