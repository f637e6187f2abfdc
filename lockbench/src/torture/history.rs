//! What a torture run records, and the checker that reads the whole history afterwards.
//!
//! Times are seconds since the run started, on the run's monotonic clock. The checker
//! trusts nothing the clients concluded: it works from the grants and the fenced
//! register's answers as the clients saw them, with when each was sent and answered,
//! the fault windows, and the registers' final state.

use std::collections::BTreeMap;

use serde::Serialize;

/// How a holder behaved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum HoldKind {
    /// Held through a `LockGuard`: renewed, stops at the loss signal.
    Guarded,
    /// Held through a `LockGuard` for several TTLs, renewed, writing all along; stops
    /// at the loss signal.
    Long,
    /// A bare lease, then a pause past its TTL without renewing (a stopped process).
    Paused,
}

/// One grant and what its holder did with it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Hold {
    pub(crate) client: usize,
    pub(crate) key: usize,
    pub(crate) kind: HoldKind,
    pub(crate) fence: u64,
    /// When the acquiring request was sent (the last attempt's, for a waiting guard:
    /// no earlier than the first).
    pub(crate) sent: f64,
    /// When the grant's reply arrived.
    pub(crate) granted: f64,
    /// When the holder stopped believing it held the lock: the first of its release
    /// being sent, its loss being signalled, and its validity running out.
    pub(crate) ended: f64,
    /// How far past its validity a guarded holder went on without the loss signal,
    /// in seconds; `None` when it never did.
    pub(crate) unsignalled: Option<f64>,
}

/// The kinds of fault a run injects, in the order it cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum FaultKind {
    /// The server paused (frozen) for longer than the TTL.
    Pause,
    /// One client cut off from the server, both ways, for longer than the TTL.
    Partition,
    /// Latency added on one client's link.
    Latency,
    /// One client's replies held for longer than the TTL, its requests still applied
    /// (the lost reply), then delivered.
    LostReplies,
    /// The server closes its clients' connections.
    KillConnections,
    /// The server restarted.
    Restart,
    /// The server killed, then started again.
    KillAndStart,
    /// A member of a replicated set cut off from the others (and from a Sentinel set's
    /// Sentinels), both ways, for longer than the TTL, while clients still reach it:
    /// a leader so isolated is in the minority.
    Isolate,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 8] = [
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Latency,
        FaultKind::LostReplies,
        FaultKind::KillConnections,
        FaultKind::Restart,
        FaultKind::KillAndStart,
        FaultKind::Isolate,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::Latency => "latency",
            FaultKind::LostReplies => "lost replies",
            FaultKind::KillConnections => "connections killed",
            FaultKind::Restart => "restart",
            FaultKind::KillAndStart => "kill and start",
            FaultKind::Isolate => "member isolated",
        }
    }
}

/// One fault, as injected.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) start: f64,
    pub(crate) end: f64,
    /// Where the backend's capabilities say it cannot keep the contract through this
    /// fault: what they say (for the report).
    pub(crate) declared: Option<String>,
    /// What those declarations excuse, each only for the violation it declares.
    pub(crate) excuses: Excuses,
    /// For a fault aimed by role, the member it hit, whether that member led, and
    /// who led next (for the report).
    pub(crate) hit: Option<String>,
}

/// What a fault's declarations excuse: each one violation, inside the fault's window,
/// and nothing else. A holder going on past its validity without the loss signal and
/// a stale write the fenced register accepted are never excused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Excuses {
    /// Leases may be lost (`leases_survive_restart` is false): excuses an overlap
    /// whose earlier holder was granted before the fault ended and whose later holder
    /// was granted inside the fault's window.
    pub(crate) leases_lost: bool,
    /// Fences may go back (`fence_durability` is `BestEffort`): excuses a fence
    /// regression whose request was sent inside the fault's window. Never on a
    /// backend declaring `Durable` or `FailsClosed`.
    pub(crate) fences_back: bool,
}

/// The violations a declaration can excuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Excusable {
    Overlap,
    FenceRegression,
}

