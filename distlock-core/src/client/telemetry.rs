//! What the client reports of each lock: its metrics (feature `metrics`, through the
//! `metrics` facade) and its tracing events, each in one place. The names and labels
//! are listed in the crate docs.

use tracing::{debug, info, warn};

use super::locked::End;
use crate::client::options::LockOptions;
use crate::error::{Error, ErrorKind};
use crate::key::LockKey;
use crate::lease::LossReason;
use crate::token::FencingToken;

/// How a call to take a lock ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A guard was handed out.
    Acquired,
    /// A single try found the lock held.
    Busy,
    /// The wait's deadline passed.
    Timeout,
    /// Another error ended the call.
    Error,
}

impl Outcome {
    pub(crate) fn of_error(error: &Error) -> Self {
        if error.kind() == ErrorKind::Timeout {
            Outcome::Timeout
        } else {
            Outcome::Error
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// How one renewal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewalResult {
    Renewed,
    NotHeld,
    Failed,
}

impl RenewalResult {
    fn as_str(self) -> &'static str {
        match self {
            RenewalResult::Renewed => "renewed",
            RenewalResult::NotHeld => "not_held",
            RenewalResult::Failed => "failed",
        }
    }
}

/// How one request to the backend ended (`Metered`).
#[cfg(feature = "metrics")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StepResult {
    /// It answered, whatever the answer (a key found held is an answer).
    Ok,
    /// It failed as unavailable: the server could not be reached or answer.
    Unavailable,
    /// It failed on a time-out.
    Timeout,
    /// It failed otherwise.
    Error,
    /// The caller gave up on it before it answered.
    Cancelled,
}

#[cfg(feature = "metrics")]
impl StepResult {
    pub(crate) fn of_error(error: &Error) -> Self {
        match error.kind() {
            ErrorKind::Unavailable => StepResult::Unavailable,
            ErrorKind::Timeout => StepResult::Timeout,
            _ => StepResult::Error,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            StepResult::Ok => "ok",
            StepResult::Unavailable => "unavailable",
            StepResult::Timeout => "timeout",
            StepResult::Error => "error",
            StepResult::Cancelled => "cancelled",
        }
    }
}

/// A loss reason as a label value.
fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::NotHeld => "not_held",
        LossReason::RenewalFailed => "renewal_failed",
        LossReason::Expired => "expired",
        LossReason::HoldLimit => "hold_limit",
    }
}

/// The labels every metric of one lock carries: the backend, and the key where asked.
#[cfg(feature = "metrics")]
fn labels(backend: &str, key: &LockKey, options: &LockOptions) -> Vec<metrics::Label> {
    let mut labels = vec![metrics::Label::new("backend", backend.to_owned())];
    if options.key_labels() {
        labels.push(metrics::Label::new("key", key.as_str().to_owned()));
    }
    labels
}

#[cfg(feature = "metrics")]
fn with(
    mut labels: Vec<metrics::Label>,
    name: &'static str,
    value: &'static str,
) -> Vec<metrics::Label> {
    labels.push(metrics::Label::new(name, value));
    labels
}

/// Describes the metrics to the recorder in force: their help text and units.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::Unit;
        metrics::describe_counter!(
            "distlock_acquisitions_total",
            "Calls to take a lock, by outcome: acquired, busy, timeout, error"
        );
        metrics::describe_histogram!(
            "distlock_wait_seconds",
            Unit::Seconds,
            "How long a call to take a lock took, by outcome"
        );
        metrics::describe_histogram!(
            "distlock_hold_seconds",
            Unit::Seconds,
            "How long a lease was held, from its grant to its release or loss"
        );
        metrics::describe_counter!(
            "distlock_renewals_total",
            "Renewals of held leases, by result: renewed, not_held, failed"
        );
        metrics::describe_counter!(
            "distlock_losses_total",
            "Leases lost while held, by reason: not_held, renewal_failed, expired"
        );
        metrics::describe_gauge!("distlock_held", "Leases held now");
        metrics::describe_gauge!(
            "distlock_leader",
            "Whether a leader loop of this process leads"
        );
        metrics::describe_counter!(
            "distlock_backend_requests_total",
            "Requests sent to the backend, by step and result: ok, unavailable, timeout, error, cancelled"
        );
        metrics::describe_histogram!(
            "distlock_backend_request_seconds",
            Unit::Seconds,
            "How long each request to the backend took, by step and result"
        );
        metrics::describe_counter!(
            "distlock_breaker_transitions_total",
            "Changes of a client's circuit breaker, by the state entered: open, half-open, closed"
        );
    }
}

