//! [`LeaderLoop`]: a service's leader loop over an [`Election`], with client-go's
//! leader-election semantics.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use tracing::{debug, info, warn};

use super::election::{Election, Leader, Leadership, Observation, ResumeToken};
use crate::client::guard::Holds;
use crate::client::LockGuard;
use crate::error::{BoxError, Error, ErrorKind, Result};
use crate::lease::LossReason;
use crate::token::FencingToken;

/// What the loop calls for each new leader it observes.
type OnNewLeader = Arc<dyn Fn(&Leader) + Send + Sync>;
/// What the loop calls when one of its own terms ends.
type OnStoppedLeading = Arc<dyn Fn(FencingToken, &TermEnd) + Send + Sync>;

/// Why a term of a [`LeaderLoop`] ended, as
/// [`on_stopped_leading`](LeaderLoop::on_stopped_leading) hears it.
#[derive(Debug)]
#[non_exhaustive]
pub enum TermEnd {
    /// The term's lease was lost under it (it ran out, was broken, or reached a hold
    /// limit): the work was dropped, and the loop campaigns again.
    Lost(LossReason),
    /// The work returned: the loop resigned, and campaigns again after its retry
    /// delay.
    Returned,
    /// The work failed with this error: the loop resigned, and campaigns again after
    /// its retry delay.
    Failed(BoxError),
    /// The loop was shut down: the work was dropped and the loop resigned.
    Shutdown,
}

impl fmt::Display for TermEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TermEnd::Lost(reason) => write!(f, "lost: {reason}"),
            TermEnd::Returned => f.write_str("the work returned"),
            TermEnd::Failed(error) => write!(f, "the work failed: {error}"),
            TermEnd::Shutdown => f.write_str("the loop was shut down"),
        }
    }
}

/// What a leader's work may return: nothing (`()`), or a `Result` whose error ends
/// the term as a failure ([`TermEnd::Failed`]). Either way the loop resigns the term.
pub trait TermOutcome: Send {
    /// The error the work ended with, if it failed.
    fn failure(self) -> Option<BoxError>;
}

impl TermOutcome for () {
    fn failure(self) -> Option<BoxError> {
        None
    }
}

impl<E: Into<BoxError> + Send> TermOutcome for std::result::Result<(), E> {
    fn failure(self) -> Option<BoxError> {
        self.err().map(Into::into)
    }
}

