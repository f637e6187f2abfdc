//! The client's metrics in Prometheus' text format. Run it with
//! `cargo run -p distlock --example prometheus --features metrics` (and a
//! `DISTLOCK_URL`, with the backend's feature, for a real server). A service serves
//! the same text on its `/metrics` endpoint: with the exporter's `http-listener`
//! feature, `PrometheusBuilder::new().with_http_listener(addr).install()` does it.

use std::time::Duration;

use distlock::{BackendConfig, LockClient, LockOptions};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new()
        // Waits and holds are histograms: buckets from 1 ms to a minute.
        .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0, 60.0])?
        .install_recorder()?;
    let config = BackendConfig::from_env("DISTLOCK_URL")
        .unwrap_or_else(|_| BackendConfig::from_url("memory://"));
    let backend = config.connect().await?;
    let ttl = backend.capabilities().ttl_at_least(Duration::from_secs(5));
    let client = LockClient::with_options(backend, LockOptions::new(ttl))?;
    let guard = client
        .lock("reports/nightly", Duration::from_secs(10))
        .await?;
    // Another task finds it busy.
    assert!(client.try_lock("reports/nightly").await?.is_err());
    guard.release().await?;
    print!("{}", prometheus.render());
    Ok(())
}
