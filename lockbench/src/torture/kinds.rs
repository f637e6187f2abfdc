//! The kinds beyond the mutex in the torture run: beside the lock holders, clients
//! hold a semaphore's permits and lead an election's terms through the leader loop,
//! each on a client of its own behind a link of its own (the partition and latency
//! faults pick among their links too), under the same server faults.
//!
//! - **Permits** (on a row whose backend has them): [`PERMIT_CLIENTS`] clients each
//!   take one permit of a semaphore of [`PERMIT_LIMIT`], hold it for up to a TTL (across
//!   renewals, stopping at the loss signal) and give it back; a sampler reads the
//!   name's holders from the server every 100 ms. The checks: never more than the
//!   limit at once by what the holders believed (each hold from its grant until it
//!   released, was told it lost the permit, or its validity ran out), nor by the
//!   server's own list.
//! - **Terms** (on every row: an election records its terms where the backend has
//!   permits, and runs over a lease elsewhere): [`LEADER_CLIENTS`] clients run a leader
//!   loop on one election, each leading a term for up to two TTLs before it resigns, or
//!   until the term is lost. The terms are checked as the lock's holds are: never two
//!   leaders at once, each term's fence above every term granted before it was asked
//!   for, no leader past its validity without the loss signal; and a loop that stopped
//!   campaigning (returned an error) is a violation.
//!
//! - **Job slots** (on every row): [`JOB_CLIENTS`] hosts run a job once per slot with
//!   `run_once`, its least hold the slot's length (three TTLs), trying the current
//!   slot again and again while it lasts, as hosts whose schedules fire late do. Each
//!   try runs as a process of its own (a runtime on a thread of its own), and about
//!   half the runs are killed mid-job as a crash kills them: the runtime is dropped,
//!   so no release is sent and no renewal either. The check: no slot runs again
//!   within an earlier run's least hold, counted from that run's try (before its
//!   grant) less the clock-drift allowance, or until its work ended where that came
//!   later; and each run's fence is above the slot's earlier runs'.
//!
//! A fault whose declarations excuse lost leases excuses only an overlap inside its
//! window, as for the locks (see [`super::history::Excuses`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{DynLockBackend, LockClient, LockGuard, LockKey, LockOptions};
use serde::Serialize;
use tokio::time::{sleep, timeout, Instant};

use super::history::{Fault, History, Hold, HoldKind};

/// The semaphore's limit.
pub(crate) const PERMIT_LIMIT: u32 = 2;
/// How many clients contend for its permits: one more than the limit.
pub(crate) const PERMIT_CLIENTS: usize = 3;
/// How many clients run a leader loop on the election.
pub(crate) const LEADER_CLIENTS: usize = 2;
/// How many hosts run the job once per slot.
pub(crate) const JOB_CLIENTS: usize = 2;
/// A slot's length, and the job's least hold, in TTLs.
const SLOT_TTLS: u32 = 3;

/// What every kind's client of one run shares.
pub(crate) struct Kinds {
    semaphore: String,
    election: String,
    job: String,
    ttl: Duration,
    /// The backend's clock-drift allowance for a lease of `ttl`.
    drift: Duration,
    /// The same for a lease of the job's least hold.
    slot_drift: Duration,
    start: Instant,
    pub(crate) stop: AtomicBool,
    permits: Mutex<Vec<Hold>>,
    terms: Mutex<Vec<Hold>>,
    /// Each term's validity (seconds into the run) as its leader last saw it.
    validity: Mutex<Vec<f64>>,
    /// What the server listed over the limit, each time.
    server_over: Mutex<Vec<String>>,
    server_samples: AtomicUsize,
    most_on_server: AtomicUsize,
    /// Steps that failed under the faults (a server away, a wait that ran out).
    errors: AtomicUsize,
    /// Leader loops that returned an error: they stopped campaigning.
    loops_ended: Mutex<Vec<String>>,
    /// Each job run, its key the slot's number, held until its least hold had passed
    /// (or its work ended, where that came later).
    runs: Mutex<Vec<Hold>>,
    runs_killed: AtomicUsize,
}

