// README.md, "Quick start": this file from the next line on, word for word (tests/readme.rs).
use std::time::Duration;

use distlock::{LockClient, LockOptions};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let backend = distlock::connect(&url).await?;
    // Each lease lasts 10 s and is renewed every third of that while the guard lives.
    let client = LockClient::with_options(backend, LockOptions::new(Duration::from_secs(10)))?;

    // Wait up to 5 s for the lock (a timeout error after that).
    let guard = client.lock("nightly-report", Duration::from_secs(5)).await?;
    println!("holding nightly-report with fence {}", guard.fence().get());
    tokio::select! {
        Some(reason) = guard.lost() => println!("lost the lock: {reason}"),
        _ = tokio::time::sleep(Duration::from_millis(100)) => println!("report written"),
    }
    guard.release().await?; // or drop it: the lease is released in the background

    // Or: hold the lock for the length of the work.
    let fence = client
        .with_lock("nightly-report", Duration::from_secs(5), |fence| async move {
            fence.get() // the work
        })
        .await?
        .into_output(); // beside it, `lease()`: whether the lease was held to the end
    println!("the second hold had fence {fence}");
    Ok(())
}
