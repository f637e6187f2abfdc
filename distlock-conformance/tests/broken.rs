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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{RoundTripMeter, ServerControl, Target};
use distlock_core::{
    AcquireRequest, BoxError, Capabilities, ChangeStream, DynLockBackend, Error, ErrorKind,
    ExtendRequest, FenceDurability, FencingToken, Grant, LockBackend, LockInfo, LockKey,
    OwnerToken, ReleaseOutcome, Renewal, Result, WakeRegistry,
};
use futures_util::future::BoxFuture;
use tokio::time::{sleep, Instant};

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
}

#[derive(Debug)]
struct Naive {
    bug: Bug,
    caps: Capabilities,
    /// The "server": the locks and the fence counter, shared by every client.
    state: Arc<Mutex<State>>,
    /// The fence counter of this client alone, for `FencePerClient`.
    own_counter: Mutex<u64>,
    waiters: Arc<WakeRegistry>,
    trips: Arc<Trips>,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockKey, (OwnerToken, u64, Instant)>,
    counter: u64,
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
        caps.change_notification = true;
        caps.force_release = true;
        caps.list = true;
        Arc::new(Naive {
            bug,
            caps,
            state: Arc::default(),
            own_counter: Mutex::new(0),
            waiters: Arc::default(),
            trips: Arc::default(),
        })
    }

    /// Another client of the same server; what it shares depends on the bug.
    fn another_client(&self) -> Arc<Self> {
        Arc::new(Naive {
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
        })
    }

    /// A network round trip of `length`, so that check-then-act bugs have a gap to
    /// fall into; counted by the target's meter.
    async fn trip_of(&self, length: Duration) {
        self.trips.0.fetch_add(1, Ordering::SeqCst);
        sleep(length).await;
    }

    async fn round_trip(&self) {
        self.trip_of(Duration::from_millis(1)).await;
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
        } else {
            Instant::now() + ttl
        }
    }

    fn next_fence(&self, state: &mut State) -> u64 {
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
    fn name(&self) -> &str {
        "naive"
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    async fn try_grant(&self, r: &AcquireRequest) -> Result<Grant> {
        self.round_trip().await;
        if self.holder(r.key()).is_some() {
            return Ok(Grant::Held { remaining: None });
        }
        if self.bug == Bug::NonAtomicAcquire {
            self.round_trip().await;
        }
        let mut state = self.state();
        let fence = self.next_fence(&mut state);
        state.locks.insert(
            self.stored(r.key()),
            (*r.owner(), fence, self.expiry(r.ttl())),
        );
        Ok(Grant::Granted(FencingToken::new(fence)))
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.round_trip().await;
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
            self.trip_of(Duration::from_millis(20)).await;
        }
        let delete = held || self.bug == Bug::ReleaseWithoutOwnerCheck;
        if delete && self.state().locks.remove(&self.stored(key)).is_some() {
            self.notify(key);
        }
        if held || self.bug == Bug::ReleaseIgnoresNotHeld {
            Ok(ReleaseOutcome::Released)
        } else {
            Ok(ReleaseOutcome::NotHeld)
        }
    }

    async fn renew(&self, r: &ExtendRequest) -> Result<Renewal> {
        self.round_trip().await;
        let holder = self.holder(r.key());
        let held = holder.is_some_and(|(o, _)| self.same_owner(&o, r.owner()));
        if self.bug == Bug::NonAtomicExtend && held {
            // The PEXPIRE, a second (slow) round trip after the GET: it sets the expiry
            // of whoever holds the key by then.
            self.trip_of(Duration::from_millis(20)).await;
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
                    self.next_fence(&mut state)
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

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.round_trip().await;
        let now = Instant::now();
        let state = self.state();
        Ok(state
            .locks
            .get(&self.stored(key))
            .filter(|(_, _, exp)| *exp > now)
            .map(|(_, f, exp)| LockInfo {
                fence: FencingToken::new(*f),
                remaining: *exp - now,
            }))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        Ok(Some(self.waiters.register(key.as_str()).changes))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        self.round_trip().await;
        let now = Instant::now();
        let state = self.state();
        Ok(state
            .locks
            .iter()
            .filter(|(key, (_, _, exp))| {
                key.as_str().starts_with(prefix) && (*exp > now || self.bug == Bug::ListsExpired)
            })
            .map(|(key, (_, f, exp))| {
                let info = LockInfo {
                    fence: FencingToken::new(*f),
                    remaining: exp.saturating_duration_since(now),
                };
                (key.clone(), info)
            })
            .collect())
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
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

/// Restart only: clears the leases, and the counter too when that is the bug.
#[derive(Debug)]
struct NaiveControl(Arc<Naive>);

#[async_trait]
impl ServerControl for NaiveControl {
    async fn pause(&self) -> Result<(), BoxError> {
        Err("not simulated".into())
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        Err("not simulated".into())
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
        Err("not simulated".into())
    }
    async fn start(&self) -> Result<(), BoxError> {
        Err("not simulated".into())
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
    let server = naive.clone();
    Target::new(naive.clone())
        .with_control(Arc::new(NaiveControl(naive.clone())))
        .with_clients(move || -> BoxFuture<'static, Result<Arc<DynLockBackend>>> {
            let client: Arc<DynLockBackend> = server.another_client();
            Box::pin(async move { Ok(client) })
        })
        .with_round_trip_meter(naive.clone(), naive.trips.clone())
        .with_wrong_credentials(SECRET, refuse)
}

const SECRET: &str = "not-the-password";

async fn assert_caught(bug: Bug, case_name: &str) {
    support::assert_caught(target, Bug::None, bug, case_name).await;
}

macro_rules! caught {
    ($($test:ident: $bug:ident by $case:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            assert_caught(Bug::$bug, stringify!($case)).await;
        }
    )*};
}

caught! {
    non_atomic_acquire: NonAtomicAcquire by mutual_exclusion_under_contention;
    release_without_owner_check: ReleaseWithoutOwnerCheck by release_by_non_owner_is_not_held;
    non_atomic_release: NonAtomicRelease by release_racing_expiry_spares_the_next_holder;
    release_ignores_not_held: ReleaseIgnoresNotHeld by release_twice_is_not_held;
    extend_reacquires: ExtendReacquires by extend_after_expiry_fails_and_does_not_reacquire;
    extend_changes_fence: ExtendChangesFence by extend_keeps_the_fence;
    random_fence: RandomFence by fencing_increases_across_release_and_reacquire;
    fence_resets_on_restart: FenceResetsOnRestart by fault_restart_keeps_fences_and_declared_leases;
    client_clock_expiry: ClientClockExpiry by expiry_frees_the_key_after_the_ttl_not_before;
    silent_notifications: SilentNotifications by client_waiter_is_woken_by_the_release;
    two_round_trip_acquire: NonAtomicAcquire by operations_take_their_declared_round_trips;
    two_round_trip_release: NonAtomicRelease by operations_take_their_declared_round_trips;
    secret_in_errors: SecretInErrors by wrong_credentials_fail_fast_without_showing_them;
    state_per_client: StatePerClient by exclusion_holds_across_clients;
    state_per_client_untouched: StatePerClient by a_lease_is_untouched_by_other_clients;
    fence_per_client: FencePerClient by fences_increase_across_clients;
    notify_per_client: NotifyPerClient by a_release_wakes_a_waiter_on_another_client;
    owner_prefix_compare: OwnerPrefixCompare by owner_tokens_one_bit_apart_are_strangers;
    keys_normalised: KeysNormalised by keys_that_look_alike_are_distinct_locks;
    fence_from_coarse_clock: FenceFromCoarseClock by fencing_increases_across_release_and_reacquire;
    ttl_in_whole_seconds: TtlInWholeSeconds by expiry_frees_the_key_after_the_ttl_not_before;
    release_by_owner_only: ReleaseByOwnerOnly by an_owner_token_releases_only_its_own_key;
    non_atomic_extend: NonAtomicExtend by extend_racing_expiry_never_prolongs_the_next_holder;
    force_release_resets_fences: ForceReleaseResetsFences by fences_increase_across_a_forced_release;
    ttl_floor_undeclared: TtlFloorUndeclared by the_shortest_ttl_is_kept;
    keys_truncated: KeysTruncated by the_longest_keys_are_distinct_locks;
    lists_expired: ListsExpired by operator_list_shows_exactly_the_held_keys;
}
