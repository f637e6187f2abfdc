//! One run per seed: the processes, the fault driver, and the checks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::backend::FenceDurability;
use distlock_core::testing::SeededRandomness;
use distlock_core::{Holder, LockBackend, LockClient};
use tokio::task::{JoinHandle, LocalSet};
use tokio::time::Instant;

use crate::check::{check, Restarts, Violation};
use crate::faults::Faults;
use crate::history::{history_hash, Event, Proc, Recorder, What, NET};
use crate::kind::{keys_of, options, Kind};
use crate::link::{Counts, Link, Net};
use crate::process::Process;
use crate::rng::SimRng;

/// Whether runs are replayed bit for bit: only where tokio was built with
/// `--cfg tokio_unstable`, which its seeded generator needs (this workspace's
/// `.cargo/config.toml` sets it). Without it, a seed still draws the same faults and
/// the same client randomness, but tokio's own draws (which ready `select!` branch
/// goes first, the wake order of a watch channel's receivers) differ from run to run.
pub const DETERMINISTIC: bool = cfg!(tokio_unstable);

/// A fresh server for one run: the backend under test, in this process, and how to
/// restart it without its state, where the simulation was given a way.
struct Server {
    backend: Arc<dyn LockBackend>,
    restart: Option<Box<dyn Fn() + Send + Sync>>,
}

type MakeServer = dyn Fn() -> Server + Send + Sync;

/// A deterministic simulation of the real client against one in-process backend.
///
/// Each seed is one run: a kind drawn from the seed's, its processes' clients (each a
/// real [`LockClient`] behind a simulated network link of its own), and the faults
/// the seed draws, on a current-thread runtime whose clock is paused (time jumps to
/// the next timer when every task waits), with the client's randomness seeded. The
/// same seed runs the same schedule, bit for bit: [`SeedReport::hash`] tells.
#[derive(Clone)]
pub struct Simulation {
    make: Arc<MakeServer>,
    kinds: Vec<Kind>,
    faults: Faults,
    processes: usize,
    length: Duration,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("kinds", &self.kinds)
            .field("faults", &self.faults)
            .field("processes", &self.processes)
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

/// What one seed's run did and broke.
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// The kind it ran.
    pub kind: Kind,
    /// Its history.
    pub history: Vec<Event>,
    /// The hash of its history ([`history_hash`]).
    pub hash: u64,
    /// Every broken promise, first first.
    pub violations: Vec<Violation>,
    /// What the network did.
    pub counts: Counts,
}

impl SeedReport {
    /// Whether every promise held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// The failure as a person reads it: the seed, how to replay it, each broken
    /// promise, and the history around the first.
    pub fn explain(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "seed {} ({}) broke {} promise(s); replay it with DISTLOCK_SIM_SEED={} \
             (run_seeds then runs that seed alone) or Simulation::run_seed({})",
            self.seed,
            self.kind.name(),
            self.violations.len(),
            self.seed,
            self.seed
        );
        for v in self.violations.iter().take(5) {
            let _ = writeln!(out, "  {} at {:?}: {}", v.promise, v.at, v.detail);
        }
        if self.violations.len() > 5 {
            let _ = writeln!(out, "  ... and {} more", self.violations.len() - 5);
        }
        if let Some(first) = self.violations.first() {
            let from = first.at.saturating_sub(Duration::from_secs(3));
            let to = first.at + Duration::from_millis(500);
            let _ = writeln!(out, "history from {from:?} to {to:?}:");
            for event in self.history.iter().filter(|e| e.at >= from && e.at <= to) {
                let _ = writeln!(out, "  {event}");
            }
        }
        out
    }
}

/// What a range of seeds did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds per kind, for each kind the simulation runs, in the order it was given
    /// ([`Kind::ALL`]'s by default).
    pub per_kind: Vec<(Kind, u64)>,
    /// The failing seeds' reports (at most the first ten).
    pub failures: Vec<SeedReport>,
    /// How many seeds failed.
    pub failed: u64,
    /// Every failing seed, in order (a soak's million can fail at more than ten).
    pub failed_seeds: Vec<u64>,
    /// Network counts over every seed.
    pub counts: Counts,
    /// Events recorded over every seed.
    pub events: u64,
}