/// One operation the fenced register accepted: a claiming read or a write, when it
/// was sent and when its answer came (seconds from the run's start).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Logged {
    pub(crate) key: usize,
    pub(crate) fence: u64,
    pub(crate) write: bool,
    pub(crate) invoked: f64,
    pub(crate) completed: f64,
}

/// A register's final state for one key.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Totals {
    /// The value: each accepted write stored one more than the value its holder read.
    pub(crate) value: i64,
    /// The writes the register accepted.
    pub(crate) writes: i64,
}

/// Everything a run recorded for one backend.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) holds: Vec<Hold>,
    pub(crate) faults: Vec<Fault>,
    pub(crate) log: Vec<Logged>,
    pub(crate) fenced: Vec<Totals>,
    /// The fence the fenced register keeps per key at the end.
    pub(crate) stored_fences: Vec<u64>,
    pub(crate) unfenced: Vec<Totals>,
    /// Keys still held on the server once every holder had finished and the TTL had
    /// passed: what was found.
    pub(crate) leases_left: Vec<String>,
    /// How long after a declared fault its effects may still show (a TTL or two).
    pub(crate) aftermath: f64,
}

/// The checker's findings: each safety list must be empty; the unfenced control's lost
/// updates must be above zero.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Findings {
    pub(crate) holds: usize,
    pub(crate) paused_holds: usize,
    /// Guarded holds that lasted several TTLs, renewed.
    pub(crate) long_holds: usize,
    /// Of those, the ones a fault's window fell inside.
    pub(crate) long_holds_faulted: usize,
    /// Acquisitions and releases.
    pub(crate) lock_ops: usize,
    pub(crate) faults: BTreeMap<String, usize>,
    pub(crate) stale_writes: Vec<String>,
    pub(crate) lost_updates_fenced: i64,
    pub(crate) fence_regressions: Vec<String>,
    pub(crate) unsignalled: Vec<String>,
    pub(crate) overlaps: Vec<String>,
    pub(crate) leases_left: Vec<String>,
    /// Violations a declared fault excused, by the fault, its window and the
    /// violation.
    pub(crate) declared: BTreeMap<String, usize>,
    pub(crate) lost_updates_unfenced: i64,
}

impl Findings {
    /// Each failed check, with the part of the history that broke it (the first few).
    pub(crate) fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut list = |what: &str, items: &[String]| {
            if !items.is_empty() {
                let shown: Vec<&str> = items.iter().take(5).map(String::as_str).collect();
                out.push(format!("{} {what}: {}", items.len(), shown.join("; ")));
            }
        };
        list("stale writes accepted", &self.stale_writes);
        list("fence regressions", &self.fence_regressions);
        list(
            "holders past their validity without the loss signal",
            &self.unsignalled,
        );
        list("overlapping holders", &self.overlaps);
        list("leases left after the run", &self.leases_left);
        if self.lost_updates_fenced != 0 {
            out.push(format!(
                "the fenced register lost {} updates",
                self.lost_updates_fenced
            ));
        }
        out
    }

    /// Whether the run proved nothing: the unfenced control lost no update, so the
    /// workload never put a stale holder against a newer one. The harness's outcome,
    /// not the backend's violation.
    pub(crate) fn proved_nothing(&self) -> Option<String> {
        (self.lost_updates_unfenced <= 0).then(|| {
            "the unfenced control lost no update: the workload never put a stale holder \
             against a newer one, so the run proved nothing"
                .into()
        })
    }
}

