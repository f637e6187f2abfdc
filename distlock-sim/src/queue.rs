//! The fair queues as the server's applied steps say they must be: a model of each
//! key's queue of waiters, kept from every fair step, `leave_queue` and release the
//! server applied, against which each grant to a fair waiter is checked (contract
//! point 10: first come, first served among the live waiters).
//!
//! A waiter's place lasts its `place` past its last fair step. The model counts a
//! waiter live only where the server must still hold its place: from the start of its
//! last step, less the expiry slack the backend declares; and dead only once the
//! server may have let it go: a place rounded up as a TTL is, plus that slack. A grant
//! to a waiter while one queued before it is live for certain breaks the promise; in
//! between, either answer is allowed.

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_core::backend::{Capabilities, OwnerToken};
use distlock_core::LockKey;
use tokio::time::Instant;

/// One waiter's place, as the model keeps it.
#[derive(Debug, Clone)]
struct Place {
    owner: OwnerToken,
    /// The process whose link sent its steps.
    proc: usize,
    /// When its first step began, and when it was answered: a waiter queued before
    /// another is one whose first step was answered before the other's began.
    since: Instant,
    queued: Instant,
    /// When its last step began, and the place that step asked for.
    last: Instant,
    place: Duration,
}

/// Each key's queue and the owner its last grant (fair or handed over) went to.
#[derive(Debug, Default)]
pub(crate) struct Queues {
    keys: BTreeMap<LockKey, Queue>,
}

#[derive(Debug, Default)]
struct Queue {
    places: Vec<Place>,
    /// Who may hold the key by its last grant: one owner, or, after a handoff to a
    /// process with several places live (old waits of its own whose leaving has not
    /// landed), each of them, as the model cannot tell which the server chose.
    holder: Vec<OwnerToken>,
}

/// The server's own timers, as its capabilities declare them.
#[derive(Debug, Clone)]
pub(crate) struct Timers {
    caps: Capabilities,
}

impl Timers {
    pub(crate) fn new(caps: &Capabilities) -> Self {
        Timers { caps: caps.clone() }
    }

    /// Whether the server must still hold `p`'s place throughout a step that ended at
    /// `at`.
    fn surely_live(&self, p: &Place, at: Instant) -> bool {
        at + self.caps.clock_drift.allowance(p.place) < p.last + p.place
    }

    /// Whether the server may have let `p`'s place go before a step began at `at`.
    fn maybe_gone(&self, p: &Place, at: Instant) -> bool {
        let kept = self.caps.ttl_at_least(p.place) + self.caps.clock_drift.allowance(p.place);
        at > p.last + kept
    }
}

impl Queues {
    /// Forgets every queue: the server restarted without its state.
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
    }

    /// A fair step by `owner` (sent by `proc`, asking for `place`) that the server
    /// began at `began` and answered at `answered`, granted or not: what is wrong with
    /// the grant, if anything.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn stepped(
        &mut self,
        timers: &Timers,
        key: &LockKey,
        owner: OwnerToken,
        proc: usize,
        place: Duration,
        (began, answered): (Instant, Instant),
        granted: bool,
    ) -> Option<String> {
        let queue = self.keys.entry(key.clone()).or_default();
        queue
            .places
            .retain(|p| p.owner == owner || !timers.maybe_gone(p, began));
        match queue.places.iter_mut().find(|p| p.owner == owner) {
            Some(p) => {
                p.last = began;
                p.place = place;
            }
            None => queue.places.push(Place {
                owner,
                proc,
                since: began,
                queued: answered,
                last: began,
                place,
            }),
        }
        if !granted {
            return None;
        }
        let me = queue.places.iter().position(|p| p.owner == owner)?;
        let mine = queue.places.remove(me);
        // A grant again to the key's holder (a retry whose reply was lost, or the
        // step by which a waiter handed the key finds it its own) is not a new turn.
        if queue.holder.contains(&owner) {
            return None;
        }
        queue.holder = vec![owner];
        let ahead = queue
            .places
            .iter()
            .find(|p| p.queued < mine.since && timers.surely_live(p, answered))?;
        Some(format!(
            "a fair step of p{} was granted the key while p{}, queued before it, still had \
             its place (for {:?} more)",
            mine.proc,
            ahead.proc,
            (ahead.last + ahead.place).saturating_duration_since(answered)
        ))
    }

    /// `owner` left `key`'s queue (and gave back a grant handed to it).
    pub(crate) fn left(&mut self, key: &LockKey, owner: OwnerToken) {
        if let Some(queue) = self.keys.get_mut(key) {
            queue.places.retain(|p| p.owner != owner);
            queue.holder.retain(|h| *h != owner);
        }
    }

    /// `owner` released `key` in a step the server began at `began` and answered at
    /// `answered`, after which the key was held by process `to` (a handoff), or by
    /// nobody: what is wrong with the handoff, if anything. A handoff goes to the
    /// first waiter whose place is live; waiters the model cannot tell live or gone
    /// may each be that waiter.
    pub(crate) fn released(
        &mut self,
        timers: &Timers,
        key: &LockKey,
        owner: OwnerToken,
        (began, answered): (Instant, Instant),
        to: Option<usize>,
    ) -> Option<String> {
        let queue = self.keys.get_mut(key)?;
        if queue.holder.contains(&owner) {
            queue.holder.clear();
        }
        let to = to?;
        queue.places.retain(|p| !timers.maybe_gone(p, began));
        let first_live = queue
            .places
            .iter()
            .position(|p| timers.surely_live(p, answered))
            .unwrap_or(queue.places.len().saturating_sub(1));
        let candidates = queue.places.len().min(first_live + 1);
        let handed: Vec<OwnerToken> = queue.places[..candidates]
            .iter()
            .filter(|p| p.proc == to)
            .map(|p| p.owner)
            .collect();
        let shown = queue.places[..candidates].last().map(|p| p.proc);
        match handed.is_empty() {
            false => {
                // Which of the process's places the server chose is not told: each is
                // taken out of the model, and each owner may hold the key.
                queue.places.retain(|p| !handed.contains(&p.owner));
                queue.holder = handed;
                None
            }
            true => Some(format!(
                "a release handed the key to p{to}, while the first live waiter was {}",
                shown.map_or("nobody".to_owned(), |p| format!("p{p}"))
            )),
        }
    }
}
