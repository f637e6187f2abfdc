//! The targets each backend is held to, each met or not, with the figures behind it.

use std::fmt::Write as _;

use super::{cpu_work, ms, BackendRun, Summary, S1, S2};

/// One target line: its name, whether it was met (`None`: not measured), and the
/// figures behind it.
type Target = (String, Option<bool>, String);

/// What a target line says when its data is missing.
const NOT_MEASURED: &str = "not measured";

/// A target that applies to this backend but whose figures are missing.
fn not_measured(name: String) -> Target {
    (name, None, NOT_MEASURED.into())
}

/// A figure that cannot stand under a ratio: zero, negative or not a number.
fn unusable(figure: f64) -> bool {
    figure.is_nan() || figure <= 0.0
}

/// `ours`'s p50 at most `bound` times `theirs`'s.
fn p50_within(name: String, ours: &Summary, theirs: &Summary, bound: f64, them: &str) -> Target {
    if unusable(ours.p50_us) || unusable(theirs.p50_us) {
        return (name, None, format!("{NOT_MEASURED}: a p50 of zero"));
    }
    let ratio = ours.p50_us / theirs.p50_us;
    let figures = format!(
        "{} vs {} = {ratio:.2}×{}",
        ms(ours.p50_us),
        ms(theirs.p50_us),
        cpu_work(ours, theirs, them)
    );
    (name, Some(ratio <= bound), figures)
}

/// `ours`'s throughput at least `bound` times `theirs`'s.
fn rate_at_least(name: String, ours: &Summary, theirs: &Summary, bound: f64, them: &str) -> Target {
    if unusable(theirs.per_sec) || ours.per_sec.is_nan() {
        return (name, None, format!("{NOT_MEASURED}: a throughput of zero"));
    }
    let ratio = ours.per_sec / theirs.per_sec;
    let figures = format!(
        "{:.0}/s vs {:.0}/s = {ratio:.2}×{}",
        ours.per_sec,
        theirs.per_sec,
        cpu_work(ours, theirs, them)
    );
    (name, Some(ratio >= bound), figures)
}

/// `ours`'s client CPU per operation at most `bound` times `theirs`'s.
fn cpu_within(name: String, ours: &Summary, theirs: &Summary, bound: f64) -> Target {
    match (ours.client_cpu_us, theirs.client_cpu_us) {
        (Some(o), Some(t)) if !unusable(o) && !unusable(t) => {
            let ratio = o / t;
            let figures = format!("{o:.1} µs vs {t:.1} µs per cycle = {ratio:.2}×");
            (name, Some(ratio <= bound), figures)
        }
        _ => (name, None, format!("{NOT_MEASURED}: no client CPU time")),
    }
}

impl BackendRun {
    /// Whether this backend's run measures raw floors (one server with a driver of
    /// its own: not memory, not several servers).
    fn has_floors(&self) -> bool {
        matches!(
            self.backend.as_str(),
            "redis" | "postgres" | "mariadb" | "etcd" | "zookeeper"
        )
    }