impl History {
    /// Reads the whole history.
    pub(crate) fn check(&self) -> Findings {
        let mut f = Findings {
            holds: self.holds.len(),
            paused_holds: self
                .holds
                .iter()
                .filter(|h| h.kind == HoldKind::Paused)
                .count(),
            lock_ops: self.holds.len() * 2,
            leases_left: self.leases_left.clone(),
            ..Findings::default()
        };
        for hold in self.holds.iter().filter(|h| h.kind == HoldKind::Long) {
            f.long_holds += 1;
            let inside = |fault: &&Fault| fault.start < hold.ended && fault.end > hold.granted;
            if self.faults.iter().any(|fault| inside(&fault)) {
                f.long_holds_faulted += 1;
            }
        }
        for fault in &self.faults {
            *f.faults.entry(fault.kind.label().into()).or_default() += 1;
        }
        self.stale_writes(&mut f);
        self.fence_regressions(&mut f);
        self.unsignalled(&mut f);
        self.overlaps(&mut f);
        f.lost_updates_fenced = self.fenced.iter().map(|t| t.writes - t.value).sum();
        f.lost_updates_unfenced = self.unfenced.iter().map(|t| t.writes - t.value).sum();
        f
    }

    /// The fault that excuses `what`, if one does: one whose declarations cover
    /// that violation, with `at` inside its window (from its start to its end plus
    /// the aftermath), and for an overlap an earlier holder granted before it ended.
    fn excusing(&self, what: Excusable, at: f64, earlier_granted: f64) -> Option<&Fault> {
        self.faults.iter().find(|fault| {
            let covered = match what {
                Excusable::Overlap => fault.excuses.leases_lost && earlier_granted <= fault.end,
                Excusable::FenceRegression => fault.excuses.fences_back,
            };
            covered && at >= fault.start && at <= fault.end + self.aftermath
        })
    }

    /// Counts a violation starting at `at`: excused by a declared fault, or pushed
    /// onto `list`.
    fn violation(
        &self,
        declared: &mut BTreeMap<String, usize>,
        list: &mut Vec<String>,
        (what, at, earlier_granted): (Excusable, f64, f64),
        said: String,
    ) {
        match self.excusing(what, at, earlier_granted) {
            Some(fault) => {
                let name = match what {
                    Excusable::Overlap => "overlap",
                    Excusable::FenceRegression => "fence regression",
                };
                let window = format!(
                    "{} {name} in its window {:.1}–{:.1} s",
                    fault.kind.label(),
                    fault.start,
                    fault.end + self.aftermath
                );
                *declared.entry(window).or_default() += 1;
            }
            None => list.push(said),
        }
    }

    /// A write or claiming read the fenced register accepted although an operation
    /// under a larger fence had been accepted, and had answered, before it was sent
    /// (the store is linearizable, so it had seen that fence); and a key whose stored
    /// fence ended below the largest fence the register accepted for it.
    fn stale_writes(&self, f: &mut Findings) {
        let keys = self.log.iter().map(|op| op.key + 1).max().unwrap_or(0);
        for key in 0..keys {
            let ops: Vec<&Logged> = self.log.iter().filter(|op| op.key == key).collect();
            let mut by_completed = ops.clone();
            by_completed.sort_by(|a, b| a.completed.total_cmp(&b.completed));
            let mut writes: Vec<&Logged> = ops.clone();
            writes.sort_by(|a, b| a.invoked.total_cmp(&b.invoked));
            let (mut done, mut highest) = (0, None::<&Logged>);
            for write in writes {
                while done < by_completed.len() && by_completed[done].completed < write.invoked {
                    let earlier = by_completed[done];
                    if highest.is_none_or(|h| earlier.fence > h.fence) {
                        highest = Some(earlier);
                    }
                    done += 1;
                }
                if let Some(seen) = highest.filter(|h| write.fence < h.fence) {
                    f.stale_writes.push(format!(
                        "key {key}: a {} under fence {} sent at {:.3}s was accepted after fence {} was, at {:.3}s",
                        if write.write { "write" } else { "claiming read" },
                        write.fence, write.invoked, seen.fence, seen.completed
                    ));
                }
            }
            let accepted = ops.iter().map(|op| op.fence).max().unwrap_or(0);
            let stored = self.stored_fences.get(key).copied().unwrap_or(0);
            if stored < accepted {
                f.stale_writes.push(format!(
                    "key {key}: the register keeps fence {stored}, below fence {accepted} it accepted"
                ));
            }
        }
    }

