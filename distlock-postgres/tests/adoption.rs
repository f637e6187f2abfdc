//! Adopting the backend with what a service already has: its own sqlx pool, a
//! password as the DBA set it, tables the DBA created, and errors that say where and
//! which setting.

use std::str::FromStr;
use std::time::Duration;

use distlock_conformance::adoption;
use distlock_core::backend::LockBackendExt;
use distlock_core::ErrorKind;
use distlock_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use distlock_postgres::sqlx::Row;
use distlock_postgres::{PostgresBackend, PostgresConfig};
use distlock_testservers::{Postgres, ServerHandle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_reserved_characters_connects_raw_or_encoded() {
    let server = ServerHandle::start_with_password(&Postgres, adoption::PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let connect = |url: String| async move { PostgresBackend::connect(&url).await };
    adoption::reserved_password_connects(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = adoption::wrong_password_is_refused(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(err.code(), Some("28P01"), "the SQLSTATE: {err:?}");
    // No password at all: refused as such, at connect or at the first lock.
    adoption::missing_password_is_refused(&server.url(), connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_pool_is_used_and_its_sessions_keep_their_settings() {
    let server = ServerHandle::start(&Postgres)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let options = PgConnectOptions::from_str(&server.url()).expect("sqlx options");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("the service's pool");
    let config = PostgresConfig::default()
        .with_table("svc_locks")
        .with_response_timeout(Duration::from_millis(1500));
    let backend = PostgresBackend::from_pool(pool.clone(), config)
        .await
        .expect("from the pool");
    let lease = backend
        .acquire_once("pooled", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&lease).await.expect("release");
    // One connection in all, and it is the service's, with its own settings.
    assert_eq!(pool.size(), 1);
    let row = distlock_postgres::sqlx::query("SHOW statement_timeout")
        .fetch_one(&pool)
        .await
        .expect("show");
    assert_eq!(
        row.get::<String, _>(0),
        "0",
        "the session's timeout changed"
    );
    let row = distlock_postgres::sqlx::query("SELECT count(*) FROM svc_locks")
        .fetch_one(&pool)
        .await
        .expect("the table named in the config");
    assert_eq!(row.get::<i64, _>(0), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_migration_missing_tables_are_named_and_the_dba_sql_creates_them() {
    let server = ServerHandle::start(&Postgres)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("{}?table=dba_locks&migrate=false", server.url());
    let err = PostgresBackend::connect(&url).await.expect_err("no tables");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    let text = err.to_string();
    assert!(text.contains("\"public\".\"dba_locks\""), "{text}");
    assert!(text.contains("migration_sql"), "{text}");

    let config: PostgresConfig = url.parse().expect("config");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(PgConnectOptions::from_str(&server.url()).expect("options"))
        .await
        .expect("pool");
    let mut tx = pool.begin().await.expect("begin");
    for statement in PostgresBackend::migration_sql(&config) {
        distlock_postgres::sqlx::query(&statement)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    tx.commit().await.expect("commit");
    let backend = PostgresBackend::connect(&url)
        .await
        .expect("tables in place");
    backend
        .acquire_once("dba", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_with_the_setting_that_ran_out() {
    adoption::unreachable_endpoint_is_named(
        "acquire_timeout_ms=400",
        Duration::from_millis(2500),
        |addr| async move {
            PostgresBackend::connect(&format!(
                "postgres://u:{}@{addr}/db?acquire_timeout_ms=400&response_timeout_ms=3000",
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
        PostgresBackend::connect(&format!("postgres://u:{}@{addr}/db", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// An HTTP server where PostgreSQL was expected, with the default time-outs: reported at
/// once as an endpoint that speaks another protocol, on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_endpoint_is_reported_as_such_at_once() {
    let err = adoption::wrong_protocol_endpoint_is_reported_at_once(|addr| async move {
        PostgresBackend::connect(&format!("postgres://u:{}@{addr}/db", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{err}");
}
