//! The kinds beyond the mutex under faults, on the memory backend with the clock
//! paused: a grant applied whose reply is lost, retried by the same owner; a holder
//! gone without a release. The conformance suite runs the same promises on real
//! servers; here each is exact to the millisecond.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, Claim, ExtendRequest, Grant, LockInfo, OwnerToken,
    PermitBackend, PermitHolder, ReleaseOutcome, Renewal, Term,
};
use distlock_core::{
    Error, ErrorKind, LockBackend, LockClient, LockKey, LockOptions, MemoryBackend, Result,
    ResumeToken,
};

const WAIT: Duration = Duration::from_secs(1);

/// The memory backend, whose next `lose` grant steps (a lock's or a claim's) are
/// applied on the "server" and then answered with a retryable error, as a reply lost
/// on the way back is.
#[derive(Debug, Clone)]
struct LosesReplies {
    inner: MemoryBackend,
    lose: Arc<AtomicU32>,
    refuse_releases: Arc<AtomicU32>,
    renewals: Arc<AtomicU32>,
    /// Grant steps to fail retryably before they reach the "server".
    fail_grants: Arc<AtomicU32>,
    /// Grant steps to hold 2 s on their way (a stalled server), then apply.
    stall_grants: Arc<AtomicU32>,
    /// Lost replies that were a grant's.
    lost_grants: Arc<AtomicU32>,
}

impl LosesReplies {
    fn new(inner: MemoryBackend) -> Self {
        LosesReplies {
            inner,
            lose: Arc::default(),
            refuse_releases: Arc::default(),
            renewals: Arc::default(),
            fail_grants: Arc::default(),
            stall_grants: Arc::default(),
            lost_grants: Arc::default(),
        }
    }

    /// Before a grant step reaches the "server": a retryable error for each of the
    /// failures asked for, then a 2 s stall for each of the stalls.
    async fn on_the_way(&self) -> Result<()> {
        let take = |n: &AtomicU32| {
            n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        };
        if take(&self.fail_grants) {
            return Err(Error::new(
                ErrorKind::Timeout,
                "the step's lease ran out before its grant was written",
            ));
        }
        if take(&self.stall_grants) {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        Ok(())
    }

    /// Refuses the next `n` releases (a lock's or a claim's) before they are sent, as
    /// a connection that cannot be made refuses them.
    fn refuse_next_releases(&self, n: u32) {
        self.refuse_releases.store(n, Ordering::SeqCst);
    }

    /// The refusal's error, where a release is to be refused.
    fn refused(&self) -> Result<()> {
        let refused = self
            .refuse_releases
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refused {
            return Err(
                Error::new(ErrorKind::Unavailable, "the connection was refused").with_not_sent(),
            );
        }
        Ok(())
    }

    /// Loses the replies of the next `n` grant steps.
    fn lose_next(&self, n: u32) {
        self.lose.store(n, Ordering::SeqCst);
    }

    /// `answer`, or the lost reply's error where one is to be lost.
    fn answer(&self, answer: Result<Grant>) -> Result<Grant> {
        let lost = self
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if lost {
            if matches!(answer, Ok(Grant::Granted(_))) {
                self.lost_grants.fetch_add(1, Ordering::SeqCst);
            }
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the connection closed before the reply (the request was applied)",
            ));
        }
        answer
    }
}

#[async_trait]
impl LockBackend for LosesReplies {
    fn name(&self) -> &str {
        "memory-loses-replies"
    }
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.on_the_way().await?;
        self.answer(self.inner.try_grant(request).await)
    }
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.refused()?;
        self.inner.release(key, owner).await
    }
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(request).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.inner.inspect(key).await
    }
    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.inner.watch(key).await
    }
    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }
}

