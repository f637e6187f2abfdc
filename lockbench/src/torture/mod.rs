//! `lockbench torture`: many independent clients, faults on a schedule, and registers
//! that must refuse every stale write, per backend; then a checker reads the whole
//! history.
//!
//! Per backend, 8 clients, each behind a link of its own that can be cut and slowed,
//! contend for a few keys. A holder reads two registers under the lock, works for a
//! random time, and writes back one more than it read, with its fence:
//!
//! - most holders hold through a `LockGuard` (renewed; they stop when told the lock
//!   is lost);
//! - some take a bare lease and are frozen past its TTL without renewing, as a paused
//!   process would be, then write as if nothing had happened.
//!
//! The fenced register is distlock's fenced-store adapter of the backend's kind on a
//! server of its own (see [`register`]); the unfenced one, the control, is a row in a
//! PostgreSQL server of its own. Faults cycle on a schedule: the server
//! paused past the TTL, one client partitioned, latency on one client, the server's
//! connections killed, the server restarted, killed and started.
//!
//! The checker then reports: stale writes the fenced register accepted, updates it
//! lost, fence regressions per key, holders that went on past their validity without
//! the loss signal, guarded holders that overlapped, and leases left on the server
//! after the run: each must be 0, except inside the window of a fault the backend's
//! capabilities declare it cannot keep through, where they are counted as declared.
//! The unfenced control must lose updates: that shows the workload does put stale
//! holders against newer ones, and that the checker sees it.

mod faults;
mod history;
mod register;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{DynLockBackend, LockKey};
use distlock_conformance::{LinkControl, Target};
use distlock_testservers::{external_url, Postgres, ServerHandle};
use serde::Serialize;
use tokio::time::{sleep, timeout, Instant};

use self::faults::Injector;
use self::history::{Findings, History};
use self::register::{Control, FencedRegister, Registers};
use self::workload::Workload;
use crate::{progress, BoxError, RunOptions};

/// Many clients, faults on a schedule, and a fenced register that must refuse every
/// stale write (torture.md, torture.json). `--quick` injects each fault once per
/// backend (CI); the full run goes on until 100,000 lock operations per backend and
/// every fault twice.
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
    #[serde(serialize_with = "millis")]
    work_max: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u128(d.as_millis())
}

impl Plan {
    fn quick() -> Self {
        Plan {
            clients: 8,
            keys: 3,
            rounds: 1,
            min_lock_ops: 0,
            gap: Duration::from_secs(1),
            limit: Duration::from_secs(90),
            pause_share: 0.03,
            work_max: Duration::from_millis(5),
        }
    }

    fn full() -> Self {
        Plan {
            clients: 16,
            keys: 8,
            rounds: 2,
            min_lock_ops: FULL_LOCK_OPS,
            gap: Duration::from_secs(5),
            limit: Duration::from_secs(15 * 60),
            pause_share: 0.002,
            work_max: Duration::from_millis(2),
        }
    }
}

/// What a full run must reach per backend.
const FULL_LOCK_OPS: usize = 100_000;

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
    /// Faults the schedule could not inject on this target, and why.
    unavailable: Vec<String>,
    /// Faults the backend's capabilities say it cannot keep the contract through, and
    /// what they say.
    declared: Vec<String>,
    findings: Findings,
    /// Every check that failed, with the part of the history that broke it; and what
    /// kept the run from completing.
    failures: Vec<String>,
}

