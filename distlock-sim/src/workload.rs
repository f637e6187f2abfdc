//! What each simulated process does, per lock kind: the real client's calls, each
//! answer recorded, and the holder's belief checked against the server at each step.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{Error, LockBackend, LockClient, LockGuard, LockKey, LockOptions};
use tokio::time::Instant;

use crate::history::{Proc, Recorder, What};
use crate::rng::SimRng;

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
    /// and a leader again once the faults stop.
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
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 9] = [
        Kind::Mutex,
        Kind::FairMutex,
        Kind::Efficiency,
        Kind::Semaphore,
        Kind::LeaderLoop,
        Kind::RunOnce,
        Kind::RwLock,
        Kind::Sets,
        Kind::Bounded,
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
        }
    }

    /// Whether `server` has what this kind needs; a kind it lacks is not run.
    pub fn runs_on(self, server: &dyn LockBackend) -> bool {
        match self {
            Kind::FairMutex => server.fair().is_some(),
            Kind::Semaphore | Kind::RwLock => server.permits().is_some(),
            Kind::Sets => server.sets().is_some(),
            _ => true,
        }
    }

    /// The permits a holder of this kind's key shares it with (1 but for semaphores).
    pub(crate) fn limit(self) -> u64 {
        match self {
            Kind::Semaphore => u64::from(SEMAPHORE_LIMIT),
            Kind::RwLock => u64::from(distlock_core::RwLock::PERMITS),
            _ => 1,
        }
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

/// One process incarnation's view of the run.
pub(crate) struct Process {
    pub(crate) proc: Proc,
    pub(crate) client: LockClient,
    pub(crate) server: Arc<dyn LockBackend>,
    pub(crate) rec: Recorder,
    pub(crate) rng: SimRng,
    /// When the processes stop starting new work.
    pub(crate) end: Instant,
    /// This run's namespace, before every key it locks: runs of the same seed at
    /// once in one process (a test's threads) draw the same owner tokens, and the
    /// client's registry of armed cleanups is per process. Histories leave it out.
    pub(crate) ns: String,
}

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

/// Records a holder's end when dropped unended: a term's work dropped by the leader
/// loop, a job cancelled.
struct EndOnDrop<'a> {
    process: &'a Process,
    key: String,
    ended: bool,
}

impl EndOnDrop<'_> {
    fn end(mut self, how: &'static str) {
        self.ended = true;
        self.process.rec.record(
            self.process.proc,
            What::Ended {
                key: self.key.clone(),
                how,
            },
        );
    }
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.process.rec.record(
                self.process.proc,
                What::Ended {
                    key: self.key.clone(),
                    how: "dropped",
                },
            );
        }
    }
}

impl Process {
    fn record(&self, what: What) {
        self.rec.record(self.proc, what);
    }

    /// A key as histories name it: without the run's namespace.
    fn logical(&self, key: &LockKey) -> String {
        key.as_str().replacen(&self.ns, "", 1)
    }

    /// A name in this run's namespace.
    fn named(&self, name: &str) -> String {
        format!("{}{name}", self.ns)
    }

    /// Works under `guard` for a few steps drawn from `rng`: at each, the guard must
    /// still hold, and the server must agree. Returns whether it still held.
    async fn work(&self, guard: &LockGuard, kind: Kind, rng: &mut SimRng) -> bool {
        let key = self.logical(guard.key());
        for _ in 0..1 + rng.below(5) {
            // Sometimes longer than the TTL: renewal keeps the hold.
            tokio::time::sleep(rng.millis(5, 700)).await;
            if !guard.is_held() {
                return false;
            }
            self.record(What::Working { key: key.clone() });
            if let Some(disagreed) = self.server_disagrees(guard, kind).await {
                self.record(What::Disagreed(disagreed));
            }
            // The mutex's holds run in a re-entrant scope: asking for the key again
            // answers another hold of the same lease at once, and ending that hold
            // leaves the lease held (the next step's check asks the server).
            if kind == Kind::Mutex && rng.chance(300) {
                if let Some(broken) = self.reenter(guard, rng).await {
                    self.record(What::Broken(broken));
                }
            }
        }
        true
    }