/// The kinds' part of one backend's torture run, as reported.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct KindsReport {
    /// Whether permits ran (the backend has them), and their limit.
    pub(crate) permit_limit: Option<u32>,
    pub(crate) permit_holds: usize,
    /// Of those, the ones a fault's window fell inside.
    pub(crate) permit_holds_faulted: usize,
    /// The most permits held at once by what the holders believed.
    pub(crate) most_believed: usize,
    /// The most the server listed at once, and how many times it was asked.
    pub(crate) most_on_server: usize,
    pub(crate) server_samples: usize,
    pub(crate) terms: usize,
    /// Of those, the ones a fault's window fell inside.
    pub(crate) terms_faulted: usize,
    /// Steps that failed under the faults.
    pub(crate) errors: usize,
    pub(crate) over_limit: Vec<String>,
    pub(crate) over_limit_on_server: Vec<String>,
    pub(crate) term_overlaps: Vec<String>,
    pub(crate) term_fence_regressions: Vec<String>,
    pub(crate) terms_unsignalled: Vec<String>,
    pub(crate) loops_ended: Vec<String>,
    /// Job runs, and the slots they ran.
    pub(crate) job_runs: usize,
    pub(crate) job_slots: usize,
    /// Of the runs, the ones killed mid-job, and the ones a fault's window fell inside.
    pub(crate) job_runs_killed: usize,
    pub(crate) job_runs_faulted: usize,
    /// Slots run again within an earlier run's least hold.
    pub(crate) slots_run_again: Vec<String>,
    pub(crate) slot_fence_regressions: Vec<String>,
    /// Violations a declared fault excused.
    pub(crate) declared: BTreeMap<String, usize>,
}

impl KindsReport {
    /// Each failed check, with the part of the history that broke it (the first few).
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut list = |what: &str, items: &[String]| {
            if !items.is_empty() {
                let shown: Vec<&str> = items.iter().take(5).map(String::as_str).collect();
                out.push(format!("{} {what}: {}", items.len(), shown.join("; ")));
            }
        };
        list(
            "times more permits were held than the limit",
            &self.over_limit,
        );
        list(
            "times the server listed more permits than the limit",
            &self.over_limit_on_server,
        );
        list("overlapping leaders", &self.term_overlaps);
        list("term fence regressions", &self.term_fence_regressions);
        list(
            "leaders past their validity without the loss signal",
            &self.terms_unsignalled,
        );
        list("leader loops that stopped campaigning", &self.loops_ended);
        list(
            "job runs within an earlier run's least hold of the same slot",
            &self.slots_run_again,
        );
        list("job slot fence regressions", &self.slot_fence_regressions);
        out
    }

    /// What the run could not show: no term led, or no permit held, where they ran.
    pub(crate) fn proved_nothing(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.terms == 0 {
            out.push("no leader loop led a term: the terms' checks proved nothing".into());
        }
        if self.permit_limit.is_some() && self.permit_holds == 0 {
            out.push("no permit was held: the permits' checks proved nothing".into());
        }
        if self.job_runs_killed == 0 {
            out.push(
                "no job run was killed mid-job: the slots' check of a crashed runner proved nothing"
                    .into(),
            );
        }
        out
    }
}

impl Kinds {
    /// `drift` gives the backend's clock-drift allowance for a lease of a duration.
    pub(crate) fn new(
        run_id: u32,
        ttl: Duration,
        drift: impl Fn(Duration) -> Duration,
        start: Instant,
    ) -> Self {
        Kinds {
            semaphore: format!("lockbench-torture/{run_id:08x}/semaphore"),
            election: format!("lockbench-torture/{run_id:08x}/election"),
            job: format!("lockbench-torture/{run_id:08x}/job"),
            ttl,
            drift: drift(ttl),
            slot_drift: drift(ttl * SLOT_TTLS),
            start,
            stop: AtomicBool::new(false),
            permits: Mutex::default(),
            terms: Mutex::default(),
            validity: Mutex::default(),
            server_over: Mutex::default(),
            server_samples: AtomicUsize::new(0),
            most_on_server: AtomicUsize::new(0),
            errors: AtomicUsize::new(0),
            loops_ended: Mutex::default(),
            runs: Mutex::default(),
            runs_killed: AtomicUsize::new(0),
        }
    }

