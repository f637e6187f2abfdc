//! [`LockClient`]: the handle a service holds. Its acquisitions (a wait with a
//! deadline, one try), the work it runs under a lock, and how it is built and
//! layered over a backend; each acquisition goes through one
//! [`Attempt`](super::attempt::Attempt).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::time::Instant;
use tracing::{debug, Instrument};

use crate::backend::{
    acquire_as, acquire_in_turn_as, next_change, ChangeStream, DynLockBackend, LockBackendExt,
};
use crate::error::{Error, ErrorKind, Result};
use crate::fenced::{FencedHandle, FencedStore};
use crate::key::LockKey;
use crate::lease::{AcquireOutcome, Lease};
use crate::token::{FencingToken, OwnerToken};

use super::attempt::{leave_queue, Answer, Attempt, Engine, PendingGrant, Settled};
use super::background::Background;
use super::backoff::Backoff;
use super::breaker::{Breaker, BreakerState, Breaking};
use super::busy::Busy;
use super::cleanup;
use super::deferred::Starts;
use super::guard::LockGuard;
use super::local::{LocalQueues, LocalTurn};
use super::locked::Locked;
use super::options::LockOptions;
use super::reentrant;
use super::telemetry::{self, Outcome};

/// Runs `work` under `guard` and releases it: as [`LockClient::with_lock`] says.
async fn run_under<F, Fut, T>(guard: LockGuard, work: F) -> Result<Locked<T>>
where
    F: FnOnce(FencingToken) -> Fut,
    Fut: Future<Output = T>,
{
    let lost = guard.lost();
    let fence = guard.fence();
    let output = tokio::select! {
        biased;
        // `None` (a hold ended without a loss) cannot come while the guard is here.
        Some(reason) = lost => {
            let key = guard.key().clone();
            drop(guard);
            return Err(Error::new(
                ErrorKind::LockLost,
                format!("the lock {:?} was lost while work ran under it: {reason}", key.as_str()),
            ));
        }
        output = work(fence) => output,
    };
    Ok(Locked::new(output, guard.release_after_work().await))
}

/// `options` with its least hold ([`LockOptions::with_hold_at_least`]) fitted to
/// what `backend` grants, as the TTL is: every grant is asked for at least that long,
/// so a holder that vanishes keeps the key until then on the server. The hold is kept
/// by the client's clock: where the server's may run fast by the declared clock drift
/// ([`Capabilities::clock_drift`](crate::backend::Capabilities::clock_drift)), the
/// server is asked for the drift's allowance more. A configuration error when that is
/// above the backend's maximum TTL, or above the most a lease is held.
fn fit_hold_at_least(backend: &DynLockBackend, options: LockOptions) -> Result<LockOptions> {
    let Some(least) = options.hold_at_least() else {
        return Ok(options);
    };
    let drift = backend.capabilities().clock_drift.allowance(least);
    let fitted = backend
        .capabilities()
        .fit_ttl(least.saturating_add(drift))
        .map_err(|e| {
            let allowing = if drift.is_zero() {
                String::new()
            } else {
                format!(" (with {drift:?} for the clock drift it declares)")
            };
            Error::new(
                ErrorKind::Configuration,
                format!(
                    "the least hold {least:?}{allowing} cannot be granted by the {} backend: {}",
                    backend.name(),
                    e.message()
                ),
            )
            .with_source(e)
        })?;
    let options = options.with_hold_at_least(fitted);
    options.validate()?;
    Ok(options)
}

/// `options` as `backend` can keep them: checked, the TTL fitted to what it grants
/// (logged at debug where it differs), fair mode only where it has one, and the
/// least hold fitted ([`fit_hold_at_least`]).
fn fitted(backend: &DynLockBackend, options: LockOptions) -> Result<LockOptions> {
    options.validate()?;
    let asked = options.ttl();
    let ttl = backend
        .capabilities()
        .fit_ttl(asked)
        .map_err(|e| Error::new(ErrorKind::Configuration, e.message().to_owned()).with_source(e))?;
    let options = if ttl == asked {
        options
    } else {
        debug!(
            backend = backend.name(),
            ?asked,
            granted = ?ttl,
            "the ttl is fitted to what the backend grants"
        );
        options.with_ttl(ttl)
    };
    if options.fair() && backend.fair().is_none() {
        return Err(Error::new(
            ErrorKind::Configuration,
            format!("the {} backend has no fair mode", backend.name()),
        ));
    }
    fit_hold_at_least(backend, options)
}

/// The instant `wait` from now; a wait too long to count (`Duration::MAX`, say) is a
/// wait of a century, never an overflow.
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(wait.min(CENTURY))
        .or_else(|| now.checked_add(Duration::from_secs(365 * 24 * 3600)))
        .unwrap_or(now)
}

