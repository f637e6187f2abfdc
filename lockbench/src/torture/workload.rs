//! The holders: each client contends for a few keys, reads both registers under the
//! lock, works, and writes them back with its fence.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::backend::{AcquireOutcome, LockBackendExt};
use distlock::{DynLockBackend, LockClient, LockKey, LockOptions};
use tokio::time::{sleep, Instant};

use super::history::{Hold, HoldKind};
use super::register::Registers;
use crate::run::{progress, BoxError};

/// The share of a long-holding client's guarded holds that are long.
const LONG_SHARE: f64 = 0.25;

/// What every holder of one run shares.
pub(crate) struct Workload {
    /// The row's name, for the progress output.
    pub(crate) backend: String,
    pub(crate) keys: Vec<LockKey>,
    pub(crate) ttl: Duration,
    pub(crate) registers: Registers,
    /// The share of holds that pause past their TTL without renewing.
    pub(crate) pause_share: f64,
    /// How many clients (the first ones) hold a quarter of their guarded holds for
    /// several TTLs, renewed, writing all along; the others hold briefly, so that the keys a
    /// long holder is not holding keep turning over.
    pub(crate) long_clients: usize,
    /// The backend's clock-drift allowance for a lease of `ttl`: a grant's validity
    /// is its request's send time plus `ttl` less this.
    pub(crate) drift: Duration,
    /// The longest a guarded holder works.
    pub(crate) work_max: Duration,
    pub(crate) start: Instant,
    pub(crate) stop: AtomicBool,
    pub(crate) holds: Mutex<Vec<Hold>>,
    /// Lock operations that failed (a server away, a wait that timed out): expected
    /// under faults, reported, not a violation.
    pub(crate) errors: AtomicUsize,
    /// The failed lock operations by error kind, to tell a server away from a wait
    /// that ran out.
    pub(crate) error_kinds: Mutex<BTreeMap<String, usize>>,
    /// The first error of the registers' server, which ends the run: the register is
    /// the judge and must not be in doubt.
    pub(crate) register_error: Mutex<Option<String>>,
}

impl Workload {
    fn at(&self, instant: Instant) -> f64 {
        instant.saturating_duration_since(self.start).as_secs_f64()
    }

