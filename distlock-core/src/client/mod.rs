//! [`LockClient`]: waiting with a deadline, guards, auto-renewal and the loss signal,
//! on top of any [`LockBackend`](crate::LockBackend).

mod backoff;
mod deferred;
mod guard;
mod local;
mod options;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn, Instrument};

use crate::backend::{next_change, ChangeStream, DynLockBackend, LockBackendExt};
use crate::error::{Error, ErrorKind, Result};
use crate::fenced::{FencedHandle, FencedStore};
use crate::key::LockKey;
use crate::lease::AcquireOutcome;
use crate::token::{FencingToken, OwnerToken};

use self::backoff::Backoff;
use self::deferred::Starts;
pub use self::guard::{LockGuard, LossReason};
use self::local::{LocalQueues, LocalTurn};
pub use self::options::LockOptions;

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
    backend: Arc<DynLockBackend>,
    options: LockOptions,
    local: Arc<LocalQueues>,
    starts: Starts,
}

enum Attempt {
    Acquired(LockGuard),
    Busy { remaining: Option<Duration> },
}

impl LockClient {
    /// A client with the default [`LockOptions`] (30 s TTL, auto-renewal on).
    pub fn new(backend: Arc<DynLockBackend>) -> Self {
        LockClient {
            backend,
            options: LockOptions::default(),
            local: Arc::default(),
            starts: Starts::default(),
        }
    }

