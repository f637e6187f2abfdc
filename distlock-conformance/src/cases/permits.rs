//! Semaphores, read-write locks and elections: `PermitBackend`'s contract, through
//! the kinds users hold, across clients.

use std::sync::atomic::AtomicU64;

use distlock_core::backend::{
    AcquireRequest, ChangeStream, Claim, ExtendRequest, Grant, LockInfo, PermitBackend,
    PermitHolder, Renewal, Term,
};
use distlock_core::{
    FencedStoreExt as _, FencingToken, LockClient, MemoryStore, Observation, ResumeToken,
};
use futures_util::StreamExt;

use super::support::*;

/// Options for the kinds' cases: a TTL that does not run out in a case.
fn options(t: &Target) -> LockOptions {
    LockOptions::new(t.long_ttl())
}

/// Options whose lease runs out at a short TTL, without renewal.
fn lapsing(t: &Target) -> LockOptions {
    LockOptions::new(t.short_ttl()).with_auto_renew(false)
}

/// How many are inside at once, and the most there ever were.
#[derive(Default)]
struct Occupancy {
    now: AtomicU64,
    most: AtomicU64,
}

impl Occupancy {
    fn enter(&self, n: u64) -> u64 {
        let now = self.now.fetch_add(n, Ordering::SeqCst) + n;
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }

    fn leave(&self, n: u64) {
        self.now.fetch_sub(n, Ordering::SeqCst);
    }

    fn now(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn most(&self) -> u64 {
        self.most.load(Ordering::SeqCst)
    }
}

/// Fences seen, to check that no two grants share one.
#[derive(Default)]
struct Fences(Mutex<Vec<u64>>);

impl Fences {
    fn add(&self, fence: u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(fence);
    }

