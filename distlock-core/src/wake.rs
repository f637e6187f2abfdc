//! [`WakeRegistry`]: the waiters of each key, for every backend that can tell when a
//! lock is released. A backend keeps only its transport (pub/sub, LISTEN, an
//! in-process call) and hands each release it hears of to [`WakeRegistry::wake`].

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};

use futures_util::Stream;
use tokio::sync::watch;

/// A stream that yields whenever a watched key may have been released.
///
/// An item is a hint, not a promise that the key is free: the waiter tries again. A
/// stream that ends means notifications stopped (a lost connection); the waiter then
/// falls back to polling.
pub type ChangeStream = Pin<Box<dyn Stream<Item = ()> + Send + 'static>>;

/// The waiters of each key (or channel), and one rule for forgetting the ones nobody
/// waits on any more.
///
/// [`register`](Self::register) gives a [`ChangeStream`] that yields once per
/// [`wake`](Self::wake) of its key after registration; several wakes before the
/// waiter looks count as one (a wake is a hint to try again, not a count).
/// [`close_all`](Self::close_all) ends every stream, which tells waiters that
/// notifications stopped (a lost connection) and that they must poll.
///
/// A waiter may also register under a tag ([`register_tagged`](Self::register_tagged)),
/// such as the owner token of a fair waiter: [`wake_tagged`](Self::wake_tagged) then
/// wakes the key's untagged waiters and those with that one tag only, so that a
/// release handed to the head of a queue wakes the head, not the herd. A plain
/// [`wake`](Self::wake) wakes every waiter of the key, tagged or not.
///
/// Entries whose streams were all dropped are pruned when the registry has doubled in
/// size since the last pruning, so the map stays proportional to the keys being
/// waited on, at an amortised constant cost per registration; a key's tags are pruned
/// the same way, when that key's tags have doubled.
pub struct WakeRegistry {
    inner: Mutex<Inner>,
}

/// The waiters of one key: untagged, and by tag.
struct Entry {
    all: watch::Sender<()>,
    /// Ordered, so that a wake of every tag wakes them in the same order on every
    /// run: a run of the client is a function of its inputs.
    tagged: BTreeMap<String, watch::Sender<()>>,
    /// The number of tags after their last pruning; the next one comes at twice that.
    tags_pruned_at: usize,
}

impl Entry {
    fn new() -> Self {
        Entry {
            all: watch::Sender::new(()),
            tagged: BTreeMap::new(),
            tags_pruned_at: 0,
        }
    }

    fn used(&self) -> bool {
        self.all.receiver_count() > 0 || self.tagged.values().any(|tx| tx.receiver_count() > 0)
    }

    fn wake_all(&self) {
        self.all.send_replace(());
        for tx in self.tagged.values() {
            tx.send_replace(());
        }
    }
}

struct Inner {
    waiters: HashMap<String, Entry>,
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
        self.register_as(key, None)
    }

    /// Registers a waiter on `key` under `tag`: woken by [`wake`](Self::wake) of the
    /// key, and by [`wake_tagged`](Self::wake_tagged) of the key with this tag only.
    /// [`Registration::first`] is about the key, as for [`register`](Self::register).
    pub fn register_tagged(&self, key: &str, tag: &str) -> Registration {
        self.register_as(key, Some(tag))
    }

    fn register_as(&self, key: &str, tag: Option<&str>) -> Registration {
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
            inner.waiters.retain(|k, entry| {
                let used = entry.used();
                if !used {
                    pruned.push(k.clone());
                }
                used
            });
            inner.pruned_at = inner.waiters.len();
        }
        let first = !inner.waiters.contains_key(key);
        let entry = inner
            .waiters
            .entry(key.to_owned())
            .or_insert_with(Entry::new);
        let rx = match tag {
            None => entry.all.subscribe(),
            Some(tag) => {
                if entry.tagged.len() >= (entry.tags_pruned_at * 2).max(16) {
                    entry.tagged.retain(|_, tx| tx.receiver_count() > 0);
                    entry.tags_pruned_at = entry.tagged.len();
                }
                entry
                    .tagged
                    .entry(tag.to_owned())
                    .or_insert_with(|| watch::Sender::new(()))
                    .subscribe()
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

    /// Wakes every waiter of `key`, tagged or not.
    pub fn wake(&self, key: &str) {
        if let Some(entry) = self.lock().waiters.get(key) {
            entry.wake_all();
        }
    }

    /// Wakes the untagged waiters of `key` and those registered under `tag`.
    pub fn wake_tagged(&self, key: &str, tag: &str) {
        if let Some(entry) = self.lock().waiters.get(key) {
            entry.all.send_replace(());
            if let Some(tx) = entry.tagged.get(tag) {
                tx.send_replace(());
            }
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

    #[tokio::test]
    async fn a_tagged_wake_reaches_its_tag_and_the_untagged_only() {
        let registry = WakeRegistry::new();
        let mut head = registry.register_tagged("k", "head");
        assert!(head.first, "the key's first waiter, tagged or not");
        let mut next = registry.register_tagged("k", "next");
        assert!(!next.first);
        let mut racing = registry.register("k");
        registry.wake_tagged("k", "head");
        assert_eq!(head.changes.next().await, Some(()));
        assert_eq!(racing.changes.next().await, Some(()));
        assert!(
            next.changes.next().now_or_never().is_none(),
            "next was woken"
        );
        // A plain wake reaches every waiter of the key.
        registry.wake("k");
        assert_eq!(next.changes.next().await, Some(()));
        assert_eq!(head.changes.next().await, Some(()));
    }

    #[test]
    fn a_key_s_unused_tags_are_pruned() {
        let registry = WakeRegistry::new();
        let _kept = registry.register_tagged("k", "kept");
        for i in 0..100 {
            drop(registry.register_tagged("k", &format!("t{i}")));
        }
        let inner = registry.lock();
        let tags = inner.waiters.get("k").map_or(0, |e| e.tagged.len());
        assert!(tags < 40, "{tags} tags kept for one live waiter");
        assert!(inner
            .waiters
            .get("k")
            .is_some_and(|e| e.tagged.contains_key("kept")));
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
