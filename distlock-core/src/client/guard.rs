//! [`LockGuard`]: a held lock, its renewal, and the signal that it was lost.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout_at, Instant};
use tracing::{debug, warn, Instrument};

use crate::backend::{next_change, DynLockBackend, LockBackendExt};
use crate::client::background::Background;
use crate::client::cleanup::{self, Pass};
use crate::client::deferred::{Deferred, DeferredTask, Starts};
use crate::client::local::LocalTurn;
use crate::client::locked::{End, LeaseEnd};
use crate::client::options::LockOptions;
use crate::client::telemetry::{self, RenewalResult};
use crate::error::{Error, ErrorKind, Result};
use crate::fenced::{FencedHandle, FencedStore};
use crate::key::LockKey;
use crate::lease::{ExtendOutcome, Lease, LossReason, ReleaseOutcome};
use crate::token::{FencingToken, OwnerToken};

#[derive(Debug, Clone, Copy)]
struct Status {
    valid_until: Instant,
    /// How the lease's hold ended, once it has.
    ended: Option<End>,
    /// Until when a release keeps the lease instead of deleting it (a hold at least:
    /// [`LockOptions::with_hold_at_least`]).
    keep_until: Option<Instant>,
    /// Whether the last renewal was cut short by the hold's limit: the validity then
    /// runs out because of the limit, and its loss is the limit's.
    limited: bool,
}

pub(crate) struct Shared {
    backend: Arc<DynLockBackend>,
    /// The supervisor's deferred start, scheduled right after the grant (see
    /// [`Deferred`]).
    supervisor: DeferredTask,
    /// Keeps the client's timer task, which starts the supervisor, alive.
    _starts: Starts,
    /// The client's count of background work: a release on drop is counted there.
    background: Background,
    /// How many holds are live (more than one once [re-entered](LockGuard::reenter)).
    count: AtomicUsize,
    /// The lease as granted: key, owner, fence and TTL. Its validity as renewed is in
    /// `status`.
    lease: Lease,
    options: LockOptions,
    /// The validity as renewed, and the loss once recorded; `changed` is notified
    /// after each change. A mutex and one `Notify` rather than a `watch` channel: a
    /// short hold that nobody watches then costs no wake-up bookkeeping on release.
    status: std::sync::Mutex<Status>,
    changed: Notify,
    /// Whether anything has waited on `changed` (a [`LockGuard::lost`] future, the
    /// supervisor): until then a change wakes no one, and notifies no one.
    watched: AtomicBool,
    /// This guard's turn at the key among its client's own tasks: passed on when the
    /// lock is lost, or once a release has been applied.
    turn: std::sync::Mutex<Option<LocalTurn>>,
    /// When the lease was granted: the start of its hold time.
    granted: Instant,
    /// When the hold reaches its limit ([`LockOptions::with_hold_at_most`]).
    limit: Option<Instant>,
    /// One extend in flight at a time (the supervisor's renewal, a user's
    /// [`LockGuard::extend`]): with two in flight, the server keeps the expiry of the
    /// one it applied last, which a client reading replies in the order they come
    /// (a pool answers out of order) cannot tell; one after the other, the last reply
    /// is the last applied.
    extending: tokio::sync::Mutex<()>,
}

impl Deferred for Shared {
    fn task(&self) -> &DeferredTask {
        &self.supervisor
    }

    fn start(self: Arc<Self>) {
        let granted = self.granted;
        self.supervisor.start_with(|| {
            let span =
                tracing::debug_span!("lock_renewal", key = %self.key(), fence = %self.fence());
            tokio::spawn(supervise(self.clone(), granted).instrument(span))
        });
    }
}

impl Shared {
    fn key(&self) -> &LockKey {
        self.lease.key()
    }

    /// The release step for this hold: a fair lock's lease through the backend's
    /// fair release ([`FairBackend::release_in_turn`](crate::backend::FairBackend::release_in_turn)).
    async fn release_lease(&self) -> Result<ReleaseOutcome> {
        if let Some(left) = self.kept_for() {
            return self.keep_for(left).await;
        }
        let (key, owner) = (self.key(), self.lease.owner());
        match self.backend.fair().filter(|_| self.options.fair()) {
            Some(fair) => fair.release_in_turn(key, owner).await,
            None => self.backend.release(key, owner).await,
        }
    }