#[async_trait]
impl PermitBackend for LosesReplies {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        self.on_the_way().await?;
        let inner = self.inner.permits().expect("memory has permits");
        self.answer(inner.try_grant_permits(request, claim).await)
    }
    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.refused()?;
        let inner = self.inner.permits().expect("memory has permits");
        inner.release_permits(key, owner).await
    }
    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.permits().expect("memory has permits");
        inner.renew_permits(request).await
    }
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let inner = self.inner.permits().expect("memory has permits");
        inner.leave_queue(key, owner).await
    }
    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        let inner = self.inner.permits().expect("memory has permits");
        inner.proclaim(key, owner, value).await
    }
    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let inner = self.inner.permits().expect("memory has permits");
        inner.holders(key).await
    }
    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        let inner = self.inner.permits().expect("memory has permits");
        inner.terms(key, after).await
    }
    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let inner = self.inner.permits().expect("memory has permits");
        inner.watch_permits(key).await
    }
}

/// `backend`, or, `over_a_lease`, `backend` with its permits hidden, so that its
/// elections run over a lease.
fn as_kind(backend: LosesReplies, over_a_lease: bool) -> Arc<distlock_core::DynLockBackend> {
    if over_a_lease {
        Arc::new(NoPermits(backend))
    } else {
        Arc::new(backend)
    }
}

/// A term led by a process that then stops as a crash stops it: its resume token.
async fn crashed_term(backend: Arc<distlock_core::DynLockBackend>, name: &str) -> ResumeToken {
    let crashed = LockClient::with_options(
        backend,
        LockOptions::new(Duration::from_secs(30)).with_auto_renew(false),
    )
    .expect("a client");
    let term = crashed
        .election(name)
        .expect("an election")
        .campaign("a", WAIT)
        .await
        .expect("elected");
    let token = term.resume_token();
    std::mem::forget(term);
    token
}

/// A resume whose grant was applied but whose reply was lost, retried by the service
/// (the error is retryable), leads the term; the cleanup the lost attempt armed never
/// deletes it under the resumed leader, so no rival is elected while it leads. On an
/// election that records terms (permits) and on one over a lease.
#[tokio::test(start_paused = true)]
async fn a_resume_retried_after_a_lost_reply_keeps_its_term() {
    for over_a_lease in [false, true] {
        let memory = MemoryBackend::new();
        let name = "resumed-after-a-lost-reply";
        let sound = || as_kind(LosesReplies::new(memory.clone()), over_a_lease);
        let token = crashed_term(sound(), name).await;
        let faulty = LosesReplies::new(memory.clone());
        let restarted = LockClient::new(as_kind(faulty.clone(), over_a_lease))
            .election(name)
            .expect("an election");
        assert_eq!(restarted.records_terms(), !over_a_lease);

        faulty.lose_next(1);
        let lost = restarted.resume(&token, "a").await;
        let error = lost.map(|_| ()).expect_err("the reply was lost");
        assert!(error.is_retryable(), "{error}");
        let resumed = restarted
            .resume(&token, "a")
            .await
            .expect("the retry answers")
            .expect("the live term resumes");
        assert_eq!(resumed.fence(), token.fence());

        // Past every pass of the lost attempt's cleanup (0, 0.25, 1.25, 6.25 s).
        let rival = LockClient::new(sound())
            .election(name)
            .expect("an election");
        for _ in 0..80 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let elected = rival.try_campaign("b").await.expect("an answer");
            if let Ok(rival_term) = elected {
                panic!(
                    "a rival was elected (fence {}) while the resumed leader (fence {}) held its term: is_held {} (over a lease: {over_a_lease})",
                    rival_term.fence(),
                    resumed.fence(),
                    resumed.is_held()
                );
            }
            assert!(resumed.is_held());
        }
        resumed.resign().await.expect("resigned");
    }
}

/// The memory backend (behind a [`LosesReplies`]) with its permits hidden.
#[derive(Debug)]
struct NoPermits(LosesReplies);

#[async_trait]
impl LockBackend for NoPermits {
    fn name(&self) -> &str {
        "memory-no-permits"
    }
    fn capabilities(&self) -> &Capabilities {
        self.0.capabilities()
    }
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.0.try_grant(request).await
    }
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.0.release(key, owner).await
    }
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.0.renew(request).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.0.inspect(key).await
    }
}

