//! [`Target`]: a backend under test, with the means to fault its server when it has them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, Claim, ExtendRequest, FairBackend, Grant, Handoffs,
    Lease, OperatorBackend, OwnerToken, PermitBackend, PermitHolder, ReleaseOutcome, Renewal,
    SetBackend, SetGrant, Term,
};
use distlock_core::{
    BoxError, DynLockBackend, FencingToken, LockBackend, LockInfo, LockKey, MemoryBackend,
};
use futures_util::future::BoxFuture;
use tokio::sync::{watch, RwLock};

/// Control over the server behind a backend, for the fault cases.
///
/// Each method returns once the change has taken effect; `restart` and `start` return
/// once the server accepts requests again.
#[async_trait]
pub trait ServerControl: Send + Sync + fmt::Debug {
    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    async fn pause(&self) -> Result<(), BoxError>;
    /// Ends a pause.
    async fn unpause(&self) -> Result<(), BoxError>;
    /// Stops the server gracefully and starts it again. Whether data survives is the
    /// backend's business, declared in its capabilities.
    async fn restart(&self) -> Result<(), BoxError>;
    /// Kills the server (SIGKILL) and leaves it down.
    async fn kill(&self) -> Result<(), BoxError>;
    /// Starts a killed or stopped server again.
    async fn start(&self) -> Result<(), BoxError>;
    /// Stops the server gracefully, as [`restart`](Self::restart) does, and leaves it
    /// down until [`start`](Self::start): a restart whose down time the caller
    /// chooses, such as Redlock's delayed restart of a master that comes back empty.
    /// The default refuses, saying so: a control that can only restart cannot stop.
    async fn stop(&self) -> Result<(), BoxError> {
        Err("this server control cannot stop a server and leave it down".into())
    }
    /// Whether [`kill_connections`](Self::kill_connections) is supported.
    fn can_kill_connections(&self) -> bool {
        false
    }
    /// Closes every client connection from the server side (the server stays up).
    async fn kill_connections(&self) -> Result<(), BoxError> {
        Err("this server cannot kill client connections".into())
    }
    /// [`kill_connections`](Self::kill_connections), and how many connections it
    /// closed when the control can tell (`None` when it cannot), so that a fault
    /// case can check that the fault happened. The default tells nothing.
    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        self.kill_connections().await.map(|()| None)
    }
    /// Returns once the server serves requests, or an error saying why it does not
    /// (for a harness that must not inject a fault into a server still coming back
    /// from the last one). The default answers at once: a control that cannot tell
    /// is taken at its word that each method returns with the change done.
    async fn ready(&self) -> Result<(), BoxError> {
        Ok(())
    }
}

/// Control over the network between one client and its server, for the partition
/// cases: the other clients keep reaching the server meanwhile.
#[async_trait]
pub trait LinkControl: Send + Sync + fmt::Debug {
    /// Cuts the client off in both directions: nothing passes, and connections stay
    /// open (as when packets are dropped) until [`heal`](Self::heal).
    async fn cut(&self) -> Result<(), BoxError>;
    /// Ends a cut; what was held goes through.
    async fn heal(&self) -> Result<(), BoxError>;
    /// Delays everything by `one_way` in each direction (zero for none).
    async fn set_latency(&self, one_way: Duration) -> Result<(), BoxError>;
    /// Whether [`hold_replies`](Self::hold_replies) is offered. The default says it
    /// is not: the lost-reply cases then say "not run", with the reason.
    fn can_hold_replies(&self) -> bool {
        false
    }
    /// A one-way fault, the lost reply: every request still reaches the server and is
    /// applied, and every reply (and anything else the server sends this client) is
    /// held until [`heal`](Self::heal). The default refuses, saying so.
    async fn hold_replies(&self) -> Result<(), BoxError> {
        Err("this link cannot hold the replies alone".into())
    }
    /// Whether the connection faults are offered:
    /// [`reset_after_requests`](Self::reset_after_requests),
    /// [`refuse_connections`](Self::refuse_connections) and
    /// [`drop_new_connections`](Self::drop_new_connections). The default says they are
    /// not: the cases that need them then say "not run", with the reason.
    fn can_fail_connections(&self) -> bool {
        false
    }
    /// Until [`heal`](Self::heal): every request still reaches the server, and then
    /// its connection is reset before any reply comes back (a request applied whose
    /// connection dropped). The default refuses, saying so.
    async fn reset_after_requests(&self) -> Result<(), BoxError> {
        Err("this link cannot reset its connections".into())
    }
    /// Until [`heal`](Self::heal): a new connection is refused (nothing listens),
    /// while the open ones stay as they are. The default refuses, saying so.
    async fn refuse_connections(&self) -> Result<(), BoxError> {
        Err("this link cannot refuse connections".into())
    }
    /// Until [`heal`](Self::heal): a new connection is accepted, then closed at once,
    /// before anything passes. The default refuses, saying so.
    async fn drop_new_connections(&self) -> Result<(), BoxError> {
        Err("this link cannot drop new connections".into())
    }
}

