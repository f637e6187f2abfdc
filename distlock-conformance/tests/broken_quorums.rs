//! Deliberately broken quorum backends (a lease held on a majority of several
//! servers, as Redlock does), each with one bug: the suite must catch every one with
//! the case named for it, and the same backend without the bug passes those cases and
//! the other quorum cases. The members are in-process memory servers, each with its
//! faults and a link per client that can be cut.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{
    run_case, LinkControl, MemberLinkedClient, MemoryControl, MemoryLink, Outcome, ServerControl,
    Target,
};
use distlock_core::backend::{
    AcquireRequest, Capabilities, ExtendRequest, FenceDurability, Grant, OwnerToken,
    ReleaseOutcome, Renewal,
};
use distlock_core::{
    BoxError, DynLockBackend, Error, ErrorKind, FencingToken, LockBackend, LockInfo, LockKey,
    MemoryBackend, Result,
};
use futures_util::future::{join_all, BoxFuture};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    /// Counts one member's grant as enough: a minority grants.
    MinorityGrant,
    /// Takes the largest of the fences the granting members minted, each on its own:
    /// two grants on different majorities can get the same fence.
    FenceMaxOfMembers,
    /// Answers a retried acquire (same owner token) from the grant it remembers, so
    /// the lease's validity counts from the retry while the members' leases expire a
    /// TTL after the first attempt (node-redlock #274: expiry from the wrong attempt).
    ValidityFromRetry,
    /// Counts a grant only when every member granted: one member away, and nobody
    /// gets the lock.
    EveryMemberNeeded,
    /// Takes one member's "not held" for the lease's loss: a member restarted empty
    /// ends the lease, though a majority still holds it.
    AnyNotHeldEndsTheLease,
    /// Declares that leases survive a restart, though its members keep them in memory.
    LeasesSurviveRestartClaimed,
    /// Answers "released" once any member released the lease, though the others did
    /// not answer: they may have let it run out and granted it to another majority.
    ReleasedByAnyMember,
    /// Inspects a key as free unless a majority of the members answered that it is
    /// held: members that did not answer count as free, though a majority of them may
    /// hold it.
    FreeUnlessAMajorityAnswersHeld,
}

/// What all clients of one quorum share: its members' stores, and the fence counter
/// and grants' fences (a stand-in for a fence the members agree on; the bugs here are
/// about majorities and validity, not about fences).
#[derive(Debug, Clone)]
struct Servers {
    stores: Vec<MemoryBackend>,
    fences: Arc<AtomicU64>,
    granted: Arc<Mutex<HashMap<LockKey, FencingToken>>>,
}