impl Simulation {
    /// A simulation of the backends `make` returns: one fresh server per run, every
    /// kind the server supports, every fault ([`Faults::ALL`]), four processes, 20
    /// simulated seconds of work and 6 more without faults. The server is never
    /// restarted without its state: [`restartable`](Self::restartable) says how.
    pub fn new<F, B>(make: F) -> Self
    where
        F: Fn() -> B + Send + Sync + 'static,
        B: LockBackend + 'static,
    {
        Self::made(Arc::new(move || Server {
            backend: Arc::new(make()),
            restart: None,
        }))
    }

    /// As [`new`](Self::new), and the server also restarts without its state at times
    /// drawn from the seed, by `restart` (for the in-memory backend,
    /// [`MemoryBackend::restart`](distlock_core::MemoryBackend::restart)). What is
    /// checked across such a restart follows the backend's capabilities: where leases
    /// do not survive a restart ([`Capabilities::leases_survive_restart`]), a holder
    /// from before it may overlap a holder granted after it, until its validity, at
    /// most a TTL after the restart, has run out; past that, a holder whose lease is
    /// gone must have been told. Fences must still increase across it unless the
    /// backend declares them best effort ([`FenceDurability::BestEffort`]).
    ///
    /// [`Capabilities::leases_survive_restart`]: distlock_core::backend::Capabilities::leases_survive_restart
    /// [`FenceDurability::BestEffort`]: distlock_core::backend::FenceDurability::BestEffort
    pub fn restartable<F, B, R>(make: F, restart: R) -> Self
    where
        F: Fn() -> B + Send + Sync + 'static,
        B: LockBackend + 'static,
        R: Fn(&B) + Send + Sync + 'static,
    {
        let restart = Arc::new(restart);
        Self::made(Arc::new(move || {
            let backend = Arc::new(make());
            let restart = restart.clone();
            let restarted = backend.clone();
            Server {
                backend,
                restart: Some(Box::new(move || restart(&restarted))),
            }
        }))
    }

    fn made(make: Arc<MakeServer>) -> Self {
        Simulation {
            make,
            kinds: Kind::ALL.to_vec(),
            faults: Faults::ALL,
            processes: 4,
            length: Duration::from_secs(20),
        }
    }

    /// Runs only `kinds` (those the server supports).
    pub fn with_kinds(mut self, kinds: &[Kind]) -> Self {
        self.kinds = kinds.to_vec();
        self
    }

    /// Draws `faults` instead of every fault.
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// How many simulated seconds of work each run has (the quiet tail comes after).
    pub fn with_length(mut self, length: Duration) -> Self {
        self.length = length;
        self
    }

    /// The kinds this simulation runs on its server.
    pub fn kinds(&self) -> Vec<Kind> {
        let server = (self.make)().backend;
        self.kinds
            .iter()
            .copied()
            .filter(|k| k.runs_on(&*server))
            .collect()
    }

    /// Runs one seed, on this thread.
    pub fn run_seed(&self, seed: u64) -> SeedReport {
        let kinds = self.kinds();
        let kind = kinds[usize::try_from(seed % kinds.len() as u64).unwrap_or(0)];
        let seeded = SeededRandomness::new(seed);
        let mut builder = tokio::runtime::Builder::new_current_thread();
        builder.enable_time().start_paused(true);
        #[cfg(tokio_unstable)]
        builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
        let runtime = builder.build().expect("a current-thread runtime builds");
        let (history, counts, quiet_from, keys, restarts) = runtime.block_on(self.run(seed, kind));
        drop(runtime);
        drop(seeded);
        let mut violations = check(kind, &keys, &history, quiet_from, &restarts);
        violations.sort_by_key(|v| v.at);
        SeedReport {
            seed,
            kind,
            hash: history_hash(&history),
            history,
            violations,
            counts,
        }
    }

