//! [`MemoryBackend`]: the in-process reference implementation of the contract.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{
    ChangeStream, FairBackend, Handoffs, LockBackend, OperatorBackend, SetBackend,
};
use crate::capabilities::{Capabilities, FenceDurability, HolderRecords};
use crate::error::{Error, ErrorKind, Result};
use crate::handoff::HandoffBook;
use crate::holder::Holder;
use crate::key::LockKey;
use crate::lease::{
    AcquireRequest, ExtendRequest, Grant, LockInfo, ReleaseOutcome, Renewal, SetGrant,
};
use crate::permits::{Claim, PermitBackend, PermitHolder, Term, TERMS_KEPT};
use crate::token::{FencingToken, OwnerToken};
use crate::wake::WakeRegistry;

const NAME: &str = "memory";

/// An in-process lock store that keeps the whole contract.
///
/// It is the embedded default (a single process coordinating its own tasks), the
/// backend the client's own tests use, and the reference the conformance suite is
/// checked against. Clones share one store.
///
/// "The server's clock" is this process's monotonic clock (tokio's, so paused-time
/// tests work). Fencing tokens come from one counter for all keys, so they increase
/// per key and are never reused; the counter lives as long as the store.
///
/// For tests it can simulate the faults of a real server: [`pause`](Self::pause)
/// (requests hang, time goes on), [`stop`](Self::stop) (requests fail as unavailable;
/// leases are lost) and [`restart`](Self::restart) (leases are lost, the fencing
/// counter is kept, as a durable server would keep it).
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    server: watch::Sender<ServerState>,
    capabilities: Capabilities,
    waiters: WakeRegistry,
    /// The fair waiters, and the grants releases handed them (contract point 10).
    handoffs: HandoffBook,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockKey, Held>,
    last_fence: u64,
    /// Each key's fair waiters, first come first.
    queues: HashMap<LockKey, VecDeque<Place>>,
    /// Each name's permits (a namespace of their own).
    permits: HashMap<LockKey, Permits>,
}

/// One name's permits: its grants, its waiters' places and its recorded terms.
#[derive(Debug)]
struct Permits {
    limit: u32,
    grants: Vec<PermitGrant>,
    places: Vec<PermitPlace>,
    terms: VecDeque<Term>,
    /// Until when the terms are kept once nothing else is.
    terms_until: Instant,
}

#[derive(Debug)]
struct PermitGrant {
    owner: OwnerToken,
    count: u32,
    fence: FencingToken,
    expires_at: Instant,
    value: Option<String>,
    holder: Holder,
    granted_at: SystemTime,
}

#[derive(Debug)]
struct PermitPlace {
    owner: OwnerToken,
    count: u32,
    until: Instant,
}

impl Permits {
    /// Drops what ran out; whether anything is left.
    fn prune(&mut self, now: Instant) -> bool {
        self.grants.retain(|g| g.expires_at > now);
        self.places.retain(|p| p.until > now);
        if self.terms_until <= now {
            self.terms.clear();
        }
        !(self.grants.is_empty() && self.places.is_empty() && self.terms.is_empty())
    }

    fn keep_terms(&mut self, until: Instant) {
        self.terms_until = self.terms_until.max(until);
    }
}

/// A fair waiter's place in a key's queue, kept until `until`, and the TTL of its last
/// fair step, which a release that hands it the key grants.
#[derive(Debug)]
struct Place {
    owner: OwnerToken,
    until: Instant,
    ttl: Duration,
    holder: Holder,
}

#[derive(Debug)]
struct Held {
    owner: OwnerToken,
    fence: FencingToken,
    expires_at: Instant,
    holder: Holder,
    granted_at: SystemTime,
}