/// Runs the torture run on every backend asked for and writes its report.
pub(crate) async fn main(args: RunOptions) -> ExitCode {
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
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
    let mut runs = Vec::new();
    for name in &args.backends {
        let mut run = TortureRun {
            backend: name.clone(),
            ..TortureRun::default()
        };
        let started = async {
            let (target, server) = target(name).await?;
            progress(name, "torture: starting the fenced register");
            let register = FencedRegister::start(name, &register_url).await?;
            Ok::<_, BoxError>((target, server, register))
        };
        match started.await {
            Ok((target, server, register)) => {
                run.server = server;
                run.register = register.server.clone();
                run.started = true;
                if let Err(e) = torture(&mut run, &target, &control, &register, plan).await {
                    run.failures
                        .push(format!("the run could not complete: {e}"));
                }
            }
            Err(e) => run.server = format!("not started: {e}"),
        }
        runs.push(run);
    }
    let mode = if args.quick { "quick" } else { "full" };
    let markdown = markdown(mode, plan, &runs);
    let out = std::path::Path::new(&args.out);
    let json = serde_json::json!({ "mode": mode, "plan": plan, "backends": runs });
    let written = std::fs::create_dir_all(out)
        .and_then(|()| std::fs::write(out.join("torture.md"), &markdown))
        .and_then(|()| {
            std::fs::write(
                out.join("torture.json"),
                serde_json::to_string_pretty(&json).unwrap_or_default(),
            )
        });
    if let Err(e) = written {
        eprintln!(
            "lockbench torture: cannot write into {}: {e}",
            out.display()
        );
        return ExitCode::FAILURE;
    }
    println!("{markdown}");
    let mut failed = false;
    for run in &runs {
        if !run.started {
            eprintln!(
                "lockbench torture: {} was not started: {}",
                run.backend, run.server
            );
            failed |= args.require_all;
        }
        for failure in &run.failures {
            eprintln!("lockbench torture: {}: {failure}", run.backend);
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
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

/// The target for `name`, as the conformance suite gets it: controls and links
/// included where the server was started here.
async fn target(name: &str) -> Result<(Target, String), BoxError> {
    let Some(kind) = distlock_testservers::by_name(name) else {
        return Ok((Target::memory(), "in process".into()));
    };
    let connect = |url: String| async move { crate::connect(&url).await };
    if let Some(url) = external_url(kind) {
        let backend = crate::connect(&url).await?;
        return Ok((
            Target::new(backend),
            format!(
                "external ({}): no faults can be injected",
                kind.url_variable()
            ),
        ));
    }
    let handle = ServerHandle::start(kind).await?;
    let server = format!("container, {:?} image", handle.image_source());
    Ok((
        distlock_testservers::target_on(handle, connect).await?,
        server,
    ))
}

/// One backend's run.
async fn torture(
    run: &mut TortureRun,
    target: &Target,
    control: &Control,
    register: &FencedRegister,
    plan: Plan,
) -> Result<(), BoxError> {
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
    let run_id: u32 = rand::random();
    let keys = (0..plan.keys)
        .map(|k| LockKey::new(format!("lockbench-torture/{run_id:08x}/{k}")))
        .collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let registers = Registers::new(control, register.store.clone(), plan.keys, start).await?;
    let work = Arc::new(Workload {
        keys: keys.clone(),
        ttl,
        registers: registers.clone(),
        pause_share: plan.pause_share,
        work_max: plan.work_max,
        start,
        stop: AtomicBool::new(false),
        holds: Mutex::new(Vec::new()),
        errors: AtomicUsize::new(0),
        register_error: Mutex::new(None),
    });
    let holders: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| tokio::spawn(workload::holder(work.clone(), i, client)))
        .collect();

    let injector = Injector {
        control: target.control().cloned(),
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
            match injector.inject(kind, &capabilities).await {
                Ok(fault) => faults.push(fault),
                Err(e) => {
                    injector.heal_all().await;
                    run.failures.push(format!(
                        "the fault {} could not be injected: {e}",
                        kind.label()
                    ));
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
            &format!("torture: {} lock operations so far", work.lock_ops()),
        );
    }
    injector.heal_all().await;
    // A little calm after the last fault, then the holders finish what they hold.
    sleep(plan.gap).await;
    work.stop.store(true, Ordering::SeqCst);
    let finish = ttl * 8 + Duration::from_secs(30);
    for holder in holders {
        if timeout(finish, holder).await.is_err() {
            run.failures.push(format!(
                "a holder did not finish within {finish:?} of the stop"
            ));
        }
    }
    run.seconds = start.elapsed().as_secs_f64();
    run.lock_errors = work.errors.load(Ordering::SeqCst);
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
        if let Some(said) = &fault.declared {
            let line = format!("{}: {said}", fault.kind.label());
            if !run.declared.contains(&line) {
                run.declared.push(line);
            }
        }
    }
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
        aftermath: (ttl * 2 + capabilities.ttl_granularity).as_secs_f64(),
    };
    run.findings = history.check();
    run.failures.extend(run.findings.failures());
    if run.findings.lock_ops < plan.min_lock_ops {
        run.failures.push(format!(
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
         {:.1}% of holds pause past their TTL without renewing. A fault every {:?}.\n",
        plan.clients,
        plan.keys,
        plan.pause_share * 100.0,
        plan.gap
    );
    let _ = writeln!(
        md,
        "| backend | ttl | seconds | lock ops | paused holds | faults | stale writes accepted | lost updates, fenced | fence regressions | unsignalled past validity | overlapping holders | leases left | declared | lost updates, unfenced control |"
    );
    let _ = writeln!(md, "|{}", " --- |".repeat(14));
    for run in runs {
        let f = &run.findings;
        let list = |map: &std::collections::BTreeMap<String, usize>| {
            if map.is_empty() {
                "—".to_owned()
            } else {
                map.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        if !run.started {
            let _ = writeln!(
                md,
                "| {} | not started: {} |{}",
                run.backend,
                run.server,
                " |".repeat(12)
            );
            continue;
        }
        let _ = writeln!(
            md,
            "| {} | {} ms | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            run.backend,
            run.ttl_ms,
            run.seconds,
            f.lock_ops,
            f.paused_holds,
            list(&f.faults),
            f.stale_writes.len(),
            f.lost_updates_fenced,
            f.fence_regressions.len(),
            f.unsignalled.len(),
            f.overlaps.len(),
            f.leases_left.len(),
            list(&f.declared),
            f.lost_updates_unfenced,
        );
    }
    let _ = writeln!(md);
    for run in runs.iter().filter(|r| r.started) {
        let _ = writeln!(
            md,
            "- **{}** ({}; fenced register: {}): {} lock operations failed under the faults (retried).{}",
            run.backend,
            run.server,
            run.register,
            run.lock_errors,
            if run.unavailable.is_empty() {
                String::new()
            } else {
                format!(" Not injected: {}.", run.unavailable.join("; "))
            }
        );
        for declared in &run.declared {
            let _ = writeln!(md, "  - declared by its capabilities: {declared}");
        }
        for failure in &run.failures {
            let _ = writeln!(md, "  - FAILED: {failure}");
        }
    }
    md
}
