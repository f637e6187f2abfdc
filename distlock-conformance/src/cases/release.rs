//! Release and owner tokens (contract points 3 and 4).

use super::support::*;

cases! {
    /// A release by a non-owner answers "not held" and leaves the holder untouched.
    #[case(OwnerTokens, always)]
    pub async fn release_by_non_owner_is_not_held(t: &Target) -> CaseResult {
        let key = t.key("non-owner");
        let lease = acquire(t, &key, t.long_ttl()).await?;
        let outcome = t.backend().release(&key, &OwnerToken::random()).await?;
        ensure!(
            outcome == ReleaseOutcome::NotHeld,
            "a stranger's release answered {outcome:?}"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(lease.fence().get()),
            "a stranger's release removed the holder"
        );
        ensure!(
            matches!(
                t.backend().extend(&lease, t.long_ttl()).await?,
                ExtendOutcome::Extended(_)
            ),
            "the holder lost its lease to a stranger's release"
        );
        t.backend().release(&key, lease.owner()).await?;
        Ok(())
    }

    /// A holder whose lease expired cannot release the next holder's lease.
    #[case(Release, always)]
    pub async fn release_after_expiry_is_not_held(t: &Target) -> CaseResult {
        let key = t.key("release-expired");
        let old = acquire(t, &key, t.short_ttl()).await?;
        let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
        let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        let outcome = t.backend().release(&key, old.owner()).await?;
        ensure!(
            outcome == ReleaseOutcome::NotHeld,
            "the expired holder's release answered {outcome:?}"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(new.fence().get()),
            "the expired holder deleted the new holder's lease"
        );
        t.backend().release(&key, new.owner()).await?;
        Ok(())
    }

    /// An early release within a least hold sent by a holder whose lease expired answers not held and leaves the next holder's lease as it was: its fence, and the time the server keeps it.
    #[case(Release, always)]
    pub async fn an_early_release_after_expiry_spares_the_next_holder(t: &Target) -> CaseResult {
        let key = t.key("early-release-expired");
        let short = t.short_ttl();
        let old = acquire(t, &key, short).await?;
        let give_up = Instant::now() + short * 4 + t.expiry_slack() * 4;
        let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
        let outcome = match t.backend().release_lease_after(&old, short).await {
            Err(e) if e.kind() == ErrorKind::Unsupported && e.was_not_sent() => {
                t.backend().release_lease(&new).await?;
                return Err(CaseError::Skipped(format!(
                    "the backend has no early release step ({e})"
                )));
            }
            outcome => outcome?,
        };
        let info = t.backend().inspect(&key).await?;
        t.backend().release_lease(&new).await?;
        ensure!(
            outcome == ReleaseOutcome::NotHeld,
            "the expired holder's early release answered {outcome:?}"
        );
        let Some(info) = info else {
            return fail("the expired holder's early release freed the next holder's key");
        };
        ensure!(
            info.fence == new.fence(),
            "after the expired holder's early release the key has fence {:?}, not the next holder's {:?}",
            info.fence,
            new.fence()
        );
        // The next holder's lease keeps most of its long TTL, far above the short one
        // the expired holder asked for.
        ensure!(
            info.remaining > t.long_ttl() / 2,
            "the expired holder's early release cut the next holder's lease to {:?}",
            info.remaining
        );
        Ok(())
    }

    /// Releasing twice answers "released" then "not held" (a retried release is harmless).
    #[case(Release, always)]
    pub async fn release_twice_is_not_held(t: &Target) -> CaseResult {
        let key = t.key("release-twice");
        let lease = acquire(t, &key, t.long_ttl()).await?;
        let first = t.backend().release(&key, lease.owner()).await?;
        ensure!(
            first == ReleaseOutcome::Released,
            "the first release answered {first:?}"
        );
        let second = t.backend().release(&key, lease.owner()).await?;
        ensure!(
            second == ReleaseOutcome::NotHeld,
            "the second release answered {second:?}"
        );
        // A retry arriving after someone else took the key must not touch them (etcd #22082).
        let next = acquire(t, &key, t.long_ttl()).await?;
        let retry = t.backend().release(&key, lease.owner()).await?;
        ensure!(
            retry == ReleaseOutcome::NotHeld,
            "a late retried release answered {retry:?}"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(next.fence().get()),
            "a late retried release removed the next holder"
        );
        t.backend().release(&key, next.owner()).await?;
        Ok(())
    }

    /// A release that races the lease's expiry never deletes the holder that came next.
    #[case(Release, always)]
    pub async fn release_racing_expiry_spares_the_next_holder(t: &Target) -> CaseResult {
        let ttl = t.short_ttl();
        // The release starts at a different distance before the expiry each round, so
        // that a machine whose timers fire a few milliseconds late still puts some
        // release's read before the expiry and its delete after the next grant.
        for (round, ahead_ms) in [4, 7, 10, 13].into_iter().enumerate() {
            let key = t.key("release-race");
            let old = acquire(t, &key, ttl).await?;
            let race_at = old
                .valid_until()
                .checked_sub(Duration::from_millis(ahead_ms))
                .unwrap_or(old.valid_until());
            sleep_until(race_at).await;
            let give_up = Instant::now() + ttl * 4 + t.expiry_slack() * 4;
            let releaser = async {
                sleep(Duration::from_millis(2)).await;
                t.backend().release(&key, old.owner()).await
            };
            let taker = acquire_when_free(t, &key, t.long_ttl(), give_up);
            let (released, taken) = tokio::join!(releaser, taker);
            released?;
            let (new, _) = taken?;
            sleep(Duration::from_millis(30)).await;
            ensure!(
                holder_fence(t, &key).await? == Some(new.fence().get()),
                "round {round}: the old holder's release deleted the next holder's lease"
            );
            t.backend().release(&key, new.owner()).await?;
        }
        Ok(())
    }

    /// Owner tokens one bit away from the holder's, at either end, can neither release nor take its lease.
    #[case(OwnerTokens, always)]
    pub async fn owner_tokens_one_bit_apart_are_strangers(t: &Target) -> CaseResult {
        let key = t.key("near-owner");
        let lease = acquire(t, &key, t.long_ttl()).await?;
        let holder = *lease.owner().as_bytes();
        // The first and last bit of each half: a backend that compares a prefix, a
        // suffix, or a 64-bit part of the token lets one of these through.
        for (byte, bit) in [(0, 0x80), (7, 0x01), (8, 0x80), (15, 0x01)] {
            let mut near = holder;
            near[byte] ^= bit;
            let near = OwnerToken::from_bytes(near);
            let released = t.backend().release(&key, &near).await?;
            ensure!(
                released == ReleaseOutcome::NotHeld,
                "a token differing in byte {byte} released the lease ({released:?})"
            );
            let taken = t.backend().try_acquire_as(&key, t.long_ttl(), near).await?;
            ensure!(
                matches!(taken, AcquireOutcome::Held { .. }),
                "a token differing in byte {byte} was granted the held key"
            );
            ensure!(
                holder_fence(t, &key).await? == Some(lease.fence().get()),
                "a token differing in byte {byte} disturbed the holder"
            );
        }
        ensure!(
            t.backend().release_lease(&lease).await? == ReleaseOutcome::Released,
            "the holder could not release after the near tokens"
        );
        Ok(())
    }

    /// A holder's owner token, sent with another key, releases neither that key nor its own.
    #[case(Release, always)]
    pub async fn an_owner_token_releases_only_its_own_key(t: &Target) -> CaseResult {
        let (first, second) = (t.key("own-key"), t.key("own-key"));
        let a = acquire(t, &first, t.long_ttl()).await?;
        let b = acquire(t, &second, t.long_ttl()).await?;
        let stranger = t.backend().release(&second, a.owner()).await?;
        ensure!(
            stranger == ReleaseOutcome::NotHeld,
            "a token released a key it does not hold ({stranger:?})"
        );
        ensure!(
            holder_fence(t, &first).await? == Some(a.fence().get())
                && holder_fence(t, &second).await? == Some(b.fence().get()),
            "a release with one key's token on another key disturbed a holder"
        );
        for lease in [&a, &b] {
            t.backend().release_lease(lease).await?;
        }
        Ok(())
    }
}