impl Held {
    fn info(&self, now: Instant) -> LockInfo {
        LockInfo::new(self.fence, self.expires_at.saturating_duration_since(now))
            .held_by(Some(self.holder.clone()), Some(self.granted_at))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    Up,
    Paused,
    Down,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        let capabilities = Capabilities {
            fence_durability: FenceDurability::Durable,
            leases_survive_restart: false,
            change_notification: true,
            holder_records: HolderRecords::ServerClock,
            ..Capabilities::default()
        };
        MemoryBackend {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                server: watch::Sender::new(ServerState::Up),
                capabilities,
                waiters: WakeRegistry::new(),
                handoffs: HandoffBook::new(),
            }),
        }
    }

    /// Simulates a frozen server: requests wait until [`resume`](Self::resume); leases
    /// keep expiring meanwhile.
    pub fn pause(&self) {
        self.shared.server.send_replace(ServerState::Paused);
    }

    /// Ends a [`pause`](Self::pause).
    pub fn resume(&self) {
        self.shared.server.send_replace(ServerState::Up);
    }

    /// Simulates a killed server: requests fail with [`ErrorKind::Unavailable`] until
    /// [`start`](Self::start), and every lease is lost.
    pub fn stop(&self) {
        self.shared.server.send_replace(ServerState::Down);
        self.clear_leases();
    }

    /// Brings a [`stop`](Self::stop)ped server back.
    pub fn start(&self) {
        self.shared.server.send_replace(ServerState::Up);
    }

    /// Simulates a restart that loses every lease but keeps the fencing counter.
    pub fn restart(&self) {
        self.stop();
        self.start();
    }

    fn clear_leases(&self) {
        let keys: Vec<LockKey> = {
            let mut state = self.lock_state();
            state.queues.clear();
            state.permits.clear();
            state.locks.drain().map(|(k, _)| k).collect()
        };
        // Woken in the keys' order, the same on every run.
        let mut keys = keys;
        keys.sort_unstable();
        for key in keys {
            self.shared.waiters.wake(key.as_str());
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // The state is only touched in short sections that cannot panic halfway, so a
        // poisoned mutex still holds consistent data.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells the waiters of `key` that it was released: the waiter it was `handed`
    /// to, if any, learns its fence and is woken alone (with any racing waiters);
    /// otherwise every waiter is woken.
    fn tell_release(&self, key: &LockKey, handed: Option<(OwnerToken, FencingToken)>) {
        match handed {
            Some((owner, fence)) => {
                self.shared
                    .handoffs
                    .hand_over(key.as_str(), owner, fence.get());
                self.shared
                    .waiters
                    .wake_tagged(key.as_str(), &owner.to_hex());
            }
            None => self.shared.waiters.wake(key.as_str()),
        }
    }

    /// Waits while the simulated server is paused; fails while it is down.
    async fn reachable(&self) -> Result<()> {
        if *self.shared.server.borrow() == ServerState::Up {
            return Ok(());
        }
        let mut rx = self.shared.server.subscribe();
        loop {
            let now = *rx.borrow_and_update();
            match now {
                ServerState::Up => return Ok(()),
                ServerState::Down => {
                    // As a refused connection: the request never reached a server.
                    return Err(Error::new(ErrorKind::Unavailable, "the server is stopped")
                        .with_backend(NAME)
                        .with_not_sent());
                }
                ServerState::Paused => {
                    if rx.changed().await.is_err() {
                        return Err(Error::new(ErrorKind::Unavailable, "the server is gone")
                            .with_backend(NAME));
                    }
                }
            }
        }
    }
}

impl State {
    /// The grant step: takes `request.key()` if it is free, or confirms a retry.
    fn grant(&mut self, request: &AcquireRequest, now: Instant) -> Grant {
        let key = request.key();
        if let Some(holder) = self.live(key, now) {
            if holder.owner == *request.owner() {
                // A retry of a request whose reply was lost: the grant is already ours.
                holder.expires_at = now + request.ttl();
                return Grant::Granted(holder.fence);
            }
            return Grant::Held {
                remaining: Some(holder.expires_at.saturating_duration_since(now)),
            };
        }
        self.last_fence += 1;
        let fence = FencingToken::new(self.last_fence);
        self.locks.insert(
            key.clone(),
            Held {
                owner: *request.owner(),
                fence,
                expires_at: now + request.ttl(),
                holder: request.holder().clone(),
                granted_at: SystemTime::now(),
            },
        );
        Grant::Granted(fence)
    }

    /// Frees `key`, held by `owner`, and hands it to the first waiter of its queue
    /// whose place is live, with the next fence, for that waiter's TTL or until its
    /// place runs out if that is sooner: the release's step (contract point 10). `false` when `owner` did not hold it.
    fn free_and_hand_over(
        &mut self,
        key: &LockKey,
        owner: &OwnerToken,
        now: Instant,
    ) -> (bool, Option<(OwnerToken, FencingToken)>) {
        match self.live(key, now) {
            Some(holder) if holder.owner == *owner => self.locks.remove(key),
            _ => return (false, None),
        };
        let Some(queue) = self.queues.get_mut(key) else {
            return (true, None);
        };
        queue.retain(|p| p.until > now);
        let Some(head) = queue.pop_front() else {
            self.queues.remove(key);
            return (true, None);
        };
        if queue.is_empty() {
            self.queues.remove(key);
        }
        self.last_fence += 1;
        let fence = FencingToken::new(self.last_fence);
        self.locks.insert(
            key.clone(),
            Held {
                owner: head.owner,
                fence,
                // A vanished waiter holds the key no longer than its place.
                expires_at: (now + head.ttl).min(head.until),
                holder: head.holder,
                granted_at: SystemTime::now(),
            },
        );
        (true, Some((head.owner, fence)))
    }

    /// Takes `owner` out of `key`'s queue; drops the queue once empty.
    fn leave(&mut self, key: &LockKey, owner: &OwnerToken) {
        if let Some(queue) = self.queues.get_mut(key) {
            queue.retain(|p| p.owner != *owner);
            if queue.is_empty() {
                self.queues.remove(key);
            }
        }
    }

    /// The live state of `name`'s permits, dropping what ran out.
    fn permits(&mut self, name: &LockKey, now: Instant) -> Option<&mut Permits> {
        if self.permits.get_mut(name).is_some_and(|p| !p.prune(now)) {
            self.permits.remove(name);
        }
        self.permits.get_mut(name)
    }

    /// The grant step of permits.
    fn grant_permits(
        &mut self,
        request: &AcquireRequest,
        claim: &Claim,
        place: Option<Duration>,
        now: Instant,
    ) -> Result<Grant> {
        let owner = *request.owner();
        let ttl = request.ttl();
        self.permits(request.key(), now);
        let next_fence = self.last_fence + 1;
        let permits = self
            .permits
            .entry(request.key().clone())
            .or_insert_with(|| Permits {
                limit: claim.limit(),
                grants: Vec::new(),
                places: Vec::new(),
                terms: VecDeque::new(),
                terms_until: now,
            });
        if permits.grants.is_empty() {
            permits.limit = claim.limit();
        } else if permits.limit != claim.limit() {
            return Err(claim.limit_conflict(request.key(), u64::from(permits.limit), NAME));
        }
        if let Some(mine) = permits.grants.iter_mut().find(|g| g.owner == owner) {
            mine.expires_at = now + ttl;
            return Ok(Grant::Granted(mine.fence));
        }
        let used: u64 = permits.grants.iter().map(|g| u64::from(g.count)).sum();
        let fits = used + u64::from(claim.count()) <= u64::from(claim.limit());
        let held_back = permits
            .places
            .iter()
            .any(|p| p.owner != owner && p.count > claim.count());
        if !fits || held_back {
            if let Some(place) = place {
                permits.places.retain(|p| p.owner != owner);
                permits.places.push(PermitPlace {
                    owner,
                    count: claim.count(),
                    until: now + place,
                });
            }
            let remaining = permits
                .grants
                .iter()
                .map(|g| g.expires_at.saturating_duration_since(now))
                .min();
            return Ok(Grant::Held { remaining });
        }
        let fence = FencingToken::new(next_fence);
        let granted_at = SystemTime::now();
        permits.places.retain(|p| p.owner != owner);
        permits.grants.push(PermitGrant {
            owner,
            count: claim.count(),
            fence,
            expires_at: now + ttl,
            value: claim.value().map(str::to_owned),
            holder: request.holder().clone(),
            granted_at,
        });
        if let Some(value) = claim.value() {
            let previous = permits.terms.back().map_or(0, |t| t.fence.get());
            permits.terms.push_back(
                Term::new(fence, previous, value.to_owned())
                    .held_by(Some(request.holder().clone()), Some(granted_at)),
            );
            while permits.terms.len() > TERMS_KEPT {
                permits.terms.pop_front();
            }
        }
        permits.keep_terms(now + ttl + ttl);
        self.last_fence = next_fence;
        Ok(Grant::Granted(fence))
    }

    /// The live holder of `key`, dropping an expired one.
    fn live(&mut self, key: &LockKey, now: Instant) -> Option<&mut Held> {
        if self.locks.get(key).is_some_and(|h| h.expires_at <= now) {
            self.locks.remove(key);
        }
        self.locks.get_mut(key)
    }
}

/// Where waiters on a name's permits register: apart from the name's lock.
fn permit_channel(name: &LockKey) -> String {
    format!("permits\0{name}")
}

#[async_trait]
impl PermitBackend for MemoryBackend {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        self.reachable().await?;
        let grant =
            self.lock_state()
                .grant_permits(request, claim, request.place(), Instant::now())?;
        if matches!(grant, Grant::Granted(_)) && claim.value().is_some() {
            // Observers of an election look again.
            self.shared.waiters.wake(&permit_channel(request.key()));
        }
        Ok(grant)
    }

    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.reachable().await?;
        let now = Instant::now();
        let released = {
            let mut state = self.lock_state();
            match state.permits(key, now) {
                Some(permits) => {
                    let before = permits.grants.len();
                    permits.grants.retain(|g| g.owner != *owner);
                    permits.grants.len() < before
                }
                None => false,
            }
        };
        if !released {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.shared.waiters.wake(&permit_channel(key));
        Ok(ReleaseOutcome::Released)
    }

    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        let Some(permits) = state.permits(request.key(), now) else {
            return Ok(Renewal::NotHeld);
        };
        let until = now + request.ttl();
        match permits
            .grants
            .iter_mut()
            .find(|g| g.owner == *request.owner())
        {
            Some(grant) => {
                grant.expires_at = until;
                permits.keep_terms(until + request.ttl());
                Ok(Renewal::Renewed)
            }
            None => Ok(Renewal::NotHeld),
        }
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        self.reachable().await?;
        if let Some(permits) = self.lock_state().permits(key, Instant::now()) {
            permits.places.retain(|p| p.owner != *owner);
        }
        self.shared.waiters.wake(&permit_channel(key));
        Ok(())
    }

    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        self.reachable().await?;
        let now = Instant::now();
        {
            let mut state = self.lock_state();
            let Some(permits) = state.permits(key, now) else {
                return Ok(Renewal::NotHeld);
            };
            let Some(grant) = permits.grants.iter_mut().find(|g| g.owner == *owner) else {
                return Ok(Renewal::NotHeld);
            };
            grant.value = Some(value.to_owned());
            let fence = grant.fence;
            if let Some(term) = permits.terms.iter_mut().find(|t| t.fence == fence) {
                term.value = value.to_owned();
            }
        }
        self.shared.waiters.wake(&permit_channel(key));
        Ok(Renewal::Renewed)
    }

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        let Some(permits) = state.permits(key, now) else {
            return Ok(Vec::new());
        };
        let mut holders: Vec<PermitHolder> = permits
            .grants
            .iter()
            .map(|g| {
                let remaining = g.expires_at.saturating_duration_since(now);
                PermitHolder::new(g.fence, g.count, remaining, g.value.clone())
                    .held_by(Some(g.holder.clone()), Some(g.granted_at))
            })
            .collect();
        holders.sort_by_key(|h| h.fence);
        Ok(holders)
    }

    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        self.reachable().await?;
        let mut state = self.lock_state();
        let Some(permits) = state.permits(key, Instant::now()) else {
            return Ok(Vec::new());
        };
        Ok(permits
            .terms
            .iter()
            .filter(|t| t.fence.get() > after)
            .cloned()
            .collect())
    }

    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.reachable().await?;
        Ok(Some(
            self.shared.waiters.register(&permit_channel(key)).changes,
        ))
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }

    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.shared.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.reachable().await?;
        match request.place() {
            Some(place) => Ok(self.grant_in_turn(request, place)),
            None => Ok(self.lock_state().grant(request, Instant::now())),
        }
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        Some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.reachable().await?;
        let now = Instant::now();
        let (released, handed) = self.lock_state().free_and_hand_over(key, owner, now);
        if !released {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.tell_release(key, handed);
        Ok(ReleaseOutcome::Released)
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        match state.live(request.key(), now) {
            Some(holder) if holder.owner == *request.owner() => {
                holder.expires_at = now + request.ttl();
                Ok(Renewal::Renewed)
            }
            _ => Ok(Renewal::NotHeld),
        }
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        Ok(state.live(key, now).map(|h| h.info(now)))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.reachable().await?;
        Ok(Some(self.shared.waiters.register(key.as_str()).changes))
    }
}