/// A client of the server under test, and control over its network link.
pub type LinkedClient = (Arc<DynLockBackend>, Arc<dyn LinkControl>);

/// Makes a new client of the server under test whose network link can be cut and
/// slowed.
pub type LinkedConnector =
    Arc<dyn Fn() -> BoxFuture<'static, Result<LinkedClient, BoxError>> + Send + Sync>;

/// A client of a backend that holds each lease on several servers (its members, a
/// quorum of which decides), and control over its link to each member, in the order
/// of [`Target::members`].
pub type MemberLinkedClient = (Arc<DynLockBackend>, Vec<Arc<dyn LinkControl>>);

/// Makes a new client whose link to each member can be cut on its own.
pub type MemberConnector =
    Arc<dyn Fn() -> BoxFuture<'static, Result<MemberLinkedClient, BoxError>> + Send + Sync>;

/// Counts the round trips between a backend and its server (a proxy in between, say):
/// what the case on contract point 9 reads around each operation.
pub trait RoundTripMeter: Send + Sync + fmt::Debug {
    /// The round trips counted so far: a reply from the server that followed a request
    /// from the client counts one.
    fn round_trips(&self) -> u64;
}

/// Makes a new instance of the backend under test, with connections of its own: a
/// second client of the same server, or (for the wrong-credentials case) one that
/// presents credentials the server refuses.
pub type Connector =
    Arc<dyn Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>> + Send + Sync>;

/// A backend under test: the backend, optional control over its server, and the
/// timings the cases derive from its capabilities.
pub struct Target {
    backend: Arc<DynLockBackend>,
    control: Option<Arc<dyn ServerControl>>,
    metered: Option<(Arc<DynLockBackend>, Arc<dyn RoundTripMeter>)>,
    wrong_credentials: Option<(String, Connector)>,
    clients: Option<Connector>,
    links: Option<LinkedConnector>,
    members: Option<(Vec<Arc<dyn ServerControl>>, MemberConnector)>,
    /// Whether the members replicate each lease among themselves (set by
    /// [`Target::members_replicate`]).
    replicated: bool,
    /// Ordinary cases share the server (read); fault cases take it alone (write).
    pub(crate) server_use: RwLock<()>,
    /// Whether the target's links hold replies alone, once a link was asked.
    links_hold_replies: std::sync::OnceLock<bool>,
    /// Whether the target's links fail connections, once a link was asked.
    links_fail_connections: std::sync::OnceLock<bool>,
    /// Whether its grants are asked for without a fence (set by [`Target::unfenced`]).
    unfenced: bool,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("backend", &self.backend)
            .field("control", &self.control)
            .field("metered", &self.metered.as_ref().map(|(_, meter)| meter))
            .field("wrong_credentials", &self.wrong_credentials.is_some())
            .field("clients", &self.clients.is_some())
            .field("links", &self.links.is_some())
            .field("members", &self.members().len())
            .finish()
    }
}

impl Target {
    /// A target without server control: the fault cases are skipped, and said to be.
    pub fn new(backend: Arc<DynLockBackend>) -> Self {
        Target {
            backend,
            control: None,
            metered: None,
            wrong_credentials: None,
            clients: None,
            links: None,
            members: None,
            replicated: false,
            server_use: RwLock::new(()),
            links_hold_replies: std::sync::OnceLock::new(),
            links_fail_connections: std::sync::OnceLock::new(),
            unfenced: false,
        }
    }

