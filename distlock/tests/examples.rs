//! The examples are programs: each runs here against a real server (Redis, or
//! PostgreSQL for the web service), as its header says it runs (`DISTLOCK_URL=...`,
//! `DATABASE_URL=...`), and fails the test if it fails.

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
