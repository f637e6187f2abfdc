//! What the conformance suite does not show of the Redlock: the safety violation its
//! critics describe, shown happening, with what still holds; how the masters agree on
//! a fence; connecting with a master down; the validity it leaves for clock drift;
//! operations that end by the node time-out with a majority of masters paused; and a
//! grant that lands on a late master after the acquire returned, with the agreed fence.
//! Each test has masters of its own.

use std::time::Duration;

use distlock_conformance::ServerControl as _;
use distlock_core::backend::{FenceDurability, Lease, LockBackendExt};
use distlock_core::{ErrorKind, FencedHandle, Holder, LockBackend, LockKey, MemoryStore};
use distlock_redis::RedlockBackend;
use distlock_testservers::{RedisMasters, ServerHandle};
use futures_util::StreamExt as _;
use tokio::time::Instant;

async fn masters(n: usize) -> RedisMasters {
    RedisMasters::start(n)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A plain driver connection to one master, for looking behind the backend.
async fn admin(member: &ServerHandle) -> redis::aio::MultiplexedConnection {
    redis::Client::open(member.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection")
}

async fn get(member: &ServerHandle, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut admin(member).await)
        .await
        .expect("GET")
}

/// Kleppmann's scenario: the holder has exactly a majority (the third master was down
/// and comes back empty); one of its two masters restarts empty; a second client then
/// gets a majority of its own while the first lease is still valid. The capabilities
/// say so (leases do not survive a restart); what still holds is the fence: the second
/// holder's is higher, so a fenced store refuses the first holder's writes from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_lets_a_second_majority_in_and_fences_still_hold() {
    let masters = masters(3).await;
    let [m0, _m1, m2] = masters.members() else {
        panic!("three masters")
    };
    let backend = RedlockBackend::connect(&masters.url())
        .await
        .expect("connect");
    let caps = backend.capabilities();
    assert!(!caps.leases_survive_restart);
    assert_eq!(caps.fence_durability, FenceDurability::FailsClosed);

    m2.kill().await.expect("kill the third master");
    let first = backend
        .acquire_once("kleppmann", Duration::from_secs(30))
        .await
        .expect("acquire on two of three")
        .expect("free");
    m2.start().await.expect("start it again, empty");
    m0.restart()
        .await
        .expect("restart a master of the holder's majority, empty");

    let other = RedlockBackend::connect(&masters.url())
        .await
        .expect("connect");
    let second = loop {
        match other
            .acquire_once("kleppmann", Duration::from_secs(30))
            .await
        {
            Ok(lease) => break lease,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    };
    let second = second.expect("the restarted master and the returned one make a second majority");
    assert!(
        !first.is_expired(),
        "the first lease is still valid: two holders at once, as the critique says"
    );
    assert!(
        second.fence() > first.fence(),
        "the second holder's fence {} must be above the first's {}",
        second.fence(),
        first.fence()
    );

    let store = MemoryStore::new();
    let late = FencedHandle::new(store.clone(), first.fence());
    let newer = FencedHandle::new(store, second.fence());
    newer
        .write("ledger", b"second")
        .await
        .expect("the newer holder writes");
    let refused = late
        .write("ledger", b"first")
        .await
        .expect_err("the first holder's write comes with a smaller fence");
    assert_eq!(refused.kind(), ErrorKind::StaleFence);
    assert_eq!(
        newer.read("ledger").await.expect("read").as_deref(),
        Some(&b"second"[..])
    );
}

/// Masters whose counters disagree propose different fences; the grant takes the
/// largest and writes it to the masters that proposed less (a second round trip), so
/// that a majority holds it for the next grant to build on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_proposal_becomes_the_fence_on_a_majority() {
    let masters = masters(3).await;
    let [m0, m1, m2] = masters.members() else {
        panic!("three masters")
    };
    let backend = RedlockBackend::connect(&masters.url())
        .await
        .expect("connect");
    let ahead: u64 = 9_000_000_000_000_000;
    let () = redis::cmd("SET")
        .arg("distlock:{agree}:fence")
        .arg(ahead)
        .query_async(&mut admin(m0).await)
        .await
        .expect("raise one master's counter");
    // The majority is the first two masters, so the one ahead is in it.
    m2.kill().await.expect("kill the third master");
    let lease = backend
        .acquire_once("agree", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(lease.fence().get(), ahead + 1);
    // The agreed fence, and the holder stored after it, kept by the commit.
    let expected = format!("{}:{}/", lease.owner().to_hex(), ahead + 1);
    let stored = get(m1, "distlock:{agree}").await.unwrap_or_default();
    assert!(
        stored.starts_with(&expected)
            && stored.ends_with(&format!("/{}/", Holder::this_process().id())),
        "{stored}"
    );
    assert_eq!(
        get(m1, "distlock:{agree}:fence").await,
        Some((ahead + 1).to_string()),
        "the master that proposed less holds the agreed fence"
    );
    let key = LockKey::new("agree").expect("key");
    assert_eq!(
        backend
            .inspect(&key)
            .await
            .expect("inspect")
            .map(|i| i.fence),
        Some(lease.fence())
    );
    backend.release_lease(&lease).await.expect("release");
    let next = backend
        .acquire_once("agree", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(
        next.fence().get(),
        ahead + 2,
        "the counters agree now: one more"
    );
    m2.start().await.expect("start");
}

/// Every master stores the grant time the acquire took once, so that `inspect` and
/// `list` show one grant time whichever masters answer them first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_stores_the_one_grant_time_of_an_acquire() {
    let masters = masters(3).await;
    let backend = RedlockBackend::connect(&masters.url())
        .await
        .expect("connect");
    for i in 0..50 {
        let key = format!("stamped-{i}");
        let lease = backend
            .acquire_once(&key, Duration::from_secs(30))
            .await
            .expect("acquire")
            .expect("free");
        let mut times = Vec::new();
        for member in masters.members() {
            // `<owner>:<fence>/<ms>/<holder>/`, on the masters the grant reached.
            if let Some(stored) = get(member, &format!("distlock:{{{key}}}")).await {
                times.push(stored.split('/').nth(1).unwrap_or_default().to_owned());
            }
        }
        assert!(times.len() >= 2, "a majority holds {key}: {times:?}");
        assert!(
            times.windows(2).all(|w| w[0] == w[1]),
            "the masters stored the grant times {times:?} for {key}"
        );
        backend.release_lease(&lease).await.expect("release");
    }
}

/// A minority down at connect is reached once it is back; a majority down is an
/// error at connect, retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_needs_a_majority_of_the_masters() {
    let masters = masters(3).await;
    let members = masters.members();
    members[0].kill().await.expect("kill");
    let backend = RedlockBackend::connect(&masters.url())
        .await
        .expect("two of three answer");
    let lease = backend
        .acquire_once("connect", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&lease).await.expect("release");
    members[1].kill().await.expect("kill");
    let err = RedlockBackend::connect(&masters.url())
        .await
        .expect_err("one of three answers");
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("1 of 3 masters"), "{err}");
    assert!(!err.to_string().contains(masters.password()), "{err}");
    members[0].start().await.expect("start");
    members[1].start().await.expect("start");
    let lease = backend
        .acquire_once("connect", Duration::from_secs(30))
        .await
        .expect("the first backend reaches the masters once they are back")
        .expect("free");
    assert!(lease.fence().get() > 0);
}