/// Runs `wait` until `deadline` at the latest: a wait never outlives its deadline,
/// whatever the server does. At the deadline, whatever is in flight (an attempt whose
/// reply has not come, a watch being set up, a pooled connection being waited for) is
/// dropped, and a grant it may still bring is released in the background as for any
/// dropped acquire; the error is of kind [`ErrorKind::Timeout`].
///
/// A plain function returning a combinator, not an `async fn`: an `async fn` (or an
/// `async` block) keeps the future it is given beside the copy it awaits, and so
/// doubles the size of the future every wait is polled in.
pub(crate) fn within_deadline<'k, T>(
    keys: &'k [LockKey],
    deadline: Instant,
    wait: impl Future<Output = Result<T>> + 'k,
) -> impl Future<Output = Result<T>> + 'k {
    tokio::time::timeout_at(deadline, wait).map(move |timed| match timed {
        Ok(result) => result,
        Err(_) => {
            // The keys as the caller wrote them, not as `LockKey`'s `Debug` shows them.
            let what = match keys {
                [key] => format!("{:?}", key.as_str()),
                keys => format!("{:?}", keys.iter().map(LockKey::as_str).collect::<Vec<_>>()),
            };
            Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "could not acquire {what} before the deadline: the server had not answered the step in flight"
                ),
            ))
        }
    })
}

/// The entry point users touch: takes locks on a backend and hands out guards.
///
/// Cheap to clone; clones share the backend.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(Arc::new(MemoryBackend::new()));
/// let guard = client.lock("reports/nightly", Duration::from_secs(5)).await?;
/// println!("holding with fence {}", guard.fence());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LockClient {
    /// The backend as given, for the shared kinds' claims, each of which layers its
    /// own view of it as [`backend`](Self::backend) is layered.
    raw: Arc<DynLockBackend>,
    backend: Arc<DynLockBackend>,
    options: LockOptions,
    pub(crate) local: Arc<LocalQueues>,
    starts: Starts,
    background: Background,
    breaker: Option<Arc<Breaker>>,
}

/// What [`LockClient::health`] found: the backend answered one round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    backend: String,
    latency: Duration,
    breaker: Option<BreakerState>,
}

impl Health {
    /// The backend's name ([`LockBackend::name`](crate::LockBackend::name)).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// How long the round trip took.
    pub fn latency(&self) -> Duration {
        self.latency
    }

    /// The client's circuit breaker's state, when it has one.
    pub fn breaker(&self) -> Option<BreakerState> {
        self.breaker
    }
}

/// How one attempt of a wait ended.
enum Tried {
    Acquired(LockGuard),
    Busy { remaining: Option<Duration> },
}

/// How one wait asks the server.
enum Waiter {
    /// Races the other clients, after its turn among this client's own tasks: with a
    /// fresh owner token each attempt, except after an attempt whose outcome is
    /// unknown (it failed, and may have been applied): the next attempts retry as that
    /// owner (a grant that was applied is granted again to its owner's retry, with
    /// its expiry restarted: [`LockBackend::try_grant`](crate::LockBackend::try_grant)),
    /// so that one cleanup, `uncertain`, covers them all until an answer settles it.
    Racing {
        turn: Option<LocalTurn>,
        uncertain: Option<(OwnerToken, PendingGrant<'static>)>,
        /// The owner to ask as instead of a fresh one: a term being resumed.
        resume: Option<OwnerToken>,
    },
    /// Keeps one owner token, and so its place in the key's queue on the server, for
    /// the whole wait; `pending` gives back what it may hold and leaves the queue if
    /// the wait ends without a guard.
    Queued {
        owner: OwnerToken,
        pending: PendingGrant<'static>,
    },
}

impl Waiter {
    fn racing(turn: LocalTurn) -> Self {
        Waiter::Racing {
            turn: Some(turn),
            uncertain: None,
            resume: None,
        }
    }

    fn queued(client: &LockClient, key: &LockKey) -> Self {
        let owner = OwnerToken::random();
        let pending = PendingGrant::queued(client.engine(), key, owner);
        Waiter::Queued { owner, pending }
    }

    /// A guard owns what the wait may have held: its cover is no longer needed.
    fn acquired(&mut self) {
        match self {
            Waiter::Queued { pending, .. } => pending.disarm(),
            Waiter::Racing { uncertain, .. } => {
                if let Some((_, mut pending)) = uncertain.take() {
                    pending.disarm();
                }
            }
        }
    }

    /// An answer without a guard. A queued wait keeps its place; a racing one's
    /// uncertain owner was not granted, or ran out, or was given back, or its earlier
    /// requests may still land late: its cleanup runs in the background, and the next
    /// attempt is a fresh owner's.
    fn answered(&mut self) {
        if let Waiter::Racing { uncertain, .. } = self {
            drop(uncertain.take());
        }
    }

