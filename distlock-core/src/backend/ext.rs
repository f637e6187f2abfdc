//! [`LockBackendExt`]: the contract's per-call work, done once for every backend.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::time::Instant;

use super::contract::LockBackend;
use crate::error::{Error, ErrorKind, Result};
use crate::holder::Holder;
use crate::key::LockKey;
use crate::lease::{
    AcquireOutcome, AcquireRequest, ExtendOutcome, ExtendRequest, Grant, Lease, LockInfo,
    ReleaseOutcome, Renewal, SetGrant, SetOutcome,
};
use crate::token::OwnerToken;
use crate::wake::ChangeStream;

/// The operations callers use, built once on every backend's steps: each keeps the
/// per-call points of the contract, so that no backend has to. Implemented for every
/// [`LockBackend`]; do not implement it yourself.
///
/// Every grant these ask for stores [`Holder::this_process`] as its holder, where the
/// backend keeps holders; a [`LockClient`](crate::LockClient) stores the holder of its
/// options ([`LockOptions::with_holder`](crate::LockOptions::with_holder)).
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
        let (outcome, _) = acquire_as(self, key, ttl, owner, &Holder::this_process(), true).await?;
        Ok(outcome)
    }

    /// Tries once to acquire `key` for `ttl` as `owner`, in turn: joins the key's queue
    /// of waiters, or keeps `owner`'s place in it for another `place`, and is granted
    /// only at the head (contract point 10). Call it again with the same `owner` to
    /// keep the place; [`leave_queue`](super::FairBackend::leave_queue) when giving up.
    ///
    /// An [`ErrorKind::Unsupported`] error, with nothing sent, when the backend
    /// has no [`fair`](LockBackend::fair) mode. `place` is rounded up to what the
    /// capabilities accept ([`Capabilities::ttl_at_least`](super::Capabilities::ttl_at_least)). Otherwise as
    /// [`try_acquire_as`](Self::try_acquire_as).
    async fn try_acquire_in_turn(
        &self,
        key: &LockKey,
        ttl: Duration,
        owner: OwnerToken,
        place: Duration,
    ) -> Result<AcquireOutcome> {
        acquire_in_turn_as(self, key, ttl, owner, place, &Holder::this_process()).await
    }

    /// The lease a release handed to `owner`, a fair waiter on `key` asking for `ttl`
    /// with places of `place` (contract point 10; [`Handoffs::handed_over`](super::Handoffs::handed_over)): its
    /// validity is the shorter of `ttl` and `place` (rounded up as
    /// [`try_acquire_in_turn`](Self::try_acquire_in_turn) rounds it), counted from the
    /// handoff's [`granted_after`](super::Handoff::granted_after), less the clock-drift
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
        let handoff = self.fair()?.handoffs()?.handed_over(key, &owner)?;
        let capabilities = self.capabilities();
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
    /// one atomic step ([`try_grant_all`](super::SetBackend::try_grant_all)): every lease,
    /// or [`SetOutcome::Held`] with nothing acquired. `keys` must be distinct and
    /// sorted, each with the owner the caller minted for it (so that it can release
    /// what a request whose reply was lost may have taken).
    ///
    /// An [`ErrorKind::Unsupported`] error, with nothing sent, where the backend
    /// has no [`sets`](LockBackend::sets); an [`ErrorKind::InvalidInput`] error
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
        acquire_all_as(self, keys, ttl, &Holder::this_process()).await
    }

    /// Extends `lease` to `ttl` from now, if it is still held: the renewed lease, with
    /// the same fence, or [`ExtendOutcome::NotHeld`] (contract point 5).
    ///
    /// An [`ErrorKind::InvalidTtl`] error, with nothing sent, when the capabilities
    /// refuse `ttl`, or when the backend renews only to the granted TTL
    /// ([`Capabilities::extend_any_ttl`](super::Capabilities::extend_any_ttl) is false) and `ttl` is another. The new
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

    /// Releases `lease` early but keeps its key taken `ttl` more by the server's clock,
    /// and no longer: the release within a least hold
    /// ([`release_after`](LockBackend::release_after)). An
    /// [`ErrorKind::InvalidTtl`] error, with nothing sent, when the capabilities refuse
    /// `ttl` or it is above the TTL the lease was granted; an
    /// [`ErrorKind::Unsupported`] error, with nothing sent, where the backend has no
    /// such step.
    async fn release_lease_after(&self, lease: &Lease, ttl: Duration) -> Result<ReleaseOutcome> {
        let ttl = self.capabilities().check_ttl(ttl)?;
        if ttl > lease.ttl() {
            return Err(Error::new(
                ErrorKind::InvalidTtl,
                format!(
                    "a released key is kept no longer than its lease was granted ({:?}), not {ttl:?}",
                    lease.ttl()
                ),
            )
            .with_backend(self.name().to_owned())
            .with_not_sent());
        }
        self.release_after(&ExtendRequest::new(lease.clone(), ttl))
            .await
    }

    /// The keys held now whose names start with `prefix` (`""`: every key), each with
    /// its holder's fence and remaining TTL, sorted by key; see
    /// [`scan`](super::OperatorBackend::scan). A non-empty `prefix` is checked as a key is
    /// ([`ErrorKind::InvalidKey`]) before anything is sent, and an
    /// [`ErrorKind::Unsupported`] error, with nothing sent, where the backend
    /// has no [`operator`](LockBackend::operator) steps.
    async fn list(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        if !prefix.is_empty() {
            LockKey::new(prefix)?;
        }
        let Some(operator) = self.operator() else {
            return Err(unsupported(self, "cannot list its locks"));
        };
        let mut held = operator.scan(prefix).await?;
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

/// [`LockBackendExt::try_acquire_all`] as `holder`.
pub(crate) async fn acquire_all_as<B: LockBackend + ?Sized>(
    backend: &B,
    keys: &[(LockKey, OwnerToken)],
    ttl: Duration,
    holder: &Holder,
) -> Result<SetOutcome> {
    let Some(sets) = backend.sets() else {
        return Err(unsupported(
            backend,
            "cannot take a set of keys in one step",
        ));
    };
    let capabilities = backend.capabilities();
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
        .map(|(key, owner)| AcquireRequest::new(key.clone(), ttl, *owner, holder.clone()))
        .collect();
    let sent_at = Instant::now();
    let fences = match sets.try_grant_all(&requests).await? {
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
    let unfenced = fences.iter().any(|fence| fence.is_none());
    if wrong || unfenced || leases.iter().any(Lease::is_expired) {
        for request in &requests {
            let _ = backend.release(request.key(), request.owner()).await;
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
            .with_backend(backend.name().to_owned()));
        }
        if unfenced {
            return Err(no_fence(backend.name()));
        }
        return Err(late(backend.name(), "grant of a set"));
    }
    Ok(SetOutcome::Acquired(leases))
}

/// [`LockBackendExt::try_acquire_in_turn`] as `holder`.
pub(crate) async fn acquire_in_turn_as<B: LockBackend + ?Sized>(
    backend: &B,
    key: &LockKey,
    ttl: Duration,
    owner: OwnerToken,
    place: Duration,
    holder: &Holder,
) -> Result<AcquireOutcome> {
    if backend.fair().is_none() {
        return Err(unsupported(backend, "has no fair mode"));
    }
    let capabilities = backend.capabilities();
    let ttl = capabilities.check_ttl(ttl)?;
    let place = capabilities.ttl_at_least(place);
    let request = AcquireRequest::new(key.clone(), ttl, owner, holder.clone()).in_turn(place);
    let sent_at = Instant::now();
    let grant = backend.try_grant(&request).await?;
    let (outcome, _) = settle(backend, request, grant, sent_at).await?;
    Ok(outcome)
}

/// [`LockBackendExt::try_acquire_as`] as a plain future, for the client: no boxed
/// future of its own, and with the clock reading at which a lease was found still
/// valid, which the caller may take as the time of the grant.
pub(crate) async fn acquire_as<B: LockBackend + ?Sized>(
    backend: &B,
    key: &LockKey,
    ttl: Duration,
    owner: OwnerToken,
    holder: &Holder,
    fenced: bool,
) -> Result<(AcquireOutcome, Option<Instant>)> {
    let ttl = backend.capabilities().check_ttl(ttl)?;
    let mut request = AcquireRequest::new(key.clone(), ttl, owner, holder.clone());
    if !fenced {
        request = request.unfenced();
    }
    let sent_at = Instant::now();
    let grant = backend.try_grant(&request).await?;
    settle(backend, request, grant, sent_at).await
}

/// Turns a grant step's answer into the outcome callers get: the lease, counted from
/// `sent_at` (contract point 7), or a late grant given back, or one without the fence
/// the request asked for (contract point 6). With a lease, the clock reading at which
/// it was found still valid.
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
    // A fenced request answered without a fence: a fair step never may be; a plain
    // one may be only where the backend grants without fences, and a wrapper turned
    // the request's fence off on its way (AcquireRequest::with_fenced), answering for
    // it. A lease without a fence fails closed anyway: every fenced store refuses it.
    let may = !request.fenced() || backend.capabilities().unfenced_grants;
    if fence.is_none() && (request.place().is_some() || !may) {
        let _ = backend.release(key, &owner).await;
        return Err(no_fence(backend.name()));
    }
    let drift = backend.capabilities().clock_drift.allowance(ttl);
    let lease = Lease::new(key.clone(), owner, fence, ttl, sent_at, drift);
    let now = Instant::now();
    if now < lease.valid_until() {
        return Ok((AcquireOutcome::Acquired(lease), Some(now)));
    }
    let _ = backend.release(key, &owner).await;
    Err(late(backend.name(), "grant"))
}

/// What a backend without an optional feature answers, with nothing sent.
fn unsupported<B: LockBackend + ?Sized>(backend: &B, what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the {} backend {what}", backend.name()),
    )
    .with_backend(backend.name().to_owned())
}

/// A grant without the fence its request asked for: the backend broke contract point 6.
fn no_fence(backend: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        "the backend granted a fenced request without a fence; the grant was given back",
    )
    .with_backend(backend.to_owned())
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
