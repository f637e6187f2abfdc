//! `lockbench torture`: many independent clients, faults on a schedule, and registers
//! that must refuse every stale write, per backend; then a checker reads the whole
//! history.
//!
//! Per backend, 8 clients, each behind a link of its own that can be cut and slowed,
//! contend for a few keys. A holder reads two registers under the lock, works for a
//! random time, and writes back one more than it read, with its fence:
//!
//! - most holders hold through a `LockGuard` (renewed; they stop when told the lock
//!   is lost); two clients hold a quarter of their holds for several TTLs, writing
//!   all along, so that faults land inside holds that outlive their TTL;
//! - some take a bare lease and are frozen past its TTL without renewing, as a paused
//!   process would be, then write as if nothing had happened.
//!
//! The fenced register is distlock's fenced-store adapter of the backend's kind on a
//! server of its own (see [`register`]); the unfenced one, the control, is a row in a
//! PostgreSQL server of its own. Every row runs the backend it names on servers
//! started for it (see [`crate::rows`]). Faults cycle on a schedule: the server
//! paused past the TTL, one client partitioned, latency on one client, the server's
//! connections killed, the server restarted, killed and started (on Redlock, a
//! minority of its masters; on a cluster, one master). A fault the harness cannot
//! inject is retried, then reported as the harness's outcome, never as a finding.
//!
//! The checker then reports: stale writes the fenced register accepted, updates it
//! lost, fence regressions per key, holders that went on past their validity without
//! the loss signal, holders that overlapped, and leases left on the server after the
//! run: each must be 0. A fault the capabilities declare the backend cannot keep
//! through excuses only the violation declared, inside its window, and the report
//! lists each (see [`history::Excuses`]).
//! The unfenced control must lose updates: that shows the workload does put stale
//! holders against newer ones, and that the checker sees it.
//!
//! Beside the lock holders, leader loops lead an election's terms and, where the
//! backend has permits, clients hold a semaphore's permits, on clients of their own
//! under the same faults, with checks of their own (see [`kinds`]).

mod faults;
mod history;
mod kinds;
mod register;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{DynLockBackend, LockKey};
use distlock_conformance::{LinkControl, ServerControl, Target};
use distlock_testservers::{Postgres, ServerHandle};
use serde::Serialize;
use tokio::time::{sleep, timeout, Instant};

use self::faults::{FaultScope, Injector};
use self::history::{Findings, History};
use self::kinds::{Kinds, KindsReport};
use self::register::{Control, FencedRegister, Registers};
use self::workload::Workload;
use crate::options::RunOptions;
use crate::rows::Row;
use crate::run::{progress, write_results, BoxError, Mode};

/// Many clients, faults on a schedule, and a fenced register that must refuse every
/// stale write (torture.md, torture.json). `--quick` injects each fault once per
/// backend (CI) and goes on until 300 lock operations; the standard run (the default)
/// injects each fault once with 16 clients on 8 keys, until 800 lock operations;
/// `--soak` every fault twice, with 32 clients on 64 keys, until 100,000 lock
/// operations per backend.
#[derive(Debug, clap::Args)]
pub(crate) struct TortureArgs {
    #[command(flatten)]
    pub(crate) run: RunOptions,
}

/// How long and how hard a run goes.
#[derive(Debug, Clone, Copy, Serialize)]
struct Plan {
    clients: usize,
    keys: usize,
    /// Rounds of the fault schedule (each available fault once per round), at least.
    rounds: usize,
    /// Lock operations per backend, at least.
    min_lock_ops: usize,
    /// The pause between two faults.
    #[serde(serialize_with = "millis")]
    gap: Duration,
    /// The longest a backend runs, whatever the figures above.
    #[serde(serialize_with = "millis")]
    limit: Duration,
    pause_share: f64,
    /// How many clients hold a quarter of their guarded holds for several TTLs,
    /// renewed, writing all along.
    long_clients: usize,
    #[serde(serialize_with = "millis")]
    work_max: Duration,
    /// Rounds, at least, where faults are aimed by role (a replicated row): enough
    /// that the leader is hit five times or more outside the quick run.
    role_rounds: usize,
    /// The longest such a row runs: its leader faults wait for a new leader.
    #[serde(serialize_with = "millis")]
    role_limit: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u128(d.as_millis())
}