    fn repeated(&self) -> Option<u64> {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        all.sort_unstable();
        all.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
    }
}

/// A wait long enough for any handoff in a case.
const WAIT: Duration = Duration::from_secs(20);

/// The backend under test, counting the permit renewals sent through it.
#[derive(Debug)]
struct CountsRenewals {
    inner: Arc<DynLockBackend>,
    renewals: AtomicU64,
}

impl CountsRenewals {
    fn permits(&self) -> distlock_core::Result<&dyn PermitBackend> {
        self.inner.permits().ok_or_else(|| {
            distlock_core::Error::new(ErrorKind::Unsupported, "the backend has no permits")
        })
    }
}

#[async_trait::async_trait]
impl distlock_core::LockBackend for CountsRenewals {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn capabilities(&self) -> &distlock_core::backend::Capabilities {
        self.inner.capabilities()
    }
    async fn try_grant(&self, request: &AcquireRequest) -> distlock_core::Result<Grant> {
        self.inner.try_grant(request).await
    }
    async fn release(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<ReleaseOutcome> {
        self.inner.release(key, owner).await
    }
    async fn renew(&self, request: &ExtendRequest) -> distlock_core::Result<Renewal> {
        self.inner.renew(request).await
    }
    async fn inspect(&self, key: &LockKey) -> distlock_core::Result<Option<LockInfo>> {
        self.inner.inspect(key).await
    }
    async fn watch(&self, key: &LockKey) -> distlock_core::Result<Option<ChangeStream>> {
        self.inner.watch(key).await
    }
    fn permits(&self) -> Option<&dyn PermitBackend> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl PermitBackend for CountsRenewals {
    async fn try_grant_permits(
        &self,
        request: &AcquireRequest,
        claim: &Claim,
    ) -> distlock_core::Result<Grant> {
        self.permits()?.try_grant_permits(request, claim).await
    }
    async fn release_permits(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> distlock_core::Result<ReleaseOutcome> {
        self.permits()?.release_permits(key, owner).await
    }
    async fn renew_permits(&self, request: &ExtendRequest) -> distlock_core::Result<Renewal> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.permits()?.renew_permits(request).await
    }
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> distlock_core::Result<()> {
        self.permits()?.leave_queue(key, owner).await
    }
    async fn proclaim(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
        value: &str,
    ) -> distlock_core::Result<Renewal> {
        self.permits()?.proclaim(key, owner, value).await
    }
    async fn holders(&self, key: &LockKey) -> distlock_core::Result<Vec<PermitHolder>> {
        self.permits()?.holders(key).await
    }
    async fn terms(&self, key: &LockKey, after: u64) -> distlock_core::Result<Vec<Term>> {
        self.permits()?.terms(key, after).await
    }
    async fn watch_permits(&self, key: &LockKey) -> distlock_core::Result<Option<ChangeStream>> {
        self.permits()?.watch_permits(key).await
    }
}

cases! {
    /// Twenty idle holders of a semaphore's permits renew at a bounded rate while a claimant on another client takes and gives back a permit of the same name for 8 s: at most one renewal per renewal interval and one change-asked check per quarter of it, per holder, however many changes the name sees.
    #[case(Semaphore, needs_permits)]
    pub async fn holders_renew_at_a_bounded_rate_beside_a_churning_claimant(t: &Target) -> CaseResult {
        const HOLDERS: u32 = 20;
        let name = t.key("busy-name");
        let ttl = t.capabilities().ttl_at_least(Duration::from_secs(3));
        let counted = Arc::new(CountsRenewals {
            inner: t.backend().clone(),
            renewals: AtomicU64::new(0),
        });
        let holders = LockClient::with_options(counted.clone(), LockOptions::new(ttl))?;
        let interval = holders.options().renew_interval();
        let permits = holders.semaphore(name.as_str(), 50)?;
        let mut held = Vec::new();
        for _ in 0..HOLDERS {
            held.push(permits.acquire(WAIT).await?);
        }
        let clients = backends(t, 2).await?;
        let churning = LockClient::with_options(clients[1].clone(), LockOptions::new(ttl))?
            .semaphore(name.as_str(), 50)?;
        let run = Duration::from_secs(8);
        let started = Instant::now();
        let before = counted.renewals.load(Ordering::SeqCst);
        let mut cycles = 0u32;
        while started.elapsed() < run {
            let permit = churning.acquire(WAIT).await?;
            permit.release().await?;
            cycles += 1;
        }
        let renewals = counted.renewals.load(Ordering::SeqCst) - before;
        let elapsed = started.elapsed().as_secs_f64();
        let lost = held.iter().filter(|p| !p.is_held()).count();
        for permit in held {
            let _ = permit.release().await;
        }
        ensure!(cycles >= 20, "the claimant cycled only {cycles} times in {elapsed:.1} s: the case proves nothing");
        ensure!(lost == 0, "{lost} of the idle holders lost their permit");
        // Per holder: one renewal per interval, four change-asked checks per interval,
        // and one of each at the edges of the run.
        let per_holder = 5.0 * elapsed / interval.as_secs_f64() + 2.0;
        let bound = f64::from(HOLDERS) * per_holder;
        #[allow(clippy::cast_precision_loss)]
        let renewals = renewals as f64;
        ensure!(
            renewals <= bound,
            "{HOLDERS} idle holders renewed {renewals} times in {elapsed:.1} s beside {cycles} claimant cycles ({:.1} per holder per second; the bound is {:.1})",
            renewals / f64::from(HOLDERS) / elapsed,
            per_holder / elapsed
        );
        Ok(())
    }

    /// Tasks on several clients share a semaphore of three permits: never more than three hold, three do at once, and no fence repeats.
    #[case(Semaphore, needs_permits)]
    pub async fn permits_never_exceed_the_limit_across_clients(t: &Target) -> CaseResult {
        const LIMIT: u64 = 3;
        let name = t.key("semaphore");
        let backends = backends(t, 4).await?;
        let inside = Arc::new(Occupancy::default());
        let fences = Arc::new(Fences::default());
        let work = (0..12).map(|n| {
            let permits = LockClient::with_options(backends[n % backends.len()].clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), LIMIT as u32));
            let (inside, fences) = (inside.clone(), fences.clone());
            async move {
                let permits = permits?;
                let mut last = 0;
                for round in 0..4 {
                    let guard = permits.acquire(WAIT).await?;
                    let fence = guard.fence().get();
                    fences.add(fence);
                    if fence <= last {
                        return fail(format!("task {n} got fence {fence} after its own {last}"));
                    }
                    last = fence;
                    inside.enter(1);
                    if round == 0 {
                        // The first round holds until the limit has been reached once:
                        // a liveness claim waits for its condition (within a generous
                        // bound), never for a fixed time that a loaded machine outlasts.
                        let give_up = Instant::now() + Duration::from_secs(30);
                        while inside.most() < LIMIT && Instant::now() < give_up {
                            sleep(Duration::from_millis(5)).await;
                        }
                    } else {
                        sleep(Duration::from_millis(2 + rand::random::<u64>() % 5)).await;
                    }
                    inside.leave(1);
                    guard.release().await?;
                }
                Ok(())
            }
        });
        for r in join_all(work).await {
            r?;
        }
        ensure!(
            inside.most() <= LIMIT,
            "{} held permits at once, with a limit of {LIMIT}",
            inside.most()
        );
        ensure!(
            inside.most() == LIMIT,
            "never more than {} of {LIMIT} permits were held at once, with twelve tasks waiting",
            inside.most()
        );
        if let Some(fence) = fences.repeated() {
            return fail(format!("two grants had the fence {fence}"));
        }
        Ok(())
    }