    fn at(&self, instant: Instant) -> f64 {
        instant.saturating_duration_since(self.start).as_secs_f64()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn failed(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Holds `guard` for up to `most`, or until it is lost: the hold as the checker
    /// reads it, its request's send time taken from its validity (as a lock's is).
    async fn hold(
        &self,
        client: usize,
        guard: &LockGuard,
        first_sent: Instant,
        most: Duration,
    ) -> Hold {
        let granted = Instant::now();
        let sent =
            (guard.valid_until() - self.ttl.saturating_sub(self.drift)).clamp(first_sent, granted);
        let told = tokio::select! {
            () = sleep(most.mul_f64(rand::random::<f64>())) => false,
            _ = guard.lost() => true,
        };
        let (now, valid_until) = (Instant::now(), guard.valid_until());
        let unsignalled = (!told && guard.loss().is_none() && now >= valid_until)
            .then(|| (now - valid_until).as_secs_f64());
        Hold {
            client,
            key: 0,
            kind: HoldKind::Guarded,
            fence: guard.fence().get(),
            sent: self.at(sent),
            granted: self.at(granted),
            ended: self.at(now.min(valid_until)),
            unsignalled,
        }
    }

    /// Records a term as it begins; its end is open until [`Self::end_term`].
    fn begin_term(&self, client: usize, term: &LockGuard) -> usize {
        let granted = Instant::now();
        // The loop's campaign sent its granting request no earlier than its validity
        // says, and no later than the grant.
        let sent = (term.valid_until() - self.ttl.saturating_sub(self.drift)).min(granted);
        let mut terms = self.terms.lock().unwrap_or_else(|p| p.into_inner());
        terms.push(Hold {
            client,
            key: 0,
            kind: HoldKind::Guarded,
            fence: term.fence().get(),
            sent: self.at(sent),
            granted: self.at(granted),
            ended: f64::INFINITY,
            unsignalled: None,
        });
        self.validity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.at(term.valid_until()));
        terms.len() - 1
    }

    /// The validity of term `index` as its leader last saw it.
    fn note_validity(&self, index: usize, valid_until: Instant) {
        let at = self.at(valid_until);
        if let Some(v) = self
            .validity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(index)
        {
            *v = v.max(at);
        }
    }

    /// Ends term `index` at `at`, or at its validity as last seen where that came
    /// first (a leader knows itself leading until then at the latest); the first end
    /// recorded stays.
    fn end_term(&self, index: usize, at: Instant) {
        let valid = self
            .validity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(index)
            .copied()
            .unwrap_or(f64::INFINITY);
        let mut terms = self.terms.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(term) = terms.get_mut(index) {
            term.ended = term.ended.min(self.at(at)).min(valid);
        }
    }

    /// Reads the histories of both kinds once every client has stopped.
    pub(crate) fn report(&self, faults: &[Fault], aftermath: f64, permits: bool) -> KindsReport {
        let take = |holds: &Mutex<Vec<Hold>>| {
            std::mem::take(&mut *holds.lock().unwrap_or_else(|p| p.into_inner()))
        };
        let history = |holds: Vec<Hold>| History {
            holds,
            faults: faults.to_vec(),
            log: Vec::new(),
            fenced: Vec::new(),
            stored_fences: Vec::new(),
            unfenced: Vec::new(),
            leases_left: Vec::new(),
            aftermath,
        };
        let faulted = |holds: &[Hold]| {
            holds
                .iter()
                .filter(|h| {
                    faults
                        .iter()
                        .any(|f| f.start < h.ended && f.end > h.granted)
                })
                .count()
        };
        let mut led = take(&self.terms);
        // A term whose end no task recorded yet ended by its validity at the latest.
        let validity = self
            .validity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (term, valid) in led.iter_mut().zip(validity) {
            if !term.ended.is_finite() {
                term.ended = valid;
            }
        }
        let terms = history(led);
        let checked = terms.check();
        let mut report = KindsReport {
            terms: terms.holds.len(),
            terms_faulted: faulted(&terms.holds),
            errors: self.errors.load(Ordering::SeqCst),
            term_overlaps: checked.overlaps,
            term_fence_regressions: checked.fence_regressions,
            terms_unsignalled: checked.unsignalled,
            loops_ended: self
                .loops_ended
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            declared: checked.declared,
            ..KindsReport::default()
        };
        let runs = history(take(&self.runs));
        let checked = runs.check();
        let mut slots: Vec<usize> = runs.holds.iter().map(|h| h.key).collect();
        slots.sort_unstable();
        slots.dedup();
        report.job_runs = runs.holds.len();
        report.job_slots = slots.len();
        report.job_runs_killed = self.runs_killed.load(Ordering::SeqCst);
        report.job_runs_faulted = faulted(&runs.holds);
        report.slots_run_again = checked.overlaps;
        report.slot_fence_regressions = checked.fence_regressions;
        for (window, n) in checked.declared {
            *report.declared.entry(window).or_default() += n;
        }
        if permits {
            let held = history(take(&self.permits));
            let limit = PERMIT_LIMIT as usize;
            let (over, declared, most) = held.over_limit(limit);
            for (window, n) in declared {
                *report.declared.entry(window).or_default() += n;
            }
            report.permit_limit = Some(PERMIT_LIMIT);
            report.permit_holds = held.holds.len();
            report.permit_holds_faulted = faulted(&held.holds);
            report.most_believed = most;
            report.over_limit = over;
            report.most_on_server = self.most_on_server.load(Ordering::SeqCst);
            report.server_samples = self.server_samples.load(Ordering::SeqCst);
            report.over_limit_on_server = self
                .server_over
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
        }
        report
    }
}

/// One client's permit holder, until the run stops.
pub(crate) async fn permit_holder(kinds: Arc<Kinds>, client: usize, backend: Arc<DynLockBackend>) {
    let semaphore = LockClient::with_options(backend, LockOptions::new(kinds.ttl))
        .and_then(|c| c.semaphore(&kinds.semaphore, PERMIT_LIMIT));
    let semaphore = match semaphore {
        Ok(semaphore) => semaphore,
        Err(e) => {
            kinds
                .loops_ended
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("permit client {client} could not start: {e}"));
            return;
        }
    };
    while !kinds.stopped() {
        let first_sent = Instant::now();
        let guard = match semaphore.acquire(kinds.ttl * 4).await {
            Ok(guard) => guard,
            Err(_) => {
                kinds.failed();
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let hold = kinds.hold(client, &guard, first_sent, kinds.ttl).await;
        let _ = guard.release().await;
        kinds
            .permits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hold);
    }
}

/// Reads the semaphore's holders from the server every 100 ms until the run stops:
/// the most it listed at once, and each time it listed more than the limit.
pub(crate) async fn sampler(kinds: Arc<Kinds>, backend: Arc<DynLockBackend>) {
    let (Some(permits), Ok(name)) = (backend.permits(), LockKey::new(&kinds.semaphore)) else {
        return;
    };
    while !kinds.stopped() {
        // A server away answers nothing: that sample is skipped.
        if let Ok(Ok(holders)) = timeout(kinds.ttl, permits.holders(&name)).await {
            let live: Vec<_> = holders.iter().filter(|h| !h.remaining.is_zero()).collect();
            let held: usize = live.iter().map(|h| h.count as usize).sum();
            kinds.server_samples.fetch_add(1, Ordering::SeqCst);
            kinds.most_on_server.fetch_max(held, Ordering::SeqCst);
            if held > PERMIT_LIMIT as usize {
                let fences: Vec<String> = live.iter().map(|h| h.fence.to_string()).collect();
                kinds
                    .server_over
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(format!(
                        "at {:.3} s the server listed {held} permits of {PERMIT_LIMIT} held (fences {})",
                        kinds.at(Instant::now()),
                        fences.join(", ")
                    ));
            }
        }
        sleep(Duration::from_millis(100)).await;
    }
}

/// One client's leader loop, until the run stops: each term is led for up to two TTLs,
/// then resigned, or until it is lost.
pub(crate) async fn leader(kinds: Arc<Kinds>, client: usize, backend: Arc<DynLockBackend>) {
    let looped = LockClient::with_options(backend, LockOptions::new(kinds.ttl))
        .and_then(|c| c.election(&kinds.election))
        .and_then(|e| e.leader_loop(&format!("client-{client}")));
    let looped = match looped {
        Ok(looped) => looped.with_retry(Duration::from_millis(50)),
        Err(e) => {
            kinds
                .loops_ended
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("leader client {client} could not start: {e}"));
            return;
        }
    };
    let lead = {
        let kinds = kinds.clone();
        move |term: LockGuard| {
            let kinds = kinds.clone();
            async move {
                // Recorded as it begins, and ended by a task of its own when the hold
                // ends: the loop drops this future at once when the term is lost.
                let index = kinds.begin_term(client, &term);
                let lost = term.lost();
                let watcher = kinds.clone();
                tokio::spawn(async move {
                    let _ = lost.await;
                    watcher.end_term(index, Instant::now());
                });
                let until = Instant::now() + (kinds.ttl * 2).mul_f64(rand::random::<f64>());
                while Instant::now() < until {
                    kinds.note_validity(index, term.valid_until());
                    sleep(Duration::from_millis(20).min(until - Instant::now())).await;
                }
                // Ends by returning: the loop resigns.
                kinds.end_term(index, Instant::now());
            }
        }
    };
    let shutdown = {
        let kinds = kinds.clone();
        async move {
            while !kinds.stopped() {
                sleep(Duration::from_millis(20)).await;
            }
        }
    };
    if let Err(e) = looped.run(lead, shutdown).await {
        kinds
            .loops_ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!(
                "client {client}'s loop returned at {:.3} s: {e}",
                kinds.at(Instant::now())
            ));
    }
}

