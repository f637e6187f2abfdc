//! Adopting the backend with what a service already has: its own redis client, a
//! password as the operator set it, and errors that say where and which setting.

use std::time::{Duration, Instant};

use distlock_core::backend::LockBackendExt;
use distlock_core::ErrorKind;
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testservers::{Redis, ServerHandle};

/// A password with every character a URL gives meaning to that a password may hold.
const PASSWORD: &str = "p+w&d%@x";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_reserved_characters_connects_raw_or_encoded() {
    let server = ServerHandle::start_with_password(&Redis, PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let raw = server.url();
    assert!(raw.contains(PASSWORD), "the harness writes it raw: {raw}");
    let encoded = raw.replace(PASSWORD, "p%2Bw%26d%25%40x");
    for url in [raw, encoded] {
        let backend = RedisBackend::connect(&url).await.expect("connect");
        let lease = backend
            .acquire_once("adopted", Duration::from_secs(5))
            .await
            .expect("acquire")
            .expect("free");
        backend.release_lease(&lease).await.expect("release");
    }
    let wrong = server.url().replace(PASSWORD, "p+w&d%@y");
    let err = RedisBackend::connect(&wrong).await.expect_err("wrong");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
    assert_eq!(
        err.code(),
        Some("AuthenticationFailed"),
        "the driver's: {err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("p+w&d"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_client_is_used_as_configured() {
    let server = ServerHandle::start(&Redis)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // The service's client, configured its own way; the lock settings typed.
    let client = distlock_redis::redis::Client::open(server.url()).expect("client");
    let config = RedisConfig::default().with_prefix("svc:");
    let backend = RedisBackend::from_client(client.clone(), config)
        .await
        .expect("from the client");
    let lease = backend
        .acquire_once("shared", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("the service's own connection");
    let exists: bool = distlock_redis::redis::cmd("EXISTS")
        .arg("svc:{shared}")
        .query_async(&mut conn)
        .await
        .expect("exists");
    assert!(exists, "the lock is under the configured prefix");
    backend.release_lease(&lease).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_with_the_setting_that_ran_out() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let started = Instant::now();
    let err = RedisBackend::connect(&format!(
        "redis://:s3cret@127.0.0.1:{port}?connect_timeout_ms=400&response_timeout_ms=400"
    ))
    .await
    .expect_err("silent");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("connect_timeout_ms=400"), "{text}");
    assert!(took < Duration::from_millis(3000), "took {took:?}");
    assert!(!text.contains("s3cret"));
    drop(silent);
    let err = RedisBackend::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );
}
