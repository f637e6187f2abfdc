//! What a backend author uses: [`LockBackend`], the one trait every backend
//! implements, and the contract it keeps (written once, in its docs); the requests
//! and grants it takes and gives; [`Capabilities`], what it declares; [`PermitBackend`]
//! for semaphores, read-write locks and elections; [`WakeRegistry`], the one registry
//! of waiters per key; and the helpers every backend needs in the same form (one URL
//! reader, [`ConnectionUrl`], with its options policy; errors from drivers, with
//! credentials scrubbed). A service needs none of it beyond [`LockBackend`] and
//! [`DynLockBackend`], which the crate's root also exports.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{Stream, StreamExt};
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;

pub use crate::capabilities::{Capabilities, ClockDrift, FenceDurability, RoundTrips};
pub use crate::fenced::{check_fence, FenceCheck};
pub use crate::handoff::{Handoff, HandoffBook};
pub use crate::lease::{
    AcquireOutcome, AcquireRequest, ExtendOutcome, ExtendRequest, Grant, Lease, LockInfo,
    ReleaseOutcome, Renewal, SetGrant, SetOutcome,
};
pub use crate::permits::{Claim, PermitBackend, PermitHolder, Term, MAX_CLAIM_VALUE, TERMS_KEPT};
pub use crate::redact::redact_url;
pub use crate::support::{
    config_error, driver_error, encode, error_chain, find_cause, is_certificate_refused,
    is_secret_name, key_prefix, positive_millis, scrub, ConnectionUrl, Endpoint, Options,
};
pub use crate::token::OwnerToken;
pub use crate::wake::{Registration, WakeRegistry};

/// A stream that yields whenever a watched key may have been released.
///
/// An item is a hint, not a promise that the key is free: the waiter tries again. A
/// stream that ends means notifications stopped (a lost connection); the waiter then
/// falls back to polling.
pub type ChangeStream = Pin<Box<dyn Stream<Item = ()> + Send + 'static>>;

/// A backend behind a pointer: what [`LockClient`](crate::LockClient) and the
/// conformance suite take.
pub type DynLockBackend = dyn LockBackend;

