//! The scenarios: on any backend through distlock's own API, and on the peers that
//! implement [`Contender`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::backend::{AcquireOutcome, Lease, LockBackendExt};
use distlock::{DynLockBackend, LockClient, LockGuard, LockKey, LockOptions};
use serde::Serialize;
use tokio::time::Instant;

use crate::meter::{client_cpu_us, ServerMeter};
use crate::run::BoxError;
use crate::stats::Summary;

/// The TTL the scenarios ask for (or the backend's nearest).
pub(crate) const SCENARIO_TTL: Duration = Duration::from_secs(10);

/// How much each scenario does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) cycles: usize,
    pub(crate) throughput_for: Duration,
    /// How long each point of the S2 sweep runs.
    pub(crate) sweep_for: Duration,
    pub(crate) handoffs: usize,
    pub(crate) takeovers: usize,
    /// S5: distinct lock names locked and released once each.
    pub(crate) storage_names: usize,
    /// Whether S5 shortens the backends' bounds (by URL options) to wait less.
    pub(crate) short_bounds: bool,
    /// Whether the conformance suite runs after the scenarios (`--skip-suite` leaves
    /// it out, and each row says so).
    pub(crate) suite: bool,
}

impl Sizes {
    /// The sizes of a mode.
    pub(crate) fn of(mode: crate::run::Mode) -> Self {
        match mode {
            crate::run::Mode::Quick => Self::quick(),
            crate::run::Mode::Standard => Self::standard(),
            crate::run::Mode::Soak => Self::soak(),
        }
    }

    /// Every scenario at small sizes: CI runs it on every backend as a check that each
    /// one runs, not for its figures.
    fn quick() -> Self {
        Sizes {
            cycles: 200,
            throughput_for: Duration::from_secs(1),
            sweep_for: Duration::from_millis(500),
            handoffs: 50,
            takeovers: 1,
            storage_names: 2_000,
            short_bounds: true,
            suite: true,
        }
    }

    /// A little above the quick run's sizes: the conformance suite, the same in every
    /// mode, takes most of a backend's time, and the default must stay near 40 minutes
    /// with the build and the torture run.
    fn standard() -> Self {
        Sizes {
            cycles: 500,
            throughput_for: Duration::from_secs(3),
            sweep_for: Duration::from_millis(500),
            handoffs: 200,
            takeovers: 2,
            storage_names: 5_000,
            short_bounds: true,
            suite: true,
        }
    }

    fn soak() -> Self {
        Sizes {
            cycles: 3000,
            throughput_for: Duration::from_secs(10),
            sweep_for: Duration::from_secs(3),
            handoffs: 1000,
            takeovers: 5,
            storage_names: 100_000,
            short_bounds: false,
            suite: true,
        }
    }
}

fn key(scenario: &str, n: usize) -> String {
    let run: u32 = rand::random();
    format!("lockbench/{scenario}/{run:08x}/{n}")
}

/// What the timed scenarios need of a lock implementation: distlock's client, or a
/// peer library driven the way its users drive it.
pub(crate) trait Contender: Clone + Send + Sync + 'static {
    /// A held lock.
    type Held: Send + 'static;

    /// One attempt: the lock, or `None` when it is held elsewhere.
    fn try_take(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<Self::Held>, BoxError>> + Send;

    /// Waits (up to `wait`) for the lock, by whatever means the implementation has.
    fn take(
        &self,
        key: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Self::Held, BoxError>> + Send;

    /// Releases a held lock.
    fn give_back(&self, held: Self::Held) -> impl Future<Output = Result<(), BoxError>> + Send;
}

impl Contender for LockClient {
    type Held = LockGuard;

    async fn try_take(&self, key: &str) -> Result<Option<LockGuard>, BoxError> {
        Ok(self.try_lock(key).await?.ok())
    }

    async fn take(&self, key: &str, wait: Duration) -> Result<LockGuard, BoxError> {
        Ok(self.lock(key, wait).await?)
    }

    async fn give_back(&self, held: LockGuard) -> Result<(), BoxError> {
        Ok(held.release().await?)
    }
}

/// The kinds beyond the mutex, as the kind scenarios take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One permit of a semaphore with this many.
    Semaphore(u32),
    /// A read-write lock's reader.
    Read,
    /// A read-write lock's writer.
    Write,
    /// An election's candidate.
    Campaign,
}

