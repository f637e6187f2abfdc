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
    turns: Mutex<HashMap<LockKey, Arc<Turn<()>>>>,
}

impl fmt::Debug for LocalQueues {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalQueues").finish_non_exhaustive()
    }
}

impl LocalQueues {
    /// The queue of `key`, created on first use. Queues nobody holds or waits on are
    /// dropped now and then, so that the map stays as small as the keys in use.
    pub(crate) fn of(&self, key: &LockKey) -> Arc<Turn<()>> {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        if turns.len() >= 64 {
            turns.retain(|_, turn| Arc::strong_count(turn) > 1);
        }
        if let Some(turn) = turns.get(key) {
            return turn.clone();
        }
        let turn = Arc::new(Turn::new(()));
        turns.insert(key.clone(), turn.clone());
        turn
    }
}