    /// Per key, a grant whose fence is not above that of every grant that completed
    /// before its request was sent (fences are never reused either).
    fn fence_regressions(&self, f: &mut Findings) {
        for holds in self.by_key() {
            let mut by_granted = holds.clone();
            by_granted.sort_by(|a, b| a.granted.total_cmp(&b.granted));
            let mut by_sent = holds.clone();
            by_sent.sort_by(|a, b| a.sent.total_cmp(&b.sent));
            let mut done = 0;
            let mut highest: Option<&Hold> = None;
            for hold in by_sent {
                while done < by_granted.len() && by_granted[done].granted < hold.sent {
                    let earlier = by_granted[done];
                    if highest.is_none_or(|h| earlier.fence > h.fence) {
                        highest = Some(earlier);
                    }
                    done += 1;
                }
                if let Some(earlier) = highest.filter(|h| hold.fence <= h.fence) {
                    let what = format!(
                        "key {}: client {} was granted fence {} (sent at {:.3} s) after client {}'s grant of fence {} had completed at {:.3} s",
                        hold.key, hold.client, hold.fence, hold.sent, earlier.client, earlier.fence, earlier.granted
                    );
                    self.violation(
                        &mut f.declared,
                        &mut f.fence_regressions,
                        (Excusable::FenceRegression, hold.sent, earlier.granted),
                        what,
                    );
                }
            }
            let mut fences: Vec<u64> = holds.iter().map(|h| h.fence).collect();
            fences.sort_unstable();
            for pair in fences.windows(2).filter(|p| p[0] == p[1]) {
                f.fence_regressions.push(format!(
                    "key {}: fence {} was granted twice",
                    holds[0].key, pair[0]
                ));
            }
        }
    }

    /// A holder that went on past its validity without the loss signal: never
    /// excused, whatever the capabilities declare.
    fn unsignalled(&self, f: &mut Findings) {
        for hold in &self.holds {
            if let Some(past) = hold.unsignalled {
                f.unsignalled.push(format!(
                    "key {}: client {} (fence {}) went on {:.1} ms past its validity without the loss signal, at {:.3} s",
                    hold.key, hold.client, hold.fence, past * 1e3, hold.ended
                ));
            }
        }
    }

    /// Two holders of one key that both believed they held it at once: guarded holds
    /// until they released or were told, paused ones until their validity ran out.
    fn overlaps(&self, f: &mut Findings) {
        for holds in self.by_key() {
            let mut guarded = holds;
            guarded.sort_by(|a, b| a.granted.total_cmp(&b.granted));
            let mut longest: Option<&Hold> = None;
            for hold in guarded {
                if let Some(earlier) = longest.filter(|e| e.ended > hold.granted) {
                    let what = format!(
                        "key {}: client {} (fence {}) held it from {:.3} s while client {} (fence {}) still did, until {:.3} s",
                        hold.key, hold.client, hold.fence, hold.granted, earlier.client, earlier.fence, earlier.ended
                    );
                    self.violation(
                        &mut f.declared,
                        &mut f.overlaps,
                        (Excusable::Overlap, hold.granted, earlier.granted),
                        what,
                    );
                }
                if longest.is_none_or(|e| hold.ended > e.ended) {
                    longest = Some(hold);
                }
            }
        }
    }

