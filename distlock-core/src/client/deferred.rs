//! Deferred starts: a guard's supervisor task is spawned only once the guard has been
//! held for a while.
//!
//! Most locks are held briefly, and a task per guard (spawned on acquire, aborted on
//! release) costs every short hold a scheduling round. Instead, each client keeps a
//! timer task per runtime it is used on, with a heap of pending starts: a guard
//! registers when its supervisor is due, and is started then, on the guard's own
//! runtime, unless it was cancelled first. A timer task is only woken when a start is
//! due earlier than it planned to look, which a steady stream of short holds never
//! causes (their due times only grow).
//!
//! What it is worth is measured by lockbench's memory row, where a hold costs no
//! round trip: the client's S1 cycle against the backend's primitives alone, and the
//! client's S2 rate and its sweep from one task up. To measure it again, build a
//! variant whose [`Starts::schedule`] spawns a task per guard that sleeps until the
//! start is due (aborted when the guard is released), and run
//! `lockbench --skip-suite --backends memory` with each build in turns.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// Where a deferred start is.
enum Phase {
    Waiting,
    Running(JoinHandle<()>),
    Done,
}

/// The state of one deferred start, kept inside what it starts (a guard's shared
/// state), so that deferring a start allocates nothing of its own.
pub(crate) struct DeferredTask {
    phase: Mutex<Phase>,
    /// Whether `phase` is still `Waiting`, readable without its lock: the timer's
    /// sweep asks it of every pending entry. Cleared under the lock, never set again.
    waiting: AtomicBool,
}

