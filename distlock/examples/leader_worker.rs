//! A background worker that works only while it is the elected leader, on
//! `Election::leader_loop`: the loop campaigns, runs the leader's work for each term
//! it wins (dropping it when the term is lost), and resigns when the replica shuts
//! down, so that another is elected at once.
//!
//! Three replicas of the worker (as three processes would run it) run the loop on one
//! election. After two seconds the leading replica is shut down, as a rolling deploy
//! does: it resigns, and another replica takes over at once under a higher fence. Each
//! batch is written to a fenced store under its term's fence, so the store refuses a
//! batch from a leader whose term has ended (see `distlock/guides/fencing.md`); every replica's
//! readiness probe is `LeaderHealth::check`. The work's error (a refused batch, a
//! failed probe) ends its term, which the loop resigns; every term's end is recorded
//! with its reason by `on_stopped_leading`.
//!
//! Run it against a Redis (`tests/examples.rs` runs it in CI):
//!
//! ```sh
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run -p distlock --features redis --example leader_worker
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{
    DynLockBackend, FencedStoreExt as _, FencingToken, LeaderHealth, LockClient, LockOptions,
    MemoryStore,
};
use tokio::sync::oneshot;

/// The election whose leader does the work.
const ELECTION: &str = "workers/reports";

/// One term as leader: its fence, who held it, the batches done in it, and how it
/// ended.
type Term = (u64, &'static str, u32, String);

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = distlock::connect(&url).await?;
    // The store the batches go to: in process here, a fenced table or key in a service.
    let store = MemoryStore::new();
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut replicas = Vec::new();
    for name in ["worker-a", "worker-b", "worker-c"] {
        let (stop, stopped) = oneshot::channel::<()>();
        let replica = replica(backend.clone(), name, store.clone(), terms.clone(), stopped)?;
        replicas.push((name, stop, tokio::spawn(replica)));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    // A rolling deploy: the first replica (the leader) is shut down, and resigns.
    let (name, stop, first) = replicas.remove(0);
    println!("deploy: shutting {name} down");
    let _ = stop.send(());
    first.await??;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (_, stop, replica) in replicas {
        let _ = stop.send(());
        replica.await??;
    }

    let mut terms: Vec<Term> = terms.lock().map_err(|_| "poisoned")?.clone();
    terms.sort_unstable();
    for (fence, name, batches, end) in &terms {
        println!("term under fence {fence}: {name}, {batches} batches, ended: {end}");
    }
    if terms.len() < 2 {
        return Err("no replica took over after the leader shut down".into());
    }
    Ok(())
}

/// One replica's leader loop, to run until `stopped`: while it leads, it writes a
/// batch every 100 ms under its term's fence; when a term ends, however it ends, the
/// loop's stopped-leading callback records it with its reason.
fn replica(
    backend: Arc<DynLockBackend>,
    name: &'static str,
    store: MemoryStore,
    terms: Arc<Mutex<Vec<Term>>>,
    stopped: oneshot::Receiver<()>,
) -> distlock::Result<impl std::future::Future<Output = distlock::Result<()>>> {
    // A short lease: a vanished leader is replaced within a second.
    let client = LockClient::with_options(backend, LockOptions::new(Duration::from_secs(1)))?;
    // Batches per term, counted by the work and read when the term ends.
    let batches: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let leader = client
        .election(ELECTION)?
        .leader_loop(name)?
        .on_new_leader(move |leader| {
            println!("{name}: {} leads (term {})", leader.value, leader.fence)
        })
        .on_stopped_leading({
            let batches = batches.clone();
            move |fence, end| {
                println!("{name}: stopped leading term {fence}: {end}");
                let done = batches.lock().ok().and_then(|mut b| b.remove(&fence.get()));
                if let Ok(mut terms) = terms.lock() {
                    terms.push((fence.get(), name, done.unwrap_or(0), end.to_string()));
                }
            }
        });
    let health = leader.health();
    // The work may fail: its error ends the term, which the loop resigns and reports.
    let work = move |term: distlock::LockGuard| {
        let (store, batches, health) = (store.clone(), batches.clone(), health.clone());
        async move { write_batches(term.fence(), &store, &batches, &health).await }
    };
    Ok(leader.run(work, async move {
        let _ = stopped.await;
    }))
}

/// A leader's work: a batch every 100 ms under `fence`, counted in `batches`, until
/// the store refuses one or the readiness probe fails (or the loop drops it).
async fn write_batches(
    fence: FencingToken,
    store: &MemoryStore,
    batches: &Mutex<HashMap<u64, u32>>,
    health: &LeaderHealth,
) -> distlock::Result<()> {
    let mut done = 0u32;
    loop {
        // A readiness probe would answer this.
        health.check()?;
        store
            .write("reports/batches", fence, &done.to_le_bytes())
            .await?;
        done += 1;
        if let Ok(mut batches) = batches.lock() {
            batches.insert(fence.get(), done);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
