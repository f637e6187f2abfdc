//! What each simulated process does, per lock kind: the real client's calls, each
//! answer recorded, and the holder's belief checked against the server at each step.
//! This file holds what every kind shares (holding, working, waiting, asking the
//! server); each kind's life is in a file of its own.

mod jobs;
mod layers;
mod leader;
mod locks;
mod sets;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{Error, FencingToken, LockBackend, LockClient, LockGuard, LockKey};
use tokio::time::Instant;

use crate::history::{Proc, Recorder, What};
use crate::kind::Kind;
use crate::rng::SimRng;

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
    /// What each slot's process writes down to outlive a crash: the resume token of
    /// the term it leads.
    pub(crate) disk: Disk,
}

/// Per slot, the resume token its last incarnation wrote down.
pub(crate) type Disk = Arc<std::sync::Mutex<Vec<Option<distlock_core::ResumeToken>>>>;

/// Records a holder's end when dropped unended: a term's work dropped by the leader
/// loop, a job cancelled, a request's handler dropped by its layer.
struct EndOnDrop {
    rec: Recorder,
    proc: Proc,
    key: String,
    ended: bool,
}

impl EndOnDrop {
    fn new(rec: &Recorder, proc: Proc, key: String) -> Self {
        EndOnDrop {
            rec: rec.clone(),
            proc,
            key,
            ended: false,
        }
    }

    fn end(mut self, how: &'static str) {
        self.ended = true;
        self.rec.record(
            self.proc,
            What::Ended {
                key: self.key.clone(),
                how,
            },
        );
    }
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if !self.ended {
            self.rec.record(
                self.proc,
                What::Ended {
                    key: self.key.clone(),
                    how: "dropped",
                },
            );
        }
    }
}

/// What a holder needs to ask the server for its truth, apart from its process: a
/// request's handler owns one.
#[derive(Clone)]
pub(crate) struct Truth {
    server: Arc<dyn LockBackend>,
    ns: String,
}

impl Truth {
    /// A key as histories name it: without the run's namespace.
    fn logical(&self, key: &LockKey) -> String {
        key.as_str().replacen(&self.ns, "", 1)
    }

    /// The server's truth at this instant against a holder of `key` with `fence`
    /// that believes it holds: what is wrong, if anything. Asked of the server
    /// directly, not across the network, and at the same simulated instant.
    async fn disagrees(&self, key: &LockKey, fence: FencingToken, kind: Kind) -> Option<String> {
        let name = self.logical(key);
        if let Some(permits) = self.server.permits().filter(|_| kind.on_permits()) {
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

    /// The server's truth, as a holder asks it.
    fn truth(&self) -> Truth {
        Truth {
            server: self.server.clone(),
            ns: self.ns.clone(),
        }
    }

    /// The server's truth at this instant against `guard`, which believes it holds.
    async fn server_disagrees(&self, guard: &LockGuard, kind: Kind) -> Option<String> {
        self.truth()
            .disagrees(guard.key(), guard.fence(), kind)
            .await
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
        let end = EndOnDrop::new(&self.rec, self.proc, key);
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
                self.locks(kind, &mut rng).await;
            }
            Kind::Semaphore => self.semaphore(&mut rng).await,
            Kind::RwLock => self.rw_lock(&mut rng).await,
            Kind::Sets => self.sets(&mut rng).await,
            Kind::LimitLayer | Kind::LockLayer => self.layers(kind, &mut rng).await,
            Kind::LeaderLoop => self.lead(&mut rng).await,
            Kind::RunOnce => self.jobs(&mut rng).await,
        }
        self.rng = rng;
    }
}
