//! Sets of keys under one lock: `lock_all`.

use distlock_core::LockKey;
use tokio::time::Instant;

use crate::history::What;
use crate::kind::Kind;
use crate::rng::SimRng;

use super::{EndOnDrop, Process};

impl Process {
    /// Locks sets of the keys `a`, `b` and `c` until the run's end.
    pub(super) async fn sets(&self, rng: &mut SimRng) {
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
            if let Some(Ok(set)) = self.waited("a", wait, rng, acquire).await {
                self.hold_set(set, rng).await;
            }
            tokio::time::sleep(rng.millis(0, 300)).await;
        }
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
            ends.push(EndOnDrop::new(&self.rec, self.proc, name));
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
}
