//! The client's circuit breaker: after a run of calls that found the backend
//! unavailable, acquisitions fail at once for a while instead of each waiting out
//! its own time-outs, then one probe call finds out whether the backend is back.
//!
//! Opt-in, through [`LockOptions::with_circuit_breaker`](crate::LockOptions::with_circuit_breaker).
//! It gates acquisitions only (`lock`, `try_lock`, `with_lock` and their kin): a
//! lease already held is never cut short by it, since its renewals and its release go
//! to the backend whatever the breaker's state, and the holder is told of a loss by
//! its validity as without a breaker.
//!
//! It sits around the backend as a backend of its own, [`Breaking`], as a tower layer
//! sits around a service: the client's acquisition path does not know of it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use tracing::warn;

use crate::backend::{
    ChangeStream, DynLockBackend, FairBackend, LockBackend, OperatorBackend, PermitBackend,
    SetBackend,
};
use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::lease::{
    AcquireRequest, ExtendRequest, Grant, LockInfo, ReleaseOutcome, Renewal, SetGrant,
};
use crate::token::OwnerToken;

use super::options::BreakerOptions;

/// A circuit breaker's state, as [`LockClient::health`](crate::LockClient::health)
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail at once with [`ErrorKind::CircuitOpen`] until `until`.
    Open {
        /// When the next call is let through as a probe.
        until: Instant,
    },
    /// The open time is over: the next call, or the one under way, is the probe that
    /// closes the breaker again or opens it for another round.
    HalfOpen,
}

#[derive(Debug)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant, failures: u32 },
    HalfOpen { probing: bool },
}

/// One client's breaker, shared by its clones.
#[derive(Debug)]
pub(crate) struct Breaker {
    options: BreakerOptions,
    backend: String,
    state: Mutex<State>,
}

/// A call the breaker let through; tell it how the call went with
/// [`Admission::record`]. A probe dropped without a result (its call was cancelled)
/// lets the next call probe instead.
pub(crate) struct Admission<'a> {
    breaker: &'a Breaker,
    probe: bool,
    recorded: bool,
}

impl Breaker {
    pub(crate) fn new(options: BreakerOptions, backend: &str) -> Self {
        Breaker {
            options,
            backend: backend.to_owned(),
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }

    fn state_lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets a call through, or fails at once with [`ErrorKind::CircuitOpen`] while
    /// the breaker is open (or a probe is under way).
    pub(crate) fn admit(&self) -> Result<Admission<'_>> {
        let mut state = self.state_lock();
        let probe = match &*state {
            State::Closed { .. } => false,
            State::Open { until, failures } => {
                let now = Instant::now();
                if now < *until {
                    return Err(self.open_error(*until - now, *failures));
                }
                *state = State::HalfOpen { probing: true };
                self.changed("half-open");
                true
            }
            State::HalfOpen { probing: true } => {
                return Err(Error::new(
                    ErrorKind::CircuitOpen,
                    "the circuit breaker is half-open and its probe call is under way",
                )
                .with_backend(self.backend.clone())
                .with_not_sent());
            }
            State::HalfOpen { probing: false } => {
                *state = State::HalfOpen { probing: true };
                true
            }
        };
        Ok(Admission {
            breaker: self,
            probe,
            recorded: false,
        })
    }

    fn open_error(&self, remaining: Duration, failures: u32) -> Error {
        Error::new(
            ErrorKind::CircuitOpen,
            format!(
                "the circuit breaker is open for {remaining:?} more, after {failures} consecutive calls found the backend unavailable; calls fail at once until then"
            ),
        )
        .with_backend(self.backend.clone())
        .with_not_sent()
        .with_retry_after(remaining)
    }

    /// The state now.
    pub(crate) fn state(&self) -> BreakerState {
        match &*self.state_lock() {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until, .. } if Instant::now() < *until => {
                BreakerState::Open { until: *until }
            }
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    fn changed(&self, to: &'static str) {
        warn!(backend = %self.backend, state = to, "circuit breaker {to}");
        super::telemetry::breaker(&self.backend, to);
    }
}

/// Whether an error means the backend could not be reached or did not answer: what
/// the breaker counts. Every other answer, an error included, shows it is there.
fn unreachable(error: &Error) -> bool {
    matches!(error.kind(), ErrorKind::Unavailable | ErrorKind::Timeout)
}

impl Admission<'_> {
    /// Records how the call went.
    pub(crate) fn record<T>(mut self, result: &Result<T>) {
        self.recorded = true;
        let failed = result.as_ref().err().is_some_and(unreachable);
        let breaker = self.breaker;
        let mut state = breaker.state_lock();
        let opened = |failures| State::Open {
            until: Instant::now() + breaker.options.open_for(),
            failures,
        };
        let next = match (&*state, failed) {
            (State::Closed { failures }, true) => {
                let failures = failures + 1;
                if failures >= breaker.options.failures() {
                    breaker.changed("open");
                    opened(failures)
                } else {
                    State::Closed { failures }
                }
            }
            (State::HalfOpen { .. }, true) if self.probe => {
                breaker.changed("open");
                opened(breaker.options.failures())
            }
            (State::HalfOpen { .. }, false) if self.probe => {
                breaker.changed("closed");
                State::Closed { failures: 0 }
            }
            (State::Closed { .. }, false) => State::Closed { failures: 0 },
            // A call let through before the breaker opened, ending after: the state
            // the other calls brought about stands.
            _ => return,
        };
        *state = next;
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if self.probe && !self.recorded {
            let mut state = self.breaker.state_lock();
            if let State::HalfOpen { probing: true } = *state {
                *state = State::HalfOpen { probing: false };
            }
        }
    }
}