    /// A failure that may hide a success: a racing wait retries as the failed
    /// attempt's owner, under its cleanup (`uncertain` is empty where the attempt was
    /// already that owner's, or a queued wait's, whose cover stays armed).
    fn failed(&mut self, uncertain: Vec<(OwnerToken, PendingGrant<'static>)>) {
        if let Waiter::Racing {
            uncertain: kept, ..
        } = self
        {
            if let Some(owner) = uncertain.into_iter().next() {
                *kept = Some(owner);
            }
        }
    }
}

/// What the client's calls reach: `backend`, its requests counted where the
/// `metrics` feature is on, behind `breaker` where there is one (so a refused call is
/// not counted as a request).
fn layered(backend: Arc<DynLockBackend>, breaker: Option<&Arc<Breaker>>) -> Arc<DynLockBackend> {
    #[cfg(feature = "metrics")]
    let backend: Arc<DynLockBackend> = Arc::new(super::metered::Metered::new(backend));
    match breaker {
        Some(breaker) => Arc::new(Breaking::new(backend, breaker.clone())),
        None => backend,
    }
}

/// The error of a wait whose deadline passed after `attempts` attempts: the last
/// retryable error as its source, and, when an attempt found the key held, the
/// holder's remaining TTL as then, less the time since, as its retry-after.
fn timed_out(
    key: &LockKey,
    attempts: u32,
    last_error: Option<Error>,
    held_for: Option<(Duration, Instant)>,
    now: Instant,
) -> Error {
    let mut error = Error::new(
        ErrorKind::Timeout,
        format!(
            "could not acquire {:?} before the deadline ({attempts} attempts)",
            key.as_str()
        ),
    );
    if let Some(last) = last_error {
        error = error.with_source(last);
    }
    if let Some((left, seen)) = held_for {
        error = error.with_retry_after(left.saturating_sub(now - seen));
    }
    error
}

impl LockClient {
    /// What an acquisition by this client needs of it ([`Engine`]).
    pub(crate) fn engine(&self) -> Engine<'_> {
        Engine {
            backend: &self.backend,
            options: &self.options,
            starts: &self.starts,
            background: &self.background,
            local: &self.local,
        }
    }

    /// A client with the default [`LockOptions`] (30 s TTL, auto-renewal on).
    pub fn new(backend: Arc<DynLockBackend>) -> Self {
        telemetry::describe();
        LockClient {
            raw: backend.clone(),
            backend: layered(backend, None),
            options: LockOptions::default(),
            local: Arc::default(),
            starts: Starts::default(),
            background: Background::default(),
            breaker: None,
        }
    }

    /// A client with `options`, so that the same options serve every backend: a TTL
    /// the backend cannot grant exactly is lengthened to the nearest one it can
    /// ([`Capabilities::fit_ttl`](crate::backend::Capabilities::fit_ttl): etcd's whole
    /// seconds of at least 2 s, say), logged at debug and read back through
    /// [`options`](Self::options); the renewal interval, loss margin and minimum
    /// validity that are not set follow the TTL granted. A configuration error when
    /// the timings do not fit together, the TTL is zero or above the backend's
    /// maximum, or fair mode is asked of a backend without it.
    pub fn with_options(backend: Arc<DynLockBackend>, options: LockOptions) -> Result<Self> {
        let breaker = options
            .circuit_breaker()
            .map(|b| Arc::new(Breaker::new(b, backend.name())));
        Self::assemble(backend, options, breaker)
    }

    /// As [`Self::with_options`], with the circuit breaker the options ask for given:
    /// one breaker may serve several clients (a semaphore's, one per claim). Its
    /// acquisition steps pass the breaker; nothing else in the client knows of it.
    pub(crate) fn assemble(
        backend: Arc<DynLockBackend>,
        options: LockOptions,
        breaker: Option<Arc<Breaker>>,
    ) -> Result<Self> {
        let options = fitted(&backend, options)?;
        telemetry::describe();
        Ok(LockClient {
            raw: backend.clone(),
            backend: layered(backend, breaker.as_ref()),
            options,
            local: Arc::default(),
            starts: Starts::default(),
            background: Background::default(),
            breaker,
        })
    }

    /// A client over `backend` with `options`, sharing this client's circuit breaker,
    /// deferred starts and background work (so that [`flush`](Self::flush) waits for
    /// both), but not its in-process turns of keys: what a kind builds for each of its
    /// claims on a name.
    pub(crate) fn sharing(
        &self,
        backend: Arc<DynLockBackend>,
        options: LockOptions,
    ) -> Result<LockClient> {
        let mut client = LockClient::assemble(backend, options, self.breaker.clone())?;
        client.starts = self.starts.clone();
        client.background = self.background.clone();
        Ok(client)
    }

    /// The backend as given, without the layers [`backend`](Self::backend) adds: for
    /// a kind that layers its own view of it.
    pub(crate) fn raw(&self) -> &Arc<DynLockBackend> {
        &self.raw
    }

