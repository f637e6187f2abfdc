//! The client in fair mode on a backend whose releases hand the key to the head of its
//! queue (contract point 10, `FairBackend::handoffs`): the memory backend, with
//! every fair step counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FairBackend, Grant, Handoffs,
    OwnerToken, ReleaseOutcome, Renewal,
};
use distlock_core::{
    LockBackend, LockClient, LockGuard, LockInfo, LockKey, LockOptions, MemoryBackend, Result,
};
use tokio::time::{sleep, Instant};

/// The memory backend, counting the fair steps and the fair releases it is sent.
#[derive(Debug, Default)]
struct Counted {
    inner: MemoryBackend,
    steps: AtomicUsize,
    fair_releases: AtomicUsize,
}

impl Counted {
    fn steps(&self) -> usize {
        self.steps.load(Ordering::SeqCst)
    }

    fn fair_releases(&self) -> usize {
        self.fair_releases.load(Ordering::SeqCst)
    }

    fn inner_fair(&self) -> &dyn FairBackend {
        self.inner.fair().expect("the memory backend has fair mode")
    }
}

#[async_trait]
impl FairBackend for Counted {
    async fn leave_queue(&self, k: &LockKey, o: &OwnerToken) -> Result<()> {
        self.inner_fair().leave_queue(k, o).await
    }
    async fn release_in_turn(&self, k: &LockKey, o: &OwnerToken) -> Result<ReleaseOutcome> {
        self.fair_releases.fetch_add(1, Ordering::SeqCst);
        self.inner_fair().release_in_turn(k, o).await
    }
    async fn watch_in_turn(&self, k: &LockKey, o: &OwnerToken) -> Result<Option<ChangeStream>> {
        self.inner_fair().watch_in_turn(k, o).await
    }
    fn handoffs(&self) -> Option<&dyn Handoffs> {
        self.inner_fair().handoffs()
    }
}

#[async_trait]
impl LockBackend for Counted {
    fn name(&self) -> &str {
        "memory-counted"
    }
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    async fn try_grant(&self, r: &AcquireRequest) -> Result<Grant> {
        if r.place().is_some() {
            self.steps.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.try_grant(r).await
    }
    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }
    async fn release(&self, k: &LockKey, o: &OwnerToken) -> Result<ReleaseOutcome> {
        self.inner.release(k, o).await
    }
    async fn renew(&self, r: &ExtendRequest) -> Result<Renewal> {
        self.inner.renew(r).await
    }
    async fn inspect(&self, k: &LockKey) -> Result<Option<LockInfo>> {
        self.inner.inspect(k).await
    }
    async fn watch(&self, k: &LockKey) -> Result<Option<ChangeStream>> {
        self.inner.watch(k).await
    }
}

/// A holder on one client, a fair waiter on another that has made its first step:
/// the holder's guard, the waiting task, and the steps made so far.
async fn held_with_a_waiter(
    backend: &Arc<Counted>,
    options: LockOptions,
) -> (
    LockGuard,
    tokio::task::JoinHandle<distlock_core::Result<LockGuard>>,
    usize,
) {
    let holder = LockClient::with_options(backend.clone(), options.clone()).expect("options");
    let waiter = LockClient::with_options(backend.clone(), options).expect("options");
    let held = holder
        .lock("k", Duration::from_secs(1))
        .await
        .expect("free");
    let waiting = tokio::spawn(async move { waiter.lock("k", Duration::from_secs(10)).await });
    let deadline = Instant::now() + Duration::from_secs(5);
    // The holder's step, and the waiter's first.
    while backend.steps() < 2 {
        assert!(Instant::now() < deadline, "the waiter never asked");
        sleep(Duration::from_millis(1)).await;
    }
    let steps = backend.steps();
    (held, waiting, steps)
}

#[tokio::test]
async fn a_waiter_handed_the_key_takes_it_without_a_step_of_its_own() {
    let backend = Arc::new(Counted::default());
    // A place longer than the minimum validity (a quarter of the TTL): what a release
    // hands over lasts long enough to be used as it is.
    let options = LockOptions::new(Duration::from_secs(10))
        .with_fair(true)
        .with_queue_place(Duration::from_secs(10));
    let (held, waiting, steps) = held_with_a_waiter(&backend, options.clone()).await;
    let released_at = Instant::now();
    held.release().await.expect("release");
    let guard = waiting.await.expect("join").expect("granted");
    assert_eq!(
        backend.steps(),
        steps,
        "the waiter made a fair step after the release handed it the key"
    );
    let shown = backend.inspect(guard.key()).await.expect("inspect");
    assert_eq!(shown.map(|info| info.fence), Some(guard.fence()));
    // Counted from before the release: no later than the release plus the TTL.
    assert!(guard.valid_until() <= released_at + options.ttl());
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_handoff_with_less_than_the_minimum_validity_is_renewed_by_a_step() {
    let backend = Arc::new(Counted::default());
    // The default place of 3 s is below the minimum validity of a 30 s TTL (7.5 s): the
    // lease handed over, which lasts until the place runs out, is renewed for the TTL
    // by one fair step before it is used.
    let options = LockOptions::new(Duration::from_secs(30)).with_fair(true);
    let (held, waiting, steps) = held_with_a_waiter(&backend, options.clone()).await;
    held.release().await.expect("release");
    let renewed_from = Instant::now();
    let guard = waiting.await.expect("join").expect("granted");
    assert_eq!(backend.steps(), steps + 1, "one step renews the handoff");
    assert!(
        guard.valid_until() >= renewed_from + options.min_validity(),
        "the guard was handed out with less than the minimum validity"
    );
    let shown = backend.inspect(guard.key()).await.expect("inspect");
    assert_eq!(shown.map(|info| info.fence), Some(guard.fence()));
    guard.release().await.expect("release");
}

/// A fair lock's guard releases through the backend's fair release, released or
/// dropped; a plain lock's never does.
#[tokio::test]
async fn a_fair_locks_release_is_the_backends_fair_release() {
    let backend = Arc::new(Counted::default());
    let ttl = Duration::from_secs(10);
    let fair = LockClient::with_options(backend.clone(), LockOptions::new(ttl).with_fair(true))
        .expect("options");
    let plain = LockClient::with_options(backend.clone(), LockOptions::new(ttl)).expect("options");

    let held = fair.try_lock("k").await.expect("lock").expect("free");
    held.release().await.expect("release");
    assert_eq!(backend.fair_releases(), 1, "a fair guard's release");

    let held = fair.try_lock("k").await.expect("lock").expect("free");
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend.fair_releases() < 2 {
        assert!(
            Instant::now() < deadline,
            "a dropped fair guard was not released in turn"
        );
        sleep(Duration::from_millis(1)).await;
    }

    let held = plain.try_lock("k").await.expect("lock").expect("free");
    held.release().await.expect("release");
    assert_eq!(
        backend.fair_releases(),
        2,
        "a plain guard's release went in turn"
    );
    assert!(backend
        .inspect(&LockKey::new("k").expect("key"))
        .await
        .expect("inspect")
        .is_none());
}
