//! The README's Redis quick start (the repository's and the facade's crates.io page) is
//! `tests/readme/redis.rs`, and the fencing guide's
//! is `tests/readme/quick_start.rs`, each word for word, and each runs (the first
//! against a real Redis).

#[cfg(feature = "redis")]
mod redis_quick_start {
    include!("readme/redis.rs");

    #[test]
    fn the_readme_redis_quick_start_runs_on_a_real_redis() {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let server = runtime
            .block_on(distlock_testservers::ServerHandle::start(
                &distlock_testservers::Redis,
            ))
            .unwrap_or_else(|e| panic!("{e}"));
        // The quick start reads its server's URL as a service would, from REDIS_URL.
        std::env::set_var("REDIS_URL", server.url());
        let ran = main();
        // The container is removed from within the runtime that started it.
        runtime.block_on(async move { drop(server) });
        ran.expect("the quick start runs");
    }
}

/// `file`'s text from its second line on (the first says where it is shown).
fn body(file: &str) -> &str {
    file.split_once('\n').map(|(_, rest)| rest).unwrap_or(file)
}

#[test]
fn the_readme_shows_the_redis_quick_start() {
    assert!(
        include_str!("../../README.md").contains(body(include_str!("readme/redis.rs"))),
        "README.md's quick start differs from tests/readme/redis.rs"
    );
    // The facade's own README, its crates.io page, shows the same.
    assert!(
        include_str!("../README.md").contains(body(include_str!("readme/redis.rs"))),
        "distlock/README.md's quick start differs from tests/readme/redis.rs"
    );
}

mod quick_start {
    include!("readme/quick_start.rs");

    #[test]
    fn the_readme_quick_start_runs() {
        main().expect("the quick start runs");
    }
}

#[test]
fn the_fencing_guide_shows_its_quick_start() {
    assert!(
        include_str!("../../docs/fencing.md").contains(body(include_str!("readme/quick_start.rs"))),
        "docs/fencing.md's quick start differs from tests/readme/quick_start.rs"
    );
}
