//! Several keys under one lock (`LockClient::lock_all`): S1 of a two-key set beside
//! the one-key cycle, and two clients locking the same pair in opposite orders.

use std::sync::Arc;
use std::time::Duration;

use distlock::{DynLockBackend, ErrorKind, LockClient, MultiGuard};
use serde::Serialize;
use tokio::time::Instant;

use crate::run::BoxError;
use crate::scenarios::{self, s1_side_by_side, Contender, S1Entry, Sizes};
use crate::stats::Summary;

/// How long a set in the opposite-orders run waits before its wait counts as run out:
/// far longer than a handoff takes, so that only a stuck pair (a deadlock) reaches it.
pub(crate) const OPPOSITE_WAIT: Duration = Duration::from_secs(10);

/// What the sets measured on one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SetRow {
    /// Whether the backend took each set in one step on the server
    /// (`LockBackend::sets`), rather than key by key.
    pub(crate) one_step: bool,
    /// S1 of the one-key cycle, in the same blocks as the two-key one.
    pub(crate) one_key: Summary,
    /// S1 of a two-key set: `try_lock_all` on two fresh keys, then its release.
    pub(crate) two_keys: Summary,
    /// Two clients, each taking the same pair in its own order, for the S2 time:
    /// cycles per second of both together.
    pub(crate) opposite: Summary,
    /// Waits of the opposite-orders run that ran out ([`OPPOSITE_WAIT`]): 0 where no
    /// pair ever deadlocked.
    pub(crate) opposite_timeouts: usize,
}

/// A set of two keys: the key S1 names and a second one beside it.
#[derive(Clone)]
struct TwoKeys(LockClient);

impl TwoKeys {
    fn pair(key: &str) -> [String; 2] {
        [key.to_owned(), format!("{key}/second")]
    }
}

impl Contender for TwoKeys {
    type Held = MultiGuard;

    async fn try_take(&self, key: &str) -> Result<Option<MultiGuard>, BoxError> {
        Ok(self.0.try_lock_all(Self::pair(key)).await?.ok())
    }

    async fn take(&self, key: &str, wait: Duration) -> Result<MultiGuard, BoxError> {
        Ok(self.0.lock_all(Self::pair(key), wait).await?)
    }

    async fn give_back(&self, held: MultiGuard) -> Result<(), BoxError> {
        Ok(held.release().await?)
    }
}

/// S1 of a two-key set beside the one-key cycle, and the opposite-orders run.
pub(crate) async fn run(backend: &Arc<DynLockBackend>, sizes: Sizes) -> Result<SetRow, BoxError> {
    let client = scenarios::client(backend)?;
    let entries = [
        S1Entry::new("one key", client.clone()),
        S1Entry::new("two keys", TwoKeys(client)),
    ];
    let mut s1 = s1_side_by_side(&entries, sizes, None).await.into_iter();
    let one_key = s1.next().ok_or("no S1 for one key")??;
    let two_keys = s1.next().ok_or("no S1 for two keys")??;
    let (opposite, opposite_timeouts) = opposite_orders(backend, sizes.throughput_for).await?;
    Ok(SetRow {
        one_step: backend.sets().is_some(),
        one_key,
        two_keys,
        opposite,
        opposite_timeouts,
    })
}

/// Two clients of `backend` (each with a client of its own) lock one pair of keys in
/// opposite orders, hold it, and release it, for `run_for`: every cycle's time, and
/// how many waits ran out.
async fn opposite_orders(
    backend: &Arc<DynLockBackend>,
    run_for: Duration,
) -> Result<(Summary, usize), BoxError> {
    let run: u32 = rand::random();
    let (a, b) = (
        format!("lockbench/sets/{run:08x}/a"),
        format!("lockbench/sets/{run:08x}/b"),
    );
    let started = Instant::now();
    let until = started + run_for;
    let orders = [[a.clone(), b.clone()], [b, a]];
    let tasks = orders.into_iter().map(|order| {
        let client = scenarios::client(backend);
        tokio::spawn(async move {
            let client = client?;
            let (mut samples, mut timeouts) = (Vec::new(), 0usize);
            while Instant::now() < until {
                let t = Instant::now();
                match client.lock_all(&order, OPPOSITE_WAIT).await {
                    Ok(set) => {
                        set.release().await?;
                        samples.push(t.elapsed());
                    }
                    Err(e) if e.kind() == ErrorKind::Timeout => timeouts += 1,
                    Err(e) => return Err::<_, BoxError>(e.into()),
                }
            }
            Ok((samples, timeouts))
        })
    });
    let (mut samples, mut timeouts) = (Vec::new(), 0);
    for joined in futures_util::future::join_all(tasks).await {
        let (s, t) = joined.map_err(|e| format!("an opposite-orders task failed: {e}"))??;
        samples.extend(s);
        timeouts += t;
    }
    Ok((Summary::of(samples, started.elapsed()), timeouts))
}