/// A leader loop: campaigns, runs the leader's work for each term it wins, and
/// campaigns again when the term ends, until its shutdown future completes. Made by
/// [`Election::leader_loop`]; run by [`run`](Self::run).
///
/// It follows client-go's leader election: the work gets the term as a context
/// (a [`LockGuard`] hold of the term's lease: its fence for fenced writes, its
/// [`lost`](LockGuard::lost) signal) and is dropped at its next await point when the
/// term is lost; a callback hears every new leader, this process's included
/// ([`on_new_leader`](Self::on_new_leader)); shutting down resigns, so that another
/// candidate is elected at once (client-go's `ReleaseOnCancel`); and
/// [`health`](Self::health) answers a readiness probe. With the `metrics` feature the
/// gauge `distlock_leader` (label `election`) is 1 while this process leads.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(Arc::new(MemoryBackend::new()));
/// let election = client.election("scheduler")?;
/// let leader = election
///     .leader_loop("10.0.0.7:8080")?
///     .on_new_leader(|leader| println!("{} leads, term {}", leader.value, leader.fence));
/// let health = leader.health();
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let running = tokio::spawn(leader.run(
///     |term| async move {
///         // The leader's work: hand `term.fence()` to the stores it writes to.
///         println!("leading under fence {}", term.fence());
///         term.lost().await; // or work until the term is lost, then be dropped
///     },
///     async move {
///         let _ = stopped.await;
///     },
/// ));
/// tokio::time::sleep(Duration::from_millis(50)).await;
/// assert!(health.is_leading());
/// health.check()?; // for a readiness probe
/// stop.send(()).ok();
/// running.await.expect("the loop")?; // resigned on the way out
/// # Ok(())
/// # }
/// ```
#[must_use = "a leader loop does nothing until it is run"]
pub struct LeaderLoop {
    election: Election,
    value: String,
    on_new_leader: Option<OnNewLeader>,
    on_stopped_leading: Option<OnStoppedLeading>,
    retry: Duration,
    resume: Option<ResumeToken>,
    state: Arc<LeaderState>,
}

/// What a loop and its [`LeaderHealth`] handles share: the current term, if any,
/// with what resumes it.
#[derive(Default)]
struct LeaderState {
    term: Mutex<Option<(Arc<Holds>, ResumeToken)>>,
}

/// A handle on a [`LeaderLoop`]'s state, for readiness probes and status pages.
/// Cloned freely; it never holds the lease itself.
#[derive(Clone)]
pub struct LeaderHealth {
    state: Arc<LeaderState>,
    name: String,
}

impl Election {
    /// A leader loop on this election, campaigning with `value` (an address, say; at
    /// most [`MAX_CLAIM_VALUE`](crate::backend::MAX_CLAIM_VALUE) bytes, no NUL:
    /// otherwise a configuration error). See [`LeaderLoop`].
    pub fn leader_loop(&self, value: &str) -> Result<LeaderLoop> {
        crate::permits::Claim::new(1, 1)?.with_value(value)?;
        Ok(LeaderLoop {
            election: self.clone(),
            value: value.to_owned(),
            on_new_leader: None,
            on_stopped_leading: None,
            retry: Duration::from_secs(1),
            resume: None,
            state: Arc::default(),
        })
    }
}

impl LeaderLoop {
    /// Calls `callback` for every new leader the election elects while the loop runs,
    /// this process's terms included, in order (as [`Election::observe`] yields
    /// them). It runs on a task of its own; a slow callback delays only the next call.
    pub fn on_new_leader(mut self, callback: impl Fn(&Leader) + Send + Sync + 'static) -> Self {
        self.on_new_leader = Some(Arc::new(callback));
        self
    }

    /// Calls `callback` when a term this loop led ends, with the term's fence and
    /// why it ended (client-go's `OnStoppedLeading`, with the reason): after the work
    /// was dropped or returned, and, where the loop resigns, after the resignation.
    /// It runs on the loop's task, before the loop campaigns again or returns: keep
    /// it short.
    pub fn on_stopped_leading(
        mut self,
        callback: impl Fn(FencingToken, &TermEnd) + Send + Sync + 'static,
    ) -> Self {
        self.on_stopped_leading = Some(Arc::new(callback));
        self
    }

    /// How long the loop waits before it campaigns again after the backend failed it,
    /// or after a term ended by its work returning (1 s by default).
    pub fn with_retry(mut self, retry: Duration) -> Self {
        self.retry = retry;
        self
    }

    /// Resumes the term `token` names before the first campaign, after a restart
    /// (see [`Election::resume`]): where that term still lives the loop leads it at
    /// once, with the same fence; otherwise it campaigns as usual. The token of the
    /// term a loop leads is [`LeaderHealth::resume_token`]; a service writes it down
    /// when a term begins (in `lead`), to hand it to this after a restart.
    pub fn with_resume(mut self, token: ResumeToken) -> Self {
        self.resume = Some(token);
        self
    }

    /// A handle that tells whether this loop leads, and whether its term is sound.
    pub fn health(&self) -> LeaderHealth {
        LeaderHealth {
            state: self.state.clone(),
            name: self.election.name().as_str().to_owned(),
        }
    }

    /// Runs the loop until `shutdown` completes: campaigns (waiting as long as it
    /// takes), and for each term it wins runs `lead` with a hold of the term's lease.
    ///
    /// - The term lost (its lease ran out under it, was broken, or reached a
    ///   [hold limit](crate::LockOptions::with_hold_at_most)): `lead`'s future is
    ///   dropped at its next await point, and the loop campaigns again.
    /// - `lead` returns: the loop resigns, and campaigns again after the retry delay,
    ///   so that another candidate may take the next term. `lead` may return `()` or
    ///   a `Result` ([`TermOutcome`]): an error is logged at warn and handed to
    ///   [`on_stopped_leading`](Self::on_stopped_leading) as [`TermEnd::Failed`], and
    ///   the term is resigned all the same.
    /// - `shutdown` completes: `lead`'s future is dropped, the loop resigns (another
    ///   candidate is elected at once) and returns `Ok`.
    /// - The backend down, stalled or answering errors a retry can cure (a lost
    ///   reply, a time-out, a lease that ran out before its grant landed): the
    ///   campaign waits through it, as a [`lock`](crate::LockClient::lock) without a
    ///   deadline does, and an error it returns is retried after the retry delay when
    ///   it is retryable (an open circuit breaker).
    ///
    /// What ends the loop: `shutdown`, and an error no retry can cure, which it
    /// returns ([`Error::is_retryable`](crate::Error::is_retryable) false: wrong
    /// credentials, a name or options the backend refuses, a backend without the
    /// election's kind, a server's answer the backend cannot read).
    pub async fn run<F, Fut>(self, mut lead: F, shutdown: impl Future<Output = ()>) -> Result<()>
    where
        F: FnMut(LockGuard) -> Fut,
        Fut: Future,
        Fut::Output: TermOutcome,
    {
        let _observer = self.on_new_leader.clone().map(|callback| {
            let mut observations = self.election.observe();
            AbortOnDrop(tokio::spawn(async move {
                while let Some(observation) = observations.next().await {
                    if let Ok(Observation::Elected(leader)) = observation {
                        callback(&leader);
                    }
                }
            }))
        });
        let name = self.election.name().as_str().to_owned();
        tokio::pin!(shutdown);
        let mut resume = self.resume;
        loop {
            if let Some(token) = resume.take() {
                let resumed = tokio::select! {
                    biased;
                    () = &mut shutdown => return Ok(()),
                    resumed = self.resume(&token) => resumed,
                };
                if let Some(leadership) = resumed {
                    match self.lead(leadership, &mut lead, &mut shutdown, &name).await {
                        Some(done) => return done,
                        None => continue,
                    }
                }
            }
            let campaign = self.election.campaign(&self.value, Duration::MAX);
            let leadership = tokio::select! {
                biased;
                () = &mut shutdown => return Ok(()),
                won = campaign => match won {
                    Ok(leadership) => leadership,
                    Err(error) if error.is_retryable() => {
                        warn!(%error, election = %name, "campaign failed; campaigning again");
                        tokio::select! {
                            () = &mut shutdown => return Ok(()),
                            () = tokio::time::sleep(self.retry) => continue,
                        }
                    }
                    Err(error) => return Err(error),
                },
            };
            if let Some(done) = self.lead(leadership, &mut lead, &mut shutdown, &name).await {
                return done;
            }
        }
    }

    /// One try to resume `token`'s term: the leadership, or `None` to campaign.
    async fn resume(&self, token: &ResumeToken) -> Option<Leadership> {
        let name = self.election.name();
        match self.election.resume(token, &self.value).await {
            Ok(Ok(leadership)) => Some(leadership),
            Ok(Err(busy)) => {
                info!(election = %name, ?busy, "the term to resume is over; campaigning");
                None
            }
            Err(error) => {
                warn!(%error, election = %name, "could not resume the term; campaigning");
                None
            }
        }
    }

    /// Leads one term until it ends: `Some` to return from the loop, `None` to
    /// campaign again.
    async fn lead<F, Fut>(
        &self,
        leadership: Leadership,
        lead: &mut F,
        shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
        name: &str,
    ) -> Option<Result<()>>
    where
        F: FnMut(LockGuard) -> Fut,
        Fut: Future,
        Fut::Output: TermOutcome,
    {
        let fence = leadership.fence();
        info!(election = %name, fence = %fence, "leading");
        let Ok(hold) = leadership.reenter() else {
            // Lost as soon as it was won: campaign again.
            warn!(election = %name, "the term was lost as it began; campaigning again");
            return None;
        };
        let token = leadership.resume_token();
        self.state
            .set(Some((hold.shared_holds().clone(), token)), name);
        let lost = leadership.lost();
        let ended = tokio::select! {
            biased;
            () = shutdown.as_mut() => TermEnd::Shutdown,
            // `None` (the hold ended without a loss) cannot come while the
            // leadership is here.
            Some(reason) = lost => TermEnd::Lost(reason),
            outcome = lead(hold) => match outcome.failure() {
                None => TermEnd::Returned,
                Some(error) => TermEnd::Failed(error),
            },
        };
        self.state.set(None, name);
        let stopped = |end: &TermEnd| {
            if let Some(callback) = &self.on_stopped_leading {
                callback(fence, end);
            }
        };
        match ended {
            TermEnd::Lost(reason) => {
                warn!(election = %name, %reason, "the term was lost; campaigning again");
                drop(leadership);
                stopped(&ended);
                None
            }
            _ => {
                if let TermEnd::Failed(error) = &ended {
                    warn!(%error, election = %name, "the leader's work failed; resigning");
                }
                if let Err(error) = leadership.resign().await {
                    debug!(%error, election = %name, "the resignation found the term over");
                }
                stopped(&ended);
                if matches!(ended, TermEnd::Shutdown) {
                    return Some(Ok(()));
                }
                tokio::select! {
                    () = shutdown.as_mut() => Some(Ok(())),
                    () = tokio::time::sleep(self.retry) => None,
                }
            }
        }
    }
}

impl LeaderState {
    fn set(&self, term: Option<(Arc<Holds>, ResumeToken)>, name: &str) {
        let leading = term.is_some();
        *self.term.lock().unwrap_or_else(|p| p.into_inner()) = term;
        #[cfg(feature = "metrics")]
        metrics::gauge!("distlock_leader", "election" => name.to_owned()).set(if leading {
            1.0
        } else {
            0.0
        });
        #[cfg(not(feature = "metrics"))]
        let _ = (leading, name);
    }

    fn term(&self) -> Option<Arc<Holds>> {
        let term = self.term.lock().unwrap_or_else(|p| p.into_inner());
        term.as_ref().map(|(holds, _)| holds.clone())
    }

    fn token(&self) -> Option<ResumeToken> {
        let term = self.term.lock().unwrap_or_else(|p| p.into_inner());
        term.as_ref().map(|(_, token)| *token)
    }
}

impl LeaderHealth {
    /// Whether the loop leads now.
    pub fn is_leading(&self) -> bool {
        self.state.term().is_some()
    }

    /// What resumes the term this loop leads, while it leads: see
    /// [`LeaderLoop::with_resume`]. It carries the term's owner token: keep it as a
    /// credential is kept.
    pub fn resume_token(&self) -> Option<ResumeToken> {
        self.state.token()
    }

    /// For a readiness probe: `Ok` when the loop does not lead, or leads with its
    /// term's lease still held by the clock (as [`LockGuard::is_held`] reads it); an
    /// [`ErrorKind::LockLost`] error when it leads on a term whose lease has run out
    /// (its renewals did not get through, and the loop has not yet heard), as
    /// client-go's leader-election health check fails a leader past its renewal
    /// deadline.
    pub fn check(&self) -> Result<()> {
        match self.state.term().and_then(|term| term.loss_now()) {
            None => Ok(()),
            Some(reason) => Err(Error::new(
                ErrorKind::LockLost,
                format!(
                    "the leader of {:?} has lost its term ({reason}) and has not stepped down yet",
                    self.name
                ),
            )),
        }
    }
}

impl std::fmt::Debug for LeaderLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLoop")
            .field("election", self.election.name())
            .field("value", &self.value)
            .field("retry", &self.retry)
            .field("resume", &self.resume)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LeaderHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderHealth")
            .field("election", &self.name)
            .field("leading", &self.is_leading())
            .finish()
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
