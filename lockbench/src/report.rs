//! The report: Markdown for people, JSON with every figure, SVG charts.

use std::fmt::Write as _;

use serde::Serialize;

use crate::scenarios::Takeover;
use crate::stats::Summary;

/// A floor, as reported.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FloorRow {
    pub(crate) name: String,
    pub(crate) summary: Summary,
}

/// The scenario names peers are measured in, as the report shows them.
pub(crate) const S1: &str = "S1 cycle";
/// S2, as the report names it.
pub(crate) const S2: &str = "S2 cycle under 32 clients";
/// S3, as the report names it.
pub(crate) const S3: &str = "S3 handoff, 16 waiters";

/// A peer library measured in one scenario on the same server.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PeerRow {
    pub(crate) peer: String,
    pub(crate) scenario: String,
    pub(crate) summary: Summary,
}

/// The conformance result of one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Conformance {
    pub(crate) passed: usize,
    pub(crate) failed: Vec<(String, String)>,
    pub(crate) skipped: Vec<(String, String)>,
}

/// Everything measured on one backend.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct BackendRun {
    pub(crate) backend: String,
    /// Where the server came from, or why it could not be started.
    pub(crate) server: String,
    pub(crate) started: bool,
    pub(crate) conformance: Option<Conformance>,
    pub(crate) s1_client: Option<Summary>,
    pub(crate) s1_primitives: Option<Summary>,
    pub(crate) s2_throughput: Option<Summary>,
    pub(crate) s3_handoff: Option<Summary>,
    pub(crate) s4_takeover: Option<Takeover>,
    /// The first floor is one round trip; the second, the raw lock cycle.
    pub(crate) floors: Vec<FloorRow>,
    /// Peer libraries on the same server, in the same scenarios.
    pub(crate) peers: Vec<PeerRow>,
    /// How many lock operations (each a write on the server) the raw cycle floor does.
    pub(crate) floor_cycle_ops: f64,
    /// What the S4 target allows past the TTL, in milliseconds.
    pub(crate) takeover_allowance_ms: f64,
    pub(crate) errors: Vec<String>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) mode: String,
    pub(crate) unix_time: u64,
    pub(crate) cpus: usize,
    pub(crate) backends: Vec<BackendRun>,
}

