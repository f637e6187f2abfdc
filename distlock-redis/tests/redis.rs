//! What the conformance suite does not cover: credentials, round trips, scripts that
//! the server forgot, and waiting for replicas. Each test has a Redis of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_conformance::servers::{ServerHandle, ServerKind};
use distlock_conformance::ServerControl as _;
use distlock_core::{ErrorKind, LockBackend, LockBackendExt, LockKey, ReleaseOutcome};
use distlock_redis::RedisBackend;

async fn server() -> ServerHandle {
    ServerHandle::start(ServerKind::Redis)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A plain driver connection to the test server, for looking behind the backend.
async fn admin(server: &ServerHandle) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

/// Watches what clients send the server with `MONITOR`, leaving out what scripts run
/// inside the server (marked `lua`): each entry is one command a client sent.
struct Monitor {
    conn: tokio::net::TcpStream,
}

impl Monitor {
    async fn start(server: &ServerHandle) -> Monitor {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", server.host_port()))
            .await
            .expect("connect");
        let pw = server.password();
        let hello = format!(
            "*2\r\n$4\r\nAUTH\r\n${}\r\n{pw}\r\n*1\r\n$7\r\nMONITOR\r\n",
            pw.len()
        );
        conn.write_all(hello.as_bytes()).await.expect("monitor");
        let mut got = String::new();
        let mut buf = [0u8; 256];
        while got.matches("+OK").count() < 2 {
            let n = conn.read(&mut buf).await.expect("read");
            assert!(n > 0, "monitor refused: {got}");
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        Monitor { conn }
    }

    /// The commands clients sent since the last call, by name.
    async fn sent(&mut self) -> Vec<String> {
        use tokio::io::AsyncReadExt;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(50), self.conn.read(&mut buf)).await
        {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&got)
            .lines()
            .filter(|line| !line.contains(" lua] "))
            .filter_map(|line| line.split('"').nth(1).map(str::to_lowercase))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_authentication_error_at_once() {
    let server = server().await;
    let url = server.url().replace(server.password(), "not-the-password");
    let started = Instant::now();
    let err = RedisBackend::connect(&url)
        .await
        .expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
    assert!(!err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("not-the-password"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_release_and_extend_take_one_command_each() {
    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    // Warm up: load every script once.
    let ttl = Duration::from_secs(10);
    let lease = backend
        .acquire_once("warm", ttl)
        .await
        .expect("acquire")
        .expect("free");
    backend.extend(&lease, ttl).await.expect("extend");
    backend.release_lease(&lease).await.expect("release");

    let mut monitor = Monitor::start(&server).await;
    let lease = backend
        .acquire_once("counted", ttl)
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(monitor.sent().await, ["evalsha"], "acquire");
    backend.extend(&lease, ttl).await.expect("extend");
    assert_eq!(monitor.sent().await, ["evalsha"], "extend");
    let outcome = backend.release_lease(&lease).await.expect("release");
    assert_eq!(outcome, ReleaseOutcome::Released);
    assert_eq!(monitor.sent().await, ["evalsha"], "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_the_server_forgot_are_loaded_again() {
    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let first = backend
        .acquire_once("flushed", Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    let mut admin = admin(&server).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .expect("flush");
    assert_eq!(
        backend
            .release_lease(&first)
            .await
            .expect("release after flush"),
        ReleaseOutcome::Released
    );
    let second = backend
        .acquire_once("flushed", Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    assert!(second.fence() > first.fence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_fail_the_acquire_and_leave_nothing_behind() {
    let server = server().await;
    let url = format!("{}?wait_replicas=1&wait_timeout_ms=50", server.url());
    let backend = RedisBackend::connect(&url).await.expect("connect");
    let err = backend
        .acquire_once("replicated", Duration::from_secs(10))
        .await
        .expect_err("no replicas");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    let plain = RedisBackend::connect(&server.url()).await.expect("connect");
    let key = LockKey::new("replicated").expect("key");
    assert_eq!(
        plain.inspect(&key).await.expect("inspect"),
        None,
        "the unreplicated grant was left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_output_and_errors_never_show_the_password() {
    let server = server().await;
    let backend = Arc::new(RedisBackend::connect(&server.url()).await.expect("connect"));
    let shown = format!("{backend:?}");
    assert!(!shown.contains(server.password()), "{shown}");
    assert!(shown.contains(":***@127.0.0.1"), "{shown}");
    server.pause().await.expect("pause");
    let url = format!(
        "{}?response_timeout_ms=200&connect_timeout_ms=300",
        server.url()
    );
    let slow = RedisBackend::connect(&url).await;
    server.unpause().await.expect("unpause");
    let err = slow.expect_err("connected to a paused server");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(server.password()), "{shown}");
}
