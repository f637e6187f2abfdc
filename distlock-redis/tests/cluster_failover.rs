//! A Redis Cluster master killed and failed over to its replica: the backend follows
//! the new master, the lease is there or (replication being asynchronous) lost, and
//! fences keep rising either way.

mod support;

use std::time::Duration;

use distlock_conformance::ServerControl as _;
use distlock_core::backend::{AcquireOutcome, ExtendOutcome, LockBackendExt, ReleaseOutcome};
use distlock_core::LockKey;
use distlock_redis::RedisBackend;
use distlock_testservers::{RedisCluster, ServerHandle};
use support::until_served;

/// `cmd` on `member` alone (a key another member serves answers MOVED, an error).
async fn query<T: redis::FromRedisValue>(
    member: &ServerHandle,
    cmd: &mut redis::Cmd,
) -> redis::RedisResult<T> {
    let url = member
        .direct_url()
        .expect("a cluster member has a direct address");
    let mut conn = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("admin connection");
    cmd.query_async(&mut conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_keeps_the_backend_working_and_fences_rising() {
    let cluster = RedisCluster::start_with_replicas(3, 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let backend = RedisBackend::connect(&cluster.url())
        .await
        .expect("connect");
    let key = LockKey::new("failover").expect("key");
    let ttl = Duration::from_secs(30);
    let AcquireOutcome::Acquired(holder) = backend.try_acquire(&key, ttl).await.expect("acquire")
    else {
        panic!("a fresh key was held")
    };
    // The master serving the key.
    let mut master = None;
    for member in cluster.members() {
        let role: Vec<redis::Value> = query(member, &mut redis::cmd("ROLE")).await.expect("ROLE");
        let is_master = matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master");
        let exists: i64 = query(member, redis::cmd("EXISTS").arg("distlock:{failover}"))
            .await
            .unwrap_or(0);
        if is_master && exists == 1 {
            master = Some(member.clone());
        }
    }
    let master = master.expect("one master serves the key");
    master.kill().await.expect("kill the key's master");

    let url = cluster.url();
    let other = until_served("connect after the kill", || RedisBackend::connect(&url)).await;
    let outcome = until_served("acquire after the failover", || {
        other.try_acquire(&key, ttl)
    })
    .await;
    let next = match outcome {
        AcquireOutcome::Held { .. } => {
            eprintln!("the replica had the lease when it took over");
            // The replica had the lease: the holder keeps it, extends and releases it.
            let extended =
                until_served("extend after the failover", || backend.extend(&holder, ttl)).await;
            assert!(
                matches!(extended, ExtendOutcome::Extended(_)),
                "the replicated lease could not be extended"
            );
            let released = until_served("release after the failover", || {
                backend.release_lease(&holder)
            })
            .await;
            assert_eq!(released, ReleaseOutcome::Released);
            match until_served("acquire once released", || other.try_acquire(&key, ttl)).await {
                AcquireOutcome::Acquired(next) => next,
                AcquireOutcome::Held { .. } => panic!("the key stayed held after its release"),
            }
        }
        // Replication is asynchronous: the grant was lost with the master, as the docs
        // say. The holder learns it at its next renewal.
        AcquireOutcome::Acquired(next) => {
            eprintln!("the lease was lost with the master");
            let extended =
                until_served("extend after the failover", || backend.extend(&holder, ttl)).await;
            assert!(matches!(extended, ExtendOutcome::NotHeld));
            next
        }
    };
    assert!(
        next.fence() > holder.fence(),
        "the fence {} after the failover is not above {}",
        next.fence(),
        holder.fence()
    );
    other.release_lease(&next).await.expect("release");
}
