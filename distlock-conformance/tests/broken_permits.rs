//! Deliberately broken permits, each with one bug: the cases of semaphores, read-write
//! locks and elections must catch every one, and the same backend without the bug
//! passes them. Each is the memory backend with its permit steps bent one way.

mod support;

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use distlock_conformance::Target;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, Claim, ExtendRequest, Grant, OwnerToken,
    PermitBackend, PermitHolder, ReleaseOutcome, Renewal, Term,
};
use distlock_core::{FencingToken, LockBackend, LockInfo, LockKey, MemoryBackend, Result};

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
    /// Mints a permit's fence as its slot among the holders (1, 2, ...), not from a
    /// counter: a freed slot's fence is handed out again.
    FenceFromSlot,
    /// Counts every holder it ever granted until it is released, expired ones too (a
    /// set of holders never pruned): an expired permit keeps its place.
    ExpiredHoldersCounted,
    /// Keeps the limit of the name's first claim and applies it to every later one,
    /// whatever limit they carry.
    FirstLimitKept,
    /// Proclaims onto the name's current leader, whoever asks (an update by the
    /// name alone, not by the owner's grant).
    ProclaimIgnoresOwner,
}

#[derive(Debug)]
struct Permits {
    store: MemoryBackend,
    bug: Bug,
    /// Per name: the limit of its first claim, and the owners granted and not
    /// released (for `FirstLimitKept` and `ExpiredHoldersCounted`).
    seen: Mutex<HashMap<LockKey, (u32, Vec<OwnerToken>)>>,
}

#[async_trait]
impl PermitBackend for Permits {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        let mut bent = claim.clone();
        let mut place = request.place();
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
            Bug::FirstLimitKept => {
                let first = self.seen().get(request.key()).map(|(limit, _)| *limit);
                if let Some(first) = first {
                    bent = Claim::new(claim.count(), first)?;
                }
            }
            Bug::ExpiredHoldersCounted => {
                let counted = self.seen().get(request.key()).map_or(0, |(_, o)| o.len());
                if counted >= usize::try_from(claim.limit()).unwrap_or(usize::MAX) {
                    return Ok(Grant::Held { remaining: None });
                }
            }
            Bug::None
            | Bug::LeaveIgnored
            | Bug::TermsDropped
            | Bug::FenceFromSlot
            | Bug::ProclaimIgnoresOwner => {}
        }
        let grant = self
            .store
            .try_grant_permits(&request.with_place(place), &bent)
            .await?;
        if let Grant::Granted(_) = grant {
            let mut seen = self.seen();
            let entry = seen
                .entry(request.key().clone())
                .or_insert((claim.limit(), Vec::new()));
            entry.1.push(*request.owner());
        }
        match grant {
            Grant::Granted(_) if self.bug == Bug::FenceFromSlot => {
                let slot = self.store.holders(request.key()).await?.len();
                Ok(Grant::Granted(FencingToken::new(
                    u64::try_from(slot).unwrap_or(u64::MAX),
                )))
            }
            other => Ok(other),
        }
    }
    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        if let Some((_, owners)) = self.seen().get_mut(key) {
            owners.retain(|o| o != owner);
        }
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
    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        if self.bug == Bug::ProclaimIgnoresOwner {
            let owners = self.seen().get(key).map(|(_, o)| o.clone());
            for other in owners.unwrap_or_default().iter().rev() {
                if self.store.proclaim(key, other, value).await? == Renewal::Renewed {
                    return Ok(Renewal::Renewed);
                }
            }
        }
        self.store.proclaim(key, owner, value).await
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

impl Permits {
    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<LockKey, (u32, Vec<OwnerToken>)>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn target(bug: Bug) -> Target {
    Target::new(std::sync::Arc::new(Permits {
        store: MemoryBackend::new(),
        bug,
        seen: Mutex::default(),
    }))
}

#[tokio::test]
async fn fences_from_slots_are_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::FenceFromSlot,
        "permit_fences_increase_with_every_grant",
        "round 2: fence 2 after 2",
    )
    .await;
}

#[tokio::test]
async fn expired_holders_counted_are_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::ExpiredHoldersCounted,
        "an_expired_permit_frees_its_place",
        "the expired permit's place was not freed",
    )
    .await;
}

#[tokio::test]
async fn the_first_limit_kept_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::FirstLimitKept,
        "a_limit_that_differs_is_refused",
        "a claim with a limit of 3 on a name held with 2 gave Ok",
    )
    .await;
}

#[tokio::test]
async fn a_holder_over_the_limit_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::LimitPlusOne,
        "permits_never_exceed_the_limit_across_clients",
        "held permits at once, with a limit of",
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
        "leaders at once",
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
        "a reader with a writer",
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
        "was starved",
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
        "a new reader was granted while a writer waited",
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
        "held back for 8 s by a writer that gave up",
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
        "saw Missed",
    )
    .await;
}

#[tokio::test]
async fn a_proclaim_after_the_term_is_caught() {
    support::assert_caught(
        target,
        Bug::None,
        Bug::ProclaimIgnoresOwner,
        "a_leader_proclaims_within_its_term_only",
        "a proclaim after the term ended answered Ok",
    )
    .await;
}
