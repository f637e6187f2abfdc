//! [`RedlockBackend`]: one lease held on a majority of independent Redis masters.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, ExtendRequest, Grant, HolderRecords,
    OperatorBackend, OwnerToken, ReleaseOutcome, Renewal, RoundTrips,
};
use distlock_core::{Error, ErrorKind, FencingToken, LockBackend, LockInfo, LockKey, Result};
use futures_util::future::BoxFuture;
use futures_util::stream::{self, FuturesUnordered};
use futures_util::StreamExt;

use crate::backend::RedisBackend;
use crate::config::RedlockConfig;

const NAME: &str = "redlock";

/// A lock backend over three or more independent Redis masters (Redlock): a lease is
/// held while a majority of the masters hold it, each by its own clock.
///
/// Each operation goes to every master at once and returns as soon as its outcome is
/// decided. A granted acquire's, a release's or a renewal's requests still under way
/// carry on in the background; a refused acquire's are dropped, and what it took is
/// released on every master, without a release notification: attempts that met and split the masters
/// would otherwise wake every waiter of the key at once, to split them again, a storm
/// that can keep every attempt failing. An attempt that finds no majority of the
/// masters holding the key answers "held", to be tried again after a random pause of
/// one to four node time-outs (Redlock's retry delay). A release answers
/// [`Released`](ReleaseOutcome::Released) only when a majority of the
/// masters released the lease, and `NotHeld` when a majority no longer held it; with
/// neither (masters that did not answer), it is an error that says how many masters
/// answered what, since the silent ones may have let the lease run out and granted it
/// to another majority. The crate docs say how fences
/// are minted and what holds when a master restarts empty. Clones share the
/// connections.
#[derive(Clone)]
pub struct RedlockBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: RedlockConfig,
    members: Vec<RedisBackend>,
    capabilities: Capabilities,
}

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The answers of the masters to one operation, in the order they come.
struct Replies<T> {
    pending: FuturesUnordered<BoxFuture<'static, (usize, Result<T>)>>,
}

impl<T: Send + 'static> Replies<T> {
    async fn next(&mut self) -> Option<(usize, Result<T>)> {
        self.pending.next().await
    }

    /// Lets the requests still under way finish in the background, unread: a granted
    /// acquire, a release or a renewal must reach every master it can. (A refused
    /// acquire's are dropped instead, so that none lands after its grants are taken
    /// back, and a read's: what they would still do is nobody's loss.)
    fn detach(self) {
        if !self.pending.is_empty() {
            let mut pending = self.pending;
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
    }
}

/// How long an attempt that found the masters split waits before it looks again:
/// uniformly random between one and four node time-outs, so that attempts that met
/// once come back apart. (Should the operating system's generator refuse, two and a
/// half: the pause still happens, only not spread.)
fn split_retry(node_timeout: Duration) -> Duration {
    let fraction = getrandom::u32().map_or(0.5, |r| f64::from(r) / f64::from(u32::MAX));
    node_timeout.mul_f64(1.0 + 3.0 * fraction)
}

/// The lease a majority of the masters' `holders` show, if one does: its owner is
/// on a majority, and its fence is the one a majority of them show, else (a grant
/// whose fence is not agreed yet, or a master that granted late and shows its own
/// proposal) the largest. It lasts while a majority still holds it: the quorum-th
/// longest of their remaining TTLs.
fn holder_of_majority(holders: &[(LockInfo, String)], quorum: usize) -> Option<LockInfo> {
    let owner = holders
        .iter()
        .map(|(_, owner)| owner)
        .find(|owner| holders.iter().filter(|(_, o)| o == *owner).count() >= quorum)?;
    let same: Vec<&LockInfo> = holders
        .iter()
        .filter(|(_, o)| o == owner)
        .map(|(info, _)| info)
        .collect();
    let mut remaining: Vec<Duration> = same.iter().map(|i| i.remaining).collect();
    remaining.sort_by(|a, b| b.cmp(a));
    let agreed = same
        .iter()
        .map(|i| i.fence)
        .find(|f| same.iter().filter(|i| i.fence == *f).count() >= quorum);
    let fence = agreed.or_else(|| same.iter().map(|i| i.fence).max())?;
    // The holder and grant time the majority's masters stored (one, as the grant
    // sent them).
    let first = same.first()?;
    Some(
        LockInfo::new(fence, remaining[quorum - 1]).held_by(first.holder.clone(), first.granted_at),
    )
}

