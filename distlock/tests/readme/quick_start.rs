// distlock/guides/fencing.md, "A fenced quick start", word for word (tests/readme.rs checks that, and runs it).
use std::sync::Arc;
use std::time::Duration;

use distlock::{ErrorKind, LockClient, MemoryBackend, MemoryStore};

#[tokio::main]
async fn main() -> distlock::Result<()> {
    let client = LockClient::new(Arc::new(MemoryBackend::new()));
    // Or on Redis (feature "redis"):
    // let redis = distlock::redis::RedisBackend::connect("redis://127.0.0.1/").await?;
    // let client = LockClient::new(Arc::new(redis.clone()));

    // What the lock protects, behind a fenced adapter: a store that itself refuses a
    // write whose fence is stale. Or distlock::redis::fenced::RedisStore::new(&redis),
    // distlock::postgres::fenced::{PostgresStore, FencedTable} (your own tables),
    // distlock::etcd::fenced::EtcdStore, distlock::FileStore.
    let store = MemoryStore::new();

    // Wait up to 5 s; renewed in the background while held.
    let guard = client
        .lock("reports/nightly", Duration::from_secs(5))
        .await?;
    let report = guard.fenced(store.clone()); // writes carry the guard's fence
    tokio::select! {
        Some(reason) = guard.lost() => eprintln!("lost the lock: {reason}"),
        written = report.write("reports/nightly", b"done") => written?, // the work
    }
    guard.release().await?; // an error of kind NotHeld if it had been lost

    // Or: run work under the lock with a fenced handle, cancelled if the lock is lost.
    let visits = client
        .with_fenced_lock(
            "visits",
            Duration::from_secs(5),
            store.clone(),
            |counter| async move {
                let seen = counter.read("visits").await?; // a claiming read: older holders are now refused
                let next = seen.map_or(0, |v| v[0]) + 1;
                counter.write("visits", &[next]).await?;
                Ok::<_, distlock::Error>(next)
            },
        )
        .await?
        .into_output()?;
    assert_eq!(visits, 1);

    // A holder paused past its lease writes with its old fence: once a newer holder
    // has written, the store refuses it.
    let newer = client
        .lock("reports/nightly", Duration::from_secs(5))
        .await?;
    newer.fenced(store.clone()).write("reports/nightly", b"redone").await?;
    let late = report.write("reports/nightly", b"stale").await; // the first guard's fence
    assert_eq!(late.map_err(|e| e.kind()), Err(ErrorKind::StaleFence));
    newer.release().await?;
    Ok(())
}
