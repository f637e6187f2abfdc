//! Deliberately broken backends, each with one bug seen in a real lock library: the
//! suite must catch every one with the case named for it. The same backend without
//! the bug passes those cases, so a catch is the bug's doing and nothing else's.
//!
//! One bug of other libraries cannot be written here any more: validity counted from
//! the reply (node-redlock #274). Core counts every lease's validity from before the
//! request, for every backend, and a backend only reports what its server did; the
//! case `lease_validity_counted_from_before_the_request` still checks the outcome.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use distlock_conformance::{LinkControl, RoundTripMeter, ServerControl, Target};
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FenceDurability, Grant,
    HolderRecords, OperatorBackend, OwnerToken, ReleaseOutcome, Renewal, SetBackend, SetGrant,
    WakeRegistry,
};
use distlock_core::{
    BoxError, DynLockBackend, Error, ErrorKind, FencingToken, Holder, LockBackend, LockInfo,
    LockKey, Result,
};
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::{sleep, timeout, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Checks that the key is free, then sets it, in two steps.
    NonAtomicAcquire,
    /// Deletes the key whoever holds it (the seed pattern before compare-and-delete).
    ReleaseWithoutOwnerCheck,
    /// GET, then DEL in a second round trip (sidekiq-unique-jobs #94).
    NonAtomicRelease,
    /// Answers "released" even when the caller did not hold the key (go-redsync #81).
    ReleaseIgnoresNotHeld,
    /// Deletes the key on an early release within a least hold, as a plain release.
    EarlyReleaseFreesAtOnce,
    /// Shortens the lease of whoever holds the key on an early release (`PEXPIRE key
    /// ttl` with no owner check).
    EarlyReleaseIgnoresOwner,
    /// Gives up on an early release's reply after 2 s, and then undoes what the step
    /// did on the server (a cleanup on any error that frees the fresh lease the step
    /// moved the key onto): a step applied with its reply lost frees the key at once.
    EarlyReleaseUndoneOnTimeout,
    /// Re-creates a free key on extend (redlock-rb #36, redis-semaphore #175).
    ExtendReacquires,
    /// Mints a new fence on every extend (pglock's record version number).
    ExtendChangesFence,
    /// Mints random fences while promising increasing ones (gears-rust #4863).
    RandomFence,
    /// Declares durable fences but restarts the counter from zero (bluetape4k #1069).
    FenceResetsOnRestart,
    /// Judges expiry by a client clock running 250 ms ahead (ShedLock #231).
    ClientClockExpiry,
    /// Declares change notification but never sends one (Redisson #1763).
    SilentNotifications,
    /// Answers `watch` with a stream but declares no change notification, so that
    /// the client never watches it and its waiters poll.
    WatchUndeclared,
    /// Puts the password it was given into its authentication error.
    SecretInErrors,
    /// Keeps the locks in the client, as a cache it trusts (each client its own store).
    StatePerClient,
    /// Mints fences from a counter in the client (gears-rust #4863's per-client tokens).
    FencePerClient,
    /// Wakes only the waiters of the client that released.
    NotifyPerClient,
    /// Compares only the first 8 bytes of owner tokens (a 64-bit ID made of the token).
    OwnerPrefixCompare,
    /// Normalises keys (trimmed, lower case), so that distinct keys share one lock.
    KeysNormalised,
    /// Mints fences from a clock with 100 ms ticks, so grants within a tick share one.
    FenceFromCoarseClock,
    /// Applies TTLs in whole seconds, rounded down.
    TtlInWholeSeconds,
    /// Releases by owner token alone, whatever the key (`DELETE ... WHERE owner = $1`).
    ReleaseByOwnerOnly,
    /// Checks the owner, then sets the key's expiry in a second round trip (GET, then
    /// PEXPIRE): an expiry in the gap lets it prolong the next holder's lease.
    NonAtomicExtend,
    /// Keeps a key's fence counter in its lock record, which a forced release deletes.
    ForceReleaseResetsFences,
    /// Raises every TTL to one second it does not declare (as etcd raises a lease's TTL
    /// to its minimum).
    TtlFloorUndeclared,
    /// Stores keys cut to 200 bytes (a column too narrow, truncated without an error).
    KeysTruncated,
    /// Lists every record it keeps, expired leases too (a listing query without the
    /// expiry filter that every other query has).
    ListsExpired,
    /// Answers who holds a key from the answer it gave last, until a grant anywhere
    /// mints a fence (a read cache invalidated by grants only): an expired or released
    /// lease is still shown, with the time it had left when it was cached.
    InspectsFromCache,
    /// Extends whoever holds the key (`PEXPIRE key ttl` with no owner check).
    ExtendIgnoresOwner,
    /// Takes over an expired record keeping its fence (an upsert that sets the owner
    /// and the expiry, and forgets the fence column).
    TakeoverKeepsFence,
    /// Keeps each key's fence counter in a cache of the 8 keys used last, so a key's
    /// counter starts again once evicted (counters kept with an eviction policy).
    FenceCountersEvicted,
    /// Checks the owner, then writes the whole record in a second round trip (GET,
    /// then `SET key owner PX ttl`): a release in the gap is undone.
    ExtendRewritesRecord,
    /// Answers "released" and deletes nothing (a DEL of a key spelt another way).
    ReleaseLeavesRecord,
    /// Answers "renewed" and leaves the expiry where it was (a PEXPIRE of a key spelt
    /// another way).
    ExtendDoesNotProlong,
    /// Queues the owners that asked for a held key and hands the key to the first of
    /// them on release, whether it still waits or not (a server-side queue without
    /// leaving).
    QueuesWithoutLeaving,
    /// Refuses TTLs under a second as zero, the minimum it declares included (a TTL
    /// kept in whole seconds, rounded down, then checked).
    ShortTtlsRefused,
    /// Declares a set of keys taken in one step, but takes them one by one and keeps
    /// those it took when a later one is held (a multi-key lock that does not undo).
    AtomicSetKeepsPart,
    /// Checks a renewal against a replica that applies writes 100 ms late, so a renewal
    /// right after its grant finds no key (a read-only check served from a member's own
    /// state, behind the leader's).
    RenewReadsBehind,
    /// Answers a renewal the server has not answered within 50 ms from what the client
    /// remembers: "renewed" (an optimistic cache of its own leases).
    RenewsFromCacheWhenSlow,
    /// Answers a renewal the server has not answered within 50 ms with "not held" (a
    /// time-out taken for a lost lease).
    SlowRenewalIsNotHeld,
    /// Reports a server that refuses connections as a permanent backend error, not as
    /// unavailable and retryable.
    UntypedErrors,
    /// Never reconnects once its connection is closed: every later call fails.
    NoReconnect,
    /// Stops waiting for an acquire's reply after 100 ms and answers a time-out,
    /// leaving whatever the request takes when it lands on the server (a timeout per
    /// server with no release after it).
    GivesUpLeavingTheGrant,
    /// Answers an acquire retried by the owner that holds the key (its first reply
    /// lost) "granted" without restarting the expiry: the client counts a fresh TTL
    /// that the server does not keep.
    RetryKeepsTheExpiry,
    /// Refuses an acquire retried by the owner that holds the key (its first reply
    /// lost): the key stays held by nobody working until its TTL.
    RetryRefused,
    /// Answers a set retried by the owners that hold its keys (its first reply lost)
    /// "granted" without restarting the keys' expiry.
    SetRetryKeepsTheExpiry,
    /// Answers a refusal with the asker's TTL as the holder's remaining time (the
    /// request's TTL read where the record's expiry was meant).
    HeldRemainingIsTheTtl,
    /// Waits for a server that does not answer by blocking the thread (a synchronous
    /// driver called from async code, with a time-out of 2 s of its own), so that no
    /// deadline can cut the step short.
    BlockingSteps,
    /// Releases only the grants it heard were granted (as a Redlock client that
    /// releases only on the masters that answered "granted"): a grant whose reply was
    /// lost stays held until its TTL.
    ReleasesOnlyWhatItHeard,
    /// Stores a key's holder with its first grant only: a takeover leaves the last
    /// holder's name in the record (an upsert that updates the owner, not the rest).
    HolderKeptOnTakeover,
    /// Keeps no lease longer than 3 s, whatever it was asked, and declares no such
    /// maximum (a server's own lease limit, clamped silently).
    TtlCappedUndeclared,
    /// Sends a request again on a new connection when its connection dropped with no
    /// reply, and reports a refusal of the resend as "not sent", though the first send
    /// may have been applied: nothing gives back what it took.
    ResendRefusedIsNotSent,
}

