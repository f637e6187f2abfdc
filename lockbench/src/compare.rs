//! The comparison run: on each backend, the scenarios side by side with the raw
//! floors and peer libraries, then the conformance suite; the report written at the
//! end, and the run's exit code.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{DynLockBackend, MemoryBackend};
use distlock_conformance::{cases, run_case, Outcome, Target};
use distlock_testservers::Server;
use futures_util::StreamExt as _;

use crate::options::RunOptions;
use crate::report::{BackendRun, Conformance, FloorRow, PeerRow, Report, SweepPoint};
use crate::run::{progress, write_results, BoxError, EXIT_HARNESS, EXIT_VIOLATION};
use crate::scenarios::{FloorRole, Primitives, S1Entry, Sizes};
use crate::{floors, meter, peers, report, rows, scenarios, storage};

/// What runs beside distlock on one server: its raw floors (the first one round
/// trip), and the peer libraries.
#[derive(Default)]
struct Beside {
    floors: Vec<S1Entry>,
    rslock: Option<peers::Rslock>,
}

/// How many of the suite's cases run at once on a row: as many as its test harness
/// runs (`distlock_conformance::run_as_tests`), so that the suite's time in the
/// report is the time it takes there.
const SUITE_CASES_AT_ONCE: usize = 4;

/// The efficiency lock's entry in S1 and S2.
const EFFICIENCY: &str = "distlock efficiency lock";

/// Why a row's conformance column says "not run" under `--skip-suite`.
const SUITE_SKIPPED: &str =
    "left out by --skip-suite (the run CI makes after `cargo test` ran every backend's suite)";