    fn fence(&self) -> FencingToken {
        self.lease.fence()
    }

    /// How much longer a release must keep the lease (a hold at least), if at all.
    fn kept_for(&self) -> Option<Duration> {
        let until = self.status().keep_until?;
        let left = until.checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// The release of a lease to be kept `left` longer: the backend's early release
    /// ([`LockBackend::release_after`](crate::LockBackend::release_after)), which keeps
    /// the key until then and frees it then. A backend without that step renews only
    /// to the granted TTL: it renews once instead, and only when the lease would end
    /// sooner, and the key stays taken until the lease ends.
    async fn keep_for(&self, left: Duration) -> Result<ReleaseOutcome> {
        let capabilities = self.backend.capabilities();
        let ttl = capabilities.fit_ttl(left)?.min(self.lease.ttl());
        let _one_at_a_time = self.extending.lock().await;
        debug!(key = %self.key(), ?ttl, "released before its least hold: kept until then");
        match self.backend.release_lease_after(&self.lease, ttl).await {
            Err(e) if e.kind() == ErrorKind::Unsupported && e.was_not_sent() => {}
            answered => return answered,
        }
        let valid = self.status().valid_until;
        if valid.saturating_duration_since(Instant::now()) >= left {
            return Ok(ReleaseOutcome::Released);
        }
        Ok(
            match self.backend.extend(&self.lease, self.lease.ttl()).await? {
                ExtendOutcome::Extended(_) => ReleaseOutcome::Released,
                ExtendOutcome::NotHeld => ReleaseOutcome::NotHeld,
            },
        )
    }

    /// The TTL a renewal asks for, and whether the hold's limit cut it short: the
    /// options' TTL, or, where the limit comes sooner, one that ends the lease a loss
    /// margin after the limit (fitted to the backend, so never below its minimum), so
    /// that the loss is signalled at the limit and the server's lease ends soon after
    /// even if the holder is gone. A backend that renews only to the granted TTL gets
    /// that TTL.
    fn renewal_ttl(&self) -> (Duration, bool) {
        if !self.backend.capabilities().extend_any_ttl {
            return (self.lease.ttl(), false);
        }
        let ttl = self.options.ttl();
        // Within a least hold, never shorter than what is left of it: a holder that
        // vanishes after this renewal still keeps the key that long on the server.
        if let Some(kept) = self.kept_for().filter(|kept| *kept > ttl) {
            let fitted = self.backend.capabilities().fit_ttl(kept).unwrap_or(ttl);
            return (fitted.max(ttl), false);
        }
        let Some(limit) = self.limit else {
            return (ttl, false);
        };
        let end = limit + self.options.loss_margin();
        let left = end.saturating_duration_since(Instant::now());
        if left >= ttl {
            return (ttl, false);
        }
        match self.backend.capabilities().fit_ttl(left) {
            Ok(fitted) if fitted < ttl => (fitted, true),
            _ => (ttl, false),
        }
    }

    /// Records that the validity now runs out because of the hold's limit.
    fn mark_limited(&self) {
        self.update(|s| {
            s.limited = true;
            false
        });
    }

    /// Stops the supervisor: never started if still waiting, aborted if running.
    fn cancel_supervisor(&self) {
        self.supervisor.cancel();
    }

    /// The status now.
    fn status(&self) -> Status {
        *self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change` to the status; when it reports a change, wakes whoever waits
    /// on one. Returns what `change` returned.
    fn update(&self, change: impl FnOnce(&mut Status) -> bool) -> bool {
        let changed = change(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
        // A watcher sets `watched` before it reads the status under the mutex: either
        // it read after this change, or its flag is seen here.
        if changed && self.watched.load(Ordering::SeqCst) {
            self.changed.notify_waiters();
        }
        changed
    }

    /// A future that completes at the next change of the status. Create it before
    /// reading the status, so that a change in between is not missed.
    fn next_change(&self) -> tokio::sync::futures::Notified<'_> {
        self.watched.store(true, Ordering::SeqCst);
        self.changed.notified()
    }

    /// Records the loss once; the first reason wins. A loss passes the local turn on
    /// at once: the lock is no longer this guard's.
    fn mark_lost(&self, reason: LossReason) {
        self.mark_ended(End::Lost(reason));
    }

    /// Records the end of the hold once; the first wins.
    fn mark_ended(&self, end: End) {
        let first = self.update(|s| {
            if s.ended.is_some() {
                return false;
            }
            s.ended = Some(end);
            true
        });
        self.after_end(end, first);
    }

    /// What follows the end of the hold: told to the metrics when it was recorded
    /// just now (`first`); a loss (not a release) passes the local turn on at once.
    fn after_end(&self, end: End, first: bool) {
        if first {
            telemetry::ended(
                self.backend.name(),
                self.key(),
                &self.options,
                self.fence(),
                end,
                self.granted,
            );
        }
        if end != End::Released {
            self.pass_turn();
        }
    }

    /// Lets the next task of this client that waits for the key go ahead.
    fn pass_turn(&self) {
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// How the hold ended, or `None` while the lock is held. Read from the clock, not
    /// only from what the supervisor has recorded: once the validity less the loss
    /// margin has run out, the loss is recorded here and now, so a holder that asks
    /// before it acts is told in time even when the supervisor task runs late (a
    /// starved runtime, a paused process).
    fn current_end(&self) -> Option<End> {
        let status = self.status();
        if status.ended.is_some() {
            return status.ended;
        }
        let now = Instant::now();
        if self.limit.is_some_and(|limit| now >= limit) {
            self.mark_lost(LossReason::HoldLimit);
        } else if now < self.loss_at(status) {
            return None;
        } else {
            self.mark_lost(self.run_out_of(status));
        }
        self.status().ended
    }

    /// Why the lock was lost, or `None` while it is held: read from the clock, as
    /// [`LockGuard::loss`] reads it, without a hold of the lease.
    pub(crate) fn loss_now(&self) -> Option<LossReason> {
        self.current_loss()
    }

    /// Why the lock was lost, or `None` while it is held (or once released).
    fn current_loss(&self) -> Option<LossReason> {
        self.current_end().and_then(End::loss)
    }

    /// When the validity less the loss margin runs out.
    fn loss_at(&self, status: Status) -> Instant {
        status
            .valid_until
            .checked_sub(self.options.loss_margin())
            .unwrap_or(status.valid_until)
    }

    /// The reason of a loss found on the clock, given the status it was found in.
    fn run_out_of(&self, status: Status) -> LossReason {
        if status.limited {
            LossReason::HoldLimit
        } else {
            self.run_out()
        }
    }

    /// The reason of a validity that ran out, the hold's limit aside.
    fn run_out(&self) -> LossReason {
        if self.options.auto_renew() {
            LossReason::RenewalFailed
        } else {
            LossReason::Expired
        }
    }

    /// Records the release as the end of the lease, unless a loss came first: then
    /// returns that loss, read from the clock as [`Self::current_loss`] does. One look
    /// at the status, where `current_loss` then `mark_lost` would take two.
    fn mark_released(&self) -> Option<LossReason> {
        let now = Instant::now();
        let mut recorded = None;
        let mut earlier = None;
        self.update(|s| {
            if let Some(ended) = s.ended {
                earlier = ended.loss();
                return false;
            }
            let end = if self.limit.is_some_and(|limit| now >= limit) {
                earlier = Some(LossReason::HoldLimit);
                End::Lost(LossReason::HoldLimit)
            } else if now < self.loss_at(*s) {
                End::Released
            } else {
                earlier = Some(self.run_out_of(*s));
                End::Lost(self.run_out_of(*s))
            };
            s.ended = Some(end);
            recorded = Some(end);
            true
        });
        if let Some(end) = recorded {
            self.after_end(end, true);
        }
        earlier
    }

    fn set_valid_until(&self, valid_until: Instant) {
        self.update(|s| {
            if s.ended.is_some() {
                return false;
            }
            s.valid_until = valid_until;
            true
        });
    }

    /// One extend round trip, applied to the status, after any other in flight.
    async fn extend(self: &Arc<Self>, ttl: Duration) -> Result<()> {
        // In a task of its own, which holds the one-at-a-time lock until the reply: a
        // caller that gives up (a time-out around it, a dropped future) leaves its
        // request on its way, and the next extend must not be sent before it is
        // answered (or the backend's own time-outs end it), lest it be applied first.
        let shared = self.clone();
        let under_way = tokio::spawn(async move { shared.extend_in_turn(ttl).await });
        match under_way.await {
            Ok(result) => result,
            Err(error) => Err(Error::new(
                ErrorKind::Backend,
                format!(
                    "the extend of {:?} ended without an answer: {error}",
                    self.key()
                ),
            )),
        }
    }

    /// One extend, after any other in flight has been answered.
    async fn extend_in_turn(&self, ttl: Duration) -> Result<()> {
        let _one_at_a_time = self.extending.lock().await;
        let outcome = self.backend.extend(&self.lease, ttl).await;
        let result = match &outcome {
            Ok(ExtendOutcome::Extended(_)) => RenewalResult::Renewed,
            Ok(ExtendOutcome::NotHeld) => RenewalResult::NotHeld,
            Err(_) => RenewalResult::Failed,
        };
        self.renewed(result);
        match outcome? {
            ExtendOutcome::Extended(lease) => {
                self.set_valid_until(lease.valid_until());
                Ok(())
            }
            ExtendOutcome::NotHeld => {
                self.mark_lost(LossReason::NotHeld);
                Err(not_held(self.key()))
            }
        }
    }

    fn renewed(&self, result: RenewalResult) {
        telemetry::renewal(self.backend.name(), self.key(), &self.options, result);
    }
}

fn not_held(key: &LockKey) -> Error {
    Error::new(
        ErrorKind::NotHeld,
        format!(
            "the lock {:?} is no longer held by this guard",
            key.as_str()
        ),
    )
}

/// A held lock.
///
/// While it lives, a background task renews the lease (unless auto-renewal is off)
/// and watches for its loss; [`lost`](Self::lost) completes when the lock is lost.
/// That task starts once the lock has been held a little while (half the renewal
/// interval, at most 100 ms): a lock held briefly costs no task of its own.
/// Pass [`fence`](Self::fence) to whatever the lock protects.
///
/// Release it with [`release`](Self::release), which reports whether the lock was
/// still held. Dropping the guard stops renewal and releases in the background: that
/// is not immediate, needs a tokio runtime, and its result is only logged; without a
/// runtime the lease simply runs out at its TTL.
///
/// Bind the guard for as long as the work needs the lock. A guard left unbound is
/// dropped at once, which releases the lock, so the compiler warns (`#[must_use]`):
///
/// ```compile_fail
/// # #![deny(unused_must_use)]
/// # use std::time::Duration;
/// # async fn work(client: distlock_core::LockClient) -> distlock_core::Result<()> {
/// client.lock("reports", Duration::from_secs(5)).await?; // released here, at once
/// # Ok(())
/// # }
/// ```
///
/// while the same code with the guard bound compiles:
///
/// ```
/// # #![deny(unused_must_use)]
/// # use std::time::Duration;
/// # async fn work(client: distlock_core::LockClient) -> distlock_core::Result<()> {
/// let _guard = client.lock("reports", Duration::from_secs(5)).await?;
/// // ... the work, under the lock ...
/// # Ok(())
/// # }
/// ```
#[must_use = "a guard that is not bound is dropped at once, and dropping it releases the lock"]
pub struct LockGuard {
    hold: Arc<Holds>,
    finished: bool,
}

/// What every hold of one lease shares, in one allocation with the lease's state:
/// the same [`Shared`], seen from the guards.
pub(crate) type Holds = Shared;

impl Shared {
    /// One more hold of this lease: `None` once the last hold ended or the lock was
    /// lost.
    pub(crate) fn reenter(self: &Arc<Self>) -> Option<LockGuard> {
        if self.current_loss().is_some() {
            return None;
        }
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            })
            .ok()?;
        Some(LockGuard {
            hold: self.clone(),
            finished: false,
        })
    }
}

impl LockGuard {
    /// Starts guarding a freshly granted lease, at `granted` (now, as the caller read
    /// the clock).
    pub(crate) fn start(
        backend: Arc<DynLockBackend>,
        lease: Lease,
        granted: Instant,
        options: LockOptions,
        turn: Option<LocalTurn>,
        starts: &Starts,
        background: &Background,
    ) -> Self {
        // Never later than the point where the loss must be signalled.
        let valid_until = lease.valid_until();
        let loss_at = valid_until
            .checked_sub(options.loss_margin())
            .unwrap_or(valid_until);
        let limit = options.hold_at_most().map(|most| granted + most);
        let due = (granted + supervise_after(&options)).min(loss_at);
        let due = limit.map_or(due, |limit| due.min(limit));
        let keep_until = options.hold_at_least().map(|least| granted + least);
        let shared = Arc::new(Shared {
            backend,
            options,
            supervisor: DeferredTask::new(),
            _starts: starts.clone(),
            background: background.clone(),
            count: AtomicUsize::new(1),
            status: std::sync::Mutex::new(Status {
                valid_until,
                ended: None,
                keep_until,
                limited: false,
            }),
            changed: Notify::new(),
            watched: AtomicBool::new(false),
            turn: std::sync::Mutex::new(turn),
            lease,
            granted,
            limit,
            extending: tokio::sync::Mutex::const_new(()),
        });
        telemetry::granted(
            shared.backend.name(),
            shared.key(),
            &shared.options,
            shared.fence(),
        );
        // The timer holds the shared state weakly: a guard gone before it is due
        // starts nothing.
        starts.schedule(due, granted, &shared);
        LockGuard {
            hold: shared,
            finished: false,
        }
    }