/// A store that grants leases on named locks: the server steps a backend implements.
///
/// A backend implements only what its server does: one step per operation, each one
/// atomic on the server. Everything the contract asks of every call is done once, in
/// [`LockBackendExt`], which callers use: TTLs are checked against
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
/// 10. **Fairness**, where [`Capabilities::fair`] is declared. Each key has a queue of
///    waiters on the server. [`try_grant_in_turn`](Self::try_grant_in_turn) puts its
///    owner at the queue's tail on its first call and keeps that place on later calls;
///    it grants only to the waiter at the head, once the key is free, and the grant
///    takes the waiter out of the queue. A place lasts `place` past the waiter's last
///    call (rounded up as a TTL is, by [`Capabilities::ttl_at_least`]): a waiter that
///    stops calling (crashed, partitioned, gave up without
///    [`leave_queue`](Self::leave_queue)) leaves the queue by then, give or take the
///    expiry slack of the server's own timers (point 2: as a lease's), so it never
///    blocks the queue for longer. Waiters whose first calls are
///    closer together than a round trip may be queued in either order. A plain
///    [`try_grant`](Self::try_grant) ignores the queue: it takes a free key even with
///    waiters queued. Fair and plain grants share one lease per key, so mixing them
///    never breaks mutual exclusion (point 1) or fencing (point 6).
///
///    Where [`Capabilities::fair_handoff`] is declared, a release also hands the key
///    over: in the release's own step the server grants the key, with the next fence,
///    to the first waiter whose place is live, for the TTL of that waiter's last fair
///    step or until its place runs out if that is sooner (so a waiter that vanished
///    holds the key no longer than it would have held the queue); it takes the waiter
///    out of the queue and tells it. The waiter learns of the grant from
///    [`handed_over`](LockBackend::handed_over), without a request of its own. Its
///    lease's validity counts, for the shorter of its TTL and its place, from before
///    its last fair step the server did not grant: that step ran before the release,
///    and set the place, so point 7 holds for it too. A waiter that gives up
///    ([`leave_queue`](LockBackend::leave_queue)) gives back a grant handed to it. A
///    lease that merely runs out hands nothing over: the head's next fair step takes
///    the key.
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
    /// the validity the caller counts from this step is the server's. See contract
    /// point 9 for its round trips. Callers use [`LockBackendExt::try_acquire`].
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant>;

    /// Releases `key` if `owner` holds it; see contract points 4 and 9.
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome>;

    /// The renewal step: sets the lease's expiry to `request.ttl()` from now if
    /// `request.owner()` still holds `request.key()`, keeping its fence; never creates
    /// the key; see contract points 5 and 9. Callers use
    /// [`LockBackendExt::extend`].
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal>;

    /// The current holder's fencing token and remaining TTL, or `None` when the key is
    /// free. Never the owner token.
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>>;

    /// Starts watching `key` for releases, when the backend can
    /// ([`Capabilities::change_notification`]). Call it *before* the attempt it is to
    /// wake, so that a release in between is not missed. `None` means "poll".
    /// [`WakeRegistry`] is the shared piece behind it.
    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let _ = key;
        Ok(None)
    }

    /// Starts watching for the moment `owner`, a fair waiter on `key` (contract point
    /// 10), may be at the head of the queue with the key free: what wakes it, and only
    /// it, where the backend can tell waiters apart (a waiter watching only its
    /// predecessor, so that a release wakes one waiter rather than the herd). Called,
    /// as [`watch`](Self::watch) is, before the attempts it is to wake, so the owner
    /// may not be queued yet. By default [`watch`](Self::watch) on `key`.
    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        let _ = owner;
        self.watch(key).await
    }

    /// The fair acquisition step (contract point 10), for backends that declare
    /// [`Capabilities::fair`]: in one atomic step on the server, drops the waiters of
    /// `request.key()` whose place ran out, puts `request.owner()` at the tail of the
    /// queue (or renews its place) for `place` from now, and, if that owner is at the
    /// head and the key is free, takes the key as [`try_grant`](Self::try_grant) does
    /// and takes the owner out of the queue. Otherwise [`Grant::Held`]. An owner that
    /// already holds the key is granted again, as by `try_grant`. `place` is one the
    /// capabilities accept as a TTL. Callers use
    /// [`LockBackendExt::try_acquire_in_turn`]. By default an
    /// [`ErrorKind::Unsupported`] error.
    async fn try_grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
        let _ = (request, place);
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("the {} backend has no fair mode", self.name()),
        ))
    }

    /// The set acquisition step, for a backend that declares
    /// [`Capabilities::atomic_sets`]: in one atomic step on the server, takes the key
    /// of every request (each for its own TTL, as its own owner, minting its next fence
    /// as [`try_grant`](Self::try_grant) does), or none of them. When another lease
    /// holds any of the keys, nothing is changed and the answer is [`SetGrant::Held`]
    /// with the first such request's position. The keys are distinct, in sorted order;
    /// an owner that already holds its key is granted it again, as by `try_grant`. Its
    /// round trips are those of one acquisition (point 9). Callers use
    /// [`LockBackendExt::try_acquire_all`]. By default an [`ErrorKind::Unsupported`]
    /// error.
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let _ = requests;
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the {} backend cannot take a set of keys in one step",
                self.name()
            ),
        ))
    }

    /// Takes `owner` out of `key`'s queue of waiters: a fair waiter that gave up.
    /// Harmless when the owner is not queued. It never touches a lease, except, where
    /// [`Capabilities::fair_handoff`] is declared, one that a release handed to this
    /// owner (contract point 10), which it releases as [`release`](Self::release)
    /// does. By default nothing (a backend without a queue has nothing to leave).
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let _ = (key, owner);
        Ok(())
    }

    /// The grant a release handed to `owner`, a fair waiter on `key`, on the server
    /// (contract point 10), for a backend that declares [`Capabilities::fair_handoff`]:
    /// its fence, and an instant before the grant from which its validity counts.
    /// Taken once; `None` when this process has heard of no such grant (the waiter's
    /// next fair step then finds the key its own, as any retry does). No request is
    /// sent. A backend keeps what this needs in a [`HandoffBook`]. By default `None`.
    fn handed_over(&self, key: &LockKey, owner: &OwnerToken) -> Option<Handoff> {
        let _ = (key, owner);
        None
    }

    /// The steps of semaphores, read-write locks and elections, for a backend that
    /// declares [`Capabilities::permits`]: itself, usually. By default `None`.
    fn permits(&self) -> Option<&dyn PermitBackend> {
        None
    }

    /// Deletes `key` whoever holds it: an operator breaking a stuck lock. The holder
    /// learns it lost the lock at its next renewal. `true` when a lease was removed.
    /// Backends that cannot do this answer [`ErrorKind::Unsupported`].
    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let _ = key;
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("the {} backend cannot force a release", self.name()),
        ))
    }

    /// The listing step, for a backend that declares [`Capabilities::list`]: every key
    /// held now whose name starts with `prefix` (`""`: every key), each with what
    /// [`inspect`](Self::inspect) shows of it, in any order. Free and expired keys
    /// are left out; so are the records of queues and permits. A key taken or freed
    /// while the listing runs may be shown either way. Callers use
    /// [`LockBackendExt::list`], which checks `prefix` first. By default an
    /// [`ErrorKind::Unsupported`] error.
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let _ = prefix;
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("the {} backend cannot list its locks", self.name()),
        ))
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
            async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
                (**self).watch(key).await
            }
            async fn watch_in_turn(&self, key: &LockKey, owner: &OwnerToken) -> Result<Option<ChangeStream>> {
                (**self).watch_in_turn(key, owner).await
            }
            async fn force_release(&self, key: &LockKey) -> Result<bool> {
                (**self).force_release(key).await
            }
            async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
                (**self).scan(prefix).await
            }
            async fn ping(&self) -> Result<()> {
                (**self).ping().await
            }
            async fn try_grant_in_turn(&self, request: &AcquireRequest, place: Duration) -> Result<Grant> {
                (**self).try_grant_in_turn(request, place).await
            }
            async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
                (**self).leave_queue(key, owner).await
            }
            async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
                (**self).try_grant_all(requests).await
            }
            fn handed_over(&self, key: &LockKey, owner: &OwnerToken) -> Option<Handoff> {
                (**self).handed_over(key, owner)
            }
            fn permits(&self) -> Option<&dyn PermitBackend> {
                (**self).permits()
            }
        }
    )*};
}

