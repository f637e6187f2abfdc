//! The report in Markdown, for people.

use std::fmt::Write as _;

use super::{ms, opt, Report, S1, S2, S3};
use crate::stats::Summary;

impl Report {
    pub(crate) fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# lockbench report\n");
        let _ = writeln!(
            md,
            "Mode: {}. Machine: {} CPUs. Servers in containers on this machine (each backend's \"Server\" line below says how it was reached).\n",
            self.mode, self.cpus
        );
        let _ = writeln!(md, "## Summary\n");
        let _ = writeln!(
            md,
            "| backend | conformance (passed / failed / not run) | S1 cycle p50 / p99 | S1 raw floor p50 | S1 ÷ floor | S2 cycles/s (32 clients) | S2 raw floor cycles/s | S2 ÷ floor | S3 handoff p50 / p99 | S3 handoffs/s | S4 worst past TTL |"
        );
        let _ = writeln!(
            md,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for b in &self.backends {
            if !b.started {
                let _ = writeln!(
                    md,
                    "| {} | not started: {} | | | | | | | | | |",
                    b.backend, b.server
                );
                continue;
            }
            let conf = match (&b.conformance, &b.suite_not_run) {
                (None, Some(why)) => format!("not run: {why}"),
                _ => opt(&b.conformance, |c| {
                    format!(
                        "{} / {} / {} (in {:.0} s of the backend's {:.0} s)",
                        c.passed,
                        c.failed.len(),
                        c.skipped.len(),
                        c.seconds,
                        b.seconds
                    )
                }),
            };
            let s1 = opt(&b.s1_client, |s| {
                format!("{} / {}", ms(s.p50_us), ms(s.p99_us))
            });
            let floor = b.cycle_floor().map_or("—".into(), |f| ms(f.p50_us));
            let ratio = match (&b.s1_client, b.cycle_floor()) {
                (Some(s), Some(f)) => format!("{:.2}×", s.p50_us / f.p50_us),
                _ => "—".into(),
            };
            let s2 = opt(&b.s2_throughput, |s| format!("{:.0}", s.per_sec));
            let s2_floor = opt(&b.s2_floor, |s| format!("{:.0}", s.per_sec));
            let s2_ratio = match (&b.s2_throughput, &b.s2_floor) {
                (Some(s), Some(f)) if f.per_sec > 0.0 => format!("{:.2}×", s.per_sec / f.per_sec),
                _ => "—".into(),
            };
            let s3 = opt(&b.s3_handoff, |s| {
                format!("{} / {}", ms(s.p50_us), ms(s.p99_us))
            });
            let s3r = opt(&b.s3_handoff, |s| format!("{:.0}", s.per_sec));
            let s4 = opt(&b.s4_takeover, |t| {
                format!("{:.0} ms (TTL {:.0} ms)", t.worst_over_ttl_ms, t.ttl_ms)
            });
            let _ = writeln!(
                md,
                "| {} | {conf} | {s1} | {floor} | {ratio} | {s2} | {s2_floor} | {s2_ratio} | {s3} | {s3r} | {s4} |",
                b.backend
            );
        }
        let _ = writeln!(md, "\n## Targets\n");
        let _ = writeln!(md, "| backend | target | met | measured |");
        let _ = writeln!(md, "| --- | --- | --- | --- |");
        for b in &self.backends {
            for (target, met, figures) in b.targets() {
                let met = match met {
                    Some(true) => "yes",
                    Some(false) => "**no**",
                    None => "—",
                };
                let _ = writeln!(md, "| {} | {target} | {met} | {figures} |", b.backend);
            }
        }
        let _ = writeln!(
            md,
            "\n## S3 across clients: racing and fair\n\n16 waiters on one key, each on a client of its own (as 16 processes would be), each holding the lock 1 ms and asking again at once. *Racing*: waiters retry on the release notification and the fastest wins. *Fair*: the client's fair mode, the key's queue on the server; *handed over* where a release grants the lock to the head of the queue in its own step (`FairBackend::handoffs`), *the head asks* where the head learns of the release (a notification, a watch or its poll) and then takes the key with a fair step of its own. *Longest ÷ median wait* is the fairness figure: near 1 when every waiter waits alike, large when some starve. *Releaser won* is the share of handoffs taken by the waiter that had just released.\n"
        );
        let _ = writeln!(
            md,
            "| backend | mode | handoff p50 / p99 | handoffs/s | longest ÷ median wait | releaser won |"
        );
        let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- |");
        for b in self.backends.iter().filter(|b| b.started) {
            let fair = match (&b.s3_fair, b.fair_handoff) {
                (None, _) => "fair",
                (Some(_), true) => "fair, handed over",
                (Some(_), false) => "fair, the head asks",
            };
            for (mode, summary) in [("racing", &b.s3_racing), (fair, &b.s3_fair)] {
                let row = match summary {
                    Some(s) => format!(
                        "{} / {} | {:.0} | {} | {}",
                        ms(s.p50_us),
                        ms(s.p99_us),
                        s.per_sec,
                        s.wait_ratio.map_or("—".into(), |r| format!("{r:.1}")),
                        s.same_holder_share
                            .map_or("—".into(), |r| format!("{:.0}%", r * 100.0)),
                    ),
                    None if mode != "racing" && b.s3_racing.is_some() => {
                        "no fair mode (LockBackend::fair) | | |".into()
                    }
                    None => "not measured | | |".into(),
                };
                let _ = writeln!(md, "| {} | {mode} | {row} |", b.backend);
            }
        }
        let _ = writeln!(
            md,
            "\n## Semaphores, read-write locks and elections\n\nEach kind through its own type (`Semaphore`, `RwLock`, `Election`), on the backends with permits (`LockBackend::permits`). *S1*: one client at a time on fresh names, a try then a release; *÷ mutex* is that over the mutex client's S1 in the same run. *S3*: 16 waiters, each with a handle of its own, on one name, each holding 1 ms; measured for the kinds whose grant is exclusive (a semaphore of one permit, a writer, a campaign).\n"
        );
        let _ = writeln!(
            md,
            "| backend | kind | S1 p50 / p99 | S1 ÷ mutex | S3 handoff p50 / p99 | S3 handoffs/s |"
        );
        let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- |");
        for b in self.backends.iter().filter(|b| b.started) {
            if b.kinds.is_empty() {
                let _ = writeln!(
                    md,
                    "| {} | no permits (LockBackend::permits) | | | | |",
                    b.backend
                );
            }
            for k in &b.kinds {
                let ratio = b
                    .s1_client
                    .as_ref()
                    .filter(|m| m.p50_us > 0.0)
                    .map_or("—".into(), |m| format!("{:.2}×", k.s1.p50_us / m.p50_us));
                let s3 = k.s3.as_ref().map_or("— | —".into(), |s| {
                    format!("{} / {} | {:.0}", ms(s.p50_us), ms(s.p99_us), s.per_sec)
                });
                let _ = writeln!(
                    md,
                    "| {} | {} | {} / {} | {ratio} | {s3} |",
                    b.backend,
                    k.kind,
                    ms(k.s1.p50_us),
                    ms(k.s1.p99_us)
                );
            }
        }
        let _ = writeln!(
            md,
            "\n## Several keys under one lock\n\n`LockClient::lock_all`, on every backend. *A set taken*: in one step on the server where the backend takes sets (`LockBackend::sets`), else key by key. *S1*: one client at a time on fresh keys, `try_lock_all` of two keys then the set's release, in the same blocks as the one-key cycle (*÷ one key*). *Opposite orders*: two clients, each with a client of its own, lock the same two keys in opposite orders, release, and go again, for the S2 time; a wait that runs out ({} s) would be a deadlock, and must be 0.\n",
            crate::sets::OPPOSITE_WAIT.as_secs()
        );
        let _ = writeln!(
            md,
            "| backend | a set taken | S1 one key p50 | S1 two keys p50 / p99 | two ÷ one | opposite orders: sets/s | its p50 / p99 | waits run out |"
        );
        let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- | --- | --- |");
        for b in self.backends.iter().filter(|b| b.started) {
            let row = match &b.sets {
                Some(s) => format!(
                    "{} | {} | {} / {} | {} | {:.0} | {} / {} | {}",
                    if s.one_step {
                        "in one step"
                    } else {
                        "key by key"
                    },
                    ms(s.one_key.p50_us),
                    ms(s.two_keys.p50_us),
                    ms(s.two_keys.p99_us),
                    if s.one_key.p50_us > 0.0 {
                        format!("{:.2}×", s.two_keys.p50_us / s.one_key.p50_us)
                    } else {
                        "—".into()
                    },
                    s.opposite.per_sec,
                    ms(s.opposite.p50_us),
                    ms(s.opposite.p99_us),
                    s.opposite_timeouts
                ),
                None => "not measured (see the errors below) | | | | | | |".into(),
            };
            let _ = writeln!(md, "| {} | {row} |", b.backend);
        }
        let _ = writeln!(
            md,
            "\n## S2 sweep\n\nCycles per second with 1 to 256 concurrent tasks on one client (`sweep.svg`): where each backend saturates. The floor is the raw lock cycle on the same driver, at the same concurrency and connection count.\n"
        );
        let _ = writeln!(
            md,
            "| backend | tasks | distlock | raw floor | distlock ÷ floor | rslock | distlock ÷ rslock |"
        );
        let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- | --- |");
        for b in &self.backends {
            for p in &b.sweep {
                let rate = |r: Option<f64>| r.map_or("—".to_owned(), |r| format!("{r:.0}"));
                let ratio = |theirs: Option<f64>| match (p.client, theirs) {
                    (Some(o), Some(t)) if t > 0.0 => format!("{:.2}×", o / t),
                    _ => "—".to_owned(),
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} |",
                    b.backend,
                    p.tasks,
                    rate(p.client),
                    rate(p.floor),
                    ratio(p.floor),
                    rate(p.rslock),
                    ratio(p.rslock)
                );
            }
        }
        let _ = writeln!(md, "\n## Per backend\n");
        for b in &self.backends {
            let _ = writeln!(md, "### {}\n\nServer: {}\n", b.backend, b.server);
            if !b.started {
                continue;
            }
            let _ = writeln!(
                md,
                "| measurement | p50 | p90 | p99 | per second | distlock p50 ÷ this p50 | server CPU per op | client CPU per op | releaser took it again |"
            );
            let _ = writeln!(
                md,
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
            );
            let mut row = |name: &str, s: &Summary, ours: Option<&Summary>| {
                let ratio =
                    ours.map_or("—".to_owned(), |o| format!("{:.2}×", o.p50_us / s.p50_us));
                let server = s
                    .server_cpu_us
                    .map_or("—".to_owned(), |us| format!("{us:.0} µs"));
                let client = s
                    .client_cpu_us
                    .map_or("—".to_owned(), |us| format!("{us:.0} µs"));
                let again = s
                    .same_holder_share
                    .map_or("—".to_owned(), |share| format!("{:.0}%", share * 100.0));
                let _ = writeln!(
                    md,
                    "| {name} | {} | {} | {} | {:.0} | {ratio} | {server} | {client} | {again} |",
                    ms(s.p50_us),
                    ms(s.p90_us),
                    ms(s.p99_us),
                    s.per_sec
                );
            };
            let ours = [
                (S1, "S1 cycle, client (try_lock + release)", &b.s1_client),
                (
                    "",
                    "S1 cycle, backend primitives (try_acquire + release)",
                    &b.s1_primitives,
                ),
                (S2, S2, &b.s2_throughput),
                ("", "S2 raw cycle floor under 32 clients", &b.s2_floor),
                (
                    "",
                    "S2 fenced cycle floor under 32 clients",
                    &b.s2_fenced_floor,
                ),
                (S3, S3, &b.s3_handoff),
            ];
            for (_, name, summary) in &ours {
                if let Some(s) = summary {
                    row(name, s, None);
                }
            }
            for f in &b.floors {
                row(
                    &format!("floor: {}", f.name),
                    &f.summary,
                    b.s1_client.as_ref(),
                );
            }
            for p in &b.peers {
                let mine = ours
                    .iter()
                    .find(|(scenario, _, _)| *scenario == p.scenario)
                    .and_then(|(_, _, s)| s.as_ref());
                row(
                    &format!("peer {}: {}", p.peer, p.scenario),
                    &p.summary,
                    mine,
                );
            }
            // rslock's uncontended cycle and the Redis floor send the same two commands:
            // how far apart they land is this run's noise, in the same units.
            let floor = b.cycle_floor();
            let twin = b
                .peers
                .iter()
                .find(|p| p.scenario == S1 && p.peer.starts_with("rslock"));
            if let (Some(floor), Some(twin)) = (floor, twin) {
                let _ = writeln!(
                    md,
                    "\nNoise in this run: {} and the raw floor send the same two commands per cycle; the gap between their S1 p50s, {:.0}%, gives a sense of it.",
                    twin.peer,
                    (twin.summary.p50_us / floor.p50_us - 1.0).abs() * 100.0
                );
            }
            let _ = writeln!(
                md,
                "\n*distlock p50 ÷ this p50* compares distlock's client in the same scenario (S1 for the floors): below 1 is faster. *Server CPU per op* is the CPU time the server process used per operation over the scenario (Redis `INFO cpu`; on a Redlock row, its masters' together), network handling included; *client CPU per op* is this process's (lockbench's runtime and driver, `/proc/self/task/*/schedstat`), on the same cores as the servers. *Releaser took it again* is the share of S3 handoffs won by the task that had just released, ahead of the waiters."
            );
            if let Some(t) = &b.s4_takeover {
                let rounds: Vec<String> =
                    t.takeover_ms.iter().map(|v| format!("{v:.0} ms")).collect();
                let _ = writeln!(
                    md,
                    "\nS4: takeovers after a {:.0} ms TTL: {}.",
                    t.ttl_ms,
                    rounds.join(", ")
                );
            }
            if let Some(st) = &b.storage {
                let _ = writeln!(
                    md,
                    "\nS5 storage: {} distinct names locked and released; {} keys or rows of them on the server right after the last release, {} left {:.0} s later{}.",
                    st.names,
                    st.left_at_once,
                    st.left_after,
                    st.after_s,
                    if st.options.is_empty() {
                        String::new()
                    } else {
                        format!(" (with `{}`)", st.options)
                    }
                );
            }
            if let Some(why) = &b.suite_not_run {
                let _ = writeln!(md, "\nConformance: not run: {why}.");
            }
            if let Some(c) = &b.conformance {
                let _ = writeln!(
                    md,
                    "\nConformance: {} passed, {} failed, {} not run.",
                    c.passed,
                    c.failed.len(),
                    c.skipped.len()
                );
                for (case, why) in &c.failed {
                    let _ = writeln!(md, "- failed `{case}`: {why}");
                }
                for (case, why) in &c.skipped {
                    let _ = writeln!(md, "- not run `{case}`: {why}");
                }
            }
            for e in &b.errors {
                let _ = writeln!(md, "\nError: {e}");
            }
            let _ = writeln!(md);
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BackendRun, Conformance, Report};

    fn report(run: BackendRun) -> String {
        Report {
            mode: "quick".into(),
            unix_time: 0,
            cpus: 2,
            backends: vec![run],
        }
        .markdown()
    }

    #[test]
    fn a_suite_left_out_says_not_run_and_why() {
        let md = report(BackendRun {
            backend: "redis".into(),
            started: true,
            suite_not_run: Some("left out by --skip-suite".into()),
            ..Default::default()
        });
        assert!(
            md.contains("| redis | not run: left out by --skip-suite |"),
            "{md}"
        );
        assert!(md.contains("Conformance: not run: left out by --skip-suite."));
    }

    #[test]
    fn a_suite_that_ran_shows_its_counts() {
        let md = report(BackendRun {
            backend: "etcd".into(),
            started: true,
            conformance: Some(Conformance {
                passed: 60,
                failed: vec![("case".into(), "why".into())],
                skipped: vec![],
                seconds: 50.0,
            }),
            ..Default::default()
        });
        assert!(md.contains("| etcd | 60 / 1 / 0 (in 50 s"), "{md}");
        assert!(md.contains("- failed `case`: why"), "{md}");
    }
}
