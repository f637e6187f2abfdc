//! [`LockBackend`]: the required steps, the contract every backend keeps, and the
//! accessors of the optional features; then each optional feature's trait
//! ([`FairBackend`] with [`Handoffs`], [`SetBackend`], [`OperatorBackend`]).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind, Result};
use crate::handoff::{Handoff, HandoffBook};
use crate::key::LockKey;
use crate::lease::{
    AcquireRequest, ExtendRequest, Grant, LockInfo, ReleaseOutcome, Renewal, SetGrant,
};
use crate::permits::PermitBackend;
use crate::token::OwnerToken;
use crate::wake::ChangeStream;
#[cfg(doc)]
use crate::{lease::Lease, wake::WakeRegistry};

/// A backend behind a pointer: what [`LockClient`](crate::LockClient) and the
/// conformance suite take.
pub type DynLockBackend = dyn LockBackend;

/// A store that grants leases on named locks: the server steps a backend implements.
///
/// A backend implements only what its server does: one step per operation, each one
/// atomic on the server. Everything the contract asks of every call is done once, in
/// [`LockBackendExt`](super::LockBackendExt), which callers use: TTLs are checked against
/// [`capabilities`](Self::capabilities) before anything is sent (a backend only ever
/// sees an [`AcquireRequest`] or [`ExtendRequest`] that core built after that check),
/// validity is counted from before the request, the [`Lease`] is built, and a grant
/// whose reply arrives after its validity ran out is given back. Waiting, renewal and
/// guards are built on top by [`LockClient`](crate::LockClient). The trait is object
/// safe: `Arc<dyn LockBackend>` is how it is usually held.
///
/// # Contract
///
/// Every backend keeps these points; the conformance suite (`distlock-conformance`)
/// names the point each of its cases checks, and a backend that cannot keep one says so
/// in its [`Capabilities`] and its docs.
///
/// 1. **Mutual exclusion.** At most one unexpired lease exists per key at any instant.
/// 2. **Server time.** Expiry is judged by the server's clock only, never a client's.
///    A lease frees its key once its TTL has passed on the server, and not before.
/// 3. **Owner tokens.** Every acquisition carries a fresh random owner token of 128
///    bits ([`AcquireRequest::owner`]). Release and extend compare it atomically on the
///    server, in one step.
/// 4. **Release.** Releasing a lease that is no longer held (expired, taken over,
///    already released) answers [`ReleaseOutcome::NotHeld`] — distinct from
///    [`ReleaseOutcome::Released`] and from an error — and never touches the current
///    holder. Repeating a release or an extend whose reply was lost is harmless.
/// 5. **Extend.** Extending succeeds only while the lease is still held: it never
///    re-acquires a free key, and it keeps the fencing token.
/// 6. **Fencing.** The fencing token strictly increases per key over every successful
///    acquisition, takeovers after expiry included, and is never reused. What a
///    data-losing server restart does to it is declared in
///    [`Capabilities::fence_durability`]; where that says
///    [`Durable`](crate::backend::FenceDurability::Durable) or
///    [`FailsClosed`](crate::backend::FenceDurability::FailsClosed), it never goes backwards.
///    The one exception is an efficiency lock's plain grant (a request that is not
///    [`fenced`](AcquireRequest::fenced)) on a backend whose
///    [`Capabilities::unfenced_grants`] is set: it may carry
///    [`FencingToken::NONE`](crate::FencingToken::NONE) instead, and never moves the
///    key's fences. Core refuses a fair step's grant that carries none, and a fenced
///    request's on a backend that does not set `unfenced_grants`
///    ([`ErrorKind::Backend`], the grant given back); where it is set, a wrapper may
///    have turned the request's fence off ([`AcquireRequest::with_fenced`]), and a
///    lease without a fence fails closed at every fenced store.
/// 7. **Validity.** A returned lease's [`Lease::valid_until`] is measured from the
///    instant *before* the request was sent, so the round trip is never counted as
///    validity, less the [`Capabilities::clock_drift`] allowance; no lease is returned
///    already expired. (Core keeps this point for every
///    backend; [`LockClient`](crate::LockClient) also refuses leases below a minimum
///    validity.)
/// 8. **Errors.** Bad input (a key, by [`LockKey`]; a TTL the capabilities refuse) is a
///    typed error before anything is sent, never a panic. A server that cannot be
///    reached gives a retryable [`ErrorKind::Unavailable`] or [`ErrorKind::Timeout`]
///    error within the backend's timeouts, never a hang. Wrong credentials give a
///    non-retryable [`ErrorKind::Authentication`] error at once. No error and no
///    `Debug` output shows a secret.
/// 9. **Round trips.** Once warmed up, acquire, release and extend each take at most
///    the round trips declared in [`Capabilities::round_trips`]: one each, unless the
///    backend declares more.
/// 10. **Fairness**, where [`fair`](Self::fair) answers ([`FairBackend`]). Each key
///    has a queue of waiters on the server. A fair step (a
///    [`try_grant`](Self::try_grant) whose request carries a
///    [`place`](AcquireRequest::place)) puts its owner at the queue's tail on its first
///    call and keeps that place on later calls; it grants only to the waiter at the
///    head, once the key is free, and the grant takes the waiter out of the queue. A
///    place lasts `place` past the waiter's last call (rounded up as a TTL is, by
///    [`Capabilities::ttl_at_least`]): a waiter that stops calling (crashed,
///    partitioned, gave up without [`leave_queue`](FairBackend::leave_queue)) leaves
///    the queue by then, give or take the expiry slack of the server's own timers
///    (point 2: as a lease's), so it never blocks the queue for longer. Waiters whose
///    first calls are closer together than a round trip may be queued in either order.
///    A plain grant ignores the queue: it takes a free key even with waiters queued.
///    Fair and plain grants share one lease per key, so mixing them never breaks
///    mutual exclusion (point 1) or fencing (point 6).
///
///    Where [`FairBackend::handoffs`] answers, a release also hands the key over: in
///    the release's own step the server grants the key, with the next fence, to the
///    first waiter whose place is live, for the TTL of that waiter's last fair step or
///    until its place runs out if that is sooner (so a waiter that vanished holds the
///    key no longer than it would have held the queue); it takes the waiter out of the
///    queue and tells it. The waiter learns of the grant from
///    [`Handoffs::handed_over`], without a request of its own. Its lease's validity
///    counts, for the shorter of its TTL and its place, from before its last fair step
///    the server did not grant: that step ran before the release, and set the place,
///    so point 7 holds for it too. A waiter that gives up
///    ([`leave_queue`](FairBackend::leave_queue)) gives back a grant handed to it. A
///    lease that merely runs out hands nothing over: the head's next fair step takes
///    the key.
/// 11. **Holders**, where [`Capabilities::holder_records`] says they are kept. Every
///    grant (plain, fair, handed over, of a set, of permits) stores its request's
///    [`holder`](AcquireRequest::holder) and the grant's time, by the clock the
///    capabilities name, for [`inspect`](Self::inspect),
///    [`scan`](OperatorBackend::scan) and [`PermitBackend::holders`](crate::backend::PermitBackend::holders)
///    to show ([`LockInfo::holder`], [`LockInfo::granted_at`]). A renewal, and a grant
///    again to the same owner (a retry whose reply was lost), keep both; the next
///    owner's grant replaces them. A lease stored before the backend kept holders
///    shows none.
///
/// # What is optional
///
/// The four steps above [`watch`](Self::watch) are all a backend must implement. Each
/// optional feature is a trait of its own, reached through an accessor that answers
/// `None` by default: [`fair`](Self::fair) (queues, point 10), [`sets`](Self::sets)
/// (several keys in one step), [`operator`](Self::operator) (breaking and listing
/// locks) and [`permits`](Self::permits) (semaphores, read-write locks, elections). A
/// backend that implements one answers `Some(self)`; what it answers is the one
/// statement that it supports the feature.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug {
    /// A short name for logs, errors and reports ("memory", "redis", ...).
    fn name(&self) -> &str;

    /// What this backend can do and its limits.
    fn capabilities(&self) -> &Capabilities;

    /// The acquisition step: takes `request.key()` for `request.ttl()` as
    /// `request.owner()` if it is free or its lease has expired, minting the next fence
    /// in the same atomic step; otherwise answers [`Grant::Held`]. An owner that holds
    /// the key already (a retry of a grant whose reply was lost) is granted it again,
    /// with its fence, and its expiry set to `request.ttl()` from this step, so that
    /// the validity the caller counts from this step is the server's. A request with
    /// a [`place`](AcquireRequest::place) is a fair step (contract point 10), sent only
    /// where [`fair`](Self::fair) answers. A plain request that is not
    /// [`fenced`](AcquireRequest::fenced) may be granted without a fence where the
    /// capabilities say so (contract point 6). See contract point 9 for its round trips.
    /// Callers use [`LockBackendExt::try_acquire`](super::LockBackendExt::try_acquire).
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant>;

    /// Releases `key` if `owner` holds it; see contract points 4 and 9.
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome>;

    /// The renewal step: sets the lease's expiry to `request.ttl()` from now if
    /// `request.owner()` still holds `request.key()`, keeping its fence; never creates
    /// the key; see contract points 5 and 9. Callers use
    /// [`LockBackendExt::extend`](super::LockBackendExt::extend).
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal>;

    /// The current holder's fencing token and remaining TTL, or `None` when the key is
    /// free. Never the owner token.
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>>;

    /// The early release of a lease held at least a while
    /// ([`LockOptions::with_hold_at_least`](crate::LockOptions::with_hold_at_least)):
    /// if `request.owner()` still holds `request.key()`, the key stays taken, with its
    /// fence, for `request.ttl()` from now by the server's clock and no longer, then is
    /// free; the owner renews it no more. [`ReleaseOutcome::NotHeld`] when the owner no
    /// longer holds it, with nothing changed. `request.ttl()` is one the capabilities
    /// accept, never above the TTL the lease was granted.
    ///
    /// The default renews the lease to that TTL ([`renew`](Self::renew)), which is the
    /// whole step where the backend renews to any TTL
    /// ([`Capabilities::extend_any_ttl`]). Where it renews only to the granted TTL, the
    /// default answers [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) with
    /// nothing sent, and a [`LockClient`](crate::LockClient) then leaves the key taken
    /// until the lease's own end, past the least hold: such a backend overrides it with
    /// a step of its own (etcd moves the key onto a fresh lease of that TTL).
    async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
        if !self.capabilities().extend_any_ttl {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "the {} backend renews a lease only to its granted ttl and has no step \
                     that keeps a released key for less",
                    self.name()
                ),
            )
            .with_backend(self.name().to_owned())
            .with_not_sent());
        }
        Ok(match self.renew(request).await? {
            Renewal::Renewed => ReleaseOutcome::Released,
            Renewal::NotHeld => ReleaseOutcome::NotHeld,
        })
    }

    /// Starts watching `key` for releases, when the backend can
    /// ([`Capabilities::change_notification`]). Call it *before* the attempt it is to
    /// wake, so that a release in between is not missed. `None` means "poll".
    /// [`WakeRegistry`] is the shared piece behind it.
    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let _ = key;
        Ok(None)
    }

    /// Fair mode (contract point 10): the queue steps, where this backend keeps a
    /// queue of waiters per key on the server and its
    /// [`try_grant`](Self::try_grant) honours a request's
    /// [`place`](AcquireRequest::place). What a [`LockClient`](crate::LockClient) in
    /// fair mode ([`LockOptions::with_fair`](crate::LockOptions::with_fair)) needs. By
    /// default `None`.
    fn fair(&self) -> Option<&dyn FairBackend> {
        None
    }

    /// Sets of keys in one atomic step ([`SetBackend`]), all or none, in the round
    /// trips of one acquisition: what [`LockClient::lock_all`](crate::LockClient::lock_all)
    /// then uses instead of taking the keys one by one. By default `None`.
    fn sets(&self) -> Option<&dyn SetBackend> {
        None
    }

    /// The operator's steps ([`OperatorBackend`]): breaking a stuck lock and listing
    /// the held keys, as `distlock release --force` and `distlock list` do. By default
    /// `None`.
    fn operator(&self) -> Option<&dyn OperatorBackend> {
        None
    }

    /// The steps of semaphores, read-write locks and elections ([`PermitBackend`]),
    /// keeping their contract. By default `None`.
    fn permits(&self) -> Option<&dyn PermitBackend> {
        None
    }

    /// One round trip to the server, for health checks: `Ok` when it answered. The
    /// default inspects the key `distlock-health` (which nothing holds), a read on
    /// most backends; a backend with a cheaper request (`PING`, `SELECT 1`) may
    /// answer with it. Errors are typed as the backend's others are:
    /// [`ErrorKind::Unavailable`] when the server cannot be reached.
    async fn ping(&self) -> Result<()> {
        let key = LockKey::new(HEALTH_KEY)?;
        self.inspect(&key).await.map(|_| ())
    }
}

