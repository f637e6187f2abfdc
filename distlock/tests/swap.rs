//! Swapping backends by configuration: one service function with one `LockOptions`,
//! read from the service's configuration, on every backend's real server.

use std::time::Duration;

use distlock::{Connector, FencingToken, LockClient, LockOptions};
use distlock_testservers::{RedisCluster, RedisMasters, ServerHandle};

/// The service's code, the same on every backend: settles a ledger under its lock,
/// holding it longer than the TTL asked for (renewal must keep it), then takes it
/// again. The fences of both holds, each held until its release.
async fn settle(client: &LockClient, ledger: &str) -> distlock::Result<[FencingToken; 2]> {
    let first = client
        .with_lock(ledger, Duration::from_secs(10), |fence| async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            fence
        })
        .await?;
    let second = client
        .with_lock(
            ledger,
            Duration::from_secs(10),
            |fence| async move { fence },
        )
        .await?;
    assert!(first.held_throughout() && second.held_throughout());
    Ok([first.into_output(), second.into_output()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_service_with_one_set_of_options_runs_on_every_backend() {
    // Fails, never skips, without the backends: `cargo test --workspace` enables them
    // (lockbench depends on them all); alone, run it with `--features
    // redis,redis-cluster,postgres,mysql,etcd,zookeeper,serde`.
    let config = r#"{ "ttl": "1s", "backoff_max": "200ms" }"#;
    let options: LockOptions = serde_json::from_str(config).expect("the service's options");
    let mut urls = vec![("memory", "memory://".to_owned())];
    let mut servers = Vec::new();
    for server in distlock_testservers::ALL {
        let handle = ServerHandle::start(server)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        urls.push((server.backend_name(), handle.url()));
        servers.push(handle);
    }
    let masters = RedisMasters::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    urls.push(("redlock", masters.url()));
    let cluster = RedisCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    urls.push(("redis", cluster.url()));
    assert_eq!(urls.len(), 8, "memory and the seven network backends");
    let connector = Connector::new();
    for (name, url) in &urls {
        let backend = connector
            .connect(url)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(backend.name(), *name);
        let granted = backend.capabilities().fit_ttl(options.ttl()).expect("fits");
        let client = LockClient::with_options(backend, options.clone())
            .unwrap_or_else(|e| panic!("{name}: the same options refused: {e}"));
        // The TTL the backend grants, never shorter than asked, and read back.
        assert_eq!(client.options().ttl(), granted, "{name}");
        assert!(granted >= Duration::from_secs(1), "{name}: {granted:?}");
        let [first, second] = settle(&client, "ledger/42")
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(second > first, "{name}: {second:?} after {first:?}");
        client.flush().await;
    }
    // etcd grants whole seconds of at least 2 s: the one backend whose TTL was fitted.
    let etcd = &urls
        .iter()
        .find(|(name, _)| *name == "etcd")
        .expect("etcd")
        .1;
    let backend = connector.connect(etcd).await.expect("etcd");
    let client = LockClient::with_options(backend, options).expect("etcd");
    assert_eq!(client.options().ttl(), Duration::from_secs(2));
}