impl MemoryBackend {
    /// The fair step (contract point 10), once the store is reachable.
    fn grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Grant {
        let now = Instant::now();
        let mut state = self.lock_state();
        if state
            .live(request.key(), now)
            .is_some_and(|holder| holder.owner == *request.owner())
        {
            // Its own already (a grant a release handed it, or a retry whose reply was
            // lost): granted again, as a plain step grants it, queue or no queue.
            let grant = state.grant(request, now);
            drop(state);
            let handoffs = &self.shared.handoffs;
            handoffs.forget(request.key().as_str(), *request.owner());
            return grant;
        }
        let queue = state.queues.entry(request.key().clone()).or_default();
        queue.retain(|p| p.until > now || p.owner == *request.owner());
        match queue.iter_mut().find(|p| p.owner == *request.owner()) {
            Some(mine) => {
                mine.until = now + place;
                mine.ttl = request.ttl();
            }
            None => queue.push_back(Place {
                owner: *request.owner(),
                until: now + place,
                ttl: request.ttl(),
                holder: request.holder().clone(),
            }),
        }
        let first = queue.front().is_some_and(|p| p.owner == *request.owner());
        let remaining = match state.live(request.key(), now) {
            Some(holder) if holder.owner != *request.owner() => {
                Some(holder.expires_at.saturating_duration_since(now))
            }
            _ => None,
        };
        if !first || remaining.is_some() {
            // Every fence so far is at most the counter: a grant handed over with a
            // higher one is made after this step.
            let latest = state.last_fence;
            drop(state);
            let handoffs = &self.shared.handoffs;
            handoffs.turned_down(request.key().as_str(), *request.owner(), now, latest);
            return Grant::Held { remaining };
        }
        let grant = state.grant(request, now);
        state.leave(request.key(), request.owner());
        drop(state);
        let handoffs = &self.shared.handoffs;
        handoffs.forget(request.key().as_str(), *request.owner());
        grant
    }
}