/// The simulated server's state beyond its data: paused, down, and which generation
/// of connections it keeps open (a kill of connections starts a new one).
#[derive(Debug)]
struct Server {
    paused: watch::Sender<bool>,
    down: AtomicBool,
    generation: AtomicU64,
    clients: AtomicUsize,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            paused: watch::Sender::new(false),
            down: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            clients: AtomicUsize::new(0),
        }
    }
}

#[derive(Debug)]
struct Naive {
    /// This client itself, for a request that goes on after its caller gave up.
    me: Weak<Naive>,
    bug: Bug,
    caps: Capabilities,
    /// The "server": the locks and the fence counter, shared by every client.
    state: Arc<Mutex<State>>,
    /// The fence counter of this client alone, for `FencePerClient`.
    own_counter: Mutex<u64>,
    waiters: Arc<WakeRegistry>,
    trips: Arc<Trips>,
    server: Arc<Server>,
    /// The generation of this client's connection: behind the server's, it was closed.
    connection: AtomicU64,
    /// This client's network link: cut, and the one-way latency.
    link: Arc<watch::Sender<(bool, Duration)>>,
    /// Whether the replies to this client are held (a lost reply).
    replies_held: Arc<watch::Sender<bool>>,
    /// This client's connection faults: each request reset after it was applied, new
    /// connections refused, and new connections accepted, then dropped.
    connection_faults: Arc<watch::Sender<(bool, bool, bool)>>,
    /// The grants whose reply reached this client (for `ReleasesOnlyWhatItHeard`).
    heard: Mutex<Vec<(LockKey, OwnerToken)>>,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockKey, (OwnerToken, u64, Instant)>,
    /// Each key's holder and grant time, as the last grant stored them.
    holders: HashMap<LockKey, (Holder, SystemTime)>,
    counter: u64,
    /// Per-key counters, the last used last, for `FenceCountersEvicted`.
    counters: Vec<(LockKey, u64)>,
    /// Each key's last inspect answer and the fence counter when it was given, for
    /// `InspectsFromCache`.
    inspected: HashMap<LockKey, (Option<LockInfo>, u64)>,
    /// The owners that asked for each held key, for `QueuesWithoutLeaving`.
    queues: HashMap<LockKey, Vec<(OwnerToken, Duration)>>,
}

impl State {
    /// `info` with the holder stored for `key`.
    fn held_by(&self, key: &LockKey, info: LockInfo) -> LockInfo {
        match self.holders.get(key) {
            Some((holder, at)) => info.held_by(Some(holder.clone()), Some(*at)),
            None => info,
        }
    }
}

/// The round trips every Naive backend has made, for the round-trip case's meter.
#[derive(Debug, Default)]
struct Trips(AtomicU64);