    /// This client with other `options`, for one call or a few: the same backend,
    /// breaker, background releases ([`flush`](Self::flush) waits for both clients'),
    /// and in-process turns of keys (a key this client holds is busy to the copy
    /// too, as to any clone), with only the options different. Cheap: nothing is
    /// connected or started. For a job whose maximum runtime is longer than the
    /// client's TTL is meant for, or that names a holder of its own:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    /// use tokio::time::Instant;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new())); // a 30 s TTL
    /// let monthly = client.options().clone().with_ttl(Duration::from_secs(600));
    /// let guard = client
    ///     .configured(monthly)?
    ///     .lock("reports/monthly", Duration::from_secs(5))
    ///     .await?;
    /// assert!(guard.valid_until() > Instant::now() + Duration::from_secs(500));
    /// // The client's own options are unchanged.
    /// assert_eq!(client.options().ttl(), Duration::from_secs(30));
    /// guard.release().await
    /// # }
    /// ```
    ///
    /// The options are fitted and checked for the backend as
    /// [`with_options`](Self::with_options) does them (the same errors); their
    /// circuit-breaker setting is not read: the copy keeps this client's breaker, or
    /// none.
    pub fn configured(&self, options: LockOptions) -> Result<LockClient> {
        let options = fitted(&self.raw, options)?;
        Ok(LockClient {
            options,
            ..self.clone()
        })
    }

    /// One round trip to the backend ([`LockBackend::ping`](crate::LockBackend::ping)),
    /// for readiness probes: its latency, the backend's name and the circuit
    /// breaker's state. The round trip goes out whatever the breaker's state, and
    /// does not change it. An error (typed as the backend's, [`ErrorKind::Unavailable`]
    /// for a server that cannot be reached) when the backend does not answer within
    /// its own time-outs.
    pub async fn health(&self) -> Result<Health> {
        let started = Instant::now();
        self.backend.ping().await?;
        Ok(Health {
            backend: self.backend.name().to_owned(),
            latency: started.elapsed(),
            breaker: self.breaker.as_ref().map(|b| b.state()),
        })
    }

    /// Waits until the work this client (and its clones) does in tasks of its own has
    /// done its part: the release of each guard dropped without
    /// [`LockGuard::release`], and the cleanup of each attempt abandoned with its
    /// outcome unknown (a [`lock`](Self::lock) that reached its deadline with a step in
    /// flight, an acquire future dropped, a request whose reply was lost), which gives
    /// back whatever that attempt may have been granted and leaves the key's queue.
    ///
    /// Call it before a short-lived process ends (a command line, a job): shutting a
    /// runtime down drops those tasks, and what they had yet to give back stays held
    /// until its TTL runs out, in the way of every other waiter. Each step is bounded
    /// by the backend's own time-outs; wrap the call in `tokio::time::timeout` to bound
    /// it more tightly. A cleanup also releases again later, for a request that lands
    /// after its first pass ([`Capabilities::applied_within`](crate::backend::Capabilities::applied_within)
    /// says when): those later passes are not waited for, and a request that lands
    /// only once the process has ended runs out at its TTL.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let guard = client.lock("reports/nightly", Duration::from_secs(5)).await?;
    /// drop(guard); // released in the background
    /// client.flush().await; // ... and that release is done
    /// # Ok(())
    /// # }
    /// ```
    pub async fn flush(&self) {
        self.background.idle().await;
    }

    /// Runs `work` in a re-entrant scope: inside it, [`lock`](Self::lock),
    /// [`try_lock`](Self::try_lock) and [`with_lock`](Self::with_lock) of a key that
    /// this client (or a clone) holds in the same scope return another hold of that
    /// lease at once ([`LockGuard::reenter`]), where they would otherwise wait for
    /// themselves until their deadline. The lease is released when its last hold
    /// ends. Re-entrancy is never the default: outside a scope, asking again for a
    /// held key waits like any other waiter.
    ///
    /// The scope stands in for the thread that lock libraries for threads key
    /// re-entrancy on: it covers the future `work` and whatever it awaits, on the task
    /// that polls it. Tasks spawned from it are outside it and wait for the lock.
    /// Nested calls share the outer scope.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let wait = Duration::from_secs(1);
    /// client
    ///     .reentrant(async {
    ///         let outer = client.lock("ledger", wait).await?;
    ///         let inner = client.lock("ledger", wait).await?; // no wait: the same lease
    ///         assert_eq!(inner.fence(), outer.fence());
    ///         inner.release().await?; // ends this hold only
    ///         outer.release().await // releases the lease
    ///     })
    ///     .await
    /// # }
    /// ```
    pub async fn reentrant<F: Future>(&self, work: F) -> F::Output {
        reentrant::scope(work).await
    }

    /// The backend, as this client's calls reach it: with a circuit breaker
    /// ([`LockOptions::with_circuit_breaker`]), the backend seen through the breaker
    /// (the same name and capabilities; its acquisition steps pass the breaker), and
    /// with the `metrics` feature, through the meter that counts each request (see the
    /// crate docs' "Metrics and traces").
    pub fn backend(&self) -> &Arc<DynLockBackend> {
        &self.backend
    }

