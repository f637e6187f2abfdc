//! The local queue: tasks of one [`LockClient`](super::LockClient) that want the same
//! key line up here, so that only the first of them talks to the server.
//!
//! Without it, every waiter of a process wakes on a release and races to the server;
//! the next holder then queues behind its own siblings (and, on pooled backends, the
//! holder's release can queue behind them too). With it, the next local waiter is
//! handed the key's local turn as soon as the release has been applied, and its first
//! attempt succeeds. Mutual exclusion still comes from the server alone; this only
//! orders the tasks of one process, first come, first served.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tokio::sync::{Mutex as Turn, OwnedMutexGuard};

use crate::key::LockKey;

/// A task's turn at a key: held while it waits on the server and then while it holds
/// the lock.
pub(crate) type LocalTurn = OwnedMutexGuard<()>;

#[derive(Default)]
pub(crate) struct LocalQueues {
    turns: Mutex<Turns>,
}

#[derive(Default)]
struct Turns {
    by_key: HashMap<LockKey, Arc<Turn<()>>>,
    /// How many queues were left after the last sweep; the next sweep comes once the
    /// map has doubled since.
    swept_at: usize,
}

/// The smallest map that is swept of queues nobody uses.
const SWEEP_FROM: usize = 64;

impl fmt::Debug for LocalQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalQueues").finish_non_exhaustive()
    }
}

impl LocalQueues {
    /// The queue of `key`, created on first use. Queues nobody holds or waits on are
    /// dropped whenever the map has doubled since the last sweep, so the
    /// map stays within twice the keys in use (or [`SWEEP_FROM`]), at an amortised
    /// constant cost per call however many keys are in use.
    pub(crate) fn of(&self, key: &LockKey) -> Arc<Turn<()>> {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        // Swept before the look-up, so that the key is hashed once: a queue the sweep
        // drops is one nobody holds or waits on, and a new one stands for it.
        if turns.by_key.len() >= (turns.swept_at * 2).max(SWEEP_FROM) {
            turns.by_key.retain(|_, turn| Arc::strong_count(turn) > 1);
            turns.swept_at = turns.by_key.len();
        }
        turns
            .by_key
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Turn::new(())))
            .clone()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.turns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_key
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> LockKey {
        LockKey::new(format!("k{i}")).expect("key")
    }

    #[test]
    fn unused_queues_are_swept_and_queues_in_use_kept() {
        let queues = LocalQueues::default();
        // Queues in use: their turns are held by the caller.
        let in_use: Vec<_> = (0..200).map(|i| queues.of(&key(i))).collect();
        // Many keys used once and let go.
        for i in 200..5_000 {
            drop(queues.of(&key(i)));
        }
        let len = queues.len();
        assert!(
            len <= 2 * (in_use.len() + 1) + SWEEP_FROM,
            "{len} queues kept for {} in use",
            in_use.len()
        );
        // A key in use still has its own queue: the same one.
        for (i, turn) in in_use.iter().enumerate() {
            assert!(Arc::ptr_eq(turn, &queues.of(&key(i))), "key {i}");
        }
    }
}
