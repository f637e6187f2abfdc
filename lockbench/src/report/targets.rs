//! The targets each backend is held to, each met or not, with the figures behind it.

use std::fmt::Write as _;

use super::{cpu_work, ms, BackendRun, Summary, S1, S2};

/// One target line.
type Target = (String, Option<bool>, String);

/// `ours`'s p50 at most `bound` times `theirs`'s.
fn p50_within(name: String, ours: &Summary, theirs: &Summary, bound: f64, them: &str) -> Target {
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
    let ratio = ours.per_sec / theirs.per_sec;
    let figures = format!(
        "{:.0}/s vs {:.0}/s = {ratio:.2}×{}",
        ours.per_sec,
        theirs.per_sec,
        cpu_work(ours, theirs, them)
    );
    (name, Some(ratio >= bound), figures)
}

impl BackendRun {
    /// The targets, each with whether it was met and the figures behind it.
    pub(crate) fn targets(&self) -> Vec<Target> {
        let mut out = Vec::new();
        if let (Some(s1), Some(floor)) = (&self.s1_client, self.cycle_floor()) {
            out.push(p50_within(
                "S1 cycle within 1.10× of the raw floor (p50)".into(),
                s1,
                floor,
                1.10,
                "the floor",
            ));
        }
        if let (Some(client), Some(primitives)) = (&self.s1_client, &self.s1_primitives) {
            out.push(p50_within(
                "S1 through the client within 1.05× of the backend's primitives (p50)".into(),
                client,
                primitives,
                1.05,
                "the primitives",
            ));
        }
        if let (Some(s2), Some(floor)) = (&self.s2_throughput, &self.s2_floor) {
            out.push(rate_at_least(
                "S2 throughput at least 0.9× the raw floor's at the same concurrency".into(),
                s2,
                floor,
                0.9,
                "the floor",
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
                out.push(p50_within(
                    format!("S1 cycle within 1.05× of {peer}'s (p50)"),
                    ours,
                    theirs,
                    1.05,
                    peer,
                ));
            }
            if let (Some(ours), Some(theirs)) = (&self.s2_throughput, find(S2)) {
                out.push(rate_at_least(
                    format!("S2 throughput at least {peer}'s"),
                    ours,
                    theirs,
                    1.0,
                    peer,
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
