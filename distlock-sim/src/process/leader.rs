//! The leader loop: elections through `LeaderLoop::run`.

use std::time::Duration;

use crate::history::What;
use crate::kind::Kind;
use crate::rng::SimRng;

use super::{EndOnDrop, Process};

impl Process {
    /// Leads through `LeaderLoop::run` until the run's end (the quiet tail included):
    /// each term recorded as a hold, its steps checked against the server.
    pub(super) async fn lead(&self, rng: &mut SimRng) {
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
}
