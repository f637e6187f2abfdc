//! A backend that holds each lease on a majority of several servers (its members,
//! [`Target::with_members`]): a minority killed, paused beyond the TTL, restarted empty
//! or cut off from the client changes nothing; a minority never grants, and never says
//! a key a majority holds is free; a release a minority confirms is an error; and a member
//! restarted empty does no more harm than the capabilities declare. Each takes the
//! servers alone.
//!
//! On members that replicate each lease among themselves (an etcd cluster, a
//! ZooKeeper ensemble: [`Target::members_replicate`]), the cases about a client that
//! reaches only a minority do not apply, and the others hold as they are written.

use super::support::*;
use crate::target::{LinkControl, MemberLinkedClient, ServerControl};

/// How long a case waits, where it needs every member to hold a lease, for the grants
/// an acquire left under way on the members that did not answer first.
const LATE_GRANTS_LAND: Duration = Duration::from_millis(500);

/// The members and the sizes that matter.
struct Members<'a> {
    all: &'a [Arc<dyn ServerControl>],
    /// How many make a majority.
    quorum: usize,
    /// How many may fail: the rest still make a majority.
    minority: usize,
}

fn members(t: &Target) -> Members<'_> {
    let all = t.members();
    let quorum = all.len() / 2 + 1;
    Members {
        all,
        quorum,
        minority: all.len() - quorum,
    }
}

/// A client whose link to each member can be cut, warmed up.
async fn member_client(t: &Target) -> Result<MemberLinkedClient, CaseError> {
    let (backend, links) = t
        .member_linked_client()
        .await
        .ok_or_else(|| CaseError::Skipped("the target makes no member-linked clients".into()))?
        .map_err(|e| CaseError::Failed(format!("a member-linked client could not be made: {e}")))?;
    ensure!(
        links.len() == t.members().len(),
        "the client has {} member links for {} members",
        links.len(),
        t.members().len()
    );
    backend.inspect(&t.key("warm-up")).await?;
    Ok((backend, links))
}

async fn cut(links: &[Arc<dyn LinkControl>]) -> CaseResult {
    for link in links {
        link.cut()
            .await
            .map_err(|e| CaseError::Failed(format!("a link could not be cut: {e}")))?;
    }
    Ok(())
}

async fn heal(links: &[Arc<dyn LinkControl>]) -> CaseResult {
    for link in links {
        link.heal()
            .await
            .map_err(|e| CaseError::Failed(format!("a link could not heal: {e}")))?;
    }
    Ok(())
}

/// The body's outcome, unless putting the members back failed; the body's failure
/// comes first.
fn after_restore<T>(body: Result<T, CaseError>, restore: CaseResult) -> Result<T, CaseError> {
    let value = body?;
    restore?;
    Ok(value)
}