impl Plan {
    fn quick() -> Self {
        Plan {
            clients: 8,
            // On 3 keys every row took two or three rounds of faults to reach its lock
            // operations (holds paused past their TTL keep a key each); on 6, one
            // round is about enough, and 8 clients still meet on each key.
            keys: 6,
            rounds: 1,
            // Enough holds that paused holders meet newer ones (the control must
            // lose updates), on the slowest rows too.
            min_lock_ops: 300,
            gap: Duration::from_secs(1),
            limit: Duration::from_secs(120),
            pause_share: 0.05,
            long_clients: 2,
            work_max: Duration::from_millis(5),
            role_rounds: 1,
            role_limit: Duration::from_secs(240),
        }
    }

    fn of(mode: Mode) -> Self {
        match mode {
            Mode::Quick => Self::quick(),
            Mode::Standard => Self::standard(),
            Mode::Soak => Self::soak(),
        }
    }

    /// This plan for a row whose faults are aimed by role.
    fn by_role(self) -> Self {
        Plan {
            rounds: self.rounds.max(self.role_rounds),
            limit: self.limit.max(self.role_limit),
            ..self
        }
    }

    /// The quick run's schedule (each fault once) with the soak's clients and keys,
    /// until twice the quick run's lock operations, and rows aimed by role through
    /// two rounds of their faults (at least five on the leader or master): about 12
    /// minutes of the standard run's 40.
    fn standard() -> Self {
        Plan {
            clients: 16,
            keys: 8,
            rounds: 1,
            min_lock_ops: STANDARD_LOCK_OPS,
            gap: Duration::from_secs(1),
            limit: Duration::from_secs(90),
            pause_share: 0.02,
            long_clients: 2,
            work_max: Duration::from_millis(2),
            role_rounds: 2,
            role_limit: Duration::from_secs(360),
        }
    }

    /// More clients on many more keys than the standard run: on 8 keys, 16 clients
    /// spend most of their time queued behind each other (about 50 lock operations
    /// a second even on the memory backend), and 100,000 would take hours; on 64 keys
    /// 32 clients still meet often, under a fault every 5 s.
    fn soak() -> Self {
        Plan {
            clients: 32,
            keys: 64,
            rounds: 2,
            min_lock_ops: SOAK_LOCK_OPS,
            gap: Duration::from_secs(5),
            limit: Duration::from_secs(20 * 60),
            pause_share: 0.002,
            long_clients: 4,
            work_max: Duration::from_millis(2),
            role_rounds: 3,
            role_limit: Duration::from_secs(30 * 60),
        }
    }
}

/// What a standard run must reach per backend.
const STANDARD_LOCK_OPS: usize = 800;

/// What a soak must reach per backend.
const SOAK_LOCK_OPS: usize = 100_000;

/// One backend's torture run, as reported.
#[derive(Debug, Clone, Serialize, Default)]
struct TortureRun {
    backend: String,
    server: String,
    /// The fenced register's adapter and server.
    register: String,
    started: bool,
    ttl_ms: u128,
    seconds: f64,
    /// Lock operations that failed under the faults (a server away, a wait timed out).
    lock_errors: usize,
    /// Those failures by error kind.
    lock_error_kinds: String,
    /// Faults the schedule could not inject on this target, and why.
    unavailable: Vec<String>,
    /// Which servers the server faults reach.
    fault_scope: String,
    /// Faults the backend's capabilities say it cannot keep the contract through, and
    /// what they say.
    declared: Vec<String>,
    /// For faults aimed by role, each one's member, whether it led, and who led next.
    hits: Vec<String>,
    findings: Findings,
    /// The kinds beside the mutex: permits and leader terms under the same faults.
    kinds: KindsReport,
    /// Faults that took more than one attempt to inject.
    retried: Vec<String>,
    /// Faults the schedule tried and could not inject, and why: the harness's
    /// outcome, never a safety finding.
    not_injected: Vec<String>,
    /// Every safety check that failed, with the part of the history that broke it.
    failures: Vec<String>,
    /// What the harness could not do as the mode promises: a fault injected fewer
    /// times than promised, a run that could not complete or fell short of its lock
    /// operations, a row that is not the backend it names.
    harness: Vec<String>,
}

