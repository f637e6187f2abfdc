//! The checkers: each reads a run's whole history and names every broken promise.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::history::{Event, Proc, What};
use crate::workload::{Kind, AT_LEAST, AT_MOST, SLOT};

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

/// One holder's hold of a key: from its grant to the last instant it acted as holder.
#[derive(Debug, Clone)]
struct Holding {
    proc: Proc,
    fence: u64,
    shared: bool,
    from: Duration,
    last: Duration,
    /// When the holder stopped acting as holder (released, lost, dropped, crashed).
    ended: Option<Duration>,
}

/// Every promise of `kind` checked over `events`, for each of `keys`; `quiet_from`
/// is when a leader must lead again, the faults having stopped.
pub(crate) fn check(
    kind: Kind,
    keys: &[String],
    events: &[Event],
    quiet_from: Duration,
) -> Vec<Violation> {
    let mut found = Vec::new();
    for key in keys {
        holds(kind, key, events, &mut found);
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
        if ran.len() > 1 {
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
fn holds(kind: Kind, key: &str, events: &[Event], found: &mut Vec<Violation>) {
    let mut holdings: Vec<Holding> = Vec::new();
    let mut open: BTreeMap<Proc, usize> = BTreeMap::new();
    for event in events {
        match &event.what {
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
                holdings.push(Holding {
                    proc: event.proc,
                    fence: *fence,
                    shared: *shared,
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
