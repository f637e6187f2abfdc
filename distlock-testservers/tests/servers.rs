//! The container harness on real servers: each server starts, its own client finds it
//! ready, and it is paused, restarted and killed through its handle. Without Docker these tests
//! fail and say what is missing; they are never skipped.

use std::time::Duration;

use distlock_conformance::ServerControl;
use distlock_testservers::{Etcd, Postgres, Redis, Server, ServerHandle};

async fn exercise(server: &'static dyn Server) {
    let kind = server.name();
    let server = ServerHandle::start(server)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = server.host_port();
    server
        .probe()
        .await
        .unwrap_or_else(|e| panic!("{kind} is not ready after start: {e}"));
    assert!(
        !format!("{server:?}").contains(server.password()),
        "Debug shows the password"
    );

    server.pause().await.expect("pause");
    let frozen = tokio::time::timeout(Duration::from_secs(4), server.probe()).await;
    assert!(
        !matches!(frozen, Ok(Ok(()))),
        "{kind} answered while paused"
    );
    server.unpause().await.expect("unpause");
    server
        .probe()
        .await
        .unwrap_or_else(|e| panic!("{kind} is not back after unpause: {e}"));

    server
        .restart()
        .await
        .unwrap_or_else(|e| panic!("{kind} restart: {e}"));
    assert_eq!(server.host_port(), port);
    server
        .probe()
        .await
        .unwrap_or_else(|e| panic!("{kind} is not back after restart: {e}"));

    server.kill().await.expect("kill");
    assert!(server.probe().await.is_err(), "{kind} answered after kill");
    server
        .start()
        .await
        .unwrap_or_else(|e| panic!("{kind} start after kill: {e}"));
    server
        .probe()
        .await
        .unwrap_or_else(|e| panic!("{kind} is not back after start: {e}"));

    if server.can_kill_connections() {
        server
            .kill_connections()
            .await
            .unwrap_or_else(|e| panic!("{kind} kill connections: {e}"));
        server
            .probe()
            .await
            .expect("still serving after killing connections");
    }
    eprintln!(
        "{kind}: {:?} image on 127.0.0.1:{port}",
        server.image_source()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_starts_pauses_restarts_and_is_killed() {
    exercise(&Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_starts_pauses_restarts_and_is_killed() {
    exercise(&Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_starts_pauses_restarts_and_is_killed() {
    exercise(&Etcd).await;
}
