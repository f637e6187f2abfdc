//! The suite's run of an efficiency lock ([`Target::unfenced`](crate::Target::unfenced)):
//! a backend whose plain grants are asked for without a fence.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FairBackend, Grant, OperatorBackend,
    OwnerToken, PermitBackend, ReleaseOutcome, Renewal, SetBackend,
};
use distlock_core::{DynLockBackend, LockBackend, LockInfo, LockKey, Result};

/// Forwards every step to the backend under test, with each grant request's fence
/// turned off ([`AcquireRequest::with_fenced`]), as an efficiency lock's client sends
/// it. Fair steps and sets still take the fenced step, as the contract says.
#[derive(Debug)]
pub(crate) struct Unfenced(pub(crate) Arc<DynLockBackend>);

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl LockBackend for Unfenced {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn capabilities(&self) -> &Capabilities {
        self.0.capabilities()
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.0.try_grant(&request.with_fenced(false)).await
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.0.release(key, owner).await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.0.renew(request).await
    }

    async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
        self.0.release_after(request).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.0.inspect(key).await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.0.watch(key).await
    }

    async fn ping(&self) -> Result<()> {
        self.0.ping().await
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        self.0.fair()
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        self.0.sets()
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.0.operator()
    }

    fn permits(&self) -> Option<&dyn PermitBackend> {
        self.0.permits()
    }
}

/// `backend` with its grants asked for without a fence.
pub(crate) fn unfenced(backend: Arc<DynLockBackend>) -> Arc<DynLockBackend> {
    Arc::new(Unfenced(backend))
}