forward_backend!(Arc<T>, Box<T>);

/// The operations callers use, built once on every backend's steps: each keeps the
/// per-call points of the contract, so that no backend has to. Implemented for every
/// [`LockBackend`]; do not implement it yourself.
#[async_trait]
pub trait LockBackendExt: LockBackend {
    /// Tries once to acquire `key` for `ttl` with a fresh owner token: the lease, or
    /// [`AcquireOutcome::Held`]. See [`try_acquire_as`](Self::try_acquire_as).
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<AcquireOutcome> {
        self.try_acquire_as(key, ttl, OwnerToken::random()).await
    }

    /// Tries once to acquire `key` for `ttl` as `owner`, which the caller minted so
    /// that it can release what a request whose reply was lost may have taken.
    ///
    /// An [`ErrorKind::InvalidTtl`] error, with nothing sent, when the backend's
    /// capabilities refuse `ttl`. The lease's validity is counted from before the
    /// request was sent, less the clock-drift allowance the capabilities declare
    /// (contract point 7); a grant whose reply arrives after that
    /// validity ran out is released at once and reported as a retryable
    /// [`ErrorKind::Timeout`], never returned.
    async fn try_acquire_as(
        &self,
        key: &LockKey,
        ttl: Duration,
        owner: OwnerToken,
    ) -> Result<AcquireOutcome> {
        let (outcome, _) = acquire_as(self, key, ttl, owner).await?;
        Ok(outcome)
    }

