//! The checkers: each reads a run's whole history and names every broken promise.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::history::{Event, Proc, What};
use crate::workload::{Kind, AT_LEAST, SLOT};

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
    from: Duration,
    last: Duration,
    open: bool,
}

/// Every promise of `kind` checked over `events`; `quiet_from` is when the faults
/// stopped (a leader must be elected again after it).
pub(crate) fn check(
    kind: Kind,
    key: &str,
    events: &[Event],
    quiet_from: Duration,
) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut holdings: Vec<Holding> = Vec::new();
    let mut open: BTreeMap<Proc, usize> = BTreeMap::new();
    let mut runs: BTreeMap<u64, Vec<(Proc, Duration)>> = BTreeMap::new();
    let mut led_after_quiet = false;
    for event in events {
        match &event.what {
            What::Acquired { key: k, fence } if k == key => {
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
                    from: event.at,
                    last: event.at,
                    open: true,
                });
            }
            What::Working { key: k } if k == key => {
                if let Some(&i) = open.get(&event.proc) {
                    holdings[i].last = event.at;
                }
                if kind == Kind::LeaderLoop && event.at >= quiet_from {
                    led_after_quiet = true;
                }
            }
            What::Ended { key: k, .. } if k == key => {
                if let Some(i) = open.remove(&event.proc) {
                    holdings[i].open = false;
                }
            }
            What::Crashed => {
                if let Some(i) = open.remove(&event.proc) {
                    holdings[i].open = false;
                }
            }
            What::Waited {
                key: k,
                wait,
                took,
                outcome,
            } if k == key && outcome != "dropped" && took > wait => {
                found.push(Violation {
                    promise: "a wait ends by its deadline",
                    at: event.at,
                    detail: format!(
                        "{} waited {took:?} for {k}, given {wait:?} (answer {outcome})",
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

    // At most `limit` holders act as holders at once: a holder acts from its grant
    // to its last step, so two holds overlap where one began inside the other.
    let limit = kind.limit();
    for (i, h) in holdings.iter().enumerate() {
        let others: Vec<&Holding> = holdings
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && o.proc != h.proc && o.from <= h.from && h.from <= o.last)
            .map(|(_, o)| o)
            .collect();
        if others.len() >= limit {
            found.push(Violation {
                promise: if limit == 1 {
                    "one holder at a time"
                } else {
                    "at most the limit of permits at once"
                },
                at: h.from,
                detail: format!(
                    "{} was granted {key} (fence {}) while {} still acted as holder",
                    h.proc,
                    h.fence,
                    others
                        .iter()
                        .map(|o| format!("{} (fence {}, until {:?})", o.proc, o.fence, o.last))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }

    // Fences strictly increase from one grant to the next (a semaphore's permits
    // share theirs among concurrent holders, so only exclusive kinds).
    if kind.fenced() && limit == 1 {
        for pair in holdings.windows(2) {
            if pair[1].fence <= pair[0].fence {
                found.push(Violation {
                    promise: "fences strictly increase",
                    at: pair[1].from,
                    detail: format!(
                        "{} was granted {key} with fence {} after {} had fence {}",
                        pair[1].proc, pair[1].fence, pair[0].proc, pair[0].fence
                    ),
                });
            }
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
                    "slot {slot} (from {:?}) ran {} times: {}",
                    SLOT * u32::try_from(*slot).unwrap_or(u32::MAX),
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
