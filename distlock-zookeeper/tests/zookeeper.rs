//! What the conformance suite does not cover: a held lock through the loss of the
//! ensemble's leader, fair waiters that each watch only their predecessor (and plain
//! waiters, who all watch the holder), what a vanished holder leaves, the fixed TTL of
//! a renewal, an unreachable server, the one-write grant on a fresh key, the release
//! that deletes the key's node its grant made, and tries on a key churned by two
//! processes that never answer an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_conformance::RoundTripMeter;
use distlock_core::backend::{
    AcquireOutcome, ChangeStream, ExtendOutcome, FairBackend, LockBackendExt, OwnerToken,
    ReleaseOutcome,
};
use distlock_core::{ErrorKind, LockBackend, LockClient, LockKey, LockOptions};
use distlock_testservers::{Proxy, ServerHandle, ZooKeeper, ZooKeeperEnsemble};
use distlock_zookeeper::{ZooKeeperBackend, ZooKeeperConfig};
use futures_util::StreamExt;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_its_fence_survive_the_loss_of_the_leader() {
    let mut ensemble = ZooKeeperEnsemble::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = Arc::new(
        ZooKeeperBackend::connect(&ensemble.url())
            .await
            .expect("connect"),
    );
    let ttl = Duration::from_secs(5);
    let client = LockClient::with_options(backend.clone(), LockOptions::new(ttl)).expect("options");
    let guard = client
        .lock("ledger", Duration::from_secs(10))
        .await
        .expect("acquire");
    let fence = guard.fence();
    let stopped = Instant::now();
    let leader = ensemble.stop_leader().await.expect("stop the leader");

    // Two TTLs later the lock is still held, renewed through the new leader.
    tokio::time::sleep((ttl * 2).saturating_sub(stopped.elapsed())).await;
    assert!(
        guard.is_held(),
        "the lock was lost with the leader (member {leader}): {:?}",
        guard.loss()
    );
    let key = LockKey::new("ledger").expect("key");
    let info = backend.inspect(&key).await.expect("inspect").expect("held");
    assert_eq!(info.fence, fence, "the fence changed across the failover");
    // Another client, on the same ensemble with its leader gone, is refused.
    let other = ZooKeeperBackend::connect(&ensemble.url())
        .await
        .expect("another client");
    let refused = other.acquire_once("ledger", ttl).await.expect("try");
    assert!(refused.is_none(), "a second holder during the failover");

    guard.release().await.expect("release");
    let next = other
        .acquire_once("ledger", ttl)
        .await
        .expect("acquire after failover")
        .expect("free after release");
    assert!(next.fence() > fence, "{:?} after {:?}", next.fence(), fence);
}

/// Spawns a task that reports `name` each time `changes` yields, `times` times at
/// most: after that a waiter would have taken the key (a stream with nothing ahead
/// yields at once, since a waiter asks again only after finding the key held).
fn report(
    name: &'static str,
    times: usize,
    mut changes: ChangeStream,
    to: mpsc::UnboundedSender<&'static str>,
) {
    tokio::spawn(async move {
        for _ in 0..times {
            if changes.next().await.is_none() || to.send(name).is_err() {
                return;
            }
        }
    });
}