/// What became of one try of a job slot.
enum Try {
    /// The job ran (to its end, or until its lock was lost): its fence, when it began
    /// and when its work ended (`None` when the lock was lost first).
    Ran {
        fence: u64,
        began: Instant,
        ended: Option<Instant>,
    },
    /// The job began, then its process was killed.
    Killed { fence: u64, began: Instant },
    /// Another host has the slot.
    Busy,
    /// The try failed before the job began.
    Failed,
}

/// One host's job runner, until the run stops: each slot is tried until this host has
/// run it or the slot is over, each try as a process of its own, killed mid-job about
/// half the time.
pub(crate) async fn job_runner(kinds: Arc<Kinds>, client: usize, backend: Arc<DynLockBackend>) {
    let slot_len = kinds.ttl * SLOT_TTLS;
    let mut ran = None;
    while !kinds.stopped() {
        let slot = (kinds.start.elapsed().as_nanos() / slot_len.as_nanos()) as usize;
        if ran == Some(slot) {
            // The next slot, fired a little late (hosts' schedules differ).
            let next = kinds.start + slot_len * (slot as u32 + 1);
            sleep_until_or_stop(&kinds, next + slot_len.mul_f64(rand::random::<f64>() / 4.0)).await;
            continue;
        }
        let sent = Instant::now();
        let name = format!("{}/slot-{slot}", kinds.job);
        let (at_least, ttl) = (slot_len, kinds.ttl);
        let work = slot_len.mul_f64(rand::random::<f64>() / 2.0);
        // About half the tries die mid-job, and every try until one has: a short run
        // (5 to 12 tries a row in quick mode) would otherwise kill none about one time
        // in a hundred, and prove nothing of a crashed runner.
        let kill = (kinds.runs_killed.load(Ordering::SeqCst) == 0 || rand::random::<f64>() < 0.5)
            .then(|| work.mul_f64(rand::random::<f64>()));
        let (tell, told) = tokio::sync::oneshot::channel();
        let backend = backend.clone();
        std::thread::spawn(move || {
            let _ = tell.send(run_as_process(backend, ttl, name, at_least, work, kill));
        });
        let outcome = told.await.unwrap_or(Try::Failed);
        // The server counts the least hold from its grant, after the try was sent.
        let least = kinds.at(sent + at_least.saturating_sub(kinds.slot_drift));
        let record = |fence: u64, began: Instant, ended: f64| Hold {
            client,
            key: slot,
            kind: HoldKind::Guarded,
            fence,
            sent: kinds.at(sent),
            granted: kinds.at(began),
            ended,
            unsignalled: None,
        };
        let hold = match outcome {
            Try::Ran {
                fence,
                began,
                ended,
            } => {
                let worked = ended.map_or(0.0, |at| kinds.at(at));
                Some(record(fence, began, least.max(worked)))
            }
            Try::Killed { fence, began } => {
                kinds.runs_killed.fetch_add(1, Ordering::SeqCst);
                Some(record(fence, began, least))
            }
            Try::Busy => {
                sleep(Duration::from_millis(100 + rand::random::<u64>() % 200)).await;
                None
            }
            Try::Failed => {
                kinds.failed();
                sleep(Duration::from_millis(50)).await;
                None
            }
        };
        if let Some(hold) = hold {
            ran = Some(slot);
            kinds
                .runs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(hold);
        }
    }
}

