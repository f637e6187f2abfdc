//! [`HandoffBook`]: what a backend whose releases grant the head of a key's queue
//! ([`FairBackend::handoffs`](crate::backend::FairBackend::handoffs)) keeps
//! about its fair waiters, so that a waiter told of such a grant knows, safely, from
//! when its lease counts.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;

use crate::token::{FencingToken, OwnerToken};

/// A grant a release made on the server to the waiter at the head of a key's queue
/// (contract point 10), as [`Handoffs::handed_over`](crate::backend::Handoffs::handed_over)
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handoff {
    /// The grant's fence, minted by the release's step.
    pub fence: FencingToken,
    /// An instant of this process's clock before the server made the grant: the
    /// lease's validity counts from here (contract point 7), as it counts from before
    /// the request for a grant the waiter asked for.
    pub granted_after: Instant,
}

/// The fair waiters of this process on each key, and the grants releases handed them.
///
/// A notification of a grant may come late: after the lease it names ran out and
/// another holder took the key. What tells such a stale grant from a live one is the
/// fence. Each fair step the backend makes for a waiter that answers "not yet" is
/// noted with the instant before it was sent and the key's latest fence the server saw
/// then ([`turned_down`](Self::turned_down)). A grant with a higher fence was minted
/// after that step ran, so after that instant, which is where its lease counts from; a
/// grant whose fence is not higher is older than the step that did not find it held by
/// its owner, so it is over, and [`take`](Self::take) drops it.
///
/// A backend notes a waiter when it starts watching for its turn
/// ([`expect`](Self::expect)): a notification for an owner this process does not wait
/// as is ignored, so the book holds only this process's waiters. The backend forgets
/// a waiter when the wait ends without a handoff: granted by its own step, or gone
/// ([`forget`](Self::forget), from `leave_queue`).
#[derive(Default)]
pub struct HandoffBook {
    waiters: Mutex<HashMap<(String, OwnerToken), Waiting>>,
}

/// What is known of one fair waiter.
#[derive(Debug, Default, Clone, Copy)]
struct Waiting {
    /// Its last fair step that was not granted: the instant before it was sent and the
    /// key's latest fence when it ran.
    turned_down: Option<(Instant, u64)>,
    /// The fence of a grant a release handed it, not yet taken.
    handed: Option<u64>,
}

impl fmt::Debug for HandoffBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoffBook")
            .field("waiters", &self.lock().len())
            .finish()
    }
}

impl HandoffBook {
    /// An empty book.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, OwnerToken), Waiting>> {
        // Every section below leaves the map consistent.
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `owner`, a fair waiter of this process on `key`, starts waiting: a handoff to
    /// it is kept from now on.
    pub fn expect(&self, key: &str, owner: OwnerToken) {
        self.lock().entry((key.to_owned(), owner)).or_default();
    }

    /// A fair step of `owner` on `key`, sent at `sent_at`, was not granted; `latest`
    /// is the key's latest fence when it ran on the server (the counter's value, or,
    /// where the counter is gone, a value no earlier fence reaches), read after the
    /// step wrote the waiter's place: a release that handed over the place as an
    /// earlier step left it must have minted a fence no higher than `latest`.
    pub fn turned_down(&self, key: &str, owner: OwnerToken, sent_at: Instant, latest: u64) {
        if let Some(waiting) = self.lock().get_mut(&(key.to_owned(), owner)) {
            waiting.turned_down = Some((sent_at, latest));
        }
    }

    /// A release on the server granted `key` to `owner` with `fence`. `false` when no
    /// waiter of this process is that owner (the notification is someone else's).
    pub fn hand_over(&self, key: &str, owner: OwnerToken, fence: u64) -> bool {
        match self.lock().get_mut(&(key.to_owned(), owner)) {
            Some(waiting) => {
                waiting.handed = Some(fence);
                true
            }
            None => false,
        }
    }

    /// The grant handed to `owner` on `key`, once: it ends the waiter's entry. `None`
    /// when none was handed over, or when the one handed over is older than the
    /// waiter's last step that was not granted (it is then dropped).
    pub fn take(&self, key: &str, owner: OwnerToken) -> Option<Handoff> {
        let mut waiters = self.lock();
        let entry = (key.to_owned(), owner);
        let waiting = waiters.get_mut(&entry)?;
        let fence = waiting.handed?;
        match waiting.turned_down {
            Some((sent_at, latest)) if fence > latest => {
                waiters.remove(&entry);
                Some(Handoff {
                    fence: FencingToken::new(fence),
                    granted_after: sent_at,
                })
            }
            Some(_) => {
                waiting.handed = None;
                None
            }
            // No step of this waiter has been turned down yet: nothing bounds when the
            // grant was made. Its own step will find it.
            None => None,
        }
    }

    /// The wait of `owner` on `key` ended: its entry goes.
    pub fn forget(&self, key: &str, owner: OwnerToken) {
        self.lock().remove(&(key.to_owned(), owner));
    }

    /// How many waiters are noted.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no waiter is noted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_grant_minted_after_a_turned_down_step_counts_from_that_step() {
        let book = HandoffBook::new();
        let owner = OwnerToken::random();
        book.expect("k", owner);
        let sent = Instant::now();
        book.turned_down("k", owner, sent, 7);
        assert!(book.hand_over("k", owner, 8));
        let handoff = book.take("k", owner).expect("handed over");
        assert_eq!(handoff.fence, FencingToken::new(8));
        assert_eq!(handoff.granted_after, sent);
        assert!(book.take("k", owner).is_none(), "taken once");
        assert!(book.is_empty());
    }

    #[test]
    fn a_grant_older_than_a_turned_down_step_is_dropped() {
        let book = HandoffBook::new();
        let owner = OwnerToken::random();
        book.expect("k", owner);
        book.turned_down("k", owner, Instant::now(), 3);
        book.hand_over("k", owner, 5);
        // A later step ran after the key's fence had reached 9: the grant of 5 is over.
        book.turned_down("k", owner, Instant::now() + Duration::from_millis(1), 9);
        assert!(book.take("k", owner).is_none());
        book.turned_down("k", owner, Instant::now(), 9);
        assert!(book.take("k", owner).is_none(), "dropped, not kept");
    }

    #[test]
    fn a_grant_before_any_turned_down_step_is_not_taken() {
        let book = HandoffBook::new();
        let owner = OwnerToken::random();
        book.expect("k", owner);
        book.hand_over("k", owner, 5);
        assert!(book.take("k", owner).is_none());
    }

    #[test]
    fn only_this_process_s_waiters_are_kept() {
        let book = HandoffBook::new();
        assert!(!book.hand_over("k", OwnerToken::random(), 5));
        assert!(book.is_empty());
        let owner = OwnerToken::random();
        book.expect("k", owner);
        book.forget("k", owner);
        assert!(book.is_empty());
    }
}
