//! The scenarios, on any backend through distlock's own API.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{
    AcquireOutcome, AcquireRequest, DynLockBackend, LockClient, LockKey, LockOptions, Result,
};
use serde::Serialize;
use tokio::time::Instant;

use crate::stats::Summary;

/// How much each scenario does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) cycles: usize,
    pub(crate) throughput_for: Duration,
    pub(crate) handoffs: usize,
    pub(crate) takeovers: usize,
}

impl Sizes {
    pub(crate) fn quick() -> Self {
        Sizes {
            cycles: 300,
            throughput_for: Duration::from_secs(2),
            handoffs: 100,
            takeovers: 2,
        }
    }

    pub(crate) fn full() -> Self {
        Sizes {
            cycles: 3000,
            throughput_for: Duration::from_secs(10),
            handoffs: 1000,
            takeovers: 5,
        }
    }
}

fn key(scenario: &str, n: usize) -> LockKey {
    let run: u32 = rand::random();
    LockKey::new(format!("lockbench/{scenario}/{run:08x}/{n}"))
        .unwrap_or_else(|e| unreachable!("valid key: {e}"))
}

fn client(backend: &Arc<DynLockBackend>) -> Result<LockClient> {
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(10));
    LockClient::with_options(backend.clone(), LockOptions::new(ttl))
}

/// S1: one client, `try_lock` then `release`, on fresh keys: the path users take.
pub(crate) async fn s1_client_cycle(
    backend: &Arc<DynLockBackend>,
    sizes: Sizes,
) -> Result<Summary> {
    let client = client(backend)?;
    let mut samples = Vec::with_capacity(sizes.cycles);
    let started = Instant::now();
    for n in 0..sizes.cycles {
        let k = key("s1", n);
        let t = Instant::now();
        let guard = client.try_lock(k.as_str()).await?.ok_or_else(|| busy(&k))?;
        guard.release().await?;
        samples.push(t.elapsed());
    }
    Ok(Summary::of(samples, started.elapsed()))
}

/// S1 on the backend's primitives alone (`try_acquire` then `release`), without the
/// client's guard and renewal task: what the library adds is the difference.
pub(crate) async fn s1_backend_cycle(
    backend: &Arc<DynLockBackend>,
    sizes: Sizes,
) -> Result<Summary> {
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(10));
    let mut samples = Vec::with_capacity(sizes.cycles);
    let started = Instant::now();
    for n in 0..sizes.cycles {
        let k = key("s1b", n);
        let t = Instant::now();
        let request = AcquireRequest::new(k.clone(), ttl);
        match backend.try_acquire(&request).await? {
            AcquireOutcome::Acquired(lease) => {
                backend.release(lease.key(), lease.owner()).await?;
            }
            AcquireOutcome::Held { .. } => return Err(busy(&k)),
        }
        samples.push(t.elapsed());
    }
    Ok(Summary::of(samples, started.elapsed()))
}

fn busy(k: &LockKey) -> distlock::Error {
    distlock::Error::new(
        distlock::ErrorKind::Backend,
        format!("the fresh key {k} was held"),
    )
}

/// S2: 32 concurrent clients, each cycling on keys of its own, for a fixed time.
pub(crate) async fn s2_throughput(backend: &Arc<DynLockBackend>, sizes: Sizes) -> Result<Summary> {
    const CLIENTS: usize = 32;
    let client = client(backend)?;
    let started = Instant::now();
    let until = started + sizes.throughput_for;
    let tasks = (0..CLIENTS).map(|c| {
        let client = client.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut n = 0;
            while Instant::now() < until {
                let k = key(&format!("s2-{c}"), n);
                n += 1;
                let t = Instant::now();
                let guard = client.try_lock(k.as_str()).await?.ok_or_else(|| busy(&k))?;
                guard.release().await?;
                samples.push(t.elapsed());
            }
            Ok::<_, distlock::Error>(samples)
        })
    });
    let mut samples = Vec::new();
    for joined in futures_util::future::join_all(tasks).await {
        let done = joined
            .map_err(|e| distlock::Error::new(distlock::ErrorKind::Backend, e.to_string()))?;
        samples.extend(done?);
    }
    Ok(Summary::of(samples, started.elapsed()))
}

/// S3: 16 waiters on one key, each holding it 1 ms: the time from one holder's
/// release to the next holder's acquire.
pub(crate) async fn s3_handoff(backend: &Arc<DynLockBackend>, sizes: Sizes) -> Result<Summary> {
    const WAITERS: usize = 16;
    let client = client(backend)?;
    let k = key("s3", 0);
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let samples: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks = (0..WAITERS).map(|_| {
        let (client, k, last_release, samples, done) = (
            client.clone(),
            k.clone(),
            last_release.clone(),
            samples.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < sizes.handoffs {
                let guard = client.lock(k.as_str(), Duration::from_secs(60)).await?;
                let now = Instant::now();
                if let Some(released) = last_release
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()
                {
                    samples
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(now - released);
                    done.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                *last_release.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
                guard.release().await?;
            }
            Ok::<_, distlock::Error>(())
        })
    });
    for joined in futures_util::future::join_all(tasks).await {
        joined.map_err(|e| distlock::Error::new(distlock::ErrorKind::Backend, e.to_string()))??;
    }
    let wall = started.elapsed();
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Summary::of(samples, wall))
}

/// S4's result: how long after a vanished holder's TTL another client got the lock.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Takeover {
    pub(crate) ttl_ms: f64,
    /// Time from the vanished holder's request to the next acquisition, per round.
    pub(crate) takeover_ms: Vec<f64>,
    /// The largest of those, less the TTL.
    pub(crate) worst_over_ttl_ms: f64,
}

/// S4: a holder takes the lock and vanishes without releasing; a waiter takes over.
pub(crate) async fn s4_takeover(backend: &Arc<DynLockBackend>, sizes: Sizes) -> Result<Takeover> {
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(1));
    let client = client(backend)?;
    let mut takeover_ms = Vec::new();
    for n in 0..sizes.takeovers {
        let k = key("s4", n);
        let sent = Instant::now();
        // The primitive, not the client: a guard would renew or release.
        match backend
            .try_acquire(&AcquireRequest::new(k.clone(), ttl))
            .await?
        {
            AcquireOutcome::Acquired(_) => {}
            AcquireOutcome::Held { .. } => return Err(busy(&k)),
        }
        let guard = client
            .lock(k.as_str(), ttl * 3 + Duration::from_secs(5))
            .await?;
        takeover_ms.push(sent.elapsed().as_secs_f64() * 1e3);
        guard.release().await?;
    }
    let ttl_ms = ttl.as_secs_f64() * 1e3;
    let worst = takeover_ms.iter().copied().fold(0.0, f64::max) - ttl_ms;
    Ok(Takeover {
        ttl_ms,
        takeover_ms,
        worst_over_ttl_ms: worst,
    })
}
