//! The releases a client leaves to tasks of its own, each one pass after another on
//! one schedule: an abandoned attempt's cleanup, and a dropped guard's release. And
//! the one rule that makes them safe for an owner that asks again: a later grant step
//! as the same owner on the same key (a resumed term, a same-owner retry) supersedes
//! every cleanup still armed for it, so that none of its passes can release what that
//! step is granted.
//!
//! The rule holds across every client of this process, not only one client and its
//! clones: a service that makes a new election for its retry is covered too. What it
//! cannot cover is a release request of a superseded pass that was already sent and
//! lands on the server later still (a reply lost, the request queued in a proxy): the
//! supersede waits for the pass in flight to return, and a backend's late-request
//! bound ([`Capabilities::applied_within`](crate::backend::Capabilities::applied_within))
//! is what bounds a request still on its way after that.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::background::Working;
use crate::key::LockKey;
use crate::token::OwnerToken;

/// When a cleanup releases: at once, then each delay after the last (0.25 s, 1.25 s
/// and 6.25 s after it was armed in all).
const AGAIN_AFTER: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(250),
    Duration::from_millis(1000),
    Duration::from_millis(5000),
];

/// How long after the backend's bound on a late-applied request
/// ([`Capabilities::applied_within`](crate::backend::Capabilities::applied_within)) the last
/// pass of a cleanup releases: room for the request's trip and for timers.
const PAST_THE_BOUND: Duration = Duration::from_millis(250);

/// When each pass of a cleanup releases, counted from when it was armed: the fixed
/// schedule, then a last pass past the backend's `applied_within` where that is later.
pub(super) fn passes(applied_within: Option<Duration>) -> impl Iterator<Item = Duration> {
    let fixed = AGAIN_AFTER.iter().scan(Duration::ZERO, |at, delay| {
        *at += *delay;
        Some(*at)
    });
    let last_fixed: Duration = AGAIN_AFTER.iter().sum();
    let past_the_bound = applied_within
        .map(|bound| bound.saturating_add(PAST_THE_BOUND))
        .filter(|at| *at > last_fixed);
    fixed.chain(past_the_bound)
}

/// The cleanups armed for one key and owner in this process. A pass runs holding
/// `passing`, and only while `epoch` is the one its cleanup was armed in; a supersede
/// moves the epoch on, then takes `passing` once, so that it returns only after a
/// pass in flight has.
#[derive(Default)]
struct Armed {
    epoch: AtomicU64,
    passing: tokio::sync::Mutex<()>,
}

type Registry = Mutex<HashMap<(LockKey, OwnerToken), Arc<Armed>>>;

/// Every key and owner with a cleanup armed in this process. Touched only when a
/// cleanup is armed or ends, and when an attempt asks as an owner it did not make
/// afresh: never on the path of an ordinary grant.
static ARMED: LazyLock<Registry> = LazyLock::new(Registry::default);

fn registry() -> std::sync::MutexGuard<'static, HashMap<(LockKey, OwnerToken), Arc<Armed>>> {
    ARMED.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one pass did: whether the cleanup is done (no later pass is needed).
pub(super) enum Pass {
    /// Later passes still run (an abandoned request may land after this one).
    Again,
    /// The release was applied, or found nothing to release: no later pass.
    Done,
}

/// Runs `pass` for `key` and `owner` at each of `at` (counted from now) in a task of
/// the current runtime, until a pass says it is done, the schedule ends, or a later
/// grant step as the owner supersedes it ([`supersede`]). `first` is held until the
/// first pass has run, so that a flush waits for it. Outside a runtime nothing runs:
/// what was to be released runs out at its TTL.
pub(super) fn spawn<F, Fut>(
    key: LockKey,
    owner: OwnerToken,
    at: impl Iterator<Item = Duration> + Send + 'static,
    first: Working,
    mut pass: F,
) where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = Pass> + Send,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let armed_at = Instant::now();
    let slot = (key, owner);
    let armed = registry().entry(slot.clone()).or_default().clone();
    let epoch = armed.epoch.load(Ordering::SeqCst);
    let entry = Entry { slot, armed };
    runtime.spawn(async move {
        let armed = &entry.armed;
        let mut first = Some(first);
        for at in at {
            tokio::time::sleep_until(armed_at + at).await;
            let passing = armed.passing.lock().await;
            if armed.epoch.load(Ordering::SeqCst) != epoch {
                break;
            }
            let done = matches!(pass().await, Pass::Done);
            drop(passing);
            drop(first.take());
            if done {
                break;
            }
        }
        // Ending, whether done or dropped with its runtime: `entry` goes with it.
        drop(entry);
    });
}