/// A call to take a lock ended after `waited`.
/// How long a call took, for the metrics: with the `metrics` feature off it reads no
/// clock and measures nothing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch {
    #[cfg(feature = "metrics")]
    started: tokio::time::Instant,
}

impl Stopwatch {
    pub(crate) fn start() -> Self {
        Stopwatch {
            #[cfg(feature = "metrics")]
            started: tokio::time::Instant::now(),
        }
    }
}

pub(crate) fn acquisition(
    backend: &str,
    key: &LockKey,
    options: &LockOptions,
    outcome: Outcome,
    started: Stopwatch,
) {
    let span = tracing::Span::current();
    span.record("outcome", outcome.as_str());
    #[cfg(feature = "metrics")]
    {
        let labels = with(labels(backend, key, options), "outcome", outcome.as_str());
        metrics::counter!("distlock_acquisitions_total", labels.clone()).increment(1);
        metrics::histogram!("distlock_wait_seconds", labels)
            .record(started.started.elapsed().as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, key, options, started);
}

/// A lease was granted and a guard now holds it.
pub(crate) fn granted(backend: &str, key: &LockKey, options: &LockOptions, fence: FencingToken) {
    tracing::Span::current().record("fence", fence.get());
    info!(%key, backend, %fence, "lock acquired");
    #[cfg(feature = "metrics")]
    metrics::gauge!("distlock_held", labels(backend, key, options)).increment(1.0);
    #[cfg(not(feature = "metrics"))]
    let _ = options;
}

/// A held lease, granted at `granted`, ended: released by its owner, or lost. The
/// hold time is read from the clock only when something records it.
pub(crate) fn ended(
    backend: &str,
    key: &LockKey,
    options: &LockOptions,
    fence: FencingToken,
    end: End,
    granted: tokio::time::Instant,
) {
    let held_ms = || granted.elapsed().as_millis() as u64;
    match end.loss() {
        None => debug!(%key, backend, %fence, held_ms = held_ms(), "lock released"),
        Some(reason) => {
            warn!(%key, backend, %fence, held_ms = held_ms(), reason = reason_label(reason), "lock lost: {reason}");
        }
    }
    #[cfg(feature = "metrics")]
    {
        let labels = labels(backend, key, options);
        metrics::gauge!("distlock_held", labels.clone()).decrement(1.0);
        metrics::histogram!("distlock_hold_seconds", labels.clone())
            .record(granted.elapsed().as_secs_f64());
        if let Some(reason) = end.loss() {
            let labels = with(labels, "reason", reason_label(reason));
            metrics::counter!("distlock_losses_total", labels).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = options;
}

/// One renewal of a held lease ended.
pub(crate) fn renewal(backend: &str, key: &LockKey, options: &LockOptions, result: RenewalResult) {
    if result == RenewalResult::Failed {
        debug!(%key, backend, "renewal failed");
    }
    #[cfg(feature = "metrics")]
    {
        let labels = with(labels(backend, key, options), "result", result.as_str());
        metrics::counter!("distlock_renewals_total", labels).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (key, options, result.as_str());
}

/// One request to the backend, the step `step` sent at `started`, ended with `result`.
#[cfg(feature = "metrics")]
pub(crate) fn step(
    backend: &str,
    step: &'static str,
    result: StepResult,
    started: tokio::time::Instant,
) {
    let labels = vec![
        metrics::Label::new("backend", backend.to_owned()),
        metrics::Label::new("step", step),
        metrics::Label::new("result", result.as_str()),
    ];
    metrics::counter!("distlock_backend_requests_total", labels.clone()).increment(1);
    metrics::histogram!("distlock_backend_request_seconds", labels)
        .record(started.elapsed().as_secs_f64());
}

/// A client's circuit breaker entered the state `to` (open, half-open, closed).
pub(crate) fn breaker(backend: &str, to: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "distlock_breaker_transitions_total",
        vec![
            metrics::Label::new("backend", backend.to_owned()),
            metrics::Label::new("state", to),
        ]
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, to);
}