    /// Asks for `guard`'s key again inside the re-entrant scope it was granted in,
    /// then ends that hold: what is wrong, if anything.
    async fn reenter(&self, guard: &LockGuard, rng: &mut SimRng) -> Option<String> {
        let name = self.logical(guard.key());
        if !guard.is_held() {
            // Asking now would go to the server: a new hold, not a re-entry.
            return None;
        }
        let started = Instant::now();
        let answer = self.client.try_lock(guard.key().as_str()).await;
        let fence = guard.fence();
        match answer {
            Ok(Ok(inner)) if inner.fence() == fence && started.elapsed().is_zero() => {
                if rng.chance(500) {
                    let _ = inner.release().await;
                } else {
                    drop(inner);
                }
                None
            }
            Ok(Ok(inner)) => Some(format!(
                "re-entering {name} (fence {fence}) answered fence {} after {:?}",
                inner.fence(),
                started.elapsed()
            )),
            // A hold lost just now cannot be re-entered; one still held must be.
            _ if !guard.is_held() => None,
            Ok(Err(busy)) => Some(format!(
                "re-entering {name} while holding it was refused: {busy:?}"
            )),
            Err(error) => Some(format!(
                "re-entering {name} while holding it failed: {error}"
            )),
        }
    }

    /// The server's truth at this instant against a holder that believes it holds:
    /// what is wrong, if anything. Asked of the server directly, not across the
    /// network, and at the same simulated instant.
    async fn server_disagrees(&self, guard: &LockGuard, kind: Kind) -> Option<String> {
        let name = self.logical(guard.key());
        let key = guard.key();
        let fence = guard.fence();
        if let Some(permits) = self
            .server
            .permits()
            .filter(|_| matches!(kind, Kind::Semaphore | Kind::RwLock | Kind::LeaderLoop))
        {
            let holders = match permits.holders(key).await {
                Ok(holders) => holders,
                Err(error) => return Some(format!("the server's holders of {name}: {error}")),
            };
            let count: u64 = holders.iter().map(|h| u64::from(h.count)).sum();
            let limit = kind.limit();
            if count > limit {
                return Some(format!(
                    "the server has {count} permits of {name} out, over its limit of {limit}"
                ));
            }
            if !holders.iter().any(|h| h.fence == fence) {
                return Some(format!(
                    "a holder of {name} with fence {fence} believes it holds; the server's holders are {:?}",
                    holders.iter().map(|h| h.fence.get()).collect::<Vec<_>>()
                ));
            }
            return None;
        }
        match self.server.inspect(key).await {
            Ok(Some(info)) if !kind.fenced() || info.fence == fence => None,
            Ok(Some(info)) => Some(format!(
                "a holder of {name} with fence {fence} believes it holds; the server has fence {}",
                info.fence
            )),
            Ok(None) => Some(format!(
                "a holder of {name} with fence {fence} believes it holds; the server has no lease"
            )),
            Err(error) => Some(format!("the server's lease of {name}: {error}")),
        }
    }

    /// Runs `wait` for `key`, sometimes dropped at an await before it ends, and
    /// records how long it took against its deadline.
    async fn waited<T, Fut>(
        &self,
        key: &str,
        wait: Duration,
        rng: &mut SimRng,
        acquire: Fut,
    ) -> Option<Result<T, Error>>
    where
        Fut: Future<Output = Result<T, Error>>,
    {
        let started = Instant::now();
        let answer = if rng.chance(100) {
            let cut = rng.millis(0, 600);
            match tokio::time::timeout(cut, acquire).await {
                Ok(answer) => answer,
                Err(_) => {
                    self.record(What::Waited {
                        key: key.to_owned(),
                        wait,
                        took: started.elapsed(),
                        outcome: "dropped".to_owned(),
                    });
                    return None;
                }
            }
        } else {
            acquire.await
        };
        self.record(What::Waited {
            key: key.to_owned(),
            wait,
            took: started.elapsed(),
            outcome: match &answer {
                Ok(_) => "ok".to_owned(),
                Err(error) => format!("{:?}", error.kind()),
            },
        });
        Some(answer)
    }