impl DeferredTask {
    /// A start that is waiting.
    pub(crate) fn new() -> Self {
        DeferredTask {
            phase: Mutex::new(Phase::Waiting),
            waiting: AtomicBool::new(true),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `spawn` and keeps the task it spawned, if the start is still waiting.
    pub(crate) fn start_with(&self, spawn: impl FnOnce() -> JoinHandle<()>) {
        let mut phase = self.phase();
        if let Phase::Waiting = &*phase {
            self.waiting.store(false, AtomicOrdering::Release);
            *phase = Phase::Running(spawn());
        }
    }

    /// Whether it is still to be started.
    pub(crate) fn waiting(&self) -> bool {
        self.waiting.load(AtomicOrdering::Acquire)
    }

    /// Stops it: never started if still waiting, aborted if running.
    pub(crate) fn cancel(&self) {
        let mut phase = self.phase();
        self.waiting.store(false, AtomicOrdering::Release);
        if let Phase::Running(task) = std::mem::replace(&mut *phase, Phase::Done) {
            task.abort();
        }
    }
}

/// Something with a deferred start. The timer holds it weakly: once it is gone, there
/// is nothing to start.
pub(crate) trait Deferred: Send + Sync {
    /// Its start's state.
    fn task(&self) -> &DeferredTask;

    /// Starts its task now if it is still waiting (with [`DeferredTask::start_with`]).
    fn start(self: Arc<Self>);
}

struct Entry {
    due: Instant,
    seq: u64,
    deferred: Weak<dyn Deferred>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so that the heap's top is the earliest start.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

#[derive(Default)]
struct Queue {
    pending: BinaryHeap<Entry>,
    /// The size after the last sweep of cancelled entries; the next comes at twice that.
    swept_at: usize,
    seq: u64,
    /// When the timer task will next look at the queue; `None` while it waits for a
    /// wake-up with nothing pending (or has not been started).
    next_look: Option<Instant>,
    task: Option<JoinHandle<()>>,
}

/// The pending starts of one runtime, and its timer task.
struct Timer {
    queue: Mutex<Queue>,
    wake: Arc<Notify>,
}

impl Drop for Timer {
    fn drop(&mut self) {
        // Nobody can register any more: let the timer task see that and end.
        self.wake.notify_one();
    }
}

impl Timer {
    fn new() -> Self {
        Timer {
            queue: Mutex::default(),
            wake: Arc::new(Notify::new()),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether its task still runs (or is yet to be spawned): a finished one means
    /// its runtime has shut down.
    fn alive(&self) -> bool {
        self.queue().task.as_ref().is_none_or(|t| !t.is_finished())
    }

    fn push(self: &Arc<Self>, due: Instant, deferred: Weak<dyn Deferred>) {
        let mut queue = self.queue();
        // Most starts are cancelled long before they are due (the hold was short):
        // sweep them out whenever the heap has doubled since the last sweep, rather
        // than popping each one when due. The heap then stays as large as the starts
        // still waiting, at an amortised constant cost per push.
        if queue.pending.len() >= (queue.swept_at * 2).max(SWEEP_FROM) {
            queue
                .pending
                .retain(|entry| entry.deferred.upgrade().is_some_and(|d| d.task().waiting()));
            queue.swept_at = queue.pending.len();
        }
        queue.seq += 1;
        let seq = queue.seq;
        queue.pending.push(Entry { due, seq, deferred });
        if queue.task.is_none() {
            queue.next_look = Some(due);
            queue.task = Some(tokio::spawn(run(Arc::downgrade(self), self.wake.clone())));
        } else if queue.next_look.is_none_or(|look| due < look) {
            queue.next_look = Some(due);
            self.wake.notify_one();
        }
    }

    /// Starts what is due; returns when to look next.
    fn start_due(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut due = Vec::new();
        let next = {
            let mut queue = self.queue();
            while queue.pending.peek().is_some_and(|e| e.due <= now) {
                if let Some(entry) = queue.pending.pop() {
                    due.push(entry.deferred);
                }
            }
            queue.next_look = queue.pending.peek().map(|e| e.due);
            queue.next_look
        };
        for deferred in due.iter().filter_map(Weak::upgrade) {
            deferred.start();
        }
        next
    }
}

/// The smallest heap that is swept of cancelled starts.
const SWEEP_FROM: usize = 256;

/// A client's deferred starts. Cheap to clone; clones share the timer tasks.
#[derive(Clone, Default)]
pub(crate) struct Starts {
    inner: Arc<Timers>,
}

#[derive(Default)]
struct Timers {
    /// The timer of the first runtime the client was used on, found without a lock:
    /// most clients only ever run on one. Kept for the client's life, even once that
    /// runtime has shut down (its timer then holds no starts: their guards are gone).
    first: std::sync::OnceLock<(tokio::runtime::Id, Arc<Timer>)>,
    /// The timers of the other runtimes.
    others: Mutex<HashMap<tokio::runtime::Id, Arc<Timer>>>,
}

impl fmt::Debug for Starts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Starts").finish_non_exhaustive()
    }
}

impl Starts {
    /// Starts `deferred` at `due`, or at once if that is not after `now`, the
    /// caller's reading of the clock, unless its task is cancelled first or it is gone
    /// by then. Must be called within a tokio runtime; the start runs on it.
    pub(crate) fn schedule<D: Deferred + 'static>(
        &self,
        due: Instant,
        now: Instant,
        deferred: &Arc<D>,
    ) {
        if due <= now {
            deferred.clone().start();
            return;
        }
        let deferred: Weak<dyn Deferred> = Arc::downgrade(deferred) as Weak<dyn Deferred>;
        let runtime = tokio::runtime::Handle::current().id();
        let first = self
            .inner
            .first
            .get_or_init(|| (runtime, Arc::new(Timer::new())));
        if first.0 == runtime {
            first.1.push(due, deferred);
            return;
        }
        let timer = {
            let mut timers = self.inner.others.lock().unwrap_or_else(|p| p.into_inner());
            match timers.get(&runtime) {
                // This runtime runs the caller, so it has not shut down.
                Some(timer) => timer.clone(),
                None => {
                    // Runtimes that have shut down took their timers (and guards) with
                    // them: forget those when another runtime comes.
                    timers.retain(|_, timer| timer.alive());
                    let timer = Arc::new(Timer::new());
                    timers.insert(runtime, timer.clone());
                    timer
                }
            }
        };
        timer.push(due, deferred);
    }
}

/// The timer task of one client on one runtime: starts what is due, then sleeps until
/// the next due time or a wake-up. Ends once the client and all its guards are gone.
async fn run(timer: Weak<Timer>, wake: Arc<Notify>) {
    loop {
        let next = match timer.upgrade() {
            Some(timer) => timer.start_due(),
            None => return,
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = sleep_until(at) => {}
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A deferred start that counts its runs in `count`.
    struct Counting {
        task: DeferredTask,
        count: Arc<AtomicUsize>,
    }

    impl Deferred for Counting {
        fn task(&self) -> &DeferredTask {
            &self.task
        }

        fn start(self: Arc<Self>) {
            let count = self.count.clone();
            self.task.start_with(|| {
                tokio::spawn(async move {
                    count.fetch_add(1, Ordering::SeqCst);
                })
            });
        }
    }

    impl Counting {
        fn cancel(&self) {
            self.task.cancel();
        }
    }

    impl Starts {
        /// Schedules a start that counts in `count`; dropping it cancels it.
        fn defer(&self, due: Instant, now: Instant, count: &Arc<AtomicUsize>) -> Arc<Counting> {
            let deferred = Arc::new(Counting {
                task: DeferredTask::new(),
                count: count.clone(),
            });
            self.schedule(due, now, &deferred);
            deferred
        }
    }

    #[tokio::test(start_paused = true)]
    async fn starts_when_due_and_not_when_cancelled() {
        let starts = Starts::default();
        let started = Arc::new(AtomicUsize::new(0));
        let now = Instant::now();
        let kept = starts.defer(now + Duration::from_millis(100), now, &started);
        let cancelled = starts.defer(now + Duration::from_millis(50), now, &started);
        cancelled.cancel();
        tokio::time::sleep(Duration::from_millis(99)).await;
        assert_eq!(started.load(Ordering::SeqCst), 0);
        tokio::time::sleep(Duration::from_millis(2)).await;
        tokio::task::yield_now().await;
        assert_eq!(started.load(Ordering::SeqCst), 1);
        kept.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_start_wakes_the_timer() {
        let starts = Starts::default();
        let started = Arc::new(AtomicUsize::new(0));
        let now = Instant::now();
        let _late = starts.defer(now + Duration::from_secs(60), now, &started);
        tokio::task::yield_now().await;
        let _early = starts.defer(now + Duration::from_millis(10), Instant::now(), &started);
        tokio::time::sleep(Duration::from_millis(20)).await;
        tokio::task::yield_now().await;
        assert_eq!(started.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_whose_owner_is_gone_never_runs() {
        let starts = Starts::default();
        let started = Arc::new(AtomicUsize::new(0));
        let now = Instant::now();
        // Dropped without being cancelled: the timer held it weakly.
        drop(starts.defer(now + Duration::from_millis(10), now, &started));
        let _kept = starts.defer(now + Duration::from_millis(20), now, &started);
        tokio::time::sleep(Duration::from_millis(30)).await;
        tokio::task::yield_now().await;
        assert_eq!(started.load(Ordering::SeqCst), 1, "only the kept start ran");
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_starts_are_swept_out_and_the_waiting_ones_kept() {
        let starts = Starts::default();
        let started = Arc::new(AtomicUsize::new(0));
        let now = Instant::now();
        let kept = starts.defer(now + Duration::from_secs(10), now, &started);
        for _ in 0..10 * SWEEP_FROM {
            starts
                .defer(now + Duration::from_secs(5), now, &started)
                .cancel();
        }
        let heap = starts
            .inner
            .first
            .get()
            .expect("a timer")
            .1
            .queue()
            .pending
            .len();
        assert!(
            heap <= 2 * SWEEP_FROM,
            "{heap} entries for one waiting start and {} cancelled ones",
            10 * SWEEP_FROM
        );
        tokio::time::sleep(Duration::from_secs(11)).await;
        tokio::task::yield_now().await;
        assert_eq!(started.load(Ordering::SeqCst), 1, "the waiting start ran");
        kept.cancel();
    }

    #[test]
    fn each_runtime_starts_its_own() {
        let starts = Starts::default();
        let started = Arc::new(AtomicUsize::new(0));
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime")
        };
        // A first runtime registers a start, then sits idle (a current-thread runtime
        // runs nothing outside `block_on`): a timer task there would never run.
        let first = runtime();
        let abandoned = first.block_on(async {
            starts.defer(
                Instant::now() + Duration::from_secs(60),
                Instant::now(),
                &started,
            )
        });
        // A start registered on another runtime runs there, in time.
        let start_soon_on_a_new_runtime = || {
            runtime().block_on(async {
                let _kept = starts.defer(
                    Instant::now() + Duration::from_millis(10),
                    Instant::now(),
                    &started,
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        };
        start_soon_on_a_new_runtime();
        assert_eq!(started.load(Ordering::SeqCst), 1);
        abandoned.cancel();
        drop(first);
        // Once the first runtime has shut down, its timer is dropped, not reused.
        start_soon_on_a_new_runtime();
        assert_eq!(started.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_past_due_start_runs_at_once_and_the_timer_ends_with_its_client() {
        let starts = Starts::default();
        let started = Arc::new(AtomicUsize::new(0));
        let _now = starts.defer(Instant::now(), Instant::now(), &started);
        tokio::task::yield_now().await;
        assert_eq!(started.load(Ordering::SeqCst), 1);
        let _later = starts.defer(
            Instant::now() + Duration::from_millis(10),
            Instant::now(),
            &started,
        );
        let timer = starts
            .inner
            .first
            .get()
            .and_then(|(_, t)| t.queue().task.take());
        drop(starts);
        let Some(timer) = timer else {
            panic!("no timer task was started");
        };
        tokio::time::timeout(Duration::from_secs(1), timer)
            .await
            .expect("the timer task ended once its client was gone")
            .expect("the timer task did not fail");
    }
}
