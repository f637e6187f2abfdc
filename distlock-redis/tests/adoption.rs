//! Adopting the backend with what a service already has: its own redis client, a
//! password as the operator set it, and errors that say where and which setting.

use std::time::Duration;

use distlock_conformance::adoption;
use distlock_core::backend::LockBackendExt;
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testservers::{Redis, ServerHandle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_reserved_characters_connects_raw_or_encoded() {
    let server = ServerHandle::start_with_password(&Redis, adoption::PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let connect = |url: String| async move { RedisBackend::connect(&url).await };
    adoption::reserved_password_connects(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = adoption::wrong_password_is_refused(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        err.code(),
        Some("AuthenticationFailed"),
        "the driver's kind: {err:?}"
    );
    // No password at all: refused as such, at connect or at the first lock (whose
    // script call Redis answers "Protocol error: unauthenticated multibulk length").
    adoption::missing_password_is_refused(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
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
    adoption::unreachable_endpoint_is_named(
        "connect_timeout_ms=400",
        Duration::from_secs(3),
        |addr| async move {
            RedisBackend::connect(&format!(
                "redis://:{}@{addr}?connect_timeout_ms=400&response_timeout_ms=400",
                adoption::SECRET
            ))
            .await
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A closed port, with the default time-outs: reported as refused, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_reported_as_refused_at_once() {
    adoption::refused_connection_is_reported_at_once(|addr| async move {
        RedisBackend::connect(&format!("redis://:{}@{addr}", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// An HTTP server where Redis was expected, with the default time-outs: reported at
/// once as an endpoint that speaks another protocol, on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_endpoint_is_reported_as_such_at_once() {
    let err = adoption::wrong_protocol_endpoint_is_reported_at_once(|addr| async move {
        RedisBackend::connect(&format!("redis://:{}@{addr}", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{err}");
}
