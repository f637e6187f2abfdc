//! One attempt, from before its request is sent until guards own what it was granted:
//! the one path by which [`lock`](super::LockClient::lock),
//! [`try_lock`](super::LockClient::try_lock) and
//! [`lock_all`](super::LockClient::lock_all) turn leases into guards, and the
//! cleanups that release a grant nobody took over.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use smallvec::SmallVec;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::background::Background;
use super::cleanup::{self, Pass};
use super::deferred::Starts;
use super::guard::LockGuard;
use super::local::{LocalQueues, LocalTurn};
use super::options::LockOptions;
use super::reentrant;
use crate::backend::DynLockBackend;
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::lease::Lease;
use crate::token::OwnerToken;

/// What an attempt needs of its client: where to ask and with what options, and
/// where the guards it starts keep their timers, their background work and their
/// re-entrant holds. A client hands out its own
/// ([`LockClient::engine`](super::LockClient::engine)).
#[derive(Clone, Copy)]
pub(crate) struct Engine<'a> {
    pub(crate) backend: &'a Arc<DynLockBackend>,
    pub(crate) options: &'a LockOptions,
    pub(crate) starts: &'a Starts,
    pub(crate) background: &'a Background,
    pub(crate) local: &'a Arc<LocalQueues>,
}

/// One item per key of an attempt: inline for one key (a lock's attempt, the common
/// case, allocates none of them), on the heap for a set.
pub(super) type PerKey<T> = SmallVec<[T; 1]>;

/// The owners one attempt asks as, one per key. A fresh owner is covered by a cleanup
/// of its own from before its request is sent until an answer settles it; an owner
/// the wait already covers (a queued waiter, or the owner of an earlier attempt whose
/// outcome is unknown) is asked as again under the wait's cover.
pub(crate) struct Attempt<'a> {
    client: Engine<'a>,
    owners: PerKey<(&'a LockKey, OwnerToken)>,
    fresh: PerKey<PendingGrant<'a>>,
}

/// What the server answered an attempt.
pub(crate) enum Answer {
    /// A lease for each owner, in the order they were added, and the clock reading
    /// that found them valid, where one did.
    Granted(PerKey<Lease>, Option<Instant>),
    /// Another lease holds the key of the owner at `index`; nothing was granted.
    Held {
        index: usize,
        remaining: Option<Duration>,
    },
}

/// How an attempt ended.
pub(crate) enum Settled {
    /// One guard per owner, in the order they were added.
    Guards(PerKey<LockGuard>),
    /// Nothing is held: the key at `index` was held by another lease for about
    /// `remaining`, or (index 0, `remaining` unknown) a grant came with less than the
    /// minimum validity and was given back.
    Busy {
        index: usize,
        remaining: Option<Duration>,
    },
    /// The request failed. `uncertain` holds the cleanups of the fresh owners whose
    /// request may have been applied with its reply lost; dropped, each releases in
    /// the background, and a wait may keep one instead, to retry as its owner.
    Failed {
        error: Error,
        uncertain: Vec<(OwnerToken, PendingGrant<'static>)>,
    },
}

impl<'a> Attempt<'a> {
    pub(crate) fn new(client: Engine<'a>) -> Self {
        Attempt {
            client,
            owners: PerKey::new(),
            fresh: PerKey::new(),
        }
    }

    /// Asks for `key` as a fresh owner, covered from now on: its token.
    pub(crate) fn fresh(&mut self, key: &'a LockKey) -> OwnerToken {
        let owner = OwnerToken::random();
        self.fresh_as(key, owner);
        owner
    }

    /// Asks for `key` as `owner`, covered from now on as a fresh owner is.
    pub(super) fn fresh_as(&mut self, key: &'a LockKey, owner: OwnerToken) {
        let client = self.client;
        self.fresh.push(PendingGrant::borrowed(
            client.backend,
            key,
            owner,
            client.background,
        ));
        self.owners.push((key, owner));
    }

    /// Asks for `key` as `owner`, whom the wait's own cleanup covers.
    pub(super) fn covered(&mut self, key: &'a LockKey, owner: OwnerToken) {
        self.owners.push((key, owner));
    }

    /// Each key with the owner it is asked as, in order.
    pub(crate) fn owners(&self) -> Vec<(LockKey, OwnerToken)> {
        self.owners
            .iter()
            .map(|(key, owner)| ((*key).clone(), *owner))
            .collect()
    }

    /// Settles the attempt on `answer`. Granted leases become guards (taking the
    /// client's local turn on each key from `turns`, in order) when each has the
    /// minimum validity left; otherwise all are released before the answer is Busy.
    /// The fresh owners' cleanups are disarmed by any answer, and kept for a failure
    /// that may hide a success: not for input the backend refused, nor for a request
    /// that never left this process.
    pub(crate) async fn settle(
        mut self,
        answer: Result<Answer>,
        mut turns: impl FnMut() -> Option<LocalTurn> + Send,
    ) -> Settled {
        let client = self.client;
        match answer {
            Ok(Answer::Granted(leases, checked_at)) => {
                // One clock reading serves the check and the guards' start: the one
                // that found the leases valid, where there was one.
                let now = checked_at.unwrap_or_else(Instant::now);
                let min_validity = client.options.min_validity();
                let short = leases
                    .iter()
                    .any(|l| l.valid_until().saturating_duration_since(now) < min_validity);
                if short {
                    warn!("a granted lease is below the minimum validity; releasing it");
                    let backend = client.backend;
                    join_all(
                        self.owners
                            .iter()
                            .map(|(key, owner)| backend.release(key, owner)),
                    )
                    .await;
                    self.disarm();
                    return Settled::Busy {
                        index: 0,
                        remaining: None,
                    };
                }
                self.disarm();
                let guards = leases
                    .into_iter()
                    .map(|lease| {
                        let guard = LockGuard::start(
                            client.backend.clone(),
                            lease,
                            now,
                            client.options.clone(),
                            turns(),
                            client.starts,
                            client.background,
                        );
                        reentrant::remember(client.local, &guard);
                        guard
                    })
                    .collect();
                Settled::Guards(guards)
            }
            Ok(Answer::Held { index, remaining }) => {
                self.disarm();
                Settled::Busy { index, remaining }
            }
            Err(error) => {
                let maybe_applied = (error.is_retryable() || error.kind() == ErrorKind::Backend)
                    && !error.was_not_sent();
                if !maybe_applied {
                    self.disarm();
                }
                let uncertain = self
                    .fresh
                    .drain(..)
                    .filter_map(PendingGrant::into_owned)
                    .collect();
                Settled::Failed { error, uncertain }
            }
        }
    }

