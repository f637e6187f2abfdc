//! Jobs once per slot: `run_once`.

use tokio::time::Instant;

use crate::history::What;
use crate::kind::{AT_LEAST, SLOT, SLOT_SKEW_MS};
use crate::rng::SimRng;

use super::Process;

impl Process {
    /// Fires `run_once` for each slot, a little late by a random skew, until the
    /// run's end: each run recorded with its slot.
    pub(super) async fn jobs(&self, rng: &mut SimRng) {
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
