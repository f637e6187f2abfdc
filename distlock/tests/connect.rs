//! Swapping backends by URL: the same code on each real server, chosen by one string.

use distlock::{connect, BackendConfig, Connector, ErrorKind};

#[tokio::test]
async fn unknown_schemes_and_bad_urls_are_configuration_errors() {
    for (url, names) in [
        ("mongodb://u:s3cret@h/db", "\"mongodb\""),
        ("no scheme s3cret", "not a backend URL"),
        ("redis://:s3cret@h?wait_replicas=x", "wait_replicas"),
        ("redlock://:s3cret@h1,h2", "three or more"),
    ] {
        let err = connect(url).await.expect_err(url);
        assert_eq!(err.kind(), ErrorKind::Configuration, "{url}: {err}");
        let shown = format!("{err} {err:?}");
        assert!(shown.contains(names), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
    let config = BackendConfig::from_url("postgres://app:s3cret@db/app");
    assert!(!format!("{config:?}").contains("s3cret"));
    // A scheme of distlock's own backends reaches that backend's URL reader (or, in
    // a build without its feature, names the feature); a third party's joins through
    // a connector, and its own errors keep the password out.
    let url = "zookeeper://app:s3cret@127.0.0.1:1/locks?timeout_ms=oops";
    let err = connect(url).await.expect_err("bad parameter");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(
        shown.contains("timeout_ms") && !shown.contains("s3cret"),
        "{shown}"
    );
    let connector = Connector::new().with_backend(&["mine"], |url| async move {
        distlock_zookeeper::ZooKeeperBackend::connect(&url.replacen("mine", "zk", 1)).await
    });
    assert!(connector.schemes().contains(&"mine".to_owned()));
    let err = connector
        .connect("mine://app:s3cret@127.0.0.1:1/locks?timeout_ms=oops")
        .await
        .expect_err("bad parameter");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(!format!("{err} {err:?}").contains("s3cret"));
    // A third party's crate that declares a descriptor joins by it, under the
    // schemes its build serves.
    const THEIRS: distlock::backend::Descriptor = distlock::backend::Descriptor::new(
        "memory",
        &[
            distlock::backend::Scheme::new("theirs"),
            distlock::backend::Scheme::with_feature("theirs-tls", "tls", false),
        ],
        0,
        |_url| Box::pin(async { Ok(std::sync::Arc::new(distlock::MemoryBackend::new()) as _) }),
    );
    let connector = Connector::new().with_descriptor(&THEIRS);
    let backend = connector.connect("theirs://").await.expect("connected");
    assert_eq!(backend.name(), "memory");
    assert!(!connector.schemes().contains(&"theirs-tls".to_owned()));
    // A scheme added again connects to the later backend.
    let replaced = Connector::new().with_backend(&["memory"], |_| async {
        Err::<distlock::MemoryBackend, _>(distlock::Error::new(ErrorKind::Unsupported, "replaced"))
    });
    let err = replaced.connect("memory://").await.expect_err("replaced");
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert_eq!(
        replaced.schemes().iter().filter(|s| *s == "memory").count(),
        1
    );
}

/// The one table of distlock's backends is each crate's own descriptor: the facade's
/// list names the same schemes in the same order, each descriptor's schemes are its
/// crate's `SCHEMES`, and a build with every feature has them all.
#[test]
fn the_backend_table_is_each_crates_own() {
    let own: [&[&str]; 5] = [
        distlock_redis::SCHEMES,
        distlock_postgres::SCHEMES,
        distlock_mysql::SCHEMES,
        distlock_etcd::SCHEMES,
        distlock_zookeeper::SCHEMES,
    ];
    let descriptors = distlock::descriptors();
    assert_eq!(descriptors.len(), own.len());
    for ((known, schemes), descriptor) in distlock::BACKENDS.iter().zip(own).zip(&descriptors) {
        assert_eq!(known.name, descriptor.name());
        let named: Vec<&str> = descriptor.schemes().iter().map(|s| s.name()).collect();
        assert_eq!(known.schemes, schemes, "{}", known.name);
        assert_eq!(named, schemes, "{}", known.name);
        assert!(known.built, "{} is not in this build", known.name);
        assert!(descriptor.schemes().iter().all(|s| s.is_built()));
    }
    let all = distlock::schemes();
    assert_eq!(all.len(), 1 + own.iter().map(|s| s.len()).sum::<usize>());
    assert_eq!(Connector::new().schemes(), all);
    // The tables: the SQL backends keep them, and say which statements make them.
    let migrating: Vec<&str> = descriptors
        .iter()
        .filter(|d| d.migration().is_some())
        .map(|d| d.name())
        .collect();
    assert_eq!(migrating, ["postgres", "mysql"]);
    let statements = descriptors[1]
        .migration()
        .map(|m| m.statements("postgres://app@db/app?table=jobs_locks"));
    let statements = statements
        .expect("postgres keeps tables")
        .expect("statements");
    assert!(
        statements.iter().any(|s| s.contains("jobs_locks")),
        "{statements:?}"
    );
}
