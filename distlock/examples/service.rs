//! A service that takes its lock backend from the environment and its lock options
//! from a configuration file: run it with `DISTLOCK_URL=redis://:pw@127.0.0.1:6379
//! cargo run -p distlock --features redis,serde --example service`, or with a
//! redis-cluster://, postgres://, mysql://, etcd:// or zookeeper:// URL and that
//! backend's feature, or with neither for the in-process memory backend. The options
//! are `examples/service.json` (or the file `DISTLOCK_OPTIONS` names); the code and the
//! options are the same for every backend (`tests/examples.rs` runs it on Redis, and
//! `tests/swap.rs` runs one options file on every backend).

use std::time::Duration;

use distlock::{BackendConfig, LockClient, LockOptions};

/// The lock options, read from the file `DISTLOCK_OPTIONS` names, or the example's own.
fn options() -> Result<LockOptions, Box<dyn std::error::Error>> {
    let path = std::env::var("DISTLOCK_OPTIONS")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/examples/service.json").into());
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // Durations as people write them ("5s"); an unknown field is refused by name.
    Ok(serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?)
}

#[tokio::main]
pub(crate) async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let config = BackendConfig::from_env("DISTLOCK_URL")
        .unwrap_or_else(|_| BackendConfig::from_url("memory://"));
    println!("backend: {config:?}");
    let backend = config.connect().await?;
    // The same options on every backend: a TTL a backend cannot grant exactly (etcd's
    // whole seconds) is lengthened to the next one it can, and reads back as granted.
    let client = LockClient::with_options(backend, options()?)?;
    println!("ttl: {:?}", client.options().ttl());
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