impl Kind {
    /// The kinds S1 measures, and whether S3 (a handoff of something exclusive)
    /// measures each.
    pub(crate) const ALL: [(Kind, bool); 5] = [
        (Kind::Semaphore(1), true),
        (Kind::Semaphore(4), false),
        (Kind::Read, false),
        (Kind::Write, true),
        (Kind::Campaign, true),
    ];

    /// The kind's name in the report.
    pub(crate) fn label(self) -> String {
        match self {
            Kind::Semaphore(n) => format!("semaphore, 1 of {n} permits"),
            Kind::Read => "read-write lock, reader".into(),
            Kind::Write => "read-write lock, writer".into(),
            Kind::Campaign => "election, campaign".into(),
        }
    }
}

/// One kind on a backend, each call on the name it is given, as a user holding a
/// [`Semaphore`](distlock::Semaphore), [`RwLock`](distlock::RwLock) or [`Election`](distlock::Election) of that name does.
#[derive(Clone)]
pub(crate) struct KindContender {
    backend: Arc<DynLockBackend>,
    options: LockOptions,
    kind: Kind,
}

impl KindContender {
    pub(crate) fn new(backend: &Arc<DynLockBackend>, kind: Kind) -> Self {
        let ttl = backend.capabilities().ttl_at_least(SCENARIO_TTL);
        KindContender {
            backend: backend.clone(),
            options: LockOptions::new(ttl),
            kind,
        }
    }

    /// Tries once (`wait` of `None`) or waits.
    async fn get(&self, key: &str, wait: Option<Duration>) -> Result<Option<LockGuard>, BoxError> {
        let (b, o) = (self.backend.clone(), self.options.clone());
        let guard = match self.kind {
            Kind::Semaphore(n) => {
                let permits = LockClient::with_options(b, o).and_then(|c| c.semaphore(key, n))?;
                match wait {
                    Some(wait) => Some(permits.acquire(wait).await?),
                    None => permits.try_acquire().await?.ok(),
                }
            }
            Kind::Read | Kind::Write => {
                let lock = LockClient::with_options(b, o).and_then(|c| c.rw_lock(key))?;
                match (wait, self.kind == Kind::Read) {
                    (Some(wait), true) => Some(lock.read(wait).await?),
                    (Some(wait), false) => Some(lock.write(wait).await?),
                    (None, true) => lock.try_read().await?.ok(),
                    (None, false) => lock.try_write().await?.ok(),
                }
            }
            Kind::Campaign => {
                let election = LockClient::with_options(b, o).and_then(|c| c.election(key))?;
                match wait {
                    Some(wait) => Some(election.campaign("lockbench", wait).await?),
                    None => election.try_campaign("lockbench").await?.ok(),
                }
                .map(|leadership| leadership.into_guard())
            }
        };
        Ok(guard)
    }
}

impl Contender for KindContender {
    type Held = LockGuard;

    async fn try_take(&self, key: &str) -> Result<Option<LockGuard>, BoxError> {
        self.get(key, None).await
    }

    async fn take(&self, key: &str, wait: Duration) -> Result<LockGuard, BoxError> {
        self.get(key, Some(wait))
            .await?
            .ok_or_else(|| "a wait ended without a guard".into())
    }

    async fn give_back(&self, held: LockGuard) -> Result<(), BoxError> {
        Ok(held.release().await?)
    }
}

/// S1 and S3 of one kind: S1 as for the mutex (fresh names, a try then a release);
/// S3 with [`S3_WAITERS`] waiters, each a contender of its own, where `handoff`.
pub(crate) async fn kind_runs(
    backend: &Arc<DynLockBackend>,
    kind: Kind,
    handoff: bool,
    sizes: Sizes,
) -> Result<(Summary, Option<Summary>), BoxError> {
    let contender = KindContender::new(backend, kind);
    let entry = S1Entry::new(kind.label(), contender.clone());
    let s1 = s1_side_by_side(std::slice::from_ref(&entry), sizes, None)
        .await
        .remove(0)?;
    let s3 = if handoff {
        let waiters = vec![contender; S3_WAITERS];
        Some(s3_handoff_on(&waiters, sizes).await?)
    } else {
        None
    };
    Ok((s1, s3))
}

