//! Fair mode (contract point 10): the key's queue on the server, across clients; and
//! re-entrant holds, which the client keeps on any backend.

use super::support::*;
use distlock_core::backend::{ChangeStream, Handoff};
use futures_util::StreamExt;

/// A client in fair mode on `backend`, with a TTL that does not run out in a case.
fn fair_client(t: &Target, backend: &Arc<DynLockBackend>) -> Result<LockClient, CaseError> {
    let options = LockOptions::new(t.long_ttl()).with_fair(true);
    Ok(LockClient::with_options(backend.clone(), options)?)
}

/// Grants recorded in the order they happened, with how many grants there had been
/// when each waiter asked.
#[derive(Default)]
struct Ledger {
    grants: Mutex<Vec<usize>>,
}

impl Ledger {
    fn count(&self) -> usize {
        self.grants.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn granted(&self, who: usize) {
        self.grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(who);
    }

    fn order(&self) -> Vec<usize> {
        self.grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// How far apart the cases start waiters whose order is checked: far more than a round
/// trip, so that their first calls reach the server in the order they were made.
const APART: Duration = Duration::from_millis(300);

cases! {
    /// Waiters on several clients are granted in the order they asked, ahead of a releaser that asks again at once.
    #[case(Fairness, needs_fair)]
    pub async fn fair_waiters_are_granted_in_the_order_they_asked(t: &Target) -> CaseResult {
        let key = t.key("fair-order");
        let backends = backends(t, 4).await?;
        // Each client waits once beforehand, so that what a first wait sets up (a
        // connection to listen on, with its TLS handshake and authentication) is not
        // counted in the order the waiters ask in: 300 ms apart is their asking, not
        // their connecting.
        let warm = t.key("fair-order-warm");
        for backend in &backends {
            let guard = fair_client(t, backend)?
                .lock(warm.as_str(), Duration::from_secs(10))
                .await?;
            guard.release().await?;
        }
        let holder = acquire(t, &key, t.long_ttl()).await?;
        let ledger = Arc::new(Ledger::default());
        let waiters = backends.iter().enumerate().map(|(n, backend)| {
            let (client, key, ledger) = (fair_client(t, backend), key.clone(), ledger.clone());
            async move {
                sleep(APART * u32::try_from(n).unwrap_or(0)).await;
                let guard = client?.lock(key.as_str(), Duration::from_secs(30)).await?;
                ledger.granted(n);
                sleep(Duration::from_millis(20)).await;
                guard.release().await?;
                Ok::<_, CaseError>(())
            }
        });
        let last = backends.len();
        let releaser = async {
            sleep(APART * u32::try_from(last).unwrap_or(0)).await;
            t.backend().release_lease(&holder).await?;
            // Asks again at once: it asked last, so it is served last.
            let guard = fair_client(t, t.backend())?
                .lock(key.as_str(), Duration::from_secs(30))
                .await?;
            ledger.granted(last);
            guard.release().await?;
            Ok::<_, CaseError>(())
        };
        let (waited, released) = tokio::join!(join_all(waiters), releaser);
        for w in waited {
            w?;
        }
        released?;
        let expected: Vec<usize> = (0..=last).collect();
        let order = ledger.order();
        ensure!(
            order == expected,
            "the waiters, asking {APART:?} apart in the order {expected:?}, were granted in the order {order:?}"
        );
        Ok(())
    }

    /// Under sustained contention no fair waiter sees more grants to others than there are other waiters, plus one.
    #[case(Fairness, needs_fair)]
    pub async fn fair_waiters_do_not_starve(t: &Target) -> CaseResult {
        const WAITERS: usize = 3;
        const ROUNDS: usize = 6;
        // A waiter takes its place only once its wait is set up (the watch for its
        // turn subscribed first, so that no turn is missed), which on a loaded machine
        // can take tens of milliseconds. Each hold outlasts that, so that the others
        // cannot go round twice before a waiter that asked has its place: what is
        // counted is the queue's order, not the client's set-up time.
        const HOLD: Duration = Duration::from_millis(60);
        let key = t.key("fair-starve");
        let backends = backends(t, WAITERS).await?;
        // Held while the waiters make their first calls (setting up a wait can take
        // more than a round trip), so that every wait counted starts in the queue.
        let holder = acquire(t, &key, t.long_ttl()).await?;
        let ledger = Arc::new(Ledger::default());
        let worst = Arc::new(Mutex::new((0usize, 0usize)));
        let work = backends.iter().enumerate().map(|(n, backend)| {
            let (client, key, ledger, worst) =
                (fair_client(t, backend), key.clone(), ledger.clone(), worst.clone());
            async move {
                let client = client?;
                for _ in 0..ROUNDS {
                    let asked = ledger.count();
                    let guard = client.lock(key.as_str(), Duration::from_secs(30)).await?;
                    let others = ledger.count() - asked;
                    ledger.granted(n);
                    {
                        let mut w = worst.lock().unwrap_or_else(|p| p.into_inner());
                        if others > w.0 {
                            *w = (others, n);
                        }
                    }
                    sleep(HOLD).await;
                    // Asks again at once: the others are queued by then.
                    guard.release().await?;
                }
                Ok::<_, CaseError>(())
            }
        });
        let release = async {
            sleep(APART).await;
            t.backend().release_lease(&holder).await
        };
        let (waited, released) = tokio::join!(join_all(work), release);
        released?;
        for r in waited {
            r?;
        }
        let (others, who) = *worst.lock().unwrap_or_else(|p| p.into_inner());
        // Each of the other waiters may be served once before a waiter's turn; one more
        // for a grant already on its way when the waiter asked.
        ensure!(
            others < WAITERS + 1,
            "waiter {who} saw {others} grants to others while it waited, with only {} other waiters (grants in order: {:?})",
            WAITERS - 1,
            ledger.order()
        );
        Ok(())
    }

    /// A queued waiter that stops calling keeps its place until its place runs out, then leaves the queue.
    #[case(Fairness, needs_fair)]
    pub async fn a_vanished_waiter_leaves_the_queue(t: &Target) -> CaseResult {
        let key = t.key("fair-vanished");
        let capabilities = t.capabilities();
        let place = capabilities.ttl_at_least(Duration::from_secs(1));
        let holder = acquire(t, &key, t.long_ttl()).await?;
        // The vanished waiter: it joins the queue once and is never heard of again.
        let vanished_at = Instant::now();
        let joined = t
            .backend()
            .try_acquire_in_turn(&key, t.long_ttl(), OwnerToken::random(), place)
            .await?;
        ensure!(
            matches!(joined, AcquireOutcome::Held { .. }),
            "a held key was granted to a queued waiter"
        );
        let options = LockOptions::new(t.long_ttl())
            .with_fair(true)
            .with_queue_place(place);
        let client = client(t, options)?;
        let bound = place * 2 + capabilities.ttl_granularity + Duration::from_secs(2);
        let next = async {
            sleep(Duration::from_millis(100)).await;
            let guard = client.lock(key.as_str(), bound).await;
            (guard, vanished_at.elapsed())
        };
        let release = async {
            sleep(Duration::from_millis(200)).await;
            t.backend().release_lease(&holder).await
        };
        let ((guard, after), released) = tokio::join!(next, release);
        released?;
        let guard = match guard {
            Ok(guard) => guard,
            Err(e) => {
                return fail(format!(
                    "the next waiter was never granted the free key: the vanished waiter (place {place:?}) still blocked the queue after {after:?}: {e}"
                ))
            }
        };
        guard.release().await?;
        ensure!(
            after + Duration::from_millis(50) >= place,
            "the next waiter was granted {after:?} after the vanished waiter joined, before its place of {place:?} ran out"
        );
        Ok(())
    }

    /// A fair waiter that gives up (its deadline passed, or a try found the key held) leaves the queue at once.
    #[case(Fairness, needs_fair)]
    pub async fn a_waiter_that_gives_up_leaves_the_queue_at_once(t: &Target) -> CaseResult {
        let key = t.key("fair-give-up");
        let place = t.capabilities().ttl_at_least(Duration::from_secs(3));
        let holder = acquire(t, &key, t.long_ttl()).await?;
        let options = LockOptions::new(t.long_ttl())
            .with_fair(true)
            .with_queue_place(place);
        let quitter = client(t, options.clone())?;
        let gave_up = quitter.lock(key.as_str(), Duration::from_millis(300)).await;
        ensure!(
            matches!(&gave_up, Err(e) if e.kind() == ErrorKind::Timeout),
            "a wait for a held key ended with {:?}, not a timeout",
            gave_up.map(|g| g.fence())
        );
        ensure!(
            quitter.try_lock(key.as_str()).await?.is_err(),
            "a fair try was granted a held key"
        );
        let next = client(t, options)?;
        let waiting = async {
            let guard = next.lock(key.as_str(), place * 3).await?;
            Ok::<_, Error>((guard, Instant::now()))
        };
        let release = async {
            sleep(Duration::from_millis(300)).await;
            let at = Instant::now();
            t.backend().release_lease(&holder).await.map(|_| at)
        };
        let (waited, released) = tokio::join!(waiting, release);
        let ((guard, granted_at), released_at) = (waited?, released?);
        guard.release().await?;
        let handoff = granted_at.saturating_duration_since(released_at);
        ensure!(
            handoff < place / 2,
            "the next waiter was granted {handoff:?} after the release: the waiters that gave up still held their places ({place:?})"
        );
        Ok(())
    }

    /// A release hands the key to the first live waiter of its queue in its own step: that waiter learns its fence with no request, its validity counted from before the release, and a waiter that gives up passes it on.
    #[case(Fairness, needs_fair_handoff)]
    pub async fn a_release_hands_the_key_to_the_head_of_its_queue(t: &Target) -> CaseResult {
        let key = t.key("fair-handoff");
        let (ttl, place) = (t.long_ttl(), t.capabilities().ttl_at_least(Duration::from_secs(10)));
        let backend = t.backend();
        let holder = acquire(t, &key, ttl).await?;
        let (head, next) = (OwnerToken::random(), OwnerToken::random());
        let mut head_wakes = fair_of(backend)?.watch_in_turn(&key, &head).await?;
        let mut next_wakes = fair_of(backend)?.watch_in_turn(&key, &next).await?;
        for owner in [head, next] {
            let step = backend.try_acquire_in_turn(&key, ttl, owner, place).await?;
            ensure!(
                matches!(step, AcquireOutcome::Held { .. }),
                "a fair step was granted a held key: {step:?}"
            );
        }
        let released_at = Instant::now();
        ensure!(
            backend.release_lease(&holder).await? == ReleaseOutcome::Released,
            "the holder's release found nothing held"
        );
        let handed = handed_over(t, &mut head_wakes, &key, head).await?;
        ensure!(
            handed.fence > holder.fence(),
            "the grant handed over has fence {:?}, not above the releaser's {:?}",
            handed.fence,
            holder.fence()
        );
        ensure!(
            handed.granted_after <= released_at,
            "the grant handed over counts its validity from {:?} after the release was sent: later than the grant",
            handed.granted_after.saturating_duration_since(released_at)
        );
        let shown = backend.inspect(&key).await?;
        ensure!(
            shown.as_ref().map(|info| info.fence) == Some(handed.fence),
            "after the handoff the server shows {:?}, not the fence handed over ({:?})",
            shown.as_ref().map(|info| info.fence),
            handed.fence
        );
        // The validity the waiter counts (the shorter of its TTL and its place, from
        // before its last step) is no more than the server keeps.
        let counted = (handed.granted_after + ttl.min(place)).saturating_duration_since(Instant::now());
        let on_server = shown.map(|info| info.remaining).unwrap_or_default();
        ensure!(
            on_server + t.expiry_slack() >= counted,
            "the grant handed over counts {counted:?} of validity; the server keeps {on_server:?}"
        );
        ensure!(
            try_acquire(t, &key, ttl).await?.is_none(),
            "a plain acquire took the key handed to the head of the queue"
        );
        ensure!(
            handed_now(backend, &key, next).is_none(),
            "the second waiter was handed the key the head holds"
        );
        // The head gives up before it uses the key: the next waiter gets it.
        fair_of(backend)?.leave_queue(&key, &head).await?;
        let passed = handed_over(t, &mut next_wakes, &key, next).await?;
        ensure!(
            passed.fence > handed.fence,
            "the grant passed on has fence {:?}, not above {:?}",
            passed.fence,
            handed.fence
        );
        ensure!(
            backend.release(&key, &next).await? == ReleaseOutcome::Released,
            "the waiter the key was passed to does not hold it"
        );
        ensure!(
            backend.inspect(&key).await?.is_none(),
            "the key is still held after its last waiter released it"
        );
        Ok(())
    }

    /// Fair and racing clients contending for one key never hold it at once, and fences rise.
    #[case(MutualExclusion, needs_fair)]
    pub async fn fair_and_racing_waiters_never_overlap(t: &Target) -> CaseResult {
        let key = t.key("fair-mixed");
        // A fair try while a racing client holds the key: refused.
        let racing = client(t, LockOptions::new(t.long_ttl()))?
            .lock(key.as_str(), Duration::from_secs(10))
            .await?;
        let fair = client(t, LockOptions::new(t.long_ttl()).with_fair(true))?;
        let early = fair.try_lock(key.as_str()).await?;
        ensure!(
            early.is_err(),
            "a fair try was granted while another held the key (a racing client's grant)"
        );
        racing.release().await?;
        let backends = backends(t, 4).await?;
        let inside = Arc::new(AtomicU32::new(0));
        let problems = Arc::new(Mutex::new(Vec::<String>::new()));
        let last_fence = Arc::new(Mutex::new(0u64));
        let work = backends.iter().enumerate().map(|(n, backend)| {
            let options = LockOptions::new(t.long_ttl()).with_fair(n % 2 == 0);
            let client = LockClient::with_options(backend.clone(), options);
            let (key, inside, problems, last_fence) =
                (key.clone(), inside.clone(), problems.clone(), last_fence.clone());
            async move {
                let client = client?;
                for _ in 0..5 {
                    let guard = client.lock(key.as_str(), Duration::from_secs(30)).await?;
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        problems.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                            "client {n} (fair: {}) was granted while another held the key",
                            n % 2 == 0
                        ));
                    }
                    {
                        let mut last = last_fence.lock().unwrap_or_else(|p| p.into_inner());
                        if !t.fence_rose(FencingToken::new(*last), guard.fence()) {
                            problems.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                                "fence {} after {}",
                                guard.fence(),
                                *last
                            ));
                        }
                        *last = (*last).max(guard.fence().get());
                    }
                    sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await?;
                }
                Ok::<_, CaseError>(())
            }
        });
        let results = join_all(work).await;
        // An overlap first: the error it causes later (a holder's release answering
        // not held) is its consequence.
        let problems = problems.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ensure!(problems.is_empty(), "{problems:?}");
        for r in results {
            r?;
        }
        Ok(())
    }

    /// Re-entered holds share one lease and fence; the lease is released only when the last hold ends.
    #[case(Client, always)]
    pub async fn reentrant_holds_count_and_the_last_release_frees(t: &Target) -> CaseResult {
        let key = t.key("reentrant");
        // Another client, with queues and holds of its own.
        let other = client(t, LockOptions::new(t.long_ttl()))?;
        let client = client(t, LockOptions::new(t.long_ttl()))?;
        let (outer, inner, spawned_got_it) = client
            .reentrant(async {
                let outer = client.lock(key.as_str(), Duration::from_secs(5)).await?;
                // Asked again in the scope: no wait, the same lease.
                let inner = client.lock(key.as_str(), Duration::ZERO).await?;
                // A task spawned from the scope is outside it: it must wait like anyone.
                let spawned = {
                    let (client, key) = (client.clone(), key.clone());
                    tokio::spawn(async move { client.try_lock(key.as_str()).await })
                };
                let spawned_got_it = match spawned.await {
                    Ok(got) => got?.is_ok(),
                    Err(e) => return fail(format!("the spawned task failed: {e}")),
                };
                Ok::<_, CaseError>((outer, inner, spawned_got_it))
            })
            .await?;
        ensure!(!spawned_got_it, "a task spawned from a re-entrant scope was granted the key the scope holds");
        ensure!(
            inner.fence() == outer.fence() && outer.holds() == 2,
            "the re-entered hold has fence {} beside {} and {} holds, not 2",
            inner.fence(),
            outer.fence(),
            outer.holds()
        );
        let third = outer.reenter()?;
        ensure!(third.holds() == 3, "a third hold counts {} holds", third.holds());
        inner.release().await?;
        drop(third);
        ensure!(
            other.try_lock(key.as_str()).await?.is_err(),
            "the key was free while one hold of it remained"
        );
        ensure!(
            holder_fence(t, &key).await? == Some(outer.fence().get()),
            "the server's holder changed while one hold remained"
        );
        let fence = outer.fence();
        outer.release().await?;
        let Ok(next) = other.try_lock(key.as_str()).await? else {
            return fail("the key was still held after its last hold was released");
        };
        ensure!(
            t.fence_rose(fence, next.fence()),
            "the next holder's fence {} is not above the re-entered lease's {fence}",
            next.fence()
        );
        next.release().await?;
        Ok(())
    }

    /// A fair step retried by an owner that holds the key already (its reply lost) is granted again with a waiter queued behind it, and restarts the expiry its validity is counted from.
    #[case(Fairness, needs_fair)]
    pub async fn a_retried_fair_step_restarts_the_expiry_it_counts_from(t: &Target) -> CaseResult {
        let key = t.key("retried-fair-step");
        // Long enough that a grant on a loaded ensemble still arrives within it: the
        // case is about the retry's expiry, not the grant's latency.
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(2));
        let place = t.long_ttl();
        let (owner, behind) = (OwnerToken::random(), OwnerToken::random());
        let backend = t.backend();
        let AcquireOutcome::Acquired(_lost) =
            backend.try_acquire_in_turn(&key, ttl, owner, place).await?
        else {
            return fail("a fresh key was held");
        };
        // Another waiter queues behind the holder: its place is older than any the
        // holder's retry could make.
        if let AcquireOutcome::Acquired(lease) =
            backend.try_acquire_in_turn(&key, ttl, behind, place).await?
        {
            backend.release_lease(&lease).await?;
            return fail("a held key was granted to a second fair waiter");
        }
        sleep(ttl / 2).await;
        let retried = match backend.try_acquire_in_turn(&key, ttl, owner, place).await? {
            AcquireOutcome::Acquired(lease) => lease,
            AcquireOutcome::Held { .. } => {
                backend.release(&key, &owner).await?;
                fair_of(backend)?.leave_queue(&key, &behind).await?;
                return fail(
                    "the holder's own retried fair step was refused while a waiter was queued behind it: the key stays held by nobody working until its ttl",
                );
            }
        };
        let result = outlasts_its_retry(t, &retried, &mut |key: &LockKey, ttl: Duration| {
            Box::pin(async move {
                match backend.try_acquire_in_turn(key, ttl, behind, place).await? {
                    AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
                    AcquireOutcome::Held { .. } => Ok(None),
                }
            })
        })
        .await;
        fair_of(backend)?.leave_queue(&key, &behind).await?;
        result
    }
}

/// Waits (up to ten seconds) for `owner`, a fair waiter watching `wakes`, to be handed
/// `key` by a release.
async fn handed_over(
    t: &Target,
    wakes: &mut Option<ChangeStream>,
    key: &LockKey,
    owner: OwnerToken,
) -> Result<Handoff, CaseError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(handoff) = handed_now(t.backend(), key, owner) {
            return Ok(handoff);
        }
        if Instant::now() >= deadline {
            return fail(format!(
                "no grant was handed to the head of {key}'s queue within 10 s of the release"
            ));
        }
        // A wake, or a look again soon: a backend may tell of a grant before it wakes.
        match wakes {
            Some(stream) => {
                let _ = timeout(Duration::from_millis(50), stream.next()).await;
            }
            None => sleep(Duration::from_millis(50)).await,
        }
    }
}

/// What `backend` heard was handed to `owner` on `key`, taken once; `None` where
/// it hears of no handoffs.
fn handed_now(backend: &DynLockBackend, key: &LockKey, owner: OwnerToken) -> Option<Handoff> {
    backend.fair()?.handoffs()?.handed_over(key, &owner)
}