/// A cleanup's hold of its registry entry: the last cleanup of a key and owner to
/// end (its passes done, or its task dropped with its runtime) takes the entry with it.
struct Entry {
    slot: (LockKey, OwnerToken),
    armed: Arc<Armed>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut all = registry();
        // The registry's reference and this one: no other cleanup, and no supersede
        // under way (it holds a third while it waits).
        if Arc::strong_count(&self.armed) == 2 {
            all.remove(&self.slot);
        }
    }
}

/// Called by a grant step as `owner` on `key` that was not made afresh for this
/// step (a resumed term): every cleanup armed for them so far stops, a pass in flight
/// first returning, so that none of them releases what this step is granted. Returns
/// at once where none is armed.
pub(super) async fn supersede(key: &LockKey, owner: &OwnerToken) {
    let Some(armed) = registry().get(&(key.clone(), *owner)).cloned() else {
        return;
    };
    armed.epoch.fetch_add(1, Ordering::SeqCst);
    drop(armed.passing.lock().await);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::client::background::Background;

    #[tokio::test(start_paused = true)]
    async fn a_supersede_stops_every_later_pass_and_waits_for_the_one_in_flight() {
        let key = LockKey::new("superseded").expect("key");
        let owner = OwnerToken::random();
        let background = Background::default();
        let ran = Arc::new(AtomicU32::new(0));
        let counted = ran.clone();
        spawn(
            key.clone(),
            owner,
            passes(None),
            background.begin(),
            move || {
                let counted = counted.clone();
                async move {
                    // A pass that takes a while on the server.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    counted.fetch_add(1, Ordering::SeqCst);
                    Pass::Again
                }
            },
        );
        // Into the second pass (at 0.25 s), while its request is in flight.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        supersede(&key, &owner).await;
        assert_eq!(
            ran.load(Ordering::SeqCst),
            2,
            "the pass in flight returned first"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            ran.load(Ordering::SeqCst),
            2,
            "no pass ran after the supersede"
        );
        assert!(registry().get(&(key, owner)).is_none(), "the entry is gone");
    }

    /// A cleanup whose runtime ends before its last pass (a process shutting down)
    /// leaves no entry behind in the process-wide registry.
    #[test]
    fn a_cleanup_dropped_with_its_runtime_leaves_no_entry() {
        let key = LockKey::new("dropped-with-its-runtime").expect("key");
        let owner = OwnerToken::random();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let background = Background::default();
            spawn(
                key.clone(),
                owner,
                passes(None),
                background.begin(),
                || async { Pass::Again },
            );
            // Past its first pass, long before its last.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(registry().contains_key(&(key.clone(), owner)));
        });
        runtime.shutdown_background();
        assert!(
            !registry().contains_key(&(key, owner)),
            "the entry outlived its cleanup"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_cleanup_runs_every_pass_until_one_is_done() {
        let key = LockKey::new("passes").expect("key");
        let background = Background::default();
        let ran = Arc::new(AtomicU32::new(0));
        let counted = ran.clone();
        spawn(
            key,
            OwnerToken::random(),
            passes(Some(Duration::from_secs(20))),
            background.begin(),
            move || {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    if n == 3 {
                        Pass::Done
                    } else {
                        Pass::Again
                    }
                }
            },
        );
        background.idle().await;
        assert_eq!(
            ran.load(Ordering::SeqCst),
            1,
            "flush waits for the first pass"
        );
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            ran.load(Ordering::SeqCst),
            3,
            "no pass after the one that was done"
        );
    }
}