    /// This target as an efficiency lock's: every backend it makes (its clients,
    /// linked and metered ones too) asks for its plain grants without a fence
    /// ([`AcquireRequest::with_fenced`](distlock_core::backend::AcquireRequest::with_fenced)),
    /// as a client with [`LockOptions::with_fenced`](distlock_core::LockOptions::with_fenced)
    /// off does. Where the backend then grants without fences
    /// ([`Capabilities::unfenced_grants`](distlock_core::backend::Capabilities::unfenced_grants)),
    /// the cases about fences do not apply, and say so, nor do those of elections,
    /// semaphores and read-write locks (always fenced, whatever a client's options
    /// say; this run's backends cannot tell their grants from a lock's); every other
    /// case runs as on the fenced lock. Call it last, once the target's parts are
    /// given.
    pub fn unfenced(mut self) -> Self {
        use crate::unfenced::unfenced;
        self.unfenced = true;
        self.backend = unfenced(self.backend);
        self.metered = self
            .metered
            .map(|(backend, meter)| (unfenced(backend), meter));
        let wrap = |connect: Connector| -> Connector {
            Arc::new(move || {
                let made = connect();
                Box::pin(async move { made.await.map(unfenced) })
            })
        };
        self.wrong_credentials = self
            .wrong_credentials
            .map(|(secret, connect)| (secret, wrap(connect)));
        self.clients = self.clients.map(wrap);
        self.links = self.links.map(|connect| -> LinkedConnector {
            Arc::new(move || {
                let made = connect();
                Box::pin(async move { made.await.map(|(b, link)| (unfenced(b), link)) })
            })
        });
        self.members = self.members.map(|(members, connect)| {
            let connect: MemberConnector = Arc::new(move || {
                let made = connect();
                Box::pin(async move { made.await.map(|(b, links)| (unfenced(b), links)) })
            });
            (members, connect)
        });
        self
    }

    /// Whether the target asks for its grants without a fence ([`unfenced`](Self::unfenced)).
    pub fn is_unfenced(&self) -> bool {
        self.unfenced
    }

    /// Whether a grant's fence `after`, following one whose fence was `before`, keeps
    /// contract point 6: above it. On an efficiency lock's run where the backend
    /// grants without fences ([`unfenced`](Self::unfenced), and
    /// [`Capabilities::unfenced_grants`](distlock_core::backend::Capabilities::unfenced_grants)),
    /// a grant carrying no fence has nothing to compare, and keeps it too.
    pub fn fence_rose(&self, before: FencingToken, after: FencingToken) -> bool {
        after > before || (self.unfenced && self.capabilities().unfenced_grants && after.is_none())
    }

    /// Adds a second instance of the backend whose traffic `meter` counts, which
    /// enables the round-trip case (contract point 9).
    pub fn with_round_trip_meter(
        mut self,
        backend: Arc<DynLockBackend>,
        meter: Arc<dyn RoundTripMeter>,
    ) -> Self {
        self.metered = Some((backend, meter));
        self
    }

    /// Adds a way to connect with credentials the server refuses, holding `secret`
    /// (which no error may show), which enables the wrong-credentials case.
    pub fn with_wrong_credentials(
        mut self,
        secret: impl Into<String>,
        connect: impl Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.wrong_credentials = Some((secret.into(), Arc::new(connect)));
        self
    }

    /// Adds a way to make more clients of the same server, each with connections of
    /// its own, which enables the cases across independent clients.
    pub fn with_clients(
        mut self,
        connect: impl Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.clients = Some(Arc::new(connect));
        self
    }

    /// A new client of the same server, when the target can make one.
    pub async fn another_client(&self) -> Option<distlock_core::Result<Arc<DynLockBackend>>> {
        match &self.clients {
            Some(connect) => Some(connect().await),
            None => None,
        }
    }

    /// Adds a way to make clients whose link to the server can be cut and slowed,
    /// which enables the partition and latency cases.
    pub fn with_links(
        mut self,
        connect: impl Fn()
                -> BoxFuture<'static, Result<(Arc<DynLockBackend>, Arc<dyn LinkControl>), BoxError>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.links = Some(Arc::new(connect));
        self
    }

    /// A new client whose link can be cut and slowed, when the target can make one.
    pub async fn linked_client(&self) -> Option<Result<LinkedClient, BoxError>> {
        match &self.links {
            Some(connect) => Some(connect().await),
            None => None,
        }
    }

    /// Whether the target can make clients whose link can be cut.
    pub fn has_links(&self) -> bool {
        self.links.is_some()
    }

    /// Whether the target's links hold the replies alone
    /// ([`LinkControl::can_hold_replies`]): `None` until
    /// [`probe_links`](Self::probe_links) has asked one.
    pub fn links_hold_replies(&self) -> Option<bool> {
        self.links_hold_replies.get().copied()
    }

