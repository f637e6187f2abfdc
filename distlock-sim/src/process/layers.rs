//! The tower layers: requests to an in-process service through `LimitLayer` (a
//! semaphore's permits across the processes) and `LockLayer` (a lock per key the
//! request names). The service's handler acts as holder of what the layer took, at
//! each of its steps; the layer alone stops it on a loss.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use distlock::tower::{Acquire, Held, LimitLayer, LockLayer};
use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

use crate::history::{Proc, Recorder, What};
use crate::kind::{Kind, SEMAPHORE_LIMIT};
use crate::rng::SimRng;

use super::{EndOnDrop, Process, Truth};

/// What a request asks of the service: the key it names (`LockLayer`'s), its
/// handler's steps, and when its caller sent it with what wait (`None`: one try).
#[derive(Debug, Clone)]
struct Plan {
    key: String,
    steps: Vec<Duration>,
    sent: Instant,
    wait: Option<Duration>,
}

/// The in-process service: runs a request's steps as holder of what the layer took,
/// each step checked against the server.
#[derive(Clone)]
struct Handler {
    rec: Recorder,
    proc: Proc,
    truth: Truth,
    kind: Kind,
}

impl Service<Request<Plan>> for Handler {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Plan>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let record = |what| this.rec.record(this.proc, what);
            let Some(held) = request.extensions().get::<Held>().cloned() else {
                record(What::Broken(
                    "a request was admitted without a Held".to_owned(),
                ));
                return Ok(Response::new(()));
            };
            let plan = request.body();
            let key = this.truth.logical(held.key());
            if let Some(wait) = plan.wait {
                record(What::Waited {
                    key: key.clone(),
                    wait,
                    took: plan.sent.elapsed(),
                    outcome: "ok".to_owned(),
                });
            }
            record(What::Acquired {
                key: key.clone(),
                fence: held.fence().get(),
                shared: this.kind == Kind::LimitLayer,
            });
            // Dropped by the layer on a loss: recorded as dropped.
            let end = EndOnDrop::new(&this.rec, this.proc, key.clone());
            for step in &plan.steps {
                tokio::time::sleep(*step).await;
                record(What::Working { key: key.clone() });
                if let Some(disagreed) = this
                    .truth
                    .disagrees(held.key(), held.fence(), this.kind)
                    .await
                {
                    record(What::Disagreed(disagreed));
                }
            }
            end.end("released");
            Ok(Response::new(()))
        })
    }
}

impl Process {
    /// Sends requests through `kind`'s layer until the run's end.
    pub(super) async fn layers(&self, kind: Kind, rng: &mut SimRng) {
        let handler = Handler {
            rec: self.rec.clone(),
            proc: self.proc,
            truth: self.truth(),
            kind,
        };
        let permits = match kind {
            Kind::LimitLayer => match self.client.semaphore(&self.named("svc"), SEMAPHORE_LIMIT) {
                Ok(permits) => Some(permits),
                Err(error) => {
                    self.record(What::Broken(format!(
                        "a semaphore of 2 was refused: {error}"
                    )));
                    return;
                }
            },
            _ => None,
        };
        while Instant::now() < self.end {
            let wait = rng.millis(0, 1500);
            let (acquire, wait) = if rng.chance(150) {
                (Acquire::Try, None)
            } else {
                (Acquire::Wait(wait), Some(wait))
            };
            let name = if rng.chance(500) { "a" } else { "b" };
            let steps = (0..1 + rng.below(5)).map(|_| rng.millis(5, 700)).collect();
            let sent = Instant::now();
            let plan = Plan {
                key: self.named(name),
                steps,
                sent,
                wait,
            };
            let logical = match kind {
                Kind::LimitLayer => "svc",
                _ => name,
            };
            let request = Request::new(plan);
            let answer = match &permits {
                Some(permits) => {
                    let service = LimitLayer::new(permits.clone(), acquire).layer(handler.clone());
                    self.send(service, request, rng).await
                }
                None => {
                    let key = |r: &Request<Plan>| Some(r.body().key.clone());
                    let layer = LockLayer::new(self.client.clone(), acquire, key);
                    self.send(layer.layer(handler.clone()), request, rng).await
                }
            };
            // A refusal: the wait (if there was one) ended by its deadline.
            if let (Some(status), Some(wait)) = (answer.filter(|s| !s.is_success()), wait) {
                if status != StatusCode::CONFLICT {
                    self.record(What::Waited {
                        key: logical.to_owned(),
                        wait,
                        took: sent.elapsed(),
                        outcome: format!("refused {}", status.as_u16()),
                    });
                }
            }
            tokio::time::sleep(rng.millis(0, 300)).await;
        }
    }

    /// Sends `request` through `service`, sometimes dropping it at an await: its
    /// answer's status, or `None` where it was dropped.
    async fn send<S>(
        &self,
        mut service: S,
        request: Request<Plan>,
        rng: &mut SimRng,
    ) -> Option<StatusCode>
    where
        S: Service<Request<Plan>, Response = Response<()>, Error = Infallible>,
    {
        if std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .is_err()
        {
            return None;
        }
        let call = service.call(request);
        let answer = if rng.chance(100) {
            tokio::time::timeout(rng.millis(0, 1500), call).await.ok()?
        } else {
            call.await
        };
        answer.ok().map(|response| response.status())
    }
}