/// A client on `backend`, as the scenarios use it (a TTL of at least 10 s).
pub(crate) fn client(backend: &Arc<DynLockBackend>) -> distlock::Result<LockClient> {
    let ttl = backend.capabilities().ttl_at_least(SCENARIO_TTL);
    LockClient::with_options(backend.clone(), LockOptions::new(ttl))
}

/// The client of an efficiency lock (`LockOptions::with_fenced(false)`) on `backend`,
/// with the scenarios' TTL: `None` where the backend's grants carry a fence anyway
/// (`Capabilities::unfenced_grants` unset), so that the option changes nothing.
pub(crate) fn efficiency_client(
    backend: &Arc<DynLockBackend>,
) -> Option<distlock::Result<LockClient>> {
    let capabilities = backend.capabilities();
    if !capabilities.unfenced_grants {
        return None;
    }
    let ttl = capabilities.ttl_at_least(SCENARIO_TTL);
    let options = LockOptions::new(ttl).with_fenced(false);
    Some(LockClient::with_options(backend.clone(), options))
}

/// Cycles run, unmeasured, before S1 measures: connections are set up and warm.
const WARM_UP: usize = 20;

/// S1 runs its contenders in turn, this many blocks each, in a rotating order: a
/// machine that slows down for a while slows them all alike.
const S1_BLOCKS: usize = 10;

/// One uncontended cycle (a try, then a release), with the contender's type erased so
/// that different contenders sit in one list.
trait Cycle: Send + Sync + 'static {
    fn cycle<'a>(
        &'a self,
        key: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>>;
}

impl<C: Contender> Cycle for C {
    fn cycle<'a>(
        &'a self,
        key: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>> {
        Box::pin(async move {
            let held = self.try_take(key).await?.ok_or_else(|| busy(key))?;
            self.give_back(held).await
        })
    }
}

/// What a floor is the floor of: the report's targets look floors up by it, never
/// by their place in the list (a floor that failed leaves no gap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum FloorRole {
    /// One round trip on the driver (`PING`, `SELECT 1`, a `get`, `exists`).
    RoundTrip,
    /// The raw lock cycle on the same driver.
    Cycle,
    /// The cheapest cycle on the same driver that also mints a fence that never goes
    /// down, even after a restart that lost data: what the fence costs, apart from
    /// what distlock adds.
    FencedCycle,
    /// distlock's own requests for one cycle, sent on the bare driver: run in S2
    /// too, to part what the requests cost from what the client's steps cost.
    Requests,
    /// Another floor, shown beside the others.
    Other,
}

/// A contender of S1 (and of S2, for the floors), by name.
pub(crate) struct S1Entry {
    pub(crate) name: String,
    /// What the entry stands for when it is a floor; `Other` otherwise.
    pub(crate) role: FloorRole,
    cycle: Arc<dyn Cycle>,
}

impl S1Entry {
    /// `contender`, shown as `name`.
    pub(crate) fn new(name: impl Into<String>, contender: impl Contender) -> Self {
        S1Entry::floor(FloorRole::Other, name, contender)
    }

    /// A floor: `contender` in `role`, shown as `name`.
    pub(crate) fn floor(
        role: FloorRole,
        name: impl Into<String>,
        contender: impl Contender,
    ) -> Self {
        S1Entry {
            name: name.into(),
            role,
            cycle: Arc::new(contender),
        }
    }

    /// S2 on this entry: `tasks` concurrent tasks cycling for `sizes.throughput_for`.
    pub(crate) async fn s2(&self, tasks: usize, sizes: Sizes) -> Result<Summary, BoxError> {
        s2_cycles(self.cycle.clone(), tasks, sizes.throughput_for).await
    }
}

/// The backend's primitives alone (`try_acquire` then `release`), without the
/// client's guard and renewal task: what the client adds is the difference.
#[derive(Clone)]
pub(crate) struct Primitives(pub(crate) Arc<DynLockBackend>);

impl Contender for Primitives {
    type Held = Lease;

