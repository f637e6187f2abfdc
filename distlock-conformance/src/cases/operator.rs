//! What operators use: listing the held locks (`distlock list`).

use distlock_core::LockClient;

use super::*;

/// A key made of `prefix` and `rest`.
fn under(prefix: &str, rest: &str) -> Result<LockKey, CaseError> {
    LockKey::new(format!("{prefix}{rest}")).map_err(|e| CaseError::Failed(e.to_string()))
}

cases! {
    /// `list(prefix)` shows exactly the keys held under the prefix, sorted, each with its holder's fence and a remaining TTL within its own: not a released or an expired key, not a key outside the prefix, not a queue's or a semaphore's records; a bad prefix is a typed error.
    #[case(Operator, needs_list)]
    pub async fn operator_list_shows_exactly_the_held_keys(t: &Target) -> CaseResult {
        let base = t.key("list");
        let prefix = format!("{base}/");
        let ttl = t.long_ttl();
        let b = acquire(t, &under(&prefix, "b")?, ttl).await?;
        let a = acquire(t, &under(&prefix, "a")?, ttl).await?;
        let released = acquire(t, &under(&prefix, "released")?, ttl).await?;
        ensure!(
            t.backend().release_lease(&released).await? == ReleaseOutcome::Released,
            "the release of a held key was not Released"
        );
        let lapsed = acquire(t, &under(&prefix, "lapsed")?, t.short_ttl()).await?;
        // Beside the prefix, not under it.
        let outside = acquire(t, &under(base.as_str(), "-outside")?, ttl).await?;
        if t.backend().fair().is_some() {
            // A waiter queued on a held key leaves a record of its own.
            let queued = t
                .backend()
                .try_acquire_in_turn(a.key(), ttl, OwnerToken::random(), ttl)
                .await?;
            ensure!(
                matches!(queued, AcquireOutcome::Held { .. }),
                "a queued waiter was granted a held key"
            );
        }
        let permit = if t.backend().permits().is_some() {
            let semaphore = LockClient::with_options(t.backend().clone(), LockOptions::new(ttl)).and_then(|c| c.semaphore(&format!("{prefix}permits"), 2))?;
            let Ok(permit) = semaphore.try_acquire().await? else {
                return fail("a fresh semaphore of 2 refused its first permit");
            };
            Some(permit)
        } else {
            None
        };
        sleep(lapsed.valid_until().saturating_duration_since(Instant::now()) + t.expiry_slack())
            .await;

        let listed = t.backend().list(&prefix).await?;
        let names: Vec<&str> = listed.iter().map(|(k, _)| k.as_str()).collect();
        let wanted = [a.key().as_str(), b.key().as_str()];
        ensure!(names == wanted, "list({prefix:?}) gave {names:?}, not {wanted:?}");
        for ((key, info), lease) in listed.iter().zip([&a, &b]) {
            ensure!(
                info.fence == lease.fence(),
                "{key} listed with fence {}, held with {}",
                info.fence,
                lease.fence()
            );
            ensure!(
                !info.remaining.is_zero() && info.remaining <= ttl,
                "{key} listed with {:?} left of a {ttl:?} ttl",
                info.remaining
            );
        }
        let everything = t.backend().list("").await?;
        for key in [a.key(), b.key(), outside.key()] {
            ensure!(
                everything.iter().any(|(k, _)| k == key),
                "list(\"\") left out {key}"
            );
        }
        let bad = t.backend().list("bad\nprefix").await.map(|_| ()).map_err(|e| e.kind());
        ensure!(
            bad == Err(ErrorKind::InvalidKey),
            "a prefix with a control character gave {bad:?}"
        );
        if let Some(permit) = permit {
            permit.release().await?;
        }
        for lease in [a, b, outside] {
            t.backend().release_lease(&lease).await?;
        }
        Ok(())
    }
}