/// A lease's validity is the TTL less the time the acquire took and the clock-drift
/// allowance (1% of the TTL plus 2 ms unless the URL says), counted in core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_leaves_the_declared_clock_drift() {
    let masters = masters(3).await;
    for (query, drift) in [
        ("", Duration::from_millis(102)),
        ("?drift_ppm=50000&drift_ms=0", Duration::from_millis(500)),
    ] {
        let backend = RedlockBackend::connect(&format!("{}{query}", masters.url()))
            .await
            .expect("connect");
        let ttl = Duration::from_secs(10);
        let sent = Instant::now();
        let lease = backend
            .acquire_once(&format!("drift{query}"), ttl)
            .await
            .expect("acquire")
            .expect("free");
        let received = Instant::now();
        assert!(
            received - sent < drift,
            "{query}: the acquire took {:?}, too long to tell the allowance",
            received - sent
        );
        // Counted from between sending and receiving, less the allowance.
        assert!(
            lease.valid_until() >= sent + ttl - drift
                && lease.valid_until() <= received + ttl - drift,
            "{query}: valid for {:?} of a {ttl:?} ttl, sent and answered within {:?}",
            lease.valid_until() - sent,
            received - sent
        );
    }
}

/// Kept as Redis keeps it: `distlock:{key}` holds `<owner>:<fence>`.
const FOREIGN: &str = "0123456789abcdef0123456789abcdef";

