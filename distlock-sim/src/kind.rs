//! The lock kinds the simulation drives, the options their clients take, and the
//! constants their checkers share.

use std::time::Duration;

use distlock_core::{LockBackend, LockOptions};

/// A lock kind the simulation drives, each with its own checkers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// The fenced mutex, waiters racing: `lock` in a re-entrant scope, work under the
    /// guard (re-entering it now and then), `release` or drop.
    Mutex,
    /// The fenced mutex with fair (first come, first served) waits.
    FairMutex,
    /// The efficiency lock (no fence): exclusion only.
    Efficiency,
    /// A semaphore of two permits over four processes.
    Semaphore,
    /// Elections through `LeaderLoop::run`: one leader at a time, terms increasing,
    /// a leader again once the faults stop, and none once the loops are shut down. A
    /// leader writes its term's resume token down; restarted after a crash, it
    /// resumes that term (retrying a resume that failed), the same fence.
    LeaderLoop,
    /// Jobs through `run_once`: one run per slot, crashed runners included.
    RunOnce,
    /// A read-write lock: readers share, a writer holds alone.
    RwLock,
    /// Sets of keys through `lock_all`: each key of a set held alone.
    Sets,
    /// The fenced mutex with a bound on every hold (`with_hold_at_most`): no step as
    /// holder past the bound, and the server frees the lease by the bound plus the
    /// loss margin.
    Bounded,
    /// Requests to an in-process service through `distlock::tower::LimitLayer`, two
    /// permits across the processes: at most that many handlers run at once, each
    /// dropped by the layer on a loss, and each wait (`Acquire::Wait`) ended by its
    /// deadline.
    LimitLayer,
    /// Requests to an in-process service through `distlock::tower::LockLayer`, each
    /// under the lock of the key its request names (one of two): one handler per key
    /// at a time, fences increasing, a handler dropped by the layer on a loss.
    LockLayer,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 11] = [
        Kind::Mutex,
        Kind::FairMutex,
        Kind::Efficiency,
        Kind::Semaphore,
        Kind::LeaderLoop,
        Kind::RunOnce,
        Kind::RwLock,
        Kind::Sets,
        Kind::Bounded,
        Kind::LimitLayer,
        Kind::LockLayer,
    ];

    /// The kind's name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::FairMutex => "fair-mutex",
            Kind::Efficiency => "efficiency",
            Kind::Semaphore => "semaphore",
            Kind::LeaderLoop => "leader-loop",
            Kind::RunOnce => "run-once",
            Kind::RwLock => "rw-lock",
            Kind::Sets => "sets",
            Kind::Bounded => "bounded",
            Kind::LimitLayer => "limit-layer",
            Kind::LockLayer => "lock-layer",
        }
    }

    /// Whether `server` has what this kind needs; a kind it lacks is not run.
    pub fn runs_on(self, server: &dyn LockBackend) -> bool {
        match self {
            Kind::FairMutex => server.fair().is_some(),
            Kind::Semaphore | Kind::RwLock | Kind::LimitLayer => server.permits().is_some(),
            Kind::Sets => server.sets().is_some(),
            _ => true,
        }
    }

    /// The permits a holder of this kind's key shares it with (1 but for semaphores).
    pub(crate) fn limit(self) -> u64 {
        match self {
            Kind::Semaphore | Kind::LimitLayer => u64::from(SEMAPHORE_LIMIT),
            Kind::RwLock => u64::from(distlock_core::RwLock::PERMITS),
            _ => 1,
        }
    }

    /// Whether this kind's holders hold permits (where the server has them, for an
    /// election), not leases.
    pub(crate) fn on_permits(self) -> bool {
        matches!(
            self,
            Kind::Semaphore | Kind::RwLock | Kind::LeaderLoop | Kind::LimitLayer
        )
    }

    /// Whether this kind's grants carry fences.
    pub(crate) fn fenced(self) -> bool {
        !matches!(self, Kind::Efficiency)
    }
}

pub(crate) const SEMAPHORE_LIMIT: u32 = 2;
/// The lease every kind takes.
pub(crate) const TTL: Duration = Duration::from_millis(1000);
/// `run_once`'s slots: their interval, how late a process may fire one, and the
/// least hold.
pub(crate) const SLOT: Duration = Duration::from_millis(3000);
pub(crate) const SLOT_SKEW_MS: u64 = 500;
pub(crate) const AT_LEAST: Duration = Duration::from_millis(2000);
/// The `Bounded` kind's bound on a hold, and the margin after it by which the lease
/// is given back.
pub(crate) const AT_MOST: Duration = Duration::from_millis(1200);
pub(crate) const LOSS_MARGIN: Duration = Duration::from_millis(100);

/// The options every process's client takes for `kind`.
pub(crate) fn options(kind: Kind) -> LockOptions {
    let options = LockOptions::new(TTL)
        .with_fair(kind == Kind::FairMutex)
        .with_fenced(kind.fenced())
        .with_backoff(Duration::from_millis(20), Duration::from_millis(200));
    if kind == Kind::Bounded {
        options
            .with_hold_at_most(AT_MOST)
            .with_loss_margin(LOSS_MARGIN)
    } else {
        options
    }
}

/// The keys a kind's holders hold, as the guards name them.
pub(crate) fn keys_of(kind: Kind, server: &dyn LockBackend) -> Vec<String> {
    let one = |k: &str| vec![k.to_owned()];
    match kind {
        Kind::Mutex | Kind::FairMutex | Kind::Efficiency | Kind::Bounded => one("m"),
        Kind::Semaphore => one("s"),
        Kind::LeaderLoop if server.permits().is_some() => one("leader"),
        Kind::LeaderLoop => one(&format!("{}leader", distlock_core::LEASE_ELECTION_PREFIX)),
        Kind::RunOnce => one("job"),
        Kind::RwLock => one("rw"),
        Kind::Sets => ["a", "b", "c"].map(str::to_owned).to_vec(),
        Kind::LimitLayer => one("svc"),
        Kind::LockLayer => ["a", "b"].map(str::to_owned).to_vec(),
    }
}
