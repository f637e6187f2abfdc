//! The cases: one `pub async fn` per contract point or known regression, each on its
//! own random keys. Each returns `Ok(())`, a failure with its message, or a skip with
//! its reason (a skip is never a pass).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    AcquireOutcome, Error, ErrorKind, ExtendOutcome, FenceDurability, Lease, LockBackendExt,
    LockClient, LockKey, LockOptions, LossReason, OwnerToken, ReleaseOutcome,
};
use futures_util::future::join_all;
use tokio::time::{sleep, sleep_until, timeout, Instant};

use crate::target::Target;

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseError {
    /// The backend broke the contract, or misbehaved; the message says how.
    #[error("failed: {0}")]
    Failed(String),
    /// The case cannot run on this target; the reason says why.
    #[error("skipped: {0}")]
    Skipped(String),
}

/// What a case returns.
pub type CaseResult = Result<(), CaseError>;

impl From<Error> for CaseError {
    fn from(e: Error) -> Self {
        CaseError::Failed(format!("unexpected error: {e}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        {
            let held: bool = $cond;
            if !held {
                return Err(CaseError::Failed(format!($($msg)+)));
            }
        }
    };
}

fn fail<T>(msg: impl Into<String>) -> Result<T, CaseError> {
    Err(CaseError::Failed(msg.into()))
}

fn control_err(what: &str) -> impl FnOnce(distlock_core::BoxError) -> CaseError + '_ {
    move |e| CaseError::Failed(format!("server control could not {what}: {e}"))
}

async fn try_acquire(t: &Target, key: &LockKey, ttl: Duration) -> Result<Option<Lease>, CaseError> {
    match t.backend().try_acquire(key, ttl).await? {
        AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
        AcquireOutcome::Held { .. } => Ok(None),
    }
}

async fn acquire(t: &Target, key: &LockKey, ttl: Duration) -> Result<Lease, CaseError> {
    match try_acquire(t, key, ttl).await? {
        Some(lease) => Ok(lease),
        None => fail(format!("{key} was held although nobody should hold it")),
    }
}

async fn holder_fence(t: &Target, key: &LockKey) -> Result<Option<u64>, CaseError> {
    Ok(t.backend().inspect(key).await?.map(|i| i.fence.get()))
}

