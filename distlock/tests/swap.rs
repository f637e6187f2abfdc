//! Swapping backends by configuration: one service function with one `LockOptions`,
//! read from the service's configuration, on every backend's real server.

use std::time::{Duration, Instant};

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

/// A job's slot under the options file `{ "ttl": "1s", "hold_at_least": "10m",
/// "hold_at_most": "20m" }`, the same on every backend: the job runs through several
/// renewals of its 1 s lease and ends early; another host then finds the slot taken,
/// by the server's own count, for what is left of the ten minutes and no longer.
async fn keep_the_slot(name: &str, host: &LockClient, other: &LockClient) {
    let slot = "jobs/nightly";
    // The least hold as fitted (the backend's clock drift allowance included).
    let least = host.options().hold_at_least().expect("the least hold");
    assert!(least >= Duration::from_secs(600), "{name}: {least:?}");
    let sent = Instant::now();
    let guard = host
        .try_lock(slot)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .unwrap_or_else(|busy| panic!("{name}: {busy}"));
    // The least hold is counted from the grant's reply: the server keeps the slot from
    // no later than then until no earlier than `sent + least`.
    let granted = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{name}: the early release: {e}"));
    let busy = other
        .try_lock(slot)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .expect_err("the slot is kept for the least hold");
    assert_eq!(busy.key().as_str(), slot, "{name}");
    let asked = Instant::now();
    let info = other
        .inspect(slot)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .unwrap_or_else(|| panic!("{name}: the slot was freed within its least hold"));
    let answered = Instant::now();
    // The slot's end on the server, as this host's clock places it: after `asked +
    // remaining`, before `answered + remaining`. No later than the least hold allows
    // (give or take the backend's TTL granularity and 0.5 s), and no sooner.
    let grain = host.backend().capabilities().ttl_granularity;
    let slack = Duration::from_millis(500);
    let (ends_after, ends_before) = (asked + info.remaining, answered + info.remaining);
    assert!(
        ends_after <= granted + least + grain + slack,
        "{name}: the slot is kept {:?} more, {:?} after the grant, beyond the least hold of {least:?}",
        info.remaining,
        asked - granted
    );
    assert!(
        ends_before + grain + slack >= sent + least,
        "{name}: the slot is kept only {:?} more, {:?} after the grant, short of the least hold of {least:?}",
        info.remaining,
        asked - granted
    );
    // A job run once per slot under the same options, by each host in turn.
    let ran = host
        .run_once("jobs/hourly", Duration::from_secs(60), |_| async { "ran" })
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(ran.is_ok(), "{name}: the first host's run was skipped");
    let skipped = other
        .run_once("jobs/hourly", Duration::from_secs(60), |_| async { "ran" })
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(skipped.is_err(), "{name}: the slot ran twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_service_with_one_set_of_options_runs_on_every_backend() {
    // Fails, never skips, without the backends: `cargo test --workspace` enables them
    // (lockbench depends on them all); alone, run it with `--features
    // redis,redis-cluster,postgres,mysql,etcd,zookeeper,serde`.
    let config = r#"{ "ttl": "1s", "backoff_max": "200ms" }"#;
    let options: LockOptions = serde_json::from_str(config).expect("the service's options");
    let jobs = r#"{ "ttl": "1s", "hold_at_least": "10m", "hold_at_most": "20m" }"#;
    let jobs: LockOptions = serde_json::from_str(jobs).expect("the jobs' options");
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
        let client = LockClient::with_options(backend.clone(), options.clone())
            .unwrap_or_else(|e| panic!("{name}: the same options refused: {e}"));
        // The TTL the backend grants, never shorter than asked, and read back.
        assert_eq!(client.options().ttl(), granted, "{name}");
        assert!(granted >= Duration::from_secs(1), "{name}: {granted:?}");
        let [first, second] = settle(&client, "ledger/42")
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(second > first, "{name}: {second:?} after {first:?}");
        client.flush().await;
        // The same options file with a least hold far beyond the TTL, on two hosts
        // (one process's memory backend stands for both of its hosts).
        let other = match *name {
            "memory" => backend.clone(),
            _ => connector
                .connect(url)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}")),
        };
        let (host, other) = (
            LockClient::with_options(backend, jobs.clone()),
            LockClient::with_options(other, jobs.clone()),
        );
        let refused = |e: distlock::Error| panic!("{name}: the jobs' options refused: {e}");
        let (host, other) = (host.unwrap_or_else(refused), other.unwrap_or_else(refused));
        keep_the_slot(name, &host, &other).await;
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