/// An attempt that wins only a minority of the masters takes its grants back without
/// telling the key's waiters (no lease was ever held: a release notification would
/// start them all at once, to split the masters again), and says to look again after
/// a short random pause, Redlock's retry delay. A lease really held, found held by a
/// waiter, and released still tells them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_wins_a_minority_takes_its_grants_back_quietly() {
    let masters = masters(3).await;
    let members = masters.members();
    let url = format!("{}?node_timeout_ms=100", masters.url());
    let backend = RedlockBackend::connect(&url).await.expect("connect");
    members[0].kill().await.expect("kill");
    let _: () = redis::cmd("SET")
        .arg("distlock:{split}")
        .arg(format!("{FOREIGN}:5"))
        .arg("PX")
        .arg(30_000)
        .query_async(&mut admin(&members[1]).await)
        .await
        .expect("a foreign lease on one master");
    let mut told = redis::Client::open(members[2].url())
        .expect("url")
        .get_async_pubsub()
        .await
        .expect("pubsub");
    told.subscribe("distlock:released:{split}")
        .await
        .expect("subscribe");
    told.subscribe("distlock:released:{held}")
        .await
        .expect("subscribe");
    let mut messages = told.on_message();

    // Master 0 away, master 1 held by another owner, master 2 granted: a minority.
    let outcome = backend
        .try_acquire(
            &LockKey::new("split").expect("key"),
            Duration::from_secs(30),
        )
        .await
        .expect("an answer");
    let distlock_core::backend::AcquireOutcome::Held {
        remaining: Some(remaining),
    } = outcome
    else {
        panic!("not held with a retry pause: {outcome:?}");
    };
    assert!(
        (Duration::from_millis(100)..=Duration::from_millis(400)).contains(&remaining),
        "{remaining:?}"
    );
    let gone_by = Instant::now() + Duration::from_secs(5);
    while get(&members[2], "distlock:{split}").await.is_some() {
        assert!(
            Instant::now() < gone_by,
            "the minority grant was not taken back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let quiet = tokio::time::timeout(Duration::from_millis(300), messages.next()).await;
    assert!(quiet.is_err(), "a waiter was told: {quiet:?}");

    // A lease held by a majority (masters 1 and 2) that a waiter found held, then
    // released: its waiters are told. (A release nobody waited for tells no one.)
    let lease = backend
        .acquire_once("held", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    let refused = backend
        .try_acquire(&LockKey::new("held").expect("key"), Duration::from_secs(30))
        .await
        .expect("a waiter's try");
    assert!(
        matches!(refused, distlock_core::backend::AcquireOutcome::Held { .. }),
        "{refused:?}"
    );
    backend.release_lease(&lease).await.expect("release");
    let message = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .expect("told of the release")
        .expect("a message");
    assert_eq!(message.get_channel_name(), "distlock:released:{held}");
}

/// Three masters; a backend that waits for each at most 300 ms
/// (`node_timeout_ms=300`); and a lease of `key` it took for 30 s.
async fn three_masters_holding(key: &str) -> (RedisMasters, RedlockBackend, Lease) {
    let masters = masters(3).await;
    let backend = RedlockBackend::connect(&format!("{}?node_timeout_ms=300", masters.url()))
        .await
        .expect("connect");
    let lease = backend
        .acquire_once(key, Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    (masters, backend, lease)
}

/// A master's connection has no response time-out of its own (the Redlock's node
/// time-out bounds every call to a master): with a majority of the masters paused,
/// every operation still ends soon after the node time-out (`node_timeout_ms=300`),
/// never hanging on a master that does not answer. An acquire and an inspect fail
/// with an error that names the time-out; the release reports what the master that
/// answered did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_ends_by_the_node_timeout_when_a_majority_is_paused() {
    let (masters, backend, lease) = three_masters_holding("paused").await;
    let members = masters.members();
    // An acquire returns at a majority: the master left awake is one that holds the lease.
    let mut awake = None;
    for (i, member) in members.iter().enumerate() {
        if get(member, "distlock:{paused}").await.is_some() {
            awake = Some(i);
            break;
        }
    }
    let awake = awake.expect("a master holds the lease");
    let paused: Vec<_> = (0..3).filter(|&i| i != awake).collect();
    for &i in &paused {
        members[i].pause().await.expect("pause");
    }
    let key = LockKey::new("paused").expect("key");
    let bound = Duration::from_millis(300 + 1_000);
    let started = Instant::now();
    let acquired = backend
        .acquire_once("paused-2", Duration::from_secs(30))
        .await;
    let acquire_took = started.elapsed();
    let started = Instant::now();
    let inspected = backend.inspect(&key).await;
    let inspect_took = started.elapsed();
    let started = Instant::now();
    let released = backend.release_lease(&lease).await;
    let release_took = started.elapsed();
    for &i in &paused {
        members[i].unpause().await.expect("unpause");
    }
    for (what, outcome, took) in [
        ("acquire", acquired.map(|_| ()), acquire_took),
        ("inspect", inspected.map(|_| ()), inspect_took),
    ] {
        let err = outcome.expect_err(what);
        assert!(took < bound, "{what} took {took:?}");
        assert!(err.is_retryable(), "{what}: {err}");
        assert!(
            err.to_string().contains("did not answer within"),
            "{what}: {err}"
        );
    }
    // The release reached the one master that answers, yet one master cannot say the
    // lease was held to the end: a retryable error that says so, after waiting for the
    // other two no longer than the node time-out.
    let err = released.expect_err("a release one master of three confirmed");
    assert!(err.is_retryable(), "{err}");
    assert!(
        err.to_string()
            .contains("1 of 3 masters released it, 0 no longer held it and 2 did not answer"),
        "{err}"
    );
    assert!(release_took < bound, "release took {release_took:?}");
    // The one master that answered has let the lease go.
    assert_eq!(get(&members[awake], "distlock:{paused}").await, None);
}

/// A master can miss a grant (one that was away when the acquire ran; one that
/// restarts empty): with that master the only one answering, an inspect is a
/// retryable error, never "free" while a majority holds the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspect_that_reaches_only_a_master_without_the_grant_is_an_error() {
    let (masters, backend, lease) = three_masters_holding("missed").await;
    let members = masters.members();
    // The master that missed the grant: one may have missed it already (an acquire
    // returns at a majority and the last grant lands after); otherwise one restarted
    // empty. The other two hold it with the agreed fence: a master whose grant landed
    // after the acquire returned holds its own proposal, so it is the one restarted
    // where every master holds the lease.
    let agreed = format!(":{}/", lease.fence().get());
    let mut missed = members.len() - 1;
    for (i, member) in members.iter().enumerate() {
        match get(member, "distlock:{missed}").await {
            None => {
                missed = i;
                break;
            }
            Some(stored) if !stored.contains(&agreed) => missed = i,
            Some(_) => {}
        }
    }
    members[missed].restart().await.expect("restart");
    assert_eq!(get(&members[missed], "distlock:{missed}").await, None);
    let holding: Vec<usize> = (0..members.len()).filter(|&i| i != missed).collect();
    for &i in &holding {
        assert!(
            get(&members[i], "distlock:{missed}").await.is_some(),
            "master {i}"
        );
        members[i].pause().await.expect("pause");
    }
    let key = LockKey::new("missed").expect("key");
    let inspected = backend.inspect(&key).await;
    for &i in &holding {
        members[i].unpause().await.expect("unpause");
    }
    let err = inspected.expect_err("one master of three, without the grant, answered");
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("cannot inspect"), "{err}");
    // With every master answering, the majority's holder shows.
    let info = backend.inspect(&key).await.expect("inspect").expect("held");
    assert_eq!(info.fence, lease.fence());
    backend.release_lease(&lease).await.expect("release");
}