impl RoundTripMeter for Trips {
    fn round_trips(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Naive {
    fn new(bug: Bug) -> Arc<Self> {
        let mut caps = Capabilities::default();
        caps.fence_durability = FenceDurability::Durable;
        caps.change_notification = bug != Bug::WatchUndeclared;
        // Above a round trip (1 ms) and a timer's tick, so that the shortest lease can
        // be granted before it runs out.
        caps.min_ttl = Duration::from_millis(10);
        caps.holder_records = HolderRecords::ServerClock;
        Arc::new_cyclic(|me| Naive {
            me: me.clone(),
            bug,
            caps,
            state: Arc::default(),
            own_counter: Mutex::new(0),
            waiters: Arc::default(),
            trips: Arc::default(),
            server: Arc::new(Server {
                clients: AtomicUsize::new(1),
                ..Server::default()
            }),
            connection: AtomicU64::new(0),
            link: Arc::new(watch::Sender::new((false, Duration::ZERO))),
            replies_held: Arc::new(watch::Sender::new(false)),
            connection_faults: Arc::new(watch::Sender::new((false, false, false))),
            heard: Mutex::default(),
        })
    }

    /// Another client of the same server; what it shares depends on the bug.
    fn another_client(&self) -> Arc<Self> {
        Arc::new_cyclic(|me| Naive {
            me: me.clone(),
            bug: self.bug,
            caps: self.caps.clone(),
            state: if self.bug == Bug::StatePerClient {
                Arc::default()
            } else {
                self.state.clone()
            },
            own_counter: Mutex::new(0),
            waiters: if self.bug == Bug::NotifyPerClient {
                Arc::default()
            } else {
                self.waiters.clone()
            },
            trips: self.trips.clone(),
            server: self.server.clone(),
            connection: {
                self.server.clients.fetch_add(1, Ordering::SeqCst);
                AtomicU64::new(self.server.generation.load(Ordering::SeqCst))
            },
            link: Arc::new(watch::Sender::new((false, Duration::ZERO))),
            replies_held: Arc::new(watch::Sender::new(false)),
            connection_faults: Arc::new(watch::Sender::new((false, false, false))),
            heard: Mutex::default(),
        })
    }

    /// A network round trip of `length` (plus the link's latency both ways), so that
    /// check-then-act bugs have a gap to fall into; counted by the target's meter.
    /// It waits while the link is cut or the server paused, and fails while the server
    /// is down or once this client's connection was closed (it reconnects on the next
    /// call, unless that is the bug).
    async fn trip_of(&self, length: Duration) -> Result<()> {
        self.trips.0.fetch_add(1, Ordering::SeqCst);
        if self.bug == Bug::BlockingSteps {
            // The thread waits, not the task: for 2 s at the most, then an error.
            let blocked_until = std::time::Instant::now() + Duration::from_secs(2);
            while self.link.borrow().0 || *self.server.paused.borrow() {
                if std::time::Instant::now() >= blocked_until {
                    return Err(Error::new(ErrorKind::Unavailable, "no reply within 2 s"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let mut link = self.link.subscribe();
        let _ = link.wait_for(|(cut, _)| !cut).await;
        let latency = link.borrow().1;
        sleep(latency).await;
        if self.server.down.load(Ordering::SeqCst) {
            return Err(match self.bug {
                Bug::UntypedErrors => {
                    Error::new(ErrorKind::Backend, "connection refused").with_retryable(false)
                }
                _ => Error::new(ErrorKind::Unavailable, "connection refused").with_not_sent(),
            });
        }
        if self.connection_faults.borrow().2 {
            // Every connection this client opens is closed as it opens.
            return Err(match self.bug {
                Bug::UntypedErrors => {
                    Error::new(ErrorKind::Backend, "connection closed").with_retryable(false)
                }
                _ => Error::new(ErrorKind::Unavailable, "the connection closed as it opened")
                    .with_not_sent(),
            });
        }
        let current = self.server.generation.load(Ordering::SeqCst);
        if self.connection.load(Ordering::SeqCst) != current {
            if self.bug != Bug::NoReconnect {
                self.connection.store(current, Ordering::SeqCst);
            }
            return Err(Error::new(
                ErrorKind::Unavailable,
                "connection reset by peer",
            ));
        }
        let _ = self
            .server
            .paused
            .subscribe()
            .wait_for(|paused| !paused)
            .await;
        sleep(length + latency).await;
        Ok(())
    }

    async fn round_trip(&self) -> Result<()> {
        self.trip_of(Duration::from_millis(1)).await
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The owner and fence of `key` if held now (by this backend's idea of now).
    fn holder(&self, key: &LockKey) -> Option<(OwnerToken, u64)> {
        let skew = if self.bug == Bug::ClientClockExpiry {
            Duration::from_millis(250)
        } else {
            Duration::ZERO
        };
        let now = Instant::now() + skew;
        let state = self.state();
        state
            .locks
            .get(&self.stored(key))
            .filter(|(_, _, exp)| *exp > now)
            .map(|(o, f, _)| (*o, *f))
    }

    /// The key as this backend stores it.
    fn stored(&self, key: &LockKey) -> LockKey {
        if self.bug == Bug::KeysNormalised {
            LockKey::new(key.as_str().trim().to_lowercase()).unwrap_or_else(|_| key.clone())
        } else if self.bug == Bug::KeysTruncated && key.as_str().len() > 200 {
            let mut end = 200;
            while !key.as_str().is_char_boundary(end) {
                end -= 1;
            }
            LockKey::new(&key.as_str()[..end]).unwrap_or_else(|_| key.clone())
        } else {
            key.clone()
        }
    }

    /// Whether two owner tokens are the same, by this backend's comparison.
    fn same_owner(&self, a: &OwnerToken, b: &OwnerToken) -> bool {
        if self.bug == Bug::OwnerPrefixCompare {
            a.as_bytes()[..8] == b.as_bytes()[..8]
        } else {
            a == b
        }
    }

    /// The expiry of a lease granted or renewed now for `ttl`.
    fn expiry(&self, ttl: Duration) -> Instant {
        if self.bug == Bug::TtlInWholeSeconds {
            Instant::now() + Duration::from_secs(ttl.as_secs())
        } else if self.bug == Bug::TtlFloorUndeclared {
            Instant::now() + ttl.max(Duration::from_secs(1))
        } else if self.bug == Bug::TtlCappedUndeclared {
            Instant::now() + ttl.min(Duration::from_secs(3))
        } else {
            Instant::now() + ttl
        }
    }

    fn next_fence(&self, state: &mut State, key: &LockKey) -> u64 {
        if self.bug == Bug::FenceCountersEvicted {
            let kept = state.counters.iter().position(|(k, _)| k == key);
            let last = kept.map_or(0, |i| state.counters.remove(i).1);
            if state.counters.len() == 8 {
                state.counters.remove(0);
            }
            state.counters.push((key.clone(), last + 1));
            return last + 1;
        }
        if self.bug == Bug::FenceFromCoarseClock {
            let since_epoch = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            return u64::try_from(since_epoch.as_millis() / 100).unwrap_or(u64::MAX);
        }
        if self.bug == Bug::FencePerClient {
            let mut own = self.own_counter.lock().unwrap_or_else(|p| p.into_inner());
            *own += 1;
            return *own;
        }
        state.counter += 1;
        if self.bug == Bug::RandomFence {
            rand::random::<u64>() % 1000
        } else {
            state.counter
        }
    }

    fn notify(&self, key: &LockKey) {
        if self.bug != Bug::SilentNotifications {
            self.waiters.wake(key.as_str());
        }
    }
}

#[async_trait]
impl LockBackend for Naive {
    fn sets(&self) -> Option<&dyn SetBackend> {
        // The clean backend takes a set in one step; so does the bug that gets it
        // wrong. Every other bug takes sets key by key, where the set cases catch it.
        matches!(
            self.bug,
            Bug::None | Bug::AtomicSetKeepsPart | Bug::SetRetryKeepsTheExpiry
        )
        .then_some(self)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn name(&self) -> &str {
        "naive"
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    async fn try_grant(&self, r: &AcquireRequest) -> Result<Grant> {
        if let (Bug::GivesUpLeavingTheGrant, Some(me)) = (self.bug, self.me.upgrade()) {
            let request = r.clone();
            let sent = tokio::spawn(async move { me.grant(&request).await });
            return match timeout(Duration::from_millis(100), sent).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(e)) => Err(Error::new(ErrorKind::Backend, e.to_string())),
                Err(_) => Err(Error::new(ErrorKind::Timeout, "no reply within 100 ms")),
            };
        }
        let (reset, refused, _) = *self.connection_faults.borrow();
        if refused && !reset {
            return Err(
                Error::new(ErrorKind::Unavailable, "the connection was refused").with_not_sent(),
            );
        }
        let grant = self.grant(r).await;
        if reset {
            // Applied, then the connection reset before the reply; sent again on a new
            // connection, which is refused.
            if !refused {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "the connection was reset",
                ));
            }
            let resend = Error::new(
                ErrorKind::Unavailable,
                "the connection was reset, and the request sent again was refused",
            );
            return Err(if self.bug == Bug::ResendRefusedIsNotSent {
                resend.with_not_sent()
            } else {
                resend
            });
        }
        // Applied: the reply waits while replies are held.
        let _ = self.replies_held.subscribe().wait_for(|held| !held).await;
        if let Ok(Grant::Granted(_)) = &grant {
            self.heard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((r.key().clone(), *r.owner()));
        }
        grant
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.connection_refused()?;
        self.release_step(key, owner).await
    }

    async fn renew(&self, r: &ExtendRequest) -> Result<Renewal> {
        self.connection_refused()?;
        self.renew_step(r).await
    }

    async fn release_after(&self, r: &ExtendRequest) -> Result<ReleaseOutcome> {
        self.connection_refused()?;
        if self.bug == Bug::EarlyReleaseFreesAtOnce {
            return self.release_step(r.key(), r.owner()).await;
        }
        if self.bug == Bug::EarlyReleaseIgnoresOwner {
            self.round_trip().await?;
            let expiry = self.expiry(r.ttl());
            let mut state = self.state();
            let live = state
                .locks
                .get_mut(&self.stored(r.key()))
                .filter(|(_, _, exp)| *exp > Instant::now());
            return Ok(match live {
                Some(entry) => {
                    entry.2 = expiry;
                    ReleaseOutcome::Released
                }
                None => ReleaseOutcome::NotHeld,
            });
        }
        let outcome = match self.renew_step(r).await? {
            Renewal::Renewed => ReleaseOutcome::Released,
            _ => ReleaseOutcome::NotHeld,
        };
        // Applied: the reply waits while replies are held.
        let mut held = self.replies_held.subscribe();
        if self.bug == Bug::EarlyReleaseUndoneOnTimeout {
            let reply = timeout(Duration::from_secs(2), held.wait_for(|held| !held)).await;
            if reply.is_err() {
                if outcome == ReleaseOutcome::Released {
                    self.state().locks.remove(&self.stored(r.key()));
                    self.notify(r.key());
                }
                return Err(Error::new(ErrorKind::Timeout, "no reply within 2s"));
            }
        }
        let _ = held.wait_for(|held| !held).await;
        Ok(outcome)
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.connection_refused()?;
        self.inspect_step(key).await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        Ok(Some(self.waiters.register(key.as_str()).changes))
    }
}

#[async_trait]
impl SetBackend for Naive {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let answer = self.grant_all(requests).await;
        // Applied: the reply waits while replies are held.
        let _ = self.replies_held.subscribe().wait_for(|held| !held).await;
        answer
    }
}

impl Naive {
    /// While this client's new connections are refused, a step other than a grant
    /// (which does its own faults) cannot be sent: its connection was reset or is
    /// refused. An abandoned grant's cleanup then cannot release it either.
    fn connection_refused(&self) -> Result<()> {
        let (reset, refused, _) = *self.connection_faults.borrow();
        match (reset, refused) {
            (_, false) => Ok(()),
            (false, true) => Err(
                Error::new(ErrorKind::Unavailable, "the connection was refused").with_not_sent(),
            ),
            (true, true) => Err(Error::new(
                ErrorKind::Unavailable,
                "the connection was reset, and the request sent again was refused",
            )),
        }
    }

    /// The server's side of a set's step.
    async fn grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        if self.bug == Bug::AtomicSetKeepsPart {
            let mut fences = Vec::with_capacity(requests.len());
            for (index, r) in requests.iter().enumerate() {
                match self.grant(r).await? {
                    Grant::Granted(fence) => fences.push(fence),
                    Grant::Held { remaining } => return Ok(SetGrant::Held { index, remaining }),
                    other => {
                        return Err(Error::new(ErrorKind::Backend, format!("{other:?}")));
                    }
                }
            }
            return Ok(SetGrant::Granted(fences));
        }
        self.round_trip().await?;
        if self.bug == Bug::SetRetryKeepsTheExpiry {
            let own: Option<Vec<FencingToken>> = requests
                .iter()
                .map(|r| {
                    self.holder(r.key())
                        .filter(|(owner, _)| owner == r.owner())
                        .map(|(_, fence)| FencingToken::new(fence))
                })
                .collect();
            if let Some(fences) = own {
                return Ok(SetGrant::Granted(fences));
            }
        }
        let held = requests.iter().position(|r| {
            self.holder(r.key())
                .is_some_and(|(owner, _)| owner != *r.owner())
        });
        if let Some(index) = held {
            return Ok(SetGrant::Held {
                index,
                remaining: None,
            });
        }
        let mut state = self.state();
        let fences = requests
            .iter()
            .map(|r| {
                let fence = self.next_fence(&mut state, r.key());
                state.locks.insert(
                    self.stored(r.key()),
                    (*r.owner(), fence, self.expiry(r.ttl())),
                );
                let holder = (r.holder().clone(), SystemTime::now());
                state.holders.insert(self.stored(r.key()), holder);
                FencingToken::new(fence)
            })
            .collect();
        Ok(SetGrant::Granted(fences))
    }
}

#[async_trait]
impl OperatorBackend for Naive {
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        self.scan_step(prefix).await
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        self.force_release_step(key).await
    }
}

/// The server's side of each step, as the buggy backend does it.
impl Naive {
    async fn grant(&self, r: &AcquireRequest) -> Result<Grant> {
        self.round_trip().await?;
        if self.bug == Bug::ShortTtlsRefused && r.ttl() < Duration::from_secs(1) {
            return Err(Error::new(ErrorKind::InvalidTtl, "the ttl is 0 s"));
        }
        if let Some((owner, fence)) = self.holder(r.key()) {
            if owner == *r.owner() {
                // A retry of this very request whose reply was lost.
                match self.bug {
                    Bug::RetryRefused => return Ok(Grant::Held { remaining: None }),
                    Bug::RetryKeepsTheExpiry => {}
                    _ => {
                        let expiry = self.expiry(r.ttl());
                        if let Some(held) = self.state().locks.get_mut(&self.stored(r.key())) {
                            held.2 = expiry;
                        }
                    }
                }
                return Ok(Grant::Granted(FencingToken::new(fence)));
            }
            if self.bug == Bug::QueuesWithoutLeaving {
                let mut state = self.state();
                let queue = state.queues.entry(self.stored(r.key())).or_default();
                if !queue.iter().any(|(o, _)| o == r.owner()) {
                    queue.push((*r.owner(), r.ttl()));
                }
            }
            let remaining = if self.bug == Bug::HeldRemainingIsTheTtl {
                Some(r.ttl())
            } else {
                let state = self.state();
                let held = state.locks.get(&self.stored(r.key()));
                held.map(|(_, _, expiry)| expiry.saturating_duration_since(Instant::now()))
            };
            return Ok(Grant::Held { remaining });
        }
        if self.bug == Bug::NonAtomicAcquire {
            self.round_trip().await?;
        }
        let mut state = self.state();
        let expired = state.locks.get(&self.stored(r.key())).map(|(_, f, _)| *f);
        let fence = match expired {
            Some(kept) if self.bug == Bug::TakeoverKeepsFence => kept,
            _ => self.next_fence(&mut state, r.key()),
        };
        state.locks.insert(
            self.stored(r.key()),
            (*r.owner(), fence, self.expiry(r.ttl())),
        );
        let stored = self.stored(r.key());
        if self.bug != Bug::HolderKeptOnTakeover || !state.holders.contains_key(&stored) {
            let holder = (r.holder().clone(), SystemTime::now());
            state.holders.insert(stored, holder);
        }
        Ok(Grant::Granted(FencingToken::new(fence)))
    }

    async fn release_step(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.round_trip().await?;
        if self.bug == Bug::ReleasesOnlyWhatItHeard
            && !self
                .heard
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|(k, o)| k == key && o == owner)
        {
            return Ok(ReleaseOutcome::NotHeld);
        }
        if self.bug == Bug::ReleaseByOwnerOnly {
            let now = Instant::now();
            let mut state = self.state();
            let before = state.locks.len();
            state
                .locks
                .retain(|_, (o, _, exp)| !(o == owner && *exp > now));
            let released = state.locks.len() < before;
            drop(state);
            self.notify(key);
            return Ok(if released {
                ReleaseOutcome::Released
            } else {
                ReleaseOutcome::NotHeld
            });
        }
        let held = self
            .holder(key)
            .is_some_and(|(o, _)| self.same_owner(&o, owner));
        if self.bug == Bug::NonAtomicRelease && held {
            // The DEL, a second (slow) round trip after the GET.
            self.trip_of(Duration::from_millis(20)).await?;
        }
        let delete = (held || self.bug == Bug::ReleaseWithoutOwnerCheck)
            && self.bug != Bug::ReleaseLeavesRecord;
        if delete && self.state().locks.remove(&self.stored(key)).is_some() {
            if self.bug == Bug::QueuesWithoutLeaving {
                let mut state = self.state();
                let next = state
                    .queues
                    .get_mut(&self.stored(key))
                    .and_then(|q| (!q.is_empty()).then(|| q.remove(0)));
                if let Some((owner, ttl)) = next {
                    let fence = self.next_fence(&mut state, key);
                    state
                        .locks
                        .insert(self.stored(key), (owner, fence, self.expiry(ttl)));
                }
            }
            self.notify(key);
        }
        if held || self.bug == Bug::ReleaseIgnoresNotHeld {
            Ok(ReleaseOutcome::Released)
        } else {
            Ok(ReleaseOutcome::NotHeld)
        }
    }

    async fn renew_step(&self, r: &ExtendRequest) -> Result<Renewal> {
        if self.bug == Bug::ExtendRewritesRecord {
            // The GET reaches the server at once; the SET follows a (slow) round trip
            // later, whatever happened to the key meanwhile.
            let held = self
                .holder(r.key())
                .filter(|(o, _)| o == r.owner())
                .map(|(_, fence)| fence);
            self.trip_of(Duration::from_millis(20)).await?;
            let Some(fence) = held else {
                return Ok(Renewal::NotHeld);
            };
            let record = (*r.owner(), fence, self.expiry(r.ttl()));
            self.state().locks.insert(self.stored(r.key()), record);
            return Ok(Renewal::Renewed);
        }
        let slow = match self.bug {
            Bug::RenewsFromCacheWhenSlow => Some(Renewal::Renewed),
            Bug::SlowRenewalIsNotHeld => Some(Renewal::NotHeld),
            _ => None,
        };
        match slow {
            Some(answer) => {
                if timeout(Duration::from_millis(50), self.round_trip())
                    .await
                    .is_err()
                {
                    return Ok(answer);
                }
            }
            None => self.round_trip().await?,
        }
        if self.bug == Bug::RenewReadsBehind {
            let granted = self.state().holders.get(&self.stored(r.key())).map(|h| h.1);
            let behind =
                |at: SystemTime| at.elapsed().unwrap_or_default() < Duration::from_millis(100);
            if granted.is_some_and(behind) {
                return Ok(Renewal::NotHeld);
            }
        }
        let holder = self.holder(r.key());
        let held = holder.is_some_and(|(o, _)| {
            self.same_owner(&o, r.owner()) || self.bug == Bug::ExtendIgnoresOwner
        });
        if self.bug == Bug::ExtendDoesNotProlong && held {
            return Ok(Renewal::Renewed);
        }
        if self.bug == Bug::NonAtomicExtend && held {
            // The PEXPIRE, a second (slow) round trip after the GET: it sets the expiry
            // of whoever holds the key by then.
            self.trip_of(Duration::from_millis(20)).await?;
            let expiry = self.expiry(r.ttl());
            if let Some(entry) = self.state().locks.get_mut(&self.stored(r.key())) {
                entry.2 = expiry;
            }
            return Ok(Renewal::Renewed);
        }
        let mut state = self.state();
        let fence = match holder {
            Some((_, f)) if held => {
                if self.bug == Bug::ExtendChangesFence {
                    self.next_fence(&mut state, r.key())
                } else {
                    f
                }
            }
            None if self.bug == Bug::ExtendReacquires => r.fence().get(),
            _ => return Ok(Renewal::NotHeld),
        };
        state.locks.insert(
            self.stored(r.key()),
            (*r.owner(), fence, self.expiry(r.ttl())),
        );
        Ok(Renewal::Renewed)
    }

    async fn inspect_step(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.round_trip().await?;
        let now = Instant::now();
        let mut state = self.state();
        if self.bug == Bug::InspectsFromCache {
            if let Some((cached, at)) = state.inspected.get(&self.stored(key)) {
                if *at == state.counter {
                    return Ok(cached.clone());
                }
            }
        }
        let shown = state
            .locks
            .get(&self.stored(key))
            .filter(|(_, _, exp)| *exp > now)
            .map(|(_, f, exp)| {
                let info = LockInfo::new(FencingToken::new(*f), *exp - now);
                state.held_by(&self.stored(key), info)
            });
        if self.bug == Bug::InspectsFromCache {
            let counter = state.counter;
            state
                .inspected
                .insert(self.stored(key), (shown.clone(), counter));
        }
        Ok(shown)
    }

    async fn scan_step(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        self.round_trip().await?;
        let now = Instant::now();
        let state = self.state();
        Ok(state
            .locks
            .iter()
            .filter(|(key, (_, _, exp))| {
                key.as_str().starts_with(prefix) && (*exp > now || self.bug == Bug::ListsExpired)
            })
            .map(|(key, (_, f, exp))| {
                let info = LockInfo::new(FencingToken::new(*f), exp.saturating_duration_since(now));
                (key.clone(), state.held_by(key, info))
            })
            .collect())
    }

    async fn force_release_step(&self, key: &LockKey) -> Result<bool> {
        let removed = {
            let mut state = self.state();
            if self.bug == Bug::ForceReleaseResetsFences {
                state.counter = 0;
            }
            state.locks.remove(&self.stored(key)).is_some()
        };
        self.notify(key);
        Ok(removed)
    }
}

/// The server's faults: a pause holds every request until it ends, a kill fails them
/// until the start (the data survives, as on disk), a restart clears the leases (and
/// the counter too when that is the bug), and a kill of connections closes every
/// client's connection.
#[derive(Debug)]
struct NaiveControl(Arc<Naive>);

#[async_trait]
impl ServerControl for NaiveControl {
    async fn pause(&self) -> Result<(), BoxError> {
        self.0.server.paused.send_replace(true);
        Ok(())
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        self.0.server.paused.send_replace(false);
        Ok(())
    }
    async fn restart(&self) -> Result<(), BoxError> {
        let mut state = self.0.state();
        state.locks.clear();
        if self.0.bug == Bug::FenceResetsOnRestart {
            state.counter = 0;
        }
        Ok(())
    }
    async fn kill(&self) -> Result<(), BoxError> {
        self.0.server.down.store(true, Ordering::SeqCst);
        self.0.server.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    async fn start(&self) -> Result<(), BoxError> {
        self.0.server.down.store(false, Ordering::SeqCst);
        Ok(())
    }
    fn can_kill_connections(&self) -> bool {
        true
    }
    async fn kill_connections(&self) -> Result<(), BoxError> {
        self.kill_connections_counted().await.map(drop)
    }
    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        self.0.server.generation.fetch_add(1, Ordering::SeqCst);
        Ok(Some(self.0.server.clients.load(Ordering::SeqCst)))
    }
}

/// A client's link to the server, for the partition cases, and whether its replies
/// are held.
#[derive(Debug)]
struct NaiveLink(
    Arc<watch::Sender<(bool, Duration)>>,
    Arc<watch::Sender<bool>>,
    Arc<watch::Sender<(bool, bool, bool)>>,
);

#[async_trait]
impl LinkControl for NaiveLink {
    async fn cut(&self) -> Result<(), BoxError> {
        self.0.send_modify(|link| link.0 = true);
        Ok(())
    }
    async fn heal(&self) -> Result<(), BoxError> {
        self.0.send_modify(|link| link.0 = false);
        self.1.send_replace(false);
        self.2.send_replace((false, false, false));
        Ok(())
    }
    fn can_hold_replies(&self) -> bool {
        true
    }
    fn can_fail_connections(&self) -> bool {
        true
    }
    async fn reset_after_requests(&self) -> Result<(), BoxError> {
        self.2.send_modify(|faults| faults.0 = true);
        Ok(())
    }
    async fn refuse_connections(&self) -> Result<(), BoxError> {
        self.2.send_modify(|faults| faults.1 = true);
        Ok(())
    }
    async fn drop_new_connections(&self) -> Result<(), BoxError> {
        self.2.send_modify(|faults| faults.2 = true);
        Ok(())
    }
    async fn hold_replies(&self) -> Result<(), BoxError> {
        self.1.send_replace(true);
        Ok(())
    }
    async fn set_latency(&self, one_way: Duration) -> Result<(), BoxError> {
        self.0.send_modify(|link| link.1 = one_way);
        Ok(())
    }
}

fn target(bug: Bug) -> Target {
    let naive = Naive::new(bug);
    let refuse = move || -> BoxFuture<'static, Result<Arc<DynLockBackend>>> {
        let message = if bug == Bug::SecretInErrors {
            format!("password {SECRET} refused")
        } else {
            "password refused".to_owned()
        };
        Box::pin(async move { Err(Error::new(ErrorKind::Authentication, message)) })
    };
    let (server, linked) = (naive.clone(), naive.clone());
    Target::new(naive.clone())
        .with_control(Arc::new(NaiveControl(naive.clone())))
        .with_clients(move || -> BoxFuture<'static, Result<Arc<DynLockBackend>>> {
            let client: Arc<DynLockBackend> = server.another_client();
            Box::pin(async move { Ok(client) })
        })
        .with_links(move || {
            let client = linked.another_client();
            let link: Arc<dyn LinkControl> = Arc::new(NaiveLink(
                client.link.clone(),
                client.replies_held.clone(),
                client.connection_faults.clone(),
            ));
            let client: Arc<DynLockBackend> = client;
            Box::pin(async move { Ok((client, link)) })
        })
        .with_round_trip_meter(naive.clone(), naive.trips.clone())
        .with_wrong_credentials(SECRET, refuse)
}

const SECRET: &str = "not-the-password";

async fn assert_caught(bug: Bug, case_name: &str, expected: &str) {
    support::assert_caught(target, Bug::None, bug, case_name, expected).await;
}

/// `test: Bug by case, saying "what the case's failure must say";`
macro_rules! caught {
    ($($test:ident: $bug:ident by $case:ident, saying $expected:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            assert_caught(Bug::$bug, stringify!($case), $expected).await;
        }
    )*};
}

