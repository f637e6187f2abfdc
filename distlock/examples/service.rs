//! A service that takes its lock backend from the environment: run it with
//! `DISTLOCK_URL=redis://:pw@127.0.0.1:6379 cargo run -p distlock --features redis
//! --example service`, or with a redis-cluster://, postgres://, etcd:// or
//! zookeeper:// URL and that backend's feature, or with neither for the in-process
//! memory backend. The code is the same for every backend (`tests/examples.rs` runs
//! it on Redis).

use std::time::Duration;

use distlock::{BackendConfig, LockClient, LockOptions};

#[tokio::main]
pub(crate) async fn main() -> distlock::Result<()> {
    let config = BackendConfig::from_env("DISTLOCK_URL")
        .unwrap_or_else(|_| BackendConfig::from_url("memory://"));
    println!("backend: {config:?}");
    let backend = config.connect().await?;
    // The same options on every backend: a TTL a backend cannot grant exactly (etcd's
    // whole seconds) is lengthened to the next one it can.
    let client = LockClient::with_options(backend, LockOptions::new(Duration::from_secs(5)))?;
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
        // The report was written either way; a lease lost before its release is told
        // beside it, for the service to judge.
        println!("{} (lease: {:?})", report.output(), report.lease());
    }
    Ok(())
}
