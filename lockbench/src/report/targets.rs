//! The targets each row is held to, each met or not, with the figures behind it. The
//! targets are data (`lockbench/targets.json`): which rows each applies to, what it
//! compares and its bound; this file only knows how to compare.

use std::fmt::Write as _;
use std::sync::OnceLock;

use serde::Deserialize;

use super::{cpu_work, ms, BackendRun, Summary, S1, S2};

/// One target line: its name, whether it was met (`None`: not measured), and the
/// figures behind it.
type Target = (String, Option<bool>, String);

/// What a target line says when its data is missing.
const NOT_MEASURED: &str = "not measured";

/// The table of targets, as `lockbench/targets.json` has it.
#[derive(Debug, Deserialize)]
struct Table {
    targets: Vec<Spec>,
}

/// One target of the table.
#[derive(Debug, Deserialize)]
struct Spec {
    /// Its name; `{bound}` is replaced by the bound, `{peer}` by the peer's name.
    name: String,
    kind: Kind,
    /// The figure held to the target.
    #[serde(default)]
    ours: Option<Figure>,
    /// The figure it is compared with.
    #[serde(default)]
    theirs: Option<Figure>,
    /// The peer library, by the start of its name, for the `peer_*` figures.
    #[serde(default)]
    peer: Option<String>,
    #[serde(default)]
    bound: f64,
    /// The rows it applies to; none: every row, less `except`.
    #[serde(default)]
    rows: Vec<String>,
    #[serde(default)]
    except: Vec<String>,
    /// Left out, rather than not measured, where `ours` was not measured.
    #[serde(default)]
    only_if: bool,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    P50Within,
    RateAtLeast,
    CpuWithin,
    RoundTrips,
    LockOperations,
    Takeover,
}

/// A figure of a row, by its name in the table.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Figure {
    S1Client,
    S1Primitives,
    S2,
    S2Floor,
    S2FencedFloor,
    CycleFloor,
    FencedFloor,
    S3,
    S3Fair,
    PeerS1,
    PeerS2,
    EfficiencyS1,
    EfficiencyS2,
}

impl Figure {
    /// What the figures line calls it, as the other side of a comparison.
    fn label(self, peer: &str) -> String {
        match self {
            Figure::S1Primitives => "the primitives".into(),
            Figure::CycleFloor | Figure::S2Floor => "the floor".into(),
            Figure::FencedFloor | Figure::S2FencedFloor => "the fenced floor".into(),
            Figure::PeerS1 | Figure::PeerS2 => peer.into(),
            Figure::S1Client | Figure::S2 | Figure::S3 | Figure::S3Fair => "distlock".into(),
            Figure::EfficiencyS1 | Figure::EfficiencyS2 => "the efficiency lock".into(),
        }
    }
}

/// The table, read once.
fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_json::from_str(include_str!("../../targets.json"))
            .unwrap_or_else(|e| panic!("lockbench/targets.json does not read: {e}"))
    })
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

/// A bound as a name shows it: a count (of round trips, of lock operations) bare, a
/// ratio to two places.
fn shown(kind: Kind, bound: f64) -> String {
    match kind {
        Kind::RoundTrips | Kind::LockOperations => format!("{bound:.0}"),
        _ => format!("{bound:.2}"),
    }
}

impl Spec {
    fn applies_to(&self, row: &str) -> bool {
        (self.rows.is_empty() || self.rows.iter().any(|r| r == row))
            && !self.except.iter().any(|r| r == row)
    }
}

impl BackendRun {
    /// The peer row whose library's name starts with `peer`, in `scenario`.
    fn peer(&self, peer: &str, scenario: &str) -> Option<(&str, &Summary)> {
        self.peers
            .iter()
            .find(|p| p.peer.starts_with(peer) && p.scenario == scenario)
            .map(|p| (p.peer.as_str(), &p.summary))
    }

