//! What the conformance suite does not cover: the purge and the floor of fences, a
//! table left to a DBA (`migrate=false`), and the OK packet's insert id read by the
//! right statement. Each test has a server of its own.

use std::time::Duration;

use distlock_core::backend::{AcquireOutcome, LockBackendExt, OwnerToken, ReleaseOutcome};
use distlock_core::{ErrorKind, FencedStoreExt, FencingToken, LockBackend, LockKey};
use distlock_mysql::fenced::MySqlStore;
use distlock_mysql::sqlx::Executor as _;
use distlock_mysql::{MySqlBackend, MySqlConfig};
use distlock_testservers::{MariaDb, ServerHandle};

async fn server() -> ServerHandle {
    ServerHandle::start(&MariaDb)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Takes `key` and gives it back at once: the fence it was granted.
async fn cycle(backend: &MySqlBackend, key: &str) -> FencingToken {
    let lease = backend
        .acquire_once(key, Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(
        backend.release_lease(&lease).await.expect("release"),
        ReleaseOutcome::Released
    );
    lease.fence()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_old_rows_never_lowers_a_fence() {
    let server = server().await;
    let backend = MySqlBackend::connect(&format!("{}?purge=false", server.url()))
        .await
        .expect("connect");
    // A name taken several times has a fence above what a fresh row starts at.
    let mut last = FencingToken::new(0);
    for _ in 0..5 {
        last = cycle(&backend, "purged").await;
    }
    let other = cycle(&backend, "other").await;
    // A live lease is never purged.
    let live = backend
        .acquire_once("live", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let purged = backend.purge_expired(Duration::ZERO).await.expect("purge");
    assert_eq!(purged, 2, "the two ended rows, not the live one");
    assert_eq!(
        LockBackend::inspect(&backend, &LockKey::new("live").expect("key"))
            .await
            .expect("inspect")
            .map(|info| info.fence),
        Some(live.fence())
    );
    // Both names start again above every fence the purge deleted.
    let again = cycle(&backend, "purged").await;
    assert!(again > last, "{again:?} after {last:?}");
    assert!(again > other, "{again:?} after {other:?}");
    let fresh = cycle(&backend, "never-seen").await;
    assert!(
        fresh > last,
        "a new name starts above the floor too: {fresh:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_racing_grants_never_lower_a_fence() {
    let server = server().await;
    let backend = MySqlBackend::connect(&format!("{}?purge=false", server.url()))
        .await
        .expect("connect");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let purger = {
        let (backend, stop) = (backend.clone(), stop.clone());
        tokio::spawn(async move {
            let mut purged = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                purged += backend.purge_expired(Duration::ZERO).await.expect("purge");
            }
            purged
        })
    };
    let mut workers = Vec::new();
    for worker in 0..4 {
        let backend = backend.clone();
        workers.push(tokio::spawn(async move {
            let key = format!("race/{}", worker % 2);
            let mut last = FencingToken::new(0);
            for _ in 0..150 {
                let key = LockKey::new(key.as_str()).expect("key");
                let outcome = backend
                    .try_acquire_as(&key, Duration::from_secs(5), OwnerToken::random())
                    .await
                    .expect("acquire");
                if let AcquireOutcome::Acquired(lease) = outcome {
                    assert!(
                        lease.fence() > last,
                        "{key:?}: {:?} after {last:?}",
                        lease.fence()
                    );
                    last = lease.fence();
                    backend.release_lease(&lease).await.expect("release");
                }
            }
            last
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let purged = purger.await.expect("purger");
    assert!(purged > 0, "the purge never ran between grants");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_left_to_a_dba_is_checked_and_its_migration_printed() {
    let server = server().await;
    let url = format!("{}?table=dba_locks&migrate=false", server.url());
    let refused = MySqlBackend::connect(&url)
        .await
        .expect_err("no tables yet");
    assert_eq!(refused.kind(), ErrorKind::Configuration, "{refused}");
    let said = refused.to_string();
    assert!(
        said.contains("migration_sql") && said.contains("dba_locks"),
        "{said}"
    );
    assert!(!said.contains(server.password()), "{said}");
    // The DBA runs the printed statements; then the backend starts without migrating.
    let config = MySqlConfig::from_url(&url).expect("config");
    let pool = distlock_mysql::sqlx::MySqlPool::connect_lazy(
        &server.url().replace("mariadb://", "mysql://"),
    )
    .expect("pool");
    for statement in MySqlBackend::migration_sql(&config) {
        pool.execute(statement.as_str())
            .await
            .expect("migration statement");
    }
    let backend = MySqlBackend::connect(&url).await.expect("tables in place");
    assert!(cycle(&backend, "k").await > FencingToken::new(0));
}

/// The insert id of an OK packet is the statement's own: a fenced write that inserts
/// a new resource on a connection whose last statement reported a fence is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_in_the_ok_packet_is_never_an_earlier_statement_s() {
    let server = server().await;
    let backend = MySqlBackend::connect(&format!("{}?pool_size=1&purge=false", server.url()))
        .await
        .expect("connect");
    let mut fence = FencingToken::new(0);
    for _ in 0..20 {
        fence = cycle(&backend, "k").await;
    }
    assert!(fence >= FencingToken::new(20));
    let store = MySqlStore::new(&backend).await.expect("store");
    // On the one connection: a grant reported fence >= 20; a new resource under fence 1.
    let _held = backend
        .acquire_once("k", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    store
        .write("new-resource", FencingToken::new(1), b"v")
        .await
        .expect("a new resource takes any fence");
    // A refused grant after a granted one on the same connection reports no fence.
    let refused = backend
        .acquire_once("k", Duration::from_secs(5))
        .await
        .expect("acquire");
    assert!(refused.is_none(), "held by the first lease: {refused:?}");
}

/// Your own table, fenced: a write under an older fence is refused whole once a newer
/// holder wrote, inside your transaction; the same fence writes again; the migration
/// runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_statements_on_the_users_table_in_the_users_transactions() {
    use distlock_mysql::fenced::{self, FencedTable};
    use distlock_mysql::sqlx;

    let server = server().await;
    let pool = sqlx::MySqlPool::connect(&server.url().replace("mariadb://", "mysql://"))
        .await
        .expect("pool");
    pool.execute("CREATE TABLE accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)")
        .await
        .expect("table");
    pool.execute("INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 100)")
        .await
        .expect("rows");
    let accounts = FencedTable::new("accounts").expect("name");
    let mut conn = pool.acquire().await.expect("connection");
    accounts.migrate(&mut conn).await.expect("migrated");
    accounts.migrate(&mut conn).await.expect("migrated again");
    drop(conn);
    assert_eq!(
        FencedTable::new("accounts; DROP TABLE x")
            .expect_err("refused")
            .kind(),
        ErrorKind::Configuration
    );

    let deposit = |fence: u64, id: i64| {
        let fence = fenced::fence_arg(FencingToken::new(fence)).expect("fence");
        sqlx::query("UPDATE accounts SET balance = balance + 10, fence = ? WHERE id = ?")
            .bind(fence)
            .bind(id)
    };
    let balance = |id: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT balance FROM accounts WHERE id = ?")
                .bind(id)
                .fetch_one(&pool)
                .await
                .expect("balance")
        }
    };
    assert_eq!(
        fenced::execute(deposit(5, 1), &pool)
            .await
            .expect("fence 5"),
        1
    );
    assert_eq!(
        fenced::execute(deposit(7, 1), &pool)
            .await
            .expect("fence 7"),
        1
    );
    assert_eq!(
        fenced::execute(deposit(7, 1), &pool)
            .await
            .expect("fence 7 again"),
        1
    );
    // The older holder, in its transaction: a write to another row first, then the
    // stale one; the stale statement is refused, and the rollback undoes the other.
    let mut tx = pool.begin().await.expect("begin");
    fenced::execute(deposit(5, 2), &mut *tx)
        .await
        .expect("row 2 has seen no fence above 5");
    let stale = fenced::execute(deposit(5, 1), &mut *tx)
        .await
        .expect_err("row 1 has seen fence 7");
    assert_eq!(stale.kind(), ErrorKind::StaleFence, "{stale}");
    assert!(stale.to_string().contains("5 is below 7"), "{stale}");
    tx.rollback().await.expect("rollback");
    assert_eq!(balance(1).await, 130, "three accepted deposits on row 1");
    assert_eq!(balance(2).await, 100, "the rolled-back deposit on row 2");
    // One statement over both rows, one of them stale: refused whole.
    let both = sqlx::query("UPDATE accounts SET balance = balance + 1, fence = ?").bind(6_i64);
    let refused = fenced::execute(both, &pool)
        .await
        .expect_err("row 1 is at 7");
    assert_eq!(refused.kind(), ErrorKind::StaleFence);
    assert_eq!((balance(1).await, balance(2).await), (130, 100));
}

/// The place of a fair waiter that vanished goes with the purge, as ended leases do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_deletes_the_places_of_vanished_waiters() {
    let server = server().await;
    let backend = MySqlBackend::connect(&format!("{}?purge=false", server.url()))
        .await
        .expect("connect");
    let key = LockKey::new("queued").expect("key");
    let _holder = backend
        .acquire_once("queued", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    let waited = backend
        .try_acquire_in_turn(
            &key,
            Duration::from_secs(5),
            OwnerToken::random(),
            Duration::from_millis(50),
        )
        .await
        .expect("queued");
    assert!(matches!(waited, AcquireOutcome::Held { .. }), "{waited:?}");
    let places = || async {
        let pool = distlock_mysql::sqlx::MySqlPool::connect(
            &server.url().replace("mariadb://", "mysql://"),
        )
        .await
        .expect("pool");
        distlock_mysql::sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM distlock_locks_queue")
            .fetch_one(&pool)
            .await
            .expect("count")
    };
    assert_eq!(places().await, 1, "the waiter's place");
    // The place ran out (the waiter stopped calling); the purge takes it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    backend.purge_expired(Duration::ZERO).await.expect("purge");
    assert_eq!(places().await, 0, "a vanished waiter's place was kept");
}

/// A set step cancelled while its transaction waits on a row lock: once that lock is
/// let go, none of the set is left held (the client's cleanup releases what the batch
/// took after the cancel), and the backend's one connection serves the next operation.
/// A transaction left open on that connection is the next test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_cancelled_on_a_row_lock_leaves_nothing_held() {
    use distlock_mysql::sqlx;
    let server = server().await;
    let backend = MySqlBackend::connect(&format!("{}?pool_size=1&purge=false", server.url()))
        .await
        .expect("connect");
    assert!(backend.sets().is_some());
    // The second key's row exists, and another session holds its row lock.
    cycle(&backend, "set-b").await;
    let pool = sqlx::MySqlPool::connect(&server.url().replace("mariadb://", "mysql://"))
        .await
        .expect("a pool of the test's own");
    let mut blocker = pool.begin().await.expect("begin");
    sqlx::query("SELECT fence FROM distlock_locks WHERE name = 'set-b' FOR UPDATE")
        .fetch_all(&mut *blocker)
        .await
        .expect("the row lock");
    let client = distlock_core::LockClient::new(std::sync::Arc::new(backend.clone()));
    let attempt = tokio::time::timeout(
        Duration::from_millis(500),
        client.try_lock_all(["set-a", "set-b"]),
    )
    .await;
    assert!(
        attempt.is_err(),
        "the set's step did not wait on the row lock: {attempt:?}"
    );
    blocker.commit().await.expect("commit");
    let free = |name: &'static str| {
        let backend = backend.clone();
        async move {
            LockBackend::inspect(&backend, &LockKey::new(name).expect("key"))
                .await
                .expect("inspect")
                .is_none()
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(free("set-a").await && free("set-b").await) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "part of a cancelled set is still held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Both keys are free for anyone, at once, on the backend's one connection.
    cycle(&backend, "set-a").await;
    cycle(&backend, "set-b").await;
}

/// A set step whose row-lock wait runs out fails only its statement, inside the
/// transaction its batch opened: the step answers "held", and the transaction, with
/// the row lock it took on the first key, must not outlive the step on the backend's
/// one connection (a pool of one whose row-lock waits run out in a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_whose_lock_wait_ran_out_leaves_no_transaction_open() {
    use distlock_core::backend::SetOutcome;
    use distlock_mysql::sqlx;
    let server = server().await;
    let driver_url = server.url().replace("mariadb://", "mysql://");
    let pool = sqlx::MySqlPool::connect(&driver_url)
        .await
        .expect("a pool of the test's own");
    // Connections made from now on give up a row-lock wait after one second.
    sqlx::query("SET GLOBAL innodb_lock_wait_timeout = 1")
        .execute(&pool)
        .await
        .expect("set the wait");
    let url = format!("{}?pool_size=1&purge=false", server.url());
    // The backend under test is on a pool of one such connection: a backend's own
    // pool would set the wait to its response timeout (5 s), and the two would race.
    let one = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&driver_url)
        .await
        .expect("a pool of one connection");
    let config = distlock_mysql::MySqlConfig::from_url(&url).expect("config");
    let backend = MySqlBackend::from_pool(one, config)
        .await
        .expect("from_pool");
    let other = MySqlBackend::connect(&url).await.expect("connect");
    cycle(&backend, "wait-b").await;
    let mut blocker = pool.begin().await.expect("begin");
    sqlx::query("SELECT fence FROM distlock_locks WHERE name = 'wait-b' FOR UPDATE")
        .fetch_all(&mut *blocker)
        .await
        .expect("the row lock");
    let set = [
        (LockKey::new("wait-a").expect("key"), OwnerToken::random()),
        (LockKey::new("wait-b").expect("key"), OwnerToken::random()),
    ];
    let outcome = backend
        .try_acquire_all(&set, Duration::from_secs(30))
        .await
        .expect("a wait that ran out is contention, not an error");
    assert!(matches!(outcome, SetOutcome::Held { .. }), "{outcome:?}");
    blocker.commit().await.expect("commit");
    // The first key's row is not locked by a transaction left open: another backend
    // takes it (a lock wait would run out in a second and refuse it).
    let taken = other
        .acquire_once("wait-a", Duration::from_secs(5))
        .await
        .expect("acquire");
    assert!(
        taken.is_some(),
        "the first key of a refused set is still locked"
    );
    // And what the backend's one connection does next is committed, for all to see.
    let lease = backend
        .acquire_once("wait-c", Duration::from_secs(30))
        .await
        .expect("acquire")
        .expect("free");
    let seen = LockBackend::inspect(&other, &LockKey::new("wait-c").expect("key"))
        .await
        .expect("inspect");
    assert_eq!(seen.map(|info| info.fence), Some(lease.fence()));
}

/// A fair step dropped at any point (its deadline passed), even while its `BEGIN` is
/// in flight, leaves no transaction open on the connection it used: what the
/// backend's one connection does next is committed, for all to see. Each statement
/// crosses a proxy with 3 ms each way, so the drops at 1 ms to 40 ms land on every
/// statement of the step, its `BEGIN` among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_step_dropped_at_any_point_leaves_no_transaction_open() {
    use distlock_conformance::LinkControl;
    use distlock_testservers::Proxy;
    let server = server().await;
    let proxy = Proxy::start(server.host_port()).await.expect("proxy");
    let through = server.url().replace(
        &format!(":{}/", server.host_port()),
        &format!(":{}/", proxy.port()),
    );
    assert_ne!(through, server.url(), "the URL names the server's port");
    let backend = MySqlBackend::connect(&format!("{through}?pool_size=1&purge=false"))
        .await
        .expect("connect through the proxy");
    let other = MySqlBackend::connect(&server.url()).await.expect("connect");
    cycle(&backend, "dropped/warm-up").await;
    proxy
        .set_latency(Duration::from_millis(3))
        .await
        .expect("latency");
    let key = LockKey::new("dropped/fair").expect("key");
    let (ttl, place) = (Duration::from_secs(30), Duration::from_secs(3));
    for ms in 1..=40 {
        let step = backend.try_acquire_in_turn(&key, ttl, OwnerToken::random(), place);
        let _ = tokio::time::timeout(Duration::from_millis(ms), step).await;
    }
    proxy.set_latency(Duration::ZERO).await.expect("latency");
    for i in 0..3 {
        let name = format!("dropped/after-{i}");
        let lease = backend
            .acquire_once(&name, Duration::from_secs(30))
            .await
            .expect("an acquire after the dropped steps")
            .expect("free");
        let seen = LockBackend::inspect(&other, &LockKey::new(&name).expect("key"))
            .await
            .expect("inspect");
        assert_eq!(
            seen.map(|info| info.fence),
            Some(lease.fence()),
            "a grant after the dropped steps is not seen by another client: it was made inside a transaction left open"
        );
        let fair = LockKey::new(format!("dropped/fair-after-{i}")).expect("key");
        backend
            .try_acquire_in_turn(&fair, ttl, OwnerToken::random(), place)
            .await
            .expect("a fair step after the dropped steps");
    }
}

/// A pooled connection that sat idle past the pool's limit is closed, not handed out:
/// one the server cut meanwhile (its `wait_timeout`, here 1 s) never fails the next
/// statement. The limit is `distlock_sql::IDLE_LIMIT` (10 minutes) unless set; here
/// half a second. The pool is the one both SQL backends run on.
#[tokio::test]
async fn a_connection_idle_past_the_pools_limit_is_not_handed_out() {
    use distlock_mysql::sqlx::mysql::{MySql, MySqlConnectOptions, MySqlSslMode};
    use std::str::FromStr as _;
    let server = server().await;
    let url = server.url();
    let settings = MySqlConfig::from_url(&url).expect("a URL");
    let options = MySqlConnectOptions::from_str(&url.replacen("mariadb://", "mysql://", 1))
        .expect("options")
        .ssl_mode(MySqlSslMode::Disabled);
    let on_connect = Some("SET SESSION wait_timeout = 1".to_owned());
    let pool = distlock_sql::Pool::<MySql>::new(options, 1, Duration::from_secs(5), on_connect)
        .with_idle_limit(Duration::from_millis(500));
    for round in 0..3 {
        let mut checkout = pool.checkout(&settings).await.expect("a connection");
        let result = checkout.conn().execute("SELECT 1").await;
        checkout.settle(&result);
        result.unwrap_or_else(|e| panic!("round {round}: {e}"));
        drop(checkout);
        // Past the server's cut of an idle session.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// A lock table made by the previous version (no holder columns), with a live lease in
/// it: two processes connecting at once migrate it in place; the old lease reads as
/// held by no one known, its owner releases it as before, and every new grant stores
/// its holder. With `migrate=false`, a table not yet migrated is named as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_the_previous_schema_migrates_and_its_lease_stays_held() {
    use distlock_core::{Holder, LockClient, LockOptions};
    use distlock_mysql::sqlx::{Connection, MySqlConnection};

    let server = server().await;
    let mut conn = MySqlConnection::connect(&server.url())
        .await
        .expect("connect");
    // The previous version's tables, as its migration made them.
    for statement in [
        "CREATE TABLE distlock_locks (name VARBINARY(256) NOT NULL, owner VARBINARY(64) NOT NULL, \
           fence BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, PRIMARY KEY (name)) ENGINE=InnoDB",
        "CREATE TABLE distlock_locks_floor (id TINYINT NOT NULL, top BIGINT NOT NULL, \
           PRIMARY KEY (id)) ENGINE=InnoDB",
        "INSERT IGNORE INTO distlock_locks_floor (id, top) VALUES (1, 0)",
        "CREATE TABLE distlock_locks_queue (name VARBINARY(256) NOT NULL, \
           owner VARBINARY(64) NOT NULL, seq BIGINT NOT NULL AUTO_INCREMENT, \
           until DATETIME(6) NOT NULL, PRIMARY KEY (name, owner), KEY arrival (seq), \
           KEY turn (name, seq)) ENGINE=InnoDB",
    ] {
        conn.execute(statement).await.expect("the previous schema");
    }
    let owner = OwnerToken::random();
    distlock_mysql::sqlx::query(
        "INSERT INTO distlock_locks (name, owner, fence, expires_at) \
         VALUES ('old', ?, 7, UTC_TIMESTAMP(6) + INTERVAL 60 SECOND)",
    )
    .bind(&owner.as_bytes()[..])
    .execute(&mut conn)
    .await
    .expect("an old lease");

    // Not migrated, and told not to: named, not half-used.
    let refused = MySqlBackend::connect(&format!("{}?migrate=false", server.url()))
        .await
        .map(drop)
        .expect_err("a table without the holder's columns");
    assert_eq!(refused.kind(), ErrorKind::Configuration, "{refused}");
    assert!(refused.to_string().contains("holder"), "{refused}");

    let url = server.url();
    let (one, two) = tokio::join!(MySqlBackend::connect(&url), MySqlBackend::connect(&url));
    let backend = std::sync::Arc::new(one.expect("migrated"));
    two.expect("migrated alongside");
    let old = LockKey::new("old").expect("key");
    let info = backend
        .inspect(&old)
        .await
        .expect("inspect")
        .expect("the old lease is still held");
    assert_eq!(info.fence, FencingToken::new(7));
    assert_eq!((info.holder, info.granted_at), (None, None));
    assert_eq!(
        backend.release(&old, &owner).await.expect("release"),
        ReleaseOutcome::Released
    );
    let holder = Holder::new("migrated-host:1")
        .and_then(|h| h.with_payload("after the upgrade"))
        .expect("holder");
    let client = LockClient::with_options(
        backend.clone(),
        LockOptions::new(Duration::from_secs(30)).with_holder(holder.clone()),
    )
    .expect("client");
    let Ok(guard) = client.try_lock("old").await.expect("try") else {
        panic!("the released key was still held");
    };
    let info = backend.inspect(&old).await.expect("inspect").expect("held");
    assert!(info.fence > FencingToken::new(7), "{info:?}");
    assert_eq!(info.holder, Some(holder));
    assert!(info.granted_at.is_some(), "{info:?}");
    guard.release().await.expect("release");
}
