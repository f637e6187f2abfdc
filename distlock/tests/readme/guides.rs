// distlock/guides/*.md, CONTRIBUTING.md and the crates' READMEs: each block between a `begin` and
// an `end` line is shown there word for word (tests/docs.rs checks that every Rust
// block of those files is one of these, or a whole example, and so compiles).

use std::sync::Arc;
use std::time::Duration;

use distlock::{DynLockBackend, LockClient};

type Outcome = Result<(), Box<dyn std::error::Error>>;

async fn fenced_table(
    pool: distlock::postgres::sqlx::PgPool,
    mut conn: distlock::postgres::sqlx::PgConnection,
    guard: distlock::LockGuard,
) -> Outcome {
    use distlock::postgres::fenced::{self, FencedTable};
    use distlock::postgres::sqlx;
    // begin: fenced-table
    // Your table, your transaction: the fence is $1, your parameters follow.
    let accounts = FencedTable::new("accounts")?;
    accounts.migrate(&mut conn).await?; // once: the check function and the fence column
    let sql = accounts.update("balance = balance + $2", "id = $3");
    let mut tx = pool.begin().await.map_err(fenced::from_sqlx)?;
    let query = sqlx::query(&sql).bind(fenced::fence_arg(guard.fence())?).bind(100_i64).bind(7_i64);
    fenced::execute(query, &mut *tx).await?; // StaleFence: nothing written, the transaction aborted
    tx.commit().await.map_err(fenced::from_sqlx)?;
    // end
    Ok(())
}

async fn fair(backend: Arc<DynLockBackend>) -> Outcome {
    // begin: fair
    use distlock::{LockClient, LockOptions};
    let options = LockOptions::new(Duration::from_secs(30))
        .with_fair(true)
        .with_queue_place(Duration::from_secs(3)); // how long a vanished waiter can block the queue
    let client = LockClient::with_options(backend, options)?;
    let guard = client.lock("payments/settle", Duration::from_secs(60)).await?;
    // end
    drop(guard);
    Ok(())
}

async fn efficiency(backend: Arc<DynLockBackend>) -> Outcome {
    use distlock::LockOptions;
    // begin: efficiency
    let options = LockOptions::new(Duration::from_secs(30)).with_fenced(false);
    let client = LockClient::with_options(backend, options)?;
    // end
    drop(client);
    Ok(())
}

async fn update_ledger(client: &LockClient) -> distlock::Result<()> {
    client.lock("ledger", Duration::from_secs(1)).await?.release().await
}

async fn reentrant(client: LockClient, wait: Duration) -> Outcome {
    // begin: reentrant
    client.reentrant(async {
        let outer = client.lock("ledger", wait).await?;
        update_ledger(&client).await?; // locks "ledger" again: a second hold, no wait
        outer.release().await          // the last hold: the lease is released
    }).await?;
    // end
    Ok(())
}

/// Writes two resources, each under its own key's fence.
async fn transfer(from: Option<distlock::FencingToken>, to: Option<distlock::FencingToken>) {}

async fn sets(client: LockClient) -> Outcome {
    // begin: sets
    let set = client.lock_all(["stock/berlin", "stock/paris"], Duration::from_secs(10)).await?;
    let from = set.fence("stock/berlin").expect("in the set"); // each key's own fence
    let to = set.fence("stock/paris").expect("in the set");
    // ... write each resource with its own key's fence ...
    set.release().await?;                                      // every key, or NotHeld if one was lost

    client
        .with_lock_all(["account/17", "account/42"], Duration::from_secs(10), |fences| async move {
            transfer(fences.get("account/17"), fences.get("account/42")).await
        })
        .await?
        .into_output();
    // end
    Ok(())
}

async fn kinds(backend: Arc<DynLockBackend>) -> Outcome {
    // begin: kinds
    use distlock::LockClient;

    // The kinds hang off a client, and share its options, circuit breaker and metrics.
    let locks = LockClient::new(backend);
    let uploads = locks.semaphore("uploads", 4)?;                   // 4 permits
    let permit = uploads.acquire(Duration::from_secs(10)).await?;   // a LockGuard
    let batch = uploads.acquire_many(3, Duration::from_secs(10)).await?;

    let config = locks.rw_lock("config")?;
    let reading = config.read(Duration::from_secs(10)).await?;     // many readers
    let writing = config.write(Duration::from_secs(10)).await?;    // or one writer

    let election = locks.election("scheduler")?;
    let mut observer = election.observe();                          // every term, in order
    let leadership = election.campaign("10.0.0.7:8080", Duration::from_secs(60)).await?;
    leadership.lost().await;                                        // or leadership.resign()
    // end
    drop((permit, batch, reading, writing, observer));
    Ok(())
}