/// Runs the torture run on every backend asked for and writes its report.
pub(crate) async fn main(args: RunOptions) -> ExitCode {
    let mode = args.mode();
    let plan = Plan::of(mode);
    progress("torture", "starting the registers' PostgreSQL server");
    let (_register_server, register_url) = match register_server().await {
        Ok(started) => started,
        Err(e) => {
            eprintln!("lockbench torture: the registers' server could not be started: {e}");
            return ExitCode::FAILURE;
        }
    };
    let control = match Control::new(&register_url, 24).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lockbench torture: the control register could not be set up: {e}");
            return ExitCode::FAILURE;
        }
    };
    crate::run::plan_rows(&args.backends);
    let out = std::path::Path::new(&args.out);
    let mut runs = Vec::new();
    for name in &args.backends {
        let mut run = TortureRun {
            backend: name.clone(),
            ..TortureRun::default()
        };
        let started = async {
            let row = Row::parse(name)?;
            let opened = target(row).await?;
            // A row is exactly what ran: its backend must be the one it names.
            row.check(&**opened.target.backend(), opened.servers)
                .map_err(|e| format!("not the backend it names: {e}"))?;
            progress(name, "torture: starting the fenced register");
            let register = FencedRegister::start(row, &register_url).await?;
            Ok::<_, BoxError>((opened, register))
        };
        match started.await {
            Ok((opened, register)) => {
                run.server = opened.server.clone();
                run.register = register.server.clone();
                run.started = true;
                if let Err(e) = torture(&mut run, &opened, &control, &register, plan).await {
                    run.harness.push(format!("the run could not complete: {e}"));
                }
            }
            Err(e) => run.server = format!("not run: {e}"),
        }
        runs.push(run);
        // What ran so far, kept should a later backend end the run.
        if runs.len() < args.backends.len() {
            let json = serde_json::json!({ "mode": mode.name(), "plan": plan, "backends": runs });
            let kept = write_results(
                out,
                ("torture.md", &markdown(mode.name(), plan, &runs)),
                ("torture.json", &json),
            );
            if let Err(e) = kept {
                eprintln!(
                    "lockbench torture: cannot write the results so far into {}: {e}",
                    out.display()
                );
            }
        }
    }
    let mode = mode.name();
    let markdown = markdown(mode, plan, &runs);
    let json = serde_json::json!({ "mode": mode, "plan": plan, "backends": runs });
    if let Err(e) = write_results(out, ("torture.md", &markdown), ("torture.json", &json)) {
        eprintln!(
            "lockbench torture: cannot write into {}: {e}",
            out.display()
        );
        return ExitCode::FAILURE;
    }
    println!("{markdown}");
    for run in &runs {
        if !run.started {
            eprintln!(
                "lockbench torture: {} was not run: {}",
                run.backend, run.server
            );
        }
        for failure in &run.failures {
            eprintln!("lockbench torture: {}: VIOLATED: {failure}", run.backend);
        }
        for said in &run.harness {
            eprintln!("lockbench torture: {}: harness: {said}", run.backend);
        }
    }
    ExitCode::from(exit_code(&runs, args.require_all))
}

/// Each available fault injected fewer than `rounds` times, said as the harness's
/// outcome.
fn short_of_promise(
    kinds: &[history::FaultKind],
    faults: &[history::Fault],
    rounds: usize,
) -> Vec<String> {
    kinds
        .iter()
        .filter_map(|kind| {
            let injected = faults.iter().filter(|f| f.kind == *kind).count();
            (injected < rounds).then(|| {
                format!(
                    "the fault {} was injected {injected} times of the {rounds} this mode promises",
                    kind.label()
                )
            })
        })
        .collect()
}

/// The run's exit code: [`crate::run::EXIT_VIOLATION`] when a safety check failed on any
/// backend; otherwise [`crate::run::EXIT_HARNESS`] when the harness could not do what the
/// mode promises (a fault not injected as often as promised, a run cut short, a row
/// not the backend it names, or, with `--require-all`, a backend not run); 0 when
/// every check held on every backend that ran.
fn exit_code(runs: &[TortureRun], require_all: bool) -> u8 {
    if runs.iter().any(|r| !r.failures.is_empty()) {
        crate::run::EXIT_VIOLATION
    } else if runs
        .iter()
        .any(|r| !r.harness.is_empty() || (require_all && !r.started))
    {
        crate::run::EXIT_HARNESS
    } else {
        0
    }
}

/// The registers' own PostgreSQL server: a container of its own, or the one
/// `DISTLOCK_TORTURE_REGISTER_URL` names.
async fn register_server() -> Result<(Option<ServerHandle>, String), BoxError> {
    if let Some(url) = std::env::var("DISTLOCK_TORTURE_REGISTER_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        return Ok((None, url));
    }
    let handle = ServerHandle::start(&Postgres).await?;
    let url = handle.url();
    Ok((Some(handle), url))
}

