//! distlock in an axum service, on real Redis and PostgreSQL servers: the lock layer
//! serialises the requests of one key and hands each its fence, a busy key is answered
//! 423 with a bounded `Retry-After` and the kind as its body, a key the request makes
//! invalid 400, and a limit shared by two app instances is never exceeded; and a key
//! made of the matched route's path parameter; and the check layer, which admits a
//! request only while the sequencer it carries is the live holder's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::routing::post;
use axum::Router;
use distlock::tower::{Acquire, Held, LimitLayer, LockLayer, Refusal};
use distlock::{Connector, ErrorKind, LockClient, LockOptions};
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
    // Retry-After is the layer's bound (a second), not the holder's 5 s lease.
    assert_eq!(
        refusal_of(busy).await,
        (
            StatusCode::LOCKED,
            Some(1),
            ErrorKind::Busy,
            "busy".to_owned()
        ),
        "{name}"
    );
    // With a bound above the lease: the holder's remaining time.
    let told = Router::new()
        .route("/settle/{id}", post(settle))
        .layer(
            LockLayer::new(locks.clone(), Acquire::Try, account)
                .with_retry_after(Duration::from_secs(60)),
        )
        .with_state(gauge.clone());
    let busy = told
        .oneshot(post_to("/settle/42"))
        .await
        .expect("infallible");
    let (status, after, ..) = refusal_of(busy).await;
    assert_eq!(status, StatusCode::LOCKED, "{name}");
    let after = after.expect("a Retry-After");
    assert!((1..=5).contains(&after), "{name}: Retry-After {after}");
    // The waiting layer runs out too: 423, within the bound; and none when told so.
    let waiting = |layer: LockLayer<_>| {
        Router::new()
            .route("/settle/{id}", post(settle))
            .layer(layer)
            .with_state(gauge.clone())
    };
    let wait = Acquire::Wait(Duration::from_millis(300));
    let timed_out = waiting(LockLayer::new(locks.clone(), wait, account))
        .oneshot(post_to("/settle/42"))
        .await
        .expect("infallible");
    assert_eq!(
        refusal_of(timed_out).await,
        (
            StatusCode::LOCKED,
            Some(1),
            ErrorKind::Timeout,
            "timed out".to_owned()
        ),
        "{name}"
    );
    let silent = waiting(LockLayer::new(locks.clone(), wait, account).without_retry_after())
        .oneshot(post_to("/settle/42"))
        .await
        .expect("infallible");
    assert_eq!(
        refusal_of(silent).await,
        (
            StatusCode::LOCKED,
            None,
            ErrorKind::Timeout,
            "timed out".to_owned()
        ),
        "{name}"
    );
    holder.release().await.expect("released");

    // A key the request's input makes invalid (over 256 bytes): 400, not 500.
    let long = "9".repeat(300);
    let invalid = trying
        .clone()
        .oneshot(post_to(&format!("/settle/{long}")))
        .await
        .expect("infallible");
    assert_eq!(
        refusal_of(invalid).await,
        (
            StatusCode::BAD_REQUEST,
            None,
            ErrorKind::InvalidKey,
            "invalid key".to_owned()
        ),
        "{name}"
    );

    // Contention inside this process (another request of this client holds the key):
    // 423 with the layer's Retry-After too.
    let slow = Router::new()
        .route(
            "/settle/{id}",
            post(|_held: Held| async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                "done"
            }),
        )
        .layer(LockLayer::new(locks.clone(), Acquire::Try, account));
    let first = tokio::spawn(slow.clone().oneshot(post_to("/settle/43")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = slow
        .oneshot(post_to("/settle/43"))
        .await
        .expect("infallible");
    assert_eq!(
        refusal_of(second).await,
        (
            StatusCode::LOCKED,
            Some(1),
            ErrorKind::Busy,
            "busy".to_owned()
        ),
        "{name}"
    );
    let first = first.await.expect("join").expect("infallible");
    assert_eq!(first.status(), StatusCode::OK, "{name}");
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

    // Every permit taken: a trying limit answers 423, with the layer's Retry-After.
    let permits = locks.semaphore("settlements", 2).expect("semaphore");
    let _taken = [
        permits.acquire(Duration::from_secs(5)).await.expect("one"),
        permits.acquire(Duration::from_secs(5)).await.expect("two"),
    ];
    let full = Router::new()
        .route("/settle/{id}", post(settle))
        .layer(LimitLayer::new(permits, Acquire::Try).with_retry_after(Duration::from_secs(3)))
        .with_state(gauge.clone())
        .oneshot(post_to("/settle/1"))
        .await
        .expect("infallible");
    let (status, after, kind, body) = refusal_of(full).await;
    assert_eq!(
        (status, kind, body.as_str()),
        (StatusCode::LOCKED, ErrorKind::Busy, "busy"),
        "{name}"
    );
    let after = after.expect("a Retry-After");
    assert!((1..=3).contains(&after), "{name}: Retry-After {after}");
}

/// A refusal as a caller sees it: the status, `Retry-After` in seconds, the kind in
/// its extensions, and its plain-text body.
async fn refusal_of(
    response: axum::response::Response,
) -> (StatusCode, Option<u64>, ErrorKind, String) {
    let status = response.status();
    let after = response.headers().get(header::RETRY_AFTER).map(|value| {
        value
            .to_str()
            .expect("ascii")
            .parse()
            .expect("whole seconds")
    });
    let kind = response
        .extensions()
        .get::<Refusal>()
        .expect("a refusal names its kind")
        .kind();
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/plain; charset=utf-8"
    );
    let body = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .expect("body");
    (
        status,
        after,
        kind,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// A request to a resource carrying `key` and `fence` as its sequencer headers.
fn carrying(key: &str, fence: Option<u64>) -> Request {
    let request = Request::post("/journal").header(distlock::tower::KEY_HEADER, key);
    let request = match fence {
        Some(fence) => request.header(distlock::tower::FENCE_HEADER, fence.to_string()),
        None => request,
    };
    request.body(Body::empty()).expect("request")
}

/// What the check layer must do on one backend: admit the live holder's sequencer
/// only, with it as the request's `Held`; answer a stale one 409 (the key held by a
/// later lease, or free), and a missing or invalid one 400.
async fn the_check_layer_holds_on(url: &str, name: &str) {
    use distlock::tower::{sequencer_headers, CheckLayer};

    let locks = client_on(url).await;
    let journal = Router::new()
        .route(
            "/journal",
            post(|held: Held| async move { held.fence().get().to_string() }),
        )
        .layer(CheckLayer::new(locks.clone(), sequencer_headers));
    let ask = |request: Request| journal.clone().oneshot(request);
    let key = format!("journal-{name}");
    let first = locks
        .lock(&key, Duration::from_secs(5))
        .await
        .expect("lock");
    let f1 = first.fence().get();

    let admitted = ask(carrying(&key, Some(f1))).await.expect("infallible");
    assert_eq!(admitted.status(), StatusCode::OK, "{name}: the live holder");
    assert_eq!(fence_of(admitted).await, f1, "{name}: the Held it ran with");
    let stale = |fence, status, kind: ErrorKind| {
        let key = key.clone();
        async move {
            let (got, _, got_kind, body) =
                refusal_of(ask(carrying(&key, fence)).await.expect("infallible")).await;
            assert_eq!((got, got_kind), (status, kind), "{name}: fence {fence:?}");
            assert_eq!(body, kind.as_str());
        }
    };
    stale(Some(f1 + 1), StatusCode::CONFLICT, ErrorKind::StaleFence).await;
    stale(None, StatusCode::BAD_REQUEST, ErrorKind::InvalidInput).await;
    stale(Some(0), StatusCode::BAD_REQUEST, ErrorKind::InvalidInput).await;
    first.release().await.expect("release");
    // Free: the released holder's sequencer is stale.
    stale(Some(f1), StatusCode::CONFLICT, ErrorKind::StaleFence).await;
    let second = locks
        .lock(&key, Duration::from_secs(5))
        .await
        .expect("lock");
    let f2 = second.fence().get();
    assert!(f2 > f1, "{name}: fences {f1} then {f2}");
    stale(Some(f1), StatusCode::CONFLICT, ErrorKind::StaleFence).await;
    let admitted = ask(carrying(&key, Some(f2))).await.expect("infallible");
    assert_eq!(fence_of(admitted).await, f2, "{name}: the next holder");
    second.release().await.expect("release");
    let invalid = ask(carrying(&"k".repeat(300), Some(f2)))
        .await
        .expect("infallible");
    assert_eq!(
        invalid.status(),
        StatusCode::BAD_REQUEST,
        "{name}: a key too long"
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
    the_check_layer_holds_on(&redis.url(), "redis").await;
    the_check_layer_holds_on(&postgres.url(), "postgres").await;
}

/// An error as axum answers it: the status every service answers it with, and
/// `Retry-After` where the client knew it.
#[tokio::test]
async fn an_error_is_a_response() {
    use axum::response::IntoResponse;
    use distlock::Error;

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
    assert_eq!(
        refusal_of(response).await,
        (
            StatusCode::CONFLICT,
            None,
            ErrorKind::LockLost,
            "lock lost".to_owned()
        )
    );
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
    assert_eq!(
        refusal_of(down).await,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            ErrorKind::Unavailable,
            "backend unavailable".to_owned()
        )
    );
    memory.start();

    let bare = Router::new().route("/", post(|_held: Held| async { "held" }));
    let rejected = bare.oneshot(post_to("/")).await.expect("infallible");
    assert_eq!(rejected.status(), StatusCode::INTERNAL_SERVER_ERROR);
}

/// The key function reads the matched route's path parameter (`path_param`), decoded,
/// where the layer wraps the route; two requests for one account meet on its key,
/// another account's runs beside them. A layer on the whole router sees no parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_from_the_routes_path_parameter() {
    use distlock::tower::path_param;
    let client = LockClient::new(Arc::new(distlock::MemoryBackend::new()));
    let by_id = |request: &Request| path_param(request, "id").map(|id| format!("accounts/{id}"));
    async fn slow(held: Held) -> String {
        tokio::time::sleep(Duration::from_millis(600)).await;
        held.key().as_str().to_owned()
    }
    let routed = Router::new()
        .route("/accounts/{id}/settle", post(slow))
        .route_layer(LockLayer::new(client.clone(), Acquire::Try, by_id));
    let first = tokio::spawn(routed.clone().oneshot(post_to("/accounts/a%2Fb/settle")));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let same = routed
        .clone()
        .oneshot(post_to("/accounts/a%2Fb/settle"))
        .await;
    let other = routed.clone().oneshot(post_to("/accounts/c/settle")).await;
    let first = first.await.expect("joined").expect("answered");
    assert_eq!(first.status(), StatusCode::OK);
    let body = axum::body::to_bytes(first.into_body(), 1024)
        .await
        .expect("body");
    assert_eq!(body, "accounts/a/b", "the parameter, percent-decoded");
    assert_eq!(same.expect("answered").status(), StatusCode::LOCKED);
    assert_eq!(other.expect("answered").status(), StatusCode::OK);

    // `Router::layer` wraps each route too: the parameter is there.
    let layered = Router::new()
        .route("/accounts/{id}/settle", post(slow))
        .layer(LockLayer::new(client.clone(), Acquire::Try, by_id));
    let answer = layered
        .oneshot(post_to("/accounts/d/settle"))
        .await
        .expect("answered");
    let body = axum::body::to_bytes(answer.into_body(), 1024)
        .await
        .expect("body");
    assert_eq!(body, "accounts/d");

    // A layer around the router as a whole runs before the match: no parameter, so no
    // key and no lock, and the handler's `Held` is refused as a server error.
    use tower::Layer as _;
    let router = Router::new().route("/accounts/{id}/settle", post(slow));
    let outside = LockLayer::new(client, Acquire::Try, by_id).layer(router);
    let answer = outside
        .oneshot(post_to("/accounts/a/settle"))
        .await
        .expect("answered");
    assert_eq!(answer.status(), StatusCode::INTERNAL_SERVER_ERROR);
}