/// How the masters answered, where a majority decides.
struct Tally {
    masters: usize,
    quorum: usize,
    errors: Vec<Error>,
}

impl Tally {
    fn new(masters: usize, quorum: usize) -> Self {
        Tally {
            masters,
            quorum,
            errors: Vec::new(),
        }
    }

    /// Whether `no` answers (refusals and errors together) leave no majority possible.
    fn lost(&self, no: usize) -> bool {
        no > self.masters - self.quorum
    }

    /// Whether some owner could hold a majority, given `holders` and `free` answers:
    /// the most masters any one owner was seen on, plus every master that has not
    /// answered or failed to, reach a majority.
    fn could_hold(&self, holders: &[(LockInfo, String)], free: usize) -> bool {
        let most = holders
            .iter()
            .map(|(_, owner)| holders.iter().filter(|(_, o)| o == owner).count())
            .max()
            .unwrap_or(0);
        most + (self.masters - free - holders.len()) >= self.quorum
    }

    /// The error of a release that no majority confirmed either way: `released`
    /// masters released the lease, `not_held` no longer held it, and the rest did not
    /// answer. Of the kind [`kind`](Self::kind) picks; repeating the release is
    /// harmless.
    fn unconfirmed_release(&self, released: usize, not_held: usize) -> Error {
        Error::new(
            self.kind(),
            format!(
                "cannot tell whether the lease was still held when released: {released} of {} \
                 masters released it, {not_held} no longer held it and {} did not answer, \
                 and a majority is {}{}",
                self.masters,
                self.errors.len(),
                self.quorum,
                self.first_error()
            ),
        )
        .with_backend(NAME)
    }

    /// The error of an operation that no majority answered: of the kind
    /// [`kind`](Self::kind) picks; never sent where no master's request left this
    /// process (every master answered, or refused it unsent).
    fn error(&self, what: &str, answered: usize) -> Error {
        let error = Error::new(
            self.kind(),
            format!(
                "{what}: {answered} of {} masters answered, and a majority is {}{}",
                self.masters,
                self.quorum,
                self.first_error()
            ),
        )
        .with_backend(NAME);
        let unsent = self.errors.iter().filter(|e| e.was_not_sent()).count();
        if answered == 0 && unsent == self.masters {
            error.with_not_sent()
        } else {
            error
        }
    }

    /// The kind every master's error shares (wrong credentials everywhere stay an
    /// authentication error), else a retryable one.
    fn kind(&self) -> ErrorKind {
        match self.errors.first().map(Error::kind) {
            Some(kind) if self.errors.iter().all(|e| e.kind() == kind) => kind,
            _ => ErrorKind::Unavailable,
        }
    }

    /// The first master's error, as the tail of a message.
    fn first_error(&self) -> String {
        self.errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    }
}