/// A row's target for the torture run, and where its server faults land.
struct Opened {
    target: Target,
    /// Where it runs, for the report.
    server: String,
    /// How many lock servers it runs on.
    servers: usize,
    /// The server faults' control and what it reaches.
    faults: Option<(Arc<dyn ServerControl>, FaultScope)>,
    /// A replicated row's members and their roles, where faults are aimed by role.
    roles: Option<Arc<dyn distlock_testservers::Roles>>,
}

/// The target `row` names (see [`crate::rows::open`]), with where its server faults
/// land: on the whole target, on a minority of Redlock's masters, on one of a
/// cluster's masters; none on an external server.
async fn target(row: Row) -> Result<Opened, BoxError> {
    let opened = crate::rows::open(row).await?;
    let (of, members) = (opened.servers, opened.fault_members.len());
    let faults = match row {
        Row::Redlock { .. } => Some(FaultScope::Minority { of, members }),
        Row::Cluster { .. } => Some(FaultScope::OneOf { of }),
        Row::Memory | Row::Server(_) => None,
        Row::Sentinel { .. } | Row::EtcdCluster { .. } | Row::Ensemble { .. } => {
            let leader = opened.roles.as_ref().map_or("leader", |r| r.leader_word());
            let control = opened.target.control().cloned();
            let roles = opened.roles.clone();
            return Ok(Opened {
                faults: control.map(|c| (c, FaultScope::Roles { of, leader })),
                target: opened.target,
                server: opened.server,
                servers: opened.servers,
                roles,
            });
        }
    };
    let faults = match faults {
        Some(scope) if members > 0 => {
            let control: Arc<dyn ServerControl> =
                Arc::new(distlock_testservers::Every::new(opened.fault_members));
            Some((control, scope))
        }
        Some(_) => None,
        None => opened
            .target
            .control()
            .cloned()
            .map(|control| (control, FaultScope::Whole)),
    };
    Ok(Opened {
        target: opened.target,
        server: opened.server,
        servers: opened.servers,
        faults,
        roles: None,
    })
}