async fn sleep_until_or_stop(kinds: &Kinds, until: Instant) {
    while !kinds.stopped() && Instant::now() < until {
        sleep(Duration::from_millis(20).min(until - Instant::now())).await;
    }
}

/// One try of a job slot as a process of its own: a runtime of its own on this
/// thread, whose client runs `run_once` with a job of `work`. With `kill`, the process
/// dies that far into the job: its runtime is dropped with every task on it (the job,
/// the renewals, the release a dropped guard would send), as a crash ends them.
fn run_as_process(
    backend: Arc<DynLockBackend>,
    ttl: Duration,
    name: String,
    at_least: Duration,
    work: Duration,
    kill: Option<Duration>,
) -> Try {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Try::Failed;
    };
    // The job's fence and start, once it begins.
    let began: Arc<Mutex<Option<(u64, Instant)>>> = Arc::default();
    let (began_tx, began_rx) = tokio::sync::oneshot::channel::<()>();
    let job = runtime.spawn({
        let began = began.clone();
        async move {
            let client = LockClient::with_options(backend, LockOptions::new(ttl))?;
            client
                .run_once(&name, at_least, move |fence| async move {
                    *began.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some((fence.get(), Instant::now()));
                    let _ = began_tx.send(());
                    sleep(work).await;
                    Instant::now()
                })
                .await
        }
    });
    let killed = runtime.block_on(async move {
        let kill_time = async {
            match (began_rx.await, kill) {
                (Ok(()), Some(after)) => sleep(after).await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = kill_time => None,
            done = job => Some(done),
        }
    });
    let began = *began.lock().unwrap_or_else(|p| p.into_inner());
    match (killed, began) {
        (None, Some((fence, began))) => {
            // The crash: the job, its renewals and any release die with the runtime.
            drop(runtime);
            Try::Killed { fence, began }
        }
        (Some(Ok(Ok(Err(_busy)))), _) => Try::Busy,
        (Some(Ok(Ok(Ok(locked)))), Some((fence, began))) => Try::Ran {
            fence,
            began,
            ended: Some(*locked.output()),
        },
        // Lost while the job ran.
        (Some(Ok(Err(_))), Some((fence, began))) => Try::Ran {
            fence,
            began,
            ended: None,
        },
        _ => Try::Failed,
    }
}