/// The key [`LockBackend::ping`]'s default inspects.
const HEALTH_KEY: &str = "distlock-health";

macro_rules! forward_backend {
    ($($ptr:ty),*) => {$(
        #[async_trait]
        #[deny(clippy::missing_trait_methods)]
        impl<T: LockBackend + ?Sized> LockBackend for $ptr {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn capabilities(&self) -> &Capabilities {
                (**self).capabilities()
            }
            async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
                (**self).try_grant(request).await
            }
            async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
                (**self).release(key, owner).await
            }
            async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
                (**self).renew(request).await
            }
            async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
                (**self).inspect(key).await
            }
            async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
                (**self).release_after(request).await
            }
            async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
                (**self).watch(key).await
            }
            async fn ping(&self) -> Result<()> {
                (**self).ping().await
            }
            fn fair(&self) -> Option<&dyn FairBackend> {
                (**self).fair()
            }
            fn sets(&self) -> Option<&dyn SetBackend> {
                (**self).sets()
            }
            fn operator(&self) -> Option<&dyn OperatorBackend> {
                (**self).operator()
            }
            fn permits(&self) -> Option<&dyn PermitBackend> {
                (**self).permits()
            }
        }
    )*};
}

forward_backend!(Arc<T>, Box<T>);

/// Fair mode: a queue of waiters per key on the server (contract point 10 of
/// [`LockBackend`]). The fair step itself is [`LockBackend::try_grant`] with a request
/// that carries a [`place`](AcquireRequest::place); this trait holds the rest.
#[async_trait]
pub trait FairBackend: LockBackend {
    /// Takes `owner` out of `key`'s queue of waiters: a fair waiter that gave up.
    /// Harmless when the owner is not queued. It never touches a lease, except, where
    /// [`handoffs`](Self::handoffs) answers, one that a release handed to this owner,
    /// which it releases as [`release`](LockBackend::release) does.
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()>;