/// One backend's run.
async fn torture(
    run: &mut TortureRun,
    opened: &Opened,
    control: &Control,
    register: &FencedRegister,
    plan: Plan,
) -> Result<(), BoxError> {
    let plan = match opened.roles {
        Some(_) => plan.by_role(),
        None => plan,
    };
    let target = &opened.target;
    let capabilities = target.capabilities().clone();
    let ttl = capabilities.ttl_at_least(Duration::from_secs(1));
    run.ttl_ms = ttl.as_millis();
    progress(&run.backend, "torture: connecting the clients");
    let mut clients: Vec<Arc<DynLockBackend>> = Vec::new();
    let mut links: Vec<Arc<dyn LinkControl>> = Vec::new();
    for _ in 0..plan.clients {
        if let Some(linked) = target.linked_client().await {
            let (client, link) = linked?;
            clients.push(client);
            links.push(link);
        } else if let Some(client) = target.another_client().await {
            clients.push(client?);
        } else {
            clients.push(target.backend().clone());
        }
    }
    // The kinds' clients, each behind a link of its own where the target has links:
    // leader loops and job runners on every row, permit holders where the backend has
    // permits.
    let permits_here = target.backend().permits().is_some();
    let kind_clients = kinds::LEADER_CLIENTS
        + kinds::JOB_CLIENTS
        + if permits_here {
            kinds::PERMIT_CLIENTS
        } else {
            0
        };
    let mut kind_backends: Vec<Arc<DynLockBackend>> = Vec::new();
    for _ in 0..kind_clients {
        if let Some(linked) = target.linked_client().await {
            let (client, link) = linked?;
            kind_backends.push(client);
            links.push(link);
        } else if let Some(client) = target.another_client().await {
            kind_backends.push(client?);
        } else {
            kind_backends.push(target.backend().clone());
        }
    }
    let run_id: u32 = rand::random();
    let keys = (0..plan.keys)
        .map(|k| LockKey::new(format!("lockbench-torture/{run_id:08x}/{k}")))
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let registers = Registers::new(control, register.store.clone(), plan.keys, start).await?;
    let work = Arc::new(Workload {
        backend: run.backend.clone(),
        keys: keys.clone(),
        ttl,
        registers: registers.clone(),
        pause_share: plan.pause_share,
        long_clients: plan.long_clients,
        drift: capabilities.clock_drift.allowance(ttl),
        work_max: plan.work_max,
        start,
        stop: AtomicBool::new(false),
        holds: Mutex::new(Vec::new()),
        errors: AtomicUsize::new(0),
        error_kinds: Default::default(),
        register_error: Mutex::new(None),
    });
    let holders: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| tokio::spawn(workload::holder(work.clone(), i, client)))
        .collect();
    let drift = capabilities.clock_drift;
    let beside = Arc::new(Kinds::new(
        run_id,
        ttl,
        |lease| drift.allowance(lease),
        start,
    ));
    let mut kind_tasks = Vec::new();
    for (i, client) in kind_backends.into_iter().enumerate() {
        kind_tasks.push(if i < kinds::LEADER_CLIENTS {
            tokio::spawn(kinds::leader(beside.clone(), i, client))
        } else if i < kinds::LEADER_CLIENTS + kinds::JOB_CLIENTS {
            tokio::spawn(kinds::job_runner(beside.clone(), i, client))
        } else {
            tokio::spawn(kinds::permit_holder(beside.clone(), i, client))
        });
    }
    if permits_here {
        kind_tasks.push(tokio::spawn(kinds::sampler(
            beside.clone(),
            target.backend().clone(),
        )));
    }

    let (control, scope) = match &opened.faults {
        Some((control, scope)) => (Some(control.clone()), *scope),
        None => (None, FaultScope::Whole),
    };
    run.fault_scope = scope.to_string();
    let injector = Injector {
        control,
        scope,
        roles: opened.roles.clone(),
        turns: Default::default(),
        links,
        ttl,
        start,
    };
    let kinds = injector.available();
    for kind in history::FaultKind::ALL {
        if !kinds.contains(&kind) {
            run.unavailable.push(format!(
                "{}: this target has no control for it",
                kind.label()
            ));
        }
    }
    progress(
        &run.backend,
        &format!(
            "torture: {} clients on {} keys, ttl {ttl:?}; faults: {}",
            plan.clients,
            plan.keys,
            kinds
                .iter()
                .map(|k| k.label())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let mut faults = Vec::new();
    let mut rounds = 0;
    let stopped = || work.stop.load(Ordering::SeqCst);
    'schedule: loop {
        for &kind in &kinds {
            sleep(plan.gap).await;
            if stopped() || start.elapsed() > plan.limit {
                break 'schedule;
            }
            match injector
                .inject_retrying(kind, &capabilities, faults::ATTEMPTS)
                .await
            {
                Ok((fault, attempts)) => {
                    if attempts > 1 {
                        run.retried
                            .push(format!("{}: injected at attempt {attempts}", kind.label()));
                    }
                    faults.push(fault);
                }
                Err(not) => {
                    injector.heal_all().await;
                    progress(&run.backend, &format!("torture: {not}"));
                    run.not_injected.push(not.to_string());
                }
            }
        }
        rounds += 1;
        if kinds.is_empty() {
            sleep(plan.gap).await;
        }
        let enough = rounds >= plan.rounds && work.lock_ops() >= plan.min_lock_ops;
        if enough || stopped() || start.elapsed() > plan.limit {
            break;
        }
        progress(
            &run.backend,
            &format!(
                "torture: {} lock operations so far; failed: {}",
                work.lock_ops(),
                work.error_kinds()
            ),
        );
    }
    injector.heal_all().await;
    // A little calm after the last fault, then the holders finish what they hold.
    sleep(plan.gap).await;
    work.stop.store(true, Ordering::SeqCst);
    beside.stop.store(true, Ordering::SeqCst);
    let finish = ttl * 8 + Duration::from_secs(30);
    for holder in holders.into_iter().chain(kind_tasks) {
        if timeout(finish, holder).await.is_err() {
            run.failures.push(format!(
                "a holder did not finish within {finish:?} of the stop"
            ));
        }
    }
    run.seconds = start.elapsed().as_secs_f64();
    run.lock_errors = work.errors.load(Ordering::SeqCst);
    run.lock_error_kinds = work.error_kinds();
    if let Some(e) = work
        .register_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        return Err(format!("the registers failed: {e}").into());
    }

    // Every holder is done: once two TTLs have passed (etcd renews a lease through a
    // restart), no key may still be held.
    progress(&run.backend, "torture: checking for leases left behind");
    sleep(ttl * 2 + capabilities.ttl_granularity + Duration::from_millis(200)).await;
    let mut leases_left = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let info = inspect_when_up(target, key).await?;
        if let Some(info) = info {
            leases_left.push(format!(
                "key {k} still held with fence {} for {:?} more",
                info.fence, info.remaining
            ));
        }
    }
    for fault in &faults {
        if let Some(hit) = &fault.hit {
            run.hits.push(format!("{hit} at {:.1} s", fault.start));
        }
        if let Some(said) = &fault.declared {
            let line = format!("{}: {said}", fault.kind.label());
            if !run.declared.contains(&line) {
                run.declared.push(line);
            }
        }
    }
    let aftermath = (ttl * 2 + capabilities.ttl_granularity).as_secs_f64();
    run.kinds = beside.report(&faults, aftermath, permits_here);
    let holds = std::mem::take(&mut *work.holds.lock().unwrap_or_else(|p| p.into_inner()));
    let (fenced, unfenced, stored_fences) = registers.totals().await?;
    let history = History {
        holds,
        faults,
        log: registers.log(),
        fenced,
        stored_fences,
        unfenced,
        leases_left,
        aftermath,
    };
    run.findings = history.check();
    run.failures.extend(run.findings.failures());
    run.failures.extend(run.kinds.failures());
    run.harness.extend(run.findings.proved_nothing());
    run.harness.extend(run.kinds.proved_nothing());
    run.harness.extend(work.misdirected());
    run.harness
        .extend(short_of_promise(&kinds, &history.faults, plan.rounds));
    if run.findings.lock_ops < plan.min_lock_ops {
        run.harness.push(format!(
            "{} lock operations, short of the {} this mode needs (in {:.0} s)",
            run.findings.lock_ops, plan.min_lock_ops, run.seconds
        ));
    }
    progress(
        &run.backend,
        &format!(
            "torture: {} lock operations, {} faults, {} checks failed",
            run.findings.lock_ops,
            history.faults.len(),
            run.failures.len()
        ),
    );
    Ok(())
}