    /// The shortest prefix of `seed`'s schedule that still breaks a promise: the
    /// seed run with its work cut off after 1 s, 2 s, ... up to this simulation's
    /// length, the first that fails (`None` if the whole run passes). A run cut off
    /// earlier draws the same faults and the same workload up to its end, so the
    /// failure shows in the fewest events.
    pub fn shortest_failing(&self, seed: u64) -> Option<(Duration, SeedReport)> {
        let whole = self.length.as_secs().max(1);
        (1..=whole).find_map(|secs| {
            let length = Duration::from_secs(secs);
            let report = self.clone().with_length(length).run_seed(seed);
            (!report.passed()).then_some((length, report))
        })
    }

    async fn run(&self, seed: u64, kind: Kind) -> Ran {
        let Server {
            backend: server,
            restart,
        } = (self.make)();
        let keys = keys_of(kind, &*server);
        let caps = server.capabilities().clone();
        let restarts = Restarts {
            leases_kept: caps.leases_survive_restart,
            fences_kept: caps.fence_durability != FenceDurability::BestEffort,
            at: Vec::new(),
        };
        let restart = restart.filter(|_| self.faults.restarts);
        let rec = Recorder::new();
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let ns = format!("run{}/", RUNS.fetch_add(1, Ordering::Relaxed));
        let mut rng = SimRng::new(seed, 0);
        let net = Arc::new(Net::new(
            self.faults,
            SimRng::new(seed, 1),
            self.processes,
            rec.clone(),
            &caps,
        ));
        let start = Instant::now();
        let end = start + self.length;
        let quiet = end + Duration::from_secs(6);
        let local = LocalSet::new();
        let lives: Arc<Mutex<Vec<Life>>> = Arc::default();
        let disk: crate::process::Disk = Arc::new(Mutex::new(vec![None; self.processes]));
        let spawn = {
            let (server, net, rec, lives, ns, disk) = (
                server.clone(),
                net.clone(),
                rec.clone(),
                lives.clone(),
                ns.clone(),
                disk.clone(),
            );
            move |slot: usize, life: u32, until: Instant| {
                let link = Arc::new(Link::new(server.clone(), net.clone(), slot));
                // Each incarnation stores its own holder identity, by which a handoff's
                // recipient is told.
                let holder = Holder::new(format!("p{slot}.{life}"))
                    .expect("a process's holder identity is valid");
                let client =
                    LockClient::with_options(link.clone(), options(kind).with_holder(holder))
                        .expect("the simulation's options are valid");
                let process = Process {
                    proc: Proc { slot, life },
                    client,
                    server: server.clone(),
                    rec: rec.clone(),
                    rng: SimRng::new(seed, 100 + (slot as u64) * 1000 + u64::from(life)),
                    // A leader loop runs on through the quiet tail, where it must lead,
                    // and is shut down a second before its end.
                    end: if kind == Kind::LeaderLoop {
                        quiet - SHUT_DOWN_BEFORE_QUIET_ENDS
                    } else {
                        until
                    },
                    ns: ns.clone(),
                    disk: disk.clone(),
                };
                let task = tokio::task::spawn_local(process.run(kind));
                let mut lives = lives.lock().unwrap_or_else(|p| p.into_inner());
                if lives.len() <= slot {
                    lives.resize_with(slot + 1, || None);
                }
                lives[slot] = Some((life, link, task));
            }
        };
        let processes = self.processes;
        let faults = self.faults;
        let counted = Arc::new(AtomicU64::new(0));
        let restarts = Mutex::new(restarts);
        local
            .run_until(async {
                for slot in 0..processes {
                    spawn(slot, 0, end);
                }
                // The fault driver: process faults at times drawn from the seed, at
                // their rate, until the work ends. The gaps do not depend on the
                // run's length, so a shorter run is a prefix of a longer one.
                let mut at = Duration::ZERO;
                let mean_gap = 20_000 / u64::from(faults.process_faults.max(1));
                loop {
                    at += rng.millis(0, 2 * mean_gap);
                    if faults.process_faults == 0 || at >= self.length {
                        break;
                    }
                    tokio::time::sleep_until(start + at).await;
                    let slot = usize::try_from(rng.below(processes as u64)).unwrap_or(0);
                    let span = rng.millis(100, 2500);
                    // A crash, or where the server can restart without its state,
                    // one of the two at even odds.
                    let choices = if faults.crashes || restart.is_some() {
                        5
                    } else {
                        4
                    };
                    match rng.below(choices) {
                        0 => {
                            net.cut(slot, span, false);
                            rec.record(
                                NET,
                                What::Fault(format!("p{slot} cut off both ways for {span:?}")),
                            );
                        }
                        1 => {
                            net.cut(slot, span, true);
                            rec.record(
                                NET,
                                What::Fault(format!("p{slot}'s replies cut off for {span:?}")),
                            );
                        }
                        2 => {
                            net.stall(slot, span);
                            rec.record(NET, What::Fault(format!("p{slot} stalled for {span:?}")));
                        }
                        3 => {
                            net.server_down(span);
                            rec.record(
                                NET,
                                What::Fault(format!(
                                    "the server down for {span:?}, its state kept"
                                )),
                            );
                        }
                        4.. if !faults.crashes || restart.is_some() && rng.chance(500) => {
                            if let Some(restart) = &restart {
                                restart();
                                restarts
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .at
                                    .push(rec.now());
                                net.count_restart();
                                rec.record(NET, What::Restarted);
                            }
                        }
                        _ => {
                            let taken =
                                lives.lock().unwrap_or_else(|p| p.into_inner())[slot].take();
                            if let Some((life, link, task)) = taken {
                                link.kill();
                                task.abort();
                                let _ = task.await;
                                rec.record(Proc { slot, life }, What::Crashed);
                                tokio::time::sleep(span).await;
                                spawn(slot, life + 1, end);
                            }
                        }
                    }
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep_until(end).await;
                net.calm();
                // Let every process finish its last step; a leader loop runs on
                // nearly to the quiet tail's end, and resigns when it is shut down.
                if kind == Kind::LeaderLoop {
                    tokio::time::sleep_until(quiet - SHUT_DOWN_BEFORE_QUIET_ENDS / 2).await;
                    // The election's key: its name, or the lease it runs over.
                    let key = match server.permits() {
                        Some(_) => format!("{ns}leader"),
                        None => format!("{}{ns}leader", distlock_core::LEASE_ELECTION_PREFIX),
                    };
                    if let Some(holders) = leaders(&*server, &key).await {
                        rec.record(
                            NET,
                            What::NotResigned(format!(
                                "the leader loops were shut down {:?} ago, and the election \
                                 still has {holders}",
                                SHUT_DOWN_BEFORE_QUIET_ENDS / 2
                            )),
                        );
                    }
                }
                tokio::time::sleep_until(quiet).await;
            })
            .await;
        let tasks: Vec<Life> =
            std::mem::take(&mut *lives.lock().unwrap_or_else(|p| p.into_inner()));
        for (_, link, task) in tasks.into_iter().flatten() {
            link.kill();
            task.abort();
        }
        drop(local);
        // A leader must be elected within a few TTLs of the faults' end.
        (
            rec.take(),
            net.counts(),
            end - start + Duration::from_secs(3),
            keys,
            restarts.into_inner().unwrap_or_else(|p| p.into_inner()),
        )
    }
}

type Life = Option<(u32, Arc<Link>, JoinHandle<()>)>;

/// How long before the quiet tail ends the leader loops are shut down: half of it
/// later, the election must have no leader (a loop resigns when shut down).
const SHUT_DOWN_BEFORE_QUIET_ENDS: Duration = Duration::from_secs(1);

/// Who leads the election `key` on `server`, asked directly: `None` when nobody
/// does.
async fn leaders(server: &dyn LockBackend, key: &str) -> Option<String> {
    let key = distlock_core::LockKey::new(key).ok()?;
    match server.permits() {
        Some(permits) => match permits.holders(&key).await {
            Ok(holders) if holders.is_empty() => None,
            Ok(holders) => Some(format!(
                "holders with fences {:?}",
                holders.iter().map(|h| h.fence.get()).collect::<Vec<_>>()
            )),
            Err(error) => Some(format!("no answer to who leads: {error}")),
        },
        None => match server.inspect(&key).await {
            Ok(None) => None,
            Ok(Some(info)) => Some(format!("a lease with fence {}", info.fence)),
            Err(error) => Some(format!("no answer to who leads: {error}")),
        },
    }
}

/// A run's history, network counts, when a leader must lead again, the keys its
/// holders hold, and the server's restarts without its state.
type Ran = (Vec<Event>, Counts, Duration, Vec<String>, Restarts);

impl Simulation {
    /// Runs `seeds` on `threads` threads (each seed on one thread, its own runtime),
    /// and sums them up. The same seeds give the same summary, whatever the threads.
    ///
    /// With the environment variable `DISTLOCK_SIM_SEED` set to a seed, it runs that
    /// seed alone instead: the replay of a failure a test printed, from the same test.
    pub fn run_seeds(&self, seeds: std::ops::Range<u64>, threads: usize) -> Summary {
        let seeds = seeds_to_run(seeds, std::env::var("DISTLOCK_SIM_SEED").ok().as_deref());
        let next = std::sync::atomic::AtomicU64::new(seeds.start);
        let reports = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed >= seeds.end {
                        return;
                    }
                    let report = self.run_seed(seed);
                    let brief = (
                        seed,
                        report.kind,
                        report.history.len() as u64,
                        report.counts,
                        (!report.passed()).then_some(report),
                    );
                    reports
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(brief);
                });
            }
        });
        let mut reports = reports.into_inner().unwrap_or_else(|p| p.into_inner());
        reports.sort_by_key(|r| r.0);
        let mut summary = Summary {
            per_kind: self.kinds().into_iter().map(|k| (k, 0)).collect(),
            ..Summary::default()
        };
        for (seed, kind, events, counts, failure) in reports {
            summary.seeds += 1;
            summary.events += events;
            if let Some(entry) = summary.per_kind.iter_mut().find(|(k, _)| *k == kind) {
                entry.1 += 1;
            }
            let c = &mut summary.counts;
            c.sent += counts.sent;
            c.requests_lost += counts.requests_lost;
            c.replies_lost += counts.replies_lost;
            c.duplicated += counts.duplicated;
            c.stalled += counts.stalled;
            c.paused += counts.paused;
            c.restarts += counts.restarts;
            c.drifted += counts.drifted;
            if let Some(failure) = failure {
                summary.failed += 1;
                summary.failed_seeds.push(seed);
                if summary.failures.len() < 10 {
                    summary.failures.push(failure);
                }
            }
        }
        summary
    }
}

/// The seeds `run_seeds` runs: `seeds`, or the one `replay` names.
fn seeds_to_run(seeds: std::ops::Range<u64>, replay: Option<&str>) -> std::ops::Range<u64> {
    match replay.and_then(|s| s.trim().parse::<u64>().ok()) {
        Some(seed) => seed..seed.saturating_add(1),
        None => seeds,
    }
}

#[cfg(test)]
mod tests {
    use super::seeds_to_run;

    #[test]
    fn a_seed_in_the_environment_replaces_the_range() {
        assert_eq!(seeds_to_run(0..500, None), 0..500);
        assert_eq!(seeds_to_run(0..500, Some("874")), 874..875);
        assert_eq!(seeds_to_run(0..500, Some(" 7 ")), 7..8);
        // Not a seed: the range, as if unset.
        assert_eq!(seeds_to_run(0..500, Some("x")), 0..500);
    }
}