    /// Tries once to acquire `key` for `ttl` as `owner`, in turn: joins the key's queue
    /// of waiters, or keeps `owner`'s place in it for another `place`, and is granted
    /// only at the head (contract point 10). Call it again with the same `owner` to
    /// keep the place; [`leave_queue`](LockBackend::leave_queue) when giving up.
    ///
    /// An [`ErrorKind::Unsupported`] error, with nothing sent, when the backend does
    /// not declare [`Capabilities::fair`]. `place` is rounded up to what the
    /// capabilities accept ([`Capabilities::ttl_at_least`]). Otherwise as
    /// [`try_acquire_as`](Self::try_acquire_as).
    async fn try_acquire_in_turn(
        &self,
        key: &LockKey,
        ttl: Duration,
        owner: OwnerToken,
        place: Duration,
    ) -> Result<AcquireOutcome> {
        let capabilities = self.capabilities();
        if !capabilities.fair {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "this backend has no fair mode (capabilities.fair)",
            )
            .with_backend(self.name().to_owned()));
        }
        let ttl = capabilities.check_ttl(ttl)?;
        let place = capabilities.ttl_at_least(place);
        let request = AcquireRequest::new(key.clone(), ttl, owner);
        let sent_at = Instant::now();
        let grant = self.try_grant_in_turn(&request, place).await?;
        let (outcome, _) = settle(self, request, grant, sent_at).await?;
        Ok(outcome)
    }

    /// The lease a release handed to `owner`, a fair waiter on `key` asking for `ttl`
    /// with places of `place` (contract point 10; [`LockBackend::handed_over`]): its
    /// validity is the shorter of `ttl` and `place` (rounded up as
    /// [`try_acquire_in_turn`](Self::try_acquire_in_turn) rounds it), counted from the
    /// handoff's [`granted_after`](Handoff::granted_after), less the clock-drift
    /// allowance. `None` when nothing was handed over, or when what was handed over
    /// has no validity left by this count (the waiter's next fair step, finding the
    /// key its own, renews it). No request is sent.
    fn handed_lease(
        &self,
        key: &LockKey,
        ttl: Duration,
        owner: OwnerToken,
        place: Duration,
    ) -> Option<Lease> {
        let capabilities = self.capabilities();
        if !capabilities.fair_handoff {
            return None;
        }
        let handoff = self.handed_over(key, &owner)?;
        let lasts = ttl.min(capabilities.ttl_at_least(place));
        let drift = capabilities.clock_drift.allowance(lasts);
        let lease = Lease::new(
            key.clone(),
            owner,
            handoff.fence,
            lasts,
            handoff.granted_after,
            drift,
        );
        (!lease.is_expired()).then_some(lease)
    }

    /// Tries once to acquire every key of `keys` for `ttl`, each as its own owner, in
    /// one atomic step ([`try_grant_all`](LockBackend::try_grant_all)): every lease,
    /// or [`SetOutcome::Held`] with nothing acquired. `keys` must be distinct and
    /// sorted, each with the owner the caller minted for it (so that it can release
    /// what a request whose reply was lost may have taken).
    ///
    /// An [`ErrorKind::Unsupported`] error, with nothing sent, where the backend does
    /// not declare [`Capabilities::atomic_sets`]; an [`ErrorKind::InvalidInput`] error
    /// for no keys, or keys not distinct and sorted; an [`ErrorKind::InvalidTtl`] error
    /// as for [`try_acquire_as`](Self::try_acquire_as). Each lease's validity is
    /// counted from before the request was sent (contract point 7); a grant whose reply
    /// arrives after that ran out is released, every key, and reported as a retryable
    /// [`ErrorKind::Timeout`]. A backend that answers with another number of fences
    /// than keys is an [`ErrorKind::Backend`] error, after its keys are released.
    async fn try_acquire_all(
        &self,
        keys: &[(LockKey, OwnerToken)],
        ttl: Duration,
    ) -> Result<SetOutcome> {
        let capabilities = self.capabilities();
        if !capabilities.atomic_sets {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "this backend cannot take a set of keys in one step (capabilities.atomic_sets)",
            )
            .with_backend(self.name().to_owned()));
        }
        if keys.is_empty()
            || keys
                .windows(2)
                .any(|pair| pair[0].0.as_str() >= pair[1].0.as_str())
        {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "a set of keys must name at least one key, each once, in sorted order",
            ));
        }
        let ttl = capabilities.check_ttl(ttl)?;
        let requests: Vec<AcquireRequest> = keys
            .iter()
            .map(|(key, owner)| AcquireRequest::new(key.clone(), ttl, *owner))
            .collect();
        let sent_at = Instant::now();
        let fences = match self.try_grant_all(&requests).await? {
            SetGrant::Held { index, remaining } => {
                return Ok(SetOutcome::Held { index, remaining });
            }
            SetGrant::Granted(fences) => fences,
        };
        let drift = capabilities.clock_drift.allowance(ttl);
        let leases: Vec<Lease> = requests
            .iter()
            .zip(&fences)
            .map(|(r, fence)| Lease::new(r.key().clone(), *r.owner(), *fence, ttl, sent_at, drift))
            .collect();
        let wrong = fences.len() != requests.len();
        if wrong || leases.iter().any(Lease::is_expired) {
            for request in &requests {
                let _ = self.release(request.key(), request.owner()).await;
            }
            if wrong {
                return Err(Error::new(
                    ErrorKind::Backend,
                    format!(
                        "the backend answered a set of {} keys with {} fences",
                        requests.len(),
                        fences.len()
                    ),
                )
                .with_backend(self.name().to_owned()));
            }
            return Err(late(self.name(), "grant of a set"));
        }
        Ok(SetOutcome::Acquired(leases))
    }

    /// Extends `lease` to `ttl` from now, if it is still held: the renewed lease, with
    /// the same fence, or [`ExtendOutcome::NotHeld`] (contract point 5).
    ///
    /// An [`ErrorKind::InvalidTtl`] error, with nothing sent, when the capabilities
    /// refuse `ttl`, or when the backend renews only to the granted TTL
    /// ([`Capabilities::extend_any_ttl`] is false) and `ttl` is another. The new
    /// validity is counted from before the request; a renewal whose reply arrives after
    /// it ran out is a retryable [`ErrorKind::Timeout`].
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<ExtendOutcome> {
        let capabilities = self.capabilities();
        let ttl = capabilities.check_ttl(ttl)?;
        if !capabilities.extend_any_ttl && ttl != lease.ttl() {
            return Err(Error::new(
                ErrorKind::InvalidTtl,
                format!(
                    "this backend renews a lease to the ttl it was granted ({:?}), not {ttl:?}",
                    lease.ttl()
                ),
            )
            .with_backend(self.name().to_owned()));
        }
        let sent_at = Instant::now();
        match self.renew(&ExtendRequest::new(lease.clone(), ttl)).await? {
            Renewal::NotHeld => Ok(ExtendOutcome::NotHeld),
            Renewal::Renewed => {
                let renewed = lease.renewed(ttl, sent_at, capabilities.clock_drift.allowance(ttl));
                if renewed.is_expired() {
                    return Err(late(self.name(), "renewal"));
                }
                Ok(ExtendOutcome::Extended(renewed))
            }
        }
    }

    /// Releases `lease`.
    async fn release_lease(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.release(lease.key(), lease.owner()).await
    }

    /// The keys held now whose names start with `prefix` (`""`: every key), each with
    /// its holder's fence and remaining TTL, sorted by key; see
    /// [`scan`](LockBackend::scan). A non-empty `prefix` is checked as a key is
    /// ([`ErrorKind::InvalidKey`]) before anything is sent, and an
    /// [`ErrorKind::Unsupported`] error, with nothing sent, where the backend does not
    /// declare [`Capabilities::list`].
    async fn list(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        if !prefix.is_empty() {
            LockKey::new(prefix)?;
        }
        if !self.capabilities().list {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "this backend cannot list its locks (capabilities.list)",
            )
            .with_backend(self.name().to_owned()));
        }
        let mut held = self.scan(prefix).await?;
        held.retain(|(key, _)| key.as_str().starts_with(prefix));
        held.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        held.dedup_by(|a, b| a.0 == b.0);
        Ok(held)
    }

    /// Checks `key`, then tries once to acquire it for `ttl`: `Some(lease)` or `None`
    /// when another lease holds the key.
    async fn acquire_once(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        let key = LockKey::new(key)?;
        match self.try_acquire(&key, ttl).await? {
            AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
            AcquireOutcome::Held { .. } => Ok(None),
        }
    }
}

