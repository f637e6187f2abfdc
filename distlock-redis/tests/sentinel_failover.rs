//! Redis behind Sentinel, its master killed with a grant its replicas never saw: a
//! replica is promoted, the backend follows it, the lost grant is granted again with a
//! greater fence, and the old holder's fenced write is refused. And a master cut off
//! from its replicas, which refuses grants once their acknowledgements are too old.

mod support;

use std::time::Duration;

use distlock_conformance::ServerControl as _;
use distlock_core::backend::{AcquireOutcome, ExtendOutcome, LockBackendExt};
use distlock_core::{ErrorKind, FencedStoreExt, LockKey, MemoryStore};
use distlock_redis::redis::sentinel::{
    SentinelClient, SentinelNodeConnectionInfo, SentinelServerType,
};
use distlock_redis::{RedisBackend, RedisConfig};
use distlock_testservers::{RedisSentinel, Roles as _};
use support::until_served;
use tokio::time::Instant;

/// A name the Sentinels do not monitor is a configuration error that names it; a
/// service's own Sentinel client finds the master as a URL does.
async fn the_master_is_found_by_name_and_through_the_service_s_own_client(set: &RedisSentinel) {
    let wrong = set.url().replace(
        &format!("master={}", distlock_testservers::sentinel::MASTER_NAME),
        "master=orders",
    );
    let err = RedisBackend::connect(&wrong)
        .await
        .expect_err("an unknown master");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(err.to_string().contains("\"orders\""), "{err}");
    let config = RedisConfig::from_url(&set.url()).expect("config");
    let sentinels: Vec<String> = set
        .sentinels()
        .iter()
        .filter_map(|s| s.direct_address())
        .map(|a| format!("redis://{a}"))
        .collect();
    let password = set.servers()[0].password();
    let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(
        redis::Client::open(format!("redis://:{password}@unused/0"))
            .expect("url")
            .get_connection_info()
            .redis_settings()
            .clone(),
    );
    // A `String` (the driver takes one without its TLS feature, and any `AsRef<str>`
    // with it).
    let name = distlock_testservers::sentinel::MASTER_NAME.to_owned();
    let client = SentinelClient::build(sentinels, name, Some(node), SentinelServerType::Master)
        .expect("a Sentinel client");
    let own = RedisBackend::from_sentinel_client(client, config)
        .await
        .expect("a backend on the service's client");
    let key = LockKey::new("own-client").expect("key");
    let AcquireOutcome::Acquired(lease) = own
        .try_acquire(&key, Duration::from_secs(5))
        .await
        .expect("acquire")
    else {
        panic!("a fresh key was held")
    };
    own.release_lease(&lease).await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_grants_above_every_fence_and_the_old_holder_is_refused() {
    let set = RedisSentinel::start(2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = RedisBackend::connect(&set.url()).await.expect("connect");
    the_master_is_found_by_name_and_through_the_service_s_own_client(&set).await;
    let store = MemoryStore::new();
    let key = LockKey::new("promotion").expect("key");
    let ttl = Duration::from_secs(30);

    // A first grant, replicated, and released.
    let AcquireOutcome::Acquired(first) = backend.try_acquire(&key, ttl).await.expect("acquire")
    else {
        panic!("a fresh key was held")
    };
    backend.release_lease(&first).await.expect("release");

    // The grant the replicas never see. They are paused (for less than the
    // Sentinels' down-after time, so that they stay candidates), and the master drops
    // its links to them before it is made: a paused process's socket still takes in
    // what is sent to it, and nothing is until a replica, resumed, connects again.
    let master = set.master().await.expect("the Sentinels name a master");
    let replicas: Vec<_> = (0..set.servers().len()).filter(|i| *i != master).collect();
    for &r in &replicas {
        set.servers()[r].pause().await.expect("pause a replica");
    }
    let url = set.servers()[master]
        .direct_url()
        .expect("the master's address");
    let mut admin = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the master");
    let dropped: usize = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query_async(&mut admin)
        .await
        .expect("drop the replicas' links");
    assert_eq!(
        dropped,
        replicas.len(),
        "the master had not every replica linked"
    );
    // The servers run with `min-replicas-to-write 1`, which would refuse the grant
    // below (NOREPLICAS): this master takes writes without replicas, as one configured
    // without it does, to show what such a master loses.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg("0")
        .query_async(&mut admin)
        .await
        .expect("let the master write without replicas");
    // A backend that waits for a replica refuses a grant none acknowledged: the
    // grant it may have made is not the caller's to rely on.
    let waiting = RedisBackend::connect(&format!(
        "{}&wait_replicas=1&wait_timeout_ms=200",
        set.url()
    ))
    .await
    .expect("connect, waiting for a replica");
    let other_key = LockKey::new("promotion-waited").expect("key");
    let refused = waiting.try_acquire(&other_key, ttl).await;
    assert!(
        matches!(&refused, Err(e) if e.kind() == ErrorKind::Unavailable && e.is_retryable()),
        "a grant no replica acknowledged was not refused: {:?}",
        refused.map(|_| ())
    );
    let granted = backend.try_acquire(&key, ttl).await;
    let AcquireOutcome::Acquired(holder) = granted.expect("acquire on the master") else {
        panic!("the released key was held")
    };
    store
        .write("promotion", holder.fence(), b"by the old holder")
        .await
        .expect("the holder's write");
    set.servers()[master].kill().await.expect("kill the master");
    for &r in &replicas {
        set.servers()[r].unpause().await.expect("unpause a replica");
    }
    let promoted = set.wait_failover(master).await.expect("a failover");
    eprintln!("server {promoted} was promoted in place of server {master}");

    // The backend follows the new master. The grant was lost with the old one: the
    // key is free there, and its next grant's fence is above every fence before.
    let next = match until_served("acquire after the failover", || {
        backend.try_acquire(&key, ttl)
    })
    .await
    {
        AcquireOutcome::Acquired(next) => next,
        AcquireOutcome::Held { .. } => panic!("the promoted replica had a grant it never saw"),
    };
    assert!(
        next.fence() > holder.fence() && holder.fence() > first.fence(),
        "fences went {} (replicated), {} (lost), then {} after the promotion",
        first.fence(),
        holder.fence(),
        next.fence()
    );
    store
        .write("promotion", next.fence(), b"by the new holder")
        .await
        .expect("the new holder's write");
    let late = store
        .write("promotion", holder.fence(), b"late, by the old holder")
        .await;
    assert!(
        matches!(&late, Err(e) if e.kind() == ErrorKind::StaleFence),
        "the old holder's write after the promotion was not refused: {late:?}"
    );
    // The old holder learns it lost the lock at its next renewal.
    let renewed = until_served("extend after the failover", || backend.extend(&holder, ttl)).await;
    assert!(
        matches!(renewed, ExtendOutcome::NotHeld),
        "the lost grant was renewed: {renewed:?}"
    );
    backend.release_lease(&next).await.expect("release");
}

/// A master cut off from its replicas and from the Sentinels, clients still reaching
/// it, takes grants only until its replicas' acknowledgements are
/// `min-replicas-max-lag` old (2 s on the test servers; replicas acknowledge every
/// second): from then on it refuses them with a retryable error, before the Sentinels
/// even fail it over, so what it can grant and lose with it is bounded by that window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_cut_off_from_its_replicas_refuses_grants_once_their_acknowledgements_are_old() {
    let set = RedisSentinel::start(2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = RedisBackend::connect(&set.url()).await.expect("connect");
    let ttl = Duration::from_secs(30);
    let master = set.master().await.expect("the Sentinels name a master");
    let first = LockKey::new("cut-off-0").expect("key");
    let AcquireOutcome::Acquired(granted) =
        backend.try_acquire(&first, ttl).await.expect("acquire")
    else {
        panic!("a fresh key was held")
    };
    backend.release_lease(&granted).await.expect("release");

    set.isolate(master).await.expect("cut the master off");
    let cut = Instant::now();
    // A grant on a fresh key every 100 ms until the master refuses one: within the
    // lag (2 s), an acknowledgement's period (1 s) and this machine's slack.
    let refused = loop {
        let elapsed = cut.elapsed();
        assert!(
            elapsed < Duration::from_secs(6),
            "the cut-off master still granted {elapsed:?} after the cut"
        );
        let key = LockKey::new(format!("cut-off-{}", elapsed.as_millis())).expect("key");
        match backend.try_acquire(&key, ttl).await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => break e,
        }
    };
    let after = cut.elapsed();
    set.rejoin(master).await.expect("rejoin the master");
    assert_eq!(refused.kind(), ErrorKind::Unavailable, "{refused}");
    assert!(refused.is_retryable(), "{refused}");
    assert!(refused.to_string().contains("NOREPLICAS"), "{refused}");
    eprintln!("the cut-off master refused grants {after:?} after the cut");
}