/// A dropped guard's release that fails (its connection refused) is sent again on the
/// cleanup's schedule: the key is free within seconds, not at its TTL. For a lock and
/// for a semaphore's permit.
#[tokio::test(start_paused = true)]
async fn a_dropped_guards_failed_release_is_sent_again() {
    let memory = MemoryBackend::new();
    let faulty = LosesReplies::new(memory.clone());
    let client = LockClient::new(Arc::new(faulty.clone()));
    let ttl = client.options().ttl();

    let guard = client.lock("dropped", WAIT).await.expect("locked");
    faulty.refuse_next_releases(2);
    drop(guard);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let key = LockKey::new("dropped").expect("key");
    assert_eq!(
        memory
            .inspect(&key)
            .await
            .expect("inspect")
            .map(|i| i.fence),
        None,
        "the lock was still held 2 s after its guard was dropped (its ttl is {ttl:?})"
    );

    let permits = client.semaphore("dropped-permit", 1).expect("a semaphore");
    let permit = permits.acquire(WAIT).await.expect("a permit");
    faulty.refuse_next_releases(2);
    drop(permit);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let other = LockClient::new(Arc::new(memory.clone()))
        .semaphore("dropped-permit", 1)
        .expect("a semaphore");
    assert!(
        other.try_acquire().await.expect("an answer").is_ok(),
        "the permit was still held 2 s after its guard was dropped (its ttl is {ttl:?})"
    );
}

