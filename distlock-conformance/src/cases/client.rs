//! What `LockClient` adds: renewal, the loss signal, waiting, guards.

use super::support::*;

cases! {
    /// Two extends with different TTLs in flight at once (the renewal's and a user's), replies in either order: the guard never counts validity past what the server keeps.
    #[case(Client, needs_extend_any_ttl)]
    pub async fn two_extends_in_flight_never_outlast_the_server(t: &Target) -> CaseResult {
        // Both above the loss margin of the client's TTL (a tenth of it).
        let (short, long) = (t.capabilities().ttl_at_least(Duration::from_secs(10)), t.long_ttl());
        let client = client(t, LockOptions::new(t.long_ttl()).with_auto_renew(false))?;
        let key = t.key("two-extends");
        for trial in 0..6 {
            let Ok(guard) = client.try_lock(key.as_str()).await? else {
                return fail(format!("trial {trial}: a free key was held"));
            };
            // Every other trial sends the short one first, so that either may be
            // applied last.
            let (a, b) = if trial % 2 == 0 { (long, short) } else { (short, long) };
            let (first, second) = tokio::join!(guard.extend(a), guard.extend(b));
            first?;
            second?;
            let counted = guard.valid_until().saturating_duration_since(Instant::now());
            let on_server = t
                .backend()
                .inspect(&key)
                .await?
                .map(|info| info.remaining)
                .unwrap_or_default();
            guard.release().await?;
            ensure!(
                counted <= on_server + t.expiry_slack(),
                "trial {trial}: the guard counts {counted:?} of validity after extends to {a:?} and {b:?}; the server keeps {on_server:?}"
            );
        }
        Ok(())
    }

    /// A release within a least hold keeps the key taken, by the server's count, for what is left of the hold and then frees it: a job's slot neither freed early nor kept past the hold, however the backend renews (an early release renewed to the granted TTL would keep it up to that TTL after the last renewal).
    #[case(Client, always)]
    pub async fn an_early_release_keeps_the_key_for_the_least_hold_only(t: &Target) -> CaseResult {
        let caps = t.capabilities();
        let ttl = caps.ttl_at_least(Duration::from_secs(1));
        // A backend without the step says so, with nothing sent.
        let probe = t.key("early-release-probe");
        let lease = acquire(t, &probe, ttl * 3).await?;
        let answer = t.backend().release_lease_after(&lease, ttl).await;
        match answer {
            Err(e) if e.kind() == ErrorKind::Unsupported && e.was_not_sent() => {
                t.backend().release(&probe, lease.owner()).await?;
                return Err(CaseError::Skipped(format!(
                    "the backend has no early release step: a key released within its least hold stays taken until its lease ends ({e})"
                )));
            }
            answer => ensure!(
                answer? == ReleaseOutcome::Released,
                "the holder's early release answered not held"
            ),
        }
        let client = client(t, LockOptions::new(ttl).with_hold_at_least(ttl * 3))?;
        // As fitted: rounded up, and widened by the clock drift the backend declares.
        let least = client.options().hold_at_least().unwrap_or_default();
        let key = t.key("early-release");
        let sent = Instant::now();
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        // The client counts the least hold from the grant's reply: the server keeps the
        // key from no later than then until no earlier than `sent + least`, and frees
        // it (to its TTL granularity) no later than `kept_until`.
        let granted = Instant::now();
        let kept_until = granted + least + caps.ttl_granularity + t.expiry_slack();
        let fence = guard.fence();
        // Through renewals, then released with a third of the hold left: a renewal to
        // the granted TTL shortly before would keep the key up to twice that long.
        sleep(ttl * 2).await;
        guard.release().await?;
        let asked = Instant::now();
        if let Some(lease) = try_acquire(t, &key, ttl).await? {
            t.backend().release(&key, lease.owner()).await?;
            ensure!(
                asked + t.expiry_slack() >= sent + least,
                "the key was free {:?} after the grant, within its least hold of {least:?}",
                asked - sent
            );
        }
        let asked = Instant::now();
        let remaining = t.backend().inspect(&key).await?.map(|info| info.remaining);
        ensure!(
            remaining.is_none_or(|r| asked + r <= kept_until),
            "the server keeps the key {remaining:?} more {:?} after the grant, past its least hold of {least:?}",
            asked - granted
        );
        let (next, at) = acquire_when_free(t, &key, ttl, kept_until + t.expiry_slack()).await?;
        ensure!(
            at + t.expiry_slack() >= sent + least,
            "the key was granted again {:?} after the first grant, within its least hold of {least:?}",
            at - sent
        );
        ensure!(
            t.fence_rose(fence, next.fence()),
            "the next holder's fence {:?} is not above {fence:?}",
            next.fence()
        );
        t.backend().release(&key, next.owner()).await?;
        Ok(())
    }

    /// Auto-renewal keeps a lease alive across several TTLs, with the same fence.
    #[case(Client, always)]
    pub async fn client_renewal_keeps_the_lease(t: &Target) -> CaseResult {
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(1));
        let client = client(t, LockOptions::new(ttl))?;
        let key = t.key("renewal");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        for i in 0..3 {
            sleep(ttl).await;
            ensure!(
                guard.is_held(),
                "lost after {} ttls: {:?}",
                i + 1,
                guard.loss()
            );
            ensure!(
                holder_fence(t, &key).await? == Some(guard.fence().get()),
                "the server lost the renewed lease"
            );
            ensure!(
                try_acquire(t, &key, ttl).await?.is_none(),
                "another holder got in during renewal"
            );
        }
        guard.release().await?;
        Ok(())
    }

    /// `lost()` fires when the lease is deleted behind the holder's back.
    #[case(Client, needs_force_release)]
    pub async fn client_lost_fires_when_the_lease_is_deleted(t: &Target) -> CaseResult {
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(3));
        let client = client(t, LockOptions::new(ttl))?;
        let key = t.key("deleted");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        let lost = guard.lost();
        sleep(Duration::from_millis(50)).await;
        let deleted_at = Instant::now();
        ensure!(
            operator_of(t.backend())?.force_release(&key).await?,
            "force_release found no lease"
        );
        let bound = client.options().renew_interval() + Duration::from_secs(1);
        match timeout(bound, lost).await {
            Ok(Some(LossReason::NotHeld)) => {}
            Ok(other) => return fail(format!("lost() gave {other:?}, not NotHeld")),
            Err(_) => {
                return fail(format!(
                    "lost() did not fire within {bound:?} of the deletion"
                ))
            }
        }
        ensure!(!guard.is_held(), "is_held() after the loss");
        tracing::debug!(after = ?deleted_at.elapsed(), "loss noticed");
        let r = guard.release().await.map_err(|e| e.kind());
        ensure!(
            r == Err(ErrorKind::NotHeld),
            "releasing a lost guard answered {r:?}"
        );
        Ok(())
    }

    /// A waiter is woken by the release, not by its next poll.
    #[case(Client, needs_notification)]
    pub async fn client_waiter_is_woken_by_the_release(t: &Target) -> CaseResult {
        waiter_woken(t, t.backend(), t.backend()).await
    }

    /// The backend declares change notification exactly where its `watch` answers a stream: the client decides from the declaration whether to watch, so a `watch` written without it is never used (its waiters poll), and a declaration without a `watch` leaves waiters waiting on nothing but their poll.
    #[case(Client, always)]
    pub async fn change_notification_is_declared_where_watch_answers(t: &Target) -> CaseResult {
        let declared = t.capabilities().change_notification;
        let key = t.key("declared-watch");
        let watched = timeout(Duration::from_secs(10), t.backend().watch(&key))
            .await
            .map_err(|_| CaseError::Failed("watch did not answer within 10 s".into()))??;
        let answers = watched.is_some();
        drop(watched);
        ensure!(
            declared == answers,
            "capabilities.change_notification is {declared}, but watch answers {}: {}",
            if answers { "a stream" } else { "None (poll)" },
            if answers {
                "the client never watches a backend that does not declare it, so its waiters poll"
            } else {
                "waiters find no stream to wait on"
            }
        );
        Ok(())
    }

    /// A lease from `lock()` is valid from its successful attempt, not the first one.
    #[case(Client, always)]
    pub async fn client_validity_counts_from_the_successful_attempt(t: &Target) -> CaseResult {
        let key = t.key("late-validity");
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(1));
        let holder = acquire(t, &key, ttl).await?;
        let client = client(t, LockOptions::new(ttl).with_auto_renew(false))?;
        let guard = client
            .lock(key.as_str(), ttl * 4 + t.expiry_slack() * 4)
            .await?;
        let returned = Instant::now();
        ensure!(
            returned >= holder.valid_until(),
            "acquired before the holder expired"
        );
        let floor = returned + ttl - ttl / 5;
        ensure!(
            guard.valid_until() >= floor,
            "validity ends {:?} too early: counted from the first attempt?",
            floor - guard.valid_until()
        );
        guard.release().await?;
        Ok(())
    }

    /// Dropping a guard releases the lock in the background.
    #[case(Client, always)]
    pub async fn client_dropped_guard_releases(t: &Target) -> CaseResult {
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let key = t.key("drop-guard");
        let Ok(guard) = client.try_lock(key.as_str()).await? else {
            return fail("a fresh key was held");
        };
        drop(guard);
        flushed(client.flush()).await?;
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "the dropped guard's lease was still held once its release was done"
        );
        Ok(())
    }

    /// A try on a key another owner holds answers busy, not an error: naming the key as held by another owner, with the holder's remaining TTL, where the backend tells it, no longer than what is left of that holder's lease (the `Retry-After` a service answers with).
    #[case(Client, always)]
    pub async fn a_busy_try_says_the_key_is_held_and_for_how_long(t: &Target) -> CaseResult {
        let key = t.key("busy-try");
        let ttl = t.long_ttl();
        let holder = acquire(t, &key, ttl).await?;
        let granted = Instant::now();
        sleep(Duration::from_millis(500)).await;
        let client = client(t, LockOptions::new(ttl))?;
        // The server's expiry was set before `granted`; it answers the try after `asked`.
        let asked = granted.elapsed();
        let busy = match client.try_lock(key.as_str()).await? {
            Ok(guard) => {
                let fence = guard.fence();
                drop(guard);
                return fail(format!("a held key was granted to a try, with fence {fence}"));
            }
            Err(busy) => busy,
        };
        ensure!(
            busy.key() == &key && busy.reason() == BusyReason::Held,
            "a try on a key held elsewhere answered {busy:?}"
        );
        if let Some(remaining) = busy.holder_remaining() {
            let caps = t.capabilities();
            let left = ttl.saturating_sub(asked) + caps.ttl_granularity + caps.clock_drift.allowance(ttl);
            ensure!(
                remaining <= left,
                "a busy try said the holder has {remaining:?} left, {asked:?} into a lease of {ttl:?} (at most {left:?})"
            );
        }
        t.backend().release(&key, holder.owner()).await?;
        Ok(())
    }

    /// A dropped waiting acquire leaves no lease and no renewal behind.
    #[case(Client, always)]
    pub async fn client_dropped_acquire_leaves_nothing(t: &Target) -> CaseResult {
        let key = t.key("drop-acquire");
        let holder = acquire(t, &key, t.long_ttl()).await?;
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let waited = timeout(
            Duration::from_millis(300),
            client.lock(key.as_str(), Duration::from_secs(30)),
        )
        .await;
        ensure!(waited.is_err(), "the waiter acquired a held key");
        t.backend().release(&key, holder.owner()).await?;
        flushed(client.flush()).await?;
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "the dropped waiter left a lease behind"
        );
        Ok(())
    }
}