    /// Holders of one name's permits (one permit each) that believed they held more
    /// at once than `limit`: each grant that found `limit` others still holding, with
    /// the excuses a declared fault allows (as an overlap). Also the most held at once.
    pub(crate) fn over_limit(&self, limit: usize) -> (Vec<String>, BTreeMap<String, usize>, usize) {
        let mut over = Vec::new();
        let mut declared = BTreeMap::new();
        let mut holds: Vec<&Hold> = self.holds.iter().collect();
        holds.sort_by(|a, b| a.granted.total_cmp(&b.granted));
        let mut most = 0;
        for (i, hold) in holds.iter().enumerate() {
            let along: Vec<&&Hold> = holds[..i]
                .iter()
                .filter(|earlier| earlier.ended > hold.granted)
                .collect();
            most = most.max(along.len() + 1);
            if along.len() >= limit {
                // A restart that lost leases excuses the grant where enough of the
                // others held permits the restart lost (granted before the fault
                // ended) that fewer than `limit` remain on the server: the grant time
                // of the earliest `along.len() - limit + 1` must fall before it.
                let mut granted: Vec<f64> = along.iter().map(|h| h.granted).collect();
                granted.sort_by(f64::total_cmp);
                let deciding = granted[along.len() - limit];
                let others: Vec<String> = along
                    .iter()
                    .map(|h| {
                        format!(
                            "client {} (fence {}) until {:.3} s",
                            h.client, h.fence, h.ended
                        )
                    })
                    .collect();
                let what = format!(
                    "client {} (fence {}) held a permit from {:.3} s while {} of {limit} still did: {}",
                    hold.client,
                    hold.fence,
                    hold.granted,
                    along.len(),
                    others.join(", ")
                );
                self.violation(
                    &mut declared,
                    &mut over,
                    (Excusable::Overlap, hold.granted, deciding),
                    what,
                );
            }
        }
        (over, declared, most)
    }