impl RedlockBackend {
    /// Connects with the settings of a `redlock://` or `redlocks://` URL (see
    /// [`RedlockConfig`]). Every master is tried at once: wrong credentials fail here
    /// with [`ErrorKind::Authentication`], and fewer than a majority of masters
    /// answering is an [`ErrorKind::Unavailable`] error. A minority that is down is
    /// reached when it comes back.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(RedlockConfig::from_url(url)?).await
    }

    /// Connects with `config`, typed or parsed, after [checking](RedlockConfig::check)
    /// it; see [`connect`](Self::connect).
    pub async fn connect_with(config: RedlockConfig) -> Result<Self> {
        config.check()?;
        let members = config
            .members
            .iter()
            .cloned()
            .map(RedisBackend::connect_lazily)
            .collect::<Result<Vec<_>>>()?;
        let mut capabilities = members
            .first()
            .map(|m| m.capabilities().clone())
            .unwrap_or_default();
        capabilities.round_trips = RoundTrips::new(2, 1, 1);
        capabilities.clock_drift = config.drift;
        // Each master would time a grant by its own clock: the client's time is sent
        // to them all, so that they store one (acquire.lua).
        capabilities.holder_records = HolderRecords::ClientClock;
        // No fair mode (a queue would have to be kept on every master, with a majority
        // agreeing on its order: not built) and no permits (they are not spread over
        // the masters): `fair()` and `permits()` answer `None`, so a fair client or a
        // semaphore is refused.
        let backend = RedlockBackend {
            inner: Arc::new(Inner {
                config,
                members,
                capabilities,
            }),
        };
        // A first connection to each: its connect and response timeouts.
        let timeout = backend
            .inner
            .config
            .members
            .iter()
            .map(|m| m.connect_timeout + m.response_timeout)
            .max()
            .unwrap_or(Duration::from_secs(8));
        let mut tally = backend.tally();
        let mut replies = backend.fan_out(timeout, |m| async move { m.prepare().await });
        let mut answered = 0;
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(()) => answered += 1,
                Err(e) if e.kind() == ErrorKind::Authentication => {
                    replies.detach();
                    return Err(e);
                }
                Err(e) => tally.errors.push(e),
            }
        }
        if answered < tally.quorum {
            return Err(tally.error("cannot reach the Redlock", answered));
        }
        Ok(backend)
    }

    /// The settings in force.
    pub fn config(&self) -> &RedlockConfig {
        &self.inner.config
    }

    fn tally(&self) -> Tally {
        Tally::new(self.inner.members.len(), self.inner.config.quorum())
    }

    /// Starts `op` on every master at once, each bounded by `timeout`.
    fn fan_out<T, F, Fut>(&self, timeout: Duration, op: F) -> Replies<T>
    where
        T: Send + 'static,
        F: Fn(RedisBackend) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        let pending = self
            .inner
            .members
            .iter()
            .enumerate()
            .map(|(i, member)| {
                let call = op(member.clone());
                // Named only in the error: nothing is formatted for a master that answers.
                let named = member.clone();
                let future: BoxFuture<'static, (usize, Result<T>)> = Box::pin(async move {
                    match tokio::time::timeout(timeout, call).await {
                        Ok(reply) => (i, reply),
                        Err(_) => (
                            i,
                            Err(Error::new(
                                ErrorKind::Timeout,
                                format!(
                                    "master {i} ({}) did not answer within {timeout:?} (node_timeout_ms={})",
                                    named.config().endpoint_list(),
                                    timeout.as_millis()
                                ),
                            )
                            .with_backend(NAME)),
                        ),
                    }
                });
                future
            })
            .collect();
        Replies { pending }
    }

    /// Takes back what a failed acquire left behind, `owner`'s grants of `key` on
    /// every master, without telling the key's waiters: the lock was never held, and a
    /// release notification would start every waiter at once, to split the masters
    /// again. Awaited (each master within the node time-out) before the attempt
    /// answers, never left to run in the background: the same owner's retry, which
    /// may follow at once, is then sent after this release on each master's
    /// connection, and no release of this attempt can land on the retry's grant.
    async fn release_everywhere(&self, key: &LockKey, owner: &OwnerToken) {
        let (key, owner) = (key.clone(), *owner);
        let timeout = self.inner.config.node_timeout(Duration::MAX);
        let mut releases = self.fan_out(timeout, move |m| {
            let (key, owner) = (key.clone(), owner);
            async move { m.release_telling(&key, &owner, false).await }
        });
        while releases.next().await.is_some() {}
    }

    /// Redlock's second step: makes `fence` the grant's fence on the masters of
    /// `proposals` that proposed another, so that a majority holds it. Whether it does.
    async fn commit(
        &self,
        request: &AcquireRequest,
        fence: u64,
        proposals: &[(usize, u64)],
    ) -> bool {
        let agreeing = proposals.iter().filter(|(_, f)| *f == fence).count();
        let behind: Vec<usize> = proposals
            .iter()
            .filter(|(_, f)| *f != fence)
            .map(|(i, _)| *i)
            .collect();
        let quorum = self.inner.config.quorum();
        let timeout = self.inner.config.node_timeout(request.ttl());
        let calls: FuturesUnordered<_> =
            behind
                .into_iter()
                .map(|i| {
                    let member = self.inner.members[i].clone();
                    async move {
                        tokio::time::timeout(timeout, member.commit_fence(request, fence)).await
                    }
                })
                .collect();
        let committed = calls
            .filter(|reply| std::future::ready(matches!(reply, Ok(Ok(true)))))
            .count()
            .await;
        agreeing + committed >= quorum
    }

    /// Reads, in the background, the answers of the masters still granting after a
    /// majority agreed on `fence`, and writes `fence` to each that granted with a
    /// proposal of its own: otherwise a retry by the owner (a lost reply, a leader
    /// resuming its term) answered by such a master and one of the majority would
    /// take the larger of the two, a fence the holder was never given.
    fn commit_late(&self, replies: Replies<Grant>, request: Arc<AcquireRequest>, fence: u64) {
        if replies.pending.is_empty() {
            return;
        }
        let backend = self.clone();
        let mut replies = replies;
        tokio::spawn(async move {
            let timeout = backend.inner.config.node_timeout(request.ttl());
            while let Some((i, reply)) = replies.next().await {
                if matches!(reply, Ok(Grant::Granted(proposed)) if proposed.get() != fence) {
                    let member = &backend.inner.members[i];
                    // A master that cannot be reached now keeps its proposal: a
                    // retry it answers takes the larger fence, still above every
                    // fence granted before.
                    let _ =
                        tokio::time::timeout(timeout, member.commit_fence(&request, fence)).await;
                }
            }
        });
    }
}