async fn jobs(backend: Arc<DynLockBackend>) -> Outcome {
    // begin: jobs
    use distlock::{LockClient, LockOptions, LossReason};

    // Once per slot: an hourly job on every host, whose schedules differ by seconds.
    let jobs = LockClient::new(backend.clone());
    let at_least = Duration::from_secs(10 * 60); // > the skew, < the interval less it
    match jobs.run_once("reports/hourly", at_least, build_reports).await? {
        Ok(done) => println!("built: {:?}, lease {:?}", done.output(), done.lease()),
        Err(busy) => println!("another host has this slot: {busy}"),
    }

    // Bounded holds: at most 15 minutes, then the hold ends as a loss.
    let options = LockOptions::new(Duration::from_secs(30))
        .with_hold_at_most(Duration::from_secs(15 * 60));
    let bounded = LockClient::with_options(backend, options)?;
    let guard = bounded.lock("imports/nightly", Duration::from_secs(5)).await?;
    if guard.lost().await == Some(LossReason::HoldLimit) {
        eprintln!("the import ran past 15 minutes: stop it");
    }
    // end
    Ok(())
}

async fn who_holds(client: LockClient) -> distlock::Result<()> {
    // begin: who-holds
    if let Some(held) = client.inspect("reports/hourly").await? {
        println!("fence {}, {:?} left, held by {:?}", held.fence, held.remaining, held.holder);
    }
    for (key, held) in client.list("reports/").await? {
        println!("{key}: fence {}", held.fence);
    }
    // An operator's last resort: the holder is told at its next renewal.
    client.force_release("reports/hourly").await?;
    // end
    Ok(())
}

async fn sequencer_check(
    locks: LockClient,
    key: String,
    fence: distlock::FencingToken,
    request: String,
) -> Outcome {
    async fn apply(request: String) -> Outcome {
        Ok(())
    }
    // begin: sequencer-check
    // In the resource, given a request's sequencer:
    let holder = locks.check(&key, fence).await?; // StaleFence: refuse the request
    apply(request).await?;
    // end
    Ok(())
}

fn check_layer(locks: LockClient) -> axum::Router {
    use axum::routing::post;
    use axum::Router;
    async fn append(held: distlock::tower::Held) -> String {
        held.fence().to_string()
    }
    // begin: check-layer
    use distlock::tower::{sequencer_headers, CheckLayer};

    let app = Router::new()
        .route("/journal", post(append))
        .layer(CheckLayer::new(locks, sequencer_headers));
    // end
    app
}

async fn build_reports(fence: distlock::FencingToken) -> usize {
    0
}

async fn breaker() -> distlock::Result<()> {
    // begin: breaker
    use std::sync::Arc;
    use std::time::Duration;
    use distlock::{BreakerOptions, ErrorKind, LockClient, LockOptions, MemoryBackend};

    let options = LockOptions::new(Duration::from_secs(30))
        // Open after 5 attempts in a row find the backend unavailable; stay open 5 s.
        .with_circuit_breaker(BreakerOptions::new(5, Duration::from_secs(5)));
    let locks = LockClient::with_options(Arc::new(MemoryBackend::new()), options)?;
    match locks.lock("jobs/nightly", Duration::from_secs(10)).await {
        Ok(guard) => guard.release().await?,
        // Failed at once, without a call: the message says how long it stays open.
        Err(e) if e.kind() == ErrorKind::CircuitOpen => eprintln!("shedding: {e}"),
        Err(e) => return Err(e),
    }
    let health = locks.health().await?; // one round trip, whatever the breaker says
    println!("{} answered in {:?}", health.backend(), health.latency());
    // end
    Ok(())
}

/// A third party's backend, as the contributing guide names it.
mod my_backend {
    pub(super) type Error = distlock::Error;

    pub(super) struct MyBackend;

    impl MyBackend {
        pub(super) async fn connect(_url: &str) -> Result<distlock::MemoryBackend, Error> {
            Ok(distlock::MemoryBackend::new())
        }
    }
}

mod contributing_suite {
    use super::my_backend;

    // begin: contributing-suite
    // tests/conformance.rs, with `[[test]] name = "conformance" harness = false`
    distlock_conformance::conformance_main!(async {
        let backend = my_backend::MyBackend::connect("mystore://localhost").await?;
        Ok::<_, my_backend::Error>(distlock_conformance::Target::new(std::sync::Arc::new(backend)))
    });
    // end
}

mod conformance_readme {
    use super::my_backend;

    // begin: conformance-readme
    // tests/conformance.rs
    distlock_conformance::conformance_main!(async {
        let backend = my_backend::MyBackend::connect("mystore://localhost").await?;
        Ok::<_, my_backend::Error>(distlock_conformance::Target::new(std::sync::Arc::new(backend)))
    });
    // end
}

/// A third party's fenced store, as the fencing guide names it.
mod my_store {
    pub(super) type Error = distlock::Error;

    pub(super) async fn connect(_url: &str) -> Result<distlock::MemoryStore, Error> {
        Ok(distlock::MemoryStore::new())
    }
}

mod store_suite {
    // begin: store-suite
    // tests/fenced.rs, with [[test]] name = "fenced", harness = false
    distlock_conformance::fenced_conformance_main!(async {
        let store = my_store::connect("mystore://localhost").await?;
        Ok::<_, my_store::Error>(distlock_conformance::fenced::StoreTarget::new(std::sync::Arc::new(store)))
    });
    // end
    use super::my_store;
}

