//! Several keys under one lock, all or nothing: [`LockClient::lock_all`] and its
//! [`MultiGuard`].
//!
//! Where the backend takes sets ([`LockBackend::sets`](crate::LockBackend::sets)),
//! the keys are taken in one step on the server, all or none
//! ([`SetBackend::try_grant_all`](crate::backend::SetBackend::try_grant_all)); elsewhere one
//! by one, through the same calls as a single key, in one global order: sorted.
//! Either way each key gets its own lease, fence, renewal and metrics. A key found
//! held makes the set give back what it took at once (nothing, in one step), then
//! wait for that key alone, holding nothing else; once it has it, the rest is tried
//! again. So a set is never held in part while it waits, and two clients locking the
//! same keys in opposite orders cannot deadlock: neither waits while it holds.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::time::Instant;
use tracing::{debug, Instrument};

use crate::backend::{acquire_all_as, SetOutcome};
use crate::client::attempt::{Answer, Attempt, Settled};
use crate::client::telemetry::{self, Outcome, Stopwatch};
use crate::client::{
    deadline_after, reentrant, within_deadline, Busy, LeaseEnd, LockClient, LockGuard, Locked,
    LossReason,
};
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::token::FencingToken;

/// Each key's fence in a set held by a [`MultiGuard`], in the set's (sorted) order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fences(Vec<(LockKey, FencingToken)>);

impl Fences {
    /// The fence of `key`, or `None` when the set does not hold it.
    pub fn get(&self, key: &str) -> Option<FencingToken> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.0[i].1)
    }

    /// Every key with its fence, in the set's order.
    pub fn iter(&self) -> impl Iterator<Item = (&LockKey, FencingToken)> {
        self.0.iter().map(|(k, f)| (k, *f))
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set holds no key (never, for a set [`LockClient::lock_all`] made).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Every key of a set, held at once: one [`LockGuard`] per key, in sorted order.
///
/// Each key keeps its own lease, fence and renewal. The set is held while every key
/// is; [`lost`](Self::lost) completes when any key is lost. Releasing it releases
/// every key; dropping it releases every key in the background, as dropping a
/// [`LockGuard`] does.
#[must_use = "a guard that is not bound is dropped at once, and dropping it releases every key"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("fences", &self.fences())
            .finish()
    }
}

impl MultiGuard {
    /// The keys, in sorted order.
    pub fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.guards.iter().map(LockGuard::key)
    }

    /// The guard of one key of the set, or `None` when the set does not hold it.
    pub fn guard(&self, key: &str) -> Option<&LockGuard> {
        self.guards
            .binary_search_by(|g| g.key().as_str().cmp(key))
            .ok()
            .map(|i| &self.guards[i])
    }

    /// The fence of `key`, or `None` when the set does not hold it: each key's writes
    /// carry that key's fence.
    pub fn fence(&self, key: &str) -> Option<FencingToken> {
        self.guard(key).map(LockGuard::fence)
    }

    /// Every key's fence.
    pub fn fences(&self) -> Fences {
        Fences(
            self.guards
                .iter()
                .map(|g| (g.key().clone(), g.fence()))
                .collect(),
        )
    }

    /// Whether every key is still held (see [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// The first key found lost and why, or `None` while every key is held.
    pub fn loss(&self) -> Option<(LockKey, LossReason)> {
        self.guards
            .iter()
            .find_map(|g| g.loss().map(|reason| (g.key().clone(), reason)))
    }

    /// The earliest instant until which every key is known to be held.
    pub fn valid_until(&self) -> Instant {
        self.guards
            .iter()
            .map(LockGuard::valid_until)
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// A future that completes when the set's hold ends: with the first key lost and
    /// the reason, or with `None` when the set was released or dropped while every
    /// key was held (see [`LockGuard::lost`]). It does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = Option<(LockKey, LossReason)>> + Send + 'static {
        let each: Vec<_> = self
            .guards
            .iter()
            .map(|g| {
                let (key, lost) = (g.key().clone(), g.lost());
                Box::pin(async move { lost.await.map(|reason| (key, reason)) })
            })
            .collect();
        async move { select_all(each).await.0 }
    }

    /// Extends every key's lease to `ttl` from now, all at once. The first error met
    /// (an [`ErrorKind::NotHeld`] error for a key that was lost), after every key was
    /// tried.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        join_all(self.guards.iter().map(|g| g.extend(ttl)))
            .await
            .into_iter()
            .collect()
    }

    /// Releases every key, all at once. `Ok` when the set still held every key; the
    /// first error otherwise (an [`ErrorKind::NotHeld`] error for a key that had been
    /// lost, so that the caller learns its work may have overlapped another holder's),
    /// after every key was released.
    pub async fn release(self) -> Result<()> {
        join_all(self.guards.into_iter().map(LockGuard::release))
            .await
            .into_iter()
            .collect()
    }
}