#[async_trait]
impl LockBackend for RedlockBackend {
    fn operator(&self) -> Option<&dyn OperatorBackend> {
        Some(self)
    }

    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        let timeout = self.inner.config.node_timeout(request.ttl());
        let shared = Arc::new(request.clone());
        // One grant time for every master, as the holder's record shows it.
        let granted_at = SystemTime::now();
        let mut replies = self.fan_out(timeout, |m| {
            let request = shared.clone();
            async move { m.grant(&request, None, granted_at).await }
        });
        let mut tally = self.tally();
        let mut proposals: Vec<(usize, u64)> = Vec::new();
        let mut held: Vec<Option<Duration>> = Vec::new();
        while let Some((i, reply)) = replies.next().await {
            match reply {
                Ok(Grant::Granted(fence)) => proposals.push((i, fence.get())),
                Ok(Grant::Held { remaining }) => held.push(remaining),
                // An answer this version does not know counts as a master that failed.
                Ok(other) => tally.errors.push(
                    Error::new(ErrorKind::Backend, format!("a master answered {other:?}"))
                        .with_backend(NAME),
                ),
                Err(e) => tally.errors.push(e),
            }
            if proposals.len() >= tally.quorum || tally.lost(held.len() + tally.errors.len()) {
                break;
            }
        }
        if proposals.len() >= tally.quorum {
            // The largest proposal of the majority: above every fence committed to a
            // majority before, since any two majorities share a master.
            let fence = proposals.iter().map(|(_, f)| *f).max().unwrap_or(0);
            // An efficiency lock's grants carry no fence (every proposal is 0): there
            // is nothing to agree on, and no second step.
            if self.commit(request, fence, &proposals).await {
                // Left to finish: the masters still granting take the lease too, so
                // that the holder keeps a majority should one of the first to answer
                // restart empty, and with the agreed fence, so that a retry by the
                // owner that such a master answers finds the same one.
                self.commit_late(replies, shared, fence);
                return Ok(Grant::Granted(FencingToken::new(fence)));
            }
            drop(replies);
            self.release_everywhere(request.key(), request.owner())
                .await;
            return Err(Error::new(
                ErrorKind::Unavailable,
                "the masters that granted the lock lost it before a majority agreed on its fence",
            )
            .with_backend(NAME));
        }
        // Dropped, not left to finish: a master's acquire still under way must not
        // land after the release below (as a script the master had to be sent whole
        // would, on a second request).
        drop(replies);
        let granted = proposals.len();
        // Nothing to take back where every master refused.
        if held.len() < self.inner.members.len() {
            self.release_everywhere(request.key(), request.owner())
                .await;
        }
        if held.is_empty() {
            return Err(tally.error("cannot acquire", granted + held.len()));
        }
        // The key frees for a majority once `needed` more of the holding masters free it.
        let needed = tally.quorum - granted;
        let remaining = if held.len() < tally.quorum {
            // No majority of the answers says "held": no lease holds the key, or the
            // masters of the one that does are partly away. Attempts that met split
            // the masters among them and are taking their grants back now, so look
            // again soon, after a random pause (Redlock's retry delay): attempts
            // that start together would split again.
            Some(split_retry(timeout))
        } else if held.len() >= needed && held.iter().all(Option::is_some) {
            let mut left: Vec<Duration> = held.into_iter().flatten().collect();
            left.sort();
            left.get(needed - 1).copied()
        } else {
            None
        };
        Ok(Grant::Held { remaining })
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let timeout = self.inner.config.node_timeout(Duration::MAX);
        let (shared_key, owner) = (key.clone(), *owner);
        let mut replies = self.fan_out(timeout, |m| {
            let key = shared_key.clone();
            async move { m.release_telling(&key, &owner, true).await }
        });
        let mut tally = self.tally();
        let (mut released, mut not_held) = (0, 0);
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(ReleaseOutcome::Released) => released += 1,
                Ok(_) => not_held += 1,
                Err(e) => tally.errors.push(e),
            }
            if released >= tally.quorum || tally.lost(not_held) {
                break;
            }
        }
        replies.detach();
        // A lease is held while a majority holds it: a master that still had it (a
        // renewal that landed there as the lease was lost, say) does not make it held,
        // and fewer than a majority confirming cannot say it was held to the end (the
        // masters that did not answer may have let it run out, and granted it to
        // another majority).
        if released >= tally.quorum {
            Ok(ReleaseOutcome::Released)
        } else if tally.lost(not_held) {
            Ok(ReleaseOutcome::NotHeld)
        } else {
            Err(tally.unconfirmed_release(released, not_held))
        }
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        let timeout = self.inner.config.node_timeout(request.ttl());
        let shared = Arc::new(request.clone());
        let mut replies = self.fan_out(timeout, |m| {
            let request = shared.clone();
            async move { m.renew(&request).await }
        });
        let mut tally = self.tally();
        let (mut renewed, mut not_held) = (0, 0);
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(Renewal::Renewed) => renewed += 1,
                Ok(_) => not_held += 1,
                Err(e) => tally.errors.push(e),
            }
            if renewed >= tally.quorum || tally.lost(not_held + tally.errors.len()) {
                break;
            }
        }
        replies.detach();
        if renewed >= tally.quorum {
            Ok(Renewal::Renewed)
        } else if tally.lost(not_held) {
            Ok(Renewal::NotHeld)
        } else {
            Err(tally.error("cannot extend", renewed + not_held))
        }
    }

    /// Held where a majority of the masters agree on the owner; free only where the
    /// answers rule that out, counting every master that did not answer as a possible
    /// holder: a master that says "free" may be the one that missed the grant (an
    /// acquire stops at a majority), so one "free" and the rest silent is an error,
    /// never "free".
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let timeout = self.inner.config.node_timeout(Duration::MAX);
        let shared_key = key.clone();
        let mut replies = self.fan_out(timeout, |m| {
            let key = shared_key.clone();
            async move { m.holder(&key).await }
        });
        let mut tally = self.tally();
        let mut free = 0;
        let mut holders: Vec<(LockInfo, String)> = Vec::new();
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(Some(holder)) => holders.push(holder),
                Ok(None) => free += 1,
                Err(e) => tally.errors.push(e),
            }
            let agreed = holders.last().is_some_and(|(last, owner)| {
                holders
                    .iter()
                    .filter(|(info, o)| o == owner && info.fence == last.fence)
                    .count()
                    >= tally.quorum
            });
            if agreed || !tally.could_hold(&holders, free) {
                break;
            }
        }
        drop(replies);
        let found = holder_of_majority(&holders, tally.quorum);
        if found.is_none() && tally.could_hold(&holders, free) {
            return Err(tally.error("cannot inspect", free + holders.len()));
        }
        Ok(found)
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let timeout = self.inner.config.node_timeout(Duration::MAX);
        let shared_key = key.clone();
        let mut replies = self.fan_out(timeout, |m| {
            let key = shared_key.clone();
            async move { m.watch(&key).await }
        });
        let mut tally = self.tally();
        let mut streams = Vec::new();
        // A release is published on every master that held the key, so the streams of
        // a majority hear it; a master slow to subscribe is not waited for.
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(Some(stream)) => streams.push(stream),
                Ok(None) => {}
                Err(e) => tally.errors.push(e),
            }
            if streams.len() >= tally.quorum {
                break;
            }
        }
        drop(replies);
        if streams.is_empty() && !tally.errors.is_empty() {
            return Err(tally.error("cannot watch", 0));
        }
        let merged: ChangeStream = Box::pin(stream::select_all(streams));
        Ok(Some(merged))
    }
}

