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
        const TASKS: usize = 8;
        const PER_TASK: usize = 8;
        let key = t.key("contention");
        let ttl = t.long_ttl();
        let inside = Arc::new(AtomicU32::new(0));
        let overlaps = Arc::new(AtomicU32::new(0));
        let last_fence = Arc::new(Mutex::new(0u64));
        let fence_errors = Arc::new(Mutex::new(Vec::<String>::new()));
        let give_up = Instant::now() + Duration::from_secs(90);
        let work = (0..TASKS).map(|_| {
            let (key, inside, overlaps, last_fence, fence_errors) = (
                key.clone(),
                inside.clone(),
                overlaps.clone(),
                last_fence.clone(),
                fence_errors.clone(),
            );
            async move {
                let mut done = 0;
                while done < PER_TASK {
                    if Instant::now() > give_up {
                        return fail("contention did not finish in time");
                    }
                    let Some(lease) = try_acquire(t, &key, ttl).await? else {
                        sleep(Duration::from_millis(1 + rand::random::<u64>() % 3)).await;
                        continue;
                    };
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    {
                        let mut last = last_fence.lock().unwrap_or_else(|p| p.into_inner());
                        if lease.fence().get() <= *last {
                            fence_errors
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(format!("fence {} after {}", lease.fence(), *last));
                        }
                        *last = (*last).max(lease.fence().get());
                    }
                    sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    t.backend().release(lease.key(), lease.owner()).await?;
                    done += 1;
                }
                Ok(())
            }
        });
        for r in join_all(work).await {
            r?;
        }
        let overlaps = overlaps.load(Ordering::SeqCst);
        ensure!(overlaps == 0, "two holders overlapped {overlaps} times");
        let fence_errors = fence_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        ensure!(
            fence_errors.is_empty(),
            "fences did not increase with each holder: {fence_errors:?}"
        );
        Ok(())
    }
}