impl Servers {
    fn new(size: usize) -> Self {
        Servers {
            stores: (0..size).map(|_| MemoryBackend::new()).collect(),
            fences: Arc::new(AtomicU64::new(0)),
            granted: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// A new client: a quorum backend over links of its own to each member.
    fn client(&self, bug: Bug) -> (Arc<Quorum>, Vec<Arc<MemoryLink>>) {
        let links: Vec<Arc<MemoryLink>> = self
            .stores
            .iter()
            .map(|s| Arc::new(MemoryLink::new(s.clone())))
            .collect();
        let mut capabilities = Capabilities::default();
        capabilities.fence_durability = FenceDurability::Durable;
        capabilities.leases_survive_restart = bug == Bug::LeasesSurviveRestartClaimed;
        let quorum = Quorum {
            bug,
            servers: self.clone(),
            members: links.clone(),
            remembered: Mutex::new(HashMap::new()),
            capabilities,
        };
        (Arc::new(quorum), links)
    }
}

#[derive(Debug)]
struct Quorum {
    bug: Bug,
    servers: Servers,
    members: Vec<Arc<MemoryLink>>,
    remembered: Mutex<HashMap<OwnerToken, FencingToken>>,
    capabilities: Capabilities,
}

/// How long one member is waited for.
const MEMBER_TIMEOUT: Duration = Duration::from_millis(200);

impl Quorum {
    fn needed(&self) -> usize {
        match self.bug {
            Bug::MinorityGrant => 1,
            Bug::EveryMemberNeeded => self.members.len(),
            _ => self.members.len() / 2 + 1,
        }
    }

    /// Every member's answer, each waited for up to [`MEMBER_TIMEOUT`].
    async fn each<T>(
        &self,
        calls: impl IntoIterator<Item = impl std::future::Future<Output = Result<T>>>,
    ) -> Vec<Result<T>> {
        join_all(calls.into_iter().map(|call| async move {
            tokio::time::timeout(MEMBER_TIMEOUT, call)
                .await
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Timeout, "member timed out")))
        }))
        .await
    }

    fn granted(&self) -> std::sync::MutexGuard<'_, HashMap<LockKey, FencingToken>> {
        self.servers
            .granted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl LockBackend for Quorum {
    fn name(&self) -> &str {
        "quorum"
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn try_grant(&self, r: &AcquireRequest) -> Result<Grant> {
        if self.bug == Bug::ValidityFromRetry {
            let remembered = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(fence) = remembered.get(r.owner()) {
                return Ok(Grant::Granted(*fence));
            }
        }
        let replies = self.each(self.members.iter().map(|m| m.try_grant(r))).await;
        let granted = replies
            .iter()
            .filter(|g| matches!(g, Ok(Grant::Granted(_))))
            .count();
        if granted >= self.needed() {
            let fence = if self.bug == Bug::FenceMaxOfMembers {
                replies
                    .iter()
                    .filter_map(|g| match g {
                        Ok(Grant::Granted(f)) => Some(*f),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(FencingToken::new(0))
            } else {
                FencingToken::new(self.servers.fences.fetch_add(1, Ordering::SeqCst) + 1)
            };
            self.granted().insert(r.key().clone(), fence);
            self.remembered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(*r.owner(), fence);
            return Ok(Grant::Granted(fence));
        }
        let _ = self.release(r.key(), r.owner()).await;
        if replies.iter().any(|g| matches!(g, Ok(Grant::Held { .. }))) {
            Ok(Grant::Held { remaining: None })
        } else {
            Err(Error::new(ErrorKind::Unavailable, "no majority answered"))
        }
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let replies = self
            .each(self.members.iter().map(|m| m.release(key, owner)))
            .await;
        let released = replies
            .iter()
            .filter(|r| matches!(r, Ok(ReleaseOutcome::Released)))
            .count();
        let not_held = replies
            .iter()
            .filter(|r| matches!(r, Ok(ReleaseOutcome::NotHeld)))
            .count();
        // Held while a majority holds it: released once a majority released it.
        let confirmed = match self.bug {
            Bug::ReleasedByAnyMember => 1,
            _ => self.members.len() / 2 + 1,
        };
        if released >= confirmed {
            Ok(ReleaseOutcome::Released)
        } else if not_held > self.members.len() - (self.members.len() / 2 + 1) {
            Ok(ReleaseOutcome::NotHeld)
        } else {
            Err(Error::new(ErrorKind::Unavailable, "no majority answered"))
        }
    }

    async fn renew(&self, r: &ExtendRequest) -> Result<Renewal> {
        let replies = self.each(self.members.iter().map(|m| m.renew(r))).await;
        let renewed = replies
            .iter()
            .filter(|r| matches!(r, Ok(Renewal::Renewed)))
            .count();
        let not_held = replies
            .iter()
            .filter(|r| matches!(r, Ok(Renewal::NotHeld)))
            .count();
        if self.bug == Bug::AnyNotHeldEndsTheLease && not_held > 0 {
            Ok(Renewal::NotHeld)
        } else if renewed >= self.needed() {
            Ok(Renewal::Renewed)
        } else if not_held > self.members.len() - (self.members.len() / 2 + 1) {
            Ok(Renewal::NotHeld)
        } else {
            Err(Error::new(ErrorKind::Unavailable, "no majority renewed"))
        }
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let replies = self.each(self.members.iter().map(|m| m.inspect(key))).await;
        let mut held: Vec<Duration> = replies
            .iter()
            .filter_map(|r| r.as_ref().ok().and_then(|i| i.as_ref()))
            .map(|i| i.remaining)
            .collect();
        if held.len() < self.needed() {
            // Free only where the members that did not answer could not make a
            // majority with those that say held.
            let silent = replies.iter().filter(|r| r.is_err()).count();
            if self.bug != Bug::FreeUnlessAMajorityAnswersHeld
                && held.len() + silent >= self.needed()
            {
                return Err(Error::new(ErrorKind::Unavailable, "no majority answered"));
            }
            return Ok(None);
        }
        held.sort_by(|a, b| b.cmp(a));
        let fence = self.granted().get(key).copied();
        Ok(fence.map(|fence| LockInfo::new(fence, held[self.needed() - 1])))
    }
}

/// Every member at once, as the suite's one server.
#[derive(Debug)]
struct Every(Vec<MemoryControl>);

#[async_trait]
impl ServerControl for Every {
    async fn pause(&self) -> std::result::Result<(), BoxError> {
        self.0.iter().for_each(|m| m.0.pause());
        Ok(())
    }
    async fn unpause(&self) -> std::result::Result<(), BoxError> {
        self.0.iter().for_each(|m| m.0.resume());
        Ok(())
    }
    async fn restart(&self) -> std::result::Result<(), BoxError> {
        self.0.iter().for_each(|m| m.0.restart());
        Ok(())
    }
    async fn kill(&self) -> std::result::Result<(), BoxError> {
        self.0.iter().for_each(|m| m.0.stop());
        Ok(())
    }
    async fn start(&self) -> std::result::Result<(), BoxError> {
        self.0.iter().for_each(|m| m.0.start());
        Ok(())
    }
}

fn target(bug: Bug) -> Target {
    let servers = Servers::new(3);
    let (backend, _) = servers.client(bug);
    let controls: Vec<MemoryControl> = servers.stores.iter().cloned().map(MemoryControl).collect();
    let members: Vec<Arc<dyn ServerControl>> = controls
        .iter()
        .cloned()
        .map(|c| {
            let control: Arc<dyn ServerControl> = Arc::new(c);
            control
        })
        .collect();
    let for_clients = servers.clone();
    Target::new(backend)
        .with_control(Arc::new(Every(controls)))
        .with_clients(move || -> BoxFuture<'static, Result<Arc<DynLockBackend>>> {
            let (client, _) = for_clients.client(bug);
            let client: Arc<DynLockBackend> = client;
            Box::pin(async move { Ok(client) })
        })
        .with_members(
            members,
            move || -> BoxFuture<'static, std::result::Result<MemberLinkedClient, BoxError>> {
                let (client, links) = servers.client(bug);
                let client: Arc<DynLockBackend> = client;
                let links: Vec<Arc<dyn LinkControl>> = links
                    .into_iter()
                    .map(|l| {
                        let link: Arc<dyn LinkControl> = l;
                        link
                    })
                    .collect();
                Box::pin(async move { Ok((client, links)) })
            },
        )
}

async fn assert_caught(bug: Bug, case_name: &str, expected: &str) {
    support::assert_caught(target, Bug::None, bug, case_name, expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_grant_is_caught() {
    assert_caught(
        Bug::MinorityGrant,
        "quorum_a_minority_never_grants",
        "members reachable",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_of_members_taken_as_they_are_are_caught() {
    assert_caught(
        Bug::FenceMaxOfMembers,
        "quorum_fences_increase_across_different_majorities",
        "is not above the previous round's",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_counted_from_a_retry_is_caught() {
    assert_caught(
        Bug::ValidityFromRetry,
        "a_retried_grant_restarts_the_expiry_it_counts_from",
        "the retry did not restart the expiry",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_needed_is_caught_with_a_member_killed() {
    assert_caught(
        Bug::EveryMemberNeeded,
        "quorum_a_minority_killed_changes_nothing",
        "with a minority killed, acquire failed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_needed_is_caught_with_a_member_paused() {
    assert_caught(
        Bug::EveryMemberNeeded,
        "quorum_a_minority_paused_beyond_the_ttl_changes_nothing",
        "with a minority paused, acquire failed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_needed_is_caught_with_a_member_cut_off() {
    assert_caught(
        Bug::EveryMemberNeeded,
        "quorum_a_minority_cut_off_from_the_client_changes_nothing",
        "with a minority cut off, acquire failed",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_not_held_ending_the_lease_is_caught() {
    assert_caught(
        Bug::AnyNotHeldEndsTheLease,
        "quorum_a_member_restarted_empty_leaves_the_holder_a_majority",
        "the holder could not extend after the restart",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_claimed_to_survive_a_restart_are_caught() {
    assert_caught(
        Bug::LeasesSurviveRestartClaimed,
        "quorum_a_member_restarted_empty_does_what_the_capabilities_declare",
        "although the capabilities declare that leases survive a restart",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_one_member_confirms_is_caught() {
    assert_caught(
        Bug::ReleasedByAnyMember,
        "quorum_a_release_a_minority_confirms_is_an_error",
        "members reachable, the release answered Released",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_unless_a_majority_answers_held_is_caught() {
    assert_caught(
        Bug::FreeUnlessAMajorityAnswersHeld,
        "quorum_an_inspect_a_minority_answers_never_says_free",
        "inspect said the key was free while a majority held it",
    )
    .await;
}

/// The bug-free quorum passes every quorum case: they are not tuned to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bug_free_quorum_passes_the_quorum_cases() {
    let target = target(Bug::None);
    let mut ran = 0;
    for case in distlock_conformance::cases().filter(|c| c.name().starts_with("quorum_")) {
        let report = run_case(&target, case).await;
        assert_eq!(report.outcome, Outcome::Passed, "{}", case.name());
        ran += 1;
    }
    assert_eq!(ran, 9, "the quorum cases");
}