/// Asks for `key` as one owner until a definite answer. Where the client asks each
/// member itself (Redlock), once: a majority up answers at once. Where the members
/// replicate, again as the same owner while the request fails retryably, for up to a
/// minute: a cluster whose leader is down grants nothing until it has elected
/// another, and a request on the member that failed under it fails with it.
async fn grant_through(
    t: &Target,
    backend: &Arc<DynLockBackend>,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>, CaseError> {
    if !t.replicated_members() {
        return grant(backend, key, ttl).await;
    }
    let owner = OwnerToken::random();
    match retry_until_up("acquire", || backend.try_acquire_as(key, ttl, owner)).await? {
        AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
        AcquireOutcome::Held { .. } => Ok(None),
    }
}

/// Acquires `key`, which nobody should hold, on the target's backend as
/// [`grant_through`] asks: members that replicate may still be electing a leader
/// after the last case's fault, or this case's.
async fn acquire_through(t: &Target, key: &LockKey, ttl: Duration) -> Result<Lease, CaseError> {
    grant_through(t, t.backend(), key, ttl)
        .await?
        .ok_or_else(|| CaseError::Failed(format!("{key} was held although nobody should hold it")))
}

/// Polls `backend` until `key` can be acquired, as [`grant_when_free`] does, each
/// poll as [`grant_through`] asks.
async fn grant_when_free_through(
    t: &Target,
    backend: &Arc<DynLockBackend>,
    key: &LockKey,
    ttl: Duration,
    give_up: Instant,
) -> Result<Lease, CaseError> {
    loop {
        if let Some(lease) = grant_through(t, backend, key, ttl).await? {
            return Ok(lease);
        }
        if Instant::now() > give_up {
            return fail(format!("{key} never became free"));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// `op` once, or, where the members replicate, again while it fails retryably, for up
/// to a minute (as [`grant_through`]; every step is idempotent for its owner).
async fn step_through<T, F, Fut>(t: &Target, what: &str, mut op: F) -> Result<T, CaseError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = distlock_core::Result<T>>,
{
    if t.replicated_members() {
        retry_until_up(what, op).await
    } else {
        Ok(op().await?)
    }
}

/// Holds, extends and releases on `backend` while part of the members is out, and
/// checks that `other` cannot get in meanwhile; the next holder's fence is higher.
async fn still_a_lock(
    t: &Target,
    backend: &Arc<DynLockBackend>,
    other: &Arc<DynLockBackend>,
    what: &str,
) -> Result<Lease, CaseError> {
    let key = t.key("quorum");
    let lease = grant_through(t, backend, &key, t.long_ttl())
        .await
        .map_err(|e| CaseError::Failed(format!("with {what}, acquire failed: {e:?}")))?
        .ok_or_else(|| CaseError::Failed(format!("with {what}, a fresh key was held")))?;
    ensure!(
        grant_through(t, other, &key, t.long_ttl()).await?.is_none(),
        "with {what}, a second client got the key while a majority held it"
    );
    match step_through(t, "extend", || {
        backend.extend(&lease, t.renewal_ttl(&lease))
    })
    .await?
    {
        ExtendOutcome::Extended(_) => {}
        ExtendOutcome::NotHeld => return fail(format!("with {what}, the holder could not extend")),
    }
    ensure!(
        step_through(t, "release", || backend.release_lease(&lease)).await?
            == ReleaseOutcome::Released,
        "with {what}, the release did not answer released"
    );
    let next = grant_through(t, other, &key, t.long_ttl())
        .await?
        .ok_or_else(|| {
            CaseError::Failed(format!("with {what}, the key stayed held after release"))
        })?;
    ensure!(
        t.fence_rose(lease.fence(), next.fence()),
        "with {what}, the next holder's fence {} is not above {}",
        next.fence(),
        lease.fence()
    );
    other.release_lease(&next).await?;
    Ok(lease)
}

cases! {
    /// With a minority of the members killed, the lock still grants, excludes, extends and releases, with rising fences.
    #[case(MutualExclusion, needs_members, fault)]
    pub async fn quorum_a_minority_killed_changes_nothing(t: &Target) -> CaseResult {
        let m = members(t);
        let down = &m.all[..m.minority];
        for member in down {
            member.kill().await.map_err(control_err("kill a member"))?;
        }
        let other = t.backend().clone();
        let body = still_a_lock(t, t.backend(), &other, "a minority killed").await.map(drop);
        let mut restore = Ok(());
        for member in down {
            if let Err(e) = member.start().await {
                restore = fail(format!("a killed member could not start again: {e}"));
            }
        }
        after_restore(body, restore)
    }

    /// With a minority of the members paused beyond the TTL, grants go on and expire on time, and no second holder gets in once they wake.
    #[case(MutualExclusion, needs_members, fault)]
    pub async fn quorum_a_minority_paused_beyond_the_ttl_changes_nothing(t: &Target) -> CaseResult {
        let m = members(t);
        let paused = &m.all[..m.minority];
        for member in paused {
            member.pause().await.map_err(control_err("pause a member"))?;
        }
        let key = t.key("quorum-paused");
        let ttl = fault_ttl(t);
        let during = async {
            let first = match grant_through(t, t.backend(), &key, ttl).await {
                Ok(Some(lease)) => lease,
                Ok(None) => return fail(format!("{key} was held although nobody should hold it")),
                Err(CaseError::Failed(m)) => {
                    return fail(format!("with a minority paused, acquire failed: {m}"))
                }
                Err(skipped) => return Err(skipped),
            };
            sleep_until(first.valid_until()).await;
            let give_up = Instant::now() + ttl * 2 + t.expiry_slack() * 4;
            let second = grant_when_free_through(t, t.backend(), &key, t.long_ttl(), give_up).await?;
            ensure!(
                t.fence_rose(first.fence(), second.fence()),
                "the fence {} after expiry is not above {}",
                second.fence(),
                first.fence()
            );
            Ok(second)
        }
        .await;
        let mut restore = Ok(());
        for member in paused {
            if let Err(e) = member.unpause().await {
                restore = fail(format!("a paused member could not resume: {e}"));
            }
        }
        let second = after_restore(during, restore)?;
        // The woken members held only the first, expired lease.
        ensure!(
            grant_through(t, t.backend(), &key, t.long_ttl()).await?.is_none(),
            "once the paused members woke, a second client got the key from the holder"
        );
        step_through(t, "release", || t.backend().release_lease(&second)).await?;
        Ok(())
    }

    /// A member restarted empty leaves the holder a majority: nobody else gets in, and the holder extends and releases.
    #[case(MutualExclusion, needs_members, fault)]
    pub async fn quorum_a_member_restarted_empty_leaves_the_holder_a_majority(t: &Target) -> CaseResult {
        let m = members(t);
        let key = t.key("quorum-restart");
        let lease = acquire_through(t, &key, t.long_ttl()).await?;
        m.all[0].restart().await.map_err(control_err("restart a member"))?;
        ensure!(
            grant_through(t, t.backend(), &key, t.long_ttl()).await?.is_none(),
            "a second client got the key while the holder kept a majority"
        );
        match retry_until_up("extend", || t.backend().extend(&lease, t.renewal_ttl(&lease))).await? {
            ExtendOutcome::Extended(_) => {}
            ExtendOutcome::NotHeld => return fail("the holder could not extend after the restart"),
        }
        ensure!(
            step_through(t, "release", || t.backend().release_lease(&lease)).await? == ReleaseOutcome::Released,
            "the release did not answer released"
        );
        let next = grant_through(t, t.backend(), &key, t.long_ttl())
            .await?
            .ok_or_else(|| CaseError::Failed(format!("{key} was held after its release")))?;
        ensure!(
            t.fence_rose(lease.fence(), next.fence()),
            "the fence {} after the restart is not above {}",
            next.fence(),
            lease.fence()
        );
        step_through(t, "release", || t.backend().release_lease(&next)).await?;
        Ok(())
    }

    /// A client cut off from a minority of the members still holds, extends and releases, and excludes the others.
    #[case(MutualExclusion, needs_members, fault)]
    pub async fn quorum_a_minority_cut_off_from_the_client_changes_nothing(t: &Target) -> CaseResult {
        let m = members(t);
        let (client, links) = member_client(t).await?;
        cut(&links[..m.minority]).await?;
        let body = still_a_lock(t, &client, t.backend(), "a minority cut off").await.map(drop);
        after_restore(body, heal(&links).await)
    }

    /// A client that reaches only a minority of the members is never granted the lock, nor an extension.
    #[case(MutualExclusion, needs_client_quorum, fault)]
    pub async fn quorum_a_minority_never_grants(t: &Target) -> CaseResult {
        let m = members(t);
        let (client, links) = member_client(t).await?;
        let held_key = t.key("quorum-minority-extend");
        let Some(held) = grant(&client, &held_key, t.long_ttl()).await? else {
            return fail("a fresh key was held");
        };
        cut(&links[..m.quorum]).await?;
        let key = t.key("quorum-minority");
        let attempt = client.try_acquire(&key, t.long_ttl()).await;
        let extension = client.extend(&held, t.renewal_ttl(&held)).await;
        heal(&links).await?;
        match attempt {
            Ok(AcquireOutcome::Acquired(_)) => {
                return fail(format!(
                    "granted with {} of {} members reachable",
                    m.minority,
                    m.all.len()
                ))
            }
            Ok(AcquireOutcome::Held { .. }) => {}
            Err(e) => ensure!(e.is_retryable(), "the refusal is not retryable: {e}"),
        }
        match extension {
            Ok(ExtendOutcome::Extended(_)) => {
                return fail(format!(
                    "extended with {} of {} members reachable",
                    m.minority,
                    m.all.len()
                ))
            }
            Ok(ExtendOutcome::NotHeld) => {}
            Err(e) => ensure!(e.is_retryable(), "the failed extension is not retryable: {e}"),
        }
        // What the attempt took on the minority is given back: the key is free.
        let give_up = Instant::now() + Duration::from_secs(10);
        let (next, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        t.backend().release_lease(&next).await?;
        retry_until_up("release", || client.release_lease(&held)).await?;
        Ok(())
    }

    /// A client that reaches only a minority of the members, none of which has the grant, never inspects a held key as free: a member that did not answer may hold it, as a majority does here.
    #[case(Operator, needs_client_quorum, fault)]
    pub async fn quorum_an_inspect_a_minority_answers_never_says_free(t: &Target) -> CaseResult {
        let m = members(t);
        let key = t.key("quorum-minority-inspect");
        // The lease is taken with the minority the client will reach killed: only the
        // majority the client will not reach has it.
        let away = &m.all[m.quorum..];
        for member in away {
            member.kill().await.map_err(control_err("kill a member"))?;
        }
        let lease = acquire(t, &key, t.long_ttl()).await;
        let mut restore = Ok(());
        for member in away {
            if let Err(e) = member.start().await {
                restore = fail(format!("a killed member could not start again: {e}"));
            }
        }
        let lease = after_restore(lease, restore)?;
        // A client made now reaches the started members.
        let body = async {
            let (client, links) = member_client(t).await?;
            cut(&links[..m.quorum]).await?;
            let inspected = client.inspect(&key).await;
            heal(&links).await?;
            match inspected {
                Ok(None) => fail(format!(
                    "with {} of {} members reachable, none of them with the grant, inspect said the key was free while a majority held it",
                    m.minority,
                    m.all.len()
                )),
                Ok(Some(info)) => {
                    ensure!(
                        info.fence == lease.fence(),
                        "inspect showed the fence {}, not the holder's {}",
                        info.fence,
                        lease.fence()
                    );
                    Ok(())
                }
                Err(e) => {
                    ensure!(e.is_retryable(), "the failed inspect is not retryable: {e}");
                    Ok(())
                }
            }
        }
        .await;
        let released = t.backend().release_lease(&lease).await.map(drop).map_err(CaseError::from);
        after_restore(body, released)
    }

    /// A release that only a minority of the members can confirm is a retryable error, neither "released" nor "not held" (go-redsync #81): the members that did not answer may have let the lease run out and granted it to another majority. A majority still holds the lease meanwhile, and the release repeated once the members answer frees the key.
    #[case(Release, needs_client_quorum, fault)]
    pub async fn quorum_a_release_a_minority_confirms_is_an_error(t: &Target) -> CaseResult {
        let m = members(t);
        let (client, links) = member_client(t).await?;
        let key = t.key("quorum-minority-release");
        let Some(lease) = grant(&client, &key, t.long_ttl()).await? else {
            return fail("a fresh key was held");
        };
        // An acquire may return once a majority granted (Redlock does), its grants on
        // the other members landing just after. The case is about a lease every member
        // holds: it lets those land before it cuts, or the members it leaves in reach
        // could be the majority that granted, and the key free once they release it.
        sleep(LATE_GRANTS_LAND).await;
        cut(&links[..m.quorum]).await?;
        let released = client.release_lease(&lease).await;
        // Another client reaches every member: the majority the release did not reach
        // still holds the lease.
        let other = match released {
            Err(_) => try_acquire(t, &key, t.long_ttl()).await,
            Ok(_) => Ok(None),
        };
        heal(&links).await?;
        match released {
            Ok(outcome) => {
                return fail(format!(
                    "with {} of {} members reachable, the release answered {outcome:?}",
                    m.minority,
                    m.all.len()
                ))
            }
            Err(e) => ensure!(e.is_retryable(), "the unconfirmed release is not retryable: {e}"),
        }
        if let Some(next) = other? {
            t.backend().release_lease(&next).await?;
            return fail("after a release a minority confirmed, another client got the key while a majority held it");
        }
        // Repeated once the members answer: released, or not held where the first
        // release's requests, held up by the cut, reached them first. Either way the
        // key is free.
        retry_until_up("release", || client.release_lease(&lease)).await?;
        let give_up = Instant::now() + Duration::from_secs(10);
        let (next, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        ensure!(
            t.fence_rose(lease.fence(), next.fence()),
            "the next holder's fence {} is not above {}",
            next.fence(),
            lease.fence()
        );
        t.backend().release_lease(&next).await?;
        Ok(())
    }

    /// Fences strictly increase across grants on different majorities: each grant made with another minority of the members cut off from the client, then killed.
    #[case(Fencing, needs_members, fault)]
    pub async fn quorum_fences_increase_across_different_majorities(t: &Target) -> CaseResult {
        let m = members(t);
        let n = m.all.len();
        let (client, links) = member_client(t).await?;
        let key = t.key("quorum-majorities");
        let mut last: Option<Lease> = None;
        // Each round leaves out the next minority, so that every two rounds'
        // majorities differ but overlap, as any two majorities do. A member cut off
        // keeps its data and hears of the grant late; a killed one loses its data.
        for round in 0..2 * n {
            let out: Vec<usize> = (0..m.minority).map(|i| (round + i) % n).collect();
            let by_kill = round >= n;
            let backend = if by_kill { t.backend() } else { &client };
            for &i in &out {
                if by_kill {
                    m.all[i].kill().await.map_err(control_err("kill a member"))?;
                } else {
                    cut(&links[i..=i]).await?;
                }
            }
            // The member that came back last round may fail a first request; it is
            // sent again as the same owner, which a grant whose reply was lost
            // already is.
            let owner = OwnerToken::random();
            let granted = match retry_until_up("acquire", || backend.try_acquire_as(&key, t.long_ttl(), owner)).await {
                Ok(AcquireOutcome::Acquired(lease)) => Ok(lease),
                // Members that replicate are one store: a request the last round's
                // cut held up can reach it after its caller gave up, and take the key
                // for a TTL under an owner nobody has. Nobody holds it; it runs out.
                Ok(AcquireOutcome::Held { .. }) if t.replicated_members() => {
                    let give_up = Instant::now() + t.long_ttl() * 2 + t.expiry_slack() * 4;
                    grant_when_free_through(t, backend, &key, t.long_ttl(), give_up).await
                }
                Ok(AcquireOutcome::Held { .. }) => fail(format!("round {round}: the key was held")),
                Err(e) => Err(e),
            };
            let released = match &granted {
                Ok(lease) => step_through(t, "release", || backend.release_lease(lease)).await.map(drop),
                Err(_) => Ok(()),
            };
            let mut restore = Ok(());
            for &i in &out {
                let back = if by_kill {
                    m.all[i].start().await.map_err(|e| e.to_string())
                } else {
                    links[i].heal().await.map_err(|e| e.to_string())
                };
                if let Err(e) = back {
                    restore = fail(format!("member {i} could not come back: {e}"));
                }
            }
            let lease = after_restore(granted, restore)?;
            released?;
            if let Some(previous) = &last {
                ensure!(
                    lease.fence() > previous.fence(),
                    "round {round}: the fence {} is not above the previous round's {}",
                    lease.fence(),
                    previous.fence()
                );
            }
            last = Some(lease);
        }
        Ok(())
    }

    /// A member restarted empty can let a second majority form, as Redlock's critics showed: only where the capabilities say leases do not survive a restart, and the second holder's fence is still higher.
    #[case(Fencing, needs_members, fault)]
    pub async fn quorum_a_member_restarted_empty_does_what_the_capabilities_declare(t: &Target) -> CaseResult {
        let m = members(t);
        let caps = t.capabilities().clone();
        // The holder gets exactly a majority: the other members are down meanwhile,
        // and come back empty.
        let outside = &m.all[m.quorum..];
        for member in outside {
            member.kill().await.map_err(control_err("kill a member"))?;
        }
        let key = t.key("quorum-kleppmann");
        let first = acquire_through(t, &key, t.long_ttl()).await;
        let mut restore = Ok(());
        for member in outside {
            if let Err(e) = member.start().await {
                restore = fail(format!("a killed member could not start again: {e}"));
            }
        }
        let first = after_restore(first, restore)?;
        m.all[0].restart().await.map_err(control_err("restart a member"))?;
        let second = retry_until_up("acquire", || t.backend().try_acquire(&key, t.long_ttl())).await?;
        let result = match &second {
            AcquireOutcome::Held { .. } => Ok(()),
            AcquireOutcome::Acquired(lease) => {
                if caps.leases_survive_restart {
                    fail("a second holder got in, although the capabilities declare that leases survive a restart")
                } else if caps.fence_durability != FenceDurability::BestEffort
                    && lease.fence() <= first.fence()
                {
                    fail(format!(
                        "the second holder's fence {} is not above the first's {}, although the capabilities declare {:?} fences",
                        lease.fence(),
                        first.fence(),
                        caps.fence_durability
                    ))
                } else {
                    Ok(())
                }
            }
        };
        if let AcquireOutcome::Acquired(lease) = second {
            let _ = t.backend().release_lease(&lease).await;
        }
        let _ = t.backend().release_lease(&first).await;
        result
    }
}