    /// Whether the target's links fail connections
    /// ([`LinkControl::can_fail_connections`]): `None` until
    /// [`probe_links`](Self::probe_links) has asked one.
    pub fn links_fail_connections(&self) -> Option<bool> {
        self.links_fail_connections.get().copied()
    }

    /// Makes one linked client, once, to learn what its link offers (see
    /// [`links_hold_replies`](Self::links_hold_replies) and
    /// [`links_fail_connections`](Self::links_fail_connections)); the runners call it
    /// before they read the gates. A link that cannot be made offers nothing.
    pub async fn probe_links(&self) {
        if self.links_hold_replies.get().is_some() {
            return;
        }
        let (holds, fails) = match self.linked_client().await {
            Some(Ok((_, link))) => (link.can_hold_replies(), link.can_fail_connections()),
            _ => (false, false),
        };
        let _ = self.links_fail_connections.set(fails);
        let _ = self.links_hold_replies.set(holds);
    }

    /// Whether the target can make more clients of its server.
    pub fn has_clients(&self) -> bool {
        self.clients.is_some()
    }

    /// The metered backend and its meter, when there are.
    pub fn round_trip_meter(&self) -> Option<&(Arc<DynLockBackend>, Arc<dyn RoundTripMeter>)> {
        self.metered.as_ref()
    }

    /// The secret of the wrong credentials and the way to connect with them, when given.
    pub fn wrong_credentials(&self) -> Option<&(String, Connector)> {
        self.wrong_credentials.as_ref()
    }

    /// For a backend that holds each lease on a majority of several servers (Redlock,
    /// say): control over each server, and a way to make clients whose link to each
    /// can be cut. This enables the quorum cases: a minority of members killed, paused,
    /// restarted empty or cut off from the client, and a majority cut off.
    pub fn with_members(
        mut self,
        members: Vec<Arc<dyn ServerControl>>,
        connect: impl Fn() -> BoxFuture<'static, Result<MemberLinkedClient, BoxError>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.members = Some((members, Arc::new(connect)));
        self
    }

    /// Says that the members given to [`with_members`](Self::with_members) replicate
    /// each lease among themselves (Raft in etcd, ZAB in ZooKeeper), rather than the
    /// client asking each of them (Redlock): a member the client reaches passes its
    /// requests to the others, so a client that reaches any one member of the
    /// majority is served by the majority. The quorum cases about a client that
    /// reaches only a minority of the members then do not apply, and say so; the
    /// cases that kill, pause or restart a minority, or cut the client off from one,
    /// run as for any members.
    pub fn members_replicate(mut self) -> Self {
        self.replicated = true;
        self
    }

    /// Whether the members replicate each lease among themselves
    /// ([`members_replicate`](Self::members_replicate)).
    pub fn replicated_members(&self) -> bool {
        self.replicated
    }

    /// Control over each member, when the target has members (else empty).
    pub fn members(&self) -> &[Arc<dyn ServerControl>] {
        self.members.as_ref().map_or(&[], |(m, _)| m.as_slice())
    }

    /// A new client whose link to each member can be cut, when the target has members.
    pub async fn member_linked_client(&self) -> Option<Result<MemberLinkedClient, BoxError>> {
        match &self.members {
            Some((_, connect)) => Some(connect().await),
            None => None,
        }
    }

    /// Adds control over the server, which enables the fault cases.
    pub fn with_control(mut self, control: Arc<dyn ServerControl>) -> Self {
        self.control = Some(control);
        self
    }

    /// The memory backend with its simulated faults: what the crate's own tests run.
    /// Its other clients are handles on the same in-process store.
    pub fn memory() -> Self {
        let memory = MemoryBackend::new();
        let store = memory.clone();
        Target::new(Arc::new(memory.clone()))
            .with_control(Arc::new(MemoryControl(memory)))
            .with_clients({
                let store = store.clone();
                move || {
                    let client: Arc<DynLockBackend> = Arc::new(store.clone());
                    Box::pin(async move { Ok(client) })
                }
            })
            .with_links(move || {
                let linked = Arc::new(MemoryLink::new(store.clone()));
                let client: Arc<DynLockBackend> = linked.clone();
                let link: Arc<dyn LinkControl> = linked;
                Box::pin(async move { Ok((client, link)) })
            })
    }

