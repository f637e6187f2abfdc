//! The container harness on real servers: each server starts, its own client finds it
//! ready, and it is paused, restarted and killed through its handle. Without Docker these tests
//! fail and say what is missing; they are never skipped.

use std::time::Duration;

use distlock_conformance::ServerControl;
use distlock_testservers::{
    Etcd, HarnessError, Postgres, Redis, RedisCluster, Server, ServerHandle,
};

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
    // The server runs again once `unpause` returns, but Docker 20.10 can still refuse an
    // `exec` into it for a moment ("is paused", seen in CI), and the probe runs the
    // server's own client by `exec`: so wait for it as a fault harness does.
    server
        .ready()
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

/// Sends `AUTH` and `PING` to the Redis at `host:port` and returns its replies.
async fn redis_ping(host: &str, port: u16, password: &str) -> String {
    redis_say(host, port, password, "PING", "+PONG\r\n").await
}

/// Sends `AUTH` and `command` (inline) to the Redis at `host:port`, and returns its
/// replies once they end with `end` (or 4 KiB have come).
async fn redis_say(host: &str, port: u16, password: &str, command: &str, end: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((host, port))
        .await
        .unwrap_or_else(|e| panic!("connect to {host}:{port}: {e}"));
    stream
        .write_all(format!("AUTH {password}\r\n{command}\r\n").as_bytes())
        .await
        .expect("write");
    let mut replies = Vec::new();
    while !replies.ends_with(end.as_bytes()) && replies.len() < 4096 {
        let mut buf = [0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("reply within 5 s")
            .expect("read");
        assert!(n > 0, "{host}:{port} closed the connection");
        replies.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&replies).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_server_answers_at_its_network_address_and_on_its_port() {
    // Networks another process left (a run killed midway, say) are not this server's.
    let before = direct_networks().await;
    let server = ServerHandle::start_direct(&Redis)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let direct = server.direct_url().expect("a direct URL");
    let url = url::Url::parse(&direct).expect("the direct URL parses");
    let host = url.host_str().expect("a host").to_owned();
    assert_ne!(host, "127.0.0.1", "{}", url.host_str().unwrap_or(""));
    assert_eq!(url.port(), Some(6379));
    assert_eq!(url.password(), Some(server.password()));
    assert!(!format!("{server:?}").contains(server.password()));
    let replies = redis_ping(&host, 6379, server.password()).await;
    assert_eq!(replies, "+OK\r\n+PONG\r\n");
    // The port mapping serves it too.
    let replies = redis_ping("127.0.0.1", server.host_port(), server.password()).await;
    assert_eq!(replies, "+OK\r\n+PONG\r\n");

    let mapped = ServerHandle::start(&Redis)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mapped.direct_url(), None);

    // The network made for the server goes with it.
    let made: Vec<String> = direct_networks()
        .await
        .into_iter()
        .filter(|n| !before.contains(n))
        .collect();
    assert!(
        !made.is_empty(),
        "no distlock-direct-* network while it runs"
    );
    // Dropping it returns once its container and its network are gone.
    drop(server);
    let left: Vec<String> = direct_networks()
        .await
        .into_iter()
        .filter(|n| made.contains(n))
        .collect();
    assert!(left.is_empty(), "{left:?} outlived its server");
}

/// The names of the Docker networks `start_direct` makes.
async fn direct_networks() -> Vec<String> {
    let docker = testcontainers::bollard::Docker::connect_with_local_defaults().expect("docker");
    docker
        .list_networks(None)
        .await
        .expect("list networks")
        .into_iter()
        .filter_map(|n| n.name)
        .filter(|n| n.starts_with("distlock-direct-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_forms_and_redirects_to_addresses_this_machine_reaches() {
    let err = RedisCluster::start(2).await.expect_err("two masters");
    assert!(matches!(err, HarnessError::Cluster(_)), "{err}");

    let cluster = RedisCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cluster.urls().len(), 3);
    let password = cluster.members()[0].password().to_owned();
    let addresses: Vec<String> = cluster
        .members()
        .iter()
        .map(|m| m.direct_address().expect("an address"))
        .collect();
    let mut owners = 0;
    for (member, address) in cluster.members().iter().zip(&addresses) {
        assert_eq!(member.password(), password, "members share one password");
        let (host, port) = address.rsplit_once(':').expect("host:port");
        let port: u16 = port.parse().expect("port");
        let info = redis_say(host, port, &password, "CLUSTER INFO", "\r\n\r\n").await;
        assert!(info.contains("cluster_state:ok"), "{address}: {info}");
        assert!(info.contains("cluster_known_nodes:3"), "{address}: {info}");
        // The key's slot is served by one member; the others redirect to an address
        // of the cluster's network.
        let reply = redis_say(
            host,
            port,
            &password,
            "SET {distlock}probe x\r\nPING",
            "+PONG\r\n",
        )
        .await;
        let reply = reply
            .strip_prefix("+OK\r\n")
            .and_then(|r| r.strip_suffix("+PONG\r\n"))
            .unwrap_or_else(|| panic!("{address} answered {reply:?}"));
        if reply == "+OK\r\n" {
            owners += 1;
        } else {
            let target = reply
                .strip_prefix("-MOVED ")
                .and_then(|r| r.trim_end().split(' ').nth(1))
                .unwrap_or_else(|| panic!("{address} answered {reply:?}"));
            assert!(addresses.iter().any(|a| a == target), "MOVED to {target}");
        }
    }
    assert_eq!(owners, 1, "one member serves the key's slot");
}
