//! Extend (contract point 5).

use super::support::*;

cases! {
    /// Extending an expired lease fails and does not re-acquire the free key.
    #[case(Extend, always)]
    pub async fn extend_after_expiry_fails_and_does_not_reacquire(t: &Target) -> CaseResult {
        let key = t.key("extend-expired");
        let lease = acquire(t, &key, t.short_ttl()).await?;
        sleep_until(lease.valid_until() + t.expiry_slack()).await;
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "the lease did not expire"
        );
        let outcome = t.backend().extend(&lease, t.renewal_ttl(&lease)).await?;
        ensure!(
            outcome == ExtendOutcome::NotHeld,
            "extending an expired lease answered {outcome:?}"
        );
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "extending an expired lease re-acquired the key"
        );
        Ok(())
    }

    /// Extending after another holder took over fails and leaves that holder untouched.
    #[case(Extend, always)]
    pub async fn extend_after_takeover_fails(t: &Target) -> CaseResult {
        let key = t.key("extend-taken");
        let old = acquire(t, &key, t.short_ttl()).await?;
        let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
        let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        let outcome = t.backend().extend(&old, t.renewal_ttl(&old)).await?;
        ensure!(
            outcome == ExtendOutcome::NotHeld,
            "extending a taken-over lease answered {outcome:?}"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(new.fence().get()),
            "the old holder's extend disturbed the new holder"
        );
        t.backend().release(&key, new.owner()).await?;
        Ok(())
    }

    /// A renewal sent as soon as its grant came back finds the lease, with many grants at once: a replicated server's renewal reads what the grant wrote, never a member behind it.
    #[case(Extend, always)]
    pub async fn a_renewal_right_after_the_grant_finds_it(t: &Target) -> CaseResult {
        let (tasks, rounds) = (16, 24);
        // A step that fails retryably (a server slow under this case's load) leaves its
        // round out: what is judged is the answer of each renewal that got one in time.
        let work = (0..tasks).map(|task| async move {
            let (mut lost, mut answered) = (0, 0);
            for round in 0..rounds {
                // A key of its own each round: a grant whose reply was lost, or a
                // release that failed, leaves its lease behind on no later round's key.
                let key = t.key(&format!("renew-now-{task}-{round}"));
                let lease = match t.backend().try_acquire(&key, t.short_ttl()).await {
                    Ok(AcquireOutcome::Acquired(lease)) => lease,
                    Ok(AcquireOutcome::Held { .. }) => {
                        return fail(format!("{key} was held although nobody should hold it"))
                    }
                    Err(e) if e.is_retryable() => continue,
                    Err(e) => return Err(e.into()),
                };
                let renewal = t.backend().extend(&lease, t.renewal_ttl(&lease)).await;
                // A "not held" is judged only if it came back while the lease was still
                // valid: one later than that may be an honest expiry of a short lease on
                // a loaded machine, and leaves its round out.
                let in_time = Instant::now() < lease.valid_until();
                match renewal {
                    Ok(ExtendOutcome::NotHeld) if in_time => {
                        lost += 1;
                        continue;
                    }
                    Ok(ExtendOutcome::NotHeld) => continue,
                    Ok(ExtendOutcome::Extended(_)) => answered += 1,
                    Err(e) if e.is_retryable() => {}
                    Err(e) => return Err(e.into()),
                }
                match t.backend().release(&key, lease.owner()).await {
                    Err(e) if !e.is_retryable() => return Err(e.into()),
                    _ => {}
                }
            }
            Ok::<_, CaseError>((lost, answered))
        });
        let (mut lost, mut answered) = (0, 0);
        for result in join_all(work).await {
            let (l, a) = result?;
            lost += l;
            answered += a;
        }
        ensure!(
            lost == 0,
            "{lost} of {} renewals sent right after their grant answered not held",
            lost + answered
        );
        ensure!(
            answered * 2 >= tasks * rounds,
            "only {answered} of {} rounds got a grant and a renewal through: too few to judge",
            tasks * rounds
        );
        Ok(())
    }

    /// Extend keeps the fencing token, prolongs the lease, and can be repeated.
    #[case(Extend, always)]
    pub async fn extend_keeps_the_fence(t: &Target) -> CaseResult {
        let key = t.key("extend-fence");
        let granted = t.short_ttl();
        let lease = acquire(t, &key, granted).await?;
        // Where extend takes any TTL, a short lease is extended to a long one; otherwise
        // (capabilities.extend_any_ttl) it is renewed to the TTL it was granted.
        let any_ttl = t.capabilities().extend_any_ttl;
        let ttl = if any_ttl { t.long_ttl() } else { granted };
        let mut earliest_start = f64::INFINITY;
        for _ in 0..4 {
            let sent = Instant::now();
            let ExtendOutcome::Extended(extended) = t.backend().extend(&lease, ttl).await? else {
                return fail("extending a held lease answered not held");
            };
            let call = (Instant::now() - sent).as_secs_f64().max(1e-9);
            ensure!(
                extended.fence() == lease.fence(),
                "extend changed the fence from {} to {}",
                lease.fence(),
                extended.fence()
            );
            ensure!(
                extended.valid_until() > lease.valid_until(),
                "extend did not prolong the lease"
            );
            let start = extended.valid_until().checked_sub(ttl).unwrap_or(sent);
            let position = if start <= sent {
                0.0
            } else {
                (start - sent).as_secs_f64() / call
            };
            earliest_start = earliest_start.min(position);
        }
        ensure!(
            earliest_start <= 0.5,
            "the extended validity starts {:.0}% into the call at the earliest: counted from the reply",
            earliest_start * 100.0
        );
        if !any_ttl {
            // Renew once more near the end of the first TTL, as a renewal loop would.
            let margin = granted / 4;
            sleep_until(lease.valid_until() - margin).await;
            let sent = Instant::now();
            let again = t.backend().extend(&lease, ttl).await?;
            let took = Instant::now() - sent;
            if !matches!(again, ExtendOutcome::Extended(_)) && took >= margin {
                // The renewal may have reached the server after the lease ran out
                // there, where "not held" is the contract's answer: nothing is judged.
                return Err(crate::case::CaseError::Skipped(format!(
                    "the late renewal took {took:?}, not less than its {margin:?} before the lease ran out, and answered {again:?}: a renewal that late may find the lease gone"
                )));
            }
            ensure!(
                matches!(again, ExtendOutcome::Extended(_)),
                "a late renewal answered {again:?} within {took:?} of being sent, {margin:?} before the lease ran out"
            );
        }
        // The server's record must keep the fence too: an extend that mints a new one
        // there hands later readers (and fenced stores) a fence nobody was granted.
        let held = holder_fence(t, &key).await?;
        ensure!(
            held.is_none_or(|f| f == lease.fence().get()),
            "extend changed the key's fence on the server from {} to {}",
            lease.fence(),
            held.unwrap_or_default()
        );
        sleep_until(lease.valid_until() + t.expiry_slack().min(granted / 2)).await;
        let held = holder_fence(t, &key).await?;
        ensure!(
            held.is_some(),
            "the extended lease expired at its first ttl"
        );
        ensure!(
            held == Some(lease.fence().get()),
            "extend changed the key's fence on the server from {} to {}",
            lease.fence(),
            held.unwrap_or_default()
        );
        t.backend().release(&key, lease.owner()).await?;
        Ok(())
    }

    /// Extend and release racing each other never leave the key behind (RedLock.net #64).
    #[case(Extend, always)]
    pub async fn extend_racing_release_leaves_nothing(t: &Target) -> CaseResult {
        for round in 0..10 {
            let key = t.key("extend-release-race");
            let lease = acquire(t, &key, t.long_ttl()).await?;
            let (extended, released) = tokio::join!(
                t.backend().extend(&lease, t.long_ttl()),
                t.backend().release(&key, lease.owner())
            );
            extended?;
            ensure!(
                released? == ReleaseOutcome::Released,
                "round {round}: release of a held lease failed"
            );
            ensure!(
                holder_fence(t, &key).await?.is_none(),
                "round {round}: an extend racing the release left the key held"
            );
        }
        Ok(())
    }

    /// An extend racing its lease's expiry either keeps the lease or leaves the next holder's TTL as it was.
    #[case(Extend, always)]
    pub async fn extend_racing_expiry_never_prolongs_the_next_holder(t: &Target) -> CaseResult {
        let ttl = t.short_ttl();
        for round in 0..3 {
            let key = t.key("extend-race");
            let old = acquire(t, &key, ttl).await?;
            sleep_until(
                old.valid_until()
                    .checked_sub(Duration::from_millis(3))
                    .unwrap_or(old.valid_until()),
            )
            .await;
            let give_up = Instant::now() + ttl * 4 + t.expiry_slack() * 4;
            // Either the extend lands while the lease is held (then the old holder keeps
            // it and lets go), or the next holder takes the key: its lease must then keep
            // the TTL it asked for, whatever the late extend does.
            let extender = async {
                let outcome = t.backend().extend(&old, t.renewal_ttl(&old)).await;
                if matches!(outcome, Ok(ExtendOutcome::Extended(_))) {
                    t.backend().release_lease(&old).await?;
                }
                outcome
            };
            let taker = async {
                loop {
                    if let Some(lease) = try_acquire(t, &key, ttl).await? {
                        return Ok::<_, CaseError>(lease);
                    }
                    if Instant::now() > give_up {
                        return fail(format!("round {round}: {key} never became free"));
                    }
                    sleep(Duration::from_millis(1)).await;
                }
            };
            let (extended, taken) = tokio::join!(extender, taker);
            extended?;
            let new = taken?;
            sleep_until(new.valid_until() + t.expiry_slack()).await;
            ensure!(
                holder_fence(t, &key).await? != Some(new.fence().get()),
                "round {round}: the next holder's lease outlived its ttl: the old holder's extend prolonged it"
            );
        }
        Ok(())
    }
}