    /// The options in force: those given, with the TTL the backend grants (see
    /// [`with_options`](Self::with_options)).
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// Tries once: `Ok(guard)`, or `Err(`[`Busy`]`)` saying why the key was not taken
    /// (another owner holds it, with its remaining TTL where the backend tells it; or
    /// another task of this client holds or waits for it). The outer error is the
    /// backend's: bad input, or a server that could not answer. In fair mode it is
    /// granted only when no waiter is queued ahead of it, and leaves the queue when it
    /// is not.
    ///
    /// `client.try_lock(key).await?.ok()` is the guard as an `Option`;
    /// `client.try_lock(key).await??` treats busy as an error ([`Busy`]'s `From`).
    pub async fn try_lock(&self, key: &str) -> Result<std::result::Result<LockGuard, Busy>> {
        self.try_lock_observed(key, None).await
    }

    /// One try, observed: as [`try_lock`](Self::try_lock), or as `resume`'s owner.
    async fn try_lock_observed(
        &self,
        key: &str,
        resume: Option<OwnerToken>,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        let key = LockKey::new(key)?;
        let span = tracing::info_span!(
            "lock_try_acquire",
            key = %key,
            backend = self.backend.name(),
            fence = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        self.observed(
            &key,
            span,
            self.try_lock_once(&key, resume),
            std::result::Result::is_ok,
        )
        .await
    }

    /// Runs one call to take `key` in `span`, and reports how it ended (see the crate
    /// docs' "Metrics and traces"): acquired when `got` says so of its result. A
    /// combinator, as [`within_deadline`] is, so that `call` is held once.
    fn observed<'a, T: 'a>(
        &'a self,
        key: &'a LockKey,
        span: tracing::Span,
        call: impl Future<Output = Result<T>> + 'a,
        got: fn(&T) -> bool,
    ) -> impl Future<Output = Result<T>> + 'a {
        // The wait is timed for the metrics only: without them, no clock is read.
        let started = telemetry::Stopwatch::start();
        call.map(move |result| {
            let outcome = match &result {
                Ok(value) if got(value) => Outcome::Acquired,
                Ok(_) => Outcome::Busy,
                Err(error) => Outcome::of_error(error),
            };
            telemetry::acquisition(self.backend.name(), key, &self.options, outcome, started);
            result
        })
        .instrument(span)
    }

    /// One racing try as `owner`, an owner that may hold `key` already (a term being
    /// resumed after a restart): the backend grants an owner's own lease again, its
    /// fence kept and its expiry restarted
    /// ([`LockBackend::try_grant`](crate::LockBackend::try_grant)), and grants a free
    /// key to it as to any owner. Covered as a fresh owner is, so a reply lost
    /// releases.
    pub(crate) async fn try_lock_as(
        &self,
        key: &str,
        owner: OwnerToken,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        self.try_lock_observed(key, Some(owner)).await
    }

    /// One try, in the caller's span: as `resume`'s owner, racing, where it is given.
    async fn try_lock_once(
        &self,
        key: &LockKey,
        resume: Option<OwnerToken>,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        if let Some(guard) = reentrant::reenter(&self.local, key) {
            return Ok(Ok(guard));
        }
        let mut waiter = if self.options.fair() && resume.is_none() {
            Waiter::queued(self, key)
        } else {
            let Ok(turn) = self.local.of(key).try_lock_owned() else {
                return Ok(Err(Busy::this_client(key.clone())));
            };
            Waiter::Racing {
                turn: Some(turn),
                uncertain: None,
                resume,
            }
        };
        match self.attempt(key, &mut waiter).await? {
            Tried::Acquired(guard) => Ok(Ok(guard)),
            Tried::Busy { remaining } => {
                if let Waiter::Queued { owner, pending } = &mut waiter {
                    // Nothing was granted: leave the queue now, not a place later.
                    if leave_queue(&*self.backend, key, owner).await.is_ok() {
                        pending.disarm();
                    }
                }
                Ok(Err(Busy::held(key.clone(), remaining)))
            }
        }
    }

