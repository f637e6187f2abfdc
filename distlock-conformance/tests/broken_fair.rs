//! Deliberately broken fair modes, each with one bug: the fairness cases must catch
//! every one, and the same backend without the bug passes them. Each is the memory
//! backend with its fair step bent one way.

mod support;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::Target;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, FairBackend, Grant, Handoff,
    Handoffs, OperatorBackend, OwnerToken, ReleaseOutcome, Renewal,
};
use distlock_core::{FencingToken, LockBackend, LockInfo, LockKey, MemoryBackend, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Declares fairness but grants a fair request as a plain one: whoever asks when
    /// the key is free gets it, queue or no queue.
    QueueIgnored,
    /// Keeps a waiter's place for ever: one that vanished blocks the queue for good.
    PlacesNeverExpire,
    /// Ignores a waiter's leaving: one that gave up blocks the queue until its place
    /// runs out.
    LeaveIgnored,
    /// Lets the waiter first in the queue take the key from a holder that got it by a
    /// plain (racing) request: the fair step checks the queue, and the lease only when
    /// it was granted in turn.
    FairStepOverridesPlainHolder,
    /// Counts a grant a release handed over from when the waiter takes it, not from
    /// before the release made it: the waiter believes its lease lasts longer than
    /// the server keeps it.
    HandoffCountedFromItsNotice,
    /// Answers a fair step of an owner that holds the key already (a retry whose reply
    /// was lost) "granted" from what it read, without restarting the lease's expiry:
    /// the client counts a fresh TTL that the server does not keep.
    RetryKeepsTheExpiry,
    /// Judges a fair step by its place before it looks at the lease: an owner that
    /// holds the key already, retrying, is refused behind the waiters queued since.
    RetryRefusedBehindThePlaces,
}

#[derive(Debug)]
struct Fair {
    store: MemoryBackend,
    bug: Bug,
    /// The keys last granted by a plain request (for `FairStepOverridesPlainHolder`).
    plain: Mutex<HashSet<LockKey>>,
    /// The grants of fair steps, by key and owner, with their fence (for the retry
    /// bugs).
    in_turn: Mutex<Vec<(LockKey, OwnerToken, FencingToken)>>,
}

impl Fair {
    /// The fence of the fair grant `request`'s owner holds on its key, if the store
    /// still holds that grant.
    async fn own_grant(&self, request: &AcquireRequest) -> Result<Option<FencingToken>> {
        let recorded = self
            .in_turn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(k, o, _)| k == request.key() && o == request.owner())
            .map(|(_, _, fence)| *fence);
        let Some(fence) = recorded else {
            return Ok(None);
        };
        let held = self.store.inspect(request.key()).await?;
        Ok(held.filter(|info| info.fence == fence).map(|_| fence))
    }

    /// The fair step, bent as the bug bends it.
    async fn fair_step(&self, request: &AcquireRequest) -> Result<Grant> {
        match self.bug {
            Bug::RetryKeepsTheExpiry => {
                if let Some(fence) = self.own_grant(request).await? {
                    return Ok(Grant::Granted(fence));
                }
                self.store.try_grant(request).await
            }
            Bug::RetryRefusedBehindThePlaces => {
                if self.own_grant(request).await?.is_some() {
                    return Ok(Grant::Held { remaining: None });
                }
                self.store.try_grant(request).await
            }
            Bug::None | Bug::LeaveIgnored | Bug::HandoffCountedFromItsNotice => {
                self.store.try_grant(request).await
            }
            Bug::FairStepOverridesPlainHolder => {
                let grant = self.store.try_grant(request).await?;
                let plain = self
                    .plain
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(request.key());
                match (grant, plain) {
                    (Grant::Held { .. }, true) => {
                        self.store.force_release(request.key()).await?;
                        self.store.try_grant(request).await
                    }
                    (grant, _) => Ok(grant),
                }
            }
            Bug::QueueIgnored => self.store.try_grant(&request.with_place(None)).await,
            Bug::PlacesNeverExpire => {
                let forever = Duration::from_secs(365 * 24 * 3600);
                self.store
                    .try_grant(&request.with_place(Some(forever)))
                    .await
            }
        }
    }
}

