//! Mutual exclusion (contract point 1).

use super::*;

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
}
