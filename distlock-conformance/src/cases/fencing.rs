//! Fencing (contract point 6).

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
}