async fn adoption_checks() -> Result<(), String> {
    use distlock_conformance::adoption;
    use my_backend::MyBackend;
    // begin: adoption
    adoption::unreachable_endpoint_is_named("connect_timeout_ms=300", Duration::from_secs(3), |addr| async move {
        MyBackend::connect(&format!("mystore://u:{}@{addr}?connect_timeout_ms=300", adoption::SECRET)).await
    })
    .await?;
    // end
    Ok(())
}

async fn crate_readmes() -> Outcome {
    {
        // begin: redis-readme
        let backend = distlock_redis::RedisBackend::connect("redis://:password@127.0.0.1:6379/0?prefix=myapp:").await?;
        let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
        // end
        drop(client);
    }
    {
        // begin: postgres-readme
        let backend = distlock_postgres::PostgresBackend::connect("postgres://app:password@db/app?table=service_locks").await?;
        let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
        // end
        drop(client);
    }
    {
        // begin: mysql-readme
        let backend = distlock_mysql::MySqlBackend::connect("mysql://app:password@db/app?table=service_locks").await?;
        let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
        // end
        drop(client);
    }
    {
        // begin: etcd-readme
        let backend = distlock_etcd::EtcdBackend::connect("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379").await?;
        let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
        // end
        drop(client);
    }
    {
        // begin: zookeeper-readme
        let backend = distlock_zookeeper::ZooKeeperBackend::connect("zookeeper://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181").await?;
        let client = distlock_core::LockClient::new(std::sync::Arc::new(backend));
        // Or chosen by URL, beside distlock's own backends:
        let connector = distlock::Connector::new().with_backend(distlock_zookeeper::SCHEMES, |url| async move {
            distlock_zookeeper::ZooKeeperBackend::connect(&url).await
        });
        // end
        drop((client, connector));
    }
    Ok(())
}

/// The conformance README's minimal backend: the required steps and nothing else.
#[allow(unreachable_pub)] // shown as a crate of its own would write it
pub(crate) mod minimal {
    // begin: minimal-backend
    use std::collections::HashMap;
    use std::sync::{Mutex, MutexGuard, PoisonError};

    use async_trait::async_trait;
    use distlock_core::backend::{
        AcquireRequest, Capabilities, ExtendRequest, FenceDurability, Grant, OwnerToken,
        ReleaseOutcome, Renewal,
    };
    use distlock_core::{FencingToken, LockBackend, LockInfo, LockKey, Result};
    use tokio::time::Instant;

    /// A key's holder, its fence and when it expires.
    type Holder = (OwnerToken, u64, Instant);

    /// A lock table in one process: the last fence minted, and each key's holder.
    #[derive(Debug)]
    pub struct MapBackend {
        table: Mutex<(u64, HashMap<LockKey, Holder>)>,
        capabilities: Capabilities,
    }

    impl MapBackend {
        fn table(&self) -> MutexGuard<'_, (u64, HashMap<LockKey, Holder>)> {
            self.table.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    impl Default for MapBackend {
        fn default() -> Self {
            let mut capabilities = Capabilities::default();
            capabilities.fence_durability = FenceDurability::Durable; // never restarts
            MapBackend { table: Mutex::default(), capabilities }
        }
    }

    #[async_trait]
    impl LockBackend for MapBackend {
        fn name(&self) -> &str {
            "map"
        }

        fn capabilities(&self) -> &Capabilities {
            &self.capabilities
        }

        async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
            let now = Instant::now();
            let (last, locks) = &mut *self.table();
            let fence = match locks.get(request.key()) {
                Some((owner, _, until)) if *until > now && owner != request.owner() => {
                    return Ok(Grant::Held { remaining: Some(*until - now) });
                }
                Some((owner, fence, _)) if owner == request.owner() => *fence, // a retry
                _ => {
                    *last += 1;
                    *last
                }
            };
            let until = now + request.ttl();
            locks.insert(request.key().clone(), (*request.owner(), fence, until));
            Ok(Grant::Granted(FencingToken::new(fence)))
        }

        async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
            let locks = &mut self.table().1;
            match locks.get(key) {
                Some((holder, _, until)) if holder == owner && *until > Instant::now() => {
                    locks.remove(key);
                    Ok(ReleaseOutcome::Released)
                }
                _ => Ok(ReleaseOutcome::NotHeld),
            }
        }

        async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
            let now = Instant::now();
            let locks = &mut self.table().1;
            match locks.get_mut(request.key()) {
                Some((holder, _, until)) if holder == request.owner() && *until > now => {
                    *until = now + request.ttl();
                    Ok(Renewal::Renewed)
                }
                _ => Ok(Renewal::NotHeld),
            }
        }

        async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
            let now = Instant::now();
            let locks = &self.table().1;
            Ok(locks.get(key).filter(|(_, _, until)| *until > now).map(|(_, fence, until)| {
                LockInfo::new(FencingToken::new(*fence), *until - now)
            }))
        }
    }
    // end
}