/// The names reported until each of `expected` was (waited for up to 15 s, for a
/// loaded machine), and any more within half a second after: a wake that should come
/// is waited for, one that should not has that half second to show.
async fn woken(
    from: &mut mpsc::UnboundedReceiver<&'static str>,
    expected: &[&'static str],
) -> Vec<&'static str> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut names = Vec::new();
    while !expected.iter().all(|name| names.contains(name)) {
        match tokio::time::timeout_at(give_up, from.recv()).await {
            Ok(Some(name)) => names.push(name),
            _ => break,
        }
    }
    let quiet = tokio::time::Instant::now() + Duration::from_millis(500);
    while let Ok(Some(name)) = tokio::time::timeout_at(quiet, from.recv()).await {
        names.push(name);
    }
    names.sort_unstable();
    names.dedup();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_first_fair_waiter_only_and_every_plain_one() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let connect = || async {
        ZooKeeperBackend::connect(&server.url())
            .await
            .expect("connect")
    };
    let key = LockKey::new("herd").expect("key");
    let (ttl, place) = (Duration::from_secs(30), Duration::from_secs(30));
    let holder = connect().await;
    let AcquireOutcome::Acquired(held) = holder.try_acquire(&key, ttl).await.expect("hold") else {
        panic!("a fresh key was held");
    };

    // Three fair waiters, each on a session of its own, queued in order.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for (name, times) in [("a", 1), ("b", 2), ("c", 1)] {
        let backend = connect().await;
        let owner = OwnerToken::random();
        let outcome = backend
            .try_acquire_in_turn(&key, ttl, owner, place)
            .await
            .expect("queue");
        assert!(
            matches!(outcome, AcquireOutcome::Held { .. }),
            "{name}: {outcome:?}"
        );
        let changes = backend
            .watch_in_turn(&key, &owner)
            .await
            .expect("watch")
            .expect("a stream");
        report(name, times, changes, tx.clone());
        waiters.push((backend, owner));
    }
    assert_eq!(woken(&mut rx, &[]).await, Vec::<&str>::new());

    // The release wakes the head of the queue, and no one else.
    holder.release_lease(&held).await.expect("release");
    assert_eq!(woken(&mut rx, &["a"]).await, ["a"]);
    // The head takes the lock, leaving the queue: that wakes the next, only.
    let (a, a_owner) = &waiters[0];
    let AcquireOutcome::Acquired(a_lease) = a
        .try_acquire_in_turn(&key, ttl, *a_owner, place)
        .await
        .expect("in turn")
    else {
        panic!("the head of the queue was refused a free key");
    };
    assert_eq!(woken(&mut rx, &["b"]).await, ["b"]);
    // c, queued behind b, still waits; the holder's renewals wake no one.
    assert!(matches!(
        a.extend(&a_lease, ttl).await.expect("extend"),
        ExtendOutcome::Extended(_)
    ));
    assert_eq!(woken(&mut rx, &[]).await, Vec::<&str>::new());
    // b, woken, finds the lock held: it waits on the holder, still ahead of c.
    let (b, b_owner) = &waiters[1];
    let outcome = b
        .try_acquire_in_turn(&key, ttl, *b_owner, place)
        .await
        .expect("b");
    assert!(
        matches!(outcome, AcquireOutcome::Held { .. }),
        "{outcome:?}"
    );

    // Plain waiters have no place in a queue: each watches the holder, and one release
    // wakes them all.
    let mut plain = Vec::new();
    for name in ["x", "y", "z"] {
        let backend = connect().await;
        let changes = backend.watch(&key).await.expect("watch").expect("a stream");
        report(name, 1, changes, tx.clone());
        plain.push(backend);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.release_lease(&a_lease).await.expect("release");
    let woke = woken(&mut rx, &["b", "x", "y", "z"]).await;
    for plain in ["x", "y", "z", "b"] {
        assert!(
            woke.contains(&plain),
            "{plain} slept through the release: {woke:?}"
        );
    }
    assert!(
        !woke.contains(&"c"),
        "c was woken by a release while b is ahead: {woke:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_holder_leaves_nothing_once_its_ttl_has_run_out() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = ZooKeeperBackend::connect(&server.url())
        .await
        .expect("connect");
    let key = LockKey::new("vanished/holder").expect("key");
    let lease = backend
        .acquire_once(key.as_str(), Duration::from_secs(1))
        .await
        .expect("acquire")
        .expect("free");
    let node = ZooKeeperConfig::from_url(&server.url())
        .expect("config")
        .key_node(&key);
    let servers = format!("127.0.0.1:{}", server.host_port());
    let raw = zookeeper_client::Client::connect(&servers)
        .await
        .expect("raw client");
    let children = raw.list_children(&node).await.expect("the key's node");
    assert_eq!(children, [format!("l-{}", lease.owner().to_hex())]);
    // Never released and never judged by a contender: the server deletes the lease's
    // TTL node once it has run out, then the key's emptied container node (each at
    // its next check, every second on the test server).
    drop(backend);
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        if raw.check_stat(&node).await.expect("stat").is_none() {
            break;
        }
        assert!(Instant::now() < give_up, "{node} is still there 10 s on");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A grant asked while the server is down is refused at once and never made later. The
/// driver keeps a disconnected session's requests and sends them once it reconnects:
/// sent, such a grant would be made after its caller was told it failed, and hold the
/// key for a whole TTL under an owner nobody knows once the holder lets go. The key is
/// held throughout (its node exists), so the lease's create alone would succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_asked_while_the_server_is_down_is_not_made_once_it_is_back() {
    use distlock_conformance::ServerControl as _;

    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = ZooKeeperBackend::connect(&format!("{}?timeout_ms=1000", server.url()))
        .await
        .expect("connect");
    let key = LockKey::new("asked-while-down").expect("key");
    let ttl = Duration::from_secs(60);
    let held = backend.try_acquire(&key, ttl).await.expect("acquire");
    let AcquireOutcome::Acquired(held) = held else {
        panic!("a fresh key was held: {held:?}")
    };

    server.kill().await.expect("kill");
    // Give the driver time to see its connection go.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let refused = backend.try_acquire(&key, ttl).await;
    assert!(
        matches!(&refused, Err(e) if e.kind() == ErrorKind::Unavailable && e.is_retryable()),
        "{refused:?}"
    );
    server.start().await.expect("start");

    // Back: the holder still holds, and its release goes through.
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        match backend.inspect(&key).await {
            Ok(info) => {
                let info = info.expect("the holder's lease survived the restart");
                assert_eq!(info.fence, held.fence());
                break;
            }
            Err(e) if e.is_retryable() && Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the server did not come back: {e}"),
        }
    }
    let released = backend.release(&key, held.owner()).await.expect("release");
    assert_eq!(released, distlock_core::backend::ReleaseOutcome::Released);
    let next = backend.try_acquire(&key, ttl).await.expect("acquire");
    assert!(
        matches!(next, AcquireOutcome::Acquired(_)),
        "the grant asked while the server was down was made once it came back: {next:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_renews_to_the_granted_ttl_only() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = ZooKeeperBackend::connect(&server.url())
        .await
        .expect("connect");
    assert!(!backend.capabilities().extend_any_ttl);
    let lease = backend
        .acquire_once("fixed", Duration::from_secs(3))
        .await
        .expect("acquire")
        .expect("free");
    let err = backend
        .extend(&lease, Duration::from_secs(10))
        .await
        .expect_err("another ttl");
    assert_eq!(err.kind(), ErrorKind::InvalidTtl, "{err}");
    let renewed = backend
        .extend(&lease, Duration::from_secs(3))
        .await
        .expect("the granted ttl");
    assert!(
        matches!(renewed, ExtendOutcome::Extended(ref l) if l.fence() == lease.fence()),
        "{renewed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_typed_error_in_bounded_time() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let started = Instant::now();
    let err = ZooKeeperBackend::connect(&format!(
        "zookeeper://127.0.0.1:{port}?connect_timeout_ms=1000&timeout_ms=1000"
    ))
    .await
    .expect_err("nothing listens there");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

/// Fair waiters on clients of their own, taking turns, with polling so slow (a place of
/// ten minutes, so a call every 200 s at most) that only a notification can hand the
/// lock on within the wait: every handoff is woken, none left to a poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fair_handoff_is_woken_not_polled() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let options = LockOptions::new(Duration::from_secs(30))
        .with_fair(true)
        .with_queue_place(Duration::from_secs(600))
        .with_backoff(Duration::from_secs(200), Duration::from_secs(200));
    let mut tasks = Vec::new();
    for task in 0..4 {
        let backend = Arc::new(
            ZooKeeperBackend::connect(&server.url())
                .await
                .expect("connect"),
        );
        let client = LockClient::with_options(backend, options.clone()).expect("options");
        tasks.push(tokio::spawn(async move {
            for round in 0..4 {
                let guard = client
                    .lock("turns", Duration::from_secs(20))
                    .await
                    .unwrap_or_else(|e| panic!("task {task}, round {round}: {e}"));
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
}

/// A fresh key is granted in one round trip (its node and the lease in one `multi`),
/// and a key whose node another client made goes the longer way and is judged as
/// before: held while the other client holds it, granted with a higher fence once
/// it let go. Clients racing on fresh keys never share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_key_takes_one_write_and_a_key_made_elsewhere_is_judged_as_before() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let proxy = Proxy::start(server.host_port()).await.expect("proxy");
    let metered = ZooKeeperBackend::connect(&format!("zookeeper://127.0.0.1:{}", proxy.port()))
        .await
        .expect("connect through the proxy");
    let other = ZooKeeperBackend::connect(&server.url())
        .await
        .expect("connect");
    let ttl = Duration::from_secs(10);
    let warm = metered
        .acquire_once("fresh/warm-up", ttl)
        .await
        .expect("acquire")
        .expect("free");
    metered.release_lease(&warm).await.expect("release");
    // The fewest of a few trials: a ping of the session may land inside one.
    let mut fewest = u64::MAX;
    for i in 0..5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = proxy.round_trips();
        let lease = metered
            .acquire_once(&format!("fresh/{i}"), ttl)
            .await
            .expect("acquire")
            .expect("a fresh key is free");
        fewest = fewest.min(proxy.round_trips() - before);
        metered.release_lease(&lease).await.expect("release");
    }
    assert_eq!(fewest, 1, "round trips of an acquire on a fresh key");

    // A key the other client made and holds: the `multi` finds its node there.
    let theirs = other
        .acquire_once("made/elsewhere", ttl)
        .await
        .expect("acquire")
        .expect("free");
    let elsewhere = LockKey::new("made/elsewhere").expect("key");
    let held = metered.try_acquire(&elsewhere, ttl).await.expect("try");
    assert!(
        matches!(held, AcquireOutcome::Held { .. }),
        "a key held by another client was granted: {held:?}"
    );
    other.release_lease(&theirs).await.expect("release");
    let mine = metered
        .acquire_once("made/elsewhere", ttl)
        .await
        .expect("acquire")
        .expect("free once released");
    assert!(mine.fence() > theirs.fence(), "{mine:?} after {theirs:?}");
    metered.release_lease(&mine).await.expect("release");

    // Four sessions race on each of 30 fresh keys: exactly one wins each.
    let mut racers = vec![Arc::new(other)];
    for _ in 0..3 {
        racers.push(Arc::new(
            ZooKeeperBackend::connect(&server.url())
                .await
                .expect("connect"),
        ));
    }
    for i in 0..30 {
        let key = format!("race/{i}");
        let tries = racers.iter().map(|b| {
            let (b, key) = (b.clone(), key.clone());
            tokio::spawn(async move { b.acquire_once(&key, ttl).await.expect("try") })
        });
        let won: Vec<_> = futures_util::future::join_all(tries)
            .await
            .into_iter()
            .filter_map(|r| r.expect("task"))
            .collect();
        assert_eq!(won.len(), 1, "{key}: {won:?}");
    }
}

/// A cycle on a fresh key is two requests and two writes, as the bare create and
/// delete of a node are: the release of a lease this backend granted needs no read,
/// and deletes the key's node its grant made, in the same write, when nothing else is
/// under it (the server is not left an emptied node to delete with a write of its
/// own). With something else under it (here a node of another kind), the lease alone
/// goes, and the release still reports it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_on_a_fresh_key_is_two_requests_and_two_writes() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = ZooKeeperBackend::connect(&server.url())
        .await
        .expect("connect");
    let config = ZooKeeperConfig::from_url(&server.url()).expect("config");
    let raw = zookeeper_client::Client::connect(&format!("127.0.0.1:{}", server.host_port()))
        .await
        .expect("raw client");
    let ttl = Duration::from_secs(10);
    let warm = backend
        .acquire_once("made/warm-up", ttl)
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&warm).await.expect("release");
    // A cycle on a fresh key, counted on the server: the requests it received and the
    // transactions it logged (its zxid), after a wait past its next check of its
    // containers. The fewest of a few trials: a ping of the session may land inside
    // one.
    let (mut requests, mut writes) = (u64::MAX, u64::MAX);
    for i in 0..3 {
        let before = srvr(server.host_port()).await;
        let lease = backend
            .acquire_once(&format!("counted/{i}"), ttl)
            .await
            .expect("acquire")
            .expect("a fresh key is free");
        backend.release_lease(&lease).await.expect("release");
        let sent = srvr(server.host_port()).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let after = srvr(server.host_port()).await;
        // The `srvr` asked before the cycle counts as one.
        requests = requests.min(sent.0 - before.0 - 1);
        writes = writes.min(after.1 - before.1);
    }
    assert_eq!(
        (requests, writes),
        (2, 2),
        "(requests, transactions) of a cycle on a fresh key"
    );
    // Checked at once after each release, before the server's own check (every
    // second on the test server) could have deleted an emptied node.
    let mut left = Vec::new();
    for i in 0..5 {
        let key = LockKey::new(format!("made/{i}")).expect("key");
        let lease = backend
            .acquire_once(key.as_str(), ttl)
            .await
            .expect("acquire")
            .expect("a fresh key is free");
        let node = config.key_node(&key);
        assert!(raw.check_stat(&node).await.expect("stat").is_some());
        assert_eq!(
            backend.release_lease(&lease).await.expect("release"),
            ReleaseOutcome::Released
        );
        if raw.check_stat(&node).await.expect("stat").is_some() {
            left.push(node);
        }
    }
    assert!(
        left.is_empty(),
        "key nodes left after their release: {left:?}"
    );

    let key = LockKey::new("made/shared").expect("key");
    let lease = backend
        .acquire_once(key.as_str(), ttl)
        .await
        .expect("acquire")
        .expect("free");
    let node = config.key_node(&key);
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    raw.create(&format!("{node}/other"), &[], &options)
        .await
        .expect("another node under the key's");
    assert_eq!(
        backend.release_lease(&lease).await.expect("release"),
        ReleaseOutcome::Released
    );
    let children = raw
        .list_children(&node)
        .await
        .expect("the key's node stays");
    assert_eq!(children, ["other"]);
    // The key is free, and granted again with a higher fence.
    let again = backend
        .acquire_once(key.as_str(), ttl)
        .await
        .expect("acquire")
        .expect("free once released");
    assert!(again.fence() > lease.fence(), "{again:?} after {lease:?}");
    backend.release_lease(&again).await.expect("release");
}

/// What `srvr` on 127.0.0.1:`port` counts: the requests received, and the zxid.
async fn srvr(port: u16) -> (u64, u64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("srvr");
    stream.write_all(b"srvr").await.expect("srvr");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("srvr");
    let field = |name: &str| {
        answer
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {answer}"))
            .trim()
            .to_owned()
    };
    let received = field("Received:").parse().expect("Received");
    let zxid = field("Zxid:");
    let zxid = u64::from_str_radix(zxid.trim_start_matches("0x"), 16).expect("Zxid");
    (received, zxid)
}

/// Many tasks of two processes (two sessions) try one key and release it as fast as
/// they can. A release deletes the key's node when nothing else is under it, so the
/// other tries keep finding their key's node gone between learning of it and creating
/// a lease under it. Each such try is a sign that another made progress: a try answers
/// a grant or "held", never an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_churned_by_many_tries_answers_each_try_without_an_error() {
    let server = ServerHandle::start(&ZooKeeper)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut backends = Vec::new();
    for _ in 0..2 {
        backends.push(Arc::new(
            ZooKeeperBackend::connect(&server.url())
                .await
                .expect("connect"),
        ));
    }
    let key = LockKey::new("churn/one-key").expect("key");
    let until = Instant::now() + Duration::from_secs(8);
    let tasks = (0..48).map(|n| {
        let (backend, key) = (backends[n % 2].clone(), key.clone());
        tokio::spawn(async move {
            let (mut granted, mut errors) = (0u32, Vec::new());
            while Instant::now() < until {
                match backend.try_acquire(&key, Duration::from_secs(30)).await {
                    Ok(AcquireOutcome::Acquired(lease)) => {
                        granted += 1;
                        if let Err(e) = backend.release(lease.key(), lease.owner()).await {
                            errors.push(format!("release: {e}"));
                        }
                    }
                    Ok(AcquireOutcome::Held { .. }) => {}
                    Err(e) => errors.push(format!("try: {e}")),
                }
            }
            (granted, errors)
        })
    });
    let (mut granted, mut errors) = (0, Vec::new());
    for task in futures_util::future::join_all(tasks).await {
        let (g, e) = task.expect("task");
        granted += g;
        errors.extend(e);
    }
    assert!(granted > 0, "no try was granted in 8 s");
    assert!(
        errors.is_empty(),
        "{} of the tries and releases answered an error ({granted} grants), the first: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
}
