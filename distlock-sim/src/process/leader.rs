//! The leader loop: elections through `LeaderLoop::run`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{Election, ResumeToken, TermEnd};

use crate::history::What;
use crate::kind::Kind;
use crate::rng::SimRng;

use super::{EndOnDrop, Process};

impl Process {
    /// Leads through `LeaderLoop::run` until the run's end (the quiet tail included):
    /// each term recorded as a hold, its steps checked against the server.
    pub(super) async fn lead(&self, rng: &mut SimRng) {
        let election = match self.client.election(&self.named("leader")) {
            Ok(election) => election,
            Err(error) => {
                self.record(What::Broken(format!("the election was refused: {error}")));
                return;
            }
        };
        // After a crash, the term the last incarnation wrote down is resumed, and the
        // resume tried again after an error a retry may cure, as a service does.
        let written = self.disk.lock().unwrap_or_else(|p| p.into_inner())[self.proc.slot];
        if let Some(token) = written {
            let _ = tokio::time::timeout_at(self.end, self.resume(&election, token, rng)).await;
        }
        // The terms the loop's work led (fence, and whether the work failed), and the
        // ends its stopped-leading callback reported (fence, and how).
        let led = std::cell::RefCell::new(Vec::<(u64, bool)>::new());
        let reported: Arc<Mutex<Vec<(u64, &'static str)>>> = Arc::default();
        let leader_loop = match election.leader_loop(&self.proc.to_string()) {
            Ok(leader_loop) => leader_loop
                .with_retry(Duration::from_millis(200))
                .on_stopped_leading({
                    let reported = reported.clone();
                    move |fence, end| {
                        let how = match end {
                            TermEnd::Lost(_) => "lost",
                            TermEnd::Returned => "returned",
                            TermEnd::Failed(_) => "failed",
                            TermEnd::Shutdown => "shutdown",
                            _ => "other",
                        };
                        reported
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((fence.get(), how));
                    }
                }),
            Err(error) => {
                self.record(What::Broken(format!(
                    "the leader loop was refused: {error}"
                )));
                return;
            }
        };
        let health = leader_loop.health();
        let terms = std::cell::RefCell::new(rng.clone());
        let outcome = leader_loop
            .run(
                |hold| {
                    let (terms, health, led) = (&terms, &health, &led);
                    async move {
                        let mut rng = terms.borrow_mut().clone();
                        terms.borrow_mut().next();
                        self.write_down(health.resume_token());
                        let key = self.logical(hold.key());
                        self.record(What::Acquired {
                            key: key.clone(),
                            fence: hold.fence().get(),
                            shared: false,
                        });
                        let end = EndOnDrop::new(&self.rec, self.proc, key);
                        // A term of a few steps, or longer. The work trusts the loop to
                        // drop it on a loss, as a leader's work does: it does not ask
                        // its guard, so a step after a loss is the loop's fault. One
                        // term in twelve (those of seven steps) ends by failing.
                        let steps = 1 + rng.below(12);
                        let fails = steps == 7;
                        led.borrow_mut().push((hold.fence().get(), false));
                        for _ in 0..steps {
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
                        end.end(if fails { "failed" } else { "resigned" });
                        if fails {
                            // Failed as it returns (a term dropped before is not).
                            if let Some(last) = led.borrow_mut().last_mut() {
                                last.1 = true;
                            }
                            Err("the leader's work failed")
                        } else {
                            Ok(())
                        }
                    }
                },
                tokio::time::sleep_until(self.end),
            )
            .await;
        if let Err(error) = outcome {
            self.record(What::Broken(format!("the leader loop failed: {error}")));
            return;
        }
        // Shut down: every term the work led was reported ended, once, in order, a
        // failed one as failed (or lost or shut down, where that came at the same
        // instant) and no other as failed.
        let led = led.into_inner();
        let reported = reported.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let agree = led.len() == reported.len()
            && led
                .iter()
                .zip(&reported)
                .all(|((fence, fails), (ended, how))| {
                    fence == ended
                        && if *fails {
                            matches!(*how, "failed" | "lost" | "shutdown")
                        } else {
                            *how != "failed"
                        }
                });
        if !agree {
            self.record(What::Unreported(format!(
                "{}: the leader loop led terms {led:?} (fence, failed) and reported ends {reported:?}",
                self.proc
            )));
        }
    }

    /// Writes the term's resume token down where the next incarnation finds it.
    fn write_down(&self, token: Option<ResumeToken>) {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())[self.proc.slot] = token;
    }

    /// Resumes the term `token` names, up to three tries: where it still lives, leads
    /// it for a few steps (the same term: the same fence) and resigns; where another
    /// leads or nobody does, gives up or leads a new term as a campaign would.
    async fn resume(&self, election: &Election, token: ResumeToken, rng: &mut SimRng) {
        let value = self.proc.to_string();
        for _ in 0..3 {
            match election.resume(&token, &value).await {
                Ok(Ok(leadership)) => {
                    let guard = leadership.into_guard();
                    let key = self.logical(guard.key());
                    if guard.fence() == token.fence() {
                        self.record(What::Resumed {
                            key,
                            fence: token.fence().get(),
                        });
                    }
                    self.hold(Kind::LeaderLoop, guard, false, rng).await;
                    return;
                }
                Ok(Err(_busy)) => return,
                Err(error) if error.is_retryable() => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_) => return,
            }
        }
    }
}
