//! The checkers: each reads a run's whole history and names every broken promise.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::history::{Event, Proc, What};
use crate::kind::{Kind, AT_LEAST, AT_MOST, SLOT, TTL};

/// A broken promise: which, when, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The promise's short name.
    pub promise: &'static str,
    /// When it broke, by the simulated clock.
    pub at: Duration,
    /// What was seen.
    pub detail: String,
}

/// The server's restarts without its state, and what the backend keeps across one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Restarts {
    /// Whether leases survive a restart (then a restart excuses nothing).
    pub(crate) leases_kept: bool,
    /// Whether fences keep increasing across a restart.
    pub(crate) fences_kept: bool,
    /// When the server restarted.
    pub(crate) at: Vec<Duration>,
}

impl Restarts {
    /// Whether a restart that lost leases came in `from..=to`.
    fn lost_leases_within(&self, from: Duration, to: Duration) -> bool {
        !self.leases_kept && self.at.iter().any(|r| from <= *r && *r <= to)
    }

    /// Whether a restart that may have lost fences came in `from..=to`.
    fn lost_fences_within(&self, from: Duration, to: Duration) -> bool {
        !self.fences_kept && self.at.iter().any(|r| from <= *r && *r <= to)
    }
}

/// One holder's hold of a key: from its grant to the last instant it acted as holder.
#[derive(Debug, Clone)]
struct Holding {
    proc: Proc,
    fence: u64,
    shared: bool,
    /// When the holder asked for it (its wait's start; where the history has no wait,
    /// a TTL before the grant, as no grant answered later than that is kept).
    asked: Duration,
    from: Duration,
    last: Duration,
    /// When the holder stopped acting as holder (released, lost, dropped, crashed).
    ended: Option<Duration>,
    /// Whether it resumed a term an earlier incarnation of its slot held, with the
    /// same fence.
    resumes: bool,
}

