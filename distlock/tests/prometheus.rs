//! The metrics a service gets, as Prometheus shows them: what distlock/guides/operating.md quotes.

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockOptions, MemoryBackend};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::test]
async fn prometheus_shows_the_clients_metrics_by_backend() {
    let prometheus = PrometheusBuilder::new()
        .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0, 60.0])
        .expect("buckets")
        .install_recorder()
        .expect("the only recorder of this test binary");
    let client = LockClient::with_options(
        Arc::new(MemoryBackend::new()),
        LockOptions::new(Duration::from_secs(5)),
    )
    .expect("options");
    let guard = client
        .lock("reports/nightly", Duration::from_secs(1))
        .await
        .expect("free");
    assert!(client
        .try_lock("reports/nightly")
        .await
        .expect("try")
        .is_err());
    guard.release().await.expect("held");
    let text = prometheus.render();
    for line in [
        "distlock_acquisitions_total{backend=\"memory\",outcome=\"acquired\"} 1",
        "distlock_acquisitions_total{backend=\"memory\",outcome=\"busy\"} 1",
        "distlock_wait_seconds_count{backend=\"memory\",outcome=\"acquired\"} 1",
        "distlock_hold_seconds_count{backend=\"memory\"} 1",
        "distlock_held{backend=\"memory\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    assert!(
        !text.contains("reports/nightly"),
        "a key label without asking:\n{text}"
    );
}
