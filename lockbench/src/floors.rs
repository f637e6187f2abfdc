//! The raw floors: the fewest round trips a lock cycle can take on each server, on the
//! same driver the backend uses, with none of distlock in the way.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use sqlx::Connection;
use tokio::time::Instant;

use crate::stats::Summary;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A named floor measurement.
pub(crate) struct Floor {
    pub(crate) name: &'static str,
    pub(crate) summary: Summary,
}

async fn measure<F, Fut>(cycles: usize, mut cycle: F) -> Result<Summary, BoxError>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>>,
{
    let mut samples = Vec::with_capacity(cycles);
    let started = Instant::now();
    for n in 0..cycles {
        let t = Instant::now();
        cycle(n).await?;
        samples.push(t.elapsed());
    }
    Ok(Summary::of(samples, started.elapsed()))
}

fn owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Redis: `PING`; and `SET NX PX` then the compare-and-delete script.
pub(crate) async fn redis(url: &str, cycles: usize) -> Result<Vec<Floor>, BoxError> {
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    let release = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let ping = measure(cycles, |_| {
        let mut conn = conn.clone();
        async move {
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
            Ok(())
        }
    })
    .await?;
    let run: u32 = rand::random();
    let cycle = measure(cycles, |n| {
        let (mut conn, release) = (conn.clone(), release.clone());
        async move {
            let key = format!("floor:{run:08x}:{n}");
            let owner = owner();
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&owner)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut conn)
                .await?;
            if set.is_none() {
                return Err("the floor key was taken".into());
            }
            let _: i64 = release
                .key(&key)
                .arg(&owner)
                .invoke_async(&mut conn)
                .await?;
            Ok(())
        }
    })
    .await?;
    Ok(vec![
        Floor {
            name: "PING (one round trip)",
            summary: ping,
        },
        Floor {
            name: "SET NX PX + compare-and-delete",
            summary: cycle,
        },
    ])
}

/// PostgreSQL: `SELECT 1`; the bare insert-or-nothing and delete statements on a lock
/// table; and the advisory-lock pair users would pick instead.
pub(crate) async fn postgres(url: &str, cycles: usize) -> Result<Vec<Floor>, BoxError> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS lockbench_floor (key text PRIMARY KEY, owner bytea NOT NULL, expires_at timestamptz NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let mut ping: Vec<Duration> = Vec::with_capacity(cycles);
    let mut table: Vec<Duration> = Vec::with_capacity(cycles);
    let mut advisory: Vec<Duration> = Vec::with_capacity(cycles);
    let run: u32 = rand::random();
    let started = Instant::now();
    for _ in 0..cycles {
        let t = Instant::now();
        let _: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&mut conn).await?;
        ping.push(t.elapsed());
    }
    let ping_wall = started.elapsed();
    let started = Instant::now();
    for n in 0..cycles {
        let key = format!("floor:{run:08x}:{n}");
        let owner = rand::random::<u128>().to_be_bytes();
        let t = Instant::now();
        let got = sqlx::query(
            "INSERT INTO lockbench_floor VALUES ($1, $2, clock_timestamp() + interval '30 seconds') ON CONFLICT DO NOTHING",
        )
        .bind(&key)
        .bind(&owner[..])
        .execute(&mut conn)
        .await?;
        if got.rows_affected() != 1 {
            return Err("the floor key was taken".into());
        }
        sqlx::query("DELETE FROM lockbench_floor WHERE key = $1 AND owner = $2")
            .bind(&key)
            .bind(&owner[..])
            .execute(&mut conn)
            .await?;
        table.push(t.elapsed());
    }
    let table_wall = started.elapsed();
    let started = Instant::now();
    for n in 0..cycles {
        let id = i64::from(run) << 20 | i64::try_from(n).unwrap_or(0);
        let t = Instant::now();
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(id)
            .fetch_one(&mut conn)
            .await?;
        if !got {
            return Err("the advisory lock was taken".into());
        }
        let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .fetch_one(&mut conn)
            .await?;
        advisory.push(t.elapsed());
    }
    let advisory_wall = started.elapsed();
    Ok(vec![
        Floor {
            name: "SELECT 1 (one round trip)",
            summary: Summary::of(ping, ping_wall),
        },
        Floor {
            name: "bare INSERT + DELETE on a lock table",
            summary: Summary::of(table, table_wall),
        },
        Floor {
            name: "pg_try_advisory_lock + pg_advisory_unlock",
            summary: Summary::of(advisory, advisory_wall),
        },
    ])
}

/// etcd: a `get`; a lease grant with a put-if-absent and a delete transaction; and
/// etcd's own Lock API (lease grant, lock, unlock).
pub(crate) async fn etcd(endpoint: &str, cycles: usize) -> Result<Vec<Floor>, BoxError> {
    let client = etcd_client::Client::connect([endpoint], None).await?;
    let run: u32 = rand::random();
    let ping = measure(cycles, |_| {
        let mut c = client.clone();
        async move {
            c.get("floor-ping", None).await?;
            Ok(())
        }
    })
    .await?;
    let txn = measure(cycles, |n| {
        let mut c = client.clone();
        async move {
            let key = format!("floor/{run:08x}/{n}");
            let owner = owner();
            let lease = c.lease_grant(30, None).await?.id();
            let put = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    owner.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            if !c.txn(put).await?.succeeded() {
                return Err("the floor key was taken".into());
            }
            let delete = Txn::new()
                .when([Compare::value(key.clone(), CompareOp::Equal, owner)])
                .and_then([TxnOp::delete(key, None)]);
            c.txn(delete).await?;
            Ok(())
        }
    })
    .await?;
    let lock_api = measure(cycles, |n| {
        let mut c = client.clone();
        async move {
            let lease = c.lease_grant(30, None).await?.id();
            let locked = c
                .lock(
                    format!("floor-lock/{run:08x}/{n}"),
                    Some(etcd_client::LockOptions::new().with_lease(lease)),
                )
                .await?;
            c.unlock(locked.key().to_vec()).await?;
            Ok(())
        }
    })
    .await?;
    Ok(vec![
        Floor {
            name: "get (one round trip)",
            summary: ping,
        },
        Floor {
            name: "lease grant + put-if-absent txn + delete txn",
            summary: txn,
        },
        Floor {
            name: "etcd Lock API (lease grant + lock + unlock)",
            summary: lock_api,
        },
    ])
}
