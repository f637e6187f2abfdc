//! A job runner bounded by a semaphore across processes: however many runners start,
//! at most three jobs run at once against the resource they share.
//!
//! Four runners, each with its own connection (as four processes would have), run
//! five jobs each; each job holds one of the semaphore's three permits while it runs.
//! The runners count how many jobs run at once, and the run fails if that ever
//! exceeds the limit.
//!
//! Run it against a Redis (`tests/examples.rs` runs it in CI):
//!
//! ```sh
//! DISTLOCK_URL=redis://127.0.0.1:6379 cargo run -p distlock --features redis --example job_runner
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::LockClient;

/// How many jobs may run at once, across every runner.
const LIMIT: u32 = 3;

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let running = Arc::new(AtomicU32::new(0));
    let peak = Arc::new(AtomicU32::new(0));
    let mut runners = Vec::new();
    for runner in 0..4 {
        // Each runner connects on its own, as a separate process would.
        let backend = distlock::connect(&url).await?;
        let jobs = LockClient::new(backend).semaphore("jobs/exports", LIMIT)?;
        let (running, peak) = (running.clone(), peak.clone());
        runners.push(tokio::spawn(async move {
            for job in 0..5 {
                let permit = jobs.acquire(Duration::from_secs(30)).await?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                println!("runner {runner}: job {job} running ({now} at once)");
                tokio::time::sleep(Duration::from_millis(50)).await; // the job
                running.fetch_sub(1, Ordering::SeqCst);
                permit.release().await?;
            }
            Ok::<_, distlock::Error>(())
        }));
    }
    for runner in runners {
        runner.await??;
    }
    let peak = peak.load(Ordering::SeqCst);
    println!("20 jobs done, at most {peak} at once (the limit is {LIMIT})");
    if peak > LIMIT {
        return Err(format!("{peak} jobs ran at once, over the limit of {LIMIT}").into());
    }
    Ok(())
}
