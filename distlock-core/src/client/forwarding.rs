//! The client's backend wrappers (metrics, the circuit breaker) and the pointer
//! forwards each forward every step of the contract and of its optional parts to the
//! backend they wrap. A step a wrapper does not write falls to the trait's default,
//! which answers without asking the inner backend: a backend that records each step
//! it is sent shows which one was left out. Each forwarding impl also denies
//! `clippy::missing_trait_methods`, so a method added to a trait later fails the lint
//! until every wrapper, and the recorder here, writes it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    ChangeStream, Claim, DynLockBackend, FairBackend, Handoff, Handoffs, LockBackend,
    OperatorBackend, PermitBackend, PermitHolder, SetBackend, Term,
};
use crate::capabilities::Capabilities;
use crate::error::Result;
use crate::holder::Holder;
use crate::key::LockKey;
use crate::lease::{
    AcquireRequest, ExtendRequest, Grant, Lease, LockInfo, ReleaseOutcome, Renewal, SetGrant,
};
use crate::token::{FencingToken, OwnerToken};

use super::breaker::{Breaker, Breaking};
#[cfg(feature = "metrics")]
use super::metered::Metered;
use super::options::BreakerOptions;

/// Every step a backend can be sent, in the order [`send_every_step`] sends them.
const EVERY_STEP: &[&str] = &[
    "try_grant",
    "release",
    "renew",
    "inspect",
    "release_after",
    "watch",
    "ping",
    "fair.leave_queue",
    "fair.watch_in_turn",
    "fair.release_in_turn",
    "fair.handoffs.handed_over",
    "sets.try_grant_all",
    "operator.force_release",
    "operator.scan",
    "permits.try_grant_permits",
    "permits.release_permits",
    "permits.renew_permits",
    "permits.leave_queue",
    "permits.proclaim",
    "permits.holders",
    "permits.terms",
    "permits.watch_permits",
];

