//! distlock in an axum service, on real Redis and PostgreSQL servers: the lock layer
//! serialises the requests of one key and hands each its fence, a busy key is answered
//! 423 with `Retry-After`, and a limit shared by two app instances is never exceeded.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::routing::post;
use axum::Router;
use distlock::tower::{Acquire, Held, LimitLayer, LockLayer};
use distlock::{Connector, LockClient, LockOptions};
use distlock_testservers::{Postgres, Redis, ServerHandle};
use tower::ServiceExt;

/// How many handlers run now, and the most that ever ran at once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Gauge {
    async fn hold(&self, pause: Duration) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(pause).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The handler: counts itself in, works a while, and answers with its fence.
async fn settle(State(gauge): State<Arc<Gauge>>, held: Held) -> String {
    gauge.hold(Duration::from_millis(30)).await;
    held.fence().get().to_string()
}

/// One key per account: the path's last segment.
fn account(request: &Request) -> Option<String> {
    request
        .uri()
        .path()
        .rsplit('/')
        .next()
        .map(|id| format!("accounts/{id}"))
}

fn post_to(path: &str) -> Request {
    Request::post(path).body(Body::empty()).expect("request")
}

async fn fence_of(response: axum::response::Response) -> u64 {
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .expect("body");
    String::from_utf8_lossy(&body).parse().expect("a fence")
}

async fn client_on(url: &str) -> LockClient {
    let backend = Connector::new().connect(url).await.expect("connect");
    LockClient::with_options(backend, LockOptions::new(Duration::from_secs(5))).expect("client")
}

/// What the layers must do on one backend.
async fn the_layers_hold_on(url: &str, name: &str) {
    let gauge = Arc::new(Gauge::default());
    let locks = client_on(url).await;
    let app = Router::new()
        .route("/settle/{id}", post(settle))
        .layer(LockLayer::new(
            locks.clone(),
            Acquire::Wait(Duration::from_secs(20)),
            account,
        ))
        .with_state(gauge.clone());

    // Requests for one key run one at a time, each with a fence above the last.
    let requests = (0..8).map(|_| app.clone().oneshot(post_to("/settle/17")));
    let mut fences = Vec::new();
    for response in futures_util::future::join_all(requests).await {
        let response = response.expect("infallible");
        assert_eq!(response.status(), StatusCode::OK, "{name}");
        fences.push(fence_of(response).await);
    }
    assert_eq!(
        gauge.most.load(Ordering::SeqCst),
        1,
        "{name}: two ran at once"
    );
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 8, "{name}: a fence was handed out twice");

    // A key held elsewhere: the trying layer answers 423 at once, with Retry-After.
    let trying = Router::new()
        .route("/settle/{id}", post(settle))
        .layer(LockLayer::new(locks.clone(), Acquire::Try, account))
        .with_state(gauge.clone());
    // Held by another process: a client of its own.
    let elsewhere = client_on(url).await;
    let holder = elsewhere
        .lock("accounts/42", Duration::from_secs(5))
        .await
        .expect("held");
    let busy = trying
        .clone()
        .oneshot(post_to("/settle/42"))
        .await
        .expect("infallible");
    assert_eq!(busy.status(), StatusCode::LOCKED, "{name}");
    let after: u64 = busy.headers()[header::RETRY_AFTER]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=5).contains(&after), "{name}: Retry-After {after}");
    // The waiting layer runs out too: 423, with the holder's remaining time.
    let waiting = Router::new()
        .route("/settle/{id}", post(settle))
        .layer(LockLayer::new(
            locks.clone(),
            Acquire::Wait(Duration::from_millis(300)),
            account,
        ))
        .with_state(gauge.clone());
    let timed_out = waiting
        .oneshot(post_to("/settle/42"))
        .await
        .expect("infallible");
    assert_eq!(timed_out.status(), StatusCode::LOCKED, "{name}");
    assert!(
        timed_out.headers().contains_key(header::RETRY_AFTER),
        "{name}"
    );
    holder.release().await.expect("released");
    let free = trying
        .oneshot(post_to("/settle/42"))
        .await
        .expect("infallible");
    assert_eq!(free.status(), StatusCode::OK, "{name}");

    // Two app instances, each with a client of its own, share a limit of 2.
    let gauge = Arc::new(Gauge::default());
    let instance = |client: LockClient| {
        let permits = client.semaphore("settlements", 2).expect("semaphore");
        Router::new()
            .route("/settle/{id}", post(settle))
            .layer(LimitLayer::new(
                permits,
                Acquire::Wait(Duration::from_secs(30)),
            ))
            .with_state(gauge.clone())
    };
    let apps = [
        instance(client_on(url).await),
        instance(client_on(url).await),
    ];
    let requests = (0..12).map(|n| {
        apps[n % 2]
            .clone()
            .oneshot(post_to(&format!("/settle/{n}")))
    });
    for response in futures_util::future::join_all(requests).await {
        assert_eq!(
            response.expect("infallible").status(),
            StatusCode::OK,
            "{name}"
        );
    }
    let most = gauge.most.load(Ordering::SeqCst);
    assert!(
        most <= 2,
        "{name}: {most} requests ran at once under a limit of 2"
    );
    assert_eq!(
        most, 2,
        "{name}: the limit was never reached, so it proved nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layers_serialise_fence_and_limit_on_redis_and_postgres() {
    let redis = ServerHandle::start(&Redis)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let postgres = ServerHandle::start(&Postgres)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    the_layers_hold_on(&redis.url(), "redis").await;
    the_layers_hold_on(&postgres.url(), "postgres").await;
}

