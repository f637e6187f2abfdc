//! Errors that say where and which setting, without a server.

use std::time::{Duration, Instant};

use distlock_core::ErrorKind;
use distlock_etcd::EtcdBackend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_named_with_the_setting_that_ran_out() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let started = Instant::now();
    let err = EtcdBackend::connect(&format!(
        "etcd://127.0.0.1:{port}?connect_timeout_ms=300&response_timeout_ms=400"
    ))
    .await
    .expect_err("silent");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("response_timeout_ms=400"), "{text}");
    assert!(took < Duration::from_millis(3000), "took {took:?}");
}
