//! Re-entrant scopes: within [`LockClient::reentrant`](super::LockClient::reentrant),
//! a task that asks again for a key it holds gets another hold of its lease.
//!
//! Lock libraries for threads (Curator, Redisson, Java's own locks) key re-entrancy on
//! the thread. Async Rust has no such identity: a task moves between threads, and one
//! task may run many futures that each think they are "the holder". What stands for
//! the thread here is a scope the caller draws: a future run under
//! [`LockClient::reentrant`](super::LockClient::reentrant), on the task that polls it.
//! Inside it, the client's `lock` and `try_lock` of a key this scope already holds
//! return [`LockGuard::reenter`]; tasks spawned from it are outside it, as another
//! thread is outside a thread's holds, and wait for the lock like anyone else.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use crate::client::guard::{Holds, LockGuard};
use crate::client::local::LocalQueues;
use crate::key::LockKey;

/// One lease held in a scope: the client it came from (by its local queues, which its
/// clones share; a weak pointer keeps the address from being reused by another client
/// while the entry lives), its key and its holds.
struct Held {
    client: Weak<LocalQueues>,
    key: LockKey,
    holds: Weak<Holds>,
}

tokio::task_local! {
    static SCOPE: RefCell<Vec<Held>>;
}

/// Whether the current future runs inside a re-entrant scope.
pub(crate) fn in_scope() -> bool {
    SCOPE.try_with(|_| ()).is_ok()
}

/// Runs `work` in a fresh scope (or in the current one, when there is one).
pub(crate) async fn scope<F: std::future::Future>(work: F) -> F::Output {
    if in_scope() {
        work.await
    } else {
        SCOPE.scope(RefCell::new(Vec::new()), work).await
    }
}

/// Another hold of `key`, when this scope holds it through `client`.
pub(crate) fn reenter(client: &Arc<LocalQueues>, key: &LockKey) -> Option<LockGuard> {
    SCOPE
        .try_with(|held| {
            let mut held = held.borrow_mut();
            held.retain(|h| h.holds.strong_count() > 0);
            held.iter()
                .filter(|h| std::ptr::eq(h.client.as_ptr(), Arc::as_ptr(client)) && h.key == *key)
                .find_map(|h| h.holds.upgrade()?.reenter())
        })
        .ok()
        .flatten()
}

/// Whether this task's reentrant scope holds `key` through `client`.
pub(crate) fn holds(client: &Arc<LocalQueues>, key: &LockKey) -> bool {
    SCOPE
        .try_with(|held| {
            held.borrow().iter().any(|h| {
                std::ptr::eq(h.client.as_ptr(), Arc::as_ptr(client))
                    && h.key == *key
                    && h.holds.strong_count() > 0
            })
        })
        .unwrap_or(false)
}

/// Records a fresh guard in this scope, if there is one.
pub(crate) fn remember(client: &Arc<LocalQueues>, guard: &LockGuard) {
    let _ = SCOPE.try_with(|held| {
        held.borrow_mut().push(Held {
            client: Arc::downgrade(client),
            key: guard.key().clone(),
            holds: Arc::downgrade(guard.shared_holds()),
        });
    });
}
