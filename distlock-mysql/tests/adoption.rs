//! Adopting the backend with what a service already has: a password as the DBA set
//! it, and errors that say where and which setting. (The service's own pool is
//! `from_pool.rs`'s, tables left to a DBA `mysql.rs`'s.)

use std::time::Duration;

use distlock_conformance::adoption;
use distlock_mysql::MySqlBackend;
use distlock_testservers::{MariaDb, ServerHandle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_reserved_characters_connects_raw_or_encoded() {
    let server = ServerHandle::start_with_password(&MariaDb, adoption::PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let connect = |url: String| async move { MySqlBackend::connect(&url).await };
    adoption::reserved_password_connects(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = adoption::wrong_password_is_refused(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // No password at all: refused as such, at connect or at the first lock.
    adoption::missing_password_is_refused(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // ER_ACCESS_DENIED_ERROR.
    assert_eq!(
        err.code(),
        Some("1045"),
        "the server's error number: {err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_with_the_setting_that_ran_out() {
    adoption::unreachable_endpoint_is_named(
        "acquire_timeout_ms=400",
        Duration::from_millis(2500),
        |addr| async move {
            MySqlBackend::connect(&format!(
                "mysql://u:{}@{addr}/db?acquire_timeout_ms=400&response_timeout_ms=3000",
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
        MySqlBackend::connect(&format!("mysql://u:{}@{addr}/db", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// An HTTP server where MySQL was expected, with the default time-outs: reported at
/// once as an endpoint that speaks another protocol, on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_endpoint_is_reported_as_such_at_once() {
    let err = adoption::wrong_protocol_endpoint_is_reported_at_once(|addr| async move {
        MySqlBackend::connect(&format!("mysql://u:{}@{addr}/db", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{err}");
}

/// A server whose certificate another CA signed is refused at connect, as a
/// configuration error (not retryable); trusting the right CA, the same server is
/// reached, locks, and writes to its fenced store; and a plain-text connection to it is refused by the server,
/// which takes TLS only.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_of_another_ca_is_a_configuration_error() {
    let tls = distlock_testservers::TlsMaterial::generate().expect("certificates");
    let server =
        distlock_testservers::ServerHandle::start_tls(&distlock_testservers::MariaDb, &tls)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    let wrong = server.tls_url(&tls, &tls.wrong_ca_file()).expect("url");
    let err = MySqlBackend::connect(&wrong).await.expect_err("another CA");
    assert_eq!(err.kind(), distlock_core::ErrorKind::Configuration, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let right = server.tls_url(&tls, &tls.ca_file()).expect("url");
    let backend = MySqlBackend::connect(&right).await.expect("the right CA");
    // The fenced store runs on the backend's connections: over TLS too.
    use distlock_core::FencedStoreExt;
    let store = distlock_mysql::fenced::MySqlStore::new(&backend)
        .await
        .expect("the store's table");
    let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
    let guard = client
        .lock("tls", Duration::from_secs(5))
        .await
        .expect("a lock");
    store
        .write("tls", guard.fence(), b"over TLS")
        .await
        .expect("a fenced write");
    let kept = store
        .read("tls", guard.fence())
        .await
        .expect("a fenced read");
    assert_eq!(kept.as_deref(), Some(&b"over TLS"[..]));
    guard.release().await.expect("released");
    // MariaDB answers a plain-text login to a server that takes TLS only as refused
    // credentials (1045), not with a word about TLS.
    let plain = server.url();
    let refused = MySqlBackend::connect(&plain).await.expect_err("plain text");
    assert_eq!(
        refused.kind(),
        distlock_core::ErrorKind::Authentication,
        "{refused}"
    );
}