    fn by_key(&self) -> Vec<Vec<&Hold>> {
        let mut keys: BTreeMap<usize, Vec<&Hold>> = BTreeMap::new();
        for hold in &self.holds {
            keys.entry(hold.key).or_default().push(hold);
        }
        keys.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(client: usize, fence: u64, sent: f64, granted: f64, ended: f64) -> Hold {
        Hold {
            client,
            key: 0,
            kind: HoldKind::Guarded,
            fence,
            sent,
            granted,
            ended,
            unsignalled: None,
        }
    }

    fn logged(fence: u64, write: bool, invoked: f64, completed: f64) -> Logged {
        Logged {
            key: 0,
            fence,
            write,
            invoked,
            completed,
        }
    }

    /// A clean history: holds one after another, fences up, registers whole.
    fn clean() -> History {
        History {
            holds: vec![hold(0, 1, 0.0, 0.1, 0.2), hold(1, 2, 0.15, 0.25, 0.3)],
            log: vec![
                logged(1, false, 0.10, 0.11),
                logged(1, true, 0.12, 0.13),
                logged(2, true, 0.26, 0.27),
            ],
            stored_fences: vec![2],
            fenced: vec![Totals {
                value: 2,
                writes: 2,
            }],
            unfenced: vec![Totals {
                value: 1,
                writes: 2,
            }],
            aftermath: 1.0,
            ..History::default()
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let f = clean().check();
        assert!(f.failures().is_empty(), "{:?}", f.failures());
        assert_eq!(f.lock_ops, 4);
        assert_eq!(f.lost_updates_unfenced, 1);
    }

    #[test]
    fn permits_over_their_limit_are_found_and_the_most_at_once_counted() {
        let mut h = clean();
        h.holds = vec![
            hold(0, 1, 0.0, 0.01, 0.5),
            hold(1, 2, 0.0, 0.02, 0.3),
            // A third while the first two hold: over a limit of two.
            hold(2, 3, 0.1, 0.2, 0.25),
            // After the second ended: two at once again.
            hold(2, 4, 0.3, 0.35, 0.4),
        ];
        let (over, declared, most) = h.over_limit(2);
        assert_eq!(most, 3);
        assert!(declared.is_empty());
        assert_eq!(over.len(), 1, "{over:?}");
        assert!(
            over[0].contains("client 2 (fence 3) held a permit from 0.200 s while 2 of 2"),
            "{over:?}"
        );
        let (over, _, most) = h.over_limit(3);
        assert!(over.is_empty());
        assert_eq!(most, 3);
    }

    #[test]
    fn each_violation_is_found_and_named() {
        let mut h = clean();
        // A grant sent after fence 2 completed, with a lower fence; and overlapping.
        h.holds.push(hold(2, 2, 0.26, 0.27, 0.4));
        h.log.push(logged(1, true, 0.28, 0.29));
        h.holds[0].unsignalled = Some(0.05);
        h.fenced[0].writes += 1;
        h.leases_left.push("key 0 held with fence 9".into());
        let f = h.check();
        assert_eq!(f.stale_writes.len(), 1, "{:?}", f.stale_writes);
        assert!(
            f.stale_writes[0].contains("under fence 1 sent at 0.280s was accepted after fence 2"),
            "{:?}",
            f.stale_writes
        );
        // Once for the order, once for the reuse.
        assert_eq!(f.fence_regressions.len(), 2, "{:?}", f.fence_regressions);
        assert!(f.fence_regressions[0].contains("client 2 was granted fence 2"));
        assert_eq!(f.overlaps.len(), 1, "{:?}", f.overlaps);
        assert!(f.overlaps[0].contains("client 2"));
        assert_eq!(f.unsignalled.len(), 1);
        assert_eq!(f.lost_updates_fenced, 1);
        assert_eq!(f.failures().len(), 6, "{:?}", f.failures());
    }

    #[test]
    fn overlapping_register_operations_are_not_ordered_but_a_lowered_fence_is_found() {
        let mut h = clean();
        // Sent before fence 2's write answered: the store may order it first.
        h.log.push(logged(1, true, 0.265, 0.275));
        h.fenced[0].writes += 1;
        h.fenced[0].value += 1;
        assert!(h.check().stale_writes.is_empty());
        h.stored_fences[0] = 1;
        let f = h.check();
        assert_eq!(f.stale_writes.len(), 1, "{:?}", f.stale_writes);
        assert!(f.stale_writes[0].contains("keeps fence 1, below fence 2"));
    }

    #[test]
    fn a_control_without_lost_updates_proves_nothing() {
        let mut h = clean();
        assert_eq!(h.check().proved_nothing(), None);
        h.unfenced[0].value = 2;
        let f = h.check();
        assert!(f.failures().is_empty(), "{:?}", f.failures());
        assert!(f
            .proved_nothing()
            .is_some_and(|said| said.contains("lost no update")));
    }

    fn restart(start: f64, end: f64, excuses: Excuses) -> Fault {
        Fault {
            kind: FaultKind::Restart,
            start,
            end,
            declared: Some("declared".into()),
            excuses,
            hit: None,
        }
    }

    const LEASES_LOST: Excuses = Excuses {
        leases_lost: true,
        fences_back: false,
    };

    const FENCES_BACK: Excuses = Excuses {
        leases_lost: false,
        fences_back: true,
    };

    #[test]
    fn an_overlap_is_excused_only_by_declared_lease_loss_inside_its_window() {
        let mut h = clean();
        h.holds.push(hold(2, 3, 0.26, 0.27, 0.4));
        h.holds[1].ended = 0.5;
        // Client 1 was granted at 0.25, before the restart ended; client 2 at 0.27.
        h.faults.push(restart(0.245, 0.26, LEASES_LOST));
        let f = h.check();
        assert!(f.overlaps.is_empty(), "{:?}", f.overlaps);
        assert_eq!(
            f.declared.get("restart overlap in its window 0.2–1.3 s"),
            Some(&1),
            "{:?}",
            f.declared
        );
        // Declared fences going back do not excuse an overlap.
        h.faults[0].excuses = FENCES_BACK;
        assert_eq!(h.check().overlaps.len(), 1);
        // Nor does lease loss when the earlier holder was granted after the fault
        // ended (its lease was never on the restarted server's lost data).
        h.faults[0] = restart(0.2, 0.22, LEASES_LOST);
        assert_eq!(h.check().overlaps.len(), 1);
        // Nor outside the window.
        h.faults[0] = restart(5.0, 5.0, LEASES_LOST);
        assert_eq!(h.check().overlaps.len(), 1);
    }

    #[test]
    fn permits_over_the_limit_are_excused_where_a_restart_lost_enough_of_them() {
        let mut h = clean();
        h.holds = vec![
            // Granted before the restart (which ends at 0.3): its permit was lost.
            hold(0, 1, 0.0, 0.1, 1.0),
            // Granted after it: on the restarted server.
            hold(1, 2, 0.35, 0.4, 1.0),
            // The limit of two is met on the server: one of the others was lost.
            hold(2, 3, 0.45, 0.5, 1.0),
        ];
        h.faults.push(restart(0.2, 0.3, LEASES_LOST));
        let (over, declared, _) = h.over_limit(2);
        assert!(over.is_empty(), "{over:?}");
        assert_eq!(declared.values().sum::<usize>(), 1, "{declared:?}");
        // A fourth: the server now has three of its own, over the limit.
        h.holds.push(hold(3, 4, 0.55, 0.6, 1.0));
        let (over, _, _) = h.over_limit(2);
        assert_eq!(over.len(), 1, "{over:?}");
        assert!(over[0].contains("client 3 (fence 4)"), "{over:?}");
    }

    #[test]
    fn a_fence_regression_is_excused_only_where_fences_are_declared_best_effort() {
        let mut h = clean();
        // Sent after fence 2 was granted, given fence 1 again... as fence 0.5 cannot
        // be, a lower fence: 1 is taken, so the regression is its own fence 1 reused.
        h.holds.push(hold(2, 1, 0.4, 0.45, 0.5));
        h.faults.push(restart(0.35, 0.36, LEASES_LOST));
        let f = h.check();
        // A backend declaring Durable or FailsClosed: never excused, whatever else
        // it declares (the order, and the reuse).
        assert_eq!(f.fence_regressions.len(), 2, "{:?}", f.fence_regressions);
        assert!(f.declared.is_empty(), "{:?}", f.declared);
        h.faults[0].excuses = FENCES_BACK;
        let f = h.check();
        assert_eq!(
            f.declared
                .get("restart fence regression in its window 0.3–1.4 s"),
            Some(&1),
            "{:?}",
            f.declared
        );
        // The reuse of a fence is counted apart from the order, and is never excused.
        assert_eq!(f.fence_regressions.len(), 1, "{:?}", f.fence_regressions);
        assert!(f.fence_regressions[0].contains("granted twice"));
    }

    #[test]
    fn an_unsignalled_holder_is_never_excused() {
        let mut h = clean();
        h.holds[0].unsignalled = Some(0.01);
        h.faults.push(restart(
            0.0,
            1.0,
            Excuses {
                leases_lost: true,
                fences_back: true,
            },
        ));
        let f = h.check();
        assert_eq!(f.unsignalled.len(), 1);
        assert!(f.declared.is_empty());
    }

    /// Three keys, guarded, long and paused holds interleaved: clean, then each check
    /// broken on one key at a time, and found on that key alone.
    fn several_keys() -> History {
        let on = |key, kind, mut h: Hold| {
            h.key = key;
            h.kind = kind;
            h
        };
        let logged_on = |key, mut op: Logged| {
            op.key = key;
            op
        };
        History {
            holds: vec![
                on(0, HoldKind::Guarded, hold(0, 1, 0.0, 0.1, 0.2)),
                on(1, HoldKind::Long, hold(1, 1, 0.0, 0.1, 3.0)),
                on(2, HoldKind::Paused, hold(2, 7, 0.0, 0.1, 1.1)),
                on(0, HoldKind::Paused, hold(3, 2, 0.3, 0.35, 1.35)),
                on(1, HoldKind::Guarded, hold(4, 2, 2.0, 3.1, 3.2)),
                on(2, HoldKind::Guarded, hold(5, 8, 1.0, 1.2, 1.3)),
            ],
            faults: vec![Fault {
                kind: FaultKind::Pause,
                start: 1.0,
                end: 2.5,
                declared: None,
                excuses: Excuses::default(),
                hit: None,
            }],
            log: vec![
                logged_on(0, logged(1, false, 0.11, 0.12)),
                logged_on(0, logged(1, true, 0.13, 0.14)),
                logged_on(1, logged(1, true, 0.5, 0.51)),
                logged_on(1, logged(1, true, 2.9, 2.91)),
                logged_on(2, logged(8, true, 1.21, 1.22)),
            ],
            stored_fences: vec![1, 1, 8],
            fenced: vec![Totals::default(); 3],
            unfenced: vec![Totals {
                value: 1,
                writes: 2,
            }],
            aftermath: 2.0,
            ..History::default()
        }
    }

    #[test]
    fn several_keys_and_every_kind_of_hold_pass_when_clean() {
        let f = several_keys().check();
        assert!(f.failures().is_empty(), "{:?}", f.failures());
        assert_eq!(
            (f.paused_holds, f.long_holds, f.long_holds_faulted),
            (2, 1, 1)
        );
    }

    #[test]
    fn a_paused_holder_overlapping_within_its_validity_is_found() {
        let mut h = several_keys();
        // Key 0: granted at 1.0, inside the paused holder's validity (to 1.35).
        h.holds.push(Hold {
            key: 0,
            ..hold(6, 3, 0.9, 1.0, 1.1)
        });
        let f = h.check();
        assert_eq!(f.overlaps.len(), 1, "{:?}", f.overlaps);
        assert!(f.overlaps[0].starts_with("key 0: client 6 (fence 3)"));
        assert_eq!(f.failures().len(), 1, "{:?}", f.failures());
    }

    #[test]
    fn a_long_holder_overlapped_and_a_regression_on_another_key_are_found_there() {
        let mut h = several_keys();
        // Key 1: granted at 2.0, while the long holder held it (to 3.0).
        h.holds.push(Hold {
            key: 1,
            ..hold(6, 3, 1.9, 2.0, 2.05)
        });
        // Key 2: sent after fence 8's grant completed, granted fence 7 again.
        h.holds.push(Hold {
            key: 2,
            ..hold(7, 6, 1.25, 1.31, 1.32)
        });
        let f = h.check();
        assert_eq!(f.overlaps.len(), 1, "{:?}", f.overlaps);
        assert!(f.overlaps[0].starts_with("key 1: client 6"));
        assert_eq!(f.fence_regressions.len(), 1, "{:?}", f.fence_regressions);
        assert!(f.fence_regressions[0].starts_with("key 2: client 7 was granted fence 6"));
    }

    #[test]
    fn a_stale_claiming_read_is_found_as_a_stale_write_is() {
        let mut h = several_keys();
        // Key 2: a claim under fence 7, sent after fence 8's write was accepted.
        h.log.push(Logged {
            key: 2,
            ..logged(7, false, 1.3, 1.31)
        });
        let f = h.check();
        assert_eq!(f.stale_writes.len(), 1, "{:?}", f.stale_writes);
        assert!(
            f.stale_writes[0].contains("key 2: a claiming read under fence 7"),
            "{:?}",
            f.stale_writes
        );
    }

    #[test]
    fn the_last_attempt_s_send_time_orders_grants() {
        // A waiting guard whose first attempt went out before fence 2's grant, and
        // whose last after it: granted fence 1 again is a regression only by the
        // last attempt.
        let mut h = clean();
        h.holds.push(hold(2, 1, 0.05, 0.4, 0.45));
        let f = h.check();
        assert_eq!(
            f.fence_regressions.len(),
            1,
            "reuse only: {:?}",
            f.fence_regressions
        );
        h.holds[2].sent = 0.3;
        assert_eq!(h.check().fence_regressions.len(), 2);
    }

    #[test]
    fn concurrent_grants_are_not_ordered() {
        // Sent before the other completed: either fence order is allowed.
        let mut h = clean();
        h.holds = vec![hold(0, 2, 0.0, 0.1, 0.11), hold(1, 1, 0.05, 0.2, 0.3)];
        assert!(h.check().fence_regressions.is_empty());
    }
}