/// Every promise of `kind` checked over `events`, for each of `keys`; `quiet_from`
/// is when a leader must lead again, the faults having stopped.
///
/// Where the server restarted without its leases, a lease granted before the
/// restart (or by a request it applied just before) may be held by its holder until
/// its validity runs out, at most a TTL after the restart, while a holder granted
/// after it also acts: those overlaps, and the server's disagreeing with such a
/// holder, are what a backend that keeps no leases across a restart declares. Past a
/// TTL after the restart, a holder the server disagrees with was not told of its loss.
pub(crate) fn check(
    kind: Kind,
    keys: &[String],
    events: &[Event],
    quiet_from: Duration,
    restarts: &Restarts,
) -> Vec<Violation> {
    let mut found = Vec::new();
    for key in keys {
        holds(kind, key, events, restarts, &mut found);
    }
    let mut runs: BTreeMap<u64, Vec<(Proc, Duration)>> = BTreeMap::new();
    let mut led_after_quiet = false;
    for event in events {
        match &event.what {
            What::Working { .. } if event.at >= quiet_from => led_after_quiet = true,
            What::Waited {
                key,
                wait,
                took,
                outcome,
            } if outcome != "dropped" && took > wait => {
                found.push(Violation {
                    promise: "a wait ends by its deadline",
                    at: event.at,
                    detail: format!(
                        "{} waited {took:?} for {key}, given {wait:?} (answer {outcome})",
                        event.proc
                    ),
                });
            }
            What::Ran { slot } => runs.entry(*slot).or_default().push((event.proc, event.at)),
            What::Broken(detail) => found.push(Violation {
                promise: "a holder's belief matches the server",
                at: event.at,
                detail: format!("{}: {detail}", event.proc),
            }),
            What::Answered(detail) => found.push(Violation {
                promise: "every answer is one the contract allows",
                at: event.at,
                detail: detail.clone(),
            }),
            What::Unfair(detail) => found.push(Violation {
                promise: "first come, first served among live fair waiters",
                at: event.at,
                detail: detail.clone(),
            }),
            What::Costly(detail) => found.push(Violation {
                promise: "a holder's renewals are bounded per renewal interval",
                at: event.at,
                detail: detail.clone(),
            }),
            What::Unreported(detail) => found.push(Violation {
                promise: "a leader loop reports each term's end",
                at: event.at,
                detail: detail.clone(),
            }),
            What::NotResigned(detail) => found.push(Violation {
                promise: "a leader resigns on shutdown",
                at: event.at,
                detail: detail.clone(),
            }),
            What::Disagreed(detail)
                if !restarts.lost_leases_within(event.at.saturating_sub(TTL), event.at) =>
            {
                found.push(Violation {
                    promise: "a holder's belief matches the server",
                    at: event.at,
                    detail: format!("{}: {detail}", event.proc),
                });
            }
            _ => {}
        }
    }

    // One run per slot: the first run's grant holds the job at least `AT_LEAST`
    // from a time no earlier than the slot's start, so no second run of the slot may
    // begin before the slot's start plus `AT_LEAST`. (A process stalled longer than
    // that after its slot fired is later than the skew `run_once` asks for, and may
    // run the slot again; the lease it finds gone is the one promise it has.)
    for (slot, ran) in &runs {
        let slot_start = SLOT * u32::try_from(*slot).unwrap_or(u32::MAX);
        let ran: Vec<_> = ran
            .iter()
            .filter(|(_, at)| *at < slot_start + AT_LEAST)
            .collect();
        // A restart that lost the first run's lease frees the slot. That lease lasts
        // `AT_LEAST`, and its grant may be answered nearly that late (the server down
        // with the reply held, say), so it may have been granted, and lost, up to
        // `AT_LEAST` before its run began.
        if ran.len() > 1
            && !restarts.lost_leases_within(ran[0].1.saturating_sub(AT_LEAST), ran[1].1)
        {
            found.push(Violation {
                promise: "one run per slot",
                at: ran[1].1,
                detail: format!(
                    "slot {slot} (from {slot_start:?}) ran {} times: {}",
                    ran.len(),
                    ran.iter()
                        .map(|(p, at)| format!("{p} at {at:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }

    if kind == Kind::LeaderLoop && !led_after_quiet {
        found.push(Violation {
            promise: "a leader again once the faults stop",
            at: quiet_from,
            detail: "no process led after the faults stopped".to_owned(),
        });
    }
    found
}

/// The promises about the holds of `key`: who held it when, and with which fences.
fn holds(kind: Kind, key: &str, events: &[Event], restarts: &Restarts, found: &mut Vec<Violation>) {
    let mut holdings: Vec<Holding> = Vec::new();
    let mut open: BTreeMap<Proc, usize> = BTreeMap::new();
    let mut answered: BTreeMap<Proc, Duration> = BTreeMap::new();
    let mut resuming: BTreeMap<Proc, u64> = BTreeMap::new();
    for (index, event) in events.iter().enumerate() {
        match &event.what {
            What::Waited { took, outcome, .. } if outcome == "ok" => {
                answered.insert(event.proc, event.at - *took);
            }
            What::Resumed { key: k, fence } if k == key => {
                resuming.insert(event.proc, *fence);
            }
            What::Acquired {
                key: k,
                fence,
                shared,
            } if k == key => {
                if open.contains_key(&event.proc) {
                    found.push(Violation {
                        promise: "one hold per holder",
                        at: event.at,
                        detail: format!("{} was granted {k} again while it held it", event.proc),
                    });
                }
                open.insert(event.proc, holdings.len());
                // The wait that answered at this instant, if one did.
                let waited = events[..index]
                    .iter()
                    .rev()
                    .take_while(|e| e.at == event.at)
                    .any(|e| e.proc == event.proc && matches!(&e.what, What::Waited { .. }));
                let asked = answered
                    .get(&event.proc)
                    .copied()
                    .filter(|_| waited)
                    .unwrap_or(event.at.saturating_sub(TTL));
                holdings.push(Holding {
                    proc: event.proc,
                    fence: *fence,
                    shared: *shared,
                    asked,
                    resumes: resuming.remove(&event.proc) == Some(*fence),
                    from: event.at,
                    last: event.at,
                    ended: None,
                });
            }
            What::Working { key: k } if k == key => {
                if let Some(&i) = open.get(&event.proc) {
                    holdings[i].last = event.at;
                }
            }
            What::Ended { key: k, .. } if k == key => {
                if let Some(i) = open.remove(&event.proc) {
                    holdings[i].ended = Some(event.at);
                }
            }
            What::Crashed => {
                if let Some(i) = open.remove(&event.proc) {
                    holdings[i].ended = Some(event.at);
                }
            }
            _ => {}
        }
    }

    // A holder acts as holder from its grant to its last step, so two holds overlap
    // where one began inside the other. A hold alone overlaps none; shared holds
    // overlap only shared ones, at most the limit at once.
    let limit = kind.limit();
    for (i, h) in holdings.iter().enumerate() {
        let others: Vec<&Holding> = holdings
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && o.proc != h.proc && o.from <= h.from && h.from <= o.last)
            .map(|(_, o)| o)
            // A restart that lost the earlier lease (granted before it, or by a
            // request applied just before it) lets another in.
            .filter(|o| !restarts.lost_leases_within(o.from.saturating_sub(TTL), h.from))
            .collect();
        let alone_broken = !others.is_empty() && (!h.shared || others.iter().any(|o| !o.shared));
        let limit_broken = h.shared && others.len() as u64 >= limit;
        if alone_broken || limit_broken {
            found.push(Violation {
                promise: if limit_broken {
                    "at most the limit of permits at once"
                } else {
                    "one holder at a time"
                },
                at: h.from,
                detail: format!(
                    "{} was granted {key} (fence {}{}) while {} still acted as holder",
                    h.proc,
                    h.fence,
                    if h.shared { ", shared" } else { "" },
                    others
                        .iter()
                        .map(|o| format!(
                            "{} (fence {}{}, until {:?})",
                            o.proc,
                            o.fence,
                            if o.shared { ", shared" } else { "" },
                            o.last
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }

    // A bounded hold: no step as holder past the bound, counted from the grant's
    // reply (the hold's start here).
    if kind == Kind::Bounded {
        for h in holdings.iter().filter(|h| h.last > h.from + AT_MOST) {
            found.push(Violation {
                promise: "a hold ends by its bound",
                at: h.from + AT_MOST,
                detail: format!(
                    "{} acted as holder of {key} (fence {}) until {:?}, granted at {:?} \
                     for at most {AT_MOST:?}",
                    h.proc, h.fence, h.last, h.from
                ),
            });
        }
    }

    // Fences strictly increase from a hold to every hold that began after it ended
    // (the efficiency lock has none). Two shared holds may be granted in one order
    // and answered in the other, so they are not ordered by when they began.
    if kind.fenced() {
        for (i, h) in holdings.iter().enumerate() {
            if let Some(earlier) = holdings[..i]
                .iter()
                .filter(|o| !(o.shared && h.shared))
                .filter(|o| o.ended.is_some_and(|end| end < h.from) && o.fence >= h.fence)
                // A resumed term is the same term as its slot's earlier hold.
                .filter(|o| !(h.resumes && o.fence == h.fence && o.proc.slot == h.proc.slot))
                .filter(|o| !restarts.lost_fences_within(o.from, h.from))
                // A restart that lost the leases, after this hold was asked for and
                // before the earlier one was granted: this one's fence may have been
                // minted before the restart and answered after the earlier hold.
                .filter(|o| !restarts.lost_leases_within(h.asked, o.from))
                .max_by_key(|o| o.fence)
            {
                found.push(Violation {
                    promise: "fences strictly increase",
                    at: h.from,
                    detail: format!(
                        "{} was granted {key} with fence {} after {} had held it with fence {}",
                        h.proc, h.fence, earlier.proc, earlier.fence
                    ),
                });
            }
        }
    }
}
