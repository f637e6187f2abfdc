//! Mutual exclusion (contract point 1).

use super::support::*;

cases! {
    /// Acquire, inspect, release and acquire again: the plain cycle works.
    #[case(MutualExclusion, always)]
    pub async fn acquire_release_cycle(t: &Target) -> CaseResult {
        let key = t.key("cycle");
        let lease = acquire(t, &key, t.long_ttl()).await?;
        ensure!(
            holder_fence(t, &key).await? == Some(lease.fence().get()),
            "inspect does not show the holder's fence"
        );
        ensure!(
            try_acquire(t, &key, t.long_ttl()).await?.is_none(),
            "a second acquire succeeded on a held key"
        );
        let released = t.backend().release(lease.key(), lease.owner()).await?;
        ensure!(
            released == ReleaseOutcome::Released,
            "release of a held lease answered {released:?}"
        );
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "the key is still held after release"
        );
        let again = acquire(t, &key, t.long_ttl()).await?;
        t.backend().release(again.key(), again.owner()).await?;
        Ok(())
    }

    /// Many tasks contend for one key: at no instant do two hold it, and fences increase.
    #[case(MutualExclusion, always)]
    pub async fn mutual_exclusion_under_contention(t: &Target) -> CaseResult {
        contend(t, &[t.backend().clone()], 8, 8).await
    }

    /// Keys that look alike (a suffix, a case, a space, wildcard and hash-tag characters) are distinct locks.
    #[case(MutualExclusion, always)]
    pub async fn keys_that_look_alike_are_distinct_locks(t: &Target) -> CaseResult {
        let base = t.key("alike");
        let base = base.as_str();
        let alike: Vec<String> = [
            String::new(),
            "/".into(),
            "/x".into(),
            " ".into(),
            "%".into(),
            "_".into(),
            "*".into(),
            "{x}".into(),
            "\u{e9}".into(),
        ]
        .into_iter()
        .map(|suffix| format!("{base}{suffix}"))
        .chain([base.to_uppercase()])
        .collect();
        let mut held = Vec::new();
        for name in &alike {
            let key = LockKey::new(name)?;
            let Some(lease) = try_acquire(t, &key, t.long_ttl()).await? else {
                return fail(format!(
                    "{name:?} was held: it was taken for one of {:?}",
                    &alike[..held.len()]
                ));
            };
            held.push(lease);
        }
        // Each release frees its own key and no other.
        for (i, lease) in held.iter().enumerate() {
            ensure!(
                t.backend().release_lease(lease).await? == ReleaseOutcome::Released,
                "releasing {:?} answered not held",
                alike[i]
            );
            for (j, other) in held.iter().enumerate().skip(i + 1) {
                ensure!(
                    holder_fence(t, other.key()).await? == Some(other.fence().get()),
                    "releasing {:?} freed {:?}",
                    alike[i],
                    alike[j]
                );
            }
        }
        Ok(())
    }
}