/// Runs the scenarios (S1 side by side with the floors and peers), then the
/// conformance suite, on one backend.
async fn measure(
    run: &mut BackendRun,
    backend: Arc<DynLockBackend>,
    target: Target,
    sizes: Sizes,
    meter: Option<&meter::ServerMeter>,
    beside: Beside,
) {
    let name = run.backend.clone();
    macro_rules! step {
        ($label:expr, $field:ident, $call:expr) => {{
            progress(&name, $label);
            match $call.await {
                Ok(v) => run.$field = Some(v),
                Err(e) => run.errors.push(format!("{}: {e}", $label)),
            }
        }};
    }
    let client = match scenarios::client(&backend) {
        Ok(client) => client,
        Err(e) => {
            run.errors.push(format!("client: {e}"));
            return;
        }
    };

    let floor_count = beside.floors.len();
    let mut entries = vec![
        S1Entry::new("distlock client", client.clone()),
        S1Entry::new("distlock primitives", Primitives(backend.clone())),
    ];
    entries.extend(beside.floors);
    if let Some(rslock) = &beside.rslock {
        entries.push(S1Entry::new(peers::RSLOCK, rslock.clone()));
    }
    // The efficiency lock, where the backend grants it without a fence: beside
    // rslock, which promises as much.
    let efficiency_at = entries.len();
    let efficiency = match scenarios::efficiency_client(&backend) {
        Some(Ok(client)) => {
            entries.push(S1Entry::new(EFFICIENCY, client));
            true
        }
        Some(Err(e)) => {
            run.errors.push(format!("efficiency client: {e}"));
            false
        }
        None => false,
    };
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    progress(
        &name,
        &format!("S1 uncontended cycle, side by side: {}", names.join(", ")),
    );
    let mut results = scenarios::s1_side_by_side(&entries, sizes, meter)
        .await
        .into_iter()
        .zip(&entries);
    let mut take = |label: &str| match results.next() {
        Some((Ok(summary), _)) => Some(summary),
        Some((Err(e), entry)) => {
            run.errors.push(format!("S1 {label} ({}): {e}", entry.name));
            None
        }
        None => None,
    };
    let s1_client = take("client");
    let s1_primitives = take("primitives");
    let mut floors = Vec::new();
    for entry in entries.iter().skip(2).take(floor_count) {
        if let Some(summary) = take("floor") {
            floors.push(FloorRow {
                name: entry.name.clone(),
                role: entry.role,
                summary,
            });
        }
    }
    let rslock_s1 = beside.rslock.as_ref().and_then(|_| take("peer"));
    run.s1_efficiency = efficiency.then(|| take("efficiency lock")).flatten();
    run.s1_client = s1_client;
    run.s1_primitives = s1_primitives;
    run.floors = floors;

    // S2 side by side, in turns: the client, the raw cycle floor and the fenced one
    // where there are, and the peer library, so that the ratios between them are
    // measured over the same spells of the machine.
    let floor_entries = &entries[2..2 + floor_count];
    let of_role = |role| floor_entries.iter().find(|e| e.role == role);
    let cycle_floor = of_role(FloorRole::Cycle);
    let fenced_floor = of_role(FloorRole::FencedCycle);
    let rslock_entry = beside
        .rslock
        .as_ref()
        .map(|r| S1Entry::new(peers::RSLOCK, r.clone()));
    let request_floors: Vec<&S1Entry> = floor_entries
        .iter()
        .filter(|e| e.role == FloorRole::Requests)
        .collect();
    let s2_entries: Vec<&S1Entry> = [
        Some(&entries[0]),
        cycle_floor,
        fenced_floor,
        rslock_entry.as_ref(),
        efficiency.then(|| &entries[efficiency_at]),
    ]
    .into_iter()
    .flatten()
    .chain(request_floors.iter().copied())
    .collect();
    let s2_names: Vec<&str> = s2_entries.iter().map(|e| e.name.as_str()).collect();
    progress(
        &name,
        &format!(
            "S2 throughput, {} clients, side by side: {}",
            scenarios::S2_TASKS,
            s2_names.join(", ")
        ),
    );
    let mut s2 = scenarios::s2_side_by_side(&s2_entries, sizes, meter)
        .await
        .into_iter();
    let mut s2_take = |label: &str| match s2.next() {
        Some(Ok(summary)) => Some(summary),
        Some(Err(e)) => {
            run.errors.push(format!("S2 {label}: {e}"));
            None
        }
        None => None,
    };
    run.s2_throughput = s2_take("throughput, 32 clients");
    if cycle_floor.is_some() {
        run.s2_floor = s2_take("raw floor");
    }
    if fenced_floor.is_some() {
        run.s2_fenced_floor = s2_take("fenced floor");
    }
    let rslock_s2 = match rslock_entry {
        Some(_) => s2_take(peers::RSLOCK),
        None => None,
    };
    if efficiency {
        run.s2_efficiency = s2_take(EFFICIENCY);
    }
    for entry in request_floors {
        if let Some(summary) = s2_take(&entry.name) {
            run.s2_request_floors.push(FloorRow {
                name: entry.name.clone(),
                role: entry.role,
                summary,
            });
        }
    }
    progress(
        &name,
        &format!("S2 sweep over {:?} concurrent tasks", scenarios::SWEEP),
    );
    let sweep_sizes = Sizes {
        throughput_for: sizes.sweep_for,
        ..sizes
    };
    let client_entry = &entries[0];
    for tasks in scenarios::SWEEP {
        let mut point = SweepPoint {
            tasks,
            ..SweepPoint::default()
        };
        let rate = |entry| sweep_rate(entry, tasks, sweep_sizes);
        match rate(Some(client_entry)).await {
            Ok(r) => point.client = r,
            Err(e) => run
                .errors
                .push(format!("S2 sweep, {tasks} tasks, client: {e}")),
        }
        match rate(cycle_floor).await {
            Ok(r) => point.floor = r,
            Err(e) => run
                .errors
                .push(format!("S2 sweep, {tasks} tasks, floor: {e}")),
        }
        match rate(rslock_entry.as_ref()).await {
            Ok(r) => point.rslock = r,
            Err(e) => run
                .errors
                .push(format!("S2 sweep, {tasks} tasks, {}: {e}", peers::RSLOCK)),
        }
        run.sweep.push(point);
    }
    step!(
        "S3 contended handoff, 16 waiters",
        s3_handoff,
        scenarios::s3_handoff(&client, sizes)
    );
    step!(
        "S3 handoff, 16 waiters on clients of their own, racing",
        s3_racing,
        scenarios::s3_across_clients(&backend, false, sizes)
    );
    if let Some(fair) = backend.fair() {
        run.fair_handoff = fair.handoffs().is_some();
        step!(
            "S3 handoff, 16 waiters on clients of their own, fair mode",
            s3_fair,
            scenarios::s3_across_clients(&backend, true, sizes)
        );
    }
    if backend.permits().is_some() {
        for (kind, handoff) in scenarios::Kind::ALL {
            let label = kind.label();
            progress(&name, &format!("S1 and S3: {label}"));
            match scenarios::kind_runs(&backend, kind, handoff, sizes).await {
                Ok((s1, s3)) => run.kinds.push(report::KindRow {
                    kind: label,
                    s1,
                    s3,
                }),
                Err(e) => run.errors.push(format!("{label}: {e}")),
            }
        }
    }
    progress(
        &name,
        "sets: S1 of two keys beside one, then two clients in opposite orders",
    );
    match crate::sets::run(&backend, sizes).await {
        Ok(row) => run.sets = Some(row),
        Err(e) => run.errors.push(format!("sets: {e}")),
    }
    step!(
        "S4 takeover after a vanished holder",
        s4_takeover,
        scenarios::s4_takeover(&backend, sizes)
    );
    step!(
        "S6 requests through the tower layer, beside the bare handler and the bare lock",
        layer,
        crate::layer::measure(&backend, sizes)
    );
    if let Some(rslock) = &beside.rslock {
        let mut peer_row = |scenario: &str, summary| {
            run.peers.push(PeerRow {
                peer: peers::RSLOCK.into(),
                scenario: scenario.into(),
                summary,
            })
        };
        if let Some(summary) = rslock_s1 {
            peer_row(report::S1, summary);
        }
        if let Some(summary) = rslock_s2 {
            peer_row(report::S2, summary);
        }
        progress(peers::RSLOCK, "S3 contended handoff, 16 waiters (it polls)");
        match scenarios::s3_handoff(rslock, sizes).await {
            Ok(summary) => peer_row(report::S3, summary),
            Err(e) => run.errors.push(format!("{} S3: {e}", peers::RSLOCK)),
        }
    }
    let granularity = backend.capabilities().ttl_granularity;
    run.takeover_allowance_ms = 50.0
        + if granularity > Duration::from_millis(1) {
            granularity.as_secs_f64() * 1e3
        } else {
            0.0
        };
    if !sizes.suite {
        run.suite_not_run = Some(SUITE_SKIPPED.into());
        return;
    }
    progress(&name, "conformance suite");
    let started = std::time::Instant::now();
    let mut conformance = Conformance {
        passed: 0,
        failed: vec![],
        skipped: vec![],
        seconds: 0.0,
    };
    let all = cases().count();
    // Cases run SUITE_CASES_AT_ONCE at a time, as the suite's test harness runs them: a
    // case that needs the server alone (a fault) waits for the others, and they for it
    // (`run_case`). One line per case as it ends, so that a long suite shows where it
    // is; the report lists them in table order.
    let target = &target;
    let mut reports = futures_util::stream::iter(cases().enumerate())
        .map(|(i, case)| async move { (i, run_case(target, case).await) })
        .buffer_unordered(SUITE_CASES_AT_ONCE);
    let mut ended = Vec::with_capacity(all);
    while let Some((i, report)) = reports.next().await {
        let said = match &report.outcome {
            Outcome::Passed => "passed".to_owned(),
            Outcome::Failed(msg) => format!("FAILED: {msg}"),
            Outcome::Skipped(why) => format!("not run: {why}"),
        };
        progress(
            &name,
            &format!(
                "suite case {}/{all} {} {said} ({:.1} s)",
                ended.len() + 1,
                report.name,
                report.duration.as_secs_f64()
            ),
        );
        ended.push((i, report));
    }
    ended.sort_by_key(|(i, _)| *i);
    for (_, report) in ended {
        match report.outcome {
            Outcome::Passed => conformance.passed += 1,
            Outcome::Failed(msg) => conformance.failed.push((report.name.into(), msg)),
            Outcome::Skipped(why) => conformance.skipped.push((report.name.into(), why)),
        }
    }
    conformance.seconds = started.elapsed().as_secs_f64();
    run.conformance = Some(conformance);
}

