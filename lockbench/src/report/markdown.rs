//! The report in Markdown, for people.

use std::fmt::Write as _;

use super::{ms, opt, table, BackendRun, Report, S1, S2, S3};
use crate::stats::Summary;

/// A ratio of two figures, or a dash where the second is not above zero.
fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 {
        format!("{:.2}×", ours / theirs)
    } else {
        "—".into()
    }
}

/// A summary's p50 and p99.
fn p50_p99(s: &Summary) -> String {
    format!("{} / {}", ms(s.p50_us), ms(s.p99_us))
}

/// One measurement of a backend's own table: its name, its summary, and distlock's
/// figure in the same scenario, where there is one to compare.
fn measurement_row((name, s, ours): (String, &Summary, Option<&Summary>)) -> Vec<String> {
    let micros = |us: Option<f64>| us.map_or("—".to_owned(), |us| format!("{us:.0} µs"));
    vec![
        name,
        ms(s.p50_us),
        ms(s.p90_us),
        ms(s.p99_us),
        format!("{:.0}", s.per_sec),
        ours.map_or("—".to_owned(), |o| format!("{:.2}×", o.p50_us / s.p50_us)),
        micros(s.server_cpu_us),
        micros(s.client_cpu_us),
        s.same_holder_share
            .map_or("—".to_owned(), |share| format!("{:.0}%", share * 100.0)),
    ]
}