    /// Another hold of this same lease, for code that needs the lock again while it
    /// holds it (re-entrancy, opt-in): the same key, fence, renewal and loss signal.
    /// The lease is released when the last hold is released or dropped; releasing an
    /// earlier one only ends that hold. An [`ErrorKind::NotHeld`] error once the lock
    /// was lost. See [`LockClient::reentrant`](crate::LockClient::reentrant) for
    /// re-entering by key within a task.
    pub fn reenter(&self) -> Result<LockGuard> {
        self.hold.reenter().ok_or_else(|| {
            Error::new(
                ErrorKind::NotHeld,
                format!(
                    "the lock {:?} is no longer held: it cannot be re-entered",
                    self.key()
                ),
            )
        })
    }

    /// How many holds of this lease are live, this one included.
    pub fn holds(&self) -> usize {
        self.hold.count.load(Ordering::Acquire)
    }

    /// The holds this guard shares, for the client's re-entrant scopes.
    pub(crate) fn shared_holds(&self) -> &Arc<Holds> {
        &self.hold
    }

    /// Ends this hold: `true` when it was the last, and the lease is to be released.
    fn end_hold(&mut self) -> bool {
        self.finished = true;
        self.hold.count.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// The lock's key.
    pub fn key(&self) -> &LockKey {
        self.hold.key()
    }

    /// The owner token of this acquisition, for a server step of its own (an
    /// election's proclaim).
    pub(crate) fn owner(&self) -> OwnerToken {
        *self.hold.lease.owner()
    }

    /// The fencing token of this acquisition: larger than that of every earlier holder.
    pub fn fence(&self) -> FencingToken {
        self.hold.fence()
    }

    /// A handle that writes through `store` under this guard's fence.
    pub fn fenced<S: FencedStore>(&self, store: S) -> FencedHandle<S> {
        FencedHandle::new(store, self.fence())
    }

    /// Until when the lease is known to be valid (local monotonic clock).
    pub fn valid_until(&self) -> Instant {
        self.hold.status().valid_until
    }

    /// Whether the lock is still held: [`loss`](Self::loss) is `None`.
    pub fn is_held(&self) -> bool {
        self.loss().is_none()
    }

    /// Why the lock was lost, or `None` while it is held. It reads the clock: once
    /// the validity less the loss margin has run out, the loss is recorded and
    /// returned now, whether or not the renewal task has run. Ask it (or
    /// [`is_held`](Self::is_held)) right before each act that needs the lock.
    pub fn loss(&self) -> Option<LossReason> {
        self.hold.current_loss()
    }

    /// A future that completes when the lease's hold ends: with the reason when the
    /// lock was lost, with `None` when its last hold was released or dropped while
    /// the lease was held. It completes at once if the hold has already ended. It does
    /// not borrow the guard, so it can be moved into another task, which then ends
    /// with the hold either way. In `tokio::select!`, the branch
    /// `Some(reason) = guard.lost()` is taken on a loss alone.
    ///
    /// It is delivered by a task: in a process whose runtime is starved or paused it
    /// arrives late, by as long as the task waited. [`loss`](Self::loss) and
    /// [`is_held`](Self::is_held) are never late.
    pub fn lost(&self) -> impl Future<Output = Option<LossReason>> + Send + 'static {
        // The end is always recorded, at the latest when the last hold ends, so
        // holding the shared state until then is enough.
        let shared = self.hold.clone();
        async move {
            loop {
                // Created before the status is read, so a change in between wakes it.
                let changed = shared.next_change();
                if let Some(end) = shared.status().ended {
                    return end.loss();
                }
                changed.await;
            }
        }
    }

