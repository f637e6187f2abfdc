//! What the conformance suite does not cover: a three-member cluster losing its leader,
//! an unreachable endpoint, and etcd's fixed lease TTL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_conformance::{LinkedClient, ServerControl as _, Target};
use distlock_core::backend::{
    AcquireOutcome, ExtendOutcome, LockBackendExt, OwnerToken, ReleaseOutcome,
};
use distlock_core::{ErrorKind, LockBackend, LockClient, LockKey, LockOptions};
use distlock_etcd::EtcdBackend;
use distlock_testservers::{Etcd, EtcdCluster, ServerHandle};

/// A client of `server` of the test's own, straight through etcd-client: to act on
/// the server from outside the backend.
async fn outside_client(server: &ServerHandle) -> etcd_client::Client {
    let endpoint = server.url().replacen("etcd://", "http://", 1);
    etcd_client::Client::connect([endpoint], None)
        .await
        .expect("a client of its own")
}

/// A server of its own: its conformance target, one of the target's clients behind a
/// link the test controls, and a client acting from outside.
async fn linked_with_outside() -> (Target, LinkedClient, etcd_client::Client) {
    let server = ServerHandle::start(&Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let outside = outside_client(&server).await;
    let target =
        distlock_testservers::target_on(
            server,
            |url| async move { EtcdBackend::connect(&url).await },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let linked = target
        .linked_client()
        .await
        .expect("etcd's target has links")
        .expect("a linked client");
    (target, linked, outside)
}

/// Revokes every lease on the server, round after round 20 ms apart, until `until` or
/// until `done` says so of the count revoked so far: that count.
async fn revoke_every_lease(
    outside: &mut etcd_client::Client,
    until: Instant,
    done: impl Fn(usize) -> bool,
) -> usize {
    let mut revoked = 0;
    while Instant::now() < until && !done(revoked) {
        for lease in outside.leases().await.expect("leases").leases() {
            outside.lease_revoke(lease.id()).await.expect("revoke");
            revoked += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    revoked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_its_fence_survive_the_loss_of_the_leader() {
    let cluster = EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = Arc::new(EtcdBackend::connect(&cluster.url()).await.expect("connect"));
    let ttl = Duration::from_secs(5);
    let client = LockClient::with_options(backend.clone(), LockOptions::new(ttl)).expect("options");
    let guard = client
        .lock("ledger", Duration::from_secs(10))
        .await
        .expect("acquire");
    let fence = guard.fence();

    // Find the leader: the member whose own ID is the leader ID it reports.
    let mut leader = None;
    for (i, member) in cluster.members().iter().enumerate() {
        let endpoint = format!("http://127.0.0.1:{}", member.host_port());
        let mut one = etcd_client::Client::connect([endpoint], None)
            .await
            .expect("member");
        let status = one.status().await.expect("status");
        let own = status.header().map(|h| h.member_id()).unwrap_or_default();
        if status.leader() == own {
            leader = Some(i);
        }
    }
    let leader = leader.expect("a leader");
    cluster.members()[leader]
        .kill()
        .await
        .expect("stop the leader");
    let stopped = Instant::now();

    // Two TTLs later the lock is still held, renewed through the new leader.
    tokio::time::sleep(ttl * 2).await;
    assert!(
        guard.is_held(),
        "the lock was lost with the leader: {:?}",
        guard.loss()
    );
    let key = LockKey::new("ledger").expect("key");
    let info = backend.inspect(&key).await.expect("inspect").expect("held");
    assert_eq!(info.fence, fence, "the fence changed across the failover");
    assert!(stopped.elapsed() >= ttl * 2);
    // With a member down, no request may fail for having been routed to it.
    for i in 0..20 {
        let info = backend
            .inspect(&key)
            .await
            .unwrap_or_else(|e| panic!("inspect {i} with a member down: {e}"));
        assert_eq!(info.map(|i| i.fence), Some(fence));
    }

    guard.release().await.expect("release");
    let next = backend
        .acquire_once("ledger", ttl)
        .await
        .expect("acquire after failover")
        .expect("free after release");
    assert!(next.fence() > fence, "{:?} after {:?}", next.fence(), fence);
}

/// A client configured with every member connects while one of them is down, as a
/// service restarted during a member's outage does: the balancer may route the
/// connection's first request to the dead member, and that must not fail it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_connects_while_a_member_is_down() {
    let mut cluster = EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let stopped = cluster
        .stop_leader()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 0..12 {
        let backend = EtcdBackend::connect(&cluster.url())
            .await
            .unwrap_or_else(|e| panic!("connect {i} with member {stopped} down: {e}"));
        let lease = backend
            .acquire_once("connect-while-down", Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("acquire {i} with member {stopped} down: {e}"))
            .expect("free");
        backend.release_lease(&lease).await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_a_typed_error_in_bounded_time() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let started = Instant::now();
    let err = EtcdBackend::connect(&format!(
        "etcd://127.0.0.1:{port}?connect_timeout_ms=1000&timeout_ms=1000"
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_renews_to_the_granted_ttl_only() {
    let server = ServerHandle::start(&Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = EtcdBackend::connect(&server.url()).await.expect("connect");
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
    let odd = backend
        .acquire_once("odd", Duration::from_millis(2500))
        .await
        .expect_err("half seconds");
    assert_eq!(odd.kind(), ErrorKind::InvalidTtl);
}

/// A server whose certificate another CA signed is refused at connect, as a
/// configuration error (not retryable); trusting the right CA, the same server is
/// reached.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_of_another_ca_is_a_configuration_error() {
    let tls = distlock_testservers::TlsMaterial::generate().expect("certificates");
    let server = ServerHandle::start_tls(&distlock_testservers::Etcd, &tls)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let wrong = server.tls_url(&tls, &tls.wrong_ca_file()).expect("url");
    let err = EtcdBackend::connect(&wrong).await.expect_err("another CA");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let right = server.tls_url(&tls, &tls.ca_file()).expect("url");
    EtcdBackend::connect(&right).await.expect("the right CA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_puts_to_the_users_own_keys_keep_a_fixed_width_fence_beside_them() {
    use distlock_core::FencingToken;
    use distlock_etcd::fenced::EtcdStore;

    let server = ServerHandle::start(&Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = EtcdBackend::connect(&server.url()).await.expect("connect");
    let store = EtcdStore::new(&backend);
    let f = FencingToken::new;

    store.put("config/feature", f(9), b"on").await.expect("put");
    store
        .put("config/feature", f(10), b"off")
        .await
        .expect("put");
    let stale = store
        .put("config/feature", f(9), b"on")
        .await
        .expect_err("9 after 10");
    assert_eq!(stale.kind(), ErrorKind::StaleFence, "{stale}");
    // No write through a name reaches a fence: a key that names the fence key is
    // refused, and the stale holder stays stale.
    let named = store
        .put(
            &store.fence_key("config/feature"),
            f(11),
            b"00000000000000000000",
        )
        .await
        .expect_err("a key under the fence prefix");
    assert_eq!(named.kind(), ErrorKind::InvalidKey, "{named}");
    let stale = store
        .put("config/feature", f(9), b"on")
        .await
        .expect_err("still 9 after 10");
    assert_eq!(stale.kind(), ErrorKind::StaleFence, "{stale}");

    let mut raw = etcd_client::Client::connect([server.url().replace("etcd://", "http://")], None)
        .await
        .expect("raw client");
    let value = raw.get("config/feature", None).await.expect("get");
    assert_eq!(value.kvs()[0].value(), b"off");
    let fence = raw
        .get(store.fence_key("config/feature"), None)
        .await
        .expect("get fence");
    assert_eq!(fence.kvs()[0].value(), b"00000000000000000010");

    // A claiming read raises the fence; the holder of 10 is then refused.
    assert_eq!(
        store
            .get("config/feature", f(11))
            .await
            .expect("claim")
            .as_deref(),
        Some(&b"off"[..])
    );
    let stale = store
        .put("config/feature", f(10), b"late")
        .await
        .expect_err("10 after a claim under 11");
    assert_eq!(stale.kind(), ErrorKind::StaleFence);
    assert_eq!(
        store.put("", f(12), b"x").await.expect_err("empty").kind(),
        ErrorKind::InvalidKey
    );
}

/// An acquisition whose lease is gone from the server before the transaction that
/// writes its grant arrives (here revoked from outside while the link is slow; in the
/// soak, expired under a paused server) is a retryable `Timeout` that leaves nothing
/// held: etcd refuses the transaction ("requested lease not found"), which was
/// reported as a backend error that no waiter retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_whose_lease_is_gone_before_its_grant_is_a_timeout() {
    let (target, (linked, link), mut outside) = linked_with_outside().await;
    let key = LockKey::new("stalled-grant").expect("key");
    // 0.8 s each way: the lease is granted 0.8 s in, and the transaction that writes
    // the grant reaches the server 1.6 s later. Meanwhile every lease is revoked.
    link.set_latency(Duration::from_millis(800))
        .await
        .expect("latency");
    let acquire =
        tokio::spawn(async move { linked.try_acquire(&key, Duration::from_secs(5)).await });
    let until = Instant::now() + Duration::from_millis(2000);
    let revoked = revoke_every_lease(&mut outside, until, |revoked| revoked > 0).await;
    let outcome = acquire.await.expect("the acquisition's task");
    link.set_latency(Duration::ZERO).await.expect("no latency");
    assert!(revoked > 0, "no lease was seen to revoke");
    let err = outcome.expect_err("a grant whose lease was gone");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_retryable(), "{err}");
    let key = LockKey::new("stalled-grant").expect("key");
    assert!(
        target
            .backend()
            .inspect(&key)
            .await
            .expect("inspect")
            .is_none(),
        "the key is held after a failed acquisition"
    );
}

/// A member that goes silent (its link cut: no answer, no error) holds each request
/// the channel routes to it until the response time-out, no longer, and the request
/// fails retryably; sent again as the same owner, each step is served by the members
/// that answer. A client that reaches one member of three, whose majority serves it,
/// takes, extends and gives back a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_gone_silent_costs_a_retryable_error_within_the_response_time_out() {
    let cluster = EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let target = cluster
        .target(|url: String| async move { EtcdBackend::connect(&url).await })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (client, links) = target
        .member_linked_client()
        .await
        .expect("a target with members")
        .unwrap_or_else(|e| panic!("{e}"));
    let warm = LockKey::new("warm-up").expect("key");
    client.inspect(&warm).await.expect("inspect");
    for link in &links[..2] {
        link.cut().await.expect("cut");
    }
    let ttl = Duration::from_secs(10);
    let mut failed = 0;
    for round in 0..1 {
        let key = LockKey::new(format!("silent-{round}")).expect("key");
        let owner = OwnerToken::random();
        let lease = match step(&mut failed, "acquire", || {
            client.try_acquire_as(&key, ttl, owner)
        })
        .await
        {
            AcquireOutcome::Acquired(lease) => lease,
            held => panic!("round {round}: a fresh key answered {held:?}"),
        };
        let extended = step(&mut failed, "extend", || client.extend(&lease, ttl)).await;
        assert!(
            matches!(extended, ExtendOutcome::Extended(_)),
            "round {round}: extend answered {extended:?}"
        );
        // Released, or not held where an attempt that failed had released it.
        step(&mut failed, "release", || client.release_lease(&lease)).await;
    }
    for link in &links {
        link.heal().await.expect("heal");
    }
    eprintln!("with two of three links cut: {failed} attempts failed retryably");
}

/// One step, sent again after each retryable failure (twenty times at most), each
/// attempt answering or failing within the response time-out (5 s) and a second's
/// slack.
async fn step<T, F, Fut>(failed: &mut usize, what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = distlock_core::Result<T>>,
{
    let within = Duration::from_secs(6);
    for _ in 0..20 {
        let started = Instant::now();
        let answer = tokio::time::timeout(within, op())
            .await
            .unwrap_or_else(|_| panic!("{what} outlived the response time-out"));
        match answer {
            Ok(value) => return value,
            Err(e) => {
                assert!(e.is_retryable(), "{what} failed for good: {e}");
                assert!(started.elapsed() < within, "{what} failed late: {e}");
                *failed += 1;
            }
        }
    }
    panic!("{what} failed twenty times in a row");
}

/// The harness's partition of a member from the rest of its cluster (what the torture
/// run's "member isolated" fault does): the leader cut off from the two other members
/// loses the lead to one of them, while a client still reaches it and it answers; a
/// lock taken through the whole cluster meanwhile is served by the majority; back
/// with the others, it follows the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_loses_the_lead_while_clients_still_reach_it() {
    use distlock_testservers::Roles as _;

    let cluster = EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let leader = cluster.leader().await.expect("a leader");
    cluster
        .isolate(leader)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let give_up = Instant::now() + Duration::from_secs(30);
    let next = loop {
        match cluster.leader().await {
            Some(next) if next != leader => break next,
            _ if Instant::now() > give_up => panic!("member {leader} still led after 30 s"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    // The isolated member still answers a client on its own port, and no longer leads.
    let own = format!("http://127.0.0.1:{}", cluster.members()[leader].host_port());
    let mut alone = etcd_client::Client::connect([own], None)
        .await
        .expect("the isolated member reached");
    let status = alone.status().await.expect("the isolated member answers");
    let id = status.header().map(|h| h.member_id()).unwrap_or_default();
    assert_ne!(
        status.leader(),
        id,
        "the isolated member still says it leads"
    );
    let backend = EtcdBackend::connect(&cluster.url()).await.expect("connect");
    let lease = retry(|| backend.acquire_once("isolated", Duration::from_secs(5))).await;
    // A release routed to the isolated member fails retryably too; one that was
    // applied with its reply lost answers "not held" when sent again.
    let mut released = false;
    for _ in 0..20 {
        match backend.release_lease(&lease).await {
            Ok(_) => {
                released = true;
                break;
            }
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    assert!(released, "no release in twenty attempts");
    cluster
        .rejoin(leader)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let give_up = Instant::now() + Duration::from_secs(30);
    loop {
        let status = alone.status().await.expect("the member answers");
        if status.leader() != 0 && status.leader() != id {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "member {leader} follows nobody after rejoining"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("member {leader} isolated; member {next} led next");
}

/// `op` until it acquires (a request routed to the isolated member fails retryably,
/// each within the response time-out).
async fn retry<F, Fut>(mut op: F) -> distlock_core::backend::Lease
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = distlock_core::Result<Option<distlock_core::backend::Lease>>>,
{
    for _ in 0..20 {
        match op().await {
            Ok(Some(lease)) => return lease,
            Ok(None) => panic!("a fresh key was held"),
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    panic!("no grant in twenty attempts");
}

/// A renewal sent right after the grant, through a client balanced over every member,
/// of a lock and of a semaphore's permit: the renewal's check that the key is still the
/// owner's may reach a member that has not applied the grant yet, and must still find
/// it (a renewal that answers "not held" there reports a lock lost that nobody took).
/// Many clients at once keep the members' apply loops busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_right_after_the_grant_finds_it_on_a_cluster() {
    let cluster = EtcdCluster::start(3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = Arc::new(EtcdBackend::connect(&cluster.url()).await.expect("connect"));
    let ttl = Duration::from_secs(2);
    // The guards' own renewal would wait a third of the TTL: each extend here is the
    // first renewal, sent as soon as the grant came back.
    let client = LockClient::with_options(backend, LockOptions::new(ttl).with_auto_renew(false))
        .expect("options");
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let client = client.clone();
            tokio::spawn(async move {
                let (mut lost, mut answered) = (Vec::new(), 0);
                for round in 0..40 {
                    let name = format!("renew-now-{task}-{round}");
                    let guard = if round % 2 == 0 {
                        client.lock(&name, Duration::from_secs(10)).await
                    } else {
                        let semaphore = client.semaphore(&name, 2).expect("semaphore");
                        semaphore.acquire(Duration::from_secs(10)).await
                    };
                    let guard = guard.unwrap_or_else(|e| panic!("{name}: {e}"));
                    match guard.extend(ttl).await {
                        Ok(()) => answered += 1,
                        Err(e) if e.kind() == ErrorKind::NotHeld => lost.push(name),
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("{name}: {e}"),
                    }
                    let _ = guard.release().await;
                }
                (lost, answered)
            })
        })
        .collect();
    let (mut lost, mut answered) = (Vec::new(), 0);
    for task in tasks {
        let (l, a) = task.await.expect("task");
        lost.extend(l);
        answered += a;
    }
    assert!(
        lost.is_empty(),
        "{} of 640 renewals right after the grant answered not held: {:?}",
        lost.len(),
        &lost[..lost.len().min(6)]
    );
    // A renewal that failed retryably is left out; enough must have answered to judge.
    assert!(answered >= 320, "only {answered} of 640 renewals answered");
}

/// The lease ID distlock-etcd gives an owner (the token's first 63 bits, never zero).
fn lease_of(owner: &OwnerToken) -> i64 {
    let b = owner.as_bytes();
    let raw = i64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) & i64::MAX;
    raw.max(1)
}

/// A permit step (here an election's resume) of an owner whose lease an earlier step
/// left live without its grant on it (granted, then the transaction that writes the
/// grant never landed: here granted from outside) restarts that lease before it grants
/// on it: the validity the client counts from this step is the server's. It was granted
/// on the old lease as it stood: 2 s left on the server, 6 s counted by the client, so
/// a rival was elected while the resumed leader still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_step_on_a_live_lease_of_its_owner_restarts_it() {
    let server = ServerHandle::start(&Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut outside = outside_client(&server).await;
    let backend = Arc::new(EtcdBackend::connect(&server.url()).await.expect("connect"));
    let ttl = Duration::from_secs(6);
    let owner = OwnerToken::random();
    let id = lease_of(&owner);
    outside
        .lease_grant(6, Some(etcd_client::LeaseGrantOptions::new().with_id(id)))
        .await
        .expect("the owner's lease, from an earlier step");
    tokio::time::sleep(Duration::from_secs(4)).await;

    let options = LockOptions::new(ttl).with_auto_renew(false);
    let election = LockClient::with_options(backend.clone(), options)
        .expect("a client")
        .election("stale-lease")
        .expect("an election");
    let token: distlock_core::ResumeToken = format!("1.{}", owner.to_hex())
        .parse()
        .expect("a resume token");
    let leader = election
        .resume(&token, "a")
        .await
        .expect("an answer")
        .expect("nobody leads: a new term of this owner");
    let counted = leader
        .valid_until()
        .saturating_duration_since(tokio::time::Instant::now());
    let on_server = outside
        .lease_time_to_live(id, None)
        .await
        .expect("the lease's time to live")
        .ttl();
    let on_server = Duration::from_secs(u64::try_from(on_server).unwrap_or(0));
    // etcd counts whole seconds: a second's room.
    assert!(
        on_server + Duration::from_secs(1) >= counted,
        "the server keeps the leader's lease {on_server:?}, the client counts {counted:?}"
    );
    leader.resign().await.expect("resigned");
}

/// A permit grant whose lease is gone before its transaction lands (revoked from
/// outside while the link is slow) is a retryable `Timeout` that leaves nothing held,
/// as a lock's is: etcd refuses the transaction ("requested lease not found"), which
/// was a backend error no waiter retried, so a leader loop stopped campaigning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_grant_whose_lease_is_gone_before_its_transaction_is_a_timeout() {
    let (target, (linked, link), mut outside) = linked_with_outside().await;
    let semaphore = LockClient::with_options(linked, LockOptions::new(Duration::from_secs(5)))
        .expect("a client")
        .semaphore("stalled-permit", 2)
        .expect("a semaphore");
    // 0.8 s each way: the lease is granted 0.8 s in, the name read 1.6 s later, and the
    // transaction that writes the grant reaches the server 1.6 s after that.
    link.set_latency(Duration::from_millis(800))
        .await
        .expect("latency");
    let acquire = tokio::spawn(async move { semaphore.try_acquire().await.map(|g| g.is_ok()) });
    let until = Instant::now() + Duration::from_millis(3000);
    let revoked = revoke_every_lease(&mut outside, until, |_| acquire.is_finished()).await;
    let outcome = acquire.await.expect("the acquisition's task");
    link.set_latency(Duration::ZERO).await.expect("no latency");
    assert!(revoked > 0, "no lease was seen to revoke");
    let err = outcome.expect_err("a grant whose lease was gone");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_retryable(), "{err}");
    let holders = LockClient::new(target.backend().clone())
        .semaphore("stalled-permit", 2)
        .expect("a semaphore")
        .holders()
        .await
        .expect("holders");
    assert!(
        holders.is_empty(),
        "a permit is held after a failed grant: {holders:?}"
    );
}

/// An early release's step is a lease grant, then a transaction that moves the key
/// onto that lease. Where the transaction was applied and its reply lost (the step
/// given up by the backend's own response time-out), the key stays on the fresh lease
/// for the hold asked: the failed step does not revoke the lease the key now lives
/// on, which would free the key within its hold. The owner's retry answers released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_release_whose_transaction_reply_was_lost_keeps_the_key_for_the_hold() {
    let server = ServerHandle::start(&Etcd)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let proxy = distlock_testservers::Proxy::start(server.host_port())
        .await
        .expect("a proxy");
    let url = server.server().url(proxy.port(), server.password());
    let linked = EtcdBackend::connect(&format!("{url}?response_timeout_ms=2000"))
        .await
        .expect("connect through the proxy");
    let direct = EtcdBackend::connect(&server.url()).await.expect("connect");
    let key = LockKey::new("early-release-lost-transaction").expect("a key");
    let lease = match linked.try_acquire(&key, Duration::from_secs(60)).await {
        Ok(AcquireOutcome::Acquired(lease)) => lease,
        other => panic!("a free key: {other:?}"),
    };
    let hold = Duration::from_secs(8);
    // The lease grant's reply passes; the transaction's is held.
    proxy.hold_replies_after(1);
    let sent = Instant::now();
    let lost = tokio::time::timeout(
        Duration::from_secs(5),
        linked.release_lease_after(&lease, hold),
    )
    .await;
    distlock_conformance::LinkControl::heal(&proxy)
        .await
        .expect("heal");
    assert!(
        matches!(lost, Ok(Err(ref e)) if e.is_retryable()),
        "the step whose reply was held: {lost:?}"
    );
    // What the failed step does after it gives up has had time to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kept = direct.inspect(&key).await.expect("inspect");
    let kept = kept.unwrap_or_else(|| {
        panic!(
            "the key was free {:?} after an early release to {hold:?} whose transaction's reply was lost",
            sent.elapsed()
        )
    });
    assert_eq!(kept.fence, lease.fence());
    assert!(
        kept.remaining <= hold + Duration::from_secs(1),
        "the transaction was not applied: the key keeps {:?}",
        kept.remaining
    );
    let retried = linked
        .release_lease_after(&lease, hold)
        .await
        .expect("the retry");
    assert_eq!(retried, ReleaseOutcome::Released);
    // Free once the hold has passed from the first send, not before.
    loop {
        let at = Instant::now();
        if let AcquireOutcome::Acquired(next) = direct
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .expect("acquire")
        {
            assert!(
                at + Duration::from_millis(200) >= sent + hold,
                "the key was free {:?} after an early release to {hold:?}",
                at - sent
            );
            assert!(next.fence() > lease.fence());
            break;
        }
        assert!(
            sent.elapsed() < hold + Duration::from_secs(4),
            "the key was still taken {:?} after an early release to {hold:?}",
            sent.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
