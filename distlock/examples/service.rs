//! A service that takes its lock backend from the environment: run it with
//! `DISTLOCK_URL=redis://:pw@127.0.0.1:6379 cargo run --example service`, or with a
//! postgres:// or etcd:// URL, or with none for the in-process memory backend. The
//! code is the same for every backend.

use std::time::Duration;

use distlock::{BackendConfig, LockClient, LockOptions};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let config = BackendConfig::from_env("DISTLOCK_URL").unwrap_or(BackendConfig {
        url: "memory://".into(),
    });
    println!("backend: {config:?}");
    let backend = config.connect().await?;
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(5));
    let client = LockClient::with_options(backend, LockOptions::new(ttl))?;
    for run in 1..=3 {
        let report = client
            .with_lock(
                "reports/nightly",
                Duration::from_secs(10),
                |fence| async move {
                    // Hand the fence to the store the report goes to, so that it refuses a
                    // writer with an older fence.
                    format!("run {run} wrote the report under fence {fence}")
                },
            )
            .await?;
        println!("{report}");
    }
    Ok(())
}
