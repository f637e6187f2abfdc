//! Adopting the backend with what a service already has: its own connector, digest
//! credentials as the operator wrote them, and errors that say where and which
//! setting.

use std::time::Duration;

use distlock_conformance::adoption;
use distlock_core::backend::LockBackendExt;
use distlock_core::ErrorKind;
use distlock_testservers::{ServerHandle, ZooKeeper};
use distlock_zookeeper::zookeeper_client::{self, Client};
use distlock_zookeeper::{Endpoint, ZooKeeperBackend, ZooKeeperConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ensemble_is_named_with_the_setting_that_ran_out() {
    adoption::unreachable_endpoint_is_named(
        "connect_timeout_ms=300",
        Duration::from_secs(3),
        |addr| async move {
            ZooKeeperBackend::connect(&format!(
                "zk://app:{}@{addr}?connect_timeout_ms=300&response_timeout_ms=400",
                adoption::SECRET
            ))
            .await
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A closed port, with the default time-outs: reported as refused, at once, not as a
/// time-out to raise (the driver gives no reason: the backend tells one from the other
/// by the time it took).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_reported_as_refused_at_once() {
    let err = adoption::refused_connection_is_reported_at_once(|addr| async move {
        ZooKeeperBackend::connect(&format!("zk://app:{}@{addr}/svc", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!err.to_string().contains("did not answer"), "{err}");
}

/// ZooKeeper takes any digest at connect; what proves the password is what the
/// server made of it. The first backend creates the root with the `creator_all` ACL
/// of the password it read; every later one can lock under that root only with the
/// very same password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_password_with_reserved_characters_is_the_one_the_acl_keeps() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = server.host_port();
    let url = format!("zk://app:{}@127.0.0.1:{port}/svc", adoption::PASSWORD);
    let connect = |url: String| async move { ZooKeeperBackend::connect(&url).await };
    // Raw, then percent-encoded: the second locks under the root the first made.
    adoption::reserved_password_connects(&url, connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // The server keeps the root for that identity alone.
    let anyone = Client::connect(&format!("127.0.0.1:{port}"))
        .await
        .expect("a session without credentials");
    let acls = anyone.get_acl("/svc").await.map(|(acls, _)| acls.len());
    assert!(
        matches!(acls, Err(zookeeper_client::Error::NoAuth)),
        "a session without credentials read the root's ACL: {acls:?}"
    );
    let (acls, _) = Client::connector()
        .with_auth("digest", format!("app:{}", adoption::PASSWORD).as_bytes())
        .connect(&format!("127.0.0.1:{port}"))
        .await
        .expect("a session with the password")
        .get_acl("/svc")
        .await
        .expect("the root's ACL, read with the password");
    assert_eq!(acls.len(), 1, "{acls:?}");
    assert_eq!(acls[0].scheme(), "digest", "{acls:?}");
    assert!(acls[0].id().starts_with("app:"), "{acls:?}");

    // A wrong password connects (no login in the digest scheme), and is refused as
    // such at its first lock, without showing either password.
    let wrong =
        ZooKeeperBackend::connect(&url.replace(adoption::PASSWORD, adoption::WRONG_PASSWORD))
            .await
            .expect("digest has no login");
    let err = wrong
        .acquire_once("adopted", Duration::from_secs(5))
        .await
        .expect_err("the ACL refuses it");
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
    let shown = format!("{err} {err:?} {wrong:?}");
    assert!(!shown.contains("p+w&d"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_connector_makes_the_sessions_with_its_own_credentials() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let port = server.host_port();
    // The service's connector authenticates itself; the lock settings are typed.
    let connector = Client::connector()
        .with_session_timeout(Duration::from_secs(8))
        .with_auth("digest", b"svc:its-own");
    let config = ZooKeeperConfig::new([Endpoint::new("127.0.0.1", port)])
        .with_root("/svc/locks")
        .with_creator_acl();
    let backend = ZooKeeperBackend::from_connector(connector.clone(), config.clone())
        .await
        .expect("from the connector");
    let lease = backend
        .acquire_once("shared", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&lease).await.expect("release");

    // The nodes are the connector's identity's alone.
    let anyone = Client::connect(&format!("127.0.0.1:{port}"))
        .await
        .expect("a session without credentials");
    let read = anyone.get_data("/svc/locks").await.map(|(data, _)| data);
    assert!(
        matches!(read, Err(zookeeper_client::Error::NoAuth)),
        "a session without credentials read the root: {read:?}"
    );
    // Another backend from a connector with other credentials is refused: at
    // connect, where the root's parent is closed to it, or else at its first lock.
    let err = match ZooKeeperBackend::from_connector(
        Client::connector().with_auth("digest", b"svc:another"),
        config,
    )
    .await
    {
        Err(e) => e,
        Ok(other) => other
            .acquire_once("shared", Duration::from_secs(5))
            .await
            .expect_err("the ACL refuses it"),
    };
    assert_eq!(err.kind(), ErrorKind::Authentication, "{err}");
    // The service's connector is as it was: it still makes sessions of its own.
    let own = connector
        .connect(&format!("127.0.0.1:{port}"))
        .await
        .expect("the service's own session");
    own.get_data("/svc/locks")
        .await
        .expect("its identity reads it");
}

/// An HTTP server where ZooKeeper was expected, with the default time-outs: reported at
/// once as an endpoint that speaks another protocol, on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_endpoint_is_reported_as_such_at_once() {
    let err = adoption::wrong_protocol_endpoint_is_reported_at_once(|addr| async move {
        ZooKeeperBackend::connect(&format!("zk://app:{}@{addr}/svc", adoption::SECRET)).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{err}");
}

/// A connection that fails at once is asked what speaks there with an HTTP request
/// (the bytes below, as `src/session.rs` sends them): a ZooKeeper server must leave
/// it unanswered, or a real server would be reported as another protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zookeeper_server_leaves_the_protocol_probe_unanswered() {
    use distlock_core::backend::{probe_endpoint, Probe};
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{}", server.host_port());
    let probe = probe_endpoint(&addr, b"HEAD / HTTP/1.0\r\n\r\n", Duration::from_secs(2)).await;
    assert_eq!(probe, Probe::NoAnswer);
}
