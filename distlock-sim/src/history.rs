//! What a run did, event by event, by the simulated clock: the input of every checker,
//! and the bytes the determinism check hashes.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// One simulated process incarnation: its slot, and how many times it had crashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Proc {
    /// The process's slot.
    pub slot: usize,
    /// Its incarnation: 0, then one more after each crash and restart.
    pub life: u32,
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}.{}", self.slot, self.life)
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// The process holds `key` from now, with `fence` (0 when unfenced).
    Acquired {
        /// The key, or the semaphore's, read-write lock's or election's name.
        key: String,
        /// The grant's fence.
        fence: u64,
        /// Whether the grant shares the key (a permit, a read), or holds it alone.
        shared: bool,
    },
    /// The next hold of `key` is a resumed term, of the fence its token names: the
    /// same term as an earlier incarnation's, not a new one.
    Resumed {
        /// The key.
        key: String,
        /// The term's fence.
        fence: u64,
    },
    /// The process acts as `key`'s holder now: its guard said it still holds.
    Working {
        /// The key.
        key: String,
    },
    /// The process no longer acts as `key`'s holder.
    Ended {
        /// The key.
        key: String,
        /// Released, lost, dropped, resigned...
        how: &'static str,
    },
    /// A wait for `key` ended after `took`, having been given `wait`.
    Waited {
        /// The key.
        key: String,
        /// The wait the caller gave.
        wait: Duration,
        /// How long it took.
        took: Duration,
        /// What it answered.
        outcome: String,
    },
    /// A `run_once` job ran for slot `slot`.
    Ran {
        /// The slot's number.
        slot: u64,
    },
    /// A fault began.
    Fault(String),
    /// The process crashed: its tasks are gone, nothing more it sends arrives.
    Crashed,
    /// The server restarted without its state: the leases (and whatever else the
    /// backend does not keep across a restart) are gone.
    Restarted,
    /// The process started (again).
    Started,
    /// A check made as the run went broke a promise.
    Broken(String),
    /// The server answered a step in a way the server, asked at that instant,
    /// contradicts (a grant whose lease is not there, a key answered held that is
    /// free, a renewal of a lease that is gone, a lease answered not held that is
    /// there).
    Answered(String),
    /// The server granted a fair waiter's step, or handed the key over at a release,
    /// while a waiter queued before it still had its place.
    Unfair(String),
    /// A holder renewed more often than its renewal interval and the changes to its
    /// key allow: renewal traffic that grows with the traffic on its name.
    Costly(String),
    /// A leader loop, shut down, had not reported each term its work led as ended
    /// (once, in order, a failed one as failed) to its `on_stopped_leading` callback.
    Unreported(String),
    /// The leader loops were shut down, and the election, asked directly, still had a
    /// leader: a term not resigned on shutdown.
    NotResigned(String),
    /// The server, asked at the instant a holder acted as holder, disagreed: no lease
    /// (or permit) with the holder's fence, or too many permits out.
    Disagreed(String),
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When, from the run's start, by the simulated clock.
    pub at: Duration,
    /// Which process (the server's and the network's events are process 0's slot
    /// `usize::MAX`).
    pub proc: Proc,
    /// What.
    pub what: What,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = if self.proc.slot == usize::MAX {
            "net".to_owned()
        } else {
            self.proc.to_string()
        };
        write!(
            f,
            "{:>9.3}s {who:>6} {:?}",
            self.at.as_secs_f64(),
            self.what
        )
    }
}

/// A run's history, shared by its processes.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    start: Instant,
    events: Arc<Mutex<Vec<Event>>>,
}

/// The slot of the network and the fault driver.
pub(crate) const NET: Proc = Proc {
    slot: usize::MAX,
    life: 0,
};

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder {
            start: Instant::now(),
            events: Arc::default(),
        }
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn now(&self) -> Duration {
        Instant::now() - self.start
    }

    pub(crate) fn record(&self, proc: Proc, what: What) {
        let at = self.now();
        self.events().push(Event { at, proc, what });
    }

    pub(crate) fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events())
    }
}

/// The FNV-1a hash of a history's events as printed: equal histories, equal hashes.
pub fn history_hash(events: &[Event]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for event in events {
        for byte in event.to_string().bytes().chain([b'\n']) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