/// A backend that answers every step, records it, and has every optional part. It
/// renews only to the granted TTL, so that the default early release answers without
/// renewing.
#[derive(Debug)]
struct Recorder {
    sent: Mutex<Vec<&'static str>>,
    capabilities: Capabilities,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            sent: Mutex::default(),
            capabilities: Capabilities {
                extend_any_ttl: false,
                ..Capabilities::default()
            },
        }
    }

    fn record(&self, step: &'static str) {
        self.sent.lock().expect("not poisoned").push(step);
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl LockBackend for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
    async fn try_grant(&self, _: &AcquireRequest) -> Result<Grant> {
        self.record("try_grant");
        Ok(Grant::Held { remaining: None })
    }
    async fn release(&self, _: &LockKey, _: &OwnerToken) -> Result<ReleaseOutcome> {
        self.record("release");
        Ok(ReleaseOutcome::NotHeld)
    }
    async fn renew(&self, _: &ExtendRequest) -> Result<Renewal> {
        self.record("renew");
        Ok(Renewal::NotHeld)
    }
    async fn inspect(&self, _: &LockKey) -> Result<Option<LockInfo>> {
        self.record("inspect");
        Ok(None)
    }
    async fn release_after(&self, _: &ExtendRequest) -> Result<ReleaseOutcome> {
        self.record("release_after");
        Ok(ReleaseOutcome::NotHeld)
    }
    async fn watch(&self, _: &LockKey) -> Result<Option<ChangeStream>> {
        self.record("watch");
        Ok(None)
    }
    async fn ping(&self) -> Result<()> {
        self.record("ping");
        Ok(())
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
    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl FairBackend for Recorder {
    async fn leave_queue(&self, _: &LockKey, _: &OwnerToken) -> Result<()> {
        self.record("fair.leave_queue");
        Ok(())
    }
    async fn watch_in_turn(&self, _: &LockKey, _: &OwnerToken) -> Result<Option<ChangeStream>> {
        self.record("fair.watch_in_turn");
        Ok(None)
    }
    async fn release_in_turn(&self, _: &LockKey, _: &OwnerToken) -> Result<ReleaseOutcome> {
        self.record("fair.release_in_turn");
        Ok(ReleaseOutcome::NotHeld)
    }
    fn handoffs(&self) -> Option<&dyn Handoffs> {
        Some(self)
    }
}

#[deny(clippy::missing_trait_methods)]
impl Handoffs for Recorder {
    fn handed_over(&self, _: &LockKey, _: &OwnerToken) -> Option<Handoff> {
        self.record("fair.handoffs.handed_over");
        None
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl SetBackend for Recorder {
    async fn try_grant_all(&self, _: &[AcquireRequest]) -> Result<SetGrant> {
        self.record("sets.try_grant_all");
        Ok(SetGrant::Held {
            index: 0,
            remaining: None,
        })
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl OperatorBackend for Recorder {
    async fn force_release(&self, _: &LockKey) -> Result<bool> {
        self.record("operator.force_release");
        Ok(false)
    }
    async fn scan(&self, _: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        self.record("operator.scan");
        Ok(Vec::new())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl PermitBackend for Recorder {
    async fn try_grant_permits(&self, _: &AcquireRequest, _: &Claim) -> Result<Grant> {
        self.record("permits.try_grant_permits");
        Ok(Grant::Held { remaining: None })
    }
    async fn release_permits(&self, _: &LockKey, _: &OwnerToken) -> Result<ReleaseOutcome> {
        self.record("permits.release_permits");
        Ok(ReleaseOutcome::NotHeld)
    }
    async fn renew_permits(&self, _: &ExtendRequest) -> Result<Renewal> {
        self.record("permits.renew_permits");
        Ok(Renewal::NotHeld)
    }
    async fn leave_queue(&self, _: &LockKey, _: &OwnerToken) -> Result<()> {
        self.record("permits.leave_queue");
        Ok(())
    }
    async fn proclaim(&self, _: &LockKey, _: &OwnerToken, _: &str) -> Result<Renewal> {
        self.record("permits.proclaim");
        Ok(Renewal::NotHeld)
    }
    async fn holders(&self, _: &LockKey) -> Result<Vec<PermitHolder>> {
        self.record("permits.holders");
        Ok(Vec::new())
    }
    async fn terms(&self, _: &LockKey, _: u64) -> Result<Vec<Term>> {
        self.record("permits.terms");
        Ok(Vec::new())
    }
    async fn watch_permits(&self, _: &LockKey) -> Result<Option<ChangeStream>> {
        self.record("permits.watch_permits");
        Ok(None)
    }
}

/// Sends `backend` each step of [`EVERY_STEP`] once, through its accessors for the
/// optional parts (a part it does not hand out is a failure). Answers that are not
/// the recorder's (a default's refusal) are left for the record to show.
async fn send_every_step(backend: &dyn LockBackend) {
    let key = LockKey::new("forwarded").expect("a valid key");
    let owner = OwnerToken::random();
    let ttl = Duration::from_secs(10);
    let request = AcquireRequest::new(key.clone(), ttl, owner, Holder::this_process());
    let lease = Lease::new(
        key.clone(),
        owner,
        FencingToken::from_server(1).expect("a fence"),
        ttl,
        Instant::now(),
        Duration::ZERO,
    );
    let extend = ExtendRequest::new(lease, ttl);
    let _ = backend.try_grant(&request).await;
    let _ = backend.release(&key, &owner).await;
    let _ = backend.renew(&extend).await;
    let _ = backend.inspect(&key).await;
    let _ = backend.release_after(&extend).await;
    let _ = backend.watch(&key).await;
    let _ = backend.ping().await;
    let fair = backend.fair().expect("the fair part handed out");
    let _ = fair.leave_queue(&key, &owner).await;
    let _ = fair.watch_in_turn(&key, &owner).await;
    let _ = fair.release_in_turn(&key, &owner).await;
    let handoffs = fair.handoffs().expect("the handoff part handed out");
    let _ = handoffs.handed_over(&key, &owner);
    let sets = backend.sets().expect("the set part handed out");
    let _ = sets.try_grant_all(std::slice::from_ref(&request)).await;
    let operator = backend.operator().expect("the operator part handed out");
    let _ = operator.force_release(&key).await;
    let _ = operator.scan("").await;
    let permits = backend.permits().expect("the permit part handed out");
    let claim = Claim::new(1, 1).expect("a valid claim");
    let _ = permits.try_grant_permits(&request, &claim).await;
    let _ = permits.release_permits(&key, &owner).await;
    let _ = permits.renew_permits(&extend).await;
    let _ = permits.leave_queue(&key, &owner).await;
    let _ = permits.proclaim(&key, &owner, "v").await;
    let _ = permits.holders(&key).await;
    let _ = permits.terms(&key, 0).await;
    let _ = permits.watch_permits(&key).await;
}

/// What `wrap` forwards of [`send_every_step`] to a [`Recorder`] it wraps.
async fn forwarded(
    wrap: impl FnOnce(Arc<DynLockBackend>) -> Arc<DynLockBackend>,
) -> Vec<&'static str> {
    let recorder = Arc::new(Recorder::new());
    let wrapped = wrap(recorder.clone());
    send_every_step(&*wrapped).await;
    let sent = recorder.sent.lock().expect("not poisoned").clone();
    sent
}

#[tokio::test]
async fn the_recorder_records_every_step_sent_to_it() {
    assert_eq!(forwarded(|recorder| recorder).await, EVERY_STEP);
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_metrics_wrapper_forwards_every_step() {
    let sent = forwarded(|inner| Arc::new(Metered::new(inner))).await;
    assert_eq!(sent, EVERY_STEP);
}

#[tokio::test]
async fn the_circuit_breaker_forwards_every_step() {
    let sent = forwarded(|inner| {
        let breaker = Arc::new(Breaker::new(BreakerOptions::default(), inner.name()));
        Arc::new(Breaking::new(inner, breaker))
    })
    .await;
    assert_eq!(sent, EVERY_STEP);
}

#[tokio::test]
async fn the_pointer_forwards_forward_every_step() {
    let sent = forwarded(|inner| Arc::new(Arc::clone(&inner))).await;
    assert_eq!(sent, EVERY_STEP);
    let sent = forwarded(|inner| Arc::new(Box::new(inner))).await;
    assert_eq!(sent, EVERY_STEP);
}