/// S2's cycles per second on `entry` at `tasks` concurrent tasks, when it runs here.
async fn sweep_rate(
    entry: Option<&S1Entry>,
    tasks: usize,
    sizes: Sizes,
) -> Result<Option<f64>, BoxError> {
    match entry {
        Some(entry) => Ok(Some(entry.s2(tasks, sizes).await?.per_sec)),
        None => Ok(None),
    }
}

/// The raw floors of `server` at `url`.
async fn floors(server: &dyn Server, url: &str) -> Result<Vec<S1Entry>, BoxError> {
    match server.name() {
        "redis" => floors::redis(url).await,
        "postgres" => floors::postgres(url).await,
        "mariadb" => {
            let server = url.split('?').next().unwrap_or(url);
            floors::mysql(&server.replacen("mariadb://", "mysql://", 1)).await
        }
        "zookeeper" => {
            let servers = url.trim_start_matches("zookeeper://");
            floors::zookeeper(servers.split(['/', '?']).next().unwrap_or_default()).await
        }
        "etcd" => {
            let first = url
                .trim_start_matches("etcd://")
                .split(',')
                .next()
                .unwrap_or_default();
            floors::etcd(&format!("http://{first}")).await
        }
        // A server with no floor of its own is measured without one, never against
        // another server's.
        other => Err(format!("lockbench has no raw floor for {other}").into()),
    }
}