    fn disarm(&mut self) {
        self.fresh.iter_mut().for_each(PendingGrant::disarm);
    }
}

/// Releases, in the background, a grant that nobody took over: the acquire future was
/// dropped mid-flight, or the request failed in a way that may hide a success.
/// A queued one also leaves the key's queue. It may borrow the backend and the key
/// for as long as it is armed ([`Self::borrowed`]): an attempt that ends normally then
/// clones neither, and only a cleanup takes copies of its own.
pub(crate) struct PendingGrant<'a> {
    cleanup: Option<Cleanup<'a>>,
    queued: bool,
}

/// What a cleanup needs: where to release, as whom, and the client's count of
/// background work ([`LockClient::flush`] waits for its first pass).
struct Cleanup<'a> {
    backend: Cow<'a, Arc<DynLockBackend>>,
    key: Cow<'a, LockKey>,
    owner: OwnerToken,
    background: Cow<'a, Background>,
}

impl<'a> PendingGrant<'a> {
    /// The cover of a queued waiter's owner for its whole wait: it also leaves the
    /// key's queue.
    pub(crate) fn queued(client: Engine<'_>, key: &LockKey, owner: OwnerToken) -> Self {
        PendingGrant {
            cleanup: Some(Cleanup {
                backend: Cow::Owned(client.backend.clone()),
                key: Cow::Owned(key.clone()),
                owner,
                background: Cow::Owned(client.background.clone()),
            }),
            queued: true,
        }
    }

    /// A cover borrowing the backend, the key and the count.
    fn borrowed(
        backend: &'a Arc<DynLockBackend>,
        key: &'a LockKey,
        owner: OwnerToken,
        background: &'a Background,
    ) -> Self {
        PendingGrant {
            cleanup: Some(Cleanup {
                backend: Cow::Borrowed(backend),
                key: Cow::Borrowed(key),
                owner,
                background: Cow::Borrowed(background),
            }),
            queued: false,
        }
    }

    /// The same cover, armed, with copies of its own; `None` once disarmed.
    fn into_owned(mut self) -> Option<(OwnerToken, PendingGrant<'static>)> {
        let cleanup = self.cleanup.take()?;
        let owner = cleanup.owner;
        let owned = PendingGrant {
            cleanup: Some(Cleanup {
                backend: Cow::Owned(cleanup.backend.into_owned()),
                key: Cow::Owned(cleanup.key.into_owned()),
                owner,
                background: Cow::Owned(cleanup.background.into_owned()),
            }),
            queued: self.queued,
        };
        Some((owner, owned))
    }

    pub(crate) fn disarm(&mut self) {
        self.cleanup = None;
    }
}

impl Drop for PendingGrant<'_> {
    fn drop(&mut self) {
        let Some(cleanup) = self.cleanup.take() else {
            return;
        };
        let (backend, key, owner) = (
            cleanup.backend.into_owned(),
            cleanup.key.into_owned(),
            cleanup.owner,
        );
        let queued = self.queued;
        // Counted from now, so that a flush right after the acquire returned waits
        // for it.
        let first = cleanup.background.begin();
        let passes = cleanup::passes(backend.capabilities().applied_within);
        // The abandoned request may still be on its way (queued in a pool or a proxy,
        // say, or waiting on the server for a row lock) and land after a release:
        // released (and the queue left) again a little later, later still, and once
        // the server's own bound on it has passed, it is gone before long whenever it
        // lands within that time; otherwise it runs out at its TTL (a place, at its
        // own). A later grant step as the same owner stops it.
        cleanup::spawn(key.clone(), owner, passes, first, move || {
            let (backend, key) = (backend.clone(), key.clone());
            async move {
                if queued {
                    if let Err(error) = leave_queue(&*backend, &key, &owner).await {
                        debug!(%error, key = %key, "leaving the queue failed; the place runs out");
                    }
                }
                if let Err(error) = backend.release(&key, &owner).await {
                    debug!(%error, key = %key, "cleanup of an abandoned attempt failed; it runs out at its ttl");
                }
                Pass::Again
            }
        });
    }
}

/// Takes `owner` out of `key`'s queue, where `backend` keeps queues.
pub(super) async fn leave_queue(
    backend: &DynLockBackend,
    key: &LockKey,
    owner: &OwnerToken,
) -> Result<()> {
    match backend.fair() {
        Some(fair) => fair.leave_queue(key, owner).await,
        None => Ok(()),
    }
}