    /// One figure of this row, where it was measured.
    fn figure(&self, figure: Figure, peer: &str) -> Option<&Summary> {
        match figure {
            Figure::S1Client => self.s1_client.as_ref(),
            Figure::S1Primitives => self.s1_primitives.as_ref(),
            Figure::S2 => self.s2_throughput.as_ref(),
            Figure::S2Floor => self.s2_floor.as_ref(),
            Figure::S2FencedFloor => self.s2_fenced_floor.as_ref(),
            Figure::CycleFloor => self.cycle_floor(),
            Figure::FencedFloor => self.fenced_floor(),
            Figure::S3 => self.s3_handoff.as_ref(),
            Figure::S3Fair => self.s3_fair.as_ref(),
            Figure::PeerS1 => self.peer(peer, S1).map(|(_, s)| s),
            Figure::PeerS2 => self.peer(peer, S2).map(|(_, s)| s),
            Figure::EfficiencyS1 => self.s1_efficiency.as_ref(),
            Figure::EfficiencyS2 => self.s2_efficiency.as_ref(),
        }
    }

    /// The targets, each with whether it was met and the figures behind it; a target
    /// that applies to this row but whose figures are missing says "not measured"
    /// (a backend that did not start has none).
    pub(crate) fn targets(&self) -> Vec<Target> {
        if !self.started {
            return Vec::new();
        }
        table()
            .targets
            .iter()
            .filter(|spec| spec.applies_to(&self.backend))
            .filter_map(|spec| self.target(spec))
            .collect()
    }

    fn target(&self, spec: &Spec) -> Option<Target> {
        let peer = spec.peer.as_deref().unwrap_or_default();
        let peer_name = [S1, S2]
            .iter()
            .find_map(|scenario| self.peer(peer, scenario))
            .map_or(peer, |(name, _)| name);
        let name = spec
            .name
            .replace("{bound}", &shown(spec.kind, spec.bound))
            .replace("{peer}", peer_name);
        let ours = spec.ours.and_then(|f| self.figure(f, peer));
        if spec.only_if && ours.is_none() {
            return None;
        }
        let theirs = spec.theirs.and_then(|f| self.figure(f, peer));
        let them = spec.theirs.map_or_else(String::new, |f| f.label(peer_name));
        let missing = || (name.clone(), None, NOT_MEASURED.to_owned());
        Some(match spec.kind {
            Kind::Takeover => return Some(self.takeover()),
            Kind::P50Within => match (ours, theirs) {
                (Some(o), Some(t)) => p50_within(name, o, t, spec.bound, &them),
                _ => missing(),
            },
            Kind::RateAtLeast => match (ours, theirs) {
                (Some(o), Some(t)) => rate_at_least(name, o, t, spec.bound, &them),
                _ => missing(),
            },
            Kind::CpuWithin => match (ours, theirs) {
                (Some(o), Some(t)) => cpu_within(name, o, t, spec.bound),
                _ => missing(),
            },
            Kind::RoundTrips => match (ours, self.round_trip()) {
                (Some(o), Some(rtt)) if !unusable(rtt.p50_us) => {
                    let trips = o.p50_us / rtt.p50_us;
                    let mut figures = format!(
                        "{} = {trips:.1} round trips of {}",
                        ms(o.p50_us),
                        ms(rtt.p50_us)
                    );
                    if let Some(how) = self.fair_how(spec) {
                        let _ = write!(figures, " ({how})");
                    } else if let Some(op) = self.lock_operation() {
                        // The cause when it is missed: a lock operation is a durable
                        // write, much slower than the read that times a round trip.
                        let _ = write!(
                            figures,
                            "; or {:.1} lock operations of {} (raw floor)",
                            o.p50_us / op,
                            ms(op)
                        );
                    }
                    (name, Some(trips <= spec.bound), figures)
                }
                _ => missing(),
            },
            Kind::LockOperations => match (ours, self.lock_operation()) {
                (Some(o), Some(op)) => {
                    let ops = o.p50_us / op;
                    let mut figures =
                        format!("{} = {ops:.1} lock operations of {}", ms(o.p50_us), ms(op));
                    if let Some(how) = self.fair_how(spec) {
                        let _ = write!(figures, " ({how})");
                    }
                    (name, Some(ops <= spec.bound), figures)
                }
                _ => missing(),
            },
        })
    }