/// A job's runner that crashes mid-job (its runtime gone: no release, no renewal)
/// keeps its slot on the server until the least hold has passed from the grant, not
/// only until its TTL: a host that fires the same slot late skips it. Real time: the
/// runner's runtime is shut down as a crash ends it.
#[test]
fn a_runner_that_crashes_mid_job_keeps_its_slot_for_the_least_hold() {
    let memory = MemoryBackend::new();
    let ttl = Duration::from_millis(600);
    let at_least = Duration::from_secs(3);
    let runtime = |_| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let runner = runtime(());
    let granted = std::time::Instant::now();
    runner.block_on(async {
        let client = LockClient::with_options(Arc::new(memory.clone()), LockOptions::new(ttl))
            .expect("a client");
        tokio::spawn(async move {
            client
                .run_once("jobs/slot", at_least, |_| std::future::pending::<()>())
                .await
        });
        // Into the job, past a renewal or two.
        tokio::time::sleep(Duration::from_millis(900)).await;
    });
    // The crash: the runner's tasks are dropped, and nothing it would send is sent.
    runner.shutdown_background();

    let late_host = runtime(());
    late_host.block_on(async {
        let host = LockClient::with_options(Arc::new(memory.clone()), LockOptions::new(ttl))
            .expect("a client");
        let kept_until = granted + at_least;
        // Short of the least hold (less room for the grant's own trip), the slot is
        // taken; a little past it, free.
        while std::time::Instant::now() + Duration::from_millis(100) < kept_until {
            let late = host
                .run_once("jobs/slot", at_least, |_| async {})
                .await
                .expect("an answer");
            assert!(
                late.is_err(),
                "the slot ran again {:?} after its runner's grant, within the least hold of {at_least:?} (ttl {ttl:?})",
                granted.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(kept_until.saturating_duration_since(std::time::Instant::now()))
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let next = host.try_lock("jobs/slot").await.expect("an answer");
        assert!(next.is_ok(), "the slot was still taken past its least hold");
    });
}

/// Idle holders of a semaphore's permits renew at a bounded rate however busy the
/// name: each change to the name (a claimant taking and giving back a permit, here
/// 800 times in 8 s) wakes every holder's watch, and the checks so asked are coalesced
/// to at most one per quarter renewal interval. Before, every holder renewed on every
/// change.
#[tokio::test(start_paused = true)]
async fn holders_renew_at_a_bounded_rate_beside_a_churning_claimant() {
    let memory = MemoryBackend::new();
    let counted = LosesReplies::new(memory.clone());
    let options = LockOptions::new(Duration::from_secs(3));
    let interval = options.renew_interval();
    let holders_client =
        LockClient::with_options(Arc::new(counted.clone()), options.clone()).expect("a client");
    let permits = holders_client.semaphore("busy", 50).expect("a semaphore");
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(permits.acquire(WAIT).await.expect("a permit"));
    }
    let churning = LockClient::with_options(Arc::new(memory.clone()), options)
        .expect("a client")
        .semaphore("busy", 50)
        .expect("a semaphore");
    let run = Duration::from_secs(8);
    let started = tokio::time::Instant::now();
    let before = counted.renewals.load(Ordering::SeqCst);
    let mut cycles = 0u32;
    while started.elapsed() < run {
        let permit = churning.acquire(WAIT).await.expect("a permit");
        permit.release().await.expect("released");
        cycles += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let renewals = counted.renewals.load(Ordering::SeqCst) - before;
    let elapsed = started.elapsed().as_secs_f64();
    let per_holder_per_second = f64::from(renewals) / 20.0 / elapsed;
    // The bound: one renewal per interval, and one change-asked check per quarter of
    // it, per holder (and one of each for the edges of the run).
    let per_interval = 5.0 / interval.as_secs_f64();
    let bound = 20.0 * (per_interval * elapsed + 2.0);
    eprintln!(
        "{cycles} claimant cycles; 20 holders renewed {renewals} times in {elapsed:.1} s: {per_holder_per_second:.2} per holder per second"
    );
    assert!(
        f64::from(renewals) <= bound,
        "20 idle holders renewed {renewals} times in {elapsed:.1} s beside {cycles} claimant cycles ({per_holder_per_second:.2} per holder per second; the bound is {bound:.0})"
    );
    for permit in held {
        assert!(permit.is_held());
        permit.release().await.expect("released");
    }
}

/// A hold bounded by `hold_at_most` renews no more once a renewal has ended its lease
/// at the bound: later renewals could only ask for the same end. Before, the renewal
/// loop's "try again by halfway" ran on toward the validity's end, renewing at halving
/// intervals (seven renewals in the last 30 ms of one hold, found by the simulation).
#[tokio::test(start_paused = true)]
async fn a_bounded_hold_stops_renewing_once_its_lease_ends_at_the_bound() {
    let counted = LosesReplies::new(MemoryBackend::new());
    let ttl = Duration::from_secs(3);
    let most = Duration::from_millis(2500);
    let options = LockOptions::new(ttl).with_hold_at_most(most);
    let interval = options.renew_interval();
    let client = LockClient::with_options(Arc::new(counted.clone()), options).expect("a client");
    let guard = client.lock("bounded", WAIT).await.expect("the lock");
    let granted = tokio::time::Instant::now();
    let lost = guard.lost().await;
    let held = granted.elapsed();
    let renewals = counted.renewals.load(Ordering::SeqCst);
    // One renewal per interval up to the bound; the one that reached it cut short.
    let scheduled = u32::try_from(most.as_millis() / interval.as_millis()).unwrap_or(u32::MAX);
    assert!(
        renewals <= scheduled,
        "a hold bounded at {most:?} (renewal interval {interval:?}) renewed {renewals} times \
         before its loss ({lost:?}) after {held:?}; at most {scheduled} are of use"
    );
    assert!(
        held <= most,
        "the hold was told of its bound only after {held:?}"
    );
}

/// The memory backend whose renewals take the next of `delays` each (then none) on
/// their way to the server, and are applied when they arrive: a pooled or proxied
/// connection on which a later request can overtake an earlier one.
#[derive(Debug)]
struct OvertakingRenewals {
    inner: MemoryBackend,
    delays: std::sync::Mutex<std::collections::VecDeque<Duration>>,
}

#[async_trait]
impl LockBackend for OvertakingRenewals {
    fn name(&self) -> &str {
        "memory-overtaking-renewals"
    }
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.inner.try_grant(request).await
    }
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let delay = self
            .delays
            .lock()
            .expect("delays")
            .pop_front()
            .unwrap_or_default();
        let (inner, request) = (self.inner.clone(), request.clone());
        // On its way: applied when it arrives, whether or not the caller still waits.
        let applied = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            inner.renew(&request).await
        });
        applied.await.expect("the renewal's trip")
    }
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.inner.inspect(key).await
    }
}

