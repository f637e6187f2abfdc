//! `distlock-sim`: runs the simulation on the in-memory backend from the command line.
//!
//! `distlock-sim --seeds N [--from S] [--threads T] [--kinds K,K]` runs seeds S..S+N
//! and prints a summary (seeds per second, per kind, what the network did) and each
//! failure; with `--first` it runs them in order and stops at the first failure;
//! `distlock-sim --seed S [--history] [--length SECS]` replays one seed and prints its
//! verdict (and its whole history); a failing seed also prints the shortest prefix
//! of its schedule that still fails. Exits 1 if a seed broke a promise, 64 on bad
//! arguments.

use std::process::ExitCode;
use std::time::Instant;

use distlock_core::MemoryBackend;
use distlock_sim::{Kind, Simulation};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let valued = [
        "--seed",
        "--seeds",
        "--from",
        "--threads",
        "--length",
        "--kinds",
    ];
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if valued.contains(&arg.as_str()) {
            rest.next();
        } else if arg != "--history" && arg != "--first" {
            eprintln!(
                "distlock-sim: unknown argument {arg:?}; takes --seeds N [--from S] [--threads T] \
                 [--kinds K,K] [--first], or --seed S [--history] [--length SECS]"
            );
            return ExitCode::from(64);
        }
    }
    let value = |name: &str| -> Result<Option<u64>, String> {
        match args.iter().position(|a| a == name) {
            None => Ok(None),
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.replace('_', "").parse().ok())
                .map(Some)
                .ok_or_else(|| format!("{name} takes a whole number")),
        }
    };
    let parsed = (|| {
        Ok::<_, String>((
            value("--seed")?,
            value("--seeds")?,
            value("--from")?,
            value("--threads")?,
        ))
    })();
    let (seed, seeds, from, threads) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!("distlock-sim: {error}");
            return ExitCode::from(64);
        }
    };
    let length = match value("--length") {
        Ok(length) => length,
        Err(error) => {
            eprintln!("distlock-sim: {error}");
            return ExitCode::from(64);
        }
    };
    let mut simulation = Simulation::restartable(MemoryBackend::new, MemoryBackend::restart);
    if let Some(i) = args.iter().position(|a| a == "--kinds") {
        let names = args.get(i + 1).map_or("", String::as_str);
        let mut kinds = Vec::new();
        for name in names.split(',') {
            match Kind::ALL.iter().find(|k| k.name() == name) {
                Some(kind) => kinds.push(*kind),
                None => {
                    eprintln!(
                        "distlock-sim: no kind {name:?}; the kinds are {}",
                        Kind::ALL.map(Kind::name).join(", ")
                    );
                    return ExitCode::from(64);
                }
            }
        }
        simulation = simulation.with_kinds(&kinds);
    }
    if let Some(secs) = length {
        simulation = simulation.with_length(std::time::Duration::from_secs(secs.max(1)));
    }
    if let Some(seed) = seed {
        let report = simulation.run_seed(seed);
        if args.iter().any(|a| a == "--history") {
            for event in &report.history {
                println!("{event}");
            }
        }
        println!(
            "seed {seed} ({}): {} events, history hash {:016x}, {}",
            report.kind.name(),
            report.history.len(),
            report.hash,
            if report.passed() {
                "every promise held"
            } else {
                "BROKEN"
            }
        );
        if !report.passed() {
            println!("{}", report.explain());
            if length.is_none() {
                if let Some((prefix, _)) = simulation.shortest_failing(seed) {
                    println!(
                        "the shortest failing prefix: the first {prefix:?} of the schedule \
                         (`distlock-sim --seed {seed} --length {} --history`)",
                        prefix.as_secs()
                    );
                }
            }
            return ExitCode::from(1);
        }
        return ExitCode::SUCCESS;
    }
    let count = seeds.unwrap_or(10_000);
    let from = from.unwrap_or(0);
    let threads = threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |t| usize::try_from(t).unwrap_or(1),
    );
    let started = Instant::now();
    if args.iter().any(|a| a == "--first") {
        // Seeds in order, until the first that breaks a promise.
        for seed in from..from.saturating_add(count) {
            let report = simulation.run_seed(seed);
            if !report.passed() {
                println!(
                    "first failing seed: {seed}, after {} seeds in {:.1} s",
                    seed - from + 1,
                    started.elapsed().as_secs_f64()
                );
                println!("{}", report.explain());
                if let Some((prefix, _)) = simulation.shortest_failing(seed) {
                    println!("the shortest failing prefix: the first {prefix:?} of the schedule");
                }
                return ExitCode::from(1);
            }
        }
        println!(
            "no seed of {from}..{} broke a promise",
            from.saturating_add(count)
        );
        return ExitCode::SUCCESS;
    }
    let summary = simulation.run_seeds(from..from.saturating_add(count), threads);
    let took = started.elapsed();
    println!(
        "{} seeds ({from}..{}) in {:.1} s on {threads} thread(s): {:.0} seeds/s, {} events",
        summary.seeds,
        from.saturating_add(count),
        took.as_secs_f64(),
        summary.seeds as f64 / took.as_secs_f64(),
        summary.events
    );
    for (kind, n) in &summary.per_kind {
        println!("  {:<12} {n} seeds", kind.name());
    }
    let c = summary.counts;
    println!(
        "  network: {} requests, {} lost on the way, {} replies lost, {} applied twice, {} read after a pause, {} stalled; {} server restarts without state; {} leases ended early by a slow clock",
        c.sent, c.requests_lost, c.replies_lost, c.duplicated, c.paused, c.stalled, c.restarts, c.drifted
    );
    for failure in &summary.failures {
        println!("{}", failure.explain());
    }
    if summary.failed > 0 {
        let seeds: Vec<String> = summary.failed_seeds.iter().map(u64::to_string).collect();
        println!(
            "{} seed(s) broke a promise: {}",
            summary.failed,
            seeds.join(" ")
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
