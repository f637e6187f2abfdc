//! Expiry by the server's clock and validity (contract points 2 and 7).

use super::support::*;

cases! {
    /// An abandoned lease frees its key after its TTL, not before and not much later.
    #[case(ServerTime, always)]
    pub async fn expiry_frees_the_key_after_the_ttl_not_before(t: &Target) -> CaseResult {
        let key = t.key("expiry");
        let ttl = t.short_ttl();
        let sent = Instant::now();
        let _abandoned = acquire(t, &key, ttl).await?;
        let granted = Instant::now();
        let give_up = granted + ttl * 4 + t.expiry_slack() * 4;
        let (next, next_sent) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        let freed_by = Instant::now();
        // The server set the expiry no earlier than we sent the request; allow 1% + 2 ms
        // for the clocks' rates and millisecond rounding.
        let earliest = sent + ttl - ttl / 100 - Duration::from_millis(2);
        ensure!(
            freed_by >= earliest,
            "the key was free {:?} before the ttl ran out",
            earliest - freed_by
        );
        let latest = granted + ttl + t.expiry_slack();
        ensure!(
            next_sent <= latest,
            "the key stayed held {:?} past the ttl and slack",
            next_sent - latest
        );
        t.backend().release(&key, next.owner()).await?;
        Ok(())
    }

    /// A lease's validity is counted from before the request, and it is never returned expired.
    #[case(Validity, always)]
    pub async fn lease_validity_counted_from_before_the_request(t: &Target) -> CaseResult {
        // Where in the call the validity starts, as a fraction of the call's duration: a
        // backend counting from before sending starts near 0, one counting from the reply
        // near 1. The earliest of several trials is taken, so that a scheduling hiccup in
        // one trial does not decide.
        let mut earliest_start = f64::INFINITY;
        for (i, ttl) in [t.short_ttl(), t.long_ttl()]
            .into_iter()
            .cycle()
            .take(8)
            .enumerate()
        {
            let key = t.key("validity");
            let sent = Instant::now();
            let lease = acquire(t, &key, ttl).await?;
            let received = Instant::now();
            ensure!(
                lease.valid_until() > received,
                "trial {i}: the lease was returned already expired"
            );
            ensure!(
                lease.valid_until() >= sent + ttl / 2,
                "trial {i}: the lease came with less than half its ttl"
            );
            let call = (received - sent).as_secs_f64().max(1e-9);
            let start = lease.valid_until().checked_sub(ttl).unwrap_or(sent);
            let position = if start <= sent {
                0.0
            } else {
                (start - sent).as_secs_f64() / call
            };
            earliest_start = earliest_start.min(position);
            t.backend().release(&key, lease.owner()).await?;
        }
        ensure!(
            earliest_start <= 0.5,
            "validity starts {:.0}% into the call at the earliest: counted from the reply, not from before the request",
            earliest_start * 100.0
        );
        Ok(())
    }

    /// An acquire retried with the same owner token (its first reply lost) is granted again, and restarts the expiry its validity is counted from (node-redlock #274).
    #[case(Validity, always)]
    pub async fn a_retried_grant_restarts_the_expiry_it_counts_from(t: &Target) -> CaseResult {
        let key = t.key("retried-grant");
        // Long enough that a grant on a loaded ensemble still arrives within it: the
        // case is about the retry's expiry, not the grant's latency.
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(2));
        let owner = OwnerToken::random();
        let backend = t.backend();
        let AcquireOutcome::Acquired(_lost) = backend.try_acquire_as(&key, ttl, owner).await? else {
            return fail("a fresh key was held");
        };
        sleep(ttl / 2).await;
        let retried = match backend.try_acquire_as(&key, ttl, owner).await? {
            AcquireOutcome::Acquired(lease) => lease,
            AcquireOutcome::Held { .. } => {
                backend.release(&key, &owner).await?;
                return fail(
                    "the owner's own retry was refused: the key stays held by nobody working until its ttl",
                );
            }
        };
        outlasts_its_retry(t, &retried, &mut |key, ttl| {
            Box::pin(async move { grant(t.backend(), key, ttl).await })
        })
        .await
    }

    /// A lease with the shortest TTL the backend accepts (doubled, up to 400 ms, while its grant cannot outrun the round trip) expires after that TTL, not after a floor of the server's.
    #[case(ServerTime, always)]
    pub async fn the_shortest_ttl_is_kept(t: &Target) -> CaseResult {
        let key = t.key("shortest-ttl");
        let caps = t.capabilities().clone();
        // The minimum first; doubled while its grant cannot outrun the round trip (a
        // late grant is given back by core as a timeout). A loaded quorum can take over
        // 100 ms to commit, so doubling goes on up to 400 ms: a floor of a second or
        // more is still well past 400 ms and the slack.
        let mut ttl = caps.ttl_at_least(caps.min_ttl);
        let (lease, sent) = loop {
            let sent = Instant::now();
            match t.backend().try_acquire(&key, ttl).await {
                Ok(AcquireOutcome::Acquired(lease)) => break (lease, sent),
                Ok(AcquireOutcome::Held { .. }) => return fail("a fresh key was held"),
                Err(e) if e.kind() == ErrorKind::Timeout && ttl < Duration::from_millis(400) => {
                    ttl = caps.ttl_at_least(ttl * 2);
                }
                Err(e) => return Err(e.into()),
            }
        };
        let give_up = Instant::now() + ttl * 4 + Duration::from_secs(10);
        let (next, next_sent) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        let latest = sent + ttl + t.expiry_slack();
        ensure!(
            next_sent <= latest,
            "a lease of {ttl:?} held its key {:?} past its ttl and slack",
            next_sent - latest
        );
        ensure!(
            t.fence_rose(lease.fence(), next.fence()),
            "the next holder's fence {} is not above {}",
            next.fence(),
            lease.fence()
        );
        t.backend().release_lease(&next).await?;
        Ok(())
    }
}