/// The keys of a set, checked, without repeats, in the one order every client takes
/// them in.
fn sorted_keys<I, K>(keys: I) -> Result<Vec<LockKey>>
where
    I: IntoIterator<Item = K>,
    K: AsRef<str>,
{
    let mut sorted = keys
        .into_iter()
        .map(|k| LockKey::new(k.as_ref()))
        .collect::<Result<Vec<_>>>()?;
    if sorted.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "a set of keys to lock must name at least one key",
        ));
    }
    sorted.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "the key {:?} is named twice in one set: name each key once",
                pair[0].as_str()
            ),
        ));
    }
    Ok(sorted)
}

/// Gives back the keys of a set that could not be completed, all together, and returns
/// once they are released. The releases run in a task of their own, so that a caller
/// dropped meanwhile (a cancelled `lock_all`) does not stop them halfway.
async fn give_back(held: Vec<LockGuard>) {
    if held.is_empty() {
        return;
    }
    let releases = tokio::spawn(async move {
        for outcome in join_all(held.into_iter().map(LockGuard::release)).await {
            if let Err(error) = outcome {
                // The lease runs out at its TTL: nobody waits longer than that.
                debug!(%error, "giving back part of a set failed");
            }
        }
    });
    if let Err(error) = releases.await {
        debug!(%error, "the task giving back part of a set ended early");
    }
}

/// How one pass over the keys ended.
enum Pass {
    /// Every key is held.
    All(Vec<LockGuard>),
    /// The key at this index was held by someone else (with why, as a try tells it),
    /// or could not be asked while waiting (`None`); what the pass had taken is given
    /// back.
    Stopped(usize, Option<Busy>),
}