fn ms(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

/// Where both summaries carry the server's own CPU time per operation: the two
/// figures, and how much of one core they used at the rate measured.
fn server_work(ours: &Summary, theirs: &Summary, them: &str) -> String {
    match (ours.server_cpu_us, theirs.server_cpu_us) {
        (Some(a), Some(b)) => format!(
            "; server CPU per cycle {a:.0} µs vs {b:.0} µs for {them} ({:.0}% vs {:.0}% of a core)",
            a * ours.per_sec / 1e4,
            b * theirs.per_sec / 1e4
        ),
        _ => String::new(),
    }
}

fn opt<T>(v: &Option<T>, f: impl Fn(&T) -> String) -> String {
    v.as_ref().map_or_else(|| "—".to_owned(), f)
}

impl BackendRun {
    fn round_trip(&self) -> Option<&Summary> {
        self.floors.first().map(|f| &f.summary)
    }

    fn cycle_floor(&self) -> Option<&Summary> {
        self.floors.get(1).map(|f| &f.summary)
    }

    /// The targets, each with whether it was met and the figures behind it.
    pub(crate) fn targets(&self) -> Vec<(String, Option<bool>, String)> {
        let mut out = Vec::new();
        if let (Some(s1), Some(floor)) = (&self.s1_client, self.cycle_floor()) {
            let ratio = s1.p50_us / floor.p50_us;
            out.push((
                "S1 cycle within 1.10× of the raw floor (p50)".into(),
                Some(ratio <= 1.10),
                format!(
                    "{} vs {} = {ratio:.2}×{}",
                    ms(s1.p50_us),
                    ms(floor.p50_us),
                    server_work(s1, floor, "the floor")
                ),
            ));
        }
        if let (Some(s3), Some(rtt)) = (&self.s3_handoff, self.round_trip()) {
            let trips = s3.p50_us / rtt.p50_us;
            let mut figures = format!(
                "{} = {trips:.1} round trips of {}",
                ms(s3.p50_us),
                ms(rtt.p50_us)
            );
            if let Some(floor) = self.cycle_floor().filter(|_| self.floor_cycle_ops > 0.0) {
                // The cause when it is missed: a lock operation is a durable write, much
                // slower than the read that times a round trip.
                let op = floor.p50_us / self.floor_cycle_ops;
                let _ = write!(
                    figures,
                    "; or {:.1} lock operations of {} (raw floor)",
                    s3.p50_us / op,
                    ms(op)
                );
            }
            out.push((
                "S3 handoff p50 within 4 round trips".into(),
                Some(trips <= 4.0),
                figures,
            ));
        }
        let mut peers: Vec<&str> = self.peers.iter().map(|p| p.peer.as_str()).collect();
        peers.dedup();
        for peer in peers {
            let find = |scenario: &str| {
                self.peers
                    .iter()
                    .find(|p| p.peer == peer && p.scenario == scenario)
                    .map(|p| &p.summary)
            };
            if let (Some(ours), Some(theirs)) = (&self.s1_client, find(S1)) {
                let ratio = ours.p50_us / theirs.p50_us;
                out.push((
                    format!("S1 cycle at least as fast as {peer} (p50)"),
                    Some(ratio <= 1.0),
                    format!(
                        "{} vs {} = {ratio:.2}×{}",
                        ms(ours.p50_us),
                        ms(theirs.p50_us),
                        server_work(ours, theirs, peer)
                    ),
                ));
            }
            if let (Some(ours), Some(theirs)) = (&self.s2_throughput, find(S2)) {
                let ratio = ours.per_sec / theirs.per_sec;
                out.push((
                    format!("S2 throughput at least {peer}'s"),
                    Some(ratio >= 1.0),
                    format!(
                        "{:.0}/s vs {:.0}/s = {ratio:.2}×{}",
                        ours.per_sec,
                        theirs.per_sec,
                        server_work(ours, theirs, peer)
                    ),
                ));
            }
        }
        if let Some(s4) = &self.s4_takeover {
            out.push((
                format!(
                    "S4 takeover within the TTL + {:.0} ms",
                    self.takeover_allowance_ms
                ),
                Some(s4.worst_over_ttl_ms <= self.takeover_allowance_ms),
                format!(
                    "worst {:.0} ms past a {:.0} ms TTL",
                    s4.worst_over_ttl_ms, s4.ttl_ms
                ),
            ));
        }
        out
    }
}

impl Report {
    pub(crate) fn markdown(&self) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# lockbench report\n");
        let _ = writeln!(
            md,
            "Mode: {}. Machine: {} CPUs. Servers in containers on this machine, clients over loopback.\n",
            self.mode, self.cpus
        );
        let _ = writeln!(md, "## Summary\n");
        let _ = writeln!(
            md,
            "| backend | conformance (passed / failed / not run) | S1 cycle p50 / p99 | S1 raw floor p50 | S1 ÷ floor | S2 cycles/s (32 clients) | S3 handoff p50 / p99 | S3 handoffs/s | S4 worst past TTL |"
        );
        let _ = writeln!(
            md,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for b in &self.backends {
            if !b.started {
                let _ = writeln!(
                    md,
                    "| {} | not started: {} | | | | | | | |",
                    b.backend, b.server
                );
                continue;
            }
            let conf = opt(&b.conformance, |c| {
                format!("{} / {} / {}", c.passed, c.failed.len(), c.skipped.len())
            });
            let s1 = opt(&b.s1_client, |s| {
                format!("{} / {}", ms(s.p50_us), ms(s.p99_us))
            });
            let floor = b.cycle_floor().map_or("—".into(), |f| ms(f.p50_us));
            let ratio = match (&b.s1_client, b.cycle_floor()) {
                (Some(s), Some(f)) => format!("{:.2}×", s.p50_us / f.p50_us),
                _ => "—".into(),
            };
            let s2 = opt(&b.s2_throughput, |s| format!("{:.0}", s.per_sec));
            let s3 = opt(&b.s3_handoff, |s| {
                format!("{} / {}", ms(s.p50_us), ms(s.p99_us))
            });
            let s3r = opt(&b.s3_handoff, |s| format!("{:.0}", s.per_sec));
            let s4 = opt(&b.s4_takeover, |t| {
                format!("{:.0} ms (TTL {:.0} ms)", t.worst_over_ttl_ms, t.ttl_ms)
            });
            let _ = writeln!(
                md,
                "| {} | {conf} | {s1} | {floor} | {ratio} | {s2} | {s3} | {s3r} | {s4} |",
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
        let _ = writeln!(md, "\n## Per backend\n");
        for b in &self.backends {
            let _ = writeln!(md, "### {}\n\nServer: {}\n", b.backend, b.server);
            if !b.started {
                continue;
            }
            let _ = writeln!(
                md,
                "| measurement | p50 | p90 | p99 | per second | distlock p50 ÷ this p50 | server CPU per op | releaser took it again |"
            );
            let _ = writeln!(md, "| --- | --- | --- | --- | --- | --- | --- | --- |");
            let mut row = |name: &str, s: &Summary, ours: Option<&Summary>| {
                let ratio =
                    ours.map_or("—".to_owned(), |o| format!("{:.2}×", o.p50_us / s.p50_us));
                let server = s
                    .server_cpu_us
                    .map_or("—".to_owned(), |us| format!("{us:.0} µs"));
                let again = s
                    .same_holder_share
                    .map_or("—".to_owned(), |share| format!("{:.0}%", share * 100.0));
                let _ = writeln!(
                    md,
                    "| {name} | {} | {} | {} | {:.0} | {ratio} | {server} | {again} |",
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
                "\n*distlock p50 ÷ this p50* compares distlock's client in the same scenario (S1 for the floors): below 1 is faster. *Server CPU per op* is the CPU time the server process used per operation over the scenario (Redis `INFO cpu`), network handling included. *Releaser took it again* is the share of S3 handoffs won by the task that had just released, ahead of the waiters."
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

    /// A bar chart of `rows` (label, microseconds), one bar per row.
    pub(crate) fn bar_chart(title: &str, rows: &[(String, f64)]) -> String {
        let max = rows.iter().map(|r| r.1).fold(1.0, f64::max);
        let (width, bar_h, left) = (760.0, 22.0, 300.0);
        let height = 50.0 + rows.len() as f64 * (bar_h + 8.0);
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
            escape(title)
        );
        for (i, (label, value)) in rows.iter().enumerate() {
            let y = 35.0 + i as f64 * (bar_h + 8.0);
            let w = (width - left - 90.0) * value / max;
            let _ = writeln!(
                svg,
                "<text x=\"10\" y=\"{}\">{}</text><rect x=\"{left}\" y=\"{y}\" width=\"{w:.1}\" height=\"{bar_h}\" fill=\"#4a7ab5\"/><text x=\"{:.1}\" y=\"{}\">{}</text>",
                y + 15.0,
                escape(label),
                left + w + 5.0,
                y + 15.0,
                ms(*value)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }

    pub(crate) fn latency_chart(&self) -> String {
        let mut rows = Vec::new();
        for b in self.backends.iter().filter(|b| b.started) {
            if let Some(s) = &b.s1_client {
                rows.push((format!("{} S1 cycle p50", b.backend), s.p50_us));
                rows.push((format!("{} S1 cycle p99", b.backend), s.p99_us));
            }
            if let Some(f) = b.cycle_floor() {
                rows.push((format!("{} raw floor p50", b.backend), f.p50_us));
            }
            for p in b.peers.iter().filter(|p| p.scenario == S1) {
                rows.push((
                    format!("{} ({}) S1 cycle p50", p.peer, b.backend),
                    p.summary.p50_us,
                ));
            }
        }
        Self::bar_chart(
            "S1: acquire + release latency, against the raw floor",
            &rows,
        )
    }

    pub(crate) fn handoff_chart(&self) -> String {
        let mut rows = Vec::new();
        for b in self.backends.iter().filter(|b| b.started) {
            if let Some(s) = &b.s3_handoff {
                rows.push((format!("{} handoff p50", b.backend), s.p50_us));
                rows.push((format!("{} handoff p99", b.backend), s.p99_us));
            }
            for p in b.peers.iter().filter(|p| p.scenario == S3) {
                rows.push((
                    format!("{} ({}) handoff p50", p.peer, b.backend),
                    p.summary.p50_us,
                ));
                rows.push((
                    format!("{} ({}) handoff p99", p.peer, b.backend),
                    p.summary.p99_us,
                ));
            }
        }
        Self::bar_chart(
            "S3: release-to-acquire handoff, 16 waiters on one key",
            &rows,
        )
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
