//! What the conformance suite does not cover: purging old rows, the durability options
//! and hostile names. Each test has a PostgreSQL of its own.

use std::time::Duration;

use distlock_core::{ErrorKind, FenceDurability, LockBackend, LockBackendExt, ReleaseOutcome};
use distlock_postgres::PostgresBackend;
use distlock_testservers::{Postgres, ServerHandle};

async fn server() -> ServerHandle {
    ServerHandle::start(&Postgres)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_old_rows_never_lowers_a_fence() {
    let server = server().await;
    // A short response timeout makes the purge floor (twice that) short too.
    let backend = PostgresBackend::connect(&format!("{}?response_timeout_ms=1000", server.url()))
        .await
        .expect("connect");
    let err = backend
        .purge_expired(Duration::from_millis(1500))
        .await
        .expect_err("too soon");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");

    let first = backend
        .acquire_once("purged", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&first).await.expect("release");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let purged = backend
        .purge_expired(Duration::from_millis(2000))
        .await
        .expect("purge");
    assert!(purged >= 1, "nothing was purged");
    let second = backend
        .acquire_once("purged", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    assert!(
        second.fence() > first.fence(),
        "{:?} after {:?}",
        second.fence(),
        first.fence()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_options_are_declared_in_the_capabilities() {
    let server = server().await;
    let durable = PostgresBackend::connect(&server.url())
        .await
        .expect("connect");
    assert_eq!(
        durable.capabilities().fence_durability,
        FenceDurability::Durable
    );
    assert!(durable.capabilities().leases_survive_restart);

    let fast = PostgresBackend::connect(&format!(
        "{}?table=fast_locks&unlogged=true&synchronous_commit=off",
        server.url()
    ))
    .await
    .expect("connect");
    assert_eq!(
        fast.capabilities().fence_durability,
        FenceDurability::BestEffort
    );
    assert!(!fast.capabilities().leases_survive_restart);
    let lease = fast
        .acquire_once("quick", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(
        fast.release_lease(&lease).await.expect("release"),
        ReleaseOutcome::Released
    );

    let mut conn = sqlx::PgConnection::connect(&server.url())
        .await
        .expect("admin");
    let persistence: String = sqlx::query_scalar(
        "SELECT relpersistence::text FROM pg_class WHERE relname = 'fast_locks'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("catalog");
    assert_eq!(persistence, "u", "the table is not unlogged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_are_refused_before_reaching_the_server() {
    for url in [
        "postgres://u:p@127.0.0.1:1/db?table=locks%3BDROP%20TABLE%20x",
        "postgres://u:p@127.0.0.1:1/db?schema=%22public%22",
    ] {
        let err = PostgresBackend::connect(url).await.expect_err(url);
        assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    }
}

use sqlx::Connection as _;
