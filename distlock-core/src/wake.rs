//! [`WakeRegistry`]: the waiters of each key, for every backend that can tell when a
//! lock is released. A backend keeps only its transport (pub/sub, LISTEN, an
//! in-process call) and hands each release it hears of to [`WakeRegistry::wake`].

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;

use crate::backend::ChangeStream;

/// The waiters of each key (or channel), and one rule for forgetting the ones nobody
/// waits on any more.
///
/// [`register`](Self::register) gives a [`ChangeStream`] that yields once per
/// [`wake`](Self::wake) of its key after registration; several wakes before the
/// waiter looks count as one (a wake is a hint to try again, not a count).
/// [`close_all`](Self::close_all) ends every stream, which tells waiters that
/// notifications stopped (a lost connection) and that they must poll.
///
/// Entries whose streams were all dropped are pruned when the registry has doubled in
/// size since the last pruning, so the map stays proportional to the keys being
/// waited on, at an amortised constant cost per registration.
pub struct WakeRegistry {
    inner: Mutex<Inner>,
}

struct Inner {
    waiters: HashMap<String, watch::Sender<()>>,
    /// The size after the last pruning; the next one comes at twice that.
    pruned_at: usize,
    closed: bool,
}

/// A new waiter: its stream, and what the transport must do for it.
pub struct Registration {
    /// Yields on each wake of the key; ends on [`WakeRegistry::close_all`].
    pub changes: ChangeStream,
    /// Whether this is the key's first waiter (a transport with per-key subscriptions
    /// subscribes now).
    pub first: bool,
    /// Keys pruned because nobody waits on them any more (a transport with per-key
    /// subscriptions unsubscribes them).
    pub pruned: Vec<String>,
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("first", &self.first)
            .field("pruned", &self.pruned)
            .finish_non_exhaustive()
    }
}

impl Default for WakeRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for WakeRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.lock();
        f.debug_struct("WakeRegistry")
            .field("keys", &inner.waiters.len())
            .field("closed", &inner.closed)
            .finish()
    }
}

impl WakeRegistry {
    /// An empty, open registry.
    pub fn new() -> Self {
        WakeRegistry {
            inner: Mutex::new(Inner {
                waiters: HashMap::new(),
                pruned_at: 0,
                closed: false,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every section below leaves the map consistent, so a poisoned lock still
        // holds usable data.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a waiter on `key`. On a closed registry the stream ends at once (the
    /// waiter polls).
    pub fn register(&self, key: &str) -> Registration {
        let mut inner = self.lock();
        if inner.closed {
            return Registration {
                changes: Box::pin(futures_util::stream::empty()),
                first: false,
                pruned: Vec::new(),
            };
        }
        let mut pruned = Vec::new();
        if inner.waiters.len() >= (inner.pruned_at * 2).max(16) {
            inner.waiters.retain(|k, tx| {
                let used = tx.receiver_count() > 0;
                if !used {
                    pruned.push(k.clone());
                }
                used
            });
            inner.pruned_at = inner.waiters.len();
        }
        let (rx, first) = match inner.waiters.get(key) {
            Some(tx) => (tx.subscribe(), false),
            None => {
                let tx = watch::Sender::new(());
                let rx = tx.subscribe();
                inner.waiters.insert(key.to_owned(), tx);
                (rx, true)
            }
        };
        // A key just pruned and registered again is subscribed again, not unsubscribed.
        pruned.retain(|k| k != key);
        Registration {
            changes: stream_of(rx),
            first,
            pruned,
        }
    }

    /// Wakes every waiter of `key`.
    pub fn wake(&self, key: &str) {
        if let Some(tx) = self.lock().waiters.get(key) {
            tx.send_replace(());
        }
    }

    /// Forgets `key` and ends its waiters' streams (a subscription that failed).
    pub fn forget(&self, key: &str) {
        self.lock().waiters.remove(key);
    }

    /// Ends every waiter's stream and closes the registry: notifications stopped, so
    /// waiters fall back to polling. Later registrations end at once.
    pub fn close_all(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.waiters.clear();
    }

    /// Whether [`close_all`](Self::close_all) has not been called.
    pub fn is_open(&self) -> bool {
        !self.lock().closed
    }

    /// How many keys have an entry (waited on, or not yet pruned).
    pub fn len(&self) -> usize {
        self.lock().waiters.len()
    }

    /// Whether no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn stream_of(mut rx: watch::Receiver<()>) -> ChangeStream {
    rx.mark_unchanged();
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok().map(|()| ((), rx))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::{FutureExt, StreamExt};

    #[tokio::test]
    async fn a_wake_reaches_the_waiters_of_its_key_only() {
        let registry = WakeRegistry::new();
        let mut a = registry.register("a");
        assert!(a.first);
        let mut a2 = registry.register("a");
        assert!(!a2.first);
        let mut b = registry.register("b");
        registry.wake("a");
        assert_eq!(a.changes.next().await, Some(()));
        assert_eq!(a2.changes.next().await, Some(()));
        assert!(b.changes.next().now_or_never().is_none(), "b was woken");
    }

    #[tokio::test]
    async fn close_all_ends_every_stream_and_later_ones() {
        let registry = WakeRegistry::new();
        let mut a = registry.register("a");
        registry.close_all();
        assert_eq!(a.changes.next().await, None);
        assert!(!registry.is_open());
        let mut late = registry.register("a");
        assert_eq!(late.changes.next().await, None);
    }

    #[test]
    fn unused_keys_are_pruned_and_reported() {
        let registry = WakeRegistry::new();
        for i in 0..16 {
            drop(registry.register(&format!("k{i}")));
        }
        assert_eq!(registry.len(), 16);
        let kept = registry.register("kept");
        assert_eq!(kept.pruned.len(), 16, "{:?}", kept.pruned);
        assert_eq!(registry.len(), 1, "only the keys still waited on remain");
        // The next pruning waits until the map has doubled again.
        assert!(registry.register("more").pruned.is_empty());
    }
}