    /// Starts watching for the moment `owner`, a fair waiter on `key`, may be at the
    /// head of the queue with the key free: what wakes it, and only it, where the
    /// backend can tell waiters apart (a waiter watching only its predecessor, so that
    /// a release wakes one waiter rather than the herd). Called, as
    /// [`watch`](LockBackend::watch) is, before the steps it is to wake, so the owner
    /// may not be queued yet. By default [`watch`](LockBackend::watch) on `key`.
    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        let _ = owner;
        self.watch(key).await
    }

    /// Releases a grant made in turn (a fair lock's), as
    /// [`release`](LockBackend::release) does: the same outcome, the same contract.
    /// The client calls it for every lease a fair lock holds, where fair waiters are
    /// to be expected, so a backend whose plain release first asks whether anyone
    /// queued may go straight to the step that hands the key over. By default
    /// [`release`](LockBackend::release).
    async fn release_in_turn(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.release(key, owner).await
    }

    /// Handoffs: where a release hands the key to the head of its queue on the
    /// server, and tells it (contract point 10), what this process heard of such
    /// grants. By default `None`: a release only frees the key.
    fn handoffs(&self) -> Option<&dyn Handoffs> {
        None
    }
}

/// What a backend whose releases hand the key over heard of the grants handed to this
/// process's fair waiters ([`FairBackend::handoffs`]). A [`HandoffBook`] keyed by the
/// key's name is one.
pub trait Handoffs: Send + Sync {
    /// The grant a release handed to `owner`, a fair waiter on `key`, on the server:
    /// its fence, and an instant before the grant from which its validity counts.
    /// Taken once; `None` when this process has heard of no such grant (the waiter's
    /// next fair step then finds the key its own, as any retry does). No request is
    /// sent.
    fn handed_over(&self, key: &LockKey, owner: &OwnerToken) -> Option<Handoff>;
}