#[async_trait]
impl FairBackend for MemoryBackend {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        self.reachable().await?;
        self.shared.handoffs.forget(key.as_str(), *owner);
        let now = Instant::now();
        let handed = {
            let mut state = self.lock_state();
            state.leave(key, owner);
            // A grant a release handed this waiter, which gave up: given back.
            state.free_and_hand_over(key, owner, now).1
        };
        // The next waiter may be first now.
        self.tell_release(key, handed);
        Ok(())
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        self.reachable().await?;
        self.shared.handoffs.expect(key.as_str(), *owner);
        let registration = self
            .shared
            .waiters
            .register_tagged(key.as_str(), &owner.to_hex());
        Ok(Some(registration.changes))
    }

    fn handoffs(&self) -> Option<&dyn Handoffs> {
        Some(&self.shared.handoffs)
    }
}

#[async_trait]
impl SetBackend for MemoryBackend {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        for (index, request) in requests.iter().enumerate() {
            if let Some(holder) = state.live(request.key(), now) {
                if holder.owner != *request.owner() {
                    let remaining = Some(holder.expires_at.saturating_duration_since(now));
                    return Ok(SetGrant::Held { index, remaining });
                }
            }
        }
        // Every key was free or its owner's a moment ago, under the same lock: each
        // grant succeeds (a count short of the requests would be refused by core).
        let fences = requests
            .iter()
            .filter_map(|request| match state.grant(request, now) {
                Grant::Granted(fence) => Some(fence),
                Grant::Held { .. } => None,
            })
            .collect();
        Ok(SetGrant::Granted(fences))
    }
}

#[async_trait]
impl OperatorBackend for MemoryBackend {
    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        self.reachable().await?;
        let now = Instant::now();
        let removed = {
            let mut state = self.lock_state();
            state.live(key, now).is_some() && state.locks.remove(key).is_some()
        };
        if removed {
            self.shared.waiters.wake(key.as_str());
        }
        Ok(removed)
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        self.reachable().await?;
        let now = Instant::now();
        let state = self.lock_state();
        let mut found: Vec<(LockKey, LockInfo)> = state
            .locks
            .iter()
            .filter(|(key, h)| key.as_str().starts_with(prefix) && h.expires_at > now)
            .map(|(key, h)| (key.clone(), h.info(now)))
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }
}
