//! A backend that goes down under a client with a circuit breaker, on a real Redis:
//! once the breaker opens, acquisitions fail at once instead of each waiting out its
//! time-outs; the client recovers on its own when the server returns; a lease held
//! through the outage is lost only when its validity runs out, never by the breaker;
//! and the health check answers while the server is up and fails within the
//! backend's time-outs while it is down.

use std::sync::Arc;
use std::time::Duration;

use distlock::redis::RedisBackend;
use distlock::{BreakerOptions, BreakerState, ErrorKind, LockClient, LockOptions, LossReason};
use distlock_conformance::ServerControl;
use distlock_testservers::{Redis, ServerHandle};
use tokio::time::{timeout, Instant};

const FAILURES: u32 = 3;
const OPEN_FOR: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(3);

#[tokio::test]
async fn the_breaker_fails_fast_while_the_server_is_down_and_recovers_when_it_returns() {
    let server = ServerHandle::start(&Redis).await.expect("redis started");
    // Short time-outs, so that an unreachable server is found out quickly.
    let url = format!(
        "{}?response_timeout_ms=300&connect_timeout_ms=300",
        server.url()
    );
    let backend = RedisBackend::connect(&url).await.expect("connected");
    let options =
        LockOptions::new(TTL).with_circuit_breaker(BreakerOptions::new(FAILURES, OPEN_FOR));
    let client = LockClient::with_options(Arc::new(backend), options).expect("client");

    let health = client.health().await.expect("healthy");
    assert_eq!(health.backend(), "redis");
    assert_eq!(health.breaker(), Some(BreakerState::Closed));
    assert!(health.latency() < Duration::from_secs(1), "{health:?}");

    let held = client
        .lock("held", Duration::from_secs(1))
        .await
        .expect("held");
    let lost = held.lost();
    server.kill().await.expect("server killed");
    // No renewal gets through from here on: the validity it has is what it keeps.
    let valid_until = held.valid_until();
    let loss_margin = client.options().loss_margin();

    // While it is down, the health check fails within the time-outs, typed.
    let down = timeout(Duration::from_secs(5), client.health())
        .await
        .expect("the health check answers within the backend's time-outs")
        .expect_err("the server is down");
    assert_eq!(down.kind(), ErrorKind::Unavailable, "{down}");

    // Acquisitions find the server away until the breaker opens.
    let mut calls = 0;
    let opened = loop {
        calls += 1;
        assert!(calls <= FAILURES + 2, "the breaker never opened");
        match client.try_lock("other").await {
            Err(e) if e.kind() == ErrorKind::CircuitOpen => break e,
            Err(e) => assert!(e.is_retryable(), "{e}"),
            Ok(got) => panic!("the server is down, yet {got:?}"),
        }
    };
    assert!(opened.is_retryable());
    assert!(opened.to_string().contains("open for"), "{opened}");

    // Open: each call fails at once, even one willing to wait 10 s.
    let mut took = Vec::new();
    while took.len() < 20 {
        let started = Instant::now();
        let error = client
            .lock("other", Duration::from_secs(10))
            .await
            .expect_err("open");
        took.push(started.elapsed());
        if error.kind() != ErrorKind::CircuitOpen {
            // The open time ran out under a slow machine: a probe went through.
            assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
            break;
        }
    }
    took.sort();
    let median = took[took.len() / 2];
    println!(
        "calls failing on the open breaker: median {median:?}, longest {:?}",
        took.last()
    );
    assert!(median < Duration::from_millis(10), "{took:?}");
    // The health check still reaches for the server, whatever the breaker says.
    assert!(
        matches!(client.health().await, Err(e) if e.kind() == ErrorKind::Unavailable),
        "the health check reached a server that is down"
    );

    // The held lease is lost by its validity alone, however the breaker stands.
    let reason = timeout(TTL * 2, lost).await.expect("loss signalled");
    let told_at = Instant::now();
    assert_eq!(reason, Some(LossReason::RenewalFailed));
    assert!(
        told_at + Duration::from_millis(1) >= valid_until - loss_margin,
        "told {:?} before its validity less the margin",
        (valid_until - loss_margin) - told_at
    );

    // The server returns: the client finds it again on its own (a probe call closes
    // the breaker), with no new client or connection made by hand.
    server.start().await.expect("server started again");
    let give_up = Instant::now() + Duration::from_secs(30);
    let guard = loop {
        match client.lock("other", Duration::from_secs(1)).await {
            Ok(guard) => break guard,
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                assert!(Instant::now() < give_up, "never recovered: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    guard.release().await.expect("released");
    let health = client.health().await.expect("healthy again");
    assert_eq!(health.breaker(), Some(BreakerState::Closed));
}

#[tokio::test]
async fn without_a_breaker_a_wait_goes_on_until_its_deadline() {
    let server = ServerHandle::start(&Redis).await.expect("redis started");
    let url = format!(
        "{}?response_timeout_ms=200&connect_timeout_ms=200",
        server.url()
    );
    let backend = RedisBackend::connect(&url).await.expect("connected");
    let client = LockClient::new(Arc::new(backend));
    server.kill().await.expect("server killed");
    let wait = Duration::from_millis(1500);
    let started = Instant::now();
    let error = client.lock("k", wait).await.expect_err("down");
    assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    assert!(started.elapsed() >= wait, "retried until the deadline");
}
