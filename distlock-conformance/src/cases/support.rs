//! What the cases share: the names every case file uses, and the steps several
//! cases take (contending, granting, waiting for a key, the client a case builds).

pub(super) use std::sync::atomic::{AtomicU32, Ordering};
pub(super) use std::sync::{Arc, Mutex};
pub(super) use std::time::Duration;

pub(super) use distlock_core::backend::{
    AcquireOutcome, ExtendOutcome, FairBackend, FenceDurability, Lease, LockBackendExt,
    OperatorBackend, OwnerToken, ReleaseOutcome, SetOutcome,
};
pub(super) use distlock_core::{
    BusyReason, DynLockBackend, Error, ErrorKind, FencingToken, LockClient, LockKey, LockOptions,
    LossReason,
};
pub(super) use futures_util::future::join_all;
pub(super) use tokio::time::{sleep, sleep_until, timeout, Instant};

pub(super) use crate::case::{CaseError, CaseResult};

pub(super) use crate::target::{LinkedClient, RoundTripMeter, Target};

/// `tasks_each` tasks per client in `clients` contend for one key, `per_task` grants
/// each: at no instant may two hold it, and each grant's fence must be above every
/// earlier one.
pub(super) async fn contend(
    t: &Target,
    clients: &[Arc<DynLockBackend>],
    tasks_each: usize,
    per_task: usize,
) -> CaseResult {
    let key = t.key("contention");
    let ttl = t.long_ttl();
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let last_fence = Arc::new(Mutex::new(0u64));
    let fence_errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let give_up = Instant::now() + Duration::from_secs(90);
    let work = (0..tasks_each * clients.len()).map(|n| {
        let backend = clients[n % clients.len()].clone();
        let (key, inside, overlaps, last_fence, fence_errors) = (
            key.clone(),
            inside.clone(),
            overlaps.clone(),
            last_fence.clone(),
            fence_errors.clone(),
        );
        async move {
            let mut done = 0;
            while done < per_task {
                if Instant::now() > give_up {
                    return fail("contention did not finish in time");
                }
                let Some(lease) = grant(&backend, &key, ttl).await? else {
                    sleep(Duration::from_millis(1 + rand::random::<u64>() % 3)).await;
                    continue;
                };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                {
                    let mut last = last_fence.lock().unwrap_or_else(|p| p.into_inner());
                    if !t.fence_rose(FencingToken::new(*last), lease.fence()) {
                        fence_errors
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("fence {} after {}", lease.fence(), *last));
                    }
                    *last = (*last).max(lease.fence().get());
                }
                sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                backend.release(lease.key(), lease.owner()).await?;
                done += 1;
            }
            Ok(())
        }
    });
    let results = join_all(work).await;
    // What broke the contract first; an error a task met afterwards is its consequence.
    let overlaps = overlaps.load(Ordering::SeqCst);
    ensure!(overlaps == 0, "two holders overlapped {overlaps} times");
    let fence_errors = fence_errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    ensure!(
        fence_errors.is_empty(),
        "fences did not increase with each holder: {fence_errors:?}"
    );
    for r in results {
        r?;
    }
    Ok(())
}

/// A client whose link can be cut, warmed up (its connections open).
pub(super) async fn linked(t: &Target) -> Result<LinkedClient, CaseError> {
    let (backend, link) = t
        .linked_client()
        .await
        .ok_or_else(|| CaseError::Skipped("the target makes no linked clients".into()))?
        .map_err(|e| CaseError::Failed(format!("a linked client could not be made: {e}")))?;
    backend.inspect(&t.key("warm-up")).await?;
    Ok((backend, link))
}

pub(super) fn link_err(what: &str) -> impl FnOnce(distlock_core::BoxError) -> CaseError + '_ {
    move |e| CaseError::Failed(format!("the link could not {what}: {e}"))
}

/// `n` backends to make clients of: the target's, then independent clients of its
/// server where the target makes them; otherwise the target's own again (each
/// [`LockClient`] in fair mode is a waiter of its own either way).
pub(super) async fn backends(t: &Target, n: usize) -> Result<Vec<Arc<DynLockBackend>>, CaseError> {
    let mut all = vec![t.backend().clone()];
    while all.len() < n {
        match t.another_client().await {
            Some(client) => all.push(client?),
            None => all.push(t.backend().clone()),
        }
    }
    Ok(all)
}