    /// A client with `options`; a configuration error when the timings do not fit
    /// together or the TTL is outside the backend's limits.
    pub fn with_options(backend: Arc<DynLockBackend>, options: LockOptions) -> Result<Self> {
        options.validate()?;
        backend
            .capabilities()
            .check_ttl(options.ttl())
            .map_err(|e| {
                Error::new(ErrorKind::Configuration, e.message().to_owned()).with_source(e)
            })?;
        Ok(LockClient {
            backend,
            options,
            local: Arc::default(),
            starts: Starts::default(),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<DynLockBackend> {
        &self.backend
    }

    /// The options in force.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// Tries once: a guard, or `None` when another holder has the lock (or another
    /// task of this client is already waiting for it).
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        let key = LockKey::new(key)?;
        let span =
            tracing::debug_span!("lock_try_acquire", key = %key, backend = self.backend.name());
        async {
            let Ok(turn) = self.local.of(&key).try_lock_owned() else {
                return Ok(None);
            };
            match self.attempt(&key, &mut Some(turn)).await? {
                Attempt::Acquired(guard) => Ok(Some(guard)),
                Attempt::Busy { .. } => Ok(None),
            }
        }
        .instrument(span)
        .await
    }

    /// Waits up to `wait` for the lock. Between attempts it sleeps with exponential
    /// backoff and full jitter, or until the backend reports a release when it can;
    /// never longer than the holder's remaining TTL. Transient backend errors are
    /// retried until the deadline. An [`ErrorKind::Timeout`] error when the deadline
    /// passes.
    ///
    /// Dropping the returned future at any point leaves no renewal task running, and
    /// a grant whose reply was still in flight is released in the background.
    pub async fn lock(&self, key: &str, wait: Duration) -> Result<LockGuard> {
        let key = LockKey::new(key)?;
        let deadline = Instant::now() + wait;
        let span = tracing::debug_span!("lock_acquire", key = %key, backend = self.backend.name());
        self.lock_until(key, deadline).instrument(span).await
    }

    async fn lock_until(&self, key: LockKey, deadline: Instant) -> Result<LockGuard> {
        self.backend.capabilities().check_ttl(self.options.ttl())?;
        // Tasks of this client waiting for the same key line up locally first.
        let turn = tokio::time::timeout_at(deadline, self.local.of(&key).lock_owned()).await;
        let mut turn = Some(turn.map_err(|_| {
            Error::new(
                ErrorKind::Timeout,
                format!("could not acquire {key:?} before the deadline: other tasks of this process were ahead"),
            )
        })?);
        let mut changes = self.watch(&key).await;
        let mut backoff = Backoff::new(self.options.backoff_initial(), self.options.backoff_max());
        let mut last_error: Option<Error> = None;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let mut remaining = None;
            match self.attempt(&key, &mut turn).await {
                Ok(Attempt::Acquired(guard)) => {
                    debug!(fence = %guard.fence(), attempts, "acquired");
                    return Ok(guard);
                }
                Ok(Attempt::Busy { remaining: r }) => remaining = r,
                Err(error) if error.is_retryable() => {
                    debug!(%error, "attempt failed; retrying until the deadline");
                    last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
            let now = Instant::now();
            if now >= deadline {
                let mut error = Error::new(
                    ErrorKind::Timeout,
                    format!("could not acquire {key:?} before the deadline ({attempts} attempts)"),
                );
                if let Some(last) = last_error {
                    error = error.with_source(last);
                }
                return Err(error);
            }
            let mut pause = if changes.is_some() {
                self.options.backoff_max()
            } else {
                backoff.next_delay()
            };
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
        }
    }

    /// Acquires `key` (waiting up to `wait`), runs `work` with the fencing token, and
    /// releases. If the lock is lost while `work` runs, `work` is dropped at its next
    /// await point and an [`ErrorKind::LockLost`] error is returned; if the release
    /// finds the lock was no longer held, the same error is returned, since `work` may
    /// have overlapped another holder.
    pub async fn with_lock<F, Fut, T>(&self, key: &str, wait: Duration, work: F) -> Result<T>
    where
        F: FnOnce(FencingToken) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(key, wait).await?;
        let lost = guard.lost();
        let fence = guard.fence();
        let output = tokio::select! {
            biased;
            reason = lost => {
                drop(guard);
                return Err(Error::new(
                    ErrorKind::LockLost,
                    format!("the lock {key:?} was lost while work ran under it: {reason}"),
                ));
            }
            output = work(fence) => output,
        };
        match guard.release().await {
            Ok(()) => Ok(output),
            Err(error) if error.kind() == ErrorKind::NotHeld => Err(Error::new(
                ErrorKind::LockLost,
                format!("the lock {key:?} was no longer held when the work finished"),
            )
            .with_source(error)),
            Err(error) => {
                // The work finished under a lease nobody reported lost; the lease will
                // run out at its TTL.
                warn!(%error, "release after work failed");
                Ok(output)
            }
        }
    }

    /// [`with_lock`](Self::with_lock), with the work handed a [`FencedHandle`] that
    /// writes through `store` under the lock's fence: every write the work makes
    /// through it is refused by the store once a newer holder has written (an
    /// [`ErrorKind::StaleFence`] error), even if this process has not yet learnt that
    /// its lease ran out. See [`FencedHandle`] for an example.
    pub async fn with_fenced_lock<S, F, Fut, T>(
        &self,
        key: &str,
        wait: Duration,
        store: S,
        work: F,
    ) -> Result<T>
    where
        S: FencedStore,
        F: FnOnce(FencedHandle<S>) -> Fut,
        Fut: Future<Output = T>,
    {
        self.with_lock(key, wait, |fence| work(FencedHandle::new(store, fence)))
            .await
    }

    async fn watch(&self, key: &LockKey) -> Option<ChangeStream> {
        if !self.backend.capabilities().change_notification {
            return None;
        }
        match self.backend.watch(key).await {
            Ok(changes) => changes,
            Err(error) => {
                debug!(%error, "cannot watch the key; polling instead");
                None
            }
        }
    }

    /// One acquisition attempt. The grant is covered from before the request is sent
    /// until a guard owns it, so that a dropped future leaves nothing behind.
    async fn attempt(&self, key: &LockKey, turn: &mut Option<LocalTurn>) -> Result<Attempt> {
        let owner = OwnerToken::random();
        let mut pending = PendingGrant::new(self.backend.clone(), key.clone(), owner);
        let outcome = self
            .backend
            .try_acquire_as(key, self.options.ttl(), owner)
            .await;
        match outcome {
            Ok(AcquireOutcome::Acquired(lease)) => {
                if lease.remaining() < self.options.min_validity() {
                    warn!(
                        remaining = ?lease.remaining(),
                        "granted lease is below the minimum validity; releasing it"
                    );
                    pending.disarm();
                    let _ = self.backend.release(key, &owner).await;
                    return Ok(Attempt::Busy { remaining: None });
                }
                pending.disarm();
                Ok(Attempt::Acquired(LockGuard::start(
                    self.backend.clone(),
                    lease,
                    self.options.clone(),
                    turn.take(),
                    &self.starts,
                )))
            }
            Ok(AcquireOutcome::Held { remaining }) => {
                pending.disarm();
                Ok(Attempt::Busy { remaining })
            }
            Err(error) => {
                // The request may have been applied with its reply lost: keep the
                // cleanup armed for faults, not for input the backend refused.
                if !(error.is_retryable() || error.kind() == ErrorKind::Backend) {
                    pending.disarm();
                }
                Err(error)
            }
        }
    }
}

/// When an abandoned attempt's cleanup releases: at once, then each delay after the
/// last (0.25 s, 1.25 s and 6.25 s after it was abandoned in all).
const CLEANUP_AGAIN_AFTER: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_millis(250),
    Duration::from_millis(1000),
    Duration::from_millis(5000),
];

/// Releases, in the background, a grant that nobody took over: the acquire future was
/// dropped mid-flight, or the request failed in a way that may hide a success.
struct PendingGrant {
    cleanup: Option<(Arc<DynLockBackend>, LockKey, OwnerToken)>,
}

impl PendingGrant {
    fn new(backend: Arc<DynLockBackend>, key: LockKey, owner: OwnerToken) -> Self {
        PendingGrant {
            cleanup: Some((backend, key, owner)),
        }
    }

    fn disarm(&mut self) {
        self.cleanup = None;
    }
}

impl Drop for PendingGrant {
    fn drop(&mut self) {
        let Some((backend, key, owner)) = self.cleanup.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // The abandoned request may still be on its way (queued in a pool or a
                // proxy, say) and land after a release: released again a little later,
                // and later still, it is gone before long whenever it lands within
                // that time; otherwise it runs out at its TTL.
                for delay in CLEANUP_AGAIN_AFTER {
                    tokio::time::sleep(delay).await;
                    if let Err(error) = backend.release(&key, &owner).await {
                        debug!(%error, key = %key, "cleanup of an abandoned attempt failed; it runs out at its ttl");
                    }
                }
            });
        }
    }
}