    /// Holds what `acquire` answered, works under it, then releases or drops it.
    async fn hold(&self, kind: Kind, guard: LockGuard, shared: bool, rng: &mut SimRng) {
        let key = self.logical(guard.key());
        self.record(What::Acquired {
            key: key.clone(),
            fence: guard.fence().get(),
            shared,
        });
        let end = EndOnDrop {
            process: self,
            key,
            ended: false,
        };
        // Sometimes the work is dropped at an await, the guard with it.
        let held = if rng.chance(80) {
            let cut = rng.millis(0, 1500);
            match tokio::time::timeout(cut, self.work(&guard, kind, rng)).await {
                Ok(held) => held,
                Err(_) => {
                    drop(guard);
                    end.end("dropped");
                    return;
                }
            }
        } else {
            self.work(&guard, kind, rng).await
        };
        if !held {
            end.end("lost");
            drop(guard);
        } else if rng.chance(850) {
            end.end("released");
            let _ = guard.release().await;
        } else {
            end.end("dropped");
            drop(guard);
        }
    }

    /// The process's life for `kind`, until the run's end.
    pub(crate) async fn run(mut self, kind: Kind) {
        self.record(What::Started);
        let mut rng = self.rng.clone();
        match kind {
            Kind::Mutex | Kind::FairMutex | Kind::Efficiency | Kind::Bounded => {
                while Instant::now() < self.end {
                    let wait = rng.millis(0, 1500);
                    let key = self.named("m");
                    let cycle = async {
                        if let Some(Ok(guard)) = self
                            .waited("m", wait, &mut rng, self.client.lock(&key, wait))
                            .await
                        {
                            self.hold(kind, guard, false, &mut rng).await;
                        }
                    };
                    if kind == Kind::Mutex {
                        self.client.reentrant(cycle).await;
                    } else {
                        cycle.await;
                    }
                    tokio::time::sleep(rng.millis(0, 300)).await;
                }
            }
            Kind::Semaphore => {
                let Ok(semaphore) = self.client.semaphore(&self.named("s"), SEMAPHORE_LIMIT) else {
                    self.record(What::Broken("a semaphore of 2 was refused".to_owned()));
                    return;
                };
                while Instant::now() < self.end {
                    let wait = rng.millis(0, 1500);
                    if let Some(Ok(guard)) = self
                        .waited("s", wait, &mut rng, semaphore.acquire(wait))
                        .await
                    {
                        self.hold(kind, guard, true, &mut rng).await;
                    }
                    tokio::time::sleep(rng.millis(0, 300)).await;
                }
            }
            Kind::RwLock => {
                let Ok(rw) = self.client.rw_lock(&self.named("rw")) else {
                    self.record(What::Broken("a read-write lock was refused".to_owned()));
                    return;
                };
                while Instant::now() < self.end {
                    let wait = rng.millis(0, 1500);
                    let read = rng.chance(700);
                    let acquire = async {
                        if read {
                            rw.read(wait).await
                        } else {
                            rw.write(wait).await
                        }
                    };
                    if let Some(Ok(guard)) = self.waited("rw", wait, &mut rng, acquire).await {
                        self.hold(kind, guard, read, &mut rng).await;
                    }
                    tokio::time::sleep(rng.millis(0, 300)).await;
                }
            }
            Kind::Sets => {
                while Instant::now() < self.end {
                    let wait = rng.millis(0, 1500);
                    let keys: Vec<String> = ["a", "b", "c"]
                        .into_iter()
                        .filter(|_| rng.chance(600))
                        .map(|k| self.named(k))
                        .collect();
                    if keys.is_empty() {
                        continue;
                    }
                    let acquire = self.client.lock_all(keys.iter().map(String::as_str), wait);
                    if let Some(Ok(set)) = self.waited("a", wait, &mut rng, acquire).await {
                        self.hold_set(set, &mut rng).await;
                    }
                    tokio::time::sleep(rng.millis(0, 300)).await;
                }
            }
            Kind::LeaderLoop => self.lead(&mut rng).await,
            Kind::RunOnce => self.jobs(&mut rng).await,
        }
        self.rng = rng;
    }