impl LockClient {
    /// Takes every key of `keys` or none, waiting up to `wait` (`Duration::MAX` for as
    /// long as it takes): one [`MultiGuard`] with each key's fence, a loss signal for
    /// any key, and one release for all. An [`ErrorKind::Timeout`] error when the
    /// deadline passes, holding nothing: as for [`lock`](Self::lock), a step still in
    /// flight at the deadline is abandoned, never waited for.
    ///
    /// The keys are taken one by one in sorted order. When one is held by someone else
    /// (or cannot be asked: a retryable error, retried until the deadline), what was
    /// taken is released at once, and the set waits for that key alone (as
    /// [`lock`](Self::lock) waits) before it tries the rest again: it never holds part
    /// of the set while it waits, so clients locking the same keys in any order do not
    /// deadlock. Dropping the future releases whatever it held, in the background.
    ///
    /// An [`ErrorKind::InvalidInput`] error for an empty set or a key named twice, and
    /// an [`ErrorKind::Configuration`] error on a client in fair mode: a set that
    /// gives its keys back while it waits cannot keep a place in each key's queue.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let backend = Arc::new(MemoryBackend::new());
    /// let client = LockClient::new(backend.clone());
    /// let set = client
    ///     .lock_all(["stock/paris", "stock/berlin"], Duration::from_secs(5))
    ///     .await?;
    /// let keys: Vec<&str> = set.keys().map(|k| k.as_str()).collect();
    /// assert_eq!(keys, ["stock/berlin", "stock/paris"]); // one order for every client
    /// let berlin = set.fence("stock/berlin").expect("in the set");
    ///
    /// // Another client's set that shares a key is refused whole: it holds nothing.
    /// let other = LockClient::new(backend);
    /// assert!(other.try_lock_all(["stock/paris", "stock/rome"]).await?.is_err());
    /// assert!(other.try_lock("stock/rome").await?.is_ok());
    ///
    /// set.release().await?;
    /// let again = other.lock_all(["stock/berlin"], Duration::from_secs(5)).await?;
    /// assert!(again.fence("stock/berlin") > Some(berlin)); // each key's fence rises
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_all<I, K>(&self, keys: I, wait: Duration) -> Result<MultiGuard>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let keys = self.set_of(keys)?;
        let deadline = deadline_after(wait);
        let span = tracing::info_span!("lock_all_acquire", keys = keys.len());
        let wait = within_deadline(&keys, deadline, self.lock_all_until(&keys, deadline));
        wait.instrument(span).await
    }

    /// Tries once: every key of `keys`, or [`Busy`] for the first key found taken
    /// (holding nothing). A key that cannot be asked (an unreachable server, say) is
    /// the backend's error, again holding nothing; bad input as for
    /// [`lock_all`](Self::lock_all).
    pub async fn try_lock_all<I, K>(&self, keys: I) -> Result<std::result::Result<MultiGuard, Busy>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        let keys = self.set_of(keys)?;
        let span = tracing::info_span!("lock_all_try_acquire", keys = keys.len());
        async {
            match self.pass(&keys, None, false).await? {
                Pass::All(guards) => Ok(Ok(MultiGuard { guards })),
                Pass::Stopped(i, busy) => Ok(Err(
                    busy.unwrap_or_else(|| Busy::held(keys[i].clone(), None))
                )),
            }
        }
        .instrument(span)
        .await
    }

    /// Takes every key of `keys` (waiting up to `wait`), runs `work` with their
    /// fences, and releases them: [`with_lock`](Self::with_lock) for a set. If any key
    /// is lost while `work` runs, `work` is dropped at its next await point and an
    /// [`ErrorKind::LockLost`] error is returned. When the release finds keys gone,
    /// the lease's end is the first such key's loss.
    pub async fn with_lock_all<I, K, F, Fut, T>(
        &self,
        keys: I,
        wait: Duration,
        work: F,
    ) -> Result<Locked<T>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
        F: FnOnce(Fences) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock_all(keys, wait).await?;
        let lost = guard.lost();
        let output = tokio::select! {
            biased;
            // `None` (the set's hold ended without a loss) cannot come while the
            // guard is here.
            Some((key, reason)) = lost => {
                drop(guard);
                return Err(Error::new(
                    ErrorKind::LockLost,
                    format!("the lock {:?} of a set was lost while work ran under it: {reason}", key.as_str()),
                ));
            }
            output = work(guard.fences()) => output,
        };
        let ends = join_all(guard.guards.into_iter().map(LockGuard::release_after_work)).await;
        // A loss first; then a release that did not get through; else released.
        let end = ends
            .iter()
            .copied()
            .find(|end| matches!(end, LeaseEnd::Lost(_)))
            .or_else(|| ends.iter().copied().find(|end| *end != LeaseEnd::Released))
            .unwrap_or(LeaseEnd::Released);
        Ok(Locked::new(output, end))
    }

    fn set_of<I, K>(&self, keys: I) -> Result<Vec<LockKey>>
    where
        I: IntoIterator<Item = K>,
        K: AsRef<str>,
    {
        if self.options().fair() {
            return Err(Error::new(
                ErrorKind::Configuration,
                "lock_all on a client in fair mode: a set gives back its keys while it waits, \
                 so it cannot keep a place in each key's queue; lock sets through a client \
                 without with_fair(true)",
            ));
        }
        sorted_keys(keys)
    }

    /// One pass over `keys` in order, each tried once, except that the key `waited`
    /// holds is already taken. What it took is given back when one is held by someone
    /// else, or, for a caller `waiting` until a deadline, cannot be asked (a retryable
    /// error, waited out as a held key is); any other error ends the call.
    async fn pass(
        &self,
        keys: &[LockKey],
        mut waited: Option<LockGuard>,
        waiting: bool,
    ) -> Result<Pass> {
        if self.backend().sets().is_some() {
            match self.pass_at_once(keys, waited, waiting).await {
                Ok(pass) => return pass,
                Err(handed_back) => waited = handed_back,
            }
        }
        let mut held = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            if waited.as_ref().is_some_and(|g| g.key() == key) {
                held.extend(waited.take());
                continue;
            }
            match self.try_lock(key.as_str()).await {
                Ok(Ok(guard)) => held.push(guard),
                Ok(Err(busy)) => {
                    held.extend(waited.take());
                    give_back(held).await;
                    return Ok(Pass::Stopped(i, Some(busy)));
                }
                Err(error)
                    if waiting
                        && error.is_retryable()
                        && error.kind() != ErrorKind::CircuitOpen =>
                {
                    debug!(%error, %key, "a key of the set could not be asked; waiting for it");
                    held.extend(waited.take());
                    give_back(held).await;
                    return Ok(Pass::Stopped(i, None));
                }
                Err(error) => {
                    held.extend(waited.take());
                    give_back(held).await;
                    return Err(error);
                }
            }
        }
        Ok(Pass::All(held))
    }

    /// A pass in one step on the server: the keys `waited` does not hold, all taken
    /// together or none ([`LockBackendExt::try_acquire_all`]). `Err`, handing `waited`
    /// back untouched, where the key-by-key pass is to run instead: a key this task
    /// holds in a reentrant scope, or a backend that turned out not to have the step.
    async fn pass_at_once(
        &self,
        keys: &[LockKey],
        waited: Option<LockGuard>,
        waiting: bool,
    ) -> std::result::Result<Result<Pass>, Option<LockGuard>> {
        let rest: Vec<(usize, &LockKey)> = keys
            .iter()
            .enumerate()
            .filter(|(_, key)| waited.as_ref().is_none_or(|g| g.key() != *key))
            .collect();
        if rest.is_empty() {
            // The set was one key, which the wait took.
            return Ok(Ok(Pass::All(waited.into_iter().collect())));
        }
        if rest
            .iter()
            .any(|(_, key)| reentrant::holds(&self.local, key))
        {
            return Err(waited);
        }
        // This client's own turn on each key, as a single try takes it: another task of
        // this client holding or waiting for a key stops the pass there.
        let mut turns = Vec::with_capacity(rest.len());
        for (i, key) in &rest {
            match self.local.of(key).try_lock_owned() {
                Ok(turn) => turns.push(turn),
                Err(_) => {
                    give_back(waited.into_iter().collect()).await;
                    let busy = Busy::this_client((*key).clone());
                    return Ok(Ok(Pass::Stopped(*i, Some(busy))));
                }
            }
        }
        let started = Stopwatch::start();
        let mut attempt = Attempt::new(self.engine());
        for (_, key) in &rest {
            attempt.fresh(key);
        }
        let owners = attempt.owners();
        let holder = self.options().holder();
        let answer = acquire_all_as(
            &**self.backend(),
            &owners,
            self.options().grant_ttl(),
            &holder,
        )
        .await
        .map(|outcome| match outcome {
            SetOutcome::Acquired(leases) => Answer::Granted(leases.into(), None),
            SetOutcome::Held { index, remaining } => Answer::Held { index, remaining },
        });
        let record = |outcome: Outcome| {
            for (key, _) in &owners {
                telemetry::acquisition(
                    self.backend().name(),
                    key,
                    self.options(),
                    outcome,
                    started,
                );
            }
        };
        let mut turns = turns.into_iter();
        match attempt.settle(answer, || turns.next()).await {
            Settled::Guards(mut guards) => {
                record(Outcome::Acquired);
                guards.extend(waited);
                guards.sort_by(|a, b| a.key().as_str().cmp(b.key().as_str()));
                Ok(Ok(Pass::All(guards.into_vec())))
            }
            Settled::Busy { index, remaining } => {
                give_back(waited.into_iter().collect()).await;
                record(Outcome::Busy);
                let (stopped, key) = rest.get(index).copied().unwrap_or(rest[0]);
                let busy = Busy::held(key.clone(), remaining);
                Ok(Ok(Pass::Stopped(stopped, Some(busy))))
            }
            Settled::Failed { error, .. } if error.kind() == ErrorKind::Unsupported => Err(waited),
            Settled::Failed { error, uncertain } => {
                // Whatever may have been applied is released in the background.
                drop(uncertain);
                give_back(waited.into_iter().collect()).await;
                record(Outcome::of_error(&error));
                if waiting && error.is_retryable() && error.kind() != ErrorKind::CircuitOpen {
                    debug!(%error, "the set could not be asked; waiting for its first key");
                    return Ok(Ok(Pass::Stopped(rest[0].0, None)));
                }
                Ok(Err(error))
            }
        }
    }

    async fn lock_all_until(&self, keys: &[LockKey], deadline: Instant) -> Result<MultiGuard> {
        let mut waited = None;
        let mut passes = 0u32;
        loop {
            passes += 1;
            match self.pass(keys, waited.take(), true).await? {
                Pass::All(guards) => {
                    debug!(passes, "acquired every key of the set");
                    return Ok(MultiGuard { guards });
                }
                Pass::Stopped(i, _) => {
                    // Holding nothing, wait for the key that stopped the pass.
                    let left = deadline.saturating_duration_since(Instant::now());
                    let guard = self.lock(keys[i].as_str(), left).await.map_err(|error| {
                        if error.kind() == ErrorKind::Timeout {
                            Error::new(
                                ErrorKind::Timeout,
                                format!(
                                    "could not acquire every key of a set of {} before the deadline ({passes} passes): {:?} was held",
                                    keys.len(),
                                    keys[i].as_str()
                                ),
                            )
                            .with_source(error)
                        } else {
                            error
                        }
                    })?;
                    waited = Some(guard);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::OperatorBackend;

    #[test]
    fn a_set_is_sorted_and_each_key_named_once() {
        let keys = sorted_keys(["b", "c", "a"]).expect("valid");
        let names: Vec<&str> = keys.iter().map(LockKey::as_str).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let twice = sorted_keys(["a", "b", "a"]).expect_err("a key named twice");
        assert_eq!(twice.kind(), ErrorKind::InvalidInput);
        assert!(twice.to_string().contains("\"a\""), "{twice}");
        let none = sorted_keys(Vec::<String>::new()).expect_err("an empty set");
        assert_eq!(none.kind(), ErrorKind::InvalidInput);
        let bad = sorted_keys(["a", ""]).expect_err("an empty key");
        assert_eq!(bad.kind(), ErrorKind::InvalidKey);
    }

    #[tokio::test]
    async fn a_fair_client_refuses_a_set_with_a_configuration_error() {
        use crate::{LockOptions, MemoryBackend};
        let options = LockOptions::new(Duration::from_secs(5)).with_fair(true);
        let client = LockClient::with_options(std::sync::Arc::new(MemoryBackend::new()), options)
            .expect("the memory backend has a fair mode");
        let refused = client
            .lock_all(["a", "b"], Duration::from_secs(1))
            .await
            .expect_err("refused");
        assert_eq!(refused.kind(), ErrorKind::Configuration);
        assert!(refused.to_string().contains("fair"), "{refused}");
        let tried = client.try_lock_all(["a"]).await.expect_err("refused");
        assert_eq!(tried.kind(), ErrorKind::Configuration);
        // Nothing was taken: a racing client gets both keys.
        let racing = LockClient::new(client.backend().clone());
        assert!(racing
            .try_lock_all(["a", "b"])
            .await
            .expect("no error")
            .is_ok());
    }

    /// A server that cannot be reached is an error for a try, not a held key; a wait
    /// rides it out until the deadline, then says so, holding nothing.
    #[tokio::test]
    async fn an_unreachable_server_is_an_error_not_a_held_set() {
        let backend = std::sync::Arc::new(crate::MemoryBackend::new());
        let client = LockClient::new(backend.clone());
        backend.stop();
        let tried = client.try_lock_all(["a", "b"]).await.expect_err("an error");
        assert_eq!(tried.kind(), ErrorKind::Unavailable, "{tried}");
        let waited = client
            .lock_all(["a", "b"], Duration::from_millis(200))
            .await
            .expect_err("an error");
        assert_eq!(waited.kind(), ErrorKind::Timeout, "{waited}");
        backend.start();
        let set = client.try_lock_all(["a", "b"]).await.expect("no error");
        assert!(set.is_ok(), "nothing was left held");
    }

    /// `extend` moves every key's lease on the server to the new TTL and the set's
    /// validity with it; once a key is lost, it says so (naming the key) after still
    /// extending the others.
    #[tokio::test]
    async fn extend_moves_every_key_and_reports_a_lost_one() {
        use crate::{LockBackend, LockOptions, MemoryBackend};
        let backend = std::sync::Arc::new(MemoryBackend::new());
        let options = LockOptions::new(Duration::from_secs(2));
        let client = LockClient::with_options(backend.clone(), options).expect("options");
        let set = client
            .lock_all(["x", "y"], Duration::from_secs(1))
            .await
            .expect("free");
        let before = set.valid_until();
        set.extend(Duration::from_secs(60)).await.expect("extended");
        assert!(set.valid_until() > before + Duration::from_secs(30));
        for key in ["x", "y"] {
            let info = backend
                .inspect(&LockKey::new(key).expect("valid"))
                .await
                .expect("inspect")
                .expect("held");
            assert!(
                info.remaining > Duration::from_secs(30),
                "{key}: {:?} left",
                info.remaining
            );
        }
        // An operator breaks one key: the set's extend reports it, and still extends
        // the other.
        assert!(backend
            .force_release(&LockKey::new("x").expect("valid"))
            .await
            .expect("forced"));
        let lost = set
            .extend(Duration::from_secs(90))
            .await
            .expect_err("x is lost");
        assert_eq!(lost.kind(), ErrorKind::NotHeld, "{lost}");
        assert!(lost.to_string().contains("\"x\""), "{lost}");
        let y = backend
            .inspect(&LockKey::new("y").expect("valid"))
            .await
            .expect("inspect")
            .expect("held");
        assert!(y.remaining > Duration::from_secs(60), "{:?}", y.remaining);
        assert!(!set.is_held());
    }

    /// A set of one key that was held when asked is taken once its holder lets go,
    /// whether the backend takes sets in one step (memory) or key by key.
    #[tokio::test]
    async fn a_set_of_one_held_key_is_taken_once_it_is_free() {
        use crate::{LockBackend, MemoryBackend};
        let backend = std::sync::Arc::new(MemoryBackend::new());
        assert!(backend.sets().is_some());
        let holder = LockClient::new(backend.clone());
        let held = holder
            .try_lock("only")
            .await
            .expect("no error")
            .expect("free");
        let client = LockClient::new(backend);
        let release = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            held.release().await
        };
        let (set, released) =
            tokio::join!(client.lock_all(["only"], Duration::from_secs(5)), release);
        released.expect("released");
        let set = set.expect("taken once free");
        assert_eq!(set.keys().count(), 1);
        assert!(set.is_held());
    }

    #[test]
    fn fences_are_found_by_key() {
        let fences = Fences(vec![
            (LockKey::new("a").expect("valid"), FencingToken::new(3)),
            (LockKey::new("b").expect("valid"), FencingToken::new(9)),
        ]);
        assert_eq!(fences.get("b"), Some(FencingToken::new(9)));
        assert_eq!(fences.get("c"), None);
        assert_eq!(fences.len(), 2);
    }
}