/// One attempt on `backend`: the lease, or `None` when the key is held.
pub(super) async fn grant(
    backend: &Arc<DynLockBackend>,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>, CaseError> {
    match backend.try_acquire(key, ttl).await? {
        AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
        AcquireOutcome::Held { .. } => Ok(None),
    }
}

/// A waiter on a client of `waiting` is woken by a release on `holding`, not by its
/// next poll.
pub(super) async fn waiter_woken(
    t: &Target,
    holding: &Arc<DynLockBackend>,
    waiting: &Arc<DynLockBackend>,
) -> CaseResult {
    let key = t.key("wake");
    let holder = grant(holding, &key, t.long_ttl())
        .await?
        .ok_or_else(|| CaseError::Failed("a fresh key was held".into()))?;
    // A polling waiter with this backoff would sleep 5 s; a notified one wakes at once.
    let options =
        LockOptions::new(t.long_ttl()).with_backoff(Duration::from_secs(5), Duration::from_secs(5));
    let client = LockClient::with_options(waiting.clone(), options)?;
    let waiter = async {
        let guard = client.lock(key.as_str(), Duration::from_secs(20)).await?;
        let at = Instant::now();
        guard.release().await?;
        Ok::<_, Error>(at)
    };
    let releaser = async {
        sleep(Duration::from_millis(300)).await;
        let at = Instant::now();
        holding.release(&key, holder.owner()).await.map(|_| at)
    };
    let (acquired_at, released_at) = tokio::join!(waiter, releaser);
    let (acquired_at, released_at) = (acquired_at?, released_at?);
    let handoff = acquired_at.saturating_duration_since(released_at);
    ensure!(
        handoff < Duration::from_millis(500),
        "the waiter took {handoff:?} to notice the release"
    );
    Ok(())
}

/// One attempt of another owner on a key, for [`outlasts_its_retry`].
type OtherAttempt<'a> = dyn FnMut(
        &'a LockKey,
        Duration,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<Lease>, CaseError>>
    + Send
    + 'a;

/// A grant retried by its owner (its first reply lost) restarted its expiry on the
/// server: the server agrees with the validity the client counts (`inspect`, within
/// the expiry slack), and another owner's attempts, made every few milliseconds, get
/// the key only once that validity has ended.
pub(super) async fn outlasts_its_retry<'a>(
    t: &'a Target,
    retried: &'a Lease,
    other: &mut OtherAttempt<'a>,
) -> CaseResult {
    let key = retried.key();
    // Asked a few times within 100 ms: a quorum backend returns once a majority has
    // answered, and a member still applying its part of the retry (a second request
    // on it, sent after the majority answered) may be among the first to answer an
    // inspect. A retry that did not restart the expiry never catches up: what the
    // server shows only shrinks.
    let mut tries = 0;
    loop {
        let counted = retried
            .valid_until()
            .saturating_duration_since(Instant::now());
        let on_server = t
            .backend()
            .inspect(key)
            .await?
            .map(|info| info.remaining)
            .unwrap_or_default();
        if on_server + t.expiry_slack() >= counted {
            break;
        }
        tries += 1;
        if tries == 5 {
            return fail(format!(
                "after the retry the server had {on_server:?} left on the lease and the client counted {counted:?}: the retry did not restart the expiry"
            ));
        }
        sleep(Duration::from_millis(20)).await;
    }
    let give_up = Instant::now() + retried.ttl() * 4 + t.expiry_slack() * 4;
    let next = loop {
        if let Some(lease) = other(key, t.long_ttl()).await? {
            break lease;
        }
        if Instant::now() > give_up {
            return fail(format!("{key} never became free"));
        }
        sleep(Duration::from_millis(5)).await;
    };
    let granted_at = Instant::now();
    let early = retried.valid_until().saturating_duration_since(granted_at);
    t.backend().release_lease(&next).await?;
    ensure!(
        early.is_zero(),
        "another owner got the key {early:?} before the retried grant's validity ended: the retry did not restart the expiry, and made two holders"
    );
    Ok(())
}

/// How far past its wait a `lock()` may return on a server that does not answer: the
/// scheduling of the task that notices the deadline, on a loaded machine.
pub(super) const DEADLINE_BOUND: Duration = Duration::from_millis(500);

/// Each of `clients` asks for a free key, then for a set of two, with a wait of
/// 500 ms while its server does not answer: what went wrong, one line each (nothing
/// when each returned a [`ErrorKind::Timeout`] error within the wait and
/// [`DEADLINE_BOUND`]).
pub(super) async fn waits_end_at_their_deadline(
    t: &Target,
    clients: &[(&str, &LockClient)],
) -> Vec<String> {
    let wait = Duration::from_millis(500);
    let mut wrong = Vec::new();
    for (who, client) in clients {
        for call in ["lock()", "lock_all()"] {
            let started = Instant::now();
            let waited = if call == "lock()" {
                let key = t.key("deadline");
                timeout(Duration::from_secs(15), async {
                    client.lock(key.as_str(), wait).await.map(drop)
                })
                .await
            } else {
                let keys = [t.key("deadline-set"), t.key("deadline-set")];
                timeout(Duration::from_secs(15), async {
                    client
                        .lock_all(keys.iter().map(LockKey::as_str), wait)
                        .await
                        .map(drop)
                })
                .await
            };
            let took = started.elapsed();
            match waited {
                Err(_) => wrong.push(format!(
                    "{who}: {call} had not returned 15 s into a wait of {wait:?}"
                )),
                Ok(Ok(())) => wrong.push(format!(
                    "{who}: {call} was granted by a server that does not answer"
                )),
                Ok(Err(e)) if e.kind() != ErrorKind::Timeout => wrong.push(format!(
                    "{who}: {call} gave a {:?} error, not Timeout: {e}",
                    e.kind()
                )),
                Ok(Err(_)) if took > wait + DEADLINE_BOUND => wrong.push(format!(
                    "{who}: {call} with a wait of {wait:?} returned Timeout after {took:?}"
                )),
                Ok(Err(_)) => {}
            }
        }
    }
    wrong
}