#[async_trait]
impl LockBackend for Fair {
    fn name(&self) -> &str {
        "broken-fair"
    }
    fn capabilities(&self) -> &Capabilities {
        self.store.capabilities()
    }
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        if request.place().is_some() {
            let grant = self.fair_step(request).await?;
            if let Grant::Granted(fence) = grant {
                self.in_turn
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((request.key().clone(), *request.owner(), fence));
            }
            return Ok(grant);
        }
        let grant = self.store.try_grant(request).await?;
        if matches!(grant, Grant::Granted(_)) {
            self.plain
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(request.key().clone());
        }
        Ok(grant)
    }
    fn fair(&self) -> Option<&dyn FairBackend> {
        Some(self)
    }
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.store.release(key, owner).await
    }
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.store.renew(request).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.store.inspect(key).await
    }
    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.store.watch(key).await
    }
}

#[async_trait]
impl FairBackend for Fair {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        if self.bug == Bug::LeaveIgnored {
            return Ok(());
        }
        self.store.leave_queue(key, owner).await
    }
    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        self.store.watch_in_turn(key, owner).await
    }
    fn handoffs(&self) -> Option<&dyn Handoffs> {
        Some(self)
    }
}

impl Handoffs for Fair {
    fn handed_over(&self, key: &LockKey, owner: &OwnerToken) -> Option<Handoff> {
        let handoff = self.store.handoffs()?.handed_over(key, owner)?;
        Some(match self.bug {
            Bug::HandoffCountedFromItsNotice => Handoff {
                granted_after: tokio::time::Instant::now(),
                ..handoff
            },
            _ => handoff,
        })
    }
}

fn target(bug: Bug) -> Target {
    Target::new(std::sync::Arc::new(Fair {
        store: MemoryBackend::new(),
        bug,
        plain: Mutex::default(),
        in_turn: Mutex::default(),
    }))
}

#[tokio::test]
async fn a_queue_not_honoured_is_caught_by_the_order_case() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::QueueIgnored,
        "fair_waiters_are_granted_in_the_order_they_asked",
        "were granted in the order",
    )
    .await;
}

#[tokio::test]
async fn a_queue_not_honoured_is_caught_by_the_starvation_case() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::QueueIgnored,
        "fair_waiters_do_not_starve",
        "grants to others while it waited",
    )
    .await;
}

#[tokio::test]
async fn a_queue_not_honoured_is_caught_by_the_vanished_waiter_case() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::QueueIgnored,
        "a_vanished_waiter_leaves_the_queue",
        "before its place of",
    )
    .await;
}

#[tokio::test]
async fn a_vanished_waiter_that_blocks_the_queue_for_ever_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::PlacesNeverExpire,
        "a_vanished_waiter_leaves_the_queue",
        "still blocked the queue",
    )
    .await;
}

#[tokio::test]
async fn a_leave_that_is_ignored_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::LeaveIgnored,
        "a_waiter_that_gives_up_leaves_the_queue_at_once",
        "the waiters that gave up still held their places",
    )
    .await;
}

#[tokio::test]
async fn a_fair_step_that_overrides_a_plain_holder_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::FairStepOverridesPlainHolder,
        "fair_and_racing_waiters_never_overlap",
        "was granted while another held the key",
    )
    .await;
}

#[tokio::test]
async fn a_handoff_counted_from_its_notice_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::HandoffCountedFromItsNotice,
        "a_release_hands_the_key_to_the_head_of_its_queue",
        "later than the grant",
    )
    .await;
}

#[tokio::test]
async fn a_leave_that_keeps_a_handed_grant_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::LeaveIgnored,
        "a_release_hands_the_key_to_the_head_of_its_queue",
        "within 10 s of the release",
    )
    .await;
}

#[tokio::test]
async fn a_retried_fair_step_that_keeps_the_expiry_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::RetryKeepsTheExpiry,
        "a_retried_fair_step_restarts_the_expiry_it_counts_from",
        "the retry did not restart the expiry",
    )
    .await;
}

#[tokio::test]
async fn a_retried_fair_step_refused_behind_the_places_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::RetryRefusedBehindThePlaces,
        "a_retried_fair_step_restarts_the_expiry_it_counts_from",
        "was refused while a waiter was queued behind it",
    )
    .await;
}