    /// Every grant on a name gets a fence above every earlier one, across clients, permits still held and takeovers after expiry.
    #[case(Semaphore, needs_permits)]
    pub async fn permit_fences_increase_with_every_grant(t: &Target) -> CaseResult {
        let name = t.key("permit-fences");
        let backends = backends(t, 2).await?;
        let mut held = Vec::new();
        let mut last = 0;
        for round in 0..8 {
            let permits =
                LockClient::with_options(backends[round % 2].clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 2))?;
            if held.len() == 2 {
                let oldest: distlock_core::LockGuard = held.remove(0);
                oldest.release().await?;
            }
            let guard = permits.acquire(WAIT).await?;
            ensure!(
                guard.fence().get() > last,
                "round {round}: fence {} after {last}",
                guard.fence()
            );
            last = guard.fence().get();
            held.push(guard);
        }
        for guard in held {
            guard.release().await?;
        }
        // A permit that ran out is taken over with a higher fence.
        let lapsing = LockClient::with_options(backends[0].clone(), lapsing(t)).and_then(|c| c.semaphore(name.as_str(), 2))?;
        let a = lapsing.acquire(WAIT).await?;
        let b = lapsing.acquire(WAIT).await?;
        let later = LockClient::with_options(backends[1].clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 2))?;
        let taken = later.acquire(t.short_ttl() * 4 + t.expiry_slack() * 4).await?;
        ensure!(
            taken.fence() > a.fence().max(b.fence()),
            "a takeover after expiry got fence {} after {}",
            taken.fence(),
            a.fence().max(b.fence())
        );
        drop((a, b));
        taken.release().await?;
        Ok(())
    }

    /// A permit whose lease ran out frees its place for a waiter, and its late release answers not held without touching the new holder.
    #[case(Semaphore, needs_permits)]
    pub async fn an_expired_permit_frees_its_place(t: &Target) -> CaseResult {
        let name = t.key("permit-expiry");
        let lapsing = LockClient::with_options(t.backend().clone(), lapsing(t)).and_then(|c| c.semaphore(name.as_str(), 1))?;
        let waiting = LockClient::with_options(t.backend().clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 1))?;
        let old = lapsing.acquire(WAIT).await?;
        let started = Instant::now();
        let wait = t.short_ttl() * 4 + t.expiry_slack() * 4;
        let new = match waiting.acquire(wait).await {
            Ok(new) => new,
            Err(e) if e.kind() == ErrorKind::Timeout => {
                return fail(format!(
                    "the expired permit's place was not freed: no grant within {wait:?} of a permit held for {:?}: {e}",
                    t.short_ttl()
                ))
            }
            Err(e) => return Err(e.into()),
        };
        let took = started.elapsed();
        ensure!(
            took + Duration::from_millis(50) >= t.short_ttl() / 2,
            "a permit held for {:?} was granted to another after {took:?}",
            t.short_ttl()
        );
        ensure!(old.loss().is_some(), "the old holder was not told it lost its permit");
        match old.release().await {
            Err(e) if e.kind() == ErrorKind::NotHeld => {}
            other => return fail(format!("releasing a lapsed permit gave {other:?}, not NotHeld")),
        }
        let holders = waiting.holders().await?;
        ensure!(
            holders.len() == 1 && holders[0].fence == new.fence(),
            "after a late release the holders are {holders:?}"
        );
        new.release().await?;
        Ok(())
    }

    /// A claim that gives another limit than the held permits of its name is a configuration error, and is accepted once none is held.
    #[case(Semaphore, needs_permits)]
    pub async fn a_limit_that_differs_is_refused(t: &Target) -> CaseResult {
        let name = t.key("permit-limit");
        let two = LockClient::with_options(t.backend().clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 2))?;
        let three = LockClient::with_options(t.backend().clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 3))?;
        let held = two.acquire(WAIT).await?;
        match three.try_acquire().await {
            Err(e) if e.kind() == ErrorKind::Configuration => {}
            other => {
                return fail(format!(
                    "a claim with a limit of 3 on a name held with 2 gave {:?}",
                    other.map(|g| g.map(|g| g.fence()))
                ))
            }
        }
        held.release().await?;
        let now = three.try_acquire().await?;
        ensure!(now.is_ok(), "a free name refused a claim with a new limit");
        Ok(())
    }

    /// A waiting claim for many permits is granted while tasks keep taking single permits.
    #[case(Semaphore, needs_permits)]
    pub async fn a_large_claim_is_not_starved_by_small_ones(t: &Target) -> CaseResult {
        let name = t.key("permit-starve");
        let backends = backends(t, 3).await?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Three tasks keep at least one permit of four held at every instant.
        let small = (0..3).map(|n| {
            let permits =
                LockClient::with_options(backends[n].clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 4));
            let stop = stop.clone();
            async move {
                let permits = permits?;
                sleep(Duration::from_millis(40 * n as u64)).await;
                while !stop.load(Ordering::SeqCst) {
                    let guard = permits.acquire(WAIT).await?;
                    sleep(Duration::from_millis(120)).await;
                    guard.release().await?;
                }
                Ok::<_, CaseError>(())
            }
        });
        let large = async {
            sleep(Duration::from_millis(500)).await;
            let permits = LockClient::with_options(t.backend().clone(), options(t)).and_then(|c| c.semaphore(name.as_str(), 4))?;
            let started = Instant::now();
            let outcome = permits.acquire_many(4, Duration::from_secs(8)).await;
            stop.store(true, Ordering::SeqCst);
            let guard = match outcome {
                Ok(guard) => guard,
                Err(e) => return fail(format!("a claim of all four permits was starved: {e}")),
            };
            let took = started.elapsed();
            guard.release().await?;
            Ok::<_, CaseError>(took)
        };
        let (smalls, large) = tokio::join!(join_all(small), large);
        for r in smalls {
            r?;
        }
        large?;
        Ok(())
    }

    /// Readers and writers on several clients: never a reader with a writer, never two writers, and readers do share.
    #[case(ReadWrite, needs_permits)]
    pub async fn never_a_reader_with_a_writer(t: &Target) -> CaseResult {
        let name = t.key("rwlock");
        let backends = backends(t, 3).await?;
        let readers = Arc::new(Occupancy::default());
        let writers = Arc::new(Occupancy::default());
        let clashes = Arc::new(Mutex::new(Vec::<String>::new()));
        let work = (0..9).map(|n| {
            let lock = LockClient::with_options(backends[n % backends.len()].clone(), options(t)).and_then(|c| c.rw_lock(name.as_str()));
            let (readers, writers, clashes) = (readers.clone(), writers.clone(), clashes.clone());
            async move {
                let lock = lock?;
                let writer = n % 3 == 0;
                for round in 0..4 {
                    let clash = |what: String| {
                        clashes.lock().unwrap_or_else(|p| p.into_inner()).push(what);
                    };
                    if writer {
                        let guard = lock.write(WAIT).await?;
                        let (w, r) = (writers.enter(1), readers.now());
                        if w > 1 || r > 0 {
                            clash(format!("a writer with {} other writers and {r} readers", w - 1));
                        }
                        sleep(Duration::from_millis(5)).await;
                        writers.leave(1);
                        guard.release().await?;
                    } else {
                        let guard = lock.read(WAIT).await?;
                        readers.enter(1);
                        if writers.now() > 0 {
                            clash("a reader with a writer".to_owned());
                        }
                        let hold = if round == 0 { 150 } else { 5 };
                        sleep(Duration::from_millis(hold)).await;
                        if writers.now() > 0 {
                            clash("a writer came in under a reader".to_owned());
                        }
                        readers.leave(1);
                        guard.release().await?;
                    }
                }
                Ok::<_, CaseError>(())
            }
        });
        for r in join_all(work).await {
            r?;
        }
        let clashes = clashes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        ensure!(clashes.is_empty(), "{} clashes: {:?}", clashes.len(), &clashes[..clashes.len().min(5)]);
        ensure!(readers.most() >= 2, "readers never held the lock together (at most {})", readers.most());
        Ok(())
    }

    /// A writer waiting for a reader holds back new readers, and is granted once the reader leaves.
    #[case(ReadWrite, needs_permits)]
    pub async fn a_waiting_writer_holds_back_new_readers(t: &Target) -> CaseResult {
        let name = t.key("rw-writer-first");
        let backends = backends(t, 3).await?;
        let lock = |n: usize| LockClient::with_options(backends[n].clone(), options(t)).and_then(|c| c.rw_lock(name.as_str()));
        let (first, writer, late) = (lock(0)?, lock(1)?, lock(2)?);
        let reading = first.read(WAIT).await?;
        let waiting = async { writer.write(WAIT).await };
        let meanwhile = async {
            // Well after the writer's first call.
            sleep(Duration::from_millis(500)).await;
            let late_read = late.try_read().await?;
            let held_back = late_read.is_err();
            if let Ok(guard) = late_read {
                guard.release().await?;
            }
            reading.release().await?;
            Ok::<_, CaseError>(held_back)
        };
        let (written, held_back) = tokio::join!(waiting, meanwhile);
        let written = written?;
        ensure!(held_back?, "a new reader was granted while a writer waited");
        ensure!(late.try_read().await?.is_err(), "a reader was granted under a writer");
        written.release().await?;
        let after = late.try_read().await?;
        ensure!(after.is_ok(), "a reader was refused once the writer left");
        Ok(())
    }

    /// A writer that gave up waiting no longer holds back readers.
    #[case(ReadWrite, needs_permits)]
    pub async fn a_writer_that_gives_up_no_longer_holds_back_readers(t: &Target) -> CaseResult {
        let name = t.key("rw-gave-up");
        // A place that outlasts the case: one the writer's leave did not end holds
        // readers back for as long as the case looks.
        let place = Duration::from_secs(20);
        let lock = LockClient::with_options(t.backend().clone(), options(t).with_queue_place(place)).and_then(|c| c.rw_lock(name.as_str()))?;
        let reading = lock.read(WAIT).await?;
        match lock.write(Duration::from_millis(300)).await {
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            other => {
                return fail(format!(
                    "a write under a reader gave {:?}",
                    other.map(|g| g.fence())
                ))
            }
        }
        // Leaving is sent in the background as the wait ends: done once flushed. A
        // step of the writer's still in flight at its deadline may land after that,
        // and is left again by the cleanup's later passes (the last 6.25 s on).
        flushed(lock.flush()).await?;
        let give_up = Instant::now() + Duration::from_secs(8);
        let read = loop {
            if let Ok(guard) = lock.try_read().await? {
                break guard;
            }
            if Instant::now() > give_up {
                return fail("readers were held back for 8 s by a writer that gave up");
            }
            sleep(Duration::from_millis(20)).await;
        };
        read.release().await?;
        reading.release().await?;
        Ok(())
    }

    /// Candidates on several clients campaign in turn: one leader at a time, each term's fence above the last.
    #[case(Election, always)]
    pub async fn one_leader_at_a_time_across_clients(t: &Target) -> CaseResult {
        let name = t.key("election");
        let backends = backends(t, 3).await?;
        let leaders = Arc::new(Occupancy::default());
        let last = Arc::new(Mutex::new(0u64));
        let work = (0..6).map(|n| {
            let election = LockClient::with_options(backends[n % backends.len()].clone(), options(t)).and_then(|c| c.election(name.as_str()));
            let (leaders, last) = (leaders.clone(), last.clone());
            async move {
                let election = election?;
                for _ in 0..3 {
                    let term = election.campaign(&format!("candidate-{n}"), WAIT).await?;
                    let at_once = leaders.enter(1);
                    let fence = term.fence().get();
                    let previous = std::mem::replace(&mut *last.lock().unwrap_or_else(|p| p.into_inner()), fence);
                    sleep(Duration::from_millis(3)).await;
                    leaders.leave(1);
                    term.resign().await?;
                    if at_once > 1 {
                        return fail(format!("{at_once} leaders at once"));
                    }
                    if fence <= previous {
                        return fail(format!("a term's fence {fence} after {previous}"));
                    }
                }
                Ok(())
            }
        });
        for r in join_all(work).await {
            r?;
        }
        Ok(())
    }

    /// A leader loop cut off from the server is replaced within its TTL and one renewal; the old leader's work is dropped when its term is lost, before its validity ends and before the new leader starts; and a fenced store refuses the old leader's late write.
    #[case(Election, needs_links)]
    pub async fn a_cut_off_leader_loop_is_replaced_and_its_work_stopped(t: &Target) -> CaseResult {
        let name = t.key("leader-loop");
        let ttl = fault_ttl(t);
        let options = LockOptions::new(ttl);
        let (linked, link) = linked(t).await?;
        let other = backends(t, 2).await?.pop().unwrap_or_else(|| t.backend().clone());
        let store = MemoryStore::new();
        let resource = "leader-output";

        // The old leader's work: writes under its term's fence, then works on, noting
        // how long its term is valid, until it is dropped.
        let old_fence = Arc::new(Mutex::new(None));
        let valid = Arc::new(Mutex::new(None::<Instant>));
        let dropped = Arc::new(Mutex::new(None::<Instant>));
        let old = LockClient::with_options(linked.clone(), options.clone())?
            .election(name.as_str())?
            .leader_loop("old")?;
        let old_health = old.health();
        let (stop_old, old_stopped) = tokio::sync::oneshot::channel::<()>();
        let old_run = tokio::spawn({
            let (store, old_fence, valid, dropped) =
                (store.clone(), old_fence.clone(), valid.clone(), dropped.clone());
            old.run(
                move |term| {
                    let (store, old_fence, valid, dropped) =
                        (store.clone(), old_fence.clone(), valid.clone(), dropped.clone());
                    async move {
                        let _noted = NoteDrop(dropped);
                        *old_fence.lock().unwrap_or_else(|p| p.into_inner()) = Some(term.fence());
                        let wrote = store.write(resource, term.fence(), b"old").await;
                        if wrote.is_ok() {
                            loop {
                                *valid.lock().unwrap_or_else(|p| p.into_inner()) = Some(term.valid_until());
                                sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                },
                async move {
                    let _ = old_stopped.await;
                },
            )
        });
        let give_up = Instant::now() + Duration::from_secs(20);
        while !old_health.is_leading() {
            if Instant::now() > give_up {
                return fail("the first leader loop never led");
            }
            sleep(Duration::from_millis(10)).await;
        }
        let new_fence = Arc::new(Mutex::new(None::<(distlock_core::FencingToken, Instant)>));
        let new = LockClient::with_options(other, options)?
            .election(name.as_str())?
            .leader_loop("new")?;
        let new_health = new.health();
        let (stop_new, new_stopped) = tokio::sync::oneshot::channel::<()>();
        let new_run = tokio::spawn({
            let new_fence = new_fence.clone();
            new.run(
                move |term| {
                    let new_fence = new_fence.clone();
                    async move {
                        *new_fence.lock().unwrap_or_else(|p| p.into_inner()) = Some((term.fence(), Instant::now()));
                        term.lost().await;
                    }
                },
                async move {
                    let _ = new_stopped.await;
                },
            )
        });
        sleep(Duration::from_millis(300)).await;
        ensure!(!new_health.is_leading(), "two leader loops led at once");

        link.cut().await.map_err(link_err("cut"))?;
        let cut_at = Instant::now();
        let bound = ttl + ttl / 3 + t.expiry_slack() * 2 + Duration::from_secs(2);
        let taken = loop {
            if let Some(taken) = *new_fence.lock().unwrap_or_else(|p| p.into_inner()) {
                break taken;
            }
            if cut_at.elapsed() > bound * 2 {
                let _ = link.heal().await;
                return fail(format!("no new leader within {:?} of the cut", bound * 2));
            }
            sleep(Duration::from_millis(10)).await;
        };
        let (fence, led_at) = taken;
        let after = led_at - cut_at;
        let dropped_at = *dropped.lock().unwrap_or_else(|p| p.into_inner());
        let old_fence = *old_fence.lock().unwrap_or_else(|p| p.into_inner());
        let valid = *valid.lock().unwrap_or_else(|p| p.into_inner());
        link.heal().await.map_err(link_err("heal"))?;
        ensure!(
            after <= bound,
            "the new leader led {after:?} after the cut: more than the ttl {ttl:?} and a renewal"
        );
        let Some(dropped_at) = dropped_at else {
            return fail("the old leader's work was not dropped when the new leader started");
        };
        ensure!(
            dropped_at <= led_at,
            "the old leader's work ran {:?} into the new leader's term",
            dropped_at - led_at
        );
        if let Some(valid) = valid {
            ensure!(
                dropped_at <= valid,
                "the old leader's work was dropped {:?} after its term's validity ended",
                dropped_at - valid
            );
        }
        let Some(old_fence) = old_fence else {
            return fail("the old leader's work never ran");
        };
        ensure!(fence > old_fence, "the new term's fence {fence} is not above the old {old_fence}");
        // The new leader writes; the old leader's late write is refused.
        store.write(resource, fence, b"new").await?;
        let late = store.write(resource, old_fence, b"late").await;
        ensure!(
            late.as_ref().map_err(|e| e.kind()) == Err(ErrorKind::StaleFence),
            "the old leader's late write answered {late:?}"
        );

        let _ = (stop_old.send(()), stop_new.send(()));
        for run in [old_run, new_run] {
            match timeout(Duration::from_secs(30), run).await {
                Ok(Ok(result)) => result?,
                Ok(Err(e)) => return fail(format!("a leader loop panicked: {e}")),
                Err(_) => return fail("a leader loop did not shut down within 30 s"),
            }
        }
        Ok(())
    }

    /// Observers on two clients see every term of quick successive leaders, in order, each once, then the vacancy.
    #[case(Election, needs_terms)]
    pub async fn observers_see_every_term_in_order(t: &Target) -> CaseResult {
        const TERMS: usize = 6;
        let name = t.key("observed");
        let backends = backends(t, 2).await?;
        // Observers that look rarely: only the record of terms lets them see them all.
        let slow = options(t).with_backoff(Duration::from_secs(1), Duration::from_secs(1));
        let mut observers = Vec::new();
        for backend in &backends {
            let election = LockClient::with_options(backend.clone(), slow.clone()).and_then(|c| c.election(name.as_str()))?;
            let mut observer = election.observe();
            match timeout(WAIT, observer.next()).await {
                Ok(Some(Ok(Observation::Vacant))) => {}
                other => return fail(format!("a new election was first observed as {other:?}")),
            }
            observers.push(observer);
        }
        let candidates = LockClient::with_options(t.backend().clone(), options(t)).and_then(|c| c.election(name.as_str()))?;
        let mut elected = Vec::new();
        for n in 0..TERMS {
            let term = candidates.campaign(&format!("leader-{n}"), WAIT).await?;
            elected.push((term.fence(), term.value().to_owned()));
            term.resign().await?;
        }
        for (i, observer) in observers.iter_mut().enumerate() {
            let mut seen = Vec::new();
            let give_up = Instant::now() + WAIT;
            loop {
                let left = give_up.saturating_duration_since(Instant::now());
                match timeout(left, observer.next()).await {
                    Ok(Some(Ok(Observation::Elected(leader)))) => seen.push((leader.fence, leader.value)),
                    Ok(Some(Ok(Observation::Vacant))) if seen.len() >= TERMS => break,
                    Ok(Some(Ok(Observation::Vacant))) => {}
                    Ok(Some(Ok(other))) => {
                        return fail(format!("observer {i} saw {other:?} after {} terms", seen.len()))
                    }
                    Ok(Some(Err(e))) if e.is_retryable() => {}
                    Ok(Some(Err(e))) => return fail(format!("observer {i}: {e}")),
                    Ok(None) => return fail(format!("observer {i}'s stream ended")),
                    Err(_) => {
                        return fail(format!(
                            "observer {i} saw no vacancy after the last resignation; it saw {seen:?}"
                        ))
                    }
                }
            }
            ensure!(
                seen == elected,
                "observer {i} saw {seen:?}; the terms were {elected:?}"
            );
        }
        Ok(())
    }

    /// A leader proclaims a new value: observers see it as the same term's new value, and the election's leader shows it; once the term is over, a proclaim is refused (not held) and changes nothing its successor's observers read.
    #[case(Election, needs_terms)]
    pub async fn a_leader_proclaims_within_its_term_only(t: &Target) -> CaseResult {
        let name = t.key("proclaimed");
        let client = LockClient::with_options(t.backend().clone(), options(t))?;
        let election = client.election(name.as_str())?;
        let mut observer = election.observe();
        match timeout(WAIT, observer.next()).await {
            Ok(Some(Ok(Observation::Vacant))) => {}
            other => return fail(format!("a new election was first observed as {other:?}")),
        }
        let mut first = election.campaign("10.0.0.1:80", WAIT).await?;
        match first.proclaim("10.0.0.1:81").await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                first.resign().await?;
                return Err(CaseError::Skipped(format!("the backend cannot proclaim: {e}")));
            }
            Err(e) => return Err(e.into()),
        }
        ensure!(first.value() == "10.0.0.1:81", "the leadership kept {:?}", first.value());
        let mut seen = Vec::new();
        let give_up = Instant::now() + WAIT;
        while !seen.iter().any(|(_, v): &(FencingToken, String)| v == "10.0.0.1:81") {
            let left = give_up.saturating_duration_since(Instant::now());
            match timeout(left, observer.next()).await {
                Ok(Some(Ok(Observation::Elected(l) | Observation::Proclaimed(l)))) => {
                    seen.push((l.fence, l.value));
                }
                Ok(Some(Ok(other))) => return fail(format!("the observer saw {other:?} after {seen:?}")),
                Ok(Some(Err(e))) if e.is_retryable() => {}
                Ok(Some(Err(e))) => return fail(format!("the observer: {e}")),
                Ok(None) => return fail("the observer's stream ended"),
                Err(_) => return fail(format!("no observer saw the proclaimed value; it saw {seen:?}")),
            }
        }
        ensure!(
            seen.iter().all(|(fence, _)| *fence == first.fence()),
            "a proclaim was seen as another term: {seen:?}, the term's fence {}",
            first.fence()
        );
        let shown = election.leader().await?.map(|l| l.value);
        ensure!(
            shown.as_deref() == Some("10.0.0.1:81"),
            "the election's leader showed {shown:?} after the proclaim"
        );
        first.resign().await?;

        // A leader whose term runs out at a short TTL, without renewal; another's term
        // begins; the old leader's proclaim changes nothing.
        let lapsing = LockClient::with_options(t.backend().clone(), lapsing(t))?;
        let mut old = lapsing.election(name.as_str())?.campaign("10.0.0.3:80", WAIT).await?;
        let second = election.campaign("10.0.0.2:80", WAIT).await?;
        let late = old.proclaim("10.0.0.3:81").await;
        ensure!(
            matches!(&late, Err(e) if e.kind() == ErrorKind::NotHeld),
            "a proclaim after the term ended answered {late:?}"
        );
        let shown = election.leader().await?.map(|l| (l.fence, l.value));
        ensure!(
            shown == Some((second.fence(), "10.0.0.2:80".to_owned())),
            "after a late proclaim, the election's leader showed {shown:?}"
        );
        let bad = second.value().to_owned();
        let mut second = second;
        let refused = second.proclaim("nul\0").await;
        ensure!(
            matches!(&refused, Err(e) if e.kind() == ErrorKind::Configuration) && second.value() == bad,
            "a value with a NUL answered {refused:?}"
        );
        second.resign().await?;
        Ok(())
    }

    /// The election's leader and its observers show each leader with the value it campaigned with, the successor of a leader whose term ran out included, then the vacancy; where the backend records no terms (an election over a lease), a proclaim is refused as unsupported.
    #[case(Election, always)]
    pub async fn the_leader_is_shown_with_its_value_until_a_successor_takes_over(t: &Target) -> CaseResult {
        let name = t.key("shown");
        let client = LockClient::with_options(t.backend().clone(), options(t))?;
        let election = client.election(name.as_str())?;
        // Values are read back from the holder where the election runs over a lease.
        let values = election.records_terms() || t.capabilities().holder_records != distlock_core::backend::HolderRecords::NotKept;
        let mut observer = election.observe();
        let mut seen = Vec::new();
        observe_until(&mut observer, &mut seen, |o| matches!(o, Observation::Vacant)).await?;

        // A leader whose term runs out at a short TTL, without renewal.
        let lapsing = LockClient::with_options(t.backend().clone(), lapsing(t))?;
        let old = lapsing.election(name.as_str())?.campaign("10.0.0.3:80", WAIT).await?;
        let shown = election.leader().await?;
        let (old_fence, old_value) = (old.fence(), old.value().to_owned());
        ensure!(
            shown.as_ref().map(|l| l.fence) == Some(old_fence)
                && (!values || shown.as_ref().map(|l| l.value.as_str()) == Some(old_value.as_str())),
            "the election's leader showed {shown:?} while the term of fence {old_fence} with {old_value:?} lasted"
        );
        if election.records_terms() {
            // Recorded, the short term is seen however soon it ends; over a lease, only
            // if it still lasts when the observer looks (as documented).
            observe_until(&mut observer, &mut seen, |o| matches!(o, Observation::Elected(l) if l.fence == old_fence)).await?;
        }

        // Its successor, once the term ran out.
        let mut second = election.campaign("10.0.0.2:80", WAIT).await?;
        ensure!(second.fence() > old_fence, "the successor's fence {} is not above {old_fence}", second.fence());
        let shown = election.leader().await?.map(|l| (l.fence, l.value));
        let expected = (second.fence(), if values { "10.0.0.2:80".to_owned() } else { String::new() });
        ensure!(
            shown.as_ref() == Some(&expected),
            "the election's leader showed {shown:?} after a successor took over: expected {expected:?}"
        );
        let second_fence = second.fence();
        observe_until(&mut observer, &mut seen, |o| matches!(o, Observation::Elected(l) if l.fence == second_fence)).await?;
        if let Some(Observation::Elected(l)) = seen.last() {
            ensure!(
                !values || l.value == "10.0.0.2:80",
                "the observer saw the successor as {l:?}"
            );
        }
        if !election.records_terms() {
            let refused = second.proclaim("10.0.0.2:81").await;
            ensure!(
                matches!(&refused, Err(e) if e.kind() == ErrorKind::Unsupported) && second.value() == "10.0.0.2:80",
                "a proclaim on an election that records no terms answered {refused:?}"
            );
        }
        second.resign().await?;
        observe_until(&mut observer, &mut seen, |o| matches!(o, Observation::Vacant)).await?;
        ensure!(
            election.leader().await?.is_none(),
            "the election's leader showed someone after the last leader resigned"
        );
        // In order: a fence seen is never below one seen before it.
        let fences: Vec<u64> = seen
            .iter()
            .filter_map(|o| match o {
                Observation::Elected(l) | Observation::Proclaimed(l) => Some(l.fence.get()),
                _ => None,
            })
            .collect();
        ensure!(fences.is_sorted(), "the observer saw terms out of order: {seen:?}");
        Ok(())
    }

    /// A leader's process stops without resigning; the restarted process resumes the same term from the token it wrote down (the same fence, before any other candidate could be elected), and the election shows it; once that term is over and another leads, the token resumes nothing.
    #[case(Election, always)]
    pub async fn a_leader_resumes_its_term_after_a_restart(t: &Target) -> CaseResult {
        let name = t.key("resumed");
        let clients = backends(t, 3).await?;
        // The first process: its term is not renewed, and is left as a crash leaves it.
        let crashed = LockClient::with_options(
            clients[0].clone(),
            LockOptions::new(t.long_ttl()).with_auto_renew(false),
        )?;
        let term = crashed.election(name.as_str())?.campaign("10.0.0.1:80", WAIT).await?;
        let written = term.resume_token().to_string();
        let fence = term.fence();
        std::mem::forget(term);

        // The restarted process, on a client of its own.
        let restarted = LockClient::with_options(clients[1].clone(), options(t))?.election(name.as_str())?;
        let token: ResumeToken = written.parse()?;
        let resumed = match restarted.resume(&token, "10.0.0.1:80").await? {
            Ok(resumed) => resumed,
            Err(busy) => {
                return fail(format!("the restarted leader could not resume its live term: {busy:?}"))
            }
        };
        ensure!(
            resumed.fence() == fence,
            "the resumed term has fence {}, not its own {fence}",
            resumed.fence()
        );
        let other = LockClient::with_options(clients[2].clone(), options(t))?.election(name.as_str())?;
        ensure!(
            other.try_campaign("10.0.0.2:80").await?.is_err(),
            "another candidate was elected while the resumed term lasted"
        );
        let shown = other.leader().await?.map(|l| l.fence);
        ensure!(
            shown == Some(fence),
            "the election's leader showed {shown:?} while the resumed term of fence {fence} lasted"
        );
        resumed.resign().await?;

        // That term is over and another leads: the token resumes nothing.
        let second = other.campaign("10.0.0.2:80", WAIT).await?;
        if let Ok(late) = restarted.resume(&token, "10.0.0.1:80").await? {
            let late_fence = late.fence();
            let _ = late.resign().await;
            second.resign().await?;
            return fail(format!(
                "the token of an ended term was resumed as fence {late_fence} while another led"
            ));
        }
        second.resign().await?;
        Ok(())
    }
}

/// Takes observations into `seen` until one is `until`: a failure when none comes
/// within the wait.
async fn observe_until(
    observer: &mut distlock_core::Observations,
    seen: &mut Vec<Observation>,
    until: impl Fn(&Observation) -> bool,
) -> CaseResult {
    let give_up = Instant::now() + WAIT;
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        match timeout(left, observer.next()).await {
            Ok(Some(Ok(observed))) => {
                let done = until(&observed);
                seen.push(observed);
                if done {
                    return Ok(());
                }
            }
            Ok(Some(Err(e))) if e.is_retryable() => {}
            Ok(Some(Err(e))) => return fail(format!("the observer: {e}")),
            Ok(None) => return fail("the observer's stream ended"),
            Err(_) => return fail(format!("the observer saw only {seen:?}")),
        }
    }
}

/// Notes when it is dropped: when the future that owns it was.
struct NoteDrop(Arc<Mutex<Option<Instant>>>);

impl Drop for NoteDrop {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}