impl<T: LockBackend + ?Sized> LockBackendExt for T {}

/// [`LockBackendExt::try_acquire_as`] as a plain future, for the client: no boxed
/// future of its own, and with the clock reading at which a lease was found still
/// valid, which the caller may take as the time of the grant.
pub(crate) async fn acquire_as<B: LockBackend + ?Sized>(
    backend: &B,
    key: &LockKey,
    ttl: Duration,
    owner: OwnerToken,
) -> Result<(AcquireOutcome, Option<Instant>)> {
    let ttl = backend.capabilities().check_ttl(ttl)?;
    let request = AcquireRequest::new(key.clone(), ttl, owner);
    let sent_at = Instant::now();
    let grant = backend.try_grant(&request).await?;
    settle(backend, request, grant, sent_at).await
}

/// Turns a grant step's answer into the outcome callers get: the lease, counted from
/// `sent_at` (contract point 7), or a late grant given back. With a lease, the clock
/// reading at which it was found still valid.
async fn settle<B: LockBackend + ?Sized>(
    backend: &B,
    request: AcquireRequest,
    grant: Grant,
    sent_at: Instant,
) -> Result<(AcquireOutcome, Option<Instant>)> {
    let fence = match grant {
        Grant::Held { remaining } => return Ok((AcquireOutcome::Held { remaining }, None)),
        Grant::Granted(fence) => fence,
    };
    let (key, ttl, owner) = (request.key(), request.ttl(), *request.owner());
    let drift = backend.capabilities().clock_drift.allowance(ttl);
    let lease = Lease::new(key.clone(), owner, fence, ttl, sent_at, drift);
    let now = Instant::now();
    if now < lease.valid_until() {
        return Ok((AcquireOutcome::Acquired(lease), Some(now)));
    }
    let _ = backend.release(key, &owner).await;
    Err(late(backend.name(), "grant"))
}

/// A reply that came after the validity it would have started had run out.
fn late(backend: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("the {what} arrived after its ttl had run out"),
    )
    .with_backend(backend.to_owned())
}

/// The next item of an optional change stream; pending forever without one.
pub(crate) async fn next_change(changes: &mut Option<ChangeStream>) -> Option<()> {
    match changes {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
