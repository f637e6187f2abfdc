//! Errors that say where and which setting, and a password as the operator set it
//! (the shared checks of `distlock_conformance::adoption`).

use std::time::Duration;

use distlock_conformance::adoption;
use distlock_core::ErrorKind;
use distlock_etcd::EtcdBackend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_named_with_the_setting_that_ran_out() {
    adoption::unreachable_endpoint_is_named(
        "response_timeout_ms=400",
        Duration::from_secs(3),
        |addr| async move {
            EtcdBackend::connect(&format!(
                "etcd://root:{}@{addr}?connect_timeout_ms=300&response_timeout_ms=400",
                adoption::SECRET
            ))
            .await
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

/// A closed port, with the default time-outs: reported as refused, at once. Without
/// credentials: with them, the client authenticates as it connects, and that request
/// fails at once anyway; without, the backend's first request is the one refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_reported_as_refused_at_once() {
    adoption::refused_connection_is_reported_at_once(|addr| async move {
        EtcdBackend::connect(&format!("etcd://{addr}")).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_reserved_characters_connects_raw_or_encoded() {
    let server = distlock_testservers::ServerHandle::start(&distlock_testservers::Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    distlock_testservers::enable_etcd_auth(&server, adoption::PASSWORD)
        .await
        .unwrap_or_else(|e| panic!("enable auth: {e}"));
    let url = format!(
        "etcd://root:{}@127.0.0.1:{}",
        adoption::PASSWORD,
        server.host_port()
    );
    let connect = |url: String| async move { EtcdBackend::connect(&url).await };
    adoption::reserved_password_connects(&url, connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    adoption::wrong_password_is_refused(&url, connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A user without a password is a configuration error, said at once; no
    // credentials at all, refused as such, at connect or at the first lock.
    let user_only =
        EtcdBackend::connect(&url.replacen(&format!(":{}@", adoption::PASSWORD), "@", 1))
            .await
            .expect_err("a user without a password");
    assert_eq!(user_only.kind(), ErrorKind::Configuration, "{user_only}");
    let anonymous = format!(
        "etcd://:{}@127.0.0.1:{}",
        adoption::PASSWORD,
        server.host_port()
    );
    adoption::missing_password_is_refused(&anonymous, connect)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Two members, both closed: the others are tried for the connect time-out (300 ms
/// here), not for the response time-out (5 s by default), and the error says refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_from_every_member_end_the_connect_within_its_time_out() {
    let ports: Vec<String> = (0..2)
        .map(|_| {
            let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            closed.local_addr().expect("address").to_string()
        })
        .collect();
    let started = std::time::Instant::now();
    let err = EtcdBackend::connect(&format!(
        "etcd://{},{}?connect_timeout_ms=300",
        ports[0], ports[1]
    ))
    .await
    .expect_err("nothing listens there");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}: {err}");
}

/// An HTTP server where etcd was expected, with the default time-outs: reported at
/// once as an endpoint that speaks another protocol, on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_protocol_endpoint_is_reported_as_such_at_once() {
    let err = adoption::wrong_protocol_endpoint_is_reported_at_once(|addr| async move {
        EtcdBackend::connect(&format!("etcd://{addr}")).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    println!("{err}");
}

/// Where a connection broke under its first exchange, each endpoint is sent HTTP/2's
/// connection preface, and an answer that is not a SETTINGS frame is another
/// protocol's: an etcd member must answer with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_member_answers_the_protocol_probe_as_http2() {
    use distlock_core::backend::{probe_endpoint, Probe};
    let server = distlock_testservers::ServerHandle::start(&distlock_testservers::Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{}", server.host_port());
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let probe = probe_endpoint(&addr, preface, Duration::from_secs(2)).await;
    let Probe::Answered(answer) = probe else {
        panic!("an etcd member did not answer HTTP/2's preface: {probe:?}");
    };
    assert!(
        answer.len() >= 9 && answer[3] == 4,
        "not a SETTINGS frame: {answer:?}"
    );
}
