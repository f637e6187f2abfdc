//! One client cut off from its server, or slowed, while the others still reach it:
//! the scenario fencing tokens exist for.

use super::support::*;

cases! {
    /// `lock()` and `lock_all()` over a black-holed link return Timeout within their wait (and a small bound), on a fresh client and on one with a watch open while another waiter sets one up.
    #[case(Client, needs_links)]
    pub async fn lock_over_a_cut_link_ends_at_its_deadline(t: &Target) -> CaseResult {
        let (linked_watching, link) = linked(t).await?;
        let (linked_fresh, fresh_link) = linked(t).await?;
        let held_key = t.key("deadline-held");
        let held = acquire(t, &held_key, t.long_ttl()).await?;
        let (watching, waiter) = with_a_watch_open(t, &linked_watching, &held_key).await?;
        let fresh = LockClient::with_options(linked_fresh, LockOptions::new(fault_ttl(t)))?;
        link.cut().await.map_err(link_err("cut"))?;
        fresh_link.cut().await.map_err(link_err("cut"))?;
        let setting_up = {
            let (client, key) = (watching.clone(), t.key("deadline-setting-up"));
            tokio::spawn(async move {
                let _ = client.lock(key.as_str(), Duration::from_secs(120)).await;
            })
        };
        sleep(Duration::from_millis(50)).await;
        let wrong = waits_end_at_their_deadline(
            t,
            &[("a client with a watch open", &watching), ("a fresh client", &fresh)],
        )
        .await;
        waiter.abort();
        setting_up.abort();
        link.heal().await.map_err(link_err("heal"))?;
        fresh_link.heal().await.map_err(link_err("heal"))?;
        t.backend().release_lease(&held).await?;
        ensure!(wrong.is_empty(), "{}", wrong.join("; "));
        Ok(())
    }

    /// An acquire dropped while its grant is in flight (applied on the server, its reply held on the link) leaves nothing held once the link heals, long before the lease's TTL.
    #[case(Client, needs_reply_holding_links)]
    pub async fn an_acquire_dropped_with_its_grant_in_flight_leaves_nothing(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        // Warmed up by a whole grant, so that the acquire below is its one request (a
        // script the server has yet to load would take a round trip more).
        if let Some(warm) = grant(&linked, &t.key("warm-up"), t.long_ttl()).await? {
            linked.release_lease(&warm).await?;
        }
        let key = t.key("dropped-in-flight");
        let client = LockClient::with_options(linked, LockOptions::new(t.long_ttl()))?;
        link.hold_replies().await.map_err(link_err("hold replies"))?;
        // A try: no watch to set up first, whose own reply the link would hold. It is
        // dropped once the server shows the grant applied (polled beside it, not
        // after a fixed time, which a loaded machine can outlast), or after 500 ms
        // where the acquire takes several round trips (its first reply is held, so the
        // grant is never applied). A try that ends on its own is judged below.
        let several = t.capabilities().round_trips.acquire > 1;
        // Boxed, so that dropping it below drops the attempt itself.
        let mut attempt = Box::pin(client.try_lock(key.as_str()));
        let applied = async {
            if several {
                sleep(Duration::from_millis(500)).await;
                return Ok(false);
            }
            let give_up = Instant::now() + Duration::from_secs(20);
            while Instant::now() < give_up {
                if holder_fence(t, &key).await?.is_some() {
                    return Ok(true);
                }
                sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, CaseError>(false)
        };
        let dropped = tokio::select! {
            got = &mut attempt => Ok(got),
            applied = applied => Err(applied?),
        };
        drop(attempt);
        let granted_on_server = match dropped {
            Err(applied) => applied,
            Ok(_) => holder_fence(t, &key).await?.is_some(),
        };
        link.heal().await.map_err(link_err("heal"))?;
        match dropped {
            // Dropped at the case's time-out, or given up by the backend's own
            // time-out with a retryable error (its outcome unknown): either way the
            // client must clean up what the server applied.
            Err(_) => {}
            Ok(Err(e)) if e.is_retryable() => {}
            Ok(got) => {
                return fail(format!(
                    "try_lock() answered through a link that held the replies: {:?}",
                    got.map(|g| g.map(|g| g.fence()))
                ));
            }
        }
        // An acquire of several round trips (etcd's lease, then its transaction) had
        // its first reply held: nothing but that step was applied, and the key must
        // be free as it is. One of a single round trip was applied whole.
        ensure!(
            granted_on_server || t.capabilities().round_trips.acquire > 1,
            "the server had not applied the grant while its reply was held: the case proves nothing"
        );
        // Given up on with its grant applied: the background cleanup releases it once
        // the link carries it (the lease itself lasts a minute).
        let give_up = Instant::now() + Duration::from_secs(10);
        let (next, _) = acquire_when_free(t, &key, t.long_ttl(), give_up)
            .await
            .map_err(|_| {
                CaseError::Failed(
                    "the grant of the dropped acquire was still held 10 s after the link healed".into(),
                )
            })?;
        t.backend().release_lease(&next).await?;
        Ok(())
    }

    /// A grant whose reply was lost (held on the link after the server applied the request), retried by its owner, is granted again and restarts its expiry on the server.
    #[case(Validity, needs_reply_holding_links)]
    pub async fn a_grant_whose_reply_was_lost_is_granted_again_to_its_owner(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        let key = t.key("lost-reply");
        let ttl = fault_ttl(t);
        let owner = OwnerToken::random();
        link.hold_replies().await.map_err(link_err("hold replies"))?;
        let lost = timeout(ttl / 4, linked.try_acquire_as(&key, ttl, owner)).await;
        link.heal().await.map_err(link_err("heal"))?;
        if let Ok(Ok(AcquireOutcome::Acquired(_))) = lost {
            return fail("a grant's reply crossed a link that held the replies");
        }
        let retried = retry_until_up("the owner's retry", || {
            linked.try_acquire_as(&key, ttl, owner)
        })
        .await?;
        let AcquireOutcome::Acquired(retried) = retried else {
            linked.release(&key, &owner).await?;
            return fail(
                "the owner's retry of a grant whose reply was lost was refused: the key stays held by nobody working until its ttl",
            );
        };
        outlasts_its_retry(t, &retried, &mut |key, ttl| {
            Box::pin(async move { grant(t.backend(), key, ttl).await })
        })
        .await
    }

    /// An early release within a least hold whose reply was lost (held on the link after the server applied it, long enough for the backend's own time-out to give up on it), then retried by its owner, answers released, and the key stays taken until the hold has passed from the first send, then frees within the hold from the retry: what the lost step left behind neither frees the key early nor keeps it.
    #[case(Release, needs_reply_holding_links)]
    pub async fn an_early_release_whose_reply_was_lost_keeps_the_key_for_the_hold(t: &Target) -> CaseResult {
        let caps = t.capabilities();
        let key = t.key("early-release-lost-reply");
        let (linked, link) = linked(t).await?;
        // What the hold has left when the holder releases: longer than the step is
        // kept waiting for its reply, so that the key is still taken after it.
        let (hold, waited) = (caps.ttl_at_least(Duration::from_secs(10)), Duration::from_secs(7));
        let lease = match grant(&linked, &key, t.long_ttl()).await? {
            Some(lease) => lease,
            None => return fail(format!("{key} was held although nobody should hold it")),
        };
        link.hold_replies().await.map_err(link_err("hold replies"))?;
        let sent = Instant::now();
        // Given up by the backend's own time-out, or dropped here, its outcome unknown.
        let lost = timeout(waited, linked.release_lease_after(&lease, hold)).await;
        link.heal().await.map_err(link_err("heal"))?;
        match lost {
            Ok(Err(e)) if e.kind() == ErrorKind::Unsupported && e.was_not_sent() => {
                linked.release_lease(&lease).await?;
                return Err(CaseError::Skipped(format!(
                    "the backend has no early release step ({e})"
                )));
            }
            Ok(Ok(_)) => {
                let _ = linked.release_lease(&lease).await;
                return fail("an early release's reply crossed a link that held the replies");
            }
            _ => {}
        }
        let kept = t.backend().inspect(&key).await?;
        ensure!(
            kept.as_ref().is_some_and(|info| info.fence == lease.fence()),
            "an early release whose reply was lost left the key {kept:?} {:?} after it was sent, within the hold of {hold:?} it asked for",
            sent.elapsed()
        );
        let retried = retry_until_up("the owner's retried early release", || {
            linked.release_lease_after(&lease, hold)
        })
        .await?;
        let answered = Instant::now();
        ensure!(
            retried == ReleaseOutcome::Released,
            "the owner's retry of an early release whose reply was lost answered {retried:?}"
        );
        let kept_until = answered + hold + caps.ttl_granularity + t.expiry_slack();
        let (next, at) = acquire_when_free(t, &key, t.long_ttl(), kept_until + t.expiry_slack())
            .await
            .map_err(|e| {
                CaseError::Failed(format!(
                    "the key was still taken {:?} after the retried early release answered, past the hold of {hold:?} it asked for ({e})",
                    answered.elapsed()
                ))
            })?;
        t.backend().release_lease(&next).await?;
        ensure!(
            at + t.expiry_slack() >= sent + hold,
            "the key was free {:?} after the early release was first sent, within the hold of {hold:?} it asked for",
            at - sent
        );
        ensure!(
            t.fence_rose(lease.fence(), next.fence()),
            "the next holder's fence {:?} is not above {:?}",
            next.fence(),
            lease.fence()
        );
        Ok(())
    }

    /// Where every connection a client opens is accepted and then dropped at once (a listener whose server process is gone or stuck, a balancer with no healthy target), and its open connections are reset at their next request, each step answers a typed, retryable error in bounded time, never a hang or an answer it could not have had; once connections hold again the client works, with no restart.
    #[case(Errors, needs_connection_failing_links)]
    pub async fn connections_accepted_then_dropped_give_typed_errors_then_recover(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        let key = t.key("accepted-dropped");
        link.reset_after_requests().await.map_err(link_err("reset connections"))?;
        link.drop_new_connections().await.map_err(link_err("drop new connections"))?;
        // Reads only, so that whatever reaches the server changes nothing: the first
        // meets the reset of a connection it had, the second a new connection dropped.
        let mut answers = Vec::new();
        for _ in 0..2 {
            let started = Instant::now();
            let answer = timeout(Duration::from_secs(20), linked.inspect(&key)).await;
            answers.push((answer, started.elapsed()));
        }
        link.heal().await.map_err(link_err("heal"))?;
        for (n, (answer, took)) in answers.into_iter().enumerate() {
            match answer {
                Err(_) => return fail(format!("step {n} hung for 20 s over connections dropped as they opened")),
                Ok(Ok(info)) => {
                    return fail(format!(
                        "step {n} answered {info:?} after {took:?} over a link that reset or dropped every connection"
                    ))
                }
                Ok(Err(e)) => ensure!(
                    matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) && e.is_retryable(),
                    "step {n} over connections dropped as they opened gave a {:?} error (retryable: {}) after {took:?}: {e}",
                    e.kind(),
                    e.is_retryable()
                ),
            }
        }
        retry_until_up("inspect once connections hold", || linked.inspect(&key)).await?;
        let Some(lease) = grant(&linked, &key, t.long_ttl()).await? else {
            return fail("a fresh key was held once connections held again");
        };
        linked.release_lease(&lease).await?;
        Ok(())
    }

    /// A set taken in one step whose reply was lost (held on the link after the server applied it), retried by its owners, is granted again, every key, and restarts every key's expiry on the server: the validity the client counts agrees with the server's, and nobody else gets a key before it ends.
    #[case(Validity, needs_atomic_sets_over_reply_holding_links)]
    pub async fn a_set_whose_reply_was_lost_is_granted_again_to_its_owners(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        let ttl = fault_ttl(t);
        let mut keys = [t.key("lost-set-a"), t.key("lost-set-b")];
        keys.sort_by(|x, y| x.as_str().cmp(y.as_str()));
        let set: Vec<(LockKey, OwnerToken)> =
            keys.iter().map(|k| (k.clone(), OwnerToken::random())).collect();
        link.hold_replies().await.map_err(link_err("hold replies"))?;
        let lost = timeout(ttl / 4, linked.try_acquire_all(&set, ttl)).await;
        link.heal().await.map_err(link_err("heal"))?;
        if let Ok(Ok(SetOutcome::Acquired(_))) = lost {
            return fail("a set's reply crossed a link that held the replies");
        }
        let retried = retry_until_up("the owners' retry", || linked.try_acquire_all(&set, ttl)).await?;
        let SetOutcome::Acquired(leases) = retried else {
            for (key, owner) in &set {
                linked.release(key, owner).await?;
            }
            return fail(
                "the owners' retry of a set whose reply was lost was refused: its keys stay held by nobody working until their ttl",
            );
        };
        ensure!(leases.len() == set.len(), "{} leases for a set of {}", leases.len(), set.len());
        // Every key but the first: the validity counted is the server's. The first also
        // waits out its lease, with another owner trying for it meanwhile.
        for lease in &leases[1..] {
            let counted = lease.valid_until().saturating_duration_since(Instant::now());
            let on_server = t.backend().inspect(lease.key()).await?.map(|i| i.remaining).unwrap_or_default();
            ensure!(
                on_server + t.expiry_slack() >= counted,
                "after the retry the server had {on_server:?} left on {} and the client counted {counted:?}: the retry did not restart the expiry",
                lease.key()
            );
        }
        let first = outlasts_its_retry(t, &leases[0], &mut |key, ttl| {
            Box::pin(async move { grant(t.backend(), key, ttl).await })
        })
        .await;
        for lease in &leases[1..] {
            linked.release_lease(lease).await?;
        }
        first
    }

    /// A grant applied whose connection was then reset before its reply, and whose reconnect was refused (the request could not be sent again), is given back once the link heals: the key is free within the cleanup's passes, not held by nobody for its TTL.
    #[case(Client, needs_connection_failing_links)]
    pub async fn a_grant_applied_then_reset_then_refused_leaves_nothing(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        // Warmed up by a whole grant, so that the try below is its one request where
        // the backend takes one (a script the server has yet to load would take more).
        if let Some(warm) = grant(&linked, &t.key("warm-up"), t.long_ttl()).await? {
            linked.release_lease(&warm).await?;
        }
        let key = t.key("reset-refused");
        let client = LockClient::with_options(linked, LockOptions::new(t.long_ttl()))?;
        link.reset_after_requests().await.map_err(link_err("reset connections"))?;
        link.refuse_connections().await.map_err(link_err("refuse connections"))?;
        let tried = timeout(Duration::from_secs(30), client.try_lock(key.as_str())).await;
        let applied = holder_fence(t, &key).await?.is_some();
        link.heal().await.map_err(link_err("heal"))?;
        match tried {
            Ok(Ok(Ok(guard))) => {
                let fence = guard.fence();
                let _ = guard.release().await;
                return fail(format!(
                    "try_lock() answered granted (fence {fence}) through a link that reset every connection after its request"
                ));
            }
            Ok(Err(e)) if !e.is_retryable() => {
                return fail(format!("a grant whose connection was reset failed non-retryably: {e}"));
            }
            _ => {}
        }
        ensure!(
            applied || t.capabilities().round_trips.acquire > 1,
            "the server had not applied the grant before its connection was reset: the case proves nothing"
        );
        // The attempt's cleanup releases once the link carries it (the lease itself
        // lasts a minute).
        let give_up = Instant::now() + Duration::from_secs(10);
        let (next, _) = acquire_when_free(t, &key, t.long_ttl(), give_up)
            .await
            .map_err(|_| {
                CaseError::Failed(format!(
                    "the grant applied before its connection was reset (applied: {applied}) was still held 10 s after the link healed"
                ))
            })?;
        t.backend().release_lease(&next).await?;
        Ok(())
    }

    /// A job's runner cut off mid-job (neither its renewals nor its release reach the server) keeps its slot until its least hold has passed from the grant, however short its TTL: a host that fires the slot late skips it; once the hold has passed the slot is free.
    #[case(Client, needs_links)]
    pub async fn a_job_runner_cut_off_mid_job_keeps_its_slot_for_the_least_hold(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        let ttl = fault_ttl(t);
        let at_least = t.capabilities().ttl_at_least(ttl * 3);
        let key = t.key("job-slot");
        let runner = LockClient::with_options(linked, LockOptions::new(ttl))?;
        let (started, granted) = tokio::sync::oneshot::channel();
        let running = tokio::spawn({
            let key = key.clone();
            async move {
                runner
                    .run_once(key.as_str(), at_least, |_| async move {
                        let _ = started.send(Instant::now());
                        std::future::pending::<()>().await
                    })
                    .await
            }
        });
        let granted = match timeout(Duration::from_secs(20), granted).await {
            Ok(Ok(at)) => at,
            _ => {
                running.abort();
                return fail("the runner's job never started on a free slot");
            }
        };
        // Into the job past a renewal or two, then cut off.
        sleep(ttl).await;
        link.cut().await.map_err(link_err("cut"))?;
        // The server's grant came before its reply reached the runner: a round trip's
        // room (and the expiry slack) before the least hold's end by the runner's count.
        let kept_until = granted + at_least;
        let room = t.expiry_slack() + Duration::from_millis(100);
        let mut early = None;
        while early.is_none() && Instant::now() + room < kept_until {
            early = grant(t.backend(), &key, ttl).await?;
            if early.is_none() {
                sleep(Duration::from_millis(100)).await;
            }
        }
        if let Some(early) = early {
            let at = granted.elapsed();
            t.backend().release_lease(&early).await?;
            running.abort();
            link.heal().await.map_err(link_err("heal"))?;
            return fail(format!(
                "a late host got the slot {at:?} after the cut-off runner's grant, within its least hold of {at_least:?} (ttl {ttl:?})"
            ));
        }
        // Past it, the slot frees: at once where a renewal can shorten the lease, within
        // the least hold after the last renewal where renewals renew to the granted TTL.
        let give_up = kept_until + at_least + t.expiry_slack() + Duration::from_secs(5);
        let freed = acquire_when_free(t, &key, t.long_ttl(), give_up).await;
        running.abort();
        link.heal().await.map_err(link_err("heal"))?;
        let (next, _) = freed?;
        t.backend().release_lease(&next).await?;
        Ok(())
    }

    /// An election's resume whose grant was applied but whose reply was lost (held on the link), retried by the service, leads, counting no more validity than the server keeps: the cleanup the lost attempt armed never deletes the retry's grant under the resumed leader, and no rival is elected while it leads.
    #[case(Election, needs_reply_holding_links)]
    pub async fn a_resume_retried_after_a_lost_reply_keeps_its_term(t: &Target) -> CaseResult {
        let name = t.key("resumed-lost-reply");
        // The first process leads, then stops as a crash stops it.
        let crashed = client(t, LockOptions::new(t.long_ttl()).with_auto_renew(false))?;
        let term = crashed.election(name.as_str())?.campaign("a", Duration::from_secs(20)).await?;
        let token = term.resume_token();
        std::mem::forget(term);

        let (linked, link) = linked(t).await?;
        let restarted = LockClient::with_options(linked, LockOptions::new(t.long_ttl()))?
            .election(name.as_str())?;
        link.hold_replies().await.map_err(link_err("hold replies"))?;
        // Given up by the backend's own time-out, or dropped here, its outcome unknown.
        let lost = timeout(Duration::from_secs(3), restarted.resume(&token, "a")).await;
        link.heal().await.map_err(link_err("heal"))?;
        match lost {
            Ok(Ok(Ok(_))) => return fail("a resume's reply crossed a link that held the replies"),
            Ok(Err(e)) if !e.is_retryable() => {
                return fail(format!("a resume whose reply was lost failed non-retryably: {e}"))
            }
            _ => {}
        }
        let resumed = retry_until_up("the resume's retry", || restarted.resume(&token, "a")).await?;
        // Its term, or, where the lost attempt's cleanup gave that back first, a new
        // term of the same owner: either way the owner's, with the cleanup still armed.
        let resumed = match resumed {
            Ok(resumed) => resumed,
            Err(busy) => return fail(format!("the retried resume found the election busy with nobody else campaigning: {busy:?}")),
        };
        ensure!(
            resumed.fence() >= token.fence(),
            "the retried resume leads fence {}, below its term's {}",
            resumed.fence(),
            token.fence()
        );
        // The validity the client counts from the retry is the server's.
        let counted = resumed.valid_until().saturating_duration_since(Instant::now());
        let on_server = match t.backend().permits() {
            Some(permits) => permits
                .holders(&name)
                .await?
                .iter()
                .filter(|h| h.fence == resumed.fence())
                .map(|h| h.remaining)
                .max()
                .unwrap_or_default(),
            None => {
                let lease = LockKey::new(format!("{}{name}", distlock_core::LEASE_ELECTION_PREFIX))?;
                t.backend().inspect(&lease).await?.map(|i| i.remaining).unwrap_or_default()
            }
        };
        ensure!(
            counted <= on_server + t.expiry_slack(),
            "after the retried resume the client counts {counted:?} of its term; the server keeps {on_server:?}"
        );
        // Past every pass of the lost attempt's cleanup (0, 0.25, 1.25 and 6.25 s).
        let rival = client(t, LockOptions::new(t.long_ttl()))?.election(name.as_str())?;
        let until = Instant::now() + Duration::from_secs(8);
        while Instant::now() < until {
            if let Ok(won) = rival.try_campaign("b").await? {
                let (won_fence, held) = (won.fence(), resumed.is_held());
                let _ = won.resign().await;
                return fail(format!(
                    "a rival was elected at fence {won_fence} while the resumed leader of fence {} had is_held {held}",
                    resumed.fence()
                ));
            }
            ensure!(resumed.is_held(), "the resumed leader lost its term with nobody else elected");
            sleep(Duration::from_millis(250)).await;
        }
        resumed.resign().await?;
        Ok(())
    }

    /// A holder cut off past its TTL is told it lost the lock before its validity ends and before another client gets in.
    #[case(Client, needs_links)]
    pub async fn a_cut_off_holder_is_told_before_another_client_gets_in(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        let ttl = fault_ttl(t);
        let client = LockClient::with_options(linked.clone(), LockOptions::new(ttl))?;
        let key = t.key("partition");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        let lost = guard.lost();
        link.cut().await.map_err(link_err("cut"))?;
        let give_up = Instant::now() + ttl * 4 + t.expiry_slack() * 4;
        // Another client, which still reaches the server, waits for the key.
        let taker = async {
            loop {
                if let Some(lease) = try_acquire(t, &key, t.long_ttl()).await? {
                    return Ok::<_, CaseError>((lease, Instant::now()));
                }
                if Instant::now() > give_up {
                    return fail("the other client never got the key");
                }
                sleep(Duration::from_millis(5)).await;
            }
        };
        let told = async {
            let reason = timeout(ttl + Duration::from_secs(2), lost).await;
            (reason, Instant::now())
        };
        let (taken, (reason, told_at)) = tokio::join!(taker, told);
        let (taken, taken_at) = taken?;
        match reason {
            Ok(Some(LossReason::RenewalFailed | LossReason::NotHeld)) => {}
            Ok(other) => return fail(format!("lost() gave {other:?}")),
            Err(_) => return fail("lost() did not fire within the ttl plus 2 s of the cut"),
        }
        ensure!(
            told_at < guard.valid_until(),
            "the holder was told {:?} after its validity ran out",
            told_at - guard.valid_until()
        );
        ensure!(
            told_at <= taken_at,
            "another client got the lock {:?} before the holder was told",
            told_at - taken_at
        );
        ensure!(
            t.fence_rose(guard.fence(), taken.fence()),
            "the other client got fence {} after the cut-off holder's {}",
            taken.fence(),
            guard.fence()
        );
        ensure!(!guard.is_held(), "the cut-off holder still believes it holds");

        link.heal().await.map_err(link_err("heal"))?;
        retry_until_up("inspect through the healed link", || linked.inspect(&key)).await?;
        let released = guard.release().await.map_err(|e| e.kind());
        ensure!(
            released == Err(ErrorKind::NotHeld),
            "after the heal, the lost guard's release answered {released:?}, not \"not held\""
        );
        t.backend().release_lease(&taken).await?;
        let Ok(again) = client.try_lock(key.as_str()).await? else {
            return fail("the healed client could not lock the free key again");
        };
        ensure!(
            t.fence_rose(taken.fence(), again.fence()),
            "the healed client got fence {} after {}",
            again.fence(),
            taken.fence()
        );
        again.release().await?;
        Ok(())
    }

    /// With latency on the link, a lease's validity still starts before the request, not after the round trip.
    #[case(Validity, needs_links)]
    pub async fn latency_is_never_counted_as_validity(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        let one_way = Duration::from_millis(100);
        link.set_latency(one_way)
            .await
            .map_err(link_err("add latency"))?;
        let ttl = t.long_ttl();
        for trial in 0..3 {
            let key = t.key("latency");
            let sent = Instant::now();
            let outcome = linked.try_acquire(&key, ttl).await?;
            let received = Instant::now();
            let AcquireOutcome::Acquired(lease) = outcome else {
                return fail(format!("trial {trial}: a fresh key was held"));
            };
            // The fault must be real, or the case proves nothing.
            ensure!(
                received - sent >= one_way * 2,
                "trial {trial}: the call took {:?}, less than the latency added",
                received - sent
            );
            // Counted from the reply, it would include the whole call; from before the
            // request, nothing but the instants between two clock readings here.
            let counted = lease.valid_until().saturating_duration_since(sent + ttl);
            ensure!(
                counted < (received - sent) / 4,
                "trial {trial}: the validity counts {counted:?} of a {:?} call",
                received - sent
            );
            linked.release_lease(&lease).await?;
        }
        link.set_latency(Duration::ZERO)
            .await
            .map_err(link_err("remove latency"))?;
        Ok(())
    }

    /// A grant whose reply arrives after its TTL ran out is not returned as a lease, and leaves the key free.
    #[case(Validity, needs_links)]
    pub async fn a_grant_arriving_after_its_ttl_is_not_returned(t: &Target) -> CaseResult {
        let (linked, link) = linked(t).await?;
        // Warmed up by a whole grant too, so that the late grant is the one request
        // (a script the server has yet to load would take a round trip more).
        if let Some(warm) = grant(&linked, &t.key("warm-up"), t.long_ttl()).await? {
            linked.release_lease(&warm).await?;
        }
        let caps = linked.capabilities().clone();
        let ttl = caps.ttl_at_least(Duration::from_millis(200));
        // The acquire's round trips take 1.2 TTLs in all: past the TTL, within the
        // backend's own timeouts. The capabilities declare the most an acquire takes;
        // one on a free key may take fewer, and then its reply comes within the TTL:
        // that grant is released and the next try assumes one round trip fewer.
        let mut trips = caps.round_trips.acquire.max(1);
        let (key, sent, one_way, took, outcome) = loop {
            let one_way = ttl * 3 / (5 * trips);
            link.set_latency(one_way)
                .await
                .map_err(link_err("add latency"))?;
            let key = t.key(&format!("late-grant-{trips}"));
            let sent = Instant::now();
            let outcome = linked.try_acquire(&key, ttl).await;
            let took = sent.elapsed();
            link.set_latency(Duration::ZERO)
                .await
                .map_err(link_err("remove latency"))?;
            match outcome {
                Ok(AcquireOutcome::Acquired(lease)) if took < ttl && trips > 1 => {
                    linked.release_lease(&lease).await?;
                    trips -= 1;
                }
                outcome => break (key, sent, one_way, took, outcome),
            }
        };
        if took < ttl {
            // The backend gave up before its grant could arrive (a Redlock's timeout
            // per server is shorter than the TTL): a retryable timeout, and what the
            // request takes when it lands is given back before its expiry would free
            // it. The check falls between the two.
            match outcome {
                Err(e) if e.kind() == ErrorKind::Timeout && e.is_retryable() => {}
                Err(e) => return fail(format!("giving up early gave a {:?} error: {e}", e.kind())),
                Ok(_) => return fail(format!("the call took {took:?}, less than the ttl {ttl:?}")),
            }
            sleep_until(sent + one_way + (took + ttl) / 2).await;
            ensure!(
                holder_fence(t, &key).await?.is_none(),
                "the grant that landed after the backend gave up was left behind on the server"
            );
            return Ok(());
        }
        match outcome {
            Err(e) => ensure!(
                e.kind() == ErrorKind::Timeout && e.is_retryable(),
                "a late grant gave a {:?} error (retryable: {}): {e}",
                e.kind(),
                e.is_retryable()
            ),
            Ok(AcquireOutcome::Acquired(lease)) => {
                return fail(format!(
                    "a grant that came {took:?} after the request was returned as a lease of {ttl:?} (expired: {})",
                    lease.is_expired()
                ))
            }
            Ok(AcquireOutcome::Held { .. }) => return fail("a fresh key was held"),
        }
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "the late grant was left behind on the server"
        );
        Ok(())
    }
}
