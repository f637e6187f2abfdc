//! Typed errors (contract point 8). A killed server's errors are a fault case.

use super::support::*;

cases! {
    /// Bad keys and TTLs give typed errors, never a panic; unknown keys are "not held".
    #[case(Errors, always)]
    pub async fn bad_input_gives_typed_errors(t: &Target) -> CaseResult {
        let caps = t.capabilities().clone();
        let key = t.key("bad-input");
        let kind =
            |r: &distlock_core::Result<AcquireOutcome>| r.as_ref().map(|_| ()).map_err(|e| e.kind());
        let zero = t.backend().try_acquire(&key, Duration::ZERO).await;
        ensure!(
            kind(&zero) == Err(ErrorKind::InvalidTtl),
            "a zero ttl answered {zero:?}"
        );
        if let Some(too_long) = caps.max_ttl.checked_add(caps.ttl_granularity) {
            let r = t.backend().try_acquire(&key, too_long).await;
            ensure!(
                kind(&r) == Err(ErrorKind::InvalidTtl),
                "a ttl above the maximum answered {r:?}"
            );
        }
        if caps.ttl_granularity > Duration::from_nanos(1) {
            let odd = caps.min_ttl + caps.ttl_granularity / 2;
            let r = t.backend().try_acquire(&key, odd).await;
            ensure!(
                kind(&r) == Err(ErrorKind::InvalidTtl),
                "a ttl off the granularity answered {r:?}"
            );
        }
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "a refused request took the key"
        );
        let lease = acquire(t, &key, t.long_ttl()).await?;
        let r = t.backend().extend(&lease, Duration::ZERO).await;
        ensure!(
            r.as_ref().map_err(|e| e.kind()).err() == Some(ErrorKind::InvalidTtl),
            "extend with a zero ttl answered {r:?}"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(lease.fence().get()),
            "a refused extend changed the lease"
        );
        t.backend().release(&key, lease.owner()).await?;

        let unknown = t.key("never-used");
        let r = t.backend().release(&unknown, &OwnerToken::random()).await?;
        ensure!(
            r == ReleaseOutcome::NotHeld,
            "releasing a never-used key answered {r:?}"
        );
        ensure!(
            t.backend().inspect(&unknown).await?.is_none(),
            "a never-used key shows a holder"
        );

        let client = LockClient::new(t.backend().clone());
        for bad in [
            "",
            "line\nbreak",
            "nul\0",
            &"k".repeat(LockKey::MAX_LEN + 1),
        ] {
            let r = client.try_lock(bad).await.map(|_| ()).map_err(|e| e.kind());
            ensure!(
                r == Err(ErrorKind::InvalidKey),
                "the key {bad:?} answered {r:?}"
            );
        }
        // The shortest TTL the backend accepts must not panic or hang (rslock's
        // underflow), and is accepted: a fresh key is granted for it. A grant whose
        // reply took longer than that TTL is a late grant (a retryable time-out, as
        // the contract says), not a refusal: on a loaded machine a round trip can
        // outlast a 10 ms TTL, so a late grant is tried again on a fresh key.
        let mut late = 0;
        loop {
            let sent = Instant::now();
            let r = timeout(
                Duration::from_secs(10),
                t.backend().try_acquire(&t.key("min-ttl"), caps.min_ttl),
            )
            .await;
            let Ok(r) = r else {
                return fail("acquiring with the minimum ttl hung");
            };
            match r {
                Ok(AcquireOutcome::Acquired(lease)) => {
                    // It may have run out already: only the grant is this case's point.
                    let _ = t.backend().release_lease(&lease).await;
                    break;
                }
                Err(e)
                    if e.kind() == ErrorKind::Timeout
                        && e.is_retryable()
                        && sent.elapsed() >= caps.min_ttl
                        && late < 4 =>
                {
                    late += 1;
                }
                other => {
                    return fail(format!(
                        "a fresh key asked for the minimum ttl {:?} answered {other:?} (after {late} late grants)",
                        caps.min_ttl
                    ))
                }
            }
        }
        Ok(())
    }

    /// Keys of the maximum length are accepted whole: two that differ only in their last character are two locks.
    #[case(Errors, always)]
    pub async fn the_longest_keys_are_distinct_locks(t: &Target) -> CaseResult {
        let base = t.key("longest");
        let pad = |end: &str| {
            let fill = LockKey::MAX_LEN - base.as_str().len() - end.len();
            format!("{base}{}{end}", "k".repeat(fill))
        };
        // Differing in the last byte, and in a two-byte character that ends the key.
        let names = [pad("a"), pad("b"), pad("\u{e9}")];
        let mut held = Vec::new();
        for name in &names {
            let key = LockKey::new(name)?;
            let lease = match t.backend().try_acquire(&key, t.long_ttl()).await {
                Ok(AcquireOutcome::Acquired(lease)) => lease,
                Ok(AcquireOutcome::Held { .. }) => {
                    return fail(format!(
                        "a key of {} bytes was held: keys are cut short, so it shared a lock with an earlier one",
                        name.len()
                    ))
                }
                Err(e) => {
                    return fail(format!(
                        "a key of the maximum length ({} bytes) was refused: {e}",
                        name.len()
                    ))
                }
            };
            ensure!(
                holder_fence(t, &key).await? == Some(lease.fence().get()),
                "inspecting a key of the maximum length does not show its holder"
            );
            held.push(lease);
        }
        for lease in &held {
            ensure!(
                t.backend().release_lease(lease).await? == ReleaseOutcome::Released,
                "releasing a key of the maximum length answered not held"
            );
        }
        Ok(())
    }

    /// Wrong credentials fail at once, as a non-retryable authentication error that never shows them.
    #[case(Errors, needs_wrong_credentials)]
    pub async fn wrong_credentials_fail_fast_without_showing_them(t: &Target) -> CaseResult {
        let Some((secret, connect)) = t.wrong_credentials() else {
            return Err(CaseError::Skipped("no wrong credentials".into()));
        };
        let started = Instant::now();
        let outcome = timeout(Duration::from_secs(10), connect()).await;
        let took = started.elapsed();
        let err = match outcome {
            Err(_) => return fail("connecting with wrong credentials hung for 10 s"),
            Ok(Ok(_)) => return fail("the server accepted the wrong credentials"),
            Ok(Err(err)) => err,
        };
        ensure!(
            err.kind() == ErrorKind::Authentication && !err.is_retryable(),
            "wrong credentials gave a {:?} error (retryable: {}): {err}",
            err.kind(),
            err.is_retryable()
        );
        ensure!(took < Duration::from_secs(3), "the refusal took {took:?}");
        let mut shown = format!("{err} {err:?}");
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            shown.push_str(&format!(" {cause} {cause:?}"));
            source = cause.source();
        }
        ensure!(
            !shown.contains(secret.as_str()),
            "the error shows the secret: {shown}"
        );
        Ok(())
    }
}