    /// Extends the lease to `ttl` from now, in one round trip. An
    /// [`ErrorKind::NotHeld`] error (and the lost signal) when it was no longer held.
    /// Auto-renewal, if on, goes on with the configured TTL afterwards. A renewal
    /// already in flight is waited for first: with two in flight, the validity the
    /// client counts could be the one the server did not keep.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        if let Some(reason) = self.loss() {
            return Err(Error::new(
                ErrorKind::NotHeld,
                format!("the lock {:?} was lost: {reason}", self.hold.key().as_str()),
            ));
        }
        let span =
            tracing::debug_span!("lock_extend", key = %self.hold.key(), fence = %self.hold.fence());
        self.hold.extend(ttl).instrument(span).await
    }

    /// Stops renewal and releases the lock, in one round trip. `Ok` when this guard
    /// still held it; an [`ErrorKind::NotHeld`] error when the lease had already been
    /// lost (so the caller learns that its work may have overlapped another holder's).
    /// Where the lease has other [holds](Self::reenter), this ends only this one,
    /// without a round trip. Dropping the returned future before the reply (a
    /// caller's timeout, say) still releases the lease, in the background, as dropping
    /// the guard does.
    pub async fn release(mut self) -> Result<()> {
        if !self.end_hold() {
            // Another hold of this lease goes on: only this one ends.
            return match self.loss() {
                None => Ok(()),
                Some(reason) => Err(Error::new(
                    ErrorKind::NotHeld,
                    format!("the lock {:?} had been lost: {reason}", self.key().as_str()),
                )),
            };
        }
        self.hold.cancel_supervisor();
        let shared = self.hold.clone();
        let was_lost = shared.mark_released();
        let span =
            tracing::debug_span!("lock_release", key = %shared.key(), fence = %shared.fence());
        // Should this future be dropped before the reply, the release is sent again in
        // the background, as a dropped guard's is.
        let mut under_way = ReleaseUnderWay(Some(shared.clone()));
        let outcome = shared.release_lease().instrument(span).await;
        under_way.0 = None;
        // The next local waiter goes once the release has been applied (or failed).
        shared.pass_turn();
        let outcome = outcome?;
        match (outcome, was_lost) {
            (ReleaseOutcome::Released, _) => Ok(()),
            (ReleaseOutcome::NotHeld, Some(reason)) => Err(Error::new(
                ErrorKind::NotHeld,
                format!(
                    "the lock {:?} had been lost before release: {reason}",
                    shared.key()
                ),
            )),
            (ReleaseOutcome::NotHeld, None) => Err(not_held(shared.key())),
        }
    }
}