impl Handoffs for HandoffBook {
    fn handed_over(&self, key: &LockKey, owner: &OwnerToken) -> Option<Handoff> {
        self.take(key.as_str(), *owner)
    }
}

/// Several keys in one atomic step ([`LockBackend::sets`]).
#[async_trait]
pub trait SetBackend: Send + Sync {
    /// The set acquisition step: in one atomic step on the server, takes the key of
    /// every request (each for its own TTL, as its own owner, minting its next fence
    /// as [`try_grant`](LockBackend::try_grant) does), or none of them. When another
    /// lease holds any of the keys, nothing is changed and the answer is
    /// [`SetGrant::Held`] with the first such request's position. The keys are
    /// distinct, in sorted order; an owner that already holds its key is granted it
    /// again, as by `try_grant`. Its round trips are those of one acquisition (contract
    /// point 9). Callers use
    /// [`LockBackendExt::try_acquire_all`](super::LockBackendExt::try_acquire_all).
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant>;
}

/// What an operator does to locks that are not theirs ([`LockBackend::operator`]).
#[async_trait]
pub trait OperatorBackend: Send + Sync {
    /// Deletes `key` whoever holds it: an operator breaking a stuck lock. The holder
    /// learns it lost the lock at its next renewal. `true` when a lease was removed.
    async fn force_release(&self, key: &LockKey) -> Result<bool>;

    /// The listing step: every key held now whose name starts with `prefix` (`""`:
    /// every key), each with what [`inspect`](LockBackend::inspect) shows of it, in
    /// any order. Free and expired keys are left out; so are the records of queues and
    /// permits. A key taken or freed while the listing runs may be shown either way.
    /// Callers use [`LockBackendExt::list`](super::LockBackendExt::list), which
    /// checks `prefix` first.
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>>;
}