caught! {
    non_atomic_acquire: NonAtomicAcquire by mutual_exclusion_under_contention, saying "two holders overlapped";
    release_without_owner_check: ReleaseWithoutOwnerCheck by release_by_non_owner_is_not_held, saying "a stranger's release removed the holder";
    non_atomic_release: NonAtomicRelease by release_racing_expiry_spares_the_next_holder, saying "the old holder's release deleted the next holder's lease";
    release_ignores_not_held: ReleaseIgnoresNotHeld by release_twice_is_not_held, saying "the second release answered Released";
    early_release_frees_at_once: EarlyReleaseFreesAtOnce by an_early_release_keeps_the_key_for_the_least_hold_only, saying "after the grant, within its least hold";
    early_release_ignores_owner: EarlyReleaseIgnoresOwner by an_early_release_after_expiry_spares_the_next_holder, saying "the expired holder's early release answered Released";
    early_release_undone_on_timeout: EarlyReleaseUndoneOnTimeout by an_early_release_whose_reply_was_lost_keeps_the_key_for_the_hold, saying "an early release whose reply was lost left the key None";
    extend_reacquires: ExtendReacquires by extend_after_expiry_fails_and_does_not_reacquire, saying "extending an expired lease answered Extended";
    renew_reads_behind: RenewReadsBehind by a_renewal_right_after_the_grant_finds_it, saying "renewals sent right after their grant answered not held";
    extend_changes_fence: ExtendChangesFence by extend_keeps_the_fence, saying "extend changed the key's fence on the server";
    random_fence: RandomFence by fencing_increases_across_release_and_reacquire, saying "followed";
    fence_resets_on_restart: FenceResetsOnRestart by fault_restart_keeps_fences_and_declared_leases, saying "the fence went back from";
    client_clock_expiry: ClientClockExpiry by expiry_frees_the_key_after_the_ttl_not_before, saying "before the ttl ran out";
    silent_notifications: SilentNotifications by client_waiter_is_woken_by_the_release, saying "to notice the release";
    watch_undeclared: WatchUndeclared by change_notification_is_declared_where_watch_answers, saying "capabilities.change_notification is false, but watch answers a stream";
    two_round_trip_acquire: NonAtomicAcquire by operations_take_their_declared_round_trips, saying "acquire took more round trips than declared";
    two_round_trip_release: NonAtomicRelease by operations_take_their_declared_round_trips, saying "release took more round trips than declared";
    secret_in_errors: SecretInErrors by wrong_credentials_fail_fast_without_showing_them, saying "the error shows the secret";
    state_per_client: StatePerClient by exclusion_holds_across_clients, saying "two holders overlapped";
    state_per_client_untouched: StatePerClient by a_lease_is_untouched_by_other_clients, saying "another client acquired a held key";
    fence_per_client: FencePerClient by fences_increase_across_clients, saying "got fence 1 after 1";
    notify_per_client: NotifyPerClient by a_release_wakes_a_waiter_on_another_client, saying "to notice the release";
    owner_prefix_compare: OwnerPrefixCompare by owner_tokens_one_bit_apart_are_strangers, saying "a token differing in byte 8 released the lease";
    keys_normalised: KeysNormalised by keys_that_look_alike_are_distinct_locks, saying "was held: it was taken for one of";
    fence_from_coarse_clock: FenceFromCoarseClock by fencing_increases_across_release_and_reacquire, saying "followed";
    ttl_in_whole_seconds: TtlInWholeSeconds by expiry_frees_the_key_after_the_ttl_not_before, saying "before the ttl ran out";
    release_by_owner_only: ReleaseByOwnerOnly by an_owner_token_releases_only_its_own_key, saying "a token released a key it does not hold";
    non_atomic_extend: NonAtomicExtend by extend_racing_expiry_never_prolongs_the_next_holder, saying "the old holder's extend prolonged it";
    force_release_resets_fences: ForceReleaseResetsFences by fences_increase_across_a_forced_release, saying "after a forced release of fence";
    ttl_floor_undeclared: TtlFloorUndeclared by the_shortest_ttl_is_kept, saying "past its ttl and slack";
    keys_truncated: KeysTruncated by the_longest_keys_are_distinct_locks, saying "keys are cut short";
    lists_expired: ListsExpired by operator_list_shows_exactly_the_held_keys, saying "list(";
    inspects_from_cache: InspectsFromCache by a_sequencer_check_admits_the_live_holders_fence_only, saying "admitted the fence of a lease that expired";
    inspects_from_cache_observed: InspectsFromCache by observing_a_key_reports_each_change_of_holder, saying "no change reported within";
    extend_ignores_owner: ExtendIgnoresOwner by extend_after_takeover_fails, saying "extending a taken-over lease answered Extended";
    release_after_expiry_without_owner_check: ReleaseWithoutOwnerCheck by release_after_expiry_is_not_held, saying "the expired holder deleted the new holder's lease";
    takeover_keeps_fence: TakeoverKeepsFence by fencing_increases_across_takeover, saying "the takeover got fence";
    fence_counters_evicted: FenceCountersEvicted by fencing_increases_over_many_keys, saying "got fence 1 after";
    extend_rewrites_record: ExtendRewritesRecord by extend_racing_release_leaves_nothing, saying "an extend racing the release left the key held";
    release_leaves_record: ReleaseLeavesRecord by acquire_release_cycle, saying "the key is still held after release";
    dropped_guard_leaves_record: ReleaseLeavesRecord by client_dropped_guard_releases, saying "was still held once its release was done";
    extend_does_not_prolong: ExtendDoesNotProlong by client_renewal_keeps_the_lease, saying "the server lost the renewed lease";
    deleted_lease_reacquired: ExtendReacquires by client_lost_fires_when_the_lease_is_deleted, saying "did not fire within";
    queues_without_leaving: QueuesWithoutLeaving by client_dropped_acquire_leaves_nothing, saying "the dropped waiter left a lease behind";
    held_remaining_is_the_ttl: HeldRemainingIsTheTtl by a_busy_try_says_the_key_is_held_and_for_how_long, saying "a busy try said the holder has";
    short_ttls_refused: ShortTtlsRefused by bad_input_gives_typed_errors, saying "asked for the minimum ttl";
    gives_up_leaving_the_grant: GivesUpLeavingTheGrant by a_grant_arriving_after_its_ttl_is_not_returned, saying "the grant that landed after the backend gave up was left behind";
    renews_from_cache_when_paused: RenewsFromCacheWhenSlow by fault_pause_beyond_ttl_signals_loss, saying "did not fire within the ttl";
    renews_from_cache_when_cut_off: RenewsFromCacheWhenSlow by a_cut_off_holder_is_told_before_another_client_gets_in, saying "did not fire within the ttl plus 2 s of the cut";
    slow_renewal_is_not_held: SlowRenewalIsNotHeld by fault_short_pause_is_not_a_loss, saying "a short pause lost the lock";
    untyped_errors: UntypedErrors by fault_killed_server_gives_typed_errors_then_recovers, saying "a killed server gave a Backend error";
    untyped_errors_on_dropped_connections: UntypedErrors by connections_accepted_then_dropped_give_typed_errors_then_recover, saying "gave a Backend error";
    no_reconnect: NoReconnect by fault_killed_connections_do_not_stop_renewal, saying "renewal stopped after the connections were killed";
    set_kept_in_part: ReleaseLeavesRecord by set_is_taken_all_or_nothing, saying "a refused try_lock_all left part of the set held";
    atomic_set_kept_in_part: AtomicSetKeepsPart by a_set_in_one_step_is_whole_or_nothing, saying "a refused set left part of the set held";
    set_cancelled_kept_in_part: ReleaseLeavesRecord by set_cancelled_midway_leaves_nothing_held, saying "still held after";
    sets_held_twice: StatePerClient by sets_in_opposite_orders_do_not_deadlock, saying "both clients held the pair at once";
    set_loss_unsignalled: ExtendReacquires by set_signals_the_loss_of_any_key, saying "did not fire within";
    set_fences_coarse: FenceFromCoarseClock by set_fences_rise_per_key, saying "fences did not rise with each grant";
    holder_kept_on_takeover: HolderKeptOnTakeover by every_grant_shows_its_holder_and_when_it_was_granted, saying "inspect after a release showed the holder";
    leader_kept_on_takeover: HolderKeptOnTakeover by the_leader_is_shown_with_its_value_until_a_successor_takes_over, saying "after a successor took over";
    resume_refused: RetryRefused by a_leader_resumes_its_term_after_a_restart, saying "could not resume its live term";
    retry_keeps_the_expiry: RetryKeepsTheExpiry by a_retried_grant_restarts_the_expiry_it_counts_from, saying "the retry did not restart the expiry";
    retry_refused: RetryRefused by a_retried_grant_restarts_the_expiry_it_counts_from, saying "the owner's own retry was refused";
    lost_reply_retry_keeps_the_expiry: RetryKeepsTheExpiry by a_grant_whose_reply_was_lost_is_granted_again_to_its_owner, saying "the retry did not restart the expiry";
    lost_reply_retry_refused: RetryRefused by a_grant_whose_reply_was_lost_is_granted_again_to_its_owner, saying "whose reply was lost was refused";
    lost_set_retry_keeps_the_expiry: SetRetryKeepsTheExpiry by a_set_whose_reply_was_lost_is_granted_again_to_its_owners, saying "the retry did not restart the expiry";
    blocking_steps_on_a_paused_server: BlockingSteps by lock_on_a_paused_server_ends_at_its_deadline, saying "returned Timeout after";
    blocking_steps_over_a_cut_link: BlockingSteps by lock_over_a_cut_link_ends_at_its_deadline, saying "returned Timeout after";
    releases_only_what_it_heard: ReleasesOnlyWhatItHeard by an_acquire_dropped_with_its_grant_in_flight_leaves_nothing, saying "was still held 10 s after the link healed";
    ttl_capped_undeclared: TtlCappedUndeclared by a_job_runner_cut_off_mid_job_keeps_its_slot_for_the_least_hold, saying "a late host got the slot";
    resend_refused_is_not_sent: ResendRefusedIsNotSent by a_grant_applied_then_reset_then_refused_leaves_nothing, saying "was still held 10 s after the link healed";
}