/// An acquire returns once a majority has granted, and the grant still under way on
/// the last master lands there too: here that master answers late (paused) and has
/// forgotten the script, so its grant takes a second request, sent after the acquire
/// has returned. Holding all three, the holder keeps a majority when one of the first
/// two restarts empty, and a second client stays out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_still_under_way_lands_after_the_acquire_returns() {
    let masters = masters(3).await;
    let [m0, _m1, m2] = masters.members() else {
        panic!("three masters")
    };
    let url = format!("{}?node_timeout_ms=5000", masters.url());
    let backend = RedlockBackend::connect(&url).await.expect("connect");
    let warm = backend
        .acquire_once("warm", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&warm).await.expect("release");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin(m2).await)
        .await
        .expect("SCRIPT FLUSH");
    m2.pause().await.expect("pause");
    let lease = backend
        .acquire_once("late", Duration::from_secs(30))
        .await
        .expect("acquire on the two awake masters")
        .expect("free");
    m2.unpause().await.expect("unpause");
    let landed_by = Instant::now() + Duration::from_secs(3);
    while get(m2, "distlock:{late}").await.is_none() {
        assert!(
            Instant::now() < landed_by,
            "the grant under way on the late master never landed there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    m0.restart()
        .await
        .expect("restart a master that granted first, empty");
    let other = RedlockBackend::connect(&url).await.expect("connect");
    let refused = loop {
        match other
            .try_acquire(&LockKey::new("late").expect("key"), Duration::from_secs(30))
            .await
        {
            Ok(outcome) => break outcome,
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("{e}"),
        }
    };
    assert!(
        matches!(refused, distlock_core::backend::AcquireOutcome::Held { .. }),
        "a second client got the key from a holder of two masters of three: {refused:?}"
    );
    backend.release_lease(&lease).await.expect("release");
}

/// A master that grants after the acquire returned takes the fence the majority agreed
/// on, not its own proposal: here its counter is far ahead, so its proposal differs.
/// A retry by the same owner (a lost reply, a leader resuming its term) that this late
/// master answers, with one of the first two, still answers the agreed fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_master_takes_the_agreed_fence_so_a_retry_answers_it() {
    let masters = masters(3).await;
    let [_m0, m1, m2] = masters.members() else {
        panic!("three masters")
    };
    let ttl = Duration::from_secs(30);
    let (backend, key, lease, ahead) = granted_past_a_late_master(&masters, "retried", ttl).await;
    assert!(
        lease.fence().get() < ahead,
        "the majority agreed on its own fence"
    );
    m2.unpause().await.expect("unpause");
    let expected = format!("{}:{}/", lease.owner().to_hex(), lease.fence());
    let landed_by = Instant::now() + Duration::from_secs(3);
    loop {
        let stored = get(m2, "distlock:{retried}").await.unwrap_or_default();
        if stored.starts_with(&expected) {
            break;
        }
        assert!(
            Instant::now() < landed_by,
            "the late master holds {stored:?}, not the agreed fence {}",
            lease.fence()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The retry reaches the first master and the late one only.
    m1.pause().await.expect("pause");
    let retried = backend
        .try_acquire_as(&key, ttl, *lease.owner())
        .await
        .expect("retry by owner");
    m1.unpause().await.expect("unpause");
    match retried {
        distlock_core::backend::AcquireOutcome::Acquired(again) => assert_eq!(
            again.fence(),
            lease.fence(),
            "the retry by the owner answered another fence"
        ),
        other => panic!("the retry by the owner was refused: {other:?}"),
    }
    backend.release_lease(&lease).await.expect("release");
}

/// A grant of `name` for `ttl` on the first two of three masters, the third paused
/// (and left paused) with its fence counter far ahead (the counter is returned last),
/// so that its proposal, once it grants, differs from the agreed fence.
async fn granted_past_a_late_master(
    masters: &RedisMasters,
    name: &str,
    ttl: Duration,
) -> (RedlockBackend, LockKey, Lease, u64) {
    let [_, _, late] = masters.members() else {
        panic!("three masters")
    };
    let url = format!("{}?node_timeout_ms=5000", masters.url());
    let backend = RedlockBackend::connect(&url).await.expect("connect");
    let ahead: u64 = 9_000_000_000_000_000;
    let () = redis::cmd("SET")
        .arg(format!("distlock:{{{name}}}:fence"))
        .arg(ahead)
        .query_async(&mut admin(late).await)
        .await
        .expect("raise the late master's counter");
    late.pause().await.expect("pause");
    let key = LockKey::new(name).expect("key");
    let lease = backend
        .acquire_once(name, ttl)
        .await
        .expect("acquire on the two awake masters")
        .expect("free");
    (backend, key, lease, ahead)
}