/// Runs the scenarios and the suite on the backend `row` names, on servers started
/// for it, beside the raw floors of its server and the peer library on Redis.
async fn run_row(name: &str, row: rows::Row, sizes: Sizes) -> BackendRun {
    let mut run = BackendRun {
        backend: name.into(),
        ..Default::default()
    };
    progress(name, "starting the servers");
    let opened = match rows::open(row).await {
        Ok(opened) => opened,
        Err(e) => {
            run.server = e.to_string();
            return run;
        }
    };
    run.server = opened.server;
    // The scenarios get a backend of their own, connected directly: the target's sits
    // behind one more pointer (it is generic over the backend's type).
    let backend = match &opened.url {
        None => Arc::new(MemoryBackend::new()) as Arc<DynLockBackend>,
        Some(url) => match crate::run::connect(url).await {
            Ok(backend) => backend,
            Err(e) => {
                run.server = format!("started, but connecting failed: {e}");
                return run;
            }
        },
    };
    if let Err(e) = row.check(&*backend, opened.servers) {
        run.server = format!("not run: {e}");
        return run;
    }
    run.started = true;
    // The server's CPU time, read around each scenario, tells a gap in the server's
    // work from a gap in the client's: a Redis server reports its process's (`INFO
    // cpu`; a Redlock's masters, summed); another single server started here is read
    // from its container's control group, where this machine shows it.
    let mut meter = None;
    let mut beside = Beside::default();
    if !opened.redis_urls.is_empty() {
        match meter::RedisMeter::connect_all(&opened.redis_urls).await {
            Ok(m) => meter = Some(meter::ServerMeter::Redis(m)),
            Err(e) => run.errors.push(format!("server CPU (INFO cpu): {e}")),
        }
        beside.rslock = Some(peers::Rslock::new(opened.redis_urls));
    } else if let Some(id) = &opened.container {
        meter = meter::ServerMeter::container(id);
    }
    run.server_cpu_from = meter.as_ref().map(meter::ServerMeter::source);
    if let (rows::Row::Server(kind), Some(url)) = (row, &opened.url) {
        match floors(kind, url).await {
            Ok(entries) => {
                beside.floors = entries;
                // SET + compare-and-delete; INSERT + DELETE; lease grant + two transactions.
                run.floor_cycle_ops = if kind.name() == "etcd" { 3.0 } else { 2.0 };
            }
            Err(e) => run.errors.push(format!("floors: {e}")),
        }
        // S5 first: the target owns the server, and `measure` ends with it.
        match storage(kind, url, sizes).await {
            Ok(found) => {
                if found.left_after > 0 {
                    run.errors.push(format!(
                        "S5 storage: {} keys or rows of {} released names were still on the server {:.0} s later",
                        found.left_after, found.names, found.after_s
                    ));
                }
                run.storage = Some(found);
            }
            Err(e) => run.errors.push(format!("S5 storage: {e}")),
        }
    }
    measure(
        &mut run,
        backend,
        opened.target,
        sizes,
        meter.as_ref(),
        beside,
    )
    .await;
    run
}