/// Polls until `key` can be acquired; the instant the successful request was sent.
async fn acquire_when_free(
    t: &Target,
    key: &LockKey,
    ttl: Duration,
    give_up: Instant,
) -> Result<(Lease, Instant), CaseError> {
    loop {
        let sent = Instant::now();
        if let Some(lease) = try_acquire(t, key, ttl).await? {
            return Ok((lease, sent));
        }
        if Instant::now() > give_up {
            return fail(format!("{key} never became free"));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

fn client(t: &Target, options: LockOptions) -> Result<LockClient, CaseError> {
    Ok(LockClient::with_options(t.backend().clone(), options)?)
}

// ---------------------------------------------------------------- basics and exclusion

/// Acquire, inspect, release and acquire again: the plain cycle works.
pub async fn acquire_release_cycle(t: &Target) -> CaseResult {
    let key = t.key("cycle");
    let lease = acquire(t, &key, t.long_ttl()).await?;
    ensure!(
        holder_fence(t, &key).await? == Some(lease.fence().get()),
        "inspect does not show the holder's fence"
    );
    ensure!(
        try_acquire(t, &key, t.long_ttl()).await?.is_none(),
        "a second acquire succeeded on a held key"
    );
    let released = t.backend().release(lease.key(), lease.owner()).await?;
    ensure!(
        released == ReleaseOutcome::Released,
        "release of a held lease answered {released:?}"
    );
    ensure!(
        holder_fence(t, &key).await?.is_none(),
        "the key is still held after release"
    );
    let again = acquire(t, &key, t.long_ttl()).await?;
    t.backend().release(again.key(), again.owner()).await?;
    Ok(())
}

/// Many tasks contend for one key: at no instant do two hold it, and fences increase.
pub async fn mutual_exclusion_under_contention(t: &Target) -> CaseResult {
    const TASKS: usize = 8;
    const PER_TASK: usize = 8;
    let key = t.key("contention");
    let ttl = t.long_ttl();
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let last_fence = Arc::new(Mutex::new(0u64));
    let fence_errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let give_up = Instant::now() + Duration::from_secs(90);
    let work = (0..TASKS).map(|_| {
        let (key, inside, overlaps, last_fence, fence_errors) = (
            key.clone(),
            inside.clone(),
            overlaps.clone(),
            last_fence.clone(),
            fence_errors.clone(),
        );
        async move {
            let mut done = 0;
            while done < PER_TASK {
                if Instant::now() > give_up {
                    return fail("contention did not finish in time");
                }
                let Some(lease) = try_acquire(t, &key, ttl).await? else {
                    sleep(Duration::from_millis(1 + rand::random::<u64>() % 3)).await;
                    continue;
                };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                {
                    let mut last = last_fence.lock().unwrap_or_else(|p| p.into_inner());
                    if lease.fence().get() <= *last {
                        fence_errors
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("fence {} after {}", lease.fence(), *last));
                    }
                    *last = (*last).max(lease.fence().get());
                }
                sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                t.backend().release(lease.key(), lease.owner()).await?;
                done += 1;
            }
            Ok(())
        }
    });
    for r in join_all(work).await {
        r?;
    }
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
    Ok(())
}

// ---------------------------------------------------------------- release

/// A release by a non-owner answers "not held" and leaves the holder untouched.
pub async fn release_by_non_owner_is_not_held(t: &Target) -> CaseResult {
    let key = t.key("non-owner");
    let lease = acquire(t, &key, t.long_ttl()).await?;
    let outcome = t.backend().release(&key, &OwnerToken::random()).await?;
    ensure!(
        outcome == ReleaseOutcome::NotHeld,
        "a stranger's release answered {outcome:?}"
    );
    ensure!(
        holder_fence(t, &key).await? == Some(lease.fence().get()),
        "a stranger's release removed the holder"
    );
    ensure!(
        matches!(
            t.backend().extend(&lease, t.long_ttl()).await?,
            ExtendOutcome::Extended(_)
        ),
        "the holder lost its lease to a stranger's release"
    );
    t.backend().release(&key, lease.owner()).await?;
    Ok(())
}

/// A holder whose lease expired cannot release the next holder's lease.
pub async fn release_after_expiry_is_not_held(t: &Target) -> CaseResult {
    let key = t.key("release-expired");
    let old = acquire(t, &key, t.short_ttl()).await?;
    let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
    let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
    let outcome = t.backend().release(&key, old.owner()).await?;
    ensure!(
        outcome == ReleaseOutcome::NotHeld,
        "the expired holder's release answered {outcome:?}"
    );
    ensure!(
        holder_fence(t, &key).await? == Some(new.fence().get()),
        "the expired holder deleted the new holder's lease"
    );
    t.backend().release(&key, new.owner()).await?;
    Ok(())
}

/// Releasing twice answers "released" then "not held" (a retried release is harmless).
pub async fn release_twice_is_not_held(t: &Target) -> CaseResult {
    let key = t.key("release-twice");
    let lease = acquire(t, &key, t.long_ttl()).await?;
    let first = t.backend().release(&key, lease.owner()).await?;
    ensure!(
        first == ReleaseOutcome::Released,
        "the first release answered {first:?}"
    );
    let second = t.backend().release(&key, lease.owner()).await?;
    ensure!(
        second == ReleaseOutcome::NotHeld,
        "the second release answered {second:?}"
    );
    // A retry arriving after someone else took the key must not touch them (etcd #22082).
    let next = acquire(t, &key, t.long_ttl()).await?;
    let retry = t.backend().release(&key, lease.owner()).await?;
    ensure!(
        retry == ReleaseOutcome::NotHeld,
        "a late retried release answered {retry:?}"
    );
    ensure!(
        holder_fence(t, &key).await? == Some(next.fence().get()),
        "a late retried release removed the next holder"
    );
    t.backend().release(&key, next.owner()).await?;
    Ok(())
}

/// A release that races the lease's expiry never deletes the holder that came next.
pub async fn release_racing_expiry_spares_the_next_holder(t: &Target) -> CaseResult {
    let ttl = t.short_ttl();
    for round in 0..3 {
        let key = t.key("release-race");
        let old = acquire(t, &key, ttl).await?;
        let race_at = old
            .valid_until()
            .checked_sub(Duration::from_millis(5))
            .unwrap_or(old.valid_until());
        sleep_until(race_at).await;
        let give_up = Instant::now() + ttl * 4 + t.expiry_slack() * 4;
        let releaser = async {
            sleep(Duration::from_millis(2)).await;
            t.backend().release(&key, old.owner()).await
        };
        let taker = acquire_when_free(t, &key, t.long_ttl(), give_up);
        let (released, taken) = tokio::join!(releaser, taker);
        released?;
        let (new, _) = taken?;
        sleep(Duration::from_millis(30)).await;
        ensure!(
            holder_fence(t, &key).await? == Some(new.fence().get()),
            "round {round}: the old holder's release deleted the next holder's lease"
        );
        t.backend().release(&key, new.owner()).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------- extend

/// Extending an expired lease fails and does not re-acquire the free key.
pub async fn extend_after_expiry_fails_and_does_not_reacquire(t: &Target) -> CaseResult {
    let key = t.key("extend-expired");
    let lease = acquire(t, &key, t.short_ttl()).await?;
    sleep_until(lease.valid_until() + t.expiry_slack()).await;
    ensure!(
        holder_fence(t, &key).await?.is_none(),
        "the lease did not expire"
    );
    let outcome = t.backend().extend(&lease, t.renewal_ttl(&lease)).await?;
    ensure!(
        outcome == ExtendOutcome::NotHeld,
        "extending an expired lease answered {outcome:?}"
    );
    ensure!(
        holder_fence(t, &key).await?.is_none(),
        "extending an expired lease re-acquired the key"
    );
    Ok(())
}

/// Extending after another holder took over fails and leaves that holder untouched.
pub async fn extend_after_takeover_fails(t: &Target) -> CaseResult {
    let key = t.key("extend-taken");
    let old = acquire(t, &key, t.short_ttl()).await?;
    let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
    let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
    let outcome = t.backend().extend(&old, t.renewal_ttl(&old)).await?;
    ensure!(
        outcome == ExtendOutcome::NotHeld,
        "extending a taken-over lease answered {outcome:?}"
    );
    ensure!(
        holder_fence(t, &key).await? == Some(new.fence().get()),
        "the old holder's extend disturbed the new holder"
    );
    t.backend().release(&key, new.owner()).await?;
    Ok(())
}

/// Extend keeps the fencing token, prolongs the lease, and can be repeated.
pub async fn extend_keeps_the_fence(t: &Target) -> CaseResult {
    let key = t.key("extend-fence");
    let granted = t.short_ttl();
    let lease = acquire(t, &key, granted).await?;
    // Where extend takes any TTL, a short lease is extended to a long one; otherwise
    // (capabilities.extend_any_ttl) it is renewed to the TTL it was granted.
    let any_ttl = t.capabilities().extend_any_ttl;
    let ttl = if any_ttl { t.long_ttl() } else { granted };
    let mut earliest_start = f64::INFINITY;
    for _ in 0..4 {
        let sent = Instant::now();
        let ExtendOutcome::Extended(extended) = t.backend().extend(&lease, ttl).await? else {
            return fail("extending a held lease answered not held");
        };
        let call = (Instant::now() - sent).as_secs_f64().max(1e-9);
        ensure!(
            extended.fence() == lease.fence(),
            "extend changed the fence from {} to {}",
            lease.fence(),
            extended.fence()
        );
        ensure!(
            extended.valid_until() > lease.valid_until(),
            "extend did not prolong the lease"
        );
        let start = extended.valid_until().checked_sub(ttl).unwrap_or(sent);
        let position = if start <= sent {
            0.0
        } else {
            (start - sent).as_secs_f64() / call
        };
        earliest_start = earliest_start.min(position);
    }
    ensure!(
        earliest_start <= 0.5,
        "the extended validity starts {:.0}% into the call at the earliest: counted from the reply",
        earliest_start * 100.0
    );
    if !any_ttl {
        // Renew once more near the end of the first TTL, as a renewal loop would.
        sleep_until(lease.valid_until() - granted / 4).await;
        let again = t.backend().extend(&lease, ttl).await?;
        ensure!(
            matches!(again, ExtendOutcome::Extended(_)),
            "a late renewal answered {again:?}"
        );
    }
    sleep_until(lease.valid_until() + t.expiry_slack().min(granted / 2)).await;
    ensure!(
        holder_fence(t, &key).await? == Some(lease.fence().get()),
        "the extended lease expired at its first ttl"
    );
    t.backend().release(&key, lease.owner()).await?;
    Ok(())
}

/// Extend and release racing each other never leave the key behind (RedLock.net #64).
pub async fn extend_racing_release_leaves_nothing(t: &Target) -> CaseResult {
    for round in 0..10 {
        let key = t.key("extend-release-race");
        let lease = acquire(t, &key, t.long_ttl()).await?;
        let (extended, released) = tokio::join!(
            t.backend().extend(&lease, t.long_ttl()),
            t.backend().release(&key, lease.owner())
        );
        extended?;
        ensure!(
            released? == ReleaseOutcome::Released,
            "round {round}: release of a held lease failed"
        );
        ensure!(
            holder_fence(t, &key).await?.is_none(),
            "round {round}: an extend racing the release left the key held"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------- expiry and validity

/// An abandoned lease frees its key after its TTL, not before and not much later.
pub async fn expiry_frees_the_key_after_the_ttl_not_before(t: &Target) -> CaseResult {
    let key = t.key("expiry");
    let ttl = t.short_ttl();
    let sent = Instant::now();
    let _abandoned = acquire(t, &key, ttl).await?;
    let granted = Instant::now();
    let give_up = granted + ttl * 4 + t.expiry_slack() * 4;
    let (next, next_sent) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
    let freed_by = Instant::now();
    // The server set the expiry no earlier than we sent the request; allow 1% + 2 ms
    // for the clocks' rates and millisecond rounding.
    let earliest = sent + ttl - ttl / 100 - Duration::from_millis(2);
    ensure!(
        freed_by >= earliest,
        "the key was free {:?} before the ttl ran out",
        earliest - freed_by
    );
    let latest = granted + ttl + t.expiry_slack();
    ensure!(
        next_sent <= latest,
        "the key stayed held {:?} past the ttl and slack",
        next_sent - latest
    );
    t.backend().release(&key, next.owner()).await?;
    Ok(())
}

/// A lease's validity is counted from before the request, and it is never returned expired.
pub async fn lease_validity_counted_from_before_the_request(t: &Target) -> CaseResult {
    // Where in the call the validity starts, as a fraction of the call's duration: a
    // backend counting from before sending starts near 0, one counting from the reply
    // near 1. The earliest of several trials is taken, so that a scheduling hiccup in
    // one trial does not decide.
    let mut earliest_start = f64::INFINITY;
    for (i, ttl) in [t.short_ttl(), t.long_ttl()]
        .into_iter()
        .cycle()
        .take(8)
        .enumerate()
    {
        let key = t.key("validity");
        let sent = Instant::now();
        let lease = acquire(t, &key, ttl).await?;
        let received = Instant::now();
        ensure!(
            lease.valid_until() > received,
            "trial {i}: the lease was returned already expired"
        );
        ensure!(
            lease.valid_until() >= sent + ttl / 2,
            "trial {i}: the lease came with less than half its ttl"
        );
        let call = (received - sent).as_secs_f64().max(1e-9);
        let start = lease.valid_until().checked_sub(ttl).unwrap_or(sent);
        let position = if start <= sent {
            0.0
        } else {
            (start - sent).as_secs_f64() / call
        };
        earliest_start = earliest_start.min(position);
        t.backend().release(&key, lease.owner()).await?;
    }
    ensure!(
        earliest_start <= 0.5,
        "validity starts {:.0}% into the call at the earliest: counted from the reply, not from before the request",
        earliest_start * 100.0
    );
    Ok(())
}

// ---------------------------------------------------------------- fencing

/// Fences strictly increase across release and re-acquire on one key.
pub async fn fencing_increases_across_release_and_reacquire(t: &Target) -> CaseResult {
    let key = t.key("fence-cycle");
    let mut last = None;
    for _ in 0..20 {
        let lease = acquire(t, &key, t.long_ttl()).await?;
        if let Some(prev) = last {
            ensure!(
                lease.fence() > prev,
                "fence {} followed {prev}",
                lease.fence()
            );
        }
        last = Some(lease.fence());
        t.backend().release(&key, lease.owner()).await?;
    }
    Ok(())
}

/// A takeover after expiry gets a larger fence than the expired holder had.
pub async fn fencing_increases_across_takeover(t: &Target) -> CaseResult {
    let key = t.key("fence-takeover");
    let old = acquire(t, &key, t.short_ttl()).await?;
    let give_up = Instant::now() + t.short_ttl() * 4 + t.expiry_slack() * 4;
    let (new, _) = acquire_when_free(t, &key, t.long_ttl(), give_up).await?;
    ensure!(
        new.fence() > old.fence(),
        "the takeover got fence {} after {}",
        new.fence(),
        old.fence()
    );
    t.backend().release(&key, new.owner()).await?;
    Ok(())
}

/// Over many interleaved keys, each key's fences strictly increase.
pub async fn fencing_increases_over_many_keys(t: &Target) -> CaseResult {
    let keys: Vec<LockKey> = (0..10).map(|_| t.key("fence-many")).collect();
    let mut last = vec![None; keys.len()];
    for round in 0..4 {
        for (i, key) in keys.iter().enumerate() {
            let lease = acquire(t, key, t.long_ttl()).await?;
            if let Some(prev) = last[i] {
                ensure!(
                    lease.fence() > prev,
                    "round {round}: key {i} got fence {} after {prev}",
                    lease.fence()
                );
            }
            last[i] = Some(lease.fence());
            t.backend().release(key, lease.owner()).await?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- bad input

/// Bad keys and TTLs give typed errors, never a panic; unknown keys are "not held".
pub async fn bad_input_gives_typed_errors(t: &Target) -> CaseResult {
    let caps = t.capabilities().clone();
    let key = t.key("bad-input");
    let kind =
        |r: &distlock_core::Result<AcquireOutcome>| r.as_ref().map(|_| ()).map_err(|e| e.kind());
    let zero = t.backend().try_acquire(&key, Duration::ZERO).await;
    ensure!(
        kind(&zero) == Err(ErrorKind::InvalidTtl),
        "a zero ttl answered {zero:?}"
    );
    if let Some(too_long) = caps.max_ttl.checked_add(caps.ttl_granularity) {
        let r = t.backend().try_acquire(&key, too_long).await;
        ensure!(
            kind(&r) == Err(ErrorKind::InvalidTtl),
            "a ttl above the maximum answered {r:?}"
        );
    }
    if caps.ttl_granularity > Duration::from_nanos(1) {
        let odd = caps.min_ttl + caps.ttl_granularity / 2;
        let r = t.backend().try_acquire(&key, odd).await;
        ensure!(
            kind(&r) == Err(ErrorKind::InvalidTtl),
            "a ttl off the granularity answered {r:?}"
        );
    }
    ensure!(
        holder_fence(t, &key).await?.is_none(),
        "a refused request took the key"
    );
    let lease = acquire(t, &key, t.long_ttl()).await?;
    let r = t.backend().extend(&lease, Duration::ZERO).await;
    ensure!(
        r.as_ref().map_err(|e| e.kind()).err() == Some(ErrorKind::InvalidTtl),
        "extend with a zero ttl answered {r:?}"
    );
    ensure!(
        holder_fence(t, &key).await? == Some(lease.fence().get()),
        "a refused extend changed the lease"
    );
    t.backend().release(&key, lease.owner()).await?;

    let unknown = t.key("never-used");
    let r = t.backend().release(&unknown, &OwnerToken::random()).await?;
    ensure!(
        r == ReleaseOutcome::NotHeld,
        "releasing a never-used key answered {r:?}"
    );
    ensure!(
        t.backend().inspect(&unknown).await?.is_none(),
        "a never-used key shows a holder"
    );

    let client = LockClient::new(t.backend().clone());
    for bad in [
        "",
        "line\nbreak",
        "nul\0",
        &"k".repeat(LockKey::MAX_LEN + 1),
    ] {
        let r = client.try_lock(bad).await.map(|_| ()).map_err(|e| e.kind());
        ensure!(
            r == Err(ErrorKind::InvalidKey),
            "the key {bad:?} answered {r:?}"
        );
    }
    // The shortest TTL the backend accepts must not panic or hang (rslock's underflow).
    let r = timeout(
        Duration::from_secs(10),
        t.backend().try_acquire(&t.key("min-ttl"), caps.min_ttl),
    )
    .await;
    ensure!(r.is_ok(), "acquiring with the minimum ttl hung");
    Ok(())
}

// ---------------------------------------------------------------- the client

/// Auto-renewal keeps a lease alive across several TTLs, with the same fence.
pub async fn client_renewal_keeps_the_lease(t: &Target) -> CaseResult {
    let ttl = t.capabilities().ttl_at_least(Duration::from_secs(1));
    let client = client(t, LockOptions::new(ttl))?;
    let key = t.key("renewal");
    let Some(guard) = client.try_lock(key.as_str()).await? else {
        return fail("a fresh key was held");
    };
    for i in 0..3 {
        sleep(ttl).await;
        ensure!(
            guard.is_held(),
            "lost after {} ttls: {:?}",
            i + 1,
            guard.loss()
        );
        ensure!(
            holder_fence(t, &key).await? == Some(guard.fence().get()),
            "the server lost the renewed lease"
        );
        ensure!(
            try_acquire(t, &key, ttl).await?.is_none(),
            "another holder got in during renewal"
        );
    }
    guard.release().await?;
    Ok(())
}

/// `lost()` fires when the lease is deleted behind the holder's back.
pub async fn client_lost_fires_when_the_lease_is_deleted(t: &Target) -> CaseResult {
    let ttl = t.capabilities().ttl_at_least(Duration::from_secs(3));
    let client = client(t, LockOptions::new(ttl))?;
    let key = t.key("deleted");
    let Some(guard) = client.try_lock(key.as_str()).await? else {
        return fail("a fresh key was held");
    };
    let lost = guard.lost();
    sleep(Duration::from_millis(50)).await;
    let deleted_at = Instant::now();
    ensure!(
        t.backend().force_release(&key).await?,
        "force_release found no lease"
    );
    let bound = client.options().renew_interval() + Duration::from_secs(1);
    match timeout(bound, lost).await {
        Ok(LossReason::NotHeld) => {}
        Ok(other) => return fail(format!("lost() gave {other:?}, not NotHeld")),
        Err(_) => {
            return fail(format!(
                "lost() did not fire within {bound:?} of the deletion"
            ))
        }
    }
    ensure!(!guard.is_held(), "is_held() after the loss");
    tracing::debug!(after = ?deleted_at.elapsed(), "loss noticed");
    let r = guard.release().await.map_err(|e| e.kind());
    ensure!(
        r == Err(ErrorKind::NotHeld),
        "releasing a lost guard answered {r:?}"
    );
    Ok(())
}

/// A waiter is woken by the release, not by its next poll.
pub async fn client_waiter_is_woken_by_the_release(t: &Target) -> CaseResult {
    let key = t.key("wake");
    let holder = acquire(t, &key, t.long_ttl()).await?;
    // A polling waiter with this backoff would sleep 5 s; a notified one wakes at once.
    let options =
        LockOptions::new(t.long_ttl()).with_backoff(Duration::from_secs(5), Duration::from_secs(5));
    let client = client(t, options)?;
    let waiter = async {
        let guard = client.lock(key.as_str(), Duration::from_secs(20)).await?;
        let at = Instant::now();
        guard.release().await?;
        Ok::<_, Error>(at)
    };
    let releaser = async {
        sleep(Duration::from_millis(300)).await;
        let at = Instant::now();
        t.backend().release(&key, holder.owner()).await.map(|_| at)
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

/// A lease from `lock()` is valid from its successful attempt, not the first one.
pub async fn client_validity_counts_from_the_successful_attempt(t: &Target) -> CaseResult {
    let key = t.key("late-validity");
    let ttl = t.capabilities().ttl_at_least(Duration::from_secs(1));
    let holder = acquire(t, &key, ttl).await?;
    let client = client(t, LockOptions::new(ttl).with_auto_renew(false))?;
    let guard = client
        .lock(key.as_str(), ttl * 4 + t.expiry_slack() * 4)
        .await?;
    let returned = Instant::now();
    ensure!(
        returned >= holder.valid_until(),
        "acquired before the holder expired"
    );
    let floor = returned + ttl - ttl / 5;
    ensure!(
        guard.valid_until() >= floor,
        "validity ends {:?} too early: counted from the first attempt?",
        floor - guard.valid_until()
    );
    guard.release().await?;
    Ok(())
}

/// Dropping a guard releases the lock in the background.
pub async fn client_dropped_guard_releases(t: &Target) -> CaseResult {
    let client = client(t, LockOptions::new(t.long_ttl()))?;
    let key = t.key("drop-guard");
    let Some(guard) = client.try_lock(key.as_str()).await? else {
        return fail("a fresh key was held");
    };
    drop(guard);
    let give_up = Instant::now() + Duration::from_secs(2);
    while holder_fence(t, &key).await?.is_some() {
        ensure!(
            Instant::now() < give_up,
            "the dropped guard's lease was not released within 2 s"
        );
        sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// A dropped waiting acquire leaves no lease and no renewal behind.
pub async fn client_dropped_acquire_leaves_nothing(t: &Target) -> CaseResult {
    let key = t.key("drop-acquire");
    let holder = acquire(t, &key, t.long_ttl()).await?;
    let client = client(t, LockOptions::new(t.long_ttl()))?;
    let waited = timeout(
        Duration::from_millis(300),
        client.lock(key.as_str(), Duration::from_secs(30)),
    )
    .await;
    ensure!(waited.is_err(), "the waiter acquired a held key");
    t.backend().release(&key, holder.owner()).await?;
    sleep(Duration::from_millis(300)).await;
    ensure!(
        holder_fence(t, &key).await?.is_none(),
        "the dropped waiter left a lease behind"
    );
    Ok(())
}

// ---------------------------------------------------------------- faults

fn fault_ttl(t: &Target) -> Duration {
    t.capabilities().ttl_at_least(Duration::from_secs(2))
}

/// A server paused beyond the TTL makes the holder learn it lost the lock, in time.
pub async fn fault_pause_beyond_ttl_signals_loss(t: &Target) -> CaseResult {
    let control = t
        .control()
        .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
    let ttl = fault_ttl(t);
    let client = client(t, LockOptions::new(ttl))?;
    let key = t.key("pause-loss");
    let Some(guard) = client.try_lock(key.as_str()).await? else {
        return fail("a fresh key was held");
    };
    control.pause().await.map_err(control_err("pause"))?;
    let outcome = timeout(ttl + Duration::from_secs(1), guard.lost()).await;
    let valid_until = guard.valid_until();
    let noticed = Instant::now();
    control.unpause().await.map_err(control_err("unpause"))?;
    match outcome {
        Ok(LossReason::RenewalFailed | LossReason::NotHeld) => {}
        Ok(other) => return fail(format!("lost() gave {other:?}")),
        Err(_) => {
            return fail(format!(
                "lost() did not fire within the ttl ({ttl:?}) plus 1 s of a pause"
            ))
        }
    }
    ensure!(
        noticed < valid_until,
        "the holder was told only {:?} after its validity ran out",
        noticed - valid_until
    );
    let _ = guard.release().await;
    Ok(())
}

/// A pause shorter than the validity is a transient fault, not a loss.
pub async fn fault_short_pause_is_not_a_loss(t: &Target) -> CaseResult {
    let control = t
        .control()
        .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
    let ttl = fault_ttl(t);
    let client = client(t, LockOptions::new(ttl))?;
    let key = t.key("short-pause");
    let Some(guard) = client.try_lock(key.as_str()).await? else {
        return fail("a fresh key was held");
    };
    sleep(ttl / 3 + Duration::from_millis(50)).await; // just after the first renewal
    control.pause().await.map_err(control_err("pause"))?;
    sleep(ttl / 5).await;
    control.unpause().await.map_err(control_err("unpause"))?;
    sleep(ttl * 2).await;
    ensure!(
        guard.is_held(),
        "a short pause lost the lock: {:?}",
        guard.loss()
    );
    ensure!(
        holder_fence(t, &key).await? == Some(guard.fence().get()),
        "the server lost the lease"
    );
    guard.release().await?;
    Ok(())
}

async fn retry_until_up<T, F, Fut>(what: &str, mut op: F) -> Result<T, CaseError>
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

/// A restart never makes a durable fence go backwards; leases survive it as declared.
pub async fn fault_restart_keeps_fences_and_declared_leases(t: &Target) -> CaseResult {
    let control = t
        .control()
        .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
    let key = t.key("restart");
    let mut max = 0;
    for _ in 0..3 {
        let lease = acquire(t, &key, t.long_ttl()).await?;
        max = max.max(lease.fence().get());
        t.backend().release(&key, lease.owner()).await?;
    }
    let held_key = t.key("restart-held");
    let held = acquire(t, &held_key, t.long_ttl()).await?;
    control.restart().await.map_err(control_err("restart"))?;

    let survived = retry_until_up("inspect", || t.backend().inspect(&held_key)).await?;
    if t.capabilities().leases_survive_restart {
        ensure!(
            survived.map(|i| i.fence) == Some(held.fence()),
            "the lease did not survive the restart as declared"
        );
    } else if let Some(info) = survived {
        // Not promised, but a lease that survived must still be the same lease.
        ensure!(
            info.fence == held.fence(),
            "after the restart the key shows fence {}, not {}",
            info.fence,
            held.fence()
        );
    }
    let outcome = retry_until_up("acquire", || async {
        t.backend().try_acquire(&key, t.long_ttl()).await
    })
    .await?;
    let AcquireOutcome::Acquired(after) = outcome else {
        return fail("a released key was held after the restart");
    };
    match t.capabilities().fence_durability {
        FenceDurability::BestEffort => {}
        _ => ensure!(
            after.fence().get() > max,
            "the fence went back from {max} to {} across a restart",
            after.fence()
        ),
    }
    t.backend().release(&key, after.owner()).await?;
    let _ = t.backend().release(&held_key, held.owner()).await;
    Ok(())
}

/// A killed server gives typed errors in bounded time, and the backend recovers.
pub async fn fault_killed_server_gives_typed_errors_then_recovers(t: &Target) -> CaseResult {
    let control = t
        .control()
        .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
    let key = t.key("killed");
    control.kill().await.map_err(control_err("kill"))?;
    let attempt = timeout(
        Duration::from_secs(20),
        t.backend().try_acquire(&key, t.long_ttl()),
    )
    .await;
    let started = control.start().await.map_err(control_err("start"));
    match attempt {
        Err(_) => return fail("an acquire against a killed server hung for 20 s"),
        Ok(Ok(outcome)) => {
            return fail(format!(
                "an acquire against a killed server answered {outcome:?}"
            ))
        }
        Ok(Err(e)) => ensure!(
            matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout) && e.is_retryable(),
            "a killed server gave a {:?} error (retryable: {}): {e}",
            e.kind(),
            e.is_retryable()
        ),
    }
    started?;
    let outcome = retry_until_up("acquire", || async {
        t.backend().try_acquire(&key, t.long_ttl()).await
    })
    .await?;
    let AcquireOutcome::Acquired(lease) = outcome else {
        return fail("a fresh key was held after the server came back");
    };
    t.backend().release(&key, lease.owner()).await?;
    Ok(())
}

/// Renewal survives the server closing every connection (Redisson #2515, #3194).
pub async fn fault_killed_connections_do_not_stop_renewal(t: &Target) -> CaseResult {
    let control = t
        .control()
        .ok_or_else(|| CaseError::Skipped("no server control".into()))?;
    if !control.can_kill_connections() {
        return Err(CaseError::Skipped(
            "the server control cannot kill connections".into(),
        ));
    }
    let ttl = fault_ttl(t);
    let client = client(t, LockOptions::new(ttl))?;
    let key = t.key("killed-connections");
    let Some(guard) = client.try_lock(key.as_str()).await? else {
        return fail("a fresh key was held");
    };
    for _ in 0..2 {
        control
            .kill_connections()
            .await
            .map_err(control_err("kill connections"))?;
        sleep(ttl).await;
    }
    ensure!(
        guard.is_held(),
        "renewal stopped after the connections were killed: {:?}",
        guard.loss()
    );
    ensure!(
        holder_fence(t, &key).await? == Some(guard.fence().get()),
        "the lease expired on the server"
    );
    guard.release().await?;
    Ok(())
}