    /// How a fair handoff went, for a target on the fair S3.
    fn fair_how(&self, spec: &Spec) -> Option<&'static str> {
        matches!(spec.ours, Some(Figure::S3Fair)).then_some(if self.fair_handoff {
            "handed over"
        } else {
            "the head asks"
        })
    }

    /// One lock operation of the raw cycle floor (a durable write on a SQL server).
    fn lock_operation(&self) -> Option<f64> {
        self.cycle_floor()
            .filter(|f| self.floor_cycle_ops > 0.0 && !unusable(f.p50_us))
            .map(|f| f.p50_us / self.floor_cycle_ops)
    }

    /// S4: the takeover no earlier than the TTL less the slack, and within the TTL
    /// plus the row's allowance.
    fn takeover(&self) -> Target {
        let allowance = self.takeover_allowance_ms;
        match &self.s4_takeover {
            Some(s4) if !s4.takeover_ms.is_empty() => {
                let early = s4.earliest_over_ttl_ms < -s4.slack_ms;
                let late = s4.worst_over_ttl_ms > allowance;
                (
                    format!(
                        "S4 takeover no earlier than the TTL less {:.0} ms, and within the TTL + {allowance:.0} ms",
                        s4.slack_ms
                    ),
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
                )
            }
            _ => (
                format!("S4 takeover within the TTL + {allowance:.0} ms"),
                None,
                NOT_MEASURED.into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::FloorRow;
    use super::*;
    use crate::scenarios::FloorRole;
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
            "S2 throughput at least 0.90×",
            "S4",
            "efficiency lock: S1 cycle within 1.05× of rslock",
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
    fn the_efficiency_lock_not_the_fenced_one_is_held_to_rslock() {
        let mut r = run("redis");
        r.peers = [(S1, summary(190.0, 5200.0)), (S2, summary(950.0, 31_000.0))]
            .into_iter()
            .map(|(scenario, summary)| super::super::PeerRow {
                peer: "rslock 0.10".into(),
                scenario: scenario.into(),
                summary,
            })
            .collect();
        let targets = r.targets();
        assert_eq!(
            met(&targets, "efficiency lock: S1 cycle within 1.05× of rslock").1,
            NOT_MEASURED,
            "the fenced lock's S1 is not compared with rslock's"
        );
        r.s1_efficiency = Some(summary(196.0, 5100.0));
        r.s2_efficiency = Some(summary(940.0, 30_000.0));
        let targets = r.targets();
        let (s1, figures) = met(&targets, "efficiency lock: S1 cycle within 1.05× of rslock");
        assert_eq!(s1, &Some(true), "196 µs against 190 µs: {figures}");
        let (s2, figures) = met(
            &targets,
            "efficiency lock: S2 throughput at least 1.00× rslock",
        );
        assert_eq!(s2, &Some(false), "30,000/s against 31,000/s: {figures}");
        let redlock = BackendRun {
            peers: r.peers.clone(),
            s1_efficiency: r.s1_efficiency.clone(),
            s2_efficiency: r.s2_efficiency.clone(),
            ..run("redlock-3")
        };
        let targets = redlock.targets();
        let (s2, figures) = met(
            &targets,
            "efficiency lock: S2 throughput at least 0.95× rslock",
        );
        assert_eq!(s2, &Some(true), "0.97× on Redlock: {figures}");
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
            met(&targets, "S1 cycle within 1.05× of the fenced floor").0,
            &Some(true)
        );
        assert_eq!(
            met(&targets, "S2 throughput at least 0.90× the fenced floor").0,
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
            met(&r.targets(), "S1 cycle within 1.05× of the fenced floor").1,
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