    /// The backend under test.
    pub fn backend(&self) -> &Arc<DynLockBackend> {
        &self.backend
    }

    /// The server control, when there is one.
    pub fn control(&self) -> Option<&Arc<dyn ServerControl>> {
        self.control.as_ref()
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        self.backend.capabilities()
    }

    /// A fresh random key, so that cases never share state.
    pub fn key(&self, case: &str) -> LockKey {
        let suffix: u64 = rand::random();
        LockKey::new(format!("distlock-conformance/{case}/{suffix:016x}"))
            .unwrap_or_else(|e| unreachable!("generated keys are valid: {e}"))
    }

    /// A TTL short enough to wait out in a test, that the backend accepts.
    pub fn short_ttl(&self) -> Duration {
        self.capabilities().ttl_at_least(Duration::from_millis(400))
    }

    /// A TTL that does not run out during a case.
    pub fn long_ttl(&self) -> Duration {
        self.capabilities().ttl_at_least(Duration::from_secs(60))
    }

    /// A long TTL to extend `lease` to, where the backend extends to any TTL; the
    /// lease's own TTL where it renews only to that
    /// ([`Capabilities::extend_any_ttl`]).
    pub fn renewal_ttl(&self, lease: &Lease) -> Duration {
        if self.capabilities().extend_any_ttl {
            self.long_ttl()
        } else {
            lease.ttl()
        }
    }

    /// How late after its TTL an abandoned lease may free its key: the TTL granularity
    /// (servers may round up to it) plus 150 ms for polling and scheduling.
    pub fn expiry_slack(&self) -> Duration {
        self.capabilities().ttl_granularity + Duration::from_millis(150)
    }
}

/// [`ServerControl`] over the memory backend's simulated faults.
#[derive(Debug, Clone)]
pub struct MemoryControl(pub MemoryBackend);

#[async_trait]
impl ServerControl for MemoryControl {
    async fn pause(&self) -> Result<(), BoxError> {
        self.0.pause();
        Ok(())
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        self.0.resume();
        Ok(())
    }
    async fn restart(&self) -> Result<(), BoxError> {
        self.0.restart();
        Ok(())
    }
    async fn kill(&self) -> Result<(), BoxError> {
        self.0.stop();
        Ok(())
    }
    async fn start(&self) -> Result<(), BoxError> {
        self.0.start();
        Ok(())
    }
}

/// A client of the memory backend behind a simulated network link: each request and
/// each reply waits while the link is cut (each reply also while replies are held),
/// and then for the latency.
#[derive(Debug)]
pub struct MemoryLink {
    store: MemoryBackend,
    link: watch::Sender<MemoryLinkState>,
}

#[derive(Debug, Clone, Copy, Default)]
struct MemoryLinkState {
    cut: bool,
    replies_held: bool,
    latency: Duration,
}

impl MemoryLink {
    /// A client of `store` on a healthy link.
    pub fn new(store: MemoryBackend) -> Self {
        MemoryLink {
            store,
            link: watch::Sender::new(MemoryLinkState::default()),
        }
    }

    /// One crossing of the link, towards the server or back: held while cut (and,
    /// back, while replies are held), then delayed.
    async fn cross(&self, back: bool) {
        let mut link = self.link.subscribe();
        let _ = link.wait_for(|l| !(l.cut || back && l.replies_held)).await;
        let latency = link.borrow().latency;
        tokio::time::sleep(latency).await;
    }
}

#[async_trait]
impl LinkControl for MemoryLink {
    async fn cut(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.cut = true);
        Ok(())
    }

    async fn heal(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| {
            l.cut = false;
            l.replies_held = false;
        });
        Ok(())
    }

    async fn set_latency(&self, one_way: Duration) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.latency = one_way);
        Ok(())
    }

    fn can_hold_replies(&self) -> bool {
        true
    }

    async fn hold_replies(&self) -> Result<(), BoxError> {
        self.link.send_modify(|l| l.replies_held = true);
        Ok(())
    }
}

/// Runs one request of `self.store` across the link, both ways.
macro_rules! across {
    ($self:ident, $call:expr) => {{
        $self.cross(false).await;
        let reply = $call.await;
        $self.cross(true).await;
        reply
    }};
}

#[async_trait]
impl LockBackend for MemoryLink {
    fn name(&self) -> &str {
        self.store.name()
    }

    fn capabilities(&self) -> &Capabilities {
        self.store.capabilities()
    }