impl LockGuard {
    /// Releases the lock after work ran under it: what became of the lease.
    pub(crate) async fn release_after_work(self) -> LeaseEnd {
        let shared = self.hold.clone();
        match self.release().await {
            Ok(()) => LeaseEnd::Released,
            // The loss recorded before the release, or the server's answer.
            Err(error) if error.kind() == ErrorKind::NotHeld => LeaseEnd::Lost(
                shared
                    .status()
                    .ended
                    .and_then(End::loss)
                    .unwrap_or(LossReason::NotHeld),
            ),
            Err(error) => {
                warn!(%error, key = %shared.key(), "the release after work failed; the lease runs out at its ttl");
                LeaseEnd::ReleaseFailed
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.finished || !self.end_hold() {
            return;
        }
        self.hold.cancel_supervisor();
        self.hold.mark_ended(End::Released);
        release_in_background(self.hold.clone());
    }
}

/// A release whose reply has not come yet: dropped first (the future of
/// [`LockGuard::release`] cancelled), it sends the release in the background.
struct ReleaseUnderWay(Option<Arc<Shared>>);

impl Drop for ReleaseUnderWay {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            release_in_background(shared);
        }
    }
}

/// Releases the lease of `shared` in a task of its own (a guard dropped, or a release
/// cancelled), then lets the next local waiter go; outside a runtime, the lease runs
/// out at its TTL. A release that fails is sent again on an abandoned attempt's
/// schedule, until one is answered; a later grant step as the same owner (a resumed
/// term) stops it.
fn release_in_background(shared: Arc<Shared>) {
    if tokio::runtime::Handle::try_current().is_err() {
        debug!(key = %shared.key(), "guard dropped outside a runtime; the lease will run out at its ttl");
        return;
    }
    let working = shared.background.begin();
    let passes = cleanup::passes(shared.backend.capabilities().applied_within);
    let (key, owner) = (shared.key().clone(), *shared.lease.owner());
    cleanup::spawn(key, owner, passes, working, move || {
        let shared = shared.clone();
        async move {
            let result = shared.release_lease().await;
            shared.pass_turn();
            match result {
                Ok(outcome) => {
                    debug!(key = %shared.key(), fence = %shared.fence(), ?outcome, "released on drop");
                    Pass::Done
                }
                Err(error) => {
                    warn!(key = %shared.key(), fence = %shared.fence(), %error, "release on drop failed; sent again later, or the lease runs out at its ttl");
                    Pass::Again
                }
            }
        }
    });
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.hold.status();
        f.debug_struct("LockGuard")
            .field("key", self.hold.key())
            .field("fence", &self.hold.fence())
            .field("valid_until", &s.valid_until)
            .field("ended", &s.ended)
            .field("holds", &self.holds())
            .finish()
    }
}

