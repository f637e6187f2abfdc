//! Deliberately broken permits, each with one bug: the cases of semaphores, read-write
//! locks and elections must catch every one, and the same backend without the bug
//! passes them. Each is the memory backend with its permit steps bent one way.

mod support;

use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::Target;
use distlock_core::{
    AcquireRequest, Capabilities, ChangeStream, Claim, ExtendRequest, Grant, LockBackend, LockInfo,
    LockKey, MemoryBackend, OwnerToken, PermitBackend, PermitHolder, ReleaseOutcome, Renewal,
    Result, Term,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Counts the limit one too high: one holder too many.
    LimitPlusOne,
    /// Takes every claim as a claim of one permit: a writer is just another reader.
    CountsIgnored,
    /// Keeps no places: waiting large claims hold nobody back.
    PlacesIgnored,
    /// Ignores leaving: a writer that gave up holds readers back until its place
    /// runs out.
    LeaveIgnored,
    /// Records only every other term.
    TermsDropped,
}

#[derive(Debug)]
struct Permits {
    store: MemoryBackend,
    bug: Bug,
}

#[async_trait]
impl PermitBackend for Permits {
    async fn try_grant_permits(
        &self,
        request: &AcquireRequest,
        claim: &Claim,
        place: Option<Duration>,
    ) -> Result<Grant> {
        let mut bent = claim.clone();
        let mut place = place;
        match self.bug {
            Bug::LimitPlusOne => {
                let limit = claim.limit().saturating_add(1);
                bent = Claim::new(claim.count(), limit)?;
                if let Some(value) = claim.value() {
                    bent = bent.with_value(value)?;
                }
            }
            Bug::CountsIgnored => {
                bent = Claim::new(1, claim.limit())?;
                if let Some(value) = claim.value() {
                    bent = bent.with_value(value)?;
                }
            }
            Bug::PlacesIgnored => place = None,
            Bug::None | Bug::LeaveIgnored | Bug::TermsDropped => {}
        }
        self.store.try_grant_permits(request, &bent, place).await
    }
    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.store.release_permits(key, owner).await
    }
    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.store.renew_permits(request).await
    }
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        if self.bug == Bug::LeaveIgnored {
            return Ok(());
        }
        PermitBackend::leave_queue(&self.store, key, owner).await
    }
    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        self.store.holders(key).await
    }
    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        let terms = self.store.terms(key, after).await?;
        if self.bug != Bug::TermsDropped {
            return Ok(terms);
        }
        let all = self.store.terms(key, 0).await?;
        let dropped: Vec<_> = all.iter().skip(1).step_by(2).map(|t| t.fence).collect();
        Ok(terms
            .into_iter()
            .filter(|t| !dropped.contains(&t.fence))
            .collect())
    }
    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.store.watch_permits(key).await
    }
}

#[async_trait]
impl LockBackend for Permits {
    fn name(&self) -> &str {
        "broken-permits"
    }
    fn capabilities(&self) -> &Capabilities {
        self.store.capabilities()
    }
    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.store.try_grant(request).await
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
}

fn target(bug: Bug) -> Target {
    Target::new(std::sync::Arc::new(Permits {
        store: MemoryBackend::new(),
        bug,
    }))
}

#[tokio::test]
async fn a_holder_over_the_limit_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::LimitPlusOne,
        "permits_never_exceed_the_limit_across_clients",
    )
    .await;
}

#[tokio::test]
async fn two_leaders_at_once_are_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::LimitPlusOne,
        "one_leader_at_a_time_across_clients",
    )
    .await;
}

#[tokio::test]
async fn a_writer_taken_for_a_reader_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::CountsIgnored,
        "never_a_reader_with_a_writer",
    )
    .await;
}

#[tokio::test]
async fn a_large_claim_starved_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::PlacesIgnored,
        "a_large_claim_is_not_starved_by_small_ones",
    )
    .await;
}

#[tokio::test]
async fn readers_that_pass_a_waiting_writer_are_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::PlacesIgnored,
        "a_waiting_writer_holds_back_new_readers",
    )
    .await;
}

#[tokio::test]
async fn a_writer_that_gave_up_but_holds_readers_back_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::LeaveIgnored,
        "a_writer_that_gives_up_no_longer_holds_back_readers",
    )
    .await;
}

#[tokio::test]
async fn terms_that_observers_never_see_are_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::TermsDropped,
        "observers_see_every_term_in_order",
    )
    .await;
}