    async fn try_take(&self, key: &str) -> Result<Option<Lease>, BoxError> {
        let ttl = self.0.capabilities().ttl_at_least(SCENARIO_TTL);
        Ok(match self.0.try_acquire(&LockKey::new(key)?, ttl).await? {
            AcquireOutcome::Acquired(lease) => Some(lease),
            AcquireOutcome::Held { .. } => None,
        })
    }

    async fn take(&self, key: &str, _: Duration) -> Result<Lease, BoxError> {
        Err(format!("the primitives do not wait ({key})").into())
    }

    async fn give_back(&self, lease: Lease) -> Result<(), BoxError> {
        self.0.release(lease.key(), lease.owner()).await?;
        Ok(())
    }
}

/// What one entry of a side-by-side scenario measured over its blocks so far.
struct Tally {
    samples: Vec<Duration>,
    wall: Duration,
    server_cpu_us: Option<f64>,
    client_cpu_us: Option<f64>,
    error: Option<BoxError>,
}

impl Tally {
    fn new(meter: Option<&ServerMeter>, error: Option<BoxError>) -> Self {
        Tally {
            samples: Vec::new(),
            wall: Duration::ZERO,
            server_cpu_us: meter.map(|_| 0.0),
            client_cpu_us: Some(0.0),
            error,
        }
    }

    /// Runs one block (`run` gives the cycles' times), adding its samples, its wall
    /// time and the CPU it cost this process and, with a meter, the server. After an
    /// error the entry runs no more blocks.
    async fn block(
        &mut self,
        meter: Option<&ServerMeter>,
        run: impl Future<Output = Result<Vec<Duration>, BoxError>>,
    ) {
        if self.error.is_some() {
            return;
        }
        let server_before = match meter {
            Some(m) => m.busy_us().await.ok(),
            None => None,
        };
        let client_before = client_cpu_us();
        let started = Instant::now();
        let ran = run.await;
        self.wall += started.elapsed();
        let client_after = client_cpu_us();
        let server_after = match meter {
            Some(m) => m.busy_us().await.ok(),
            None => None,
        };
        let add = |sum: Option<f64>, before: Option<f64>, after: Option<f64>| match (
            sum, before, after,
        ) {
            (Some(sum), Some(before), Some(after)) => Some(sum + after - before),
            _ => None,
        };
        self.client_cpu_us = add(self.client_cpu_us, client_before, client_after);
        self.server_cpu_us = add(self.server_cpu_us, server_before, server_after);
        match ran {
            Ok(samples) => self.samples.extend(samples),
            Err(e) => self.error = Some(e),
        }
    }

    /// The entry's summary over all its blocks, with the CPU per cycle.
    fn summary(self) -> Result<Summary, BoxError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut summary = Summary::of(self.samples, self.wall);
        if summary.count > 0 {
            summary.server_cpu_us = self.server_cpu_us.map(|us| us / summary.count as f64);
            summary.client_cpu_us = self.client_cpu_us.map(|us| us / summary.count as f64);
        }
        Ok(summary)
    }
}

/// S1: one client at a time, a try then a release, on fresh keys, for every entry
/// side by side (see [`S1_BLOCKS`]). With a meter, each summary carries the server's
/// CPU time per cycle.
pub(crate) async fn s1_side_by_side(
    entries: &[S1Entry],
    sizes: Sizes,
    meter: Option<&ServerMeter>,
) -> Vec<Result<Summary, BoxError>> {
    let mut tallies: Vec<Tally> = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut error = None;
        for n in 0..WARM_UP {
            if let Err(e) = entry.cycle.cycle(&key("warm-up", n)).await {
                error = Some(e);
                break;
            }
        }
        tallies.push(Tally::new(meter, error));
    }
    let per_block = sizes.cycles.div_ceil(S1_BLOCKS);
    for block in 0..S1_BLOCKS {
        for turn in 0..entries.len() {
            let i = (turn + block) % entries.len();
            let cycle = &entries[i].cycle;
            tallies[i]
                .block(meter, async {
                    let mut samples = Vec::with_capacity(per_block);
                    for n in 0..per_block {
                        let k = key("s1", block * per_block + n);
                        let t = Instant::now();
                        cycle.cycle(&k).await?;
                        samples.push(t.elapsed());
                    }
                    Ok(samples)
                })
                .await;
        }
    }
    tallies.into_iter().map(Tally::summary).collect()
}