/// Inspects `key`, retrying for a minute while the server is coming back.
async fn inspect_when_up(
    target: &Target,
    key: &LockKey,
) -> Result<Option<distlock::LockInfo>, BoxError> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        match timeout(Duration::from_secs(10), target.backend().inspect(key)).await {
            Ok(Ok(info)) => return Ok(info),
            Ok(Err(e)) if Instant::now() >= give_up || !e.is_retryable() => return Err(e.into()),
            Err(_) if Instant::now() >= give_up => return Err("inspect hung".into()),
            _ => sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The report: one row per backend, then what failed, named.
fn markdown(mode: &str, plan: Plan, runs: &[TortureRun]) -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    let _ = writeln!(md, "# lockbench torture ({mode} mode)\n");
    let _ = writeln!(
        md,
        "{} independent clients per backend on {} keys, each behind a link of its own. \
         The fenced register is distlock's fenced-store adapter of the backend's kind, on \
         a server of its own (named below); the unfenced control is a PostgreSQL row. \
         {:.1}% of holds pause past their TTL without renewing; {} clients hold a \
         quarter of their guarded holds for 2 to 4 TTLs, renewed, writing every quarter TTL, with \
         the faults landing inside some. A fault every {:?}. A declared fault excuses only the violation its \
         capabilities declare, inside its window (shown).\n",
        plan.clients,
        plan.keys,
        plan.pause_share * 100.0,
        plan.long_clients,
        plan.gap
    );
    let list = |map: &std::collections::BTreeMap<String, usize>| {
        if map.is_empty() {
            return "—".to_owned();
        }
        let items: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
        items.join(", ")
    };
    let rows = runs.iter().map(|run| {
        let f = &run.findings;
        if !run.started {
            return vec![run.backend.clone(), run.server.clone()];
        }
        vec![
            run.backend.clone(),
            format!("{} ms", run.ttl_ms),
            format!("{:.0}", run.seconds),
            f.lock_ops.to_string(),
            f.paused_holds.to_string(),
            format!("{} ({})", f.long_holds, f.long_holds_faulted),
            list(&f.faults),
            run.not_injected.len().to_string(),
            f.stale_writes.len().to_string(),
            f.lost_updates_fenced.to_string(),
            f.fence_regressions.len().to_string(),
            f.unsignalled.len().to_string(),
            f.overlaps.len().to_string(),
            f.leases_left.len().to_string(),
            list(&f.declared),
            f.lost_updates_unfenced.to_string(),
        ]
    });
    crate::report::table(
        &mut md,
        "backend | ttl | seconds | lock ops | paused holds | holds over several TTLs (a fault inside) | faults | faults not injected | stale writes accepted | lost updates, fenced | fence regressions | unsignalled past validity | overlapping holders | leases left | declared | lost updates, unfenced control",
        rows,
    );
    let _ = writeln!(
        md,
        "\nThe kinds beside the mutex, on clients of their own under the same faults: {} leader \
         loops on one election on every row (each term led up to two TTLs, then resigned); \
         {} hosts running a job once per slot with `run_once` on every row (a slot and the \
         least hold three TTLs long; each try a process of its own, about half of them \
         killed mid-job with no release); where the backend has permits, {} clients on a \
         semaphore of {}, whose holders the server is asked for every 100 ms. A hold ends at \
         the first of its release, its loss signal and its validity; a job run's at the \
         end of its least hold, counted from its try less the clock-drift allowance, or of \
         its work where that came later.\n",
        kinds::LEADER_CLIENTS,
        kinds::JOB_CLIENTS,
        kinds::PERMIT_CLIENTS,
        kinds::PERMIT_LIMIT
    );
    let kind_rows = runs.iter().filter(|run| run.started).map(|run| {
        let k = &run.kinds;
        let permits = match k.permit_limit {
            Some(limit) => vec![
                format!("{} ({})", k.permit_holds, k.permit_holds_faulted),
                format!(
                    "{} / {} of {limit} ({} samples)",
                    k.most_believed, k.most_on_server, k.server_samples
                ),
                k.over_limit.len().to_string(),
                k.over_limit_on_server.len().to_string(),
            ],
            None => vec![
                "not run: the backend has no permits".into(),
                "—".into(),
                "—".into(),
                "—".into(),
            ],
        };
        let mut row = vec![
            run.backend.clone(),
            format!("{} ({})", k.terms, k.terms_faulted),
            k.term_overlaps.len().to_string(),
            k.term_fence_regressions.len().to_string(),
            k.terms_unsignalled.len().to_string(),
            k.loops_ended.len().to_string(),
            format!(
                "{} in {} slots ({} killed mid-job, {} with a fault inside)",
                k.job_runs, k.job_slots, k.job_runs_killed, k.job_runs_faulted
            ),
            k.slots_run_again.len().to_string(),
            k.slot_fence_regressions.len().to_string(),
        ];
        row.extend(permits);
        row.push(list(&k.declared));
        row.push(k.errors.to_string());
        row
    });
    crate::report::table(
        &mut md,
        "backend | terms led (a fault inside) | overlapping leaders | term fence regressions | leaders unsignalled past validity | loops that stopped campaigning | job runs | slots run again within a least hold | slot fence regressions | permit holds (a fault inside) | most permits at once, held / listed by the server | over the limit, held | over the limit, listed | declared | failed steps",
        kind_rows,
    );
    let _ = writeln!(md);
    for run in runs.iter().filter(|r| r.started) {
        let _ = writeln!(
            md,
            "- **{}** ({}; server faults on {}; fenced register: {}): {} lock operations failed under the faults (retried; by kind: {}).{}",
            run.backend,
            run.server,
            run.fault_scope,
            run.register,
            run.lock_errors,
            run.lock_error_kinds,
            if run.unavailable.is_empty() {
                String::new()
            } else {
                format!(" Not injected: {}.", run.unavailable.join("; "))
            }
        );
        for declared in &run.declared {
            let _ = writeln!(md, "  - declared by its capabilities: {declared}");
        }
        for hit in &run.hits {
            let _ = writeln!(md, "  - hit: {hit}");
        }
        for retried in &run.retried {
            let _ = writeln!(md, "  - retried: {retried}");
        }
        for not in &run.not_injected {
            let _ = writeln!(md, "  - not injected: {not}");
        }
        for failure in &run.failures {
            let _ = writeln!(md, "  - VIOLATED: {failure}");
        }
        for said in &run.harness {
            let _ = writeln!(md, "  - HARNESS: {said}");
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::history::{Fault, FaultKind};
    use super::*;

    #[test]
    fn each_mode_promises_what_its_docs_say() {
        let (quick, standard, soak) = (
            Plan::of(Mode::Quick),
            Plan::of(Mode::Standard),
            Plan::of(Mode::Soak),
        );
        assert_eq!((quick.rounds, quick.min_lock_ops), (1, 300));
        assert_eq!((standard.rounds, standard.min_lock_ops), (1, 800));
        assert_eq!((soak.rounds, soak.min_lock_ops), (2, 100_000));
        assert!(standard.long_clients > 0 && soak.long_clients > 0);
    }

    fn ran() -> TortureRun {
        TortureRun {
            backend: "postgres".into(),
            started: true,
            ..TortureRun::default()
        }
    }

    #[test]
    fn a_fault_not_injected_is_the_harness_s_outcome_not_a_violation() {
        let fault = |kind| Fault {
            kind,
            start: 0.0,
            end: 1.0,
            declared: None,
            excuses: history::Excuses::default(),
            hit: None,
        };
        let kinds = [FaultKind::Pause, FaultKind::KillConnections];
        let mut run = ran();
        run.not_injected
            .push("connections killed: not injected in 3 attempts".into());
        run.harness = short_of_promise(&kinds, &[fault(FaultKind::Pause)], 1);
        assert_eq!(
            run.harness,
            ["the fault connections killed was injected 0 times of the 1 this mode promises"]
        );
        assert_eq!(
            exit_code(&[ran(), run.clone()], false),
            crate::run::EXIT_HARNESS
        );
        let md = markdown("quick", Plan::quick(), &[run.clone()]);
        assert!(md.contains("HARNESS: the fault connections killed"), "{md}");
        assert!(!md.contains("VIOLATED"), "{md}");

        // Every promised fault injected: nothing is said.
        let all = [fault(FaultKind::Pause), fault(FaultKind::KillConnections)];
        assert!(short_of_promise(&kinds, &all, 1).is_empty());
        assert_eq!(short_of_promise(&kinds, &all, 2).len(), 2);
    }

    /// Each default row, opened as the torture run opens it on servers started here,
    /// is the backend it names on as many servers as it names, with its server
    /// faults on its own servers.
    #[tokio::test]
    async fn every_default_row_runs_the_backend_it_names() {
        for name in crate::options::DEFAULT_BACKENDS.split(',') {
            let row = Row::parse(name).expect("no error");
            let opened = target(row).await.unwrap_or_else(|e| panic!("{name}: {e}"));
            let backend = opened.target.backend();
            row.check(&**backend, opened.servers)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(backend.name(), row.backend_name(), "{name}");
            let scope = opened.faults.as_ref().map(|(_, scope)| *scope);
            let expected = match row {
                Row::Redlock { masters } => FaultScope::Minority {
                    of: masters,
                    members: (masters - 1) / 2,
                },
                Row::Cluster { masters } => FaultScope::OneOf { of: masters },
                Row::Memory | Row::Server(_) => FaultScope::Whole,
                Row::Sentinel { .. } | Row::EtcdCluster { .. } | Row::Ensemble { .. } => {
                    FaultScope::Roles {
                        of: row.servers(),
                        leader: if row.backend_name() == "redis" {
                            "master"
                        } else {
                            "leader"
                        },
                    }
                }
            };
            assert_eq!(scope, Some(expected), "{name}");
            let said = if row.servers() == 0 {
                "in process"
            } else {
                "container"
            };
            assert!(opened.server.contains(said), "{name}: {}", opened.server);
        }
    }

    #[test]
    fn exit_codes_tell_a_violation_from_the_harness_and_from_a_clean_run() {
        assert_eq!(exit_code(&[ran(), ran()], true), 0);
        let mut violated = ran();
        violated.failures.push("fence regression on key 0".into());
        let mut harness = ran();
        harness.harness.push("the run could not complete".into());
        assert_eq!(
            exit_code(std::slice::from_ref(&violated), false),
            crate::run::EXIT_VIOLATION
        );
        // A violation outranks the harness's outcome.
        assert_eq!(
            exit_code(&[harness.clone(), violated], false),
            crate::run::EXIT_VIOLATION
        );
        assert_eq!(exit_code(&[harness], false), crate::run::EXIT_HARNESS);
        let not_run = TortureRun {
            backend: "redlock-3".into(),
            server: "not run: no Docker".into(),
            ..TortureRun::default()
        };
        assert_eq!(exit_code(std::slice::from_ref(&not_run), false), 0);
        assert_eq!(exit_code(&[not_run], true), crate::run::EXIT_HARNESS);
        assert_ne!(crate::run::EXIT_VIOLATION, crate::run::EXIT_HARNESS);
    }
}
