//! Several keys under one lock (`LockClient::lock_all`): all or nothing, never part
//! of a set held while it waits, no deadlock between opposite orders, a loss of any key
//! signalled, and each key's fence rising as a single key's does.

use super::support::*;

/// Whether `key` is free on the target's server: a fresh grant succeeds (and is given
/// back at once).
async fn is_free(t: &Target, key: &LockKey) -> Result<bool, CaseError> {
    match try_acquire(t, key, t.long_ttl()).await? {
        Some(lease) => {
            t.backend().release(lease.key(), lease.owner()).await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Polls until every key of `keys` is free, for up to `within`: what a cancelled or
/// given-back set must come to.
async fn all_free_within(t: &Target, keys: &[&LockKey], within: Duration) -> CaseResult {
    let give_up = Instant::now() + within;
    loop {
        let mut held = Vec::new();
        for key in keys {
            if !is_free(t, key).await? {
                held.push(key.as_str());
            }
        }
        if held.is_empty() {
            return Ok(());
        }
        if Instant::now() > give_up {
            return fail(format!("still held after {within:?}: {held:?}"));
        }
        sleep(Duration::from_millis(50)).await;
    }
}

cases! {
    /// A set with one key held elsewhere is taken all or not at all, and holds none of its other keys while it waits.
    #[case(Client, always)]
    pub async fn set_is_taken_all_or_nothing(t: &Target) -> CaseResult {
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let (a, b, c) = (t.key("set-a"), t.key("set-b"), t.key("set-c"));
        let names = [a.as_str(), b.as_str(), c.as_str()];
        let holder = acquire(t, &b, t.long_ttl()).await?;
        // Tried once: nothing held afterwards.
        if let Ok(set) = client.try_lock_all(names).await? {
            return fail(format!("a set was granted while {b} was held: {set:?}"));
        }
        ensure!(
            is_free(t, &a).await? && is_free(t, &c).await?,
            "a refused try_lock_all left part of the set held"
        );
        // Waiting: the rest of the set is not held while it waits.
        let waiting = client.lock_all(names, Duration::from_secs(20));
        let meanwhile = async {
            sleep(Duration::from_millis(300)).await;
            let free = is_free(t, &a).await? && is_free(t, &c).await?;
            t.backend().release(&b, holder.owner()).await?;
            Ok::<_, CaseError>(free)
        };
        let (set, free_while_waiting) = tokio::join!(waiting, meanwhile);
        let set = set?;
        ensure!(
            free_while_waiting?,
            "lock_all held part of the set while it waited for {b}"
        );
        for key in [&a, &b, &c] {
            let fence = set.fence(key.as_str());
            ensure!(
                fence.map(|f| f.get()) == holder_fence(t, key).await?,
                "{key}: the set's fence {fence:?} is not the server's"
            );
        }
        ensure!(set.is_held(), "a fresh set was not held: {:?}", set.loss());
        set.release().await?;
        all_free_within(t, &[&a, &b, &c], Duration::from_secs(2)).await
    }

    /// Where a backend takes a set in one step, a refused set changes nothing, a granted one holds every key with the server's fences, and the step takes one acquisition's round trips.
    #[case(Client, needs_atomic_sets)]
    pub async fn a_set_in_one_step_is_whole_or_nothing(t: &Target) -> CaseResult {
        let ttl = t.long_ttl();
        let mut keys = [t.key("one-step-a"), t.key("one-step-b"), t.key("one-step-c")];
        keys.sort_by(|x, y| x.as_str().cmp(y.as_str()));
        let owned = |keys: &[LockKey]| -> Vec<(LockKey, OwnerToken)> {
            keys.iter().map(|k| (k.clone(), OwnerToken::random())).collect()
        };
        // A fence each key had before, to rise above.
        let mut before = Vec::new();
        for key in &keys {
            let lease = acquire(t, key, ttl).await?;
            before.push(lease.fence());
            t.backend().release(key, lease.owner()).await?;
        }
        // The middle key held elsewhere: refused, with nothing else taken.
        let holder = acquire(t, &keys[1], ttl).await?;
        match t.backend().try_acquire_all(&owned(&keys), ttl).await? {
            SetOutcome::Held { index: 1, .. } => {}
            SetOutcome::Held { index, .. } => {
                return fail(format!("the set was refused at key {index}, where key 1 is held"))
            }
            SetOutcome::Acquired(_) => {
                return fail(format!("a set was granted while {} was held", keys[1]))
            }
        }
        ensure!(
            holder_fence(t, &keys[0]).await?.is_none() && holder_fence(t, &keys[2]).await?.is_none(),
            "a refused set left part of the set held"
        );
        t.backend().release(&keys[1], holder.owner()).await?;
        // Free: every key held at once, each with the fence the server keeps for it.
        let set = owned(&keys);
        let SetOutcome::Acquired(leases) = t.backend().try_acquire_all(&set, ttl).await? else {
            return fail("a set of free keys was refused");
        };
        ensure!(leases.len() == keys.len(), "{} leases for {} keys", leases.len(), keys.len());
        for ((lease, key), earlier) in leases.iter().zip(&keys).zip(&before) {
            ensure!(lease.key() == key, "the lease of {key} names {}", lease.key());
            ensure!(
                holder_fence(t, key).await? == Some(lease.fence().get()),
                "{key}: the set's fence {} is not the server's",
                lease.fence()
            );
            ensure!(
                lease.fence() > *earlier,
                "{key}: the set's fence {} after {earlier}",
                lease.fence()
            );
        }
        for lease in &leases {
            t.backend().release_lease(lease).await?;
        }
        // One step: the round trips of one acquisition, whatever the set's size.
        if let Some((backend, meter)) = t.round_trip_meter() {
            let declared = u64::from(backend.capabilities().round_trips.acquire);
            let mut fewest = u64::MAX;
            for round in 0..4 {
                let keys: Vec<LockKey> = {
                    let mut k = [
                        t.key("one-step-trips-a"),
                        t.key("one-step-trips-b"),
                        t.key("one-step-trips-c"),
                    ];
                    k.sort_by(|x, y| x.as_str().cmp(y.as_str()));
                    k.to_vec()
                };
                sleep(Duration::from_millis(20)).await;
                let started = meter.round_trips();
                let outcome = backend.try_acquire_all(&owned(&keys), ttl).await?;
                // The first round warms the connection and the script or statement.
                if round > 0 {
                    fewest = fewest.min(meter.round_trips() - started);
                }
                if let SetOutcome::Acquired(leases) = outcome {
                    for lease in &leases {
                        backend.release_lease(lease).await?;
                    }
                }
            }
            ensure!(
                fewest <= declared,
                "a set of 3 keys took {fewest} round trips; one acquisition is declared to take {declared}"
            );
        }
        Ok(())
    }

    /// Two clients locking the same two keys in opposite orders both finish, and never hold the pair at once.
    #[case(Client, always)]
    pub async fn sets_in_opposite_orders_do_not_deadlock(t: &Target) -> CaseResult {
        let backends = backends(t, 2).await?;
        let (x, y) = (t.key("set-x"), t.key("set-y"));
        let inside = Arc::new(AtomicU32::new(0));
        let overlaps = Arc::new(AtomicU32::new(0));
        let rounds = 6;
        let runs = backends.iter().enumerate().map(|(n, backend)| {
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            let order = if n == 0 {
                [x.as_str().to_owned(), y.as_str().to_owned()]
            } else {
                [y.as_str().to_owned(), x.as_str().to_owned()]
            };
            async move {
                let client =
                    LockClient::with_options(backend.clone(), LockOptions::new(t.long_ttl()))?;
                for _ in 0..rounds {
                    let set = client.lock_all(&order, Duration::from_secs(30)).await?;
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    set.release().await?;
                }
                Ok::<_, Error>(())
            }
        });
        let bound = Duration::from_secs(60);
        let Ok(results) = timeout(bound, join_all(runs)).await else {
            return fail(format!(
                "{rounds} rounds each in opposite orders did not finish within {bound:?}"
            ));
        };
        let overlaps = overlaps.load(Ordering::SeqCst);
        ensure!(overlaps == 0, "both clients held the pair at once {overlaps} times");
        for r in results {
            r?;
        }
        Ok(())
    }

    /// Losing one key of a held set fires the set's loss signal with that key, and releasing the set says so.
    #[case(Client, needs_force_release)]
    pub async fn set_signals_the_loss_of_any_key(t: &Target) -> CaseResult {
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(3));
        let client = client(t, LockOptions::new(ttl))?;
        let (a, b) = (t.key("set-lost-a"), t.key("set-lost-b"));
        let set = client.lock_all([a.as_str(), b.as_str()], Duration::from_secs(5)).await?;
        let lost = set.lost();
        ensure!(
            operator_of(t.backend())?.force_release(&b).await?,
            "force_release found no lease on {b}"
        );
        let bound = client.options().renew_interval() + Duration::from_secs(1);
        match timeout(bound, lost).await {
            Ok(Some((key, LossReason::NotHeld))) if key == b => {}
            Ok(other) => return fail(format!("lost() gave {other:?}, not ({b}, NotHeld)")),
            Err(_) => return fail(format!("lost() did not fire within {bound:?} of the deletion")),
        }
        ensure!(!set.is_held(), "is_held() after a key was lost");
        let r = set.release().await.map_err(|e| e.kind());
        ensure!(
            r == Err(ErrorKind::NotHeld),
            "releasing a set with a lost key answered {r:?}"
        );
        all_free_within(t, &[&a], Duration::from_secs(2)).await
    }

    /// Each key's fence rises across sets and single-key grants, as a single key's does.
    #[case(Fencing, always)]
    pub async fn set_fences_rise_per_key(t: &Target) -> CaseResult {
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let (a, b) = (t.key("set-fence-a"), t.key("set-fence-b"));
        let names = [a.as_str(), b.as_str()];
        // Each key's fences in grant order: sets, with `a` alone between them.
        let (mut of_a, mut of_b) = (Vec::new(), Vec::new());
        for round in 0..3 {
            let set = client.lock_all(names, Duration::from_secs(10)).await?;
            let fences = set.fences();
            of_a.extend(fences.get(a.as_str()));
            of_b.extend(fences.get(b.as_str()));
            if round == 0 {
                // Dropped, not released: the next grant waits for the release on drop.
                drop(set);
            } else {
                set.release().await?;
            }
            let single = client.lock(a.as_str(), Duration::from_secs(10)).await?;
            of_a.push(single.fence());
            single.release().await?;
        }
        for (key, fences, grants) in [(&a, &of_a, 6), (&b, &of_b, 3)] {
            ensure!(
                fences.len() == grants && fences.windows(2).all(|w| w[0] < w[1]),
                "{key}: fences did not rise with each grant: {fences:?}"
            );
        }
        Ok(())
    }

    /// An empty set or a key named twice is an invalid-input error, holding nothing.
    #[case(Client, always)]
    pub async fn set_rejects_bad_input(t: &Target) -> CaseResult {
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let a = t.key("set-bad");
        let empty = client
            .lock_all(Vec::<String>::new(), Duration::from_secs(1))
            .await
            .map_err(|e| e.kind());
        ensure!(
            matches!(empty, Err(ErrorKind::InvalidInput)),
            "an empty set answered {empty:?}"
        );
        let twice = client
            .try_lock_all([a.as_str(), a.as_str()])
            .await
            .map_err(|e| e.kind());
        ensure!(
            matches!(twice, Err(ErrorKind::InvalidInput)),
            "a key named twice answered {twice:?}"
        );
        ensure!(is_free(t, &a).await?, "a refused set left {a} held");
        Ok(())
    }

    /// A set whose wait is cancelled midway leaves none of its keys held.
    #[case(Client, always)]
    pub async fn set_cancelled_midway_leaves_nothing_held(t: &Target) -> CaseResult {
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let (a, b, c) = (t.key("set-cancel-a"), t.key("set-cancel-b"), t.key("set-cancel-c"));
        let holder = acquire(t, &c, t.long_ttl()).await?;
        let waiting = client.lock_all([a.as_str(), b.as_str(), c.as_str()], Duration::from_secs(20));
        if let Ok(set) = timeout(Duration::from_millis(300), waiting).await {
            return fail(format!("a set was granted while {c} was held: {set:?}"));
        }
        all_free_within(t, &[&a, &b], Duration::from_secs(2)).await?;
        t.backend().release(&c, holder.owner()).await?;
        Ok(())
    }
}