    /// Waits up to `wait` for the lock. Between attempts it sleeps with exponential
    /// backoff and full jitter, or until the backend reports a release when it can;
    /// never longer than the holder's remaining TTL. Transient backend errors are
    /// retried until the deadline. An [`ErrorKind::Timeout`] error when the deadline
    /// passes. `Duration::MAX` waits for as long as it takes.
    ///
    /// The wait never outlives its deadline, whatever the server does: a step still in
    /// flight then (an attempt whose reply has not come, a watch being set up, a
    /// connection being waited for) is abandoned as a dropped future is, below. A wait
    /// of zero therefore times out on any backend that answers over a network; for
    /// one attempt without a deadline of its own, use [`try_lock`](Self::try_lock),
    /// which the backend's own time-outs bound.
    ///
    /// Dropping the returned future at any point leaves no renewal task running, and
    /// a grant whose reply was still in flight is released in the background.
    pub async fn lock(&self, key: &str, wait: Duration) -> Result<LockGuard> {
        let key = LockKey::new(key)?;
        let deadline = deadline_after(wait);
        let span = tracing::info_span!(
            "lock_acquire",
            key = %key,
            backend = self.backend.name(),
            fence = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let wait = within_deadline(
            std::slice::from_ref(&key),
            deadline,
            self.lock_until(key.clone(), deadline),
        );
        self.observed(&key, span, wait, |_| true).await
    }

    async fn lock_until(&self, key: LockKey, deadline: Instant) -> Result<LockGuard> {
        if let Some(guard) = reentrant::reenter(&self.local, &key) {
            return Ok(guard);
        }
        let mut waiter = if self.options.fair() {
            Waiter::queued(self, &key)
        } else {
            // Tasks of this client waiting for the same key line up locally first.
            let turn = tokio::time::timeout_at(deadline, self.local.of(&key).lock_owned()).await;
            Waiter::racing(turn.map_err(|_| {
                Error::new(
                    ErrorKind::Timeout,
                    format!("could not acquire {:?} before the deadline: other tasks of this process were ahead", key.as_str()),
                )
            })?)
        };
        let mut changes = self.watch(&key, &waiter).await;
        let mut backoff = Backoff::new(self.options.backoff_initial(), self.options.backoff_max());
        let mut last_error: Option<Error> = None;
        let mut attempts = 0u32;
        // The holder's remaining TTL as the last attempt found it, and when.
        let mut held_for: Option<(Duration, Instant)> = None;
        loop {
            attempts += 1;
            let mut remaining = None;
            match self.attempt(&key, &mut waiter).await {
                Ok(Tried::Acquired(guard)) => {
                    debug!(attempts, "acquired");
                    return Ok(guard);
                }
                Ok(Tried::Busy { remaining: r }) => {
                    remaining = r;
                    held_for = r.map(|r| (r, Instant::now()));
                }
                // The breaker is open: fail at once, not at the deadline.
                Err(error) if error.kind() == ErrorKind::CircuitOpen => return Err(error),
                Err(error) if error.is_retryable() => {
                    debug!(%error, "attempt failed; retrying until the deadline");
                    last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(&key, attempts, last_error, held_for, now));
            }
            let mut pause = if changes.is_some() {
                self.options.backoff_max()
            } else {
                backoff.next_delay()
            };
            if self.options.fair() {
                // Keep the place in the queue: call again well within it.
                pause = pause.min(self.options.queue_place() / 3);
            }
            if let Some(r) = remaining {
                // Expiry is not always announced: look again when the holder's TTL ends.
                pause = pause.min(r + Duration::from_millis(1));
            }
            let wake = (now + pause).min(deadline);
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                change = next_change(&mut changes) => {
                    if change.is_none() {
                        debug!("change notifications ended; polling instead");
                        changes = None;
                    }
                }
            }
            // Woken at the deadline: an attempt now would be cut off as it starts.
            let now = Instant::now();
            if now >= deadline {
                return Err(timed_out(&key, attempts, last_error, held_for, now));
            }
        }
    }