/// S2 runs its contenders in turn, this many blocks each, in a rotating order, as S1
/// does: its ratios to the floors and peers are then measured over the same spells of
/// the machine.
const S2_BLOCKS: usize = 6;

/// S2 for every entry side by side: [`S2_TASKS`] concurrent tasks on fresh keys, the
/// entries in turn for [`S2_BLOCKS`] blocks each, in a rotating order; each entry's
/// blocks together last `sizes.throughput_for`. With a meter, each summary carries the
/// server's CPU time per cycle; always this process's.
pub(crate) async fn s2_side_by_side(
    entries: &[&S1Entry],
    sizes: Sizes,
    meter: Option<&ServerMeter>,
) -> Vec<Result<Summary, BoxError>> {
    let mut tallies: Vec<Tally> = entries.iter().map(|_| Tally::new(meter, None)).collect();
    let per_block = sizes.throughput_for / S2_BLOCKS as u32;
    for block in 0..S2_BLOCKS {
        for turn in 0..entries.len() {
            let i = (turn + block) % entries.len();
            let cycle = entries[i].cycle.clone();
            tallies[i]
                .block(meter, s2_samples(cycle, S2_TASKS, per_block))
                .await;
        }
    }
    tallies.into_iter().map(Tally::summary).collect()
}

fn busy(k: &str) -> BoxError {
    format!("the fresh key {k} was held").into()
}

fn join_error(e: tokio::task::JoinError) -> BoxError {
    format!("a scenario task failed: {e}").into()
}

/// How many concurrent tasks S2 runs.
pub(crate) const S2_TASKS: usize = 32;

/// The concurrencies of the S2 sweep.
pub(crate) const SWEEP: [usize; 5] = [1, 4, 16, 64, 256];

/// `tasks` concurrent tasks sharing `cycle`, each on keys of its own, for `run_for`.
async fn s2_cycles(
    cycle: Arc<dyn Cycle>,
    tasks: usize,
    run_for: Duration,
) -> Result<Summary, BoxError> {
    let started = Instant::now();
    let samples = s2_samples(cycle, tasks, run_for).await?;
    Ok(Summary::of(samples, started.elapsed()))
}

/// The cycles' times of [`s2_cycles`].
async fn s2_samples(
    cycle: Arc<dyn Cycle>,
    tasks: usize,
    run_for: Duration,
) -> Result<Vec<Duration>, BoxError> {
    let until = Instant::now() + run_for;
    let tasks = (0..tasks).map(|c| {
        let cycle = cycle.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut n = 0;
            while Instant::now() < until {
                let k = key(&format!("s2-{c}"), n);
                n += 1;
                let t = Instant::now();
                cycle.cycle(&k).await?;
                samples.push(t.elapsed());
            }
            Ok::<_, BoxError>(samples)
        })
    });
    let mut samples = Vec::new();
    for joined in futures_util::future::join_all(tasks).await {
        samples.extend(joined.map_err(join_error)??);
    }
    Ok(samples)
}

/// How many waiters S3 runs.
pub(crate) const S3_WAITERS: usize = 16;

/// S3: [`S3_WAITERS`] waiters on one key through one client, each holding it 1 ms.
/// See [`s3_handoff_on`].
pub(crate) async fn s3_handoff(lock: &impl Contender, sizes: Sizes) -> Result<Summary, BoxError> {
    s3_handoff_on(std::slice::from_ref(lock), sizes).await
}

