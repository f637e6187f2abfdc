//! rustls's process-wide crypto provider, as the backends leave it: PostgreSQL and
//! etcd connect over TLS with a provider of their own and install none, so the
//! application installs its own afterwards; Redis reads the process-wide provider
//! (its driver builds its TLS configuration from it), so an application that installs
//! one before connecting has it kept. Its own process: the provider is global.

use std::sync::Arc;
use std::time::Duration;

use distlock::{DynLockBackend, LockClient};
use distlock_etcd::EtcdBackend;
use distlock_postgres::PostgresBackend;
use distlock_redis::RedisBackend;
use distlock_testservers::{tls_target, Etcd, Postgres, Redis};
use rustls::crypto::CryptoProvider;

/// A provider other than any backend's: ring with only its TLS 1.3 suites.
fn the_applications_provider() -> CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .retain(|suite| suite.version() == &rustls::version::TLS13);
    provider
}

/// A lock taken and given back through `backend`.
async fn lock_once(backend: Arc<DynLockBackend>, key: &str) {
    let client = LockClient::new(backend);
    let guard = client
        .lock(key, Duration::from_secs(10))
        .await
        .expect("a lock over TLS");
    guard.release().await.expect("a release over TLS");
}

#[tokio::test]
async fn the_application_chooses_the_crypto_provider() {
    let postgres = tls_target(&Postgres, |url| async move {
        PostgresBackend::connect(&url).await
    })
    .await
    .expect("a PostgreSQL server over TLS");
    let etcd = tls_target(&Etcd, |url| async move { EtcdBackend::connect(&url).await })
        .await
        .expect("an etcd server over TLS");
    lock_once(postgres.backend().clone(), "provider/postgres").await;
    lock_once(etcd.backend().clone(), "provider/etcd").await;
    assert!(
        CryptoProvider::get_default().is_none(),
        "connecting PostgreSQL and etcd over TLS installed a process-wide provider"
    );

    // The application installs its own after connecting: it is the one in force.
    the_applications_provider()
        .install_default()
        .expect("nothing was installed before the application's provider");
    let ours = the_applications_provider().cipher_suites.len();
    let installed = || {
        let provider = CryptoProvider::get_default().expect("a provider is installed");
        provider.cipher_suites.len()
    };
    assert_eq!(installed(), ours, "the application's provider is in force");
    // Both keep working, and new connections too.
    lock_once(postgres.backend().clone(), "provider/postgres").await;
    lock_once(etcd.backend().clone(), "provider/etcd").await;
    for _ in 0..2 {
        let again = postgres
            .another_client()
            .await
            .expect("clients")
            .expect("a new PostgreSQL client");
        lock_once(again, "provider/postgres").await;
        let again = etcd
            .another_client()
            .await
            .expect("clients")
            .expect("a new etcd client");
        lock_once(again, "provider/etcd").await;
    }

    // Redis reads the process-wide provider: installed before connecting, the
    // application's is the one its connections use, and it stays installed.
    let redis = tls_target(
        &Redis,
        |url| async move { RedisBackend::connect(&url).await },
    )
    .await
    .expect("a Redis server over TLS, with the application's provider");
    lock_once(redis.backend().clone(), "provider/redis").await;
    assert_eq!(installed(), ours, "the application's provider is in force");
}