    /// Acquires `key` (waiting up to `wait`), runs `work` with the fencing token, and
    /// releases: the work's output, with what became of the lease after it
    /// ([`Locked`]). Finished work is never turned into an error: a release that finds
    /// the lease gone is [`LeaseEnd::Lost`](super::LeaseEnd::Lost) beside the output. If the lock is lost
    /// while `work` runs, `work` is dropped at its next await point and an
    /// [`ErrorKind::LockLost`] error is returned. For work that returns a `Result`,
    /// see [`try_with_lock`](Self::try_with_lock).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LeaseEnd, LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let locks = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let done = locks
    ///     .with_lock("reports/daily", Duration::from_secs(5), |fence| async move {
    ///         format!("written under fence {fence}")
    ///     })
    ///     .await?;
    /// assert_eq!(done.lease(), LeaseEnd::Released);
    /// println!("{}", done.into_output());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<F, Fut, T>(
        &self,
        key: &str,
        wait: Duration,
        work: F,
    ) -> Result<Locked<T>>
    where
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(key, wait).await?;
        run_under(guard, work).await
    }

    /// Runs `work` once per schedule slot across every host that shares the backend,
    /// as ShedLock's `lockAtLeastFor` does: `work` runs under the lock `name` unless
    /// another holder has it, and the lease is held at least `at_least` from its grant,
    /// however soon `work` ends ([`LockOptions::with_hold_at_least`], with the longer
    /// of `at_least` and the options' own). A host whose scheduler fires the same slot
    /// a little later (its clock behind, its cron slow to start) finds the lock still
    /// held and skips: `Ok(Err(`[`Busy`]`))`. Otherwise it is
    /// [`with_lock`](Self::with_lock) without a wait: the output with what became of
    /// the lease, or [`ErrorKind::LockLost`] if the lock was lost while `work` ran.
    ///
    /// Choose `at_least` longer than the largest skew between the hosts' schedules and
    /// shorter than the slot's interval less that skew: the next slot's first runner
    /// must find the lease gone. A run longer than the interval holds the lock into the
    /// next slot, whose runners then skip it. A slot whose runner crashed mid-job is
    /// not run again within `at_least`: the grant asked the server for at least that
    /// long, and every renewal kept it, so the other hosts skip it; a crashed run that
    /// had outlasted `at_least` frees the slot at its TTL.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let backend = Arc::new(MemoryBackend::new());
    /// let (host_a, host_b) = (LockClient::new(backend.clone()), LockClient::new(backend));
    /// // A job every hour; the hosts' schedules differ by seconds.
    /// let at_least = Duration::from_secs(30 * 60);
    /// let ran = host_a.run_once("reports/hourly", at_least, |_fence| async { "built" }).await?;
    /// assert!(ran.is_ok());
    /// // The job took no time, but the slot stays taken: host B skips it.
    /// let skipped = host_b.run_once("reports/hourly", at_least, |_fence| async { "built" }).await?;
    /// assert!(skipped.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_once<F, Fut, T>(
        &self,
        name: &str,
        at_least: Duration,
        work: F,
    ) -> Result<std::result::Result<Locked<T>, Busy>>
    where
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = T>,
    {
        let least = self
            .options
            .hold_at_least()
            .map_or(at_least, |set| set.max(at_least));
        let client = LockClient {
            options: fit_hold_at_least(
                &self.backend,
                self.options.clone().with_hold_at_least(least),
            )?,
            ..self.clone()
        };
        let guard = match client.try_lock(name).await? {
            Ok(guard) => guard,
            Err(busy) => return Ok(Err(busy)),
        };
        run_under(guard, work).await.map(Ok)
    }

    /// [`with_lock`](Self::with_lock) for work that returns a `Result`: the work's
    /// error as it returned it, and the lock's own errors (a wait that ran out, a lock
    /// lost while the work ran) converted into the work's error type, so that one `?`
    /// serves both.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// #[derive(Debug)]
    /// enum AppError {
    ///     Lock(distlock_core::Error),
    ///     Empty,
    /// }
    ///
    /// impl From<distlock_core::Error> for AppError {
    ///     fn from(e: distlock_core::Error) -> Self {
    ///         AppError::Lock(e)
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), AppError> {
    /// let locks = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let count = locks
    ///     .try_with_lock("queue/emails", Duration::from_secs(5), |_fence| async move {
    ///         Ok::<_, AppError>(3)
    ///     })
    ///     .await?
    ///     .into_output();
    /// assert_eq!(count, 3);
    /// let empty = locks
    ///     .try_with_lock("queue/emails", Duration::from_secs(5), |_fence| async move {
    ///         Err::<u32, _>(AppError::Empty)
    ///     })
    ///     .await;
    /// assert!(matches!(empty, Err(AppError::Empty)));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_with_lock<F, Fut, T, E>(
        &self,
        key: &str,
        wait: Duration,
        work: F,
    ) -> std::result::Result<Locked<T>, E>
    where
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        self.with_lock(key, wait, work).await?.transpose()
    }

    /// [`with_lock`](Self::with_lock), with the work handed a [`FencedHandle`] that
    /// writes through `store` under the lock's fence: every write the work makes
    /// through it is refused by the store once a newer holder has written (an
    /// [`ErrorKind::StaleFence`] error), even if this process has not yet learnt that
    /// its lease ran out. See [`FencedHandle`] for an example.
    ///
    /// An [`ErrorKind::Configuration`] error, with nothing sent, for a client whose
    /// options make an efficiency lock ([`LockOptions::with_fenced`] off), on every
    /// backend: a fenced store needs a fenced lock.
    pub async fn with_fenced_lock<S, F, Fut, T>(
        &self,
        key: &str,
        wait: Duration,
        store: S,
        work: F,
    ) -> Result<Locked<T>>
    where
        S: FencedStore,
        F: FnOnce(FencedHandle<S>) -> Fut,
        Fut: Future<Output = T>,
    {
        if !self.options.fenced() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "with_fenced_lock needs a fenced lock, and this client's options make an \
                 efficiency lock (LockOptions::with_fenced(false))",
            ));
        }
        self.with_lock(key, wait, |fence| work(FencedHandle::new(store, fence)))
            .await
    }

    /// What wakes `waiter`: the key's releases, or, for a fair waiter, its turn.
    async fn watch(&self, key: &LockKey, waiter: &Waiter) -> Option<ChangeStream> {
        if !self.backend.capabilities().change_notification {
            return None;
        }
        let changes = match waiter {
            Waiter::Racing { .. } => self.backend.watch(key).await,
            Waiter::Queued { owner, .. } => match self.backend.fair() {
                Some(fair) => fair.watch_in_turn(key, owner).await,
                None => self.backend.watch(key).await,
            },
        };
        match changes {
            Ok(changes) => changes,
            Err(error) => {
                debug!(%error, "cannot watch the key; polling instead");
                None
            }
        }
    }

    /// One acquisition attempt. The grant is covered from before the request is sent
    /// until a guard owns it, so that a dropped future leaves nothing behind: by a
    /// cleanup of its own for a racing attempt, by the wait's for a queued one.
    async fn attempt(&self, key: &LockKey, waiter: &mut Waiter) -> Result<Tried> {
        let ttl = self.options.grant_ttl();
        let mut attempt = Attempt::new(self.engine());
        let answer = match waiter {
            // The owner of an attempt whose outcome is unknown, again: its cleanup is
            // armed already.
            Waiter::Racing {
                uncertain: Some((owner, _)),
                ..
            } => {
                attempt.covered(key, *owner);
                self.race(key, ttl, *owner).await
            }
            Waiter::Racing {
                resume: Some(owner),
                ..
            } => {
                let owner = *owner;
                // An owner this attempt did not make: a cleanup an earlier step as it
                // left armed (a resume whose reply was lost, say) must not release
                // what this step is granted.
                cleanup::supersede(key, &owner).await;
                attempt.fresh_as(key, owner);
                self.race(key, ttl, owner).await
            }
            Waiter::Racing { .. } => {
                let owner = attempt.fresh(key);
                self.race(key, ttl, owner).await
            }
            Waiter::Queued { owner, .. } => {
                attempt.covered(key, *owner);
                match self.handed_lease(key, ttl, *owner) {
                    Some(lease) => Ok(Answer::Granted(smallvec::smallvec![lease], None)),
                    None => {
                        let place = self.options.queue_place();
                        let holder = self.options.holder();
                        let step =
                            acquire_in_turn_as(&*self.backend, key, ttl, *owner, place, &holder);
                        step.await.map(|outcome| match outcome {
                            AcquireOutcome::Acquired(lease) => {
                                Answer::Granted(smallvec::smallvec![lease], None)
                            }
                            AcquireOutcome::Held { remaining } => Answer::Held {
                                index: 0,
                                remaining,
                            },
                        })
                    }
                }
            }
        };
        let turn = || match waiter {
            Waiter::Racing { turn, .. } => turn.take(),
            Waiter::Queued { .. } => None,
        };
        match attempt.settle(answer, turn).await {
            Settled::Guards(mut guards) => match guards.pop() {
                Some(guard) => {
                    waiter.acquired();
                    Ok(Tried::Acquired(guard))
                }
                None => Ok(Tried::Busy { remaining: None }),
            },
            Settled::Busy { remaining, .. } => {
                waiter.answered();
                Ok(Tried::Busy { remaining })
            }
            Settled::Failed { error, uncertain } => {
                waiter.failed(uncertain);
                Err(error)
            }
        }
    }

    /// One racing grant step for `key` as `owner`.
    async fn race(&self, key: &LockKey, ttl: Duration, owner: OwnerToken) -> Result<Answer> {
        let holder = self.options.holder();
        let fenced = self.options.fenced();
        let (outcome, checked_at) =
            acquire_as(&*self.backend, key, ttl, owner, &holder, fenced).await?;
        Ok(match outcome {
            AcquireOutcome::Acquired(lease) => {
                Answer::Granted(smallvec::smallvec![lease], checked_at)
            }
            AcquireOutcome::Held { remaining } => Answer::Held {
                index: 0,
                remaining,
            },
        })
    }

    /// The lease a release handed to `owner` on the server (contract point 10), if
    /// it has the minimum validity left; otherwise the waiter's own fair step, which
    /// finds the key its own and renews it for the TTL, is the way to it.
    fn handed_lease(&self, key: &LockKey, ttl: Duration, owner: OwnerToken) -> Option<Lease> {
        let place = self.options.queue_place();
        let lease = self.backend.handed_lease(key, ttl, owner, place)?;
        let remaining = lease
            .valid_until()
            .saturating_duration_since(Instant::now());
        (remaining >= self.options.min_validity()).then_some(lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    /// A lock's future is moved and polled whole: the wrappers around the wait (its
    /// deadline, its span and metrics) hold the wait once, not once per layer.
    #[test]
    fn the_wrappers_around_a_wait_hold_it_once() {
        let client = LockClient::new(Arc::new(MemoryBackend::new()));
        let key = LockKey::new("k").expect("key");
        let wait = std::mem::size_of_val(&client.lock_until(key.clone(), Instant::now()));
        let lock = std::mem::size_of_val(&client.lock("k", Duration::from_secs(1)));
        assert!(
            lock < wait + 512,
            "lock: {lock} bytes around a wait of {wait}"
        );
        let once = std::mem::size_of_val(&client.try_lock_once(&key, None));
        let try_lock = std::mem::size_of_val(&client.try_lock("k"));
        assert!(
            try_lock < once + 512,
            "try_lock: {try_lock} bytes around a try of {once}"
        );
    }
}