/// A third party's link from before the lost-reply fault: cut, heal and latency
/// only, so `can_hold_replies` keeps its default.
#[derive(Debug)]
struct LinkWithoutHeldReplies(NaiveLink);

#[async_trait]
impl LinkControl for LinkWithoutHeldReplies {
    async fn cut(&self) -> Result<(), BoxError> {
        self.0.cut().await
    }
    async fn heal(&self) -> Result<(), BoxError> {
        self.0.heal().await
    }
    async fn set_latency(&self, one_way: Duration) -> Result<(), BoxError> {
        self.0.set_latency(one_way).await
    }
}

/// The lost-reply case says "not run", with the reason, on a link that does not hold
/// replies: never a pass, never a failure of the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_that_cannot_hold_replies_says_the_lost_reply_case_was_not_run() {
    let naive = Naive::new(Bug::None);
    let target = Target::new(naive.clone()).with_links(move || {
        let client = naive.another_client();
        let link: Arc<dyn LinkControl> = Arc::new(LinkWithoutHeldReplies(NaiveLink(
            client.link.clone(),
            client.replies_held.clone(),
            client.connection_faults.clone(),
        )));
        let client: Arc<DynLockBackend> = client;
        Box::pin(async move { Ok((client, link)) })
    });
    let case =
        distlock_conformance::case("a_grant_whose_reply_was_lost_is_granted_again_to_its_owner")
            .expect("the case");
    let outcome = distlock_conformance::run_case(&target, case).await.outcome;
    match outcome {
        distlock_conformance::Outcome::Skipped(reason) => {
            assert!(reason.contains("can_hold_replies"), "{reason}")
        }
        other => panic!("expected not run, got {other:?}"),
    }
}
