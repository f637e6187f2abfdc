//! What the conformance suite does not cover: scripts that the server forgot, waiting
//! for replicas, the backend's own `Debug` output, and what a fair queue leaves stored.
//! Each test has a Redis of its own.

use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::ServerControl as _;
use distlock_core::backend::{
    AcquireOutcome, ExtendOutcome, FairBackend, Handoffs, LockBackendExt, OwnerToken,
    ReleaseOutcome,
};
use distlock_core::{ErrorKind, LockBackend, LockKey};
use distlock_redis::RedisBackend;
use distlock_testservers::{Redis, ServerHandle};

async fn server() -> ServerHandle {
    ServerHandle::start(&Redis)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A plain driver connection to the test server, for looking behind the backend.
async fn admin(server: &ServerHandle) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_the_server_forgot_are_loaded_again() {
    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let first = backend
        .acquire_once("flushed", Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    let mut admin = admin(&server).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .expect("flush");
    assert_eq!(
        backend
            .release_lease(&first)
            .await
            .expect("release after flush"),
        ReleaseOutcome::Released
    );
    let second = backend
        .acquire_once("flushed", Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    assert!(second.fence() > first.fence());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_fail_the_acquire_and_leave_nothing_behind() {
    let server = server().await;
    let url = format!("{}?wait_replicas=1&wait_timeout_ms=50", server.url());
    let backend = RedisBackend::connect(&url).await.expect("connect");
    let err = backend
        .acquire_once("replicated", Duration::from_secs(10))
        .await
        .expect_err("no replicas");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    let plain = RedisBackend::connect(&server.url()).await.expect("connect");
    let key = LockKey::new("replicated").expect("key");
    assert_eq!(
        plain.inspect(&key).await.expect("inspect"),
        None,
        "the unreplicated grant was left behind"
    );
    // Fenced writes wait for replicas the same way, in the same round trip.
    let store = distlock_redis::fenced::RedisStore::new(&backend);
    let err = store
        .set(
            "replicated-value",
            distlock_core::FencingToken::new(1),
            b"x",
        )
        .await
        .expect_err("no replicas");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_output_and_errors_never_show_the_password() {
    let server = server().await;
    let backend = Arc::new(RedisBackend::connect(&server.url()).await.expect("connect"));
    let shown = format!("{backend:?}");
    assert!(!shown.contains(server.password()), "{shown}");
    assert!(shown.contains(":***@127.0.0.1"), "{shown}");
    server.pause().await.expect("pause");
    let url = format!(
        "{}?response_timeout_ms=200&connect_timeout_ms=300",
        server.url()
    );
    let slow = RedisBackend::connect(&url).await;
    server.unpause().await.expect("unpause");
    let err = slow.expect_err("connected to a paused server");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(server.password()), "{shown}");
}

/// A server whose certificate another CA signed is refused at connect, as a
/// configuration error (not retryable); trusting the right CA, the same server is
/// reached.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_of_another_ca_is_a_configuration_error() {
    let tls = distlock_testservers::TlsMaterial::generate().expect("certificates");
    let server = ServerHandle::start_tls(&distlock_testservers::Redis, &tls)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let wrong = server.tls_url(&tls, &tls.wrong_ca_file()).expect("url");
    let err = RedisBackend::connect(&wrong).await.expect_err("another CA");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let right = server.tls_url(&tls, &tls.ca_file()).expect("url");
    RedisBackend::connect(&right).await.expect("the right CA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_writes_to_the_users_own_keys_keep_the_fence_beside_them() {
    use distlock_core::FencingToken;
    use distlock_redis::fenced::{fence_key, RedisStore, FENCE_FIELD};

    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let store = RedisStore::new(&backend);
    let mut admin = admin(&server).await;
    let f = FencingToken::new;

    // A string key: the value where the user reads it, the fence in its own key.
    store.set("orders:7", f(5), b"paid").await.expect("set");
    let stale = store
        .set("orders:7", f(4), b"refunded")
        .await
        .expect_err("stale");
    assert_eq!(stale.kind(), ErrorKind::StaleFence, "{stale}");
    let (value, fence): (String, String) = redis::pipe()
        .get("orders:7")
        .get(fence_key("orders:7"))
        .query_async(&mut admin)
        .await
        .expect("read back");
    assert_eq!((value.as_str(), fence.as_str()), ("paid", "5"));
    // A claiming read raises the fence: the holder of 5 can no longer write.
    assert_eq!(
        store.get("orders:7", f(6)).await.expect("get").as_deref(),
        Some(&b"paid"[..])
    );
    let stale = store
        .set("orders:7", f(5), b"late")
        .await
        .expect_err("stale");
    assert_eq!(stale.kind(), ErrorKind::StaleFence);

    // A hash: fields written under the fence of the whole hash, kept in the hash.
    store
        .hset("cart:{u1}", "total", f(9), b"10")
        .await
        .expect("hset");
    store
        .hset("cart:{u1}", "items", f(10), b"3")
        .await
        .expect("hset");
    let stale = store
        .hset("cart:{u1}", "total", f(9), b"0")
        .await
        .expect_err("stale");
    assert_eq!(stale.kind(), ErrorKind::StaleFence);
    let (total, fence): (String, String) = redis::pipe()
        .hget("cart:{u1}", "total")
        .hget("cart:{u1}", FENCE_FIELD)
        .query_async(&mut admin)
        .await
        .expect("read back");
    assert_eq!((total.as_str(), fence.as_str()), ("10", "10"));
    assert_eq!(
        store
            .hget("cart:{u1}", "items", f(10))
            .await
            .expect("hget")
            .as_deref(),
        Some(&b"3"[..])
    );

    // Bad input is refused before anything is sent.
    for err in [
        store
            .hset("cart:{u1}", FENCE_FIELD, f(11), b"x")
            .await
            .expect_err("fence field"),
        store
            .set("orders:7", FencingToken::new(u64::MAX), b"x")
            .await
            .expect_err("fence too high"),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    assert_eq!(
        store
            .set("", f(11), b"x")
            .await
            .expect_err("empty key")
            .kind(),
        ErrorKind::InvalidKey
    );
}

/// No key's write can reach another key's fence: not through a key that names the
/// fence key, nor through a key whose fence key would be the same (`a` and `{a}`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_through_a_name_resets_another_keys_fence() {
    use distlock_core::FencingToken;
    use distlock_redis::fenced::{fence_key, RedisStore};

    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let store = RedisStore::new(&backend);
    let f = FencingToken::new;
    store
        .set("a", f(10), b"written under 10")
        .await
        .expect("set");
    let named = store
        .set(&fence_key("a"), f(1), b"0")
        .await
        .expect_err("a key that names a's fence key");
    assert_eq!(named.kind(), ErrorKind::InvalidKey, "{named}");
    // `{a}` is a key of its own, with a fence of its own.
    store
        .set("{a}", f(1), b"another key")
        .await
        .expect("set {a}");
    let stale = store
        .set("a", f(5), b"a stale holder")
        .await
        .expect_err("5 after 10 is stale");
    assert_eq!(stale.kind(), ErrorKind::StaleFence, "{stale}");
    assert_eq!(
        store.get("a", f(10)).await.expect("get").as_deref(),
        Some(&b"written under 10"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_its_waiters_left_leaves_no_keys() {
    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let mut admin = admin(&server).await;
    let queue_keys = || {
        let mut exists = redis::cmd("EXISTS");
        exists
            .arg("distlock:{queued}:queue")
            .arg("distlock:{queued}:places");
        exists
    };
    let key = LockKey::new("queued").expect("key");
    let holder = backend
        .acquire_once("queued", Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    // One waiter leaves, another vanishes with a place of 200 ms.
    let (leaving, vanishing) = (OwnerToken::random(), OwnerToken::random());
    let place = Duration::from_millis(200);
    for owner in [leaving, vanishing] {
        let outcome = backend
            .try_acquire_in_turn(&key, Duration::from_secs(10), owner, place)
            .await
            .expect("queue");
        assert!(
            matches!(outcome, AcquireOutcome::Held { .. }),
            "{outcome:?}"
        );
    }
    let queued: u32 = queue_keys().query_async(&mut admin).await.expect("exists");
    assert_eq!(
        queued, 2,
        "the queue and the places are kept beside the lock"
    );
    backend.leave_queue(&key, &leaving).await.expect("leave");
    tokio::time::sleep(place + Duration::from_millis(100)).await;
    let left: u32 = queue_keys().query_async(&mut admin).await.expect("exists");
    assert_eq!(
        left, 0,
        "a queue whose waiters left or vanished is still stored"
    );
    backend.release_lease(&holder).await.expect("release");
}

/// A name's permit keys outlive its last grant (the terms an observer may still read),
/// then expire: nothing of an election stays stored once its last term is long over.
#[tokio::test]
async fn an_elections_keys_are_kept_past_its_last_term_then_expire() {
    let server = server().await;
    let backend = Arc::new(RedisBackend::connect(&server.url()).await.expect("connect"));
    let mut admin = admin(&server).await;
    let permit_keys = || {
        let mut exists = redis::cmd("EXISTS");
        for suffix in ["grants", "info", "places", "terms"] {
            exists.arg(format!("distlock:permits{{kept}}:{suffix}"));
        }
        exists
    };
    let ttl = Duration::from_millis(400);
    let options = distlock_core::LockOptions::new(ttl).with_auto_renew(false);
    let election = distlock_core::LockClient::with_options(backend, options)
        .and_then(|c| c.election("kept"))
        .expect("election");
    let term = election
        .campaign("10.0.0.1:80", Duration::from_secs(5))
        .await
        .expect("elected");
    let stored: u32 = permit_keys().query_async(&mut admin).await.expect("exists");
    assert_eq!(
        stored, 3,
        "grants, the name's hash and the terms are stored"
    );
    term.resign().await.expect("resigned");
    let kept: u32 = permit_keys().query_async(&mut admin).await.expect("exists");
    assert!(
        kept >= 2,
        "the terms were dropped with the last grant ({kept} keys left)"
    );
    // Kept for twice the TTL from the grant; then nothing is left.
    tokio::time::sleep(ttl * 2 + Duration::from_millis(200)).await;
    let left: u32 = permit_keys().query_async(&mut admin).await.expect("exists");
    assert_eq!(left, 0, "an election long over is still stored");
}

/// A release is published on the key's channel only when someone waited for that
/// grant: a waiter that found the key held (racing or queued) marks the grant, and the
/// marked grant's fence still reads back whole through inspect, extend and a retried
/// acquire. A release nobody waited for publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_published_only_when_someone_waited_for_it() {
    use futures_util::StreamExt as _;

    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let mut pubsub = redis::Client::open(server.url())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pubsub");
    pubsub
        .subscribe("distlock:released:{published}")
        .await
        .expect("subscribe");
    let mut messages = pubsub.on_message();
    let mut next_message = async || {
        tokio::time::timeout(Duration::from_millis(500), messages.next())
            .await
            .ok()
            .flatten()
    };
    let key = LockKey::new("published").expect("key");
    let ttl = Duration::from_secs(10);

    // Nobody waits: no message.
    let quiet = backend
        .acquire_once("published", ttl)
        .await
        .expect("acquire");
    let quiet = quiet.expect("free");
    backend.release_lease(&quiet).await.expect("release");
    assert!(
        next_message().await.is_none(),
        "a release nobody waited for was published"
    );

    // A racing waiter found it held: one message, and the fence reads back whole.
    let held = backend
        .acquire_once("published", ttl)
        .await
        .expect("acquire")
        .expect("free");
    let busy = backend.try_acquire(&key, ttl).await.expect("a racing try");
    assert!(matches!(busy, AcquireOutcome::Held { .. }), "{busy:?}");
    let info = backend.inspect(&key).await.expect("inspect").expect("held");
    assert_eq!(info.fence, held.fence(), "the mark hides the fence");
    let again = backend
        .try_acquire_as(&key, ttl, *held.owner())
        .await
        .expect("a retried grant");
    let AcquireOutcome::Acquired(again) = again else {
        panic!("the holder's retry was refused: {again:?}")
    };
    assert_eq!(again.fence(), held.fence());
    let extended = backend.extend(&held, ttl).await.expect("extend");
    assert!(
        matches!(&extended, ExtendOutcome::Extended(l) if l.fence() == held.fence()),
        "{extended:?}"
    );
    backend.release_lease(&held).await.expect("release");
    assert!(
        next_message().await.is_some(),
        "a release a waiter waited for was not published"
    );

    // A queued waiter found it held: the same.
    let held = backend
        .acquire_once("published", ttl)
        .await
        .expect("acquire")
        .expect("free");
    let waiter = OwnerToken::random();
    let queued = backend
        .try_acquire_in_turn(&key, ttl, waiter, Duration::from_secs(2))
        .await
        .expect("queue");
    assert!(matches!(queued, AcquireOutcome::Held { .. }), "{queued:?}");
    backend.release_lease(&held).await.expect("release");
    assert!(
        next_message().await.is_some(),
        "a release a queued waiter waited for was not published"
    );
    // The head is granted while another waiter is queued: that grant is marked too.
    let behind = OwnerToken::random();
    let outcome = backend
        .try_acquire_in_turn(&key, ttl, behind, Duration::from_secs(2))
        .await
        .expect("queue behind");
    assert!(
        matches!(outcome, AcquireOutcome::Held { .. }),
        "{outcome:?}"
    );
    let head = backend
        .try_acquire_in_turn(&key, ttl, waiter, Duration::from_secs(2))
        .await
        .expect("the head's turn");
    let AcquireOutcome::Acquired(head) = head else {
        panic!("the head was not granted: {head:?}")
    };
    backend.release_lease(&head).await.expect("release");
    assert!(
        next_message().await.is_some(),
        "the head's release, with a waiter queued behind it, was not published"
    );
    backend.leave_queue(&key, &behind).await.expect("leave");
}

/// The short release makes the channel's name from the lock's and the prefix's length
/// in bytes: with an empty prefix, and with one of several-byte characters and braces
/// of its own, a release a racing waiter waited for is published on
/// `<prefix>released:{<key>}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_is_published_on_its_keys_channel_under_any_prefix() {
    use futures_util::StreamExt as _;

    let server = server().await;
    let ttl = Duration::from_secs(10);
    for prefix in ["", "é{app}:"] {
        let config = distlock_redis::RedisConfig::from_url(&server.url())
            .expect("url")
            .with_prefix(prefix);
        let backend = RedisBackend::connect_with(config).await.expect("connect");
        let mut pubsub = redis::Client::open(server.url())
            .expect("url")
            .get_async_pubsub()
            .await
            .expect("pubsub");
        let channel = format!("{prefix}released:{{named}}");
        pubsub.subscribe(&channel).await.expect("subscribe");
        let mut messages = pubsub.on_message();
        let key = LockKey::new("named").expect("key");
        let held = backend
            .acquire_once("named", ttl)
            .await
            .expect("acquire")
            .expect("free");
        let busy = backend.try_acquire(&key, ttl).await.expect("a racing try");
        assert!(matches!(busy, AcquireOutcome::Held { .. }), "{busy:?}");
        let released = backend.release_lease(&held).await.expect("release");
        assert_eq!(released, ReleaseOutcome::Released);
        let message = tokio::time::timeout(Duration::from_secs(2), messages.next())
            .await
            .ok()
            .flatten();
        assert!(
            message.is_some_and(|m| m.get_channel_name() == channel),
            "the release under prefix {prefix:?} was not published on {channel}"
        );
    }
}

/// Whether `wakes` yields within `within` milliseconds.
async fn woken(wakes: &mut distlock_core::backend::ChangeStream, within: u64) -> bool {
    use futures_util::StreamExt as _;
    tokio::time::timeout(Duration::from_millis(within), wakes.next())
        .await
        .is_ok()
}

/// A release of a key with fair waiters wakes the head of the queue, the one the next
/// fair step grants, and not the waiters behind it; a racing waiter of the key is woken
/// too. Once the head has the key and releases it, the next waiter is woken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_head_of_the_queue_not_the_herd() {
    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let key = LockKey::new("herd").expect("key");
    let (ttl, place) = (Duration::from_secs(10), Duration::from_secs(10));
    let holder = backend
        .acquire_once("herd", ttl)
        .await
        .expect("acquire")
        .expect("free");
    let (head, next) = (OwnerToken::random(), OwnerToken::random());
    let mut head_wakes = backend
        .watch_in_turn(&key, &head)
        .await
        .expect("watch")
        .expect("notifications");
    let mut next_wakes = backend
        .watch_in_turn(&key, &next)
        .await
        .expect("watch")
        .expect("notifications");
    let mut racing_wakes = backend
        .watch(&key)
        .await
        .expect("watch")
        .expect("notifications");
    for owner in [head, next] {
        let queued = backend
            .try_acquire_in_turn(&key, ttl, owner, place)
            .await
            .expect("queue");
        assert!(matches!(queued, AcquireOutcome::Held { .. }), "{queued:?}");
    }
    backend.release_lease(&holder).await.expect("release");
    assert!(woken(&mut head_wakes, 2000).await, "the head was not woken");
    assert!(
        woken(&mut racing_wakes, 2000).await,
        "a racing waiter was not woken"
    );
    assert!(
        !woken(&mut next_wakes, 300).await,
        "a waiter behind the head was woken"
    );
    // The head takes the key; its release wakes the next waiter.
    let AcquireOutcome::Acquired(lease) = backend
        .try_acquire_in_turn(&key, ttl, head, place)
        .await
        .expect("the head's step")
    else {
        panic!("the head of the queue was refused a free key");
    };
    backend.release_lease(&lease).await.expect("release");
    assert!(
        woken(&mut next_wakes, 2000).await,
        "the next waiter was not woken"
    );
}

/// A release whose queue's head has no place any more (a server that evicts keys lost
/// the places) still releases: the head is woken and asks, nothing is handed over.
#[tokio::test]
async fn a_release_whose_head_lost_its_place_still_releases() {
    let server = server().await;
    let backend = RedisBackend::connect(&server.url()).await.expect("connect");
    let key = LockKey::new("evicted-places").expect("key");
    let (ttl, place) = (Duration::from_secs(10), Duration::from_secs(10));
    let holder = backend
        .acquire_once("evicted-places", ttl)
        .await
        .expect("acquire")
        .expect("free");
    let head = OwnerToken::random();
    let mut wakes = backend
        .watch_in_turn(&key, &head)
        .await
        .expect("watch")
        .expect("notifications");
    let queued = backend
        .try_acquire_in_turn(&key, ttl, head, place)
        .await
        .expect("queue");
    assert!(matches!(queued, AcquireOutcome::Held { .. }), "{queued:?}");
    let mut raw = admin(&server).await;
    let _: i64 = redis::cmd("DEL")
        .arg("distlock:{evicted-places}:places")
        .query_async(&mut raw)
        .await
        .expect("evict the places");
    assert_eq!(
        backend.release_lease(&holder).await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(woken(&mut wakes, 2000).await, "the head was not woken");
    assert!(backend.handed_over(&key, &head).is_none(), "handed over");
    assert!(
        LockBackend::inspect(&backend, &key)
            .await
            .expect("inspect")
            .is_none(),
        "the key is held after its release"
    );
}

/// The `EVALSHA` calls `lines` (a `MONITOR`) showed that carry each of `owners`' token:
/// each call's number of key names, in order. A script the server has not seen yet is
/// sent whole after its `EVALSHA` (an `EVAL`, not counted): each call is one `EVALSHA`.
/// Reads until the server has been quiet for 500 ms.
async fn calls_of(
    lines: &mut (impl futures_util::Stream<Item = String> + Unpin),
    owners: &[&OwnerToken],
) -> Vec<Vec<String>> {
    use futures_util::StreamExt as _;
    let mut seen = Vec::new();
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_millis(500), lines.next()).await
    {
        seen.push(line);
    }
    owners
        .iter()
        .map(|owner| {
            let hex = owner.to_hex();
            seen.iter()
                .filter(|line| line.contains(&hex))
                .filter_map(|line| {
                    // `<time> [<db> <client>] "EVALSHA" "<sha>" "<numkeys>" ...`: the
                    // quoted words are the odd pieces between quotes.
                    let words: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
                    (words.first() == Some(&"EVALSHA"))
                        .then(|| words.get(2).map(|n| n.to_string()))
                        .flatten()
                })
                .collect()
        })
        .collect()
}

/// A release names only the lock, whatever its backend did before; a grant a fair
/// waiter queued for is still handed to that waiter in a release's own step, by the
/// full release, sent when the first one finds the fair waiter's mark. A fair lock's
/// release (`FairBackend::release_in_turn`) sends the full release at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_names_the_lock_alone_until_a_fair_waiter_needs_more() {
    let server = server().await;
    let releaser = RedisBackend::connect(&server.url()).await.expect("connect");
    let waiters = RedisBackend::connect(&server.url()).await.expect("connect");
    let mut lines = redis::Client::open(server.url())
        .expect("url")
        .get_async_monitor()
        .await
        .expect("monitor")
        .into_on_message::<String>();
    let key = LockKey::new("plain").expect("key");
    let (ttl, place) = (Duration::from_secs(10), Duration::from_secs(10));

    // Nobody waits: one call, naming the lock alone.
    let quiet = releaser.acquire_once("plain", ttl).await.expect("acquire");
    let quiet = quiet.expect("free");
    let released = releaser.release_lease(&quiet).await.expect("release");
    assert_eq!(released, ReleaseOutcome::Released);

    // A fair waiter of another backend is queued: the lock is handed to it.
    let holder = releaser.acquire_once("plain", ttl).await.expect("acquire");
    let holder = holder.expect("free");
    let head = OwnerToken::random();
    let mut wakes = waiters
        .watch_in_turn(&key, &head)
        .await
        .expect("watch")
        .expect("notifications");
    let queued = waiters
        .try_acquire_in_turn(&key, ttl, head, place)
        .await
        .expect("queue");
    assert!(matches!(queued, AcquireOutcome::Held { .. }), "{queued:?}");
    let released = releaser.release_lease(&holder).await.expect("release");
    assert_eq!(released, ReleaseOutcome::Released);
    assert!(woken(&mut wakes, 2000).await, "the head was not woken");
    let handed = waiters
        .handed_over(&key, &head)
        .expect("the head of the queue was not handed the lock");
    assert!(
        handed.fence > holder.fence(),
        "handed {:?} after {:?}",
        handed.fence,
        holder.fence()
    );
    let shown = LockBackend::inspect(&waiters, &key).await.expect("inspect");
    assert_eq!(shown.map(|info| info.fence), Some(handed.fence));

    // The waiters' backend has made a fair step, and nobody queues behind the head:
    // its release still names the lock alone. No release depends on what its backend
    // did before, only on what the server holds.
    let released = waiters.release(&key, &head).await.expect("release");
    assert_eq!(released, ReleaseOutcome::Released);

    // A fair lock's release (`release_in_turn`, what a fair lock's guard calls) sends
    // the full release at once, where fair waiters are to be expected.
    let fair = OwnerToken::random();
    let taken = waiters
        .try_acquire_in_turn(&key, ttl, fair, place)
        .await
        .expect("fair step");
    assert!(matches!(taken, AcquireOutcome::Acquired(_)), "{taken:?}");
    let released = waiters.release_in_turn(&key, &fair).await.expect("release");
    assert_eq!(released, ReleaseOutcome::Released);

    let calls = calls_of(&mut lines, &[quiet.owner(), holder.owner(), &head, &fair]).await;
    // The acquire names the lock and its counter; each release as said above.
    assert_eq!(calls[0], ["2", "1"], "the uncontended cycle's calls");
    assert_eq!(calls[1], ["2", "1", "5"], "the handed-over cycle's calls");
    assert_eq!(calls[2], ["5", "1"], "the fair waiter's step and release");
    assert_eq!(calls[3], ["5", "5"], "a fair lock's step and its release");
}
