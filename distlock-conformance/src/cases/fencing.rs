//! Fencing (contract point 6).

use distlock_core::LockClient;

use super::support::*;

cases! {
    /// Fences strictly increase across release and re-acquire on one key.
    #[case(Fencing, always)]
    pub async fn fencing_increases_across_release_and_reacquire(t: &Target) -> CaseResult {
        let key = t.key("fence-cycle");
        let mut last = None;
        for _ in 0..20 {
            let lease = acquire(t, &key, t.long_ttl()).await?;
            if let Some(prev) = last {
                ensure!(
                    lease.fence() > prev,
                    "fence {} followed {prev}",
                    lease.fence()
                );
            }
            last = Some(lease.fence());
            t.backend().release(&key, lease.owner()).await?;
        }
        Ok(())
    }

    /// A takeover after expiry gets a larger fence than the expired holder had.
    #[case(Fencing, always)]
    pub async fn fencing_increases_across_takeover(t: &Target) -> CaseResult {
        let key = t.key("fence-takeover");
        let old = acquire(t, &key, t.short_ttl()).await?;
        let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
        let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        ensure!(
            new.fence() > old.fence(),
            "the takeover got fence {} after {}",
            new.fence(),
            old.fence()
        );
        t.backend().release(&key, new.owner()).await?;
        Ok(())
    }

    /// Over many interleaved keys, each key's fences strictly increase.
    #[case(Fencing, always)]
    pub async fn fencing_increases_over_many_keys(t: &Target) -> CaseResult {
        let keys: Vec<LockKey> = (0..10).map(|_| t.key("fence-many")).collect();
        let mut last = vec![None; keys.len()];
        for round in 0..4 {
            for (i, key) in keys.iter().enumerate() {
                let lease = acquire(t, key, t.long_ttl()).await?;
                if let Some(prev) = last[i] {
                    ensure!(
                        lease.fence() > prev,
                        "round {round}: key {i} got fence {} after {prev}",
                        lease.fence()
                    );
                }
                last[i] = Some(lease.fence());
                t.backend().release(key, lease.owner()).await?;
            }
        }
        Ok(())
    }

    /// A forced release keeps the key's fence history: the next grant's fence is larger.
    #[case(Fencing, needs_force_release)]
    pub async fn fences_increase_across_a_forced_release(t: &Target) -> CaseResult {
        let key = t.key("fence-forced");
        let mut last = None;
        for round in 0..3 {
            let lease = acquire(t, &key, t.long_ttl()).await?;
            if let Some(prev) = last {
                ensure!(
                    lease.fence() > prev,
                    "round {round}: fence {} after a forced release of fence {prev}",
                    lease.fence()
                );
            }
            last = Some(lease.fence());
            ensure!(
                operator_of(t.backend())?.force_release(&key).await?,
                "round {round}: forcing the release of a held key answered that nobody held it"
            );
        }
        Ok(())
    }

    /// A sequencer check (`LockClient::check`, for a resource that receives a holder's key and fence) admits the live holder's fence only: not a fence above it, nor the fence of a lease that expired, was replaced by a later grant, or was released.
    #[case(Fencing, always)]
    pub async fn a_sequencer_check_admits_the_live_holders_fence_only(t: &Target) -> CaseResult {
        let key = t.key("sequencer");
        let client = LockClient::new(t.backend().clone());
        // Long enough that the checks of the live lease are answered within it on a
        // loaded quorum, short enough to wait out.
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(2));
        let first = acquire(t, &key, ttl).await?;
        let live = client.check(key.as_str(), first.fence()).await?;
        ensure!(
            live.fence == first.fence(),
            "the check of the live holder's fence {} answered fence {}",
            first.fence(),
            live.fence
        );
        let above = FencingToken::new(first.fence().get() + 1);
        stale(&client, &key, above, "a fence above the live holder's").await?;
        sleep(first.valid_until().saturating_duration_since(Instant::now()) + t.expiry_slack())
            .await;
        stale(&client, &key, first.fence(), "the fence of a lease that expired").await?;
        let second = acquire(t, &key, t.long_ttl()).await?;
        stale(&client, &key, first.fence(), "the fence of a lease a later grant replaced")
            .await?;
        ensure!(
            client.check(key.as_str(), second.fence()).await?.fence == second.fence(),
            "the check of the next holder's fence {} did not admit it",
            second.fence()
        );
        t.backend().release_lease(&second).await?;
        stale(&client, &key, second.fence(), "the fence of a lease that was released").await
    }

    /// A sequencer check whose reply is held on the link until after the lease it shows has run out does not admit the fence: the lease is counted from before the request, as a grant's validity is, so a paused or slow answer never vouches for a holder another may have replaced.
    #[case(Fencing, needs_reply_holding_links)]
    pub async fn a_sequencer_check_answered_after_the_lease_ran_out_is_stale(t: &Target) -> CaseResult {
        let key = t.key("sequencer-late");
        let (linked, link) = linked(t).await?;
        let client = LockClient::new(linked.clone());
        // The shortest lease from 300 ms up: its reply is held past its end, and not as
        // long as a backend's own response time-out (5 s by default).
        let ttl = t.capabilities().ttl_at_least(Duration::from_millis(300));
        let lease = acquire(t, &key, ttl).await?;
        link.hold_replies().await.map_err(link_err("hold replies"))?;
        let held_until = lease.valid_until() + t.expiry_slack();
        let checking = async {
            let checked = client.check(key.as_str(), lease.fence()).await;
            (checked, Instant::now())
        };
        let ((checked, answered), healed) = tokio::join!(checking, async {
            sleep_until(held_until).await;
            link.heal().await
        });
        healed.map_err(link_err("heal"))?;
        match checked {
            Ok(info) => fail(format!(
                "a check whose reply was held until {:?} after its lease of {ttl:?} ran out admitted fence {} with {:?} left",
                t.expiry_slack(),
                info.fence,
                info.remaining
            )),
            Err(e) if e.kind() == ErrorKind::StaleFence => Ok(()),
            Err(e) if answered < held_until => Err(CaseError::Skipped(format!(
                "the backend gave up on the held reply before the lease ran out, so no answer arrived late ({e})"
            ))),
            Err(e) => Err(e.into()),
        }
    }
}

/// That a sequencer check of `fence` on `key` answers a stale fence; `what` says whose
/// fence it is.
async fn stale(
    client: &LockClient,
    key: &LockKey,
    fence: FencingToken,
    what: &str,
) -> Result<(), CaseError> {
    match client.check(key.as_str(), fence).await {
        Ok(info) => fail(format!(
            "a sequencer check admitted {what} ({fence}); the key's holder showed fence {}",
            info.fence
        )),
        Err(e) if e.kind() == ErrorKind::StaleFence => Ok(()),
        Err(e) => Err(e.into()),
    }
}