    fn record(&self, hold: Hold) {
        self.holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hold);
    }

    /// The lock operations so far (an acquisition and a release per hold).
    pub(crate) fn lock_ops(&self) -> usize {
        self.holds.lock().unwrap_or_else(|p| p.into_inner()).len() * 2
    }

    /// Counts a failed lock operation, by its kind; the first of each kind is shown
    /// whole on the progress output, so that a count says what it counts.
    fn lock_failed(&self, error: &distlock::Error) {
        let mut kinds = self.error_kinds.lock().unwrap_or_else(|p| p.into_inner());
        let count = kinds.entry(format!("{:?}", error.kind())).or_default();
        *count += 1;
        if *count == 1 {
            progress(
                &self.backend,
                &format!("torture: the first failed lock operation of its kind: {error}"),
            );
        }
    }

    /// The failed lock operations so far, by kind: `Timeout 12, Unavailable 3`.
    pub(crate) fn error_kinds(&self) -> String {
        let kinds = self.error_kinds.lock().unwrap_or_else(|p| p.into_inner());
        if kinds.is_empty() {
            return "none".into();
        }
        kinds
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Lock operations that failed for a reason no fault can cause: the run asked the
    /// backend for something it does not do (a step its capabilities declare and its
    /// client does not forward, say), so the row did not run what it names. Each is
    /// the harness's outcome, never a finding about the backend.
    pub(crate) fn misdirected(&self) -> Vec<String> {
        misdirected(&self.error_kinds.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn register_failed(&self, e: BoxError) {
        let mut first = self
            .register_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| e.to_string());
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The error kinds that say the run asked for something the backend does not do or
/// does not accept, which no fault can cause.
const MISDIRECTED_KINDS: [&str; 5] = [
    "Unsupported",
    "Configuration",
    "InvalidKey",
    "InvalidTtl",
    "InvalidInput",
];

/// What [`Workload::misdirected`] says of these counts by kind.
fn misdirected(kinds: &BTreeMap<String, usize>) -> Vec<String> {
    kinds
        .iter()
        .filter(|(kind, _)| MISDIRECTED_KINDS.contains(&kind.as_str()))
        .map(|(kind, n)| {
            format!(
                "{n} lock operations failed with {kind}, which no fault causes: \
                     the row did not run what it names"
            )
        })
        .collect()
}

/// One client's holder loop, until the run stops.
pub(crate) async fn holder(work: Arc<Workload>, client: usize, backend: Arc<DynLockBackend>) {
    // Half the clients wait in fair mode where the backend has it: fair and racing
    // waiters of one key must never overlap either.
    let fair = client % 2 == 1 && backend.fair().is_some();
    let options = LockOptions::new(work.ttl).with_fair(fair);
    let locks = match LockClient::with_options(backend.clone(), options) {
        Ok(locks) => locks,
        Err(e) => {
            work.register_failed(format!("client {client}: {e}").into());
            return;
        }
    };
    while !work.stop.load(Ordering::SeqCst) {
        let key = rand::random_range(0..work.keys.len());
        let result = if rand::random_bool(work.pause_share) {
            paused(&work, client, key, &backend).await
        } else {
            guarded(&work, client, key, &locks).await
        };
        match result {
            Ok(true) => {}
            Ok(false) => {
                work.errors.fetch_add(1, Ordering::Relaxed);
                sleep(Duration::from_millis(20)).await;
            }
            Err(e) => work.register_failed(e),
        }
    }
}

/// The registers as read under `fence`: the fenced value (`None` when it refused the
/// fence) and the unfenced one.
async fn read(work: &Workload, key: usize, fence: u64) -> Result<(Option<i64>, i64), BoxError> {
    let fenced = work.registers.fenced_read(key, fence).await?;
    let unfenced = work.registers.unfenced_read(key).await?;
    Ok((fenced, unfenced))
}

/// Writes back one more than what was read. A holder the fenced register refused on
/// reading knows it is stale and skips that register; the unfenced control has no way
/// to know.
async fn write(
    work: &Workload,
    key: usize,
    fence: u64,
    (fenced, unfenced): (Option<i64>, i64),
) -> Result<(), BoxError> {
    if let Some(value) = fenced {
        work.registers.fenced_write(key, fence, value + 1).await?;
    }
    work.registers.unfenced_write(key, unfenced + 1).await
}

/// A holder through a guard: waits for the lock, works (stopping at the loss signal),
/// and writes unless it was told it lost the lock. A quarter of the holds of the
/// long-holding clients are long: they last two to four TTLs, renewed by the guard, and write every
/// quarter TTL, so that faults land inside them; each write is checked when it is
/// sent. `Ok(false)` when no lock was had.
async fn guarded(
    work: &Workload,
    client: usize,
    key: usize,
    locks: &LockClient,
) -> Result<bool, BoxError> {
    let first_sent = Instant::now();
    let guard = match locks.lock(work.keys[key].as_str(), work.ttl * 4).await {
        Ok(guard) => guard,
        Err(e) => {
            work.lock_failed(&e);
            return Ok(false);
        }
    };
    let granted = Instant::now();
    // The grant's validity is its request's send time plus the TTL less the drift
    // allowance: so the last attempt's send time, for a guard that waited.
    let sent =
        (guard.valid_until() - work.ttl.saturating_sub(work.drift)).clamp(first_sent, granted);
    let fence = guard.fence().get();
    // When the loss was signalled, watched from the grant on.
    let lost = guard.lost();
    let watcher = tokio::spawn(async move {
        let reason = lost.await;
        (Instant::now(), reason)
    });
    let long = client < work.long_clients && rand::random_bool(LONG_SHARE);
    let (pause, writes) = if long {
        (work.ttl / 4, 8 + rand::random_range(0..8))
    } else {
        (work.work_max.mul_f64(rand::random::<f64>()), 1)
    };
    let mut unsignalled = None;
    for _ in 0..writes {
        let values = read(work, key, fence).await?;
        let told = tokio::select! {
            () = sleep(pause) => false,
            _ = guard.lost() => true,
        };
        if told {
            break;
        }
        // Going on: the holder must either still be valid or have been told.
        let (loss, valid_until) = (guard.loss(), guard.valid_until());
        let now = Instant::now();
        if loss.is_none() && now >= valid_until && unsignalled.is_none() {
            unsignalled = Some((now - valid_until).as_secs_f64());
        }
        if loss.is_some() {
            break;
        }
        write(work, key, fence, values).await?;
    }
    // A guard knows itself held until its validity runs out at the latest, whenever
    // the task watching the signal gets to run.
    let valid_until = guard.valid_until();
    let release_sent = Instant::now();
    let _ = guard.release().await;
    let ended = match watcher.await {
        Ok((at, Some(_))) => at.min(release_sent),
        _ => release_sent,
    }
    .min(valid_until);
    work.record(Hold {
        client,
        key,
        kind: if long {
            HoldKind::Long
        } else {
            HoldKind::Guarded
        },
        fence,
        sent: work.at(sent),
        granted: work.at(granted),
        ended: work.at(ended),
        unsignalled,
    });
    Ok(true)
}

/// A holder that stops, as a paused process would: it takes a bare lease, reads, is
/// frozen past its TTL without renewing, then writes as if nothing had happened.
async fn paused(
    work: &Workload,
    client: usize,
    key: usize,
    backend: &Arc<DynLockBackend>,
) -> Result<bool, BoxError> {
    // It tries for up to a TTL, as a busy key would otherwise leave the run with few
    // paused holders, and the unfenced control with little to lose.
    let give_up = Instant::now() + work.ttl;
    let (sent, lease) = loop {
        let sent = Instant::now();
        match backend.try_acquire(&work.keys[key], work.ttl).await {
            Ok(AcquireOutcome::Acquired(lease)) => break (sent, lease),
            Ok(AcquireOutcome::Held { .. }) if Instant::now() < give_up => {
                sleep(Duration::from_millis(5)).await;
            }
            Ok(AcquireOutcome::Held { .. }) => return Ok(true),
            Err(e) => {
                work.lock_failed(&e);
                return Ok(false);
            }
        }
    };
    let granted = Instant::now();
    let fence = lease.fence().get();
    let values = read(work, key, fence).await?;
    sleep(work.ttl.mul_f64(1.2 + rand::random::<f64>() * 0.5)).await;
    write(work, key, fence, values).await?;
    let _ = backend.release_lease(&lease).await;
    work.record(Hold {
        client,
        key,
        kind: HoldKind::Paused,
        fence,
        sent: work.at(sent),
        granted: work.at(granted),
        ended: work.at(lease.valid_until()),
        unsignalled: None,
    });
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_no_fault_causes_is_the_harness_s_outcome() {
        let mut kinds = BTreeMap::new();
        kinds.insert("Timeout".to_owned(), 40);
        kinds.insert("Unavailable".to_owned(), 3);
        kinds.insert("CircuitOpen".to_owned(), 1);
        kinds.insert("Backend".to_owned(), 2);
        assert!(misdirected(&kinds).is_empty());
        kinds.insert("Unsupported".to_owned(), 88);
        assert_eq!(
            misdirected(&kinds),
            [
                "88 lock operations failed with Unsupported, which no fault causes: \
              the row did not run what it names"
            ]
        );
    }
}