/// How long after the grant the supervisor starts: by then a change watch is worth
/// its set-up, and it is well before the first renewal or any loss.
fn supervise_after(options: &LockOptions) -> Duration {
    (options.renew_interval() / 2).min(Duration::from_millis(100))
}

/// How soon after a check of the lease that a change notification asked for another
/// may be asked: a quarter of the renewal interval. A holder so renews at most once per
/// renewal interval and four times per renewal interval on changes, however busy its
/// key or name, and learns of a deletion at once after a quiet spell, within a quarter
/// interval and a round trip on a busy name.
fn change_settle(options: &LockOptions) -> Duration {
    options.renew_interval() / 4
}

/// Renews the lease and decides when it is lost. Starts [`supervise_after`] the grant
/// at `granted`; runs until the loss is recorded or the guard cancels it.
async fn supervise(shared: Arc<Shared>, granted: Instant) {
    let options = shared.options.clone();
    let margin = options.loss_margin();
    let interval = options.renew_interval();
    let retry_delay = (interval / 4).max(Duration::from_millis(5));
    let mut next_renewal = granted + interval;
    // A change to the key (on a shared kind, to any grant of the name) asks for a
    // check of the lease: at once, unless a check so asked came within `settle`; then
    // the changes are coalesced into one check at the end of that, so that a busy
    // name costs each holder a bounded number of renewals.
    let settle = change_settle(&options);
    let mut last_asked: Option<Instant> = None;
    let mut change_due: Option<Instant> = None;
    // Short holds never pay for a subscription: the watch starts once the lock has
    // been held a while, which is when this task starts. A release notification for
    // our own key means it may have been deleted behind our back, so the lease is
    // then checked at once. The set-up is bounded by the first renewal, and by
    // halfway to the loss, as a renewal is: a server that froze right after the grant
    // must not keep the supervisor from renewing or from noticing the loss, and a
    // grant answered late has used up much of its validity before the interval is
    // due.
    let watching = options.auto_renew() && shared.backend.capabilities().change_notification;
    let set_up_by = {
        let (now, loss_at) = (Instant::now(), shared.loss_at(shared.status()));
        next_renewal.min(now + loss_at.saturating_duration_since(now) / 2)
    };
    let mut changes = if watching && shared.status().ended.is_none() {
        match timeout_at(set_up_by, shared.backend.watch(shared.key())).await {
            Ok(Ok(changes)) => changes,
            Ok(Err(error)) => {
                debug!(%error, "cannot watch the key; losses are found at the next renewal");
                None
            }
            Err(_elapsed) => None,
        }
    } else {
        None
    };
    loop {
        // Created before the status is read, so that a change in between wakes it.
        let status_changed = shared.next_change();
        // The holder must stop a margin before the validity runs out: the server's
        // clock may run a little faster than ours, and stopping work takes time.
        // Past that point the check records the loss.
        if let Some(reason) = shared.current_loss() {
            if let (LossReason::HoldLimit, Some(limit)) = (reason, shared.limit) {
                // The holder was told at the limit; a loss margin later, when it must
                // have stopped, the lease goes back, though its guard lives on.
                sleep_until(limit + margin).await;
                release_in_background(shared.clone());
            }
            return;
        }
        let status = shared.status();
        let loss_at = status
            .valid_until
            .checked_sub(margin)
            .unwrap_or(status.valid_until);
        let now = Instant::now();
        if now >= loss_at {
            // It ran out since the check above: the check records it.
            continue;
        }
        // A lease a renewal has ended at the hold's limit cannot be renewed further:
        // later renewals would ask for the same end. Only a change asks for a check.
        let renews = options.auto_renew() && !status.limited;
        let wake = if renews {
            // Never let one slow attempt use up the time left: try again by halfway.
            next_renewal.min(now + (loss_at - now) / 2)
        } else {
            loss_at
        };
        let wake = shared.limit.map_or(wake, |limit| wake.min(limit));
        let wake = change_due.map_or(wake, |due| wake.min(due));
        tokio::select! {
            () = sleep_until(wake) => {}
            () = status_changed => continue,
            change = next_change(&mut changes) => {
                // The key may have been deleted behind our back: check at once, or,
                // checked within `settle`, when that has passed.
                if change.is_none() {
                    changes = None;
                    continue;
                }
                if let Some(earliest) = last_asked.map(|at| at + settle) {
                    if Instant::now() < earliest {
                        change_due = Some(earliest);
                        continue;
                    }
                }
                debug!("key changed; checking the lease now");
                change_due = Some(Instant::now());
            }
        }
        if !options.auto_renew() || shared.current_loss().is_some() {
            continue;
        }
        if !renews && change_due.is_none() {
            continue;
        }
        // This check covers every change so far; one that changes asked for counts
        // towards the next `settle`.
        if change_due.take().is_some() {
            last_asked = Some(Instant::now());
        }
        let (ttl, limited) = shared.renewal_ttl();
        match timeout_at(loss_at, shared.extend(ttl)).await {
            Ok(Ok(())) => {
                if limited {
                    shared.mark_limited();
                }
                next_renewal = Instant::now() + interval;
            }
            // The loss is recorded, and reported, by the extend.
            Ok(Err(error)) if error.kind() == ErrorKind::NotHeld => return,
            Ok(Err(error)) => {
                // A transient fault is not a loss while validity remains.
                warn!(%error, "renewal failed; retrying while the lease is valid");
                next_renewal = Instant::now() + retry_delay;
            }
            Err(_elapsed) => {
                // Loop once more: the deadline check above records the loss.
                shared.renewed(RenewalResult::Failed);
                next_renewal = Instant::now();
            }
        }
    }
}
