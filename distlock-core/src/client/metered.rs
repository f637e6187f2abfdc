//! The backend's own figures (feature `metrics`): every request the client sends to
//! its backend, counted and timed by step, beside the client's figures for whole
//! calls (`telemetry`).
//!
//! It sits around the backend as a backend of its own, [`Metered`], inside the
//! circuit breaker: a call the breaker refuses never reaches the backend and is not
//! counted here. Without the feature the client does not build it, and no step reads
//! a clock for it.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    ChangeStream, DynLockBackend, FairBackend, Handoffs, LockBackend, OperatorBackend,
    PermitBackend, SetBackend,
};
use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::lease::{
    AcquireRequest, ExtendRequest, Grant, LockInfo, ReleaseOutcome, Renewal, SetGrant,
};
use crate::token::OwnerToken;

use super::telemetry::{self, StepResult};

/// A backend whose requests are counted by step and result, and timed: each step of
/// the contract, and the opening of a watch (not the changes it then brings). The
/// permit steps are counted as the grants, renewals and releases of the semaphore's
/// claims, which reach them through their own view.
#[derive(Debug)]
pub(crate) struct Metered {
    inner: Arc<DynLockBackend>,
}

/// One step in flight: recorded once, when it answers or, if the caller gives up on
/// it first (a wait's deadline), as cancelled when it is dropped.
struct InFlight<'a> {
    backend: &'a str,
    step: &'static str,
    started: Instant,
    answered: bool,
}

impl InFlight<'_> {
    fn answered<T>(mut self, result: &Result<T>) {
        self.answered = true;
        let outcome = match result {
            Ok(_) => StepResult::Ok,
            Err(error) => StepResult::of_error(error),
        };
        telemetry::step(self.backend, self.step, outcome, self.started);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.answered {
            telemetry::step(self.backend, self.step, StepResult::Cancelled, self.started);
        }
    }
}

impl Metered {
    pub(crate) fn new(inner: Arc<DynLockBackend>) -> Self {
        Metered { inner }
    }

    /// Sends one step, counting and timing it as `step`.
    async fn step<T>(
        &self,
        step: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let flight = InFlight {
            backend: self.inner.name(),
            step,
            started: Instant::now(),
            answered: false,
        };
        let result = call.await;
        flight.answered(&result);
        result
    }
}

/// The inner backend's optional part, which the accessors above hand out only where
/// it exists: a backend that stopped offering it is refused, not sent the step.
fn part<'a, T: ?Sized>(part: Option<&'a T>, what: &str) -> Result<&'a T> {
    part.ok_or_else(|| {
        Error::new(ErrorKind::Unsupported, format!("no {what} step")).with_not_sent()
    })
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl LockBackend for Metered {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.step("grant", self.inner.try_grant(request)).await
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.step("release", self.inner.release(key, owner)).await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.step("renew", self.inner.renew(request)).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.step("inspect", self.inner.inspect(key)).await
    }

    async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
        self.step("release", self.inner.release_after(request))
            .await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.step("watch", self.inner.watch(key)).await
    }

    async fn ping(&self) -> Result<()> {
        self.step("ping", self.inner.ping()).await
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        self.inner.fair().map(|_| self as &dyn FairBackend)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        self.inner.sets().map(|_| self as &dyn SetBackend)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.inner.operator().map(|_| self as &dyn OperatorBackend)
    }

    fn permits(&self) -> Option<&dyn PermitBackend> {
        self.inner.permits()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl FairBackend for Metered {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let fair = part(self.inner.fair(), "fair")?;
        self.step("leave_queue", fair.leave_queue(key, owner)).await
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        let fair = part(self.inner.fair(), "fair")?;
        self.step("watch", fair.watch_in_turn(key, owner)).await
    }

    async fn release_in_turn(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let fair = part(self.inner.fair(), "fair")?;
        self.step("release", fair.release_in_turn(key, owner)).await
    }

    fn handoffs(&self) -> Option<&dyn Handoffs> {
        self.inner.fair().and_then(|fair| fair.handoffs())
    }
}

#[async_trait]
impl SetBackend for Metered {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let sets = part(self.inner.sets(), "set")?;
        self.step("grant_all", sets.try_grant_all(requests)).await
    }
}

#[async_trait]
impl OperatorBackend for Metered {
    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let operator = part(self.inner.operator(), "operator")?;
        self.step("force_release", operator.force_release(key))
            .await
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let operator = part(self.inner.operator(), "operator")?;
        self.step("scan", operator.scan(prefix)).await
    }
}
