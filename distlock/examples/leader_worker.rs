//! A background worker that works only while it is the elected leader, and steps
//! down cleanly when it loses the lease.
//!
//! Three replicas of the worker (as three processes would run it) campaign for one
//! lock; the holder is the leader, and works in batches, each begun only while the
//! lease is still its own. After two seconds an operator breaks the lock (as
//! `distlock force-release workers/reports` does): the leader learns it at its next
//! renewal, stops between two batches, and another replica takes over under a higher
//! fence. Between the break and that renewal both replicas are at work: no lock
//! service can stop that, which is why each batch would write to its store under the
//! term's fence, so that the store refuses the old leader's late batches (see
//! `docs/fencing.md`).
//!
//! Run it against a Redis (`tests/examples.rs` runs it in CI):
//!
//! ```sh
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run -p distlock --features redis --example leader_worker
//! ```

use std::sync::Arc;
use std::time::Duration;

use distlock::{DynLockBackend, LockClient, LockKey, LockOptions};
use tokio::sync::watch;

/// The lock whose holder is the leader.
const LEADER: &str = "workers/reports";

/// One term as leader: its fence, who held it, and the batches done in it.
type Term = (u64, &'static str, u32);

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = distlock::connect(&url).await?;
    let (stop, stopped) = watch::channel(false);
    let replicas: Vec<_> = ["worker-a", "worker-b", "worker-c"]
        .into_iter()
        .map(|name| tokio::spawn(replica(backend.clone(), name, stopped.clone())))
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    match backend.operator() {
        Some(operator) => {
            let broken = operator.force_release(&LockKey::new(LEADER)?).await?;
            println!("operator: broke the leader's lock: {broken}");
        }
        None => println!("operator: {} cannot break a lock", backend.name()),
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.send_replace(true);

    let mut terms: Vec<Term> = Vec::new();
    for replica in replicas {
        terms.extend(replica.await??);
    }
    terms.sort_unstable();
    for (fence, name, batches) in &terms {
        println!("term under fence {fence}: {name}, {batches} batches");
    }
    if terms.len() < 2 {
        return Err("no replica took over after the leader's lock was broken".into());
    }
    Ok(())
}

/// One replica: campaigns, works while leader, steps down on a loss, and campaigns
/// again, until told to stop. Gives back its terms.
async fn replica(
    backend: Arc<DynLockBackend>,
    name: &'static str,
    mut stopped: watch::Receiver<bool>,
) -> distlock::Result<Vec<Term>> {
    // A short lease: a vanished leader is replaced within a second.
    let client = LockClient::with_options(backend, LockOptions::new(Duration::from_secs(1)))?;
    let mut terms = Vec::new();
    while !*stopped.borrow() {
        let leadership = tokio::select! {
            held = client.lock(LEADER, Duration::MAX) => held?,
            _ = stopped.changed() => break,
        };
        let fence = leadership.fence().get();
        println!("{name}: leader under fence {fence}");
        let mut batches = 0;
        loop {
            tokio::select! {
                Some(reason) = leadership.lost() => {
                    println!("{name}: lost the lease ({reason}): stepping down");
                    break;
                }
                _ = stopped.changed() => break,
                // One batch of work; a store it writes to would be handed the fence.
                _ = tokio::time::sleep(Duration::from_millis(100)) => batches += 1,
            }
        }
        terms.push((fence, name, batches));
        // After a loss there is nothing to give back: the answer is NotHeld.
        let _ = leadership.release().await;
    }
    Ok(terms)
}