    /// Holds a set of keys: each key's hold recorded and checked as a mutex's, then
    /// the set released or dropped whole.
    async fn hold_set(&self, set: distlock_core::MultiGuard, rng: &mut SimRng) {
        let keys: Vec<LockKey> = set.keys().cloned().collect();
        let mut ends = Vec::new();
        for key in &keys {
            let name = self.logical(key);
            self.record(What::Acquired {
                key: name.clone(),
                fence: set.fence(key.as_str()).map_or(0, |f| f.get()),
                shared: false,
            });
            ends.push(EndOnDrop {
                process: self,
                key: name,
                ended: false,
            });
        }
        let cut = rng.chance(80).then(|| rng.millis(0, 1500));
        let mut steps = rng.clone();
        rng.next();
        let work = async {
            let rng = &mut steps;
            for _ in 0..1 + rng.below(4) {
                tokio::time::sleep(rng.millis(5, 700)).await;
                if !set.is_held() {
                    return false;
                }
                for key in &keys {
                    self.record(What::Working {
                        key: self.logical(key),
                    });
                    if let Some(guard) = set.guard(key.as_str()) {
                        if let Some(disagreed) = self.server_disagrees(guard, Kind::Sets).await {
                            self.record(What::Disagreed(disagreed));
                        }
                    }
                }
            }
            true
        };
        let held = match cut {
            Some(cut) => tokio::time::timeout(cut, work).await.ok(),
            None => Some(work.await),
        };
        let how = match held {
            None => "dropped",
            Some(false) => "lost",
            Some(true) if rng.chance(850) => "released",
            Some(true) => "dropped",
        };
        for end in ends {
            end.end(how);
        }
        if how == "released" {
            let _ = set.release().await;
        }
    }

    async fn lead(&self, rng: &mut SimRng) {
        let looped = self
            .client
            .election(&self.named("leader"))
            .and_then(|election| election.leader_loop(&self.proc.to_string()));
        let leader_loop = match looped {
            Ok(leader_loop) => leader_loop.with_retry(Duration::from_millis(200)),
            Err(error) => {
                self.record(What::Broken(format!(
                    "the leader loop was refused: {error}"
                )));
                return;
            }
        };
        let terms = std::cell::RefCell::new(rng.clone());
        let outcome = leader_loop
            .run(
                |hold| {
                    let terms = &terms;
                    async move {
                        let mut rng = terms.borrow_mut().clone();
                        terms.borrow_mut().next();
                        let key = self.logical(hold.key());
                        self.record(What::Acquired {
                            key: key.clone(),
                            fence: hold.fence().get(),
                            shared: false,
                        });
                        let end = EndOnDrop {
                            process: self,
                            key,
                            ended: false,
                        };
                        // A term of a few steps, or longer. The work trusts the loop to
                        // drop it on a loss, as a leader's work does: it does not ask
                        // its guard, so a step after a loss is the loop's fault.
                        for _ in 0..1 + rng.below(12) {
                            tokio::time::sleep(rng.millis(5, 700)).await;
                            self.record(What::Working {
                                key: self.logical(hold.key()),
                            });
                            if let Some(disagreed) =
                                self.server_disagrees(&hold, Kind::LeaderLoop).await
                            {
                                self.record(What::Disagreed(disagreed));
                            }
                        }
                        end.end("resigned");
                    }
                },
                tokio::time::sleep_until(self.end),
            )
            .await;
        if let Err(error) = outcome {
            self.record(What::Broken(format!("the leader loop failed: {error}")));
        }
    }

    async fn jobs(&self, rng: &mut SimRng) {
        let start = Instant::now() - self.rec.now();
        loop {
            let elapsed = self.rec.now();
            let slot = elapsed.as_millis() as u64 / SLOT.as_millis() as u64 + 1;
            let fire = start
                + SLOT * u32::try_from(slot).unwrap_or(u32::MAX)
                + rng.millis(0, SLOT_SKEW_MS);
            if fire >= self.end {
                return;
            }
            tokio::time::sleep_until(fire).await;
            let work = rng.millis(0, 1000);
            let _ = self
                .client
                .run_once(&self.named("job"), AT_LEAST, |_fence| async move {
                    self.record(What::Ran { slot });
                    tokio::time::sleep(work).await;
                })
                .await;
        }
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
    }
}