/// An extend whose caller gave up on it (a time-out around it) while its request is on
/// its way keeps the next extend waiting until it is answered: the next cannot be
/// applied first and then be overwritten by it, which would leave the client counting
/// the longer validity the server no longer keeps.
#[tokio::test(start_paused = true)]
async fn a_cancelled_extend_is_never_overtaken_by_the_next() {
    let memory = MemoryBackend::new();
    let backend = Arc::new(OvertakingRenewals {
        inner: memory.clone(),
        delays: std::sync::Mutex::new([Duration::from_millis(200)].into()),
    });
    let client = LockClient::with_options(
        backend,
        LockOptions::new(Duration::from_secs(30)).with_auto_renew(false),
    )
    .expect("a client");
    let guard = client.lock("overtaken", WAIT).await.expect("locked");
    let (short, long) = (Duration::from_secs(5), Duration::from_secs(60));
    // The short extend, given up on after 50 ms while its request is on its way.
    let given_up = tokio::time::timeout(Duration::from_millis(50), guard.extend(short)).await;
    assert!(given_up.is_err(), "the slow extend answered within 50 ms");
    guard.extend(long).await.expect("extended");
    // Past the slow request's arrival.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counted = guard
        .valid_until()
        .saturating_duration_since(tokio::time::Instant::now());
    let key = LockKey::new("overtaken").expect("key");
    let on_server = memory
        .inspect(&key)
        .await
        .expect("inspect")
        .map(|info| info.remaining)
        .unwrap_or_default();
    assert!(
        counted <= on_server + Duration::from_millis(10),
        "the guard counts {counted:?} after extends to {short:?} (given up) and {long:?}; the server keeps {on_server:?}"
    );
    guard.release().await.expect("released");
}

/// A term a leader loop led: its fence, when it began, and when it ended.
type LedTerm = (u64, tokio::time::Instant, Option<tokio::time::Instant>);

/// A leader loop whose backend fails its steps retryably, loses a reply and stalls
/// keeps campaigning through all of it and leads, and never while a rival leads: the
/// terms never overlap, and each term's fence is above the last. On an election that
/// records terms and on one over a lease.
#[tokio::test(start_paused = true)]
async fn a_leader_loop_campaigns_through_retryable_errors_lost_replies_and_stalls() {
    use std::sync::Mutex;

    for over_a_lease in [false, true] {
        let memory = MemoryBackend::new();
        let name = "loop-through-faults";
        let faulty = LosesReplies::new(memory.clone());
        // Held by a rival first, so that the loop's first steps find it held, then
        // fail, lose their reply and stall.
        let rival = LockClient::new(as_kind(LosesReplies::new(memory.clone()), over_a_lease))
            .election(name)
            .expect("an election");
        let first = rival.campaign("rival", WAIT).await.expect("elected");
        let terms: Arc<Mutex<Vec<LedTerm>>> = Arc::default();
        let looped = LockClient::new(as_kind(faulty.clone(), over_a_lease))
            .election(name)
            .expect("an election")
            .leader_loop("looped")
            .expect("a loop")
            .with_retry(Duration::from_millis(100));
        faulty.fail_grants.store(3, Ordering::SeqCst);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(looped.run(
            {
                let terms = terms.clone();
                move |term| {
                    let terms = terms.clone();
                    async move {
                        let n = {
                            let mut all = terms.lock().expect("terms");
                            all.push((term.fence().get(), tokio::time::Instant::now(), None));
                            all.len() - 1
                        };
                        let _ = term.lost().await;
                        terms.lock().expect("terms")[n].2 = Some(tokio::time::Instant::now());
                    }
                }
            },
            async move {
                let _ = stopped.await;
            },
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rival_fence = first.fence().get();
        let rival_ended = tokio::time::Instant::now();
        first.resign().await.expect("resigned");
        // No await before these: the loop's next step, woken by the resignation, is
        // the one that stalls and whose grant's reply is lost.
        assert_eq!(
            faulty.fail_grants.load(Ordering::SeqCst),
            0,
            "every failure was met"
        );
        faulty.stall_grants.store(1, Ordering::SeqCst);
        faulty.lose.store(1, Ordering::SeqCst);
        // The loop's steps meet every fault, and it leads within a few retries.
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(
            !running.is_finished(),
            "the loop stopped campaigning: {:?}",
            running.await
        );
        let led = terms.lock().expect("terms").clone();
        assert!(
            !led.is_empty(),
            "the loop never led after the rival resigned (over a lease: {over_a_lease})"
        );
        for (fence, started, _) in &led {
            assert!(
                *started >= rival_ended,
                "the loop led (fence {fence}) while the rival's term (fence {rival_fence}) lasted"
            );
            assert!(
                *fence > rival_fence,
                "fence {fence} after the rival's {rival_fence}"
            );
        }
        assert_eq!(
            faulty.lost_grants.load(Ordering::SeqCst),
            1,
            "the lost reply was a grant's"
        );
        assert_eq!(
            faulty.stall_grants.load(Ordering::SeqCst),
            0,
            "the stall was met"
        );
        // While the loop leads, a rival is never elected.
        assert!(
            rival
                .try_campaign("rival")
                .await
                .expect("an answer")
                .is_err(),
            "a rival was elected while the loop led"
        );
        stop.send(()).expect("the loop runs");
        running.await.expect("the loop").expect("shut down");
    }
}

/// What the docs of `Election::resume` warn of: two live processes that resume one
/// token both lead its term, with one fence. (Not a guarantee to keep: the behaviour a
/// service must avoid by handing a token to one process only.)
#[tokio::test(start_paused = true)]
async fn two_processes_resuming_one_token_both_lead_with_one_fence() {
    let memory = MemoryBackend::new();
    let name = "resumed-twice";
    let token = crashed_term(Arc::new(memory.clone()), name).await;
    let first = LockClient::new(Arc::new(memory.clone()))
        .election(name)
        .expect("an election")
        .resume(&token, "a")
        .await
        .expect("an answer")
        .expect("resumed");
    let second = LockClient::new(Arc::new(memory.clone()))
        .election(name)
        .expect("an election")
        .resume(&token, "a")
        .await
        .expect("an answer")
        .expect("resumed again");
    assert_eq!(first.fence(), second.fence());
    assert!(first.is_held() && second.is_held());
    second.resign().await.expect("resigned");
}

/// The memory backend whose grants are answered `late` after they are applied, and
/// whose change watches never finish setting up (a server that stalls them).
#[derive(Debug)]
struct LateGrantsStalledWatch {
    inner: MemoryBackend,
    late: Duration,
    renewals: AtomicU32,
}

#[async_trait]
impl LockBackend for LateGrantsStalledWatch {
    fn name(&self) -> &str {
        "memory-late-grants"
    }
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        let grant = self.inner.try_grant(request).await;
        tokio::time::sleep(self.late).await;
        grant
    }
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(request).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.inner.inspect(key).await
    }
    async fn watch(&self, _key: &LockKey) -> Result<Option<ChangeStream>> {
        std::future::pending().await
    }
}