/// What the summary table says of one backend.
fn summary_row(b: &BackendRun) -> Vec<String> {
    if !b.started {
        let mut row = vec![b.backend.clone(), format!("not started: {}", b.server)];
        row.resize(11, String::new());
        return row;
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
    let both = |a: Option<&Summary>, b: Option<&Summary>, f: fn(&Summary) -> f64| match (a, b) {
        (Some(a), Some(b)) => ratio(f(a), f(b)),
        _ => "—".into(),
    };
    vec![
        b.backend.clone(),
        conf,
        opt(&b.s1_client, p50_p99),
        b.cycle_floor().map_or("—".into(), |f| ms(f.p50_us)),
        both(b.s1_client.as_ref(), b.cycle_floor(), |s| s.p50_us),
        opt(&b.s2_throughput, |s| format!("{:.0}", s.per_sec)),
        opt(&b.s2_floor, |s| format!("{:.0}", s.per_sec)),
        both(b.s2_throughput.as_ref(), b.s2_floor.as_ref(), |s| s.per_sec),
        opt(&b.s3_handoff, p50_p99),
        opt(&b.s3_handoff, |s| format!("{:.0}", s.per_sec)),
        opt(&b.s4_takeover, |t| {
            format!("{:.0} ms (TTL {:.0} ms)", t.worst_over_ttl_ms, t.ttl_ms)
        }),
    ]
}

/// The racing and fair rows of S3 across clients for one backend.
fn fairness_rows(b: &BackendRun) -> Vec<Vec<String>> {
    let fair = match (&b.s3_fair, b.fair_handoff) {
        (None, _) => "fair",
        (Some(_), true) => "fair, handed over",
        (Some(_), false) => "fair, the head asks",
    };
    [("racing", &b.s3_racing), (fair, &b.s3_fair)]
        .into_iter()
        .map(|(mode, summary)| {
            let cells = match summary {
                Some(s) => vec![
                    p50_p99(s),
                    format!("{:.0}", s.per_sec),
                    s.wait_ratio.map_or("—".into(), |r| format!("{r:.1}")),
                    s.same_holder_share
                        .map_or("—".into(), |r| format!("{:.0}%", r * 100.0)),
                ],
                None if mode != "racing" && b.s3_racing.is_some() => {
                    vec!["no fair mode (LockBackend::fair)".into()]
                }
                None => vec!["not measured".into()],
            };
            let mut row = vec![b.backend.clone(), mode.into()];
            row.extend(cells);
            row.resize(6, String::new());
            row
        })
        .collect()
}

/// The rows of the kinds beyond the mutex for one backend.
fn kind_rows(b: &BackendRun) -> Vec<Vec<String>> {
    if b.kinds.is_empty() {
        let mut row = vec![
            b.backend.clone(),
            "no permits (LockBackend::permits)".into(),
        ];
        row.resize(6, String::new());
        return vec![row];
    }
    b.kinds
        .iter()
        .map(|k| {
            let mutex = b.s1_client.as_ref().map_or(0.0, |m| m.p50_us);
            let (s3, s3_rate) = k.s3.as_ref().map_or(("—".into(), "—".into()), |s| {
                (p50_p99(s), format!("{:.0}", s.per_sec))
            });
            vec![
                b.backend.clone(),
                k.kind.clone(),
                p50_p99(&k.s1),
                ratio(k.s1.p50_us, mutex),
                s3,
                s3_rate,
            ]
        })
        .collect()
}

/// The row of several keys under one lock for one backend.
fn set_row(b: &BackendRun) -> Vec<String> {
    let mut row = vec![b.backend.clone()];
    match &b.sets {
        Some(s) => row.extend([
            if s.one_step {
                "in one step"
            } else {
                "key by key"
            }
            .into(),
            ms(s.one_key.p50_us),
            p50_p99(&s.two_keys),
            ratio(s.two_keys.p50_us, s.one_key.p50_us),
            format!("{:.0}", s.opposite.per_sec),
            p50_p99(&s.opposite),
            s.opposite_timeouts.to_string(),
        ]),
        None => row.push("not measured (see the errors below)".into()),
    }
    row.resize(8, String::new());
    row
}

impl Report {
    /// For each replicated row that ran beside its single-server row, its S1 and S2
    /// beside the single server's; a row that did not run, or has no figure, says so.
    fn replicated_rows(&self) -> Vec<Vec<String>> {
        let find = |name: &str| {
            self.backends
                .iter()
                .find(|b| b.backend == name && b.started)
        };
        crate::rows::REPLICATED
            .iter()
            .filter(|(replicated, single)| {
                self.backends.iter().any(|b| b.backend == *replicated)
                    && self.backends.iter().any(|b| b.backend == *single)
            })
            .map(|(replicated, single)| {
                let (r, s) = (find(replicated), find(single));
                let s1 =
                    |b: Option<&BackendRun>| b.and_then(|b| b.s1_client.as_ref()).map(|s| s.p50_us);
                let s2 = |b: Option<&BackendRun>| {
                    b.and_then(|b| b.s2_throughput.as_ref()).map(|s| s.per_sec)
                };
                let pair = |a: Option<f64>, b: Option<f64>, show: fn(f64) -> String| {
                    let one = |x: Option<f64>| x.map_or("not run".to_owned(), show);
                    format!("{} / {}", one(a), one(b))
                };
                let over = |a: Option<f64>, b: Option<f64>| match (a, b) {
                    (Some(a), Some(b)) => ratio(a, b),
                    _ => "—".to_owned(),
                };
                vec![
                    (*replicated).to_owned(),
                    (*single).to_owned(),
                    pair(s1(r), s1(s), ms),
                    over(s1(r), s1(s)),
                    pair(s2(r), s2(s), |x| format!("{x:.0}")),
                    over(s2(r), s2(s)),
                ]
            })
            .collect()
    }

    pub(crate) fn markdown(&self) -> String {
        let mut md = String::new();
        let started = || self.backends.iter().filter(|b| b.started);
        let _ = writeln!(md, "# lockbench report\n");
        let _ = writeln!(
            md,
            "Mode: {}. Machine: {} CPUs. Servers in containers on this machine (each backend's \"Server\" line below says how it was reached).\n",
            self.mode, self.cpus
        );
        let _ = writeln!(md, "## Summary\n");
        table(
            &mut md,
            "backend | conformance (passed / failed / not run) | S1 cycle p50 / p99 | S1 raw floor p50 | S1 ÷ floor | S2 cycles/s (32 clients) | S2 raw floor cycles/s | S2 ÷ floor | S3 handoff p50 / p99 | S3 handoffs/s | S4 worst past TTL",
            self.backends.iter().map(summary_row),
        );
        let replicated = self.replicated_rows();
        if !replicated.is_empty() {
            let _ = writeln!(
                md,
                "\n## The cost of replication\n\nEach replicated row beside the single-server row of the same backend, from this run: *S1* the p50 of one client's cycle, *S2* cycles per second under 32 clients; *÷ single* is the replicated figure over the single server's (above 1: the S1 cycle takes longer, S2 goes faster).\n"
            );
            table(
                &mut md,
                "replicated | single | S1 p50 replicated / single | S1 ÷ single | S2 cycles/s replicated / single | S2 ÷ single",
                replicated,
            );
        }
        let _ = writeln!(md, "\n## Targets\n");
        table(
            &mut md,
            "backend | target | met | measured",
            self.backends.iter().flat_map(|b| {
                b.targets().into_iter().map(|(target, met, figures)| {
                    let met = match met {
                        Some(true) => "yes",
                        Some(false) => "**no**",
                        None => "—",
                    };
                    vec![b.backend.clone(), target, met.into(), figures]
                })
            }),
        );
        let _ = writeln!(
            md,
            "\n## S3 across clients: racing and fair\n\n16 waiters on one key, each on a client of its own (as 16 processes would be), each holding the lock 1 ms and asking again at once. *Racing*: waiters retry on the release notification and the fastest wins. *Fair*: the client's fair mode, the key's queue on the server; *handed over* where a release grants the lock to the head of the queue in its own step (`FairBackend::handoffs`), *the head asks* where the head learns of the release (a notification, a watch or its poll) and then takes the key with a fair step of its own. *Longest ÷ median wait* is the fairness figure: near 1 when every waiter waits alike, large when some starve. *Releaser won* is the share of handoffs taken by the waiter that had just released.\n"
        );
        table(
            &mut md,
            "backend | mode | handoff p50 / p99 | handoffs/s | longest ÷ median wait | releaser won",
            started().flat_map(fairness_rows),
        );
        let _ = writeln!(
            md,
            "\n## Semaphores, read-write locks and elections\n\nEach kind through its own type (`Semaphore`, `RwLock`, `Election`), on the backends with permits (`LockBackend::permits`). *S1*: one client at a time on fresh names, a try then a release; *÷ mutex* is that over the mutex client's S1 in the same run. *S3*: 16 waiters, each with a handle of its own, on one name, each holding 1 ms; measured for the kinds whose grant is exclusive (a semaphore of one permit, a writer, a campaign).\n"
        );
        table(
            &mut md,
            "backend | kind | S1 p50 / p99 | S1 ÷ mutex | S3 handoff p50 / p99 | S3 handoffs/s",
            started().flat_map(kind_rows),
        );
        let _ = writeln!(
            md,
            "\n## Several keys under one lock\n\n`LockClient::lock_all`, on every backend. *A set taken*: in one step on the server where the backend takes sets (`LockBackend::sets`), else key by key. *S1*: one client at a time on fresh keys, `try_lock_all` of two keys then the set's release, in the same blocks as the one-key cycle (*÷ one key*). *Opposite orders*: two clients, each with a client of its own, lock the same two keys in opposite orders, release, and go again, for the S2 time; a wait that runs out ({} s) would be a deadlock, and must be 0.\n",
            crate::sets::OPPOSITE_WAIT.as_secs()
        );
        table(
            &mut md,
            "backend | a set taken | S1 one key p50 | S1 two keys p50 / p99 | two ÷ one | opposite orders: sets/s | its p50 / p99 | waits run out",
            started().map(set_row),
        );
        let _ = writeln!(
            md,
            "\n## S2 sweep\n\nCycles per second with 1 to 256 concurrent tasks on one client (`sweep.svg`): where each backend saturates. The floor is the raw lock cycle on the same driver, at the same concurrency and connection count.\n"
        );
        let rate = |r: Option<f64>| r.map_or("—".to_owned(), |r| format!("{r:.0}"));
        let versus = |ours: Option<f64>, theirs: Option<f64>| match (ours, theirs) {
            (Some(o), Some(t)) => ratio(o, t),
            _ => "—".to_owned(),
        };
        table(
            &mut md,
            "backend | tasks | distlock | raw floor | distlock ÷ floor | rslock | distlock ÷ rslock",
            self.backends.iter().flat_map(|b| {
                b.sweep.iter().map(|p| {
                    vec![
                        b.backend.clone(),
                        p.tasks.to_string(),
                        rate(p.client),
                        rate(p.floor),
                        versus(p.client, p.floor),
                        rate(p.rslock),
                        versus(p.client, p.rslock),
                    ]
                })
            }),
        );
        let _ = writeln!(md, "\n## Per backend\n");
        for b in &self.backends {
            let _ = writeln!(md, "### {}\n\nServer: {}\n", b.backend, b.server);
            if !b.started {
                continue;
            }
            let ours = [
                (S1, "S1 cycle, client (try_lock + release)", &b.s1_client),
                (
                    "",
                    "S1 cycle, backend primitives (try_acquire + release)",
                    &b.s1_primitives,
                ),
                (
                    "",
                    "S1 cycle, efficiency lock (no fence: with_fenced(false))",
                    &b.s1_efficiency,
                ),
                (S2, S2, &b.s2_throughput),
                ("", "S2 efficiency lock under 32 clients", &b.s2_efficiency),
                ("", "S2 raw cycle floor under 32 clients", &b.s2_floor),
                (
                    "",
                    "S2 fenced cycle floor under 32 clients",
                    &b.s2_fenced_floor,
                ),
                (S3, S3, &b.s3_handoff),
            ];
            let scenarios = ours
                .iter()
                .filter_map(|(_, name, s)| s.as_ref().map(|s| ((*name).to_owned(), s, None)));
            let floors = b.floors.iter().map(|f| {
                (
                    format!("floor: {}", f.name),
                    &f.summary,
                    b.s1_client.as_ref(),
                )
            });
            let request_floors = b.s2_request_floors.iter().map(|f| {
                (
                    format!("S2 floor under 32 clients: {}", f.name),
                    &f.summary,
                    None,
                )
            });
            let peers = b.peers.iter().map(|p| {
                let mine = ours
                    .iter()
                    .find(|(scenario, _, _)| *scenario == p.scenario)
                    .and_then(|(_, _, s)| s.as_ref());
                (format!("peer {}: {}", p.peer, p.scenario), &p.summary, mine)
            });
            table(
                &mut md,
                "measurement | p50 | p90 | p99 | per second | distlock p50 ÷ this p50 | server CPU per op | client CPU per op | releaser took it again",
                scenarios
                    .chain(floors)
                    .chain(request_floors)
                    .chain(peers)
                    .map(measurement_row),
            );
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
            let server_cpu = match b.server_cpu_from {
                Some(from) => format!(
                    "the CPU time the server used per operation over the scenario, read from {from}, network handling included"
                ),
                None => "not measured on this row (a Redis server, or a single server this run started whose container's control group this machine shows, has it)".to_owned(),
            };
            let _ = writeln!(
                md,
                "\n*distlock p50 ÷ this p50* compares distlock's client in the same scenario (S1 for the floors): below 1 is faster. *Server CPU per op* is {server_cpu}; *client CPU per op* is this process's (lockbench's runtime and driver, `/proc/self/task/*/schedstat`), on the same cores as the servers. *Releaser took it again* is the share of S3 handoffs won by the task that had just released, ahead of the waiters."
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
            if let Some(l) = &b.layer {
                let _ = writeln!(
                    md,
                    "\nS6 through the tower layer (32 tasks, a fresh key per request, tried once): {:.0} requests/s through `LockLayer`, {:.0} try + release cycles/s on the bare client ({:.2}×), {:.0} requests/s to the bare handler (the floor); p50 {} through the layer, {} on the bare client.",
                    l.through_layer.per_sec,
                    l.bare_lock.per_sec,
                    l.through_layer.per_sec / l.bare_lock.per_sec.max(f64::MIN_POSITIVE),
                    l.bare_handler.per_sec,
                    ms(l.through_layer.p50_us),
                    ms(l.bare_lock.p50_us),
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
    use super::super::{BackendRun, Conformance, FloorRow, Report};
    use crate::scenarios::FloorRole;

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

    #[test]
    fn the_request_floors_s2_rows_are_shown_under_their_names() {
        let summary = crate::stats::Summary::of(
            vec![std::time::Duration::from_micros(400); 10],
            std::time::Duration::from_secs(1),
        );
        let md = report(BackendRun {
            backend: "redis".into(),
            started: true,
            s2_request_floors: vec![FloorRow {
                name: "the lock's requests, bare driver".into(),
                role: FloorRole::Requests,
                summary,
            }],
            ..Default::default()
        });
        assert!(
            md.contains("| S2 floor under 32 clients: the lock's requests, bare driver | 400 µs |"),
            "{md}"
        );
    }
}
