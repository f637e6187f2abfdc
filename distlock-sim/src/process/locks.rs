//! Single keys: the fenced mutex (racing with re-entrant holds, fair, bounded), the
//! efficiency lock, semaphores and read-write locks.

use tokio::time::Instant;

use crate::history::What;
use crate::kind::{Kind, SEMAPHORE_LIMIT};
use crate::rng::SimRng;

use super::Process;

impl Process {
    /// Locks the key `m` until the run's end, each hold of the racing mutex in a
    /// re-entrant scope.
    pub(super) async fn locks(&self, kind: Kind, rng: &mut SimRng) {
        while Instant::now() < self.end {
            let wait = rng.millis(0, 1500);
            let key = self.named("m");
            let cycle = async {
                if let Some(Ok(guard)) = self
                    .waited("m", wait, rng, self.client.lock(&key, wait))
                    .await
                {
                    self.hold(kind, guard, false, rng).await;
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

    /// Takes permits of the semaphore `s` until the run's end.
    pub(super) async fn semaphore(&self, rng: &mut SimRng) {
        let Ok(semaphore) = self.client.semaphore(&self.named("s"), SEMAPHORE_LIMIT) else {
            self.record(What::Broken("a semaphore of 2 was refused".to_owned()));
            return;
        };
        while Instant::now() < self.end {
            let wait = rng.millis(0, 1500);
            if let Some(Ok(guard)) = self.waited("s", wait, rng, semaphore.acquire(wait)).await {
                self.hold(Kind::Semaphore, guard, true, rng).await;
            }
            tokio::time::sleep(rng.millis(0, 300)).await;
        }
    }

    /// Reads (mostly) and writes under the read-write lock `rw` until the run's end.
    pub(super) async fn rw_lock(&self, rng: &mut SimRng) {
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
            if let Some(Ok(guard)) = self.waited("rw", wait, rng, acquire).await {
                self.hold(Kind::RwLock, guard, read, rng).await;
            }
            tokio::time::sleep(rng.millis(0, 300)).await;
        }
    }
}