/// S5 on the server `kind` at `url`: distinct names locked and released, and what is
/// left of them on the server after the backend's purge bound.
async fn storage(kind: &dyn Server, url: &str, sizes: Sizes) -> Result<storage::Storage, BoxError> {
    let (options, wait) = storage::bound(kind.name(), sizes.short_bounds);
    progress(
        kind.name(),
        &format!(
            "S5 storage: {} distinct names, counted again after {wait:?}",
            sizes.storage_names
        ),
    );
    let separator = if url.contains('?') { '&' } else { '?' };
    let storage_url = if options.is_empty() {
        url.to_owned()
    } else {
        format!("{url}{separator}{options}")
    };
    let backend = crate::run::connect(&storage_url).await?;
    storage::measure(
        kind.name(),
        url,
        backend,
        sizes.storage_names,
        wait,
        options,
    )
    .await
}

/// The comparison run on `args.backends`: each measured, then the report written
/// into `args.out`; the exit code says whether a check was violated or the harness
/// fell short.
pub(crate) async fn main(args: RunOptions, skip_suite: bool) -> ExitCode {
    let sizes = Sizes {
        suite: !skip_suite,
        ..Sizes::of(args.mode())
    };
    crate::run::plan_rows(&args.backends);
    let out = std::path::Path::new(&args.out);
    let report_of = |runs: Vec<BackendRun>| Report {
        mode: args.mode().name().into(),
        unix_time: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        backends: runs,
    };
    let mut runs = Vec::new();
    for name in &args.backends {
        let started = std::time::Instant::now();
        let mut run = match rows::Row::parse(name) {
            Ok(row) => run_row(name, row, sizes).await,
            Err(e) => BackendRun {
                backend: name.clone(),
                server: format!("not run: {e}"),
                ..Default::default()
            },
        };
        run.seconds = started.elapsed().as_secs_f64();
        runs.push(run);
        // What ran so far, kept should a later backend end the run.
        if runs.len() < args.backends.len() {
            let so_far = report_of(runs.clone());
            let kept = write_results(
                out,
                ("report.md", &so_far.markdown()),
                ("results.json", &so_far),
            );
            if let Err(e) = kept {
                eprintln!(
                    "lockbench: cannot write the results so far into {}: {e}",
                    out.display()
                );
            }
        }
    }
    let report = report_of(runs);
    let written = write_results(
        out,
        ("report.md", &report.markdown()),
        ("results.json", &report),
    )
    .and_then(|()| std::fs::write(out.join("latency.svg"), report.latency_chart()))
    .and_then(|()| std::fs::write(out.join("handoff.svg"), report.handoff_chart()))
    .and_then(|()| std::fs::write(out.join("sweep.svg"), report.sweep_chart()));
    if let Err(e) = written {
        eprintln!(
            "lockbench: cannot write the results into {}: {e}",
            out.display()
        );
        return ExitCode::FAILURE;
    }
    let md = report.markdown();
    let summary: String = md.split("## Targets").next().unwrap_or_default().to_owned();
    println!("{summary}");
    println!("The whole report: {}", out.join("report.md").display());

    let (mut violated, mut harness) = (false, false);
    for b in &report.backends {
        if !b.started {
            eprintln!("lockbench: {} was not run: {}", b.backend, b.server);
            harness |= args.require_all;
        }
        if !b.errors.is_empty() {
            eprintln!(
                "lockbench: {}: harness: not measured: {:?}",
                b.backend, b.errors
            );
            harness = true;
        }
        if let Some(conformance) = b.conformance.as_ref().filter(|c| !c.failed.is_empty()) {
            for (case, why) in &conformance.failed {
                eprintln!(
                    "lockbench: {}: VIOLATED: conformance case {case}: {why}",
                    b.backend
                );
            }
            violated = true;
        }
        if let Some(sets) = b.sets.as_ref().filter(|s| s.opposite_timeouts > 0) {
            eprintln!(
                "lockbench: {}: VIOLATED: {} waits of sets in opposite orders ran out ({} s each): a deadlock",
                b.backend,
                sets.opposite_timeouts,
                crate::sets::OPPOSITE_WAIT.as_secs()
            );
            violated = true;
        }
    }
    if violated {
        ExitCode::from(EXIT_VIOLATION)
    } else if harness {
        ExitCode::from(EXIT_HARNESS)
    } else {
        ExitCode::SUCCESS
    }
}