/// A client of `backend` with a watch open (on a backend without notifications, a
/// waiter polling): it waits for `held`, a key another holds. The waiter's task.
pub(super) async fn with_a_watch_open(
    t: &Target,
    backend: &Arc<DynLockBackend>,
    held: &LockKey,
) -> Result<(LockClient, tokio::task::JoinHandle<()>), CaseError> {
    let client = LockClient::with_options(backend.clone(), LockOptions::new(fault_ttl(t)))?;
    let waiting = {
        let (client, key) = (client.clone(), held.clone());
        tokio::spawn(async move {
            let _ = client.lock(key.as_str(), Duration::from_secs(120)).await;
        })
    };
    // Long enough for the watch to be set up and the first attempt to be answered.
    sleep(Duration::from_millis(300)).await;
    Ok((client, waiting))
}

/// A TTL for the cases that fault the server or the network: long enough to renew
/// through a short fault, short enough to wait out.
pub(super) fn fault_ttl(t: &Target) -> Duration {
    t.capabilities().ttl_at_least(Duration::from_secs(2))
}

/// Retries `op` for up to a minute while it fails retryably or hangs: for a backend
/// whose server or link just came back.
pub(super) async fn retry_until_up<T, F, Fut>(what: &str, mut op: F) -> Result<T, CaseError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = distlock_core::Result<T>>,
{
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        match timeout(Duration::from_secs(10), op()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if Instant::now() < give_up && e.is_retryable() => {}
            Ok(Err(e)) => return fail(format!("{what} after the server came back: {e}")),
            Err(_) if Instant::now() < give_up => {}
            Err(_) => return fail(format!("{what} hung after the server came back")),
        }
        sleep(Duration::from_millis(200)).await;
    }
}

pub(super) fn fail<T>(msg: impl Into<String>) -> Result<T, CaseError> {
    Err(CaseError::Failed(msg.into()))
}

/// `backend`'s fair steps: a failure where it has none (the case's gate asked).
pub(super) fn fair_of(backend: &DynLockBackend) -> Result<&dyn FairBackend, CaseError> {
    backend
        .fair()
        .map_or_else(|| fail("the backend's fair() answered None"), Ok)
}

/// `backend`'s operator steps: a failure where it has none (the case's gate asked).
pub(super) fn operator_of(backend: &DynLockBackend) -> Result<&dyn OperatorBackend, CaseError> {
    backend
        .operator()
        .map_or_else(|| fail("the backend's operator() answered None"), Ok)
}

pub(super) fn control_err(what: &str) -> impl FnOnce(distlock_core::BoxError) -> CaseError + '_ {
    move |e| CaseError::Failed(format!("server control could not {what}: {e}"))
}

/// Waits for `flush` (a client's [`flush`](LockClient::flush): its background
/// releases and cleanups), within a bound generous enough for a loaded machine: one
/// that never ends fails the case.
pub(super) async fn flushed(flush: impl std::future::Future<Output = ()>) -> Result<(), CaseError> {
    timeout(Duration::from_secs(30), flush)
        .await
        .map_err(|_| CaseError::Failed("flush() had not returned after 30 s".into()))
}

pub(super) async fn try_acquire(
    t: &Target,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>, CaseError> {
    grant(t.backend(), key, ttl).await
}

pub(super) async fn acquire(t: &Target, key: &LockKey, ttl: Duration) -> Result<Lease, CaseError> {
    match try_acquire(t, key, ttl).await? {
        Some(lease) => Ok(lease),
        None => fail(format!("{key} was held although nobody should hold it")),
    }
}

pub(super) async fn holder_fence(t: &Target, key: &LockKey) -> Result<Option<u64>, CaseError> {
    Ok(t.backend().inspect(key).await?.map(|i| i.fence.get()))
}

/// Polls until `key` can be acquired; the instant the successful request was sent.
pub(super) async fn acquire_when_free(
    t: &Target,
    key: &LockKey,
    ttl: Duration,
    give_up: Instant,
) -> Result<(Lease, Instant), CaseError> {
    grant_when_free(t.backend(), key, ttl, give_up).await
}

/// Polls `backend` until `key` can be acquired; the instant the successful request was
/// sent.
pub(super) async fn grant_when_free(
    backend: &Arc<DynLockBackend>,
    key: &LockKey,
    ttl: Duration,
    give_up: Instant,
) -> Result<(Lease, Instant), CaseError> {
    loop {
        let sent = Instant::now();
        if let Some(lease) = grant(backend, key, ttl).await? {
            return Ok((lease, sent));
        }
        if Instant::now() > give_up {
            return fail(format!("{key} never became free"));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

pub(super) fn client(t: &Target, options: LockOptions) -> Result<LockClient, CaseError> {
    Ok(LockClient::with_options(t.backend().clone(), options)?)
}