    async fn try_grant(&self, request: &AcquireRequest) -> distlock_core::Result<Grant> {
        across!(self, self.store.try_grant(request))
    }

    async fn release(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<ReleaseOutcome> {
        across!(self, self.store.release(key, owner))
    }

    async fn renew(&self, request: &ExtendRequest) -> distlock_core::Result<Renewal> {
        across!(self, self.store.renew(request))
    }

    async fn inspect(&self, key: &LockKey) -> distlock_core::Result<Option<LockInfo>> {
        across!(self, self.store.inspect(key))
    }

    async fn watch(&self, key: &LockKey) -> distlock_core::Result<Option<ChangeStream>> {
        across!(self, self.store.watch(key))
    }

    // Every step of the store crosses the link, its optional features' too, so a
    // client behind the link is the backend it names.
    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }
}

#[async_trait]
impl FairBackend for MemoryLink {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> distlock_core::Result<()> {
        across!(self, FairBackend::leave_queue(&self.store, key, owner))
    }

    async fn release_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<ReleaseOutcome> {
        across!(self, self.store.release_in_turn(key, owner))
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<Option<ChangeStream>> {
        across!(self, self.store.watch_in_turn(key, owner))
    }

    fn handoffs(&self) -> Option<&dyn Handoffs> {
        self.store.handoffs()
    }
}

#[async_trait]
impl SetBackend for MemoryLink {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> distlock_core::Result<SetGrant> {
        across!(self, self.store.try_grant_all(requests))
    }
}

#[async_trait]
impl OperatorBackend for MemoryLink {
    async fn force_release(&self, key: &LockKey) -> distlock_core::Result<bool> {
        across!(self, self.store.force_release(key))
    }

    async fn scan(&self, prefix: &str) -> distlock_core::Result<Vec<(LockKey, LockInfo)>> {
        across!(self, self.store.scan(prefix))
    }
}

#[async_trait]
impl PermitBackend for MemoryLink {
    async fn try_grant_permits(
        &self,
        request: &AcquireRequest,
        claim: &Claim,
    ) -> distlock_core::Result<Grant> {
        across!(self, self.store.try_grant_permits(request, claim))
    }

    async fn release_permits(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<ReleaseOutcome> {
        across!(self, self.store.release_permits(key, owner))
    }

    async fn renew_permits(&self, request: &ExtendRequest) -> distlock_core::Result<Renewal> {
        across!(self, self.store.renew_permits(request))
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> distlock_core::Result<()> {
        across!(self, PermitBackend::leave_queue(&self.store, key, owner))
    }

    async fn holders(&self, key: &LockKey) -> distlock_core::Result<Vec<PermitHolder>> {
        across!(self, self.store.holders(key))
    }

    async fn terms(&self, key: &LockKey, after: u64) -> distlock_core::Result<Vec<Term>> {
        across!(self, self.store.terms(key, after))
    }

    async fn watch_permits(&self, key: &LockKey) -> distlock_core::Result<Option<ChangeStream>> {
        across!(self, self.store.watch_permits(key))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_core::backend::{AcquireOutcome, LockBackendExt};

    use super::*;

    /// A client behind the simulated link declares the store's capabilities, so it
    /// must do each step they name: a fair waiter or a permit taken through it once
    /// failed with `Unsupported`, and the torture run's fair clients never held.
    #[tokio::test]
    async fn a_linked_memory_client_does_every_step_its_capabilities_declare() {
        let target = Target::memory();
        let (client, _link) = target
            .linked_client()
            .await
            .expect("the memory target has links")
            .expect("a linked client");
        assert!(client.fair().is_some() && client.permits().is_some());
        let key = LockKey::new("linked").expect("a key");
        let ttl = Duration::from_secs(5);
        let owner = OwnerToken::random();
        match client
            .try_acquire_in_turn(&key, ttl, owner, ttl)
            .await
            .expect("a fair acquire through the link")
        {
            AcquireOutcome::Acquired(lease) => {
                client.release_lease(&lease).await.expect("release");
            }
            other => panic!("a free key was not granted: {other:?}"),
        }
        assert!(client.permits().is_some(), "the link forwards permits");
        let uploads = distlock_core::LockClient::new(client.clone())
            .semaphore("linked-permits", 2)
            .expect("a semaphore");
        let permit = uploads
            .try_acquire()
            .await
            .expect("a permit through the link");
        assert!(permit.is_ok(), "a free semaphore gave no permit");
    }
}
