//! Errors that say where and which setting, and a password as the operator set it.

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

/// A password with every character a URL gives meaning to that a password may hold.
const PASSWORD: &str = "p+w&d%@x";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_reserved_characters_connects_raw_or_encoded() {
    let server = distlock_testservers::ServerHandle::start(&distlock_testservers::Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    distlock_testservers::enable_etcd_auth(&server, PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("enable auth: {e}"));
    let port = server.host_port();
    for url in [
        format!("etcd://root:{PASSWORD}@127.0.0.1:{port}"),
        format!("etcd://root:p%2Bw%26d%25%40x@127.0.0.1:{port}"),
    ] {
        let backend = EtcdBackend::connect(&url).await.expect("connect");
        let lease = distlock_core::backend::LockBackendExt::acquire_once(
            &backend,
            "adopted",
            Duration::from_secs(5),
        )
        .await
        .expect("acquire")
        .expect("free");
        distlock_core::backend::LockBackendExt::release_lease(&backend, &lease)
            .await
            .expect("release");
    }
    let err = EtcdBackend::connect(&format!("etcd://root:p+w&d%@y@127.0.0.1:{port}"))
        .await
        .expect_err("wrong");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
    assert!(err.code().is_some(), "the gRPC status: {err:?}");
    assert!(!format!("{err} {err:?}").contains("p+w&d"), "{err:?}");
}