/// A grant answered late has used up much of its validity before its first renewal
/// is due: the guard renews by halfway to its loss all the same, however long the
/// change watch takes to set up. Before, the watch's set-up was bounded by the first
/// renewal's time alone, so a holder whose grant came back late worked past its loss
/// point, unrenewed and not told (the simulation's seed 109866: a request's handler
/// acted after its permit had gone from the server).
#[tokio::test(start_paused = true)]
async fn a_late_grant_is_renewed_before_its_loss_while_the_watch_sets_up() {
    let backend = Arc::new(LateGrantsStalledWatch {
        inner: MemoryBackend::new(),
        late: Duration::from_secs(2),
        renewals: AtomicU32::new(0),
    });
    let options = LockOptions::new(Duration::from_secs(3));
    let client = LockClient::with_options(backend.clone(), options).expect("a client");
    let sent = tokio::time::Instant::now();
    let guard = client
        .try_lock("late")
        .await
        .expect("an answer")
        .expect("the lock");
    assert!(
        sent.elapsed() >= Duration::from_secs(2),
        "the grant was answered late"
    );
    // Counted from the request, the validity runs out about 3 s after it was sent,
    // and the loss is signalled a margin (0.3 s) before: a renewal must land first.
    tokio::time::sleep_until(sent + Duration::from_millis(2800)).await;
    assert!(
        backend.renewals.load(Ordering::SeqCst) >= 1 && guard.is_held(),
        "{} renewals, held: {}, {:?} after the request",
        backend.renewals.load(Ordering::SeqCst),
        guard.is_held(),
        sent.elapsed()
    );
    guard.release().await.expect("released");
}
