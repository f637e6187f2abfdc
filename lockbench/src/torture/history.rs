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
    /// The server closes its clients' connections.
    KillConnections,
    /// The server restarted.
    Restart,
    /// The server killed, then started again.
    KillAndStart,
}

impl FaultKind {
    pub(crate) const ALL: [FaultKind; 6] = [
        FaultKind::Pause,
        FaultKind::Partition,
        FaultKind::Latency,
        FaultKind::KillConnections,
        FaultKind::Restart,
        FaultKind::KillAndStart,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Partition => "partition",
            FaultKind::Latency => "latency",
            FaultKind::KillConnections => "connections killed",
            FaultKind::Restart => "restart",
            FaultKind::KillAndStart => "kill and start",
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
    /// fault: what they say. Violations that start inside the fault's window are
    /// counted as declared, not hidden.
    pub(crate) declared: Option<String>,
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
    /// Acquisitions and releases.
    pub(crate) lock_ops: usize,
    pub(crate) faults: BTreeMap<String, usize>,
    pub(crate) stale_writes: Vec<String>,
    pub(crate) lost_updates_fenced: i64,
    pub(crate) fence_regressions: Vec<String>,
    pub(crate) unsignalled: Vec<String>,
    pub(crate) overlaps: Vec<String>,
    pub(crate) leases_left: Vec<String>,
    /// Violations inside a declared fault's window, by the fault's kind.
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
        if self.lost_updates_unfenced <= 0 {
            out.push(
                "the unfenced control lost no update: the workload never put a stale holder \
                 against a newer one, so the run proved nothing"
                    .into(),
            );
        }
        out
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

    /// The declared fault whose window holds `at`, if any.
    fn declared_at(&self, at: f64) -> Option<&Fault> {
        self.faults.iter().find(|fault| {
            fault.declared.is_some() && at >= fault.start && at <= fault.end + self.aftermath
        })
    }

    /// Counts a violation starting at `at`: declared, or pushed onto `list`.
    fn violation(
        &self,
        declared: &mut BTreeMap<String, usize>,
        list: &mut Vec<String>,
        at: f64,
        what: String,
    ) {
        match self.declared_at(at) {
            Some(fault) => *declared.entry(fault.kind.label().into()).or_default() += 1,
            None => list.push(what),
        }
    }

    /// A write the fenced register accepted although an operation under a larger
    /// fence had been accepted, and had answered, before the write was sent (the
    /// store is linearizable, so it had seen that fence); and a key whose stored fence
    /// ended below the largest fence the register accepted for it.
    fn stale_writes(&self, f: &mut Findings) {
        let keys = self.log.iter().map(|op| op.key + 1).max().unwrap_or(0);
        for key in 0..keys {
            let ops: Vec<&Logged> = self.log.iter().filter(|op| op.key == key).collect();
            let mut by_completed = ops.clone();
            by_completed.sort_by(|a, b| a.completed.total_cmp(&b.completed));
            let mut writes: Vec<&Logged> = ops.iter().copied().filter(|op| op.write).collect();
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
                        "key {key}: a write under fence {} sent at {:.3}s was accepted after fence {} was, at {:.3}s",
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
                    self.violation(&mut f.declared, &mut f.fence_regressions, hold.sent, what);
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

    fn unsignalled(&self, f: &mut Findings) {
        for hold in &self.holds {
            if let Some(past) = hold.unsignalled {
                let what = format!(
                    "key {}: client {} (fence {}) went on {:.1} ms past its validity without the loss signal, at {:.3} s",
                    hold.key, hold.client, hold.fence, past * 1e3, hold.ended
                );
                self.violation(&mut f.declared, &mut f.unsignalled, hold.ended, what);
            }
        }
    }

    /// Two guarded holders of one key that both believed they held it at once.
    fn overlaps(&self, f: &mut Findings) {
        for holds in self.by_key() {
            let mut guarded: Vec<&Hold> = holds
                .into_iter()
                .filter(|h| h.kind == HoldKind::Guarded)
                .collect();
            guarded.sort_by(|a, b| a.granted.total_cmp(&b.granted));
            let mut longest: Option<&Hold> = None;
            for hold in guarded {
                if let Some(earlier) = longest.filter(|e| e.ended > hold.granted) {
                    let what = format!(
                        "key {}: client {} (fence {}) held it from {:.3} s while client {} (fence {}) still did, until {:.3} s",
                        hold.key, hold.client, hold.fence, hold.granted, earlier.client, earlier.fence, earlier.ended
                    );
                    self.violation(&mut f.declared, &mut f.overlaps, hold.granted, what);
                }
                if longest.is_none_or(|e| hold.ended > e.ended) {
                    longest = Some(hold);
                }
            }
        }
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
    fn a_control_without_lost_updates_fails_the_run() {
        let mut h = clean();
        h.unfenced[0].value = 2;
        assert_eq!(h.check().failures().len(), 1);
    }

    #[test]
    fn violations_inside_a_declared_fault_are_counted_as_declared() {
        let mut h = clean();
        h.holds.push(hold(2, 3, 0.26, 0.27, 0.4));
        h.holds[1].ended = 0.5;
        h.faults.push(Fault {
            kind: FaultKind::Restart,
            start: 0.2,
            end: 0.22,
            declared: Some("leases are lost".into()),
        });
        let f = h.check();
        assert!(f.overlaps.is_empty());
        assert_eq!(f.declared.get("restart"), Some(&1));
        // The same overlap outside the window is a violation.
        h.faults[0].start = 5.0;
        h.faults[0].end = 5.0;
        assert_eq!(h.check().overlaps.len(), 1);
    }

    #[test]
    fn concurrent_grants_are_not_ordered() {
        // Sent before the other completed: either fence order is allowed.
        let mut h = clean();
        h.holds = vec![hold(0, 2, 0.0, 0.1, 0.11), hold(1, 1, 0.05, 0.2, 0.3)];
        assert!(h.check().fence_regressions.is_empty());
    }
}
