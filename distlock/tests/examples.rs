//! The examples are programs: each runs here against a real server (Redis, or
//! PostgreSQL for the web service), as its header says it runs (`DISTLOCK_URL=...`,
//! `DATABASE_URL=...`), and fails the test if it fails.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use distlock::tower::Held;

#[path = "../examples/job_runner.rs"]
mod job_runner;
#[path = "../examples/leader_worker.rs"]
mod leader_worker;
#[path = "../examples/service.rs"]
mod service;
#[path = "../examples/web_service.rs"]
mod web_service;

/// One test for all, run one after another: each reads its server's URL from the
/// environment, which is set here once for each.
#[test]
fn the_examples_run_against_real_servers() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let start = |server: &'static dyn distlock_testservers::Server| {
        runtime
            .block_on(distlock_testservers::ServerHandle::start(server))
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (redis, postgres) = (
        start(&distlock_testservers::Redis),
        start(&distlock_testservers::Postgres),
    );
    // As the headers run them: the servers' URLs in DISTLOCK_URL and DATABASE_URL.
    std::env::set_var("DISTLOCK_URL", redis.url());
    std::env::set_var("DATABASE_URL", postgres.url());
    let ran = [
        ("job_runner", job_runner::main().map_err(|e| e.to_string())),
        (
            "leader_worker",
            leader_worker::main().map_err(|e| e.to_string()),
        ),
        ("service", service::main().map_err(|e| e.to_string())),
        (
            "web_service",
            web_service::main().map_err(|e| e.to_string()),
        ),
    ];
    // The containers are removed from within the runtime that started them.
    runtime.block_on(async move { drop((redis, postgres)) });
    for (example, result) in ran {
        result.unwrap_or_else(|e| panic!("{example}: {e}"));
    }
}

/// The web service with the fault its deposits are built for: every deposit's lease is
/// deleted behind it (an operator's forced release) after the deposit committed and
/// before the layer releases it. Each deposit is still answered 200 at once, so no
/// client sends it again, and the balance counts each exactly once.
#[tokio::test]
async fn a_committed_deposit_whose_lease_is_gone_is_answered_once() {
    let postgres = distlock_testservers::ServerHandle::start(&distlock_testservers::Postgres)
        .await
        .expect("a PostgreSQL server");
    let (pool, app, locks) = web_service::open(&postgres.url())
        .await
        .expect("the service's tables");
    let backend = locks.backend().clone();
    let forced = Arc::new(AtomicUsize::new(0));
    let counted = forced.clone();
    // Inside the lock layer: runs after the handler committed, before the release.
    let fault = axum::middleware::from_fn(move |request: Request, next: Next| {
        let (backend, forced) = (backend.clone(), forced.clone());
        async move {
            let held = request.extensions().get::<Held>().cloned();
            let response = next.run(request).await;
            if let Some(held) = held {
                let operator = backend.operator().expect("PostgreSQL lists and forces");
                if operator.force_release(held.key()).await.expect("forced") {
                    forced.fetch_add(1, Ordering::SeqCst);
                }
            }
            response
        }
    });
    let router = web_service::routes(app)
        .layer(fault)
        .layer(web_service::lock_layer(locks));
    let address = web_service::serve(router).await.expect("serving");
    let sent = web_service::deposit_all(address, 20)
        .await
        .expect("every deposit answered 200");
    let balance = web_service::balance(&pool).await.expect("the balance");
    assert_eq!(
        counted.load(Ordering::SeqCst),
        20,
        "every deposit's lease was deleted after its commit"
    );
    assert_eq!(sent, 20, "a committed deposit was answered as a failure");
    assert_eq!(balance, 20, "deposits were lost or counted twice");
}
