//! One claim on a backend's permits seen as a lock backend, so that the client's
//! waits, renewal, guards and loss signal serve semaphores, read-write locks and
//! elections unchanged; and the clients of one name's claims, which those kinds are
//! built on.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{ChangeStream, DynLockBackend, FairBackend, LockBackend};
use crate::capabilities::Capabilities;
use crate::client::{Busy, LockClient, LockGuard, LockOptions};
use crate::error::{Error, ErrorKind, Result};
use crate::holder::Holder;
use crate::key::LockKey;
use crate::lease::{AcquireRequest, ExtendRequest, Grant, LockInfo, ReleaseOutcome, Renewal};
use crate::permits::{Claim, PermitBackend, PermitHolder};
use crate::token::OwnerToken;

/// The permits of `backend`, or an [`ErrorKind::Unsupported`] error naming it.
pub(crate) fn permits_of(backend: &DynLockBackend) -> Result<&dyn PermitBackend> {
    match backend.permits() {
        Some(permits) => Ok(permits),
        None => Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the {} backend has no permits (semaphores, read-write locks, elections that record their terms)",
                backend.name()
            ),
        )
        .with_backend(backend.name().to_owned())),
    }
}

/// One claim on a backend's permits, seen as a [`LockBackend`]: each grant of the
/// claim is a lease on the name, so that [`LockClient`]'s waits,
/// renewal, guards and loss signal serve the shared kinds unchanged. Its "fair mode"
/// keeps a place (point 4 of [`PermitBackend`]), not a queue: it is only ever used
/// inside core.
#[derive(Debug)]
pub(crate) struct ClaimView {
    inner: Arc<DynLockBackend>,
    claim: Claim,
    capabilities: Capabilities,
}

impl ClaimView {
    /// A view of `claim` on `inner`: an [`ErrorKind::Configuration`] error when
    /// `inner` has no permits.
    pub(crate) fn new(inner: Arc<DynLockBackend>, claim: Claim) -> Result<Self> {
        permits_of(&*inner)
            .map_err(|e| Error::new(ErrorKind::Configuration, e.message().to_owned()))?;
        let capabilities = inner.capabilities().clone();
        Ok(ClaimView {
            inner,
            claim,
            capabilities,
        })
    }

    fn permits(&self) -> Result<&dyn PermitBackend> {
        permits_of(&*self.inner)
    }
}

#[async_trait]
impl LockBackend for ClaimView {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.permits()?
            .try_grant_permits(request, &self.claim)
            .await
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.permits()?.release_permits(key, owner).await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.permits()?.renew_permits(request).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let holders = self.permits()?.holders(key).await?;
        Ok(holders
            .last()
            .map(|h| LockInfo::new(h.fence, h.remaining).held_by(h.holder.clone(), h.granted_at)))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.permits()?.watch_permits(key).await
    }
}

#[async_trait]
impl FairBackend for ClaimView {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        self.permits()?.leave_queue(key, owner).await
    }
}

/// Clients of one name's permits, one per claim, sharing their deferred starts, their
/// background work and their circuit breaker with the client the kind was made from.
#[derive(Debug, Clone)]
pub(crate) struct Claims {
    base: LockClient,
    name: LockKey,
    options: LockOptions,
}

impl Claims {
    /// The claims on `name` of `client`'s backend, sharing the client's options, its
    /// circuit breaker, its deferred starts and its background work: checks the name
    /// and that the backend has permits.
    pub(crate) fn new(client: &LockClient, name: &str) -> Result<Self> {
        // Every wait keeps a place (point 4 of the permit contract).
        let claims = Self::sharing(client, name, client.options().clone().with_fair(true))?;
        claims.client(Claim::new(1, 1)?)?;
        Ok(claims)
    }

    /// The same pieces of `client`, with `options`, for a kind that takes leases on
    /// the backend's locks instead of its permits (an election where the backend has
    /// no permits): checks the name only. Always fenced, whatever `options` say of an
    /// efficiency lock: a term, a permit and a read-write hold are known by their
    /// fences.
    pub(crate) fn sharing(client: &LockClient, name: &str, options: LockOptions) -> Result<Self> {
        Ok(Claims {
            base: client.clone(),
            name: LockKey::new(name)?,
            options: options.with_fenced(true),
        })
    }

    /// A client of the backend's locks whose grants store `holder`, sharing what the
    /// claims' clients share.
    pub(crate) fn lease_client(&self, holder: Holder) -> Result<LockClient> {
        let options = self.options().clone().with_holder(holder);
        self.base.sharing(self.backend().clone(), options)
    }

    /// A client whose every grant is `claim` on the name.
    pub(crate) fn client(&self, claim: Claim) -> Result<LockClient> {
        let view = Arc::new(ClaimView::new(self.backend().clone(), claim)?);
        self.base.sharing(view, self.options().clone())
    }

    /// As [`LockClient::flush`], for every claim's client.
    pub(crate) async fn flush(&self) {
        self.base.flush().await;
    }

    pub(crate) fn name(&self) -> &LockKey {
        &self.name
    }

    pub(crate) fn backend(&self) -> &Arc<DynLockBackend> {
        self.base.raw()
    }

    pub(crate) fn options(&self) -> &LockOptions {
        &self.options
    }

    pub(crate) async fn acquire(&self, claim: Claim, wait: Duration) -> Result<LockGuard> {
        self.client(claim)?.lock(self.name.as_str(), wait).await
    }

    pub(crate) async fn try_acquire(
        &self,
        claim: Claim,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        self.client(claim)?.try_lock(self.name.as_str()).await
    }

    /// One try for `claim` as `owner` (see [`LockClient::try_lock_as`]).
    pub(crate) async fn try_acquire_as(
        &self,
        claim: Claim,
        owner: OwnerToken,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        self.client(claim)?
            .try_lock_as(self.name.as_str(), owner)
            .await
    }

    pub(crate) async fn holders(&self) -> Result<Vec<PermitHolder>> {
        permits_of(&**self.backend())?.holders(&self.name).await
    }
}