/// An error as axum answers it: the status every service answers it with, and
/// `Retry-After` where the client knew it.
#[tokio::test]
async fn an_error_is_a_response() {
    use axum::response::IntoResponse;
    use distlock::{Error, ErrorKind};

    for (kind, status) in [
        (ErrorKind::Timeout, StatusCode::LOCKED),
        (ErrorKind::Busy, StatusCode::LOCKED),
        (ErrorKind::LockLost, StatusCode::CONFLICT),
        (ErrorKind::StaleFence, StatusCode::CONFLICT),
        (ErrorKind::CircuitOpen, StatusCode::SERVICE_UNAVAILABLE),
        (ErrorKind::Unavailable, StatusCode::SERVICE_UNAVAILABLE),
        (ErrorKind::Configuration, StatusCode::INTERNAL_SERVER_ERROR),
    ] {
        let response = Error::new(kind, "a message naming keys/secret").into_response();
        assert_eq!(response.status(), status, "{kind:?}");
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .expect("body");
        assert!(
            !String::from_utf8_lossy(&body).contains("secret"),
            "{kind:?}"
        );
    }
    let response = Error::new(ErrorKind::Timeout, "held")
        .with_retry_after(Duration::from_millis(1200))
        .into_response();
    assert_eq!(response.headers()[header::RETRY_AFTER], "2");
}

/// In process: a lock lost while the handler runs drops the handler and answers 409;
/// a request the layer makes no key of runs without a lock; a backend that is down is
/// answered 503; a route no layer wraps rejects the `Held` extractor with 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_cuts_the_request_short_and_unkeyed_requests_pass() {
    use distlock::backend::OperatorBackend as _;
    use distlock::{LockKey, MemoryBackend};

    let memory = Arc::new(MemoryBackend::new());
    let locks = LockClient::with_options(memory.clone(), LockOptions::new(Duration::from_secs(1)))
        .expect("client");
    let finished = Arc::new(AtomicUsize::new(0));
    let slow = {
        let finished = finished.clone();
        move |_held: Held| async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            finished.fetch_add(1, Ordering::SeqCst);
            "done"
        }
    };
    let app = Router::new()
        .route("/slow/{id}", post(slow))
        .route("/free", post(|| async { "free" }))
        .layer(LockLayer::new(locks, Acquire::Try, |request: &Request| {
            request
                .uri()
                .path()
                .strip_prefix("/slow/")
                .map(|id| format!("slow/{id}"))
        }));
    let cut = tokio::spawn(app.clone().oneshot(post_to("/slow/1")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        memory
            .force_release(&LockKey::new("slow/1").expect("key"))
            .await
            .expect("force"),
        "the request did not hold its key"
    );
    let response = cut.await.expect("join").expect("infallible");
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the handler ran on");

    let free = app
        .clone()
        .oneshot(post_to("/free"))
        .await
        .expect("infallible");
    assert_eq!(free.status(), StatusCode::OK);

    // A backend that is down: 503.
    memory.stop();
    let down = app
        .clone()
        .oneshot(post_to("/slow/2"))
        .await
        .expect("infallible");
    assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    memory.start();

    let bare = Router::new().route("/", post(|_held: Held| async { "held" }));
    let rejected = bare.oneshot(post_to("/")).await.expect("infallible");
    assert_eq!(rejected.status(), StatusCode::INTERNAL_SERVER_ERROR);
}