/// S3 across clients: each of the [`S3_WAITERS`] waiters with a client of its own on
/// `backend`, as many processes would be, racing or in fair mode.
pub(crate) async fn s3_across_clients(
    backend: &Arc<DynLockBackend>,
    fair: bool,
    sizes: Sizes,
) -> Result<Summary, BoxError> {
    let ttl = backend.capabilities().ttl_at_least(SCENARIO_TTL);
    let options = LockOptions::new(ttl).with_fair(fair);
    let clients = (0..S3_WAITERS)
        .map(|_| LockClient::with_options(backend.clone(), options.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    s3_handoff_on(&clients, sizes).await
}

/// [`S3_WAITERS`] waiters on one key, waiter `n` through `locks[n % locks.len()]`,
/// each holding it 1 ms and asking again at once: the time from one holder's release
/// to the next holder's acquire; how often the next holder was the one that had just
/// released (a library that lets the releaser barge ahead of its waiters shows short
/// handoffs but starves them); and the longest wait over the median wait.
async fn s3_handoff_on<C: Contender>(locks: &[C], sizes: Sizes) -> Result<Summary, BoxError> {
    let k = key("s3", rand::random::<u32>() as usize);
    // When the last holder released, and which waiter it was.
    let last_release: Arc<Mutex<Option<(Instant, usize)>>> = Arc::default();
    let samples: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let same_holder = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks = (0..S3_WAITERS).map(|me| {
        let same_holder = same_holder.clone();
        let (lock, k, last_release, samples, waits, done) = (
            locks[me % locks.len()].clone(),
            k.clone(),
            last_release.clone(),
            samples.clone(),
            waits.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < sizes.handoffs {
                let asked = Instant::now();
                let held = lock.take(&k, Duration::from_secs(60)).await?;
                let now = Instant::now();
                if let Some((released, by)) = last_release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                {
                    if by == me {
                        same_holder.fetch_add(1, Ordering::SeqCst);
                    }
                    samples
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(now - released);
                    waits
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(now - asked);
                    done.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                *last_release.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), me));
                lock.give_back(held).await?;
            }
            Ok::<_, BoxError>(())
        })
    });
    for joined in futures_util::future::join_all(tasks).await {
        joined.map_err(join_error)??;
    }
    let wall = started.elapsed();
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner()));
    let waits = std::mem::take(&mut *waits.lock().unwrap_or_else(|p| p.into_inner()));
    let mut summary = Summary::of(samples, wall);
    if summary.count > 0 {
        summary.same_holder_share =
            Some(same_holder.load(Ordering::SeqCst) as f64 / summary.count as f64);
    }
    summary.wait_ratio = crate::stats::wait_ratio(waits);
    Ok(summary)
}

/// S4's result: how long after a vanished holder's TTL another client got the lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Takeover {
    pub(crate) ttl_ms: f64,
    /// Time from the vanished holder's request to the next acquisition, per round.
    pub(crate) takeover_ms: Vec<f64>,
    /// The largest of those, less the TTL.
    pub(crate) worst_over_ttl_ms: f64,
    /// The smallest of those, less the TTL: below minus the slack is a takeover
    /// before the vanished holder's lease could have expired, a safety bug.
    pub(crate) earliest_over_ttl_ms: f64,
    /// How much earlier than the TTL a takeover may come: the backend's TTL
    /// granularity and its clock-drift allowance for the TTL.
    pub(crate) slack_ms: f64,
}

/// S4: a holder takes the lock and vanishes without releasing; a waiter takes over.
pub(crate) async fn s4_takeover(
    backend: &Arc<DynLockBackend>,
    sizes: Sizes,
) -> Result<Takeover, BoxError> {
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(1));
    let client = client(backend)?;
    let mut takeover_ms = Vec::new();
    for n in 0..sizes.takeovers {
        let k = LockKey::new(key("s4", n))?;
        let sent = Instant::now();
        // The primitive, not the client: a guard would renew or release.
        match backend.try_acquire(&k, ttl).await? {
            AcquireOutcome::Acquired(_) => {}
            AcquireOutcome::Held { .. } => return Err(busy(k.as_str())),
        }
        let guard = client
            .lock(k.as_str(), ttl * 3 + Duration::from_secs(5))
            .await?;
        takeover_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        guard.release().await?;
    }
    let ttl_ms = ttl.as_secs_f64() * 1e3;
    let worst = takeover_ms.iter().copied().fold(0.0, f64::max) - ttl_ms;
    let earliest = takeover_ms.iter().copied().fold(f64::INFINITY, f64::min) - ttl_ms;
    let capabilities = backend.capabilities();
    let slack = capabilities.ttl_granularity + capabilities.clock_drift.allowance(ttl);
    Ok(Takeover {
        ttl_ms,
        takeover_ms,
        worst_over_ttl_ms: worst,
        earliest_over_ttl_ms: earliest,
        slack_ms: slack.as_secs_f64() * 1e3,
    })
}