    /// The peer libraries this backend's run measures beside it.
    fn expected_peers(&self) -> Vec<&'static str> {
        match self.backend.as_str() {
            "redis" | "redlock-3" | "redlock-5" => vec![crate::peers::RSLOCK],
            _ => vec![],
        }
    }

    /// The targets, each with whether it was met and the figures behind it; a target
    /// that applies to this backend but whose figures are missing says "not
    /// measured" (a backend that did not start has none).
    pub(crate) fn targets(&self) -> Vec<Target> {
        if !self.started {
            return Vec::new();
        }
        let mut out = Vec::new();
        let floors = self.has_floors();
        let name = "S1 cycle within 1.10× of the raw floor (p50)";
        match (&self.s1_client, self.cycle_floor()) {
            (Some(s1), Some(floor)) => {
                out.push(p50_within(name.into(), s1, floor, 1.10, "the floor"));
            }
            _ if floors => out.push(not_measured(name.into())),
            _ => {}
        }
        // The memory backend has no network: there, the client's own cost is bare,
        // and held to twice the primitives'; elsewhere the round trip dominates.
        let bound = if self.backend == "memory" { 2.0 } else { 1.05 };
        let name =
            format!("S1 through the client within {bound:.2}× of the backend's primitives (p50)");
        match (&self.s1_client, &self.s1_primitives) {
            (Some(client), Some(primitives)) => {
                out.push(p50_within(
                    name,
                    client,
                    primitives,
                    bound,
                    "the primitives",
                ));
            }
            _ => out.push(not_measured(name)),
        }
        let name = "S2 throughput at least 0.9× the raw floor's at the same concurrency";
        match (&self.s2_throughput, &self.s2_floor) {
            (Some(s2), Some(floor)) => {
                out.push(rate_at_least(name.into(), s2, floor, 0.9, "the floor"));
            }
            _ if floors => out.push(not_measured(name.into())),
            _ => {}
        }
        if matches!(
            self.backend.as_str(),
            "redis" | "postgres" | "mariadb" | "etcd"
        ) {
            let name = "client CPU per S2 cycle at most 1.3× the raw floor's";
            match (&self.s2_throughput, &self.s2_floor) {
                (Some(ours), Some(floor)) => out.push(cpu_within(name.into(), ours, floor, 1.3)),
                _ => out.push(not_measured(name.into())),
            }
        }
        if self.backend == "redis" {
            let name = "S1 cycle within 1.10× of the fenced floor (p50)";
            match (&self.s1_client, self.fenced_floor()) {
                (Some(s1), Some(floor)) => {
                    out.push(p50_within(name.into(), s1, floor, 1.10, "the fenced floor"));
                }
                _ => out.push(not_measured(name.into())),
            }
            let name = "S2 throughput at least 0.9× the fenced floor's";
            match (&self.s2_throughput, &self.s2_fenced_floor) {
                (Some(s2), Some(floor)) => {
                    out.push(rate_at_least(
                        name.into(),
                        s2,
                        floor,
                        0.9,
                        "the fenced floor",
                    ));
                }
                _ => out.push(not_measured(name.into())),
            }
        }
        let name = "S3 handoff p50 within 4 round trips";
        match (&self.s3_handoff, self.round_trip()) {
            (Some(s3), Some(rtt)) if !unusable(rtt.p50_us) => {
                let trips = s3.p50_us / rtt.p50_us;
                let mut figures = format!(
                    "{} = {trips:.1} round trips of {}",
                    ms(s3.p50_us),
                    ms(rtt.p50_us)
                );
                if let Some(floor) = self
                    .cycle_floor()
                    .filter(|f| self.floor_cycle_ops > 0.0 && !unusable(f.p50_us))
                {
                    // The cause when it is missed: a lock operation is a durable write,
                    // much slower than the read that times a round trip.
                    let op = floor.p50_us / self.floor_cycle_ops;
                    let _ = write!(
                        figures,
                        "; or {:.1} lock operations of {} (raw floor)",
                        s3.p50_us / op,
                        ms(op)
                    );
                }
                out.push((name.into(), Some(trips <= 4.0), figures));
            }
            _ if floors => out.push(not_measured(name.into())),
            _ => {}
        }
        // Issue 35's fair handoffs: on Redis in round trips, on PostgreSQL in lock
        // operations of its raw floor (a durable write each).
        if let Some(fair) = &self.s3_fair {
            let how = if self.fair_handoff {
                "handed over"
            } else {
                "the head asks"
            };
            if self.backend == "redis" {
                let name = "fair S3 across clients p50 within 3 round trips";
                match self.round_trip() {
                    Some(rtt) if !unusable(rtt.p50_us) => {
                        let trips = fair.p50_us / rtt.p50_us;
                        out.push((
                            name.into(),
                            Some(trips <= 3.0),
                            format!(
                                "{} = {trips:.1} round trips of {} ({how})",
                                ms(fair.p50_us),
                                ms(rtt.p50_us)
                            ),
                        ));
                    }
                    _ => out.push(not_measured(name.into())),
                }
            }
            if self.backend == "postgres" {
                let name = "fair S3 across clients p50 within 2 lock operations of the raw floor";
                match self.cycle_floor() {
                    Some(floor) if self.floor_cycle_ops > 0.0 && !unusable(floor.p50_us) => {
                        let op = floor.p50_us / self.floor_cycle_ops;
                        let ops = fair.p50_us / op;
                        out.push((
                            name.into(),
                            Some(ops <= 2.0),
                            format!(
                                "{} = {ops:.1} lock operations of {} ({how})",
                                ms(fair.p50_us),
                                ms(op)
                            ),
                        ));
                    }
                    _ => out.push(not_measured(name.into())),
                }
            }
        }
        // The peer's bounds: issue 35's, for Redis and for Redlock.
        let (s1_bound, s2_bound) = if self.backend == "redis" {
            (1.10, 0.85)
        } else {
            (1.15, 0.9)
        };
        for peer in self.expected_peers() {
            let find = |scenario: &str| {
                self.peers
                    .iter()
                    .find(|p| p.peer == peer && p.scenario == scenario)
                    .map(|p| &p.summary)
            };
            let name = format!("S1 cycle within {s1_bound:.2}× of {peer}'s (p50)");
            match (&self.s1_client, find(S1)) {
                (Some(ours), Some(theirs)) => {
                    out.push(p50_within(name, ours, theirs, s1_bound, peer));
                }
                _ => out.push(not_measured(name)),
            }
            let name = format!("S2 throughput at least {s2_bound:.2}× {peer}'s");
            match (&self.s2_throughput, find(S2)) {
                (Some(ours), Some(theirs)) => {
                    out.push(rate_at_least(name, ours, theirs, s2_bound, peer));
                }
                _ => out.push(not_measured(name)),
            }
        }
        let name = |slack: f64| {
            format!(
                "S4 takeover no earlier than the TTL less {slack:.0} ms, and within the TTL + {:.0} ms",
                self.takeover_allowance_ms
            )
        };
        match &self.s4_takeover {
            Some(s4) if !s4.takeover_ms.is_empty() => {
                let early = s4.earliest_over_ttl_ms < -s4.slack_ms;
                let late = s4.worst_over_ttl_ms > self.takeover_allowance_ms;
                out.push((
                    name(s4.slack_ms),
                    Some(!early && !late),
                    format!(
                        "earliest {:+.0} ms, worst {:+.0} ms against a {:.0} ms TTL{}",
                        s4.earliest_over_ttl_ms,
                        s4.worst_over_ttl_ms,
                        s4.ttl_ms,
                        if early {
                            " (taken over before the vanished holder's lease could expire)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            _ => out.push(not_measured(
                name(0.0).replace("no earlier than the TTL less 0 ms, and ", ""),
            )),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FloorRole, FloorRow};
    use super::*;
    use crate::scenarios::Takeover;

    fn summary(p50_us: f64, per_sec: f64) -> Summary {
        Summary {
            count: 100,
            p50_us,
            p90_us: p50_us,
            p99_us: p50_us,
            mean_us: p50_us,
            max_us: p50_us,
            per_sec,
            server_cpu_us: None,
            client_cpu_us: None,
            same_holder_share: None,
            wait_ratio: None,
        }
    }

    fn floor(role: FloorRole, p50_us: f64) -> FloorRow {
        FloorRow {
            name: format!("{role:?}"),
            role,
            summary: summary(p50_us, 1e6 / p50_us),
        }
    }

    fn takeover(earliest: f64, worst: f64) -> Takeover {
        Takeover {
            ttl_ms: 1000.0,
            takeover_ms: vec![1000.0 + earliest, 1000.0 + worst],
            worst_over_ttl_ms: worst,
            earliest_over_ttl_ms: earliest,
            slack_ms: 1.0,
        }
    }

    fn run(backend: &str) -> BackendRun {
        BackendRun {
            backend: backend.into(),
            started: true,
            s1_client: Some(summary(200.0, 5000.0)),
            s1_primitives: Some(summary(195.0, 5100.0)),
            s2_throughput: Some(summary(1000.0, 30_000.0)),
            s2_floor: Some(summary(900.0, 32_000.0)),
            s3_handoff: Some(summary(300.0, 3000.0)),
            s4_takeover: Some(takeover(2.0, 5.0)),
            floors: vec![
                floor(FloorRole::RoundTrip, 100.0),
                floor(FloorRole::Cycle, 190.0),
            ],
            floor_cycle_ops: 2.0,
            takeover_allowance_ms: 50.0,
            ..BackendRun::default()
        }
    }

    fn met<'a>(targets: &'a [Target], starts: &str) -> (&'a Option<bool>, &'a str) {
        let (_, met, figures) = targets
            .iter()
            .find(|(name, _, _)| name.starts_with(starts))
            .unwrap_or_else(|| panic!("no target {starts:?} in {targets:?}"));
        (met, figures)
    }

    #[test]
    fn an_early_takeover_fails_s4_as_a_late_one_does() {
        let mut r = run("postgres");
        assert_eq!(met(&r.targets(), "S4").0, &Some(true));
        r.s4_takeover = Some(takeover(-300.0, 5.0));
        let targets = r.targets();
        let (early, figures) = met(&targets, "S4");
        assert_eq!(early, &Some(false));
        assert!(
            figures.contains("before the vanished holder's lease"),
            "{figures}"
        );
        // Within the slack is not early.
        r.s4_takeover = Some(takeover(-0.5, 5.0));
        assert_eq!(met(&r.targets(), "S4").0, &Some(true));
        r.s4_takeover = Some(takeover(2.0, 80.0));
        assert_eq!(met(&r.targets(), "S4").0, &Some(false));
    }

    #[test]
    fn floors_are_found_by_role_when_one_is_missing() {
        let mut r = run("redis");
        // The round trip's floor failed: the cycle floor keeps its role.
        r.floors.remove(0);
        let targets = r.targets();
        let (s1, figures) = met(&targets, "S1 cycle within 1.10× of the raw floor");
        assert_eq!(s1, &Some(true));
        assert!(
            figures.contains("1.05×"),
            "200 µs against the cycle's 190 µs: {figures}"
        );
        assert_eq!(
            met(&targets, "S3 handoff").1,
            NOT_MEASURED,
            "the S3 target needs the round trip, not whatever floor comes first"
        );
    }

    #[test]
    fn a_target_without_its_data_says_not_measured() {
        let mut r = run("redis");
        r.s2_floor = None;
        r.s4_takeover = None;
        let targets = r.targets();
        for name in [
            "S2 throughput at least 0.9×",
            "S4",
            "S1 cycle within 1.10× of rslock",
        ] {
            assert_eq!(met(&targets, name), (&None, NOT_MEASURED), "{name}");
        }
        // A backend with no floors and no peer has no such lines; one not started,
        // no lines at all.
        let memory = BackendRun {
            floors: Vec::new(),
            s2_floor: None,
            ..run("memory")
        }
        .targets();
        assert!(memory
            .iter()
            .all(|(n, _, _)| !n.contains("floor") && !n.contains("rslock")));
        let not_started = BackendRun {
            started: false,
            ..run("etcd")
        };
        assert!(not_started.targets().is_empty());
    }

    #[test]
    fn redis_is_held_to_its_fenced_floor_and_the_client_cpu_to_the_raw_floors() {
        let mut r = run("redis");
        r.floors.push(floor(FloorRole::FencedCycle, 195.0));
        r.s2_fenced_floor = Some(summary(950.0, 31_000.0));
        if let Some(s) = r.s2_throughput.as_mut() {
            s.client_cpu_us = Some(26.0);
        }
        if let Some(s) = r.s2_floor.as_mut() {
            s.client_cpu_us = Some(13.0);
        }
        let targets = r.targets();
        assert_eq!(
            met(&targets, "S1 cycle within 1.10× of the fenced floor").0,
            &Some(true)
        );
        assert_eq!(
            met(&targets, "S2 throughput at least 0.9× the fenced floor").0,
            &Some(true)
        );
        let (cpu, figures) = met(&targets, "client CPU per S2 cycle");
        assert_eq!(cpu, &Some(false), "26 µs against 13 µs is 2×: {figures}");
        if let Some(s) = r.s2_throughput.as_mut() {
            s.client_cpu_us = Some(16.0);
        }
        assert_eq!(met(&r.targets(), "client CPU per S2 cycle").0, &Some(true));
        // Without the fenced floor's figures, its lines say so; other backends have none.
        r.floors.pop();
        assert_eq!(
            met(&r.targets(), "S1 cycle within 1.10× of the fenced floor").1,
            NOT_MEASURED
        );
        assert!(run("postgres")
            .targets()
            .iter()
            .all(|(name, _, _)| !name.contains("fenced")));
    }

    #[test]
    fn fair_handoffs_are_held_to_round_trips_on_redis_and_lock_operations_on_postgres() {
        let mut r = run("redis");
        assert!(
            r.targets()
                .iter()
                .all(|(name, _, _)| !name.starts_with("fair")),
            "no fair run, no fair target"
        );
        r.s3_fair = Some(summary(290.0, 400.0));
        r.fair_handoff = true;
        let targets = r.targets();
        let (met_, figures) = met(&targets, "fair S3 across clients p50 within 3 round trips");
        assert_eq!(met_, &Some(true), "{figures}");
        assert!(figures.contains("2.9 round trips") && figures.contains("handed over"));
        r.s3_fair = Some(summary(310.0, 400.0));
        assert_eq!(met(&r.targets(), "fair S3").0, &Some(false));
        // PostgreSQL: the raw floor's cycle is two lock operations of 95 µs.
        let mut pg = run("postgres");
        pg.s3_fair = Some(summary(200.0, 400.0));
        let targets = pg.targets();
        let (met_, figures) = met(
            &targets,
            "fair S3 across clients p50 within 2 lock operations",
        );
        assert_eq!(met_, &Some(false), "{figures}");
        assert!(figures.contains("2.1 lock operations") && figures.contains("the head asks"));
        assert!(run("etcd")
            .targets()
            .iter()
            .all(|(name, _, _)| !name.starts_with("fair")));
    }

    #[test]
    fn the_memory_backend_is_held_to_twice_its_primitives() {
        let mut r = run("memory");
        r.s1_client = Some(summary(1.9, 500_000.0));
        r.s1_primitives = Some(summary(1.0, 1_000_000.0));
        assert_eq!(
            met(&r.targets(), "S1 through the client within 2.00×").0,
            &Some(true)
        );
        r.s1_client = Some(summary(2.1, 480_000.0));
        assert_eq!(
            met(&r.targets(), "S1 through the client within 2.00×").0,
            &Some(false)
        );
        let redis = run("redis").targets();
        assert!(met(&redis, "S1 through the client within 1.05×")
            .0
            .is_some());
    }

    #[test]
    fn a_zero_figure_is_not_measured_rather_than_divided_by() {
        let mut r = run("etcd");
        r.s2_floor = Some(summary(900.0, 0.0));
        r.floors[1].summary.p50_us = 0.0;
        r.floors[0].summary.p50_us = 0.0;
        let targets = r.targets();
        assert_eq!(met(&targets, "S2 throughput").0, &None);
        assert_eq!(met(&targets, "S1 cycle within 1.10×").0, &None);
        assert_eq!(met(&targets, "S3 handoff").1, NOT_MEASURED);
    }
}