/// A backend whose acquisition steps ([`LockBackend::try_grant`], for a racing and a
/// fair step alike, and [`SetBackend::try_grant_all`]) pass `breaker` first; every
/// other step goes straight to `inner`. One breaker may sit around several views of
/// one backend (the claims of a semaphore), which then open and close together.
#[derive(Debug)]
pub(crate) struct Breaking {
    inner: Arc<DynLockBackend>,
    breaker: Arc<Breaker>,
}

impl Breaking {
    pub(crate) fn new(inner: Arc<DynLockBackend>, breaker: Arc<Breaker>) -> Self {
        Breaking { inner, breaker }
    }

    /// Runs one acquisition step through the breaker.
    async fn admitted<T>(&self, step: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let admission = self.breaker.admit()?;
        let result = step.await;
        admission.record(&result);
        result
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl LockBackend for Breaking {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        self.admitted(self.inner.try_grant(request)).await
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.inner.release(key, owner).await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.inner.renew(request).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.inner.inspect(key).await
    }

    async fn release_after(&self, request: &ExtendRequest) -> Result<ReleaseOutcome> {
        self.inner.release_after(request).await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.inner.watch(key).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        // The fair step is `try_grant`, gated above; the rest of fair mode is not.
        self.inner.fair()
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        self.inner.sets().map(|_| self as &dyn SetBackend)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.inner.operator()
    }

    fn permits(&self) -> Option<&dyn PermitBackend> {
        self.inner.permits()
    }
}

#[async_trait]
impl SetBackend for Breaking {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let Some(sets) = self.inner.sets() else {
            // `sets` answers only where the inner backend has the step.
            return Err(Error::new(ErrorKind::Unsupported, "no set step").with_not_sent());
        };
        self.admitted(sets.try_grant_all(requests)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> Result<()> {
        Err(Error::new(ErrorKind::Unavailable, "connection refused"))
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_consecutive_failures_probes_once_and_closes() {
        let breaker = Breaker::new(BreakerOptions::new(3, Duration::from_secs(5)), "redis");
        for _ in 0..2 {
            breaker.admit().expect("closed").record(&unavailable());
        }
        // A success in between starts the count again.
        breaker.admit().expect("closed").record(&Ok(()));
        for _ in 0..3 {
            breaker.admit().expect("closed").record(&unavailable());
        }
        let open = breaker.admit().err().expect("open");
        assert_eq!(open.kind(), ErrorKind::CircuitOpen);
        assert!(open.is_retryable());
        assert!(open.to_string().contains("open for"), "{open}");
        assert!(matches!(breaker.state(), BreakerState::Open { .. }));

        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        let probe = breaker.admit().expect("the probe");
        // One probe at a time.
        let second = breaker.admit().err().expect("a probe is under way");
        assert_eq!(second.kind(), ErrorKind::CircuitOpen);
        probe.record(&unavailable());
        assert!(breaker.admit().is_err(), "open again");

        tokio::time::advance(Duration::from_secs(5)).await;
        breaker.admit().expect("the probe").record(&Ok(()));
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker.admit().expect("closed");
    }

    #[tokio::test(start_paused = true)]
    async fn only_unreachable_counts_and_a_cancelled_probe_lets_another_probe() {
        let breaker = Breaker::new(BreakerOptions::new(1, Duration::from_secs(1)), "etcd");
        breaker
            .admit()
            .expect("closed")
            .record(&Err::<(), _>(Error::new(ErrorKind::NotHeld, "not held")));
        assert_eq!(breaker.state(), BreakerState::Closed);
        breaker
            .admit()
            .expect("closed")
            .record(&Err::<(), _>(Error::new(ErrorKind::Timeout, "no answer")));
        assert!(matches!(breaker.state(), BreakerState::Open { .. }));
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(breaker.admit().expect("the probe"));
        breaker.admit().expect("another probe");
    }

    #[test]
    fn bad_options_are_a_configuration_error() {
        for options in [
            BreakerOptions::new(0, Duration::from_secs(1)),
            BreakerOptions::new(3, Duration::ZERO),
        ] {
            let error = options.validate().expect_err("refused");
            assert_eq!(error.kind(), ErrorKind::Configuration);
        }
        BreakerOptions::default().validate().expect("the defaults");
    }
}
