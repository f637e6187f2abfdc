//! What the conformance suite does not cover: credentials, round trips, purging old
//! rows, and the durability options. Each test has a PostgreSQL of its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_conformance::servers::{ServerHandle, ServerKind};
use distlock_core::{ErrorKind, FenceDurability, LockBackend, LockBackendExt, ReleaseOutcome};
use distlock_postgres::PostgresBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn server() -> ServerHandle {
    ServerHandle::start(ServerKind::Postgres)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A TCP proxy in front of the server that counts round trips: the server answers each
/// `Sync` (the end of one request) with one `ReadyForQuery` message, so counting those
/// counts the times the client waited for the server.
struct RoundTrips {
    port: u16,
    count: Arc<AtomicU64>,
}

impl RoundTrips {
    async fn start(server_port: u16) -> RoundTrips {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let count = Arc::new(AtomicU64::new(0));
        let counter = count.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = TcpStream::connect(("127.0.0.1", server_port))
                    .await
                    .expect("upstream");
                let (mut cr, mut cw) = client.into_split();
                let (mut ur, mut uw) = upstream.into_split();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 || uw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    // Backend messages: a type byte and a big-endian length that counts
                    // itself. `pending` holds what is not yet a whole message.
                    let mut pending: Vec<u8> = Vec::new();
                    while let Ok(n) = ur.read(&mut buf).await {
                        if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        pending.extend_from_slice(&buf[..n]);
                        while pending.len() >= 5 {
                            let len = u32::from_be_bytes([
                                pending[1], pending[2], pending[3], pending[4],
                            ]) as usize;
                            if pending.len() < 1 + len {
                                break;
                            }
                            if pending[0] == b'Z' {
                                counter.fetch_add(1, Ordering::SeqCst);
                            }
                            pending.drain(..1 + len);
                        }
                    }
                });
            }
        });
        RoundTrips { port, count }
    }

    async fn since_last(&self) -> u64 {
        tokio::time::sleep(Duration::from_millis(50)).await; // let the proxy catch up
        self.count.swap(0, Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_authentication_error_at_once() {
    let server = server().await;
    let url = server.url().replace(server.password(), "not-the-password");
    let started = Instant::now();
    let err = PostgresBackend::connect(&url)
        .await
        .expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("not-the-password"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_extend_take_one_round_trip_each() {
    let server = server().await;
    let proxy = RoundTrips::start(server.host_port()).await;
    let url = server.url().replace(
        &format!(":{}/", server.host_port()),
        &format!(":{}/", proxy.port),
    );
    // One connection, so that every statement is prepared on it during the warm-up.
    let backend = PostgresBackend::connect(&format!("{url}?pool_size=1"))
        .await
        .expect("connect");
    let ttl = Duration::from_secs(10);
    let lease = backend
        .acquire_once("warm", ttl)
        .await
        .expect("acquire")
        .expect("free");
    backend.extend(&lease, ttl).await.expect("extend");
    backend.release_lease(&lease).await.expect("release");
    proxy.since_last().await;
    for i in 0..4 {
        let l = backend
            .acquire_once(&format!("probe{i}"), ttl)
            .await
            .expect("a")
            .expect("f");
        assert_eq!(proxy.since_last().await, 1, "acquire of a new key {i}");
        backend.release_lease(&l).await.expect("release");
        assert_eq!(proxy.since_last().await, 1, "release {i}");
    }

    let lease = backend
        .acquire_once("counted", ttl)
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(proxy.since_last().await, 1, "acquire");
    backend.extend(&lease, ttl).await.expect("extend");
    assert_eq!(proxy.since_last().await, 1, "extend");
    assert_eq!(
        backend.release_lease(&lease).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(proxy.since_last().await, 1, "release");
    let busy = backend.acquire_once("counted", ttl).await.expect("acquire");
    assert!(busy.is_some());
    assert_eq!(proxy.since_last().await, 1, "acquire after release");
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