#[async_trait]
impl OperatorBackend for RedlockBackend {
    /// The keys a majority of masters could hold, each shown as
    /// [`inspect`](LockBackend::inspect) shows it: held only where a majority agrees.
    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let timeout = self.inner.config.node_timeout(Duration::MAX);
        let shared_prefix = prefix.to_owned();
        let mut replies = self.fan_out(timeout, |m| {
            let prefix = shared_prefix.clone();
            async move { m.lock_keys(&prefix).await }
        });
        let mut tally = self.tally();
        let mut answered = 0;
        let mut keys: Vec<LockKey> = Vec::new();
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(found) => {
                    answered += 1;
                    keys.extend(found);
                }
                Err(e) => tally.errors.push(e),
            }
        }
        if answered < tally.quorum {
            return Err(tally.error("cannot list the locks", answered));
        }
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keys.dedup();
        let mut held = Vec::new();
        for key in keys {
            if let Some(info) = self.inspect(&key).await? {
                held.push((key, info));
            }
        }
        Ok(held)
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let timeout = self.inner.config.node_timeout(Duration::MAX);
        let shared_key = key.clone();
        let mut replies = self.fan_out(timeout, |m| {
            let key = shared_key.clone();
            async move { m.force_release(&key).await }
        });
        let mut tally = self.tally();
        let (mut answered, mut removed) = (0, false);
        while let Some((_, reply)) = replies.next().await {
            match reply {
                Ok(deleted) => {
                    answered += 1;
                    removed |= deleted;
                }
                Err(e) => tally.errors.push(e),
            }
        }
        if answered < tally.quorum {
            return Err(tally.error("cannot force the release", answered));
        }
        Ok(removed)
    }
}
