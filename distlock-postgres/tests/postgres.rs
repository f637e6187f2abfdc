//! What the conformance suite does not cover: purging old rows and old places in the
//! fair queue, the durability options, hostile names, the statement timeout behind
//! PgBouncer, which releases notify, fenced writes of your own rows (one transaction
//! under a set of keys too), a migration that waits for no one, and the order in which
//! a fair step writes its place and reads the fence a handoff is judged by, and a
//! grant applied after its wait gave up, and a stale-fence refusal that names no fence.
//! Each test has a server of its own.

use std::time::Duration;

use distlock_core::backend::{
    AcquireOutcome, FairBackend, FenceDurability, Handoff, LockBackendExt, OperatorBackend,
    OwnerToken, ReleaseOutcome,
};
use distlock_core::{ErrorKind, LockBackend, LockKey};
use distlock_postgres::PostgresBackend;
use distlock_testservers::{Postgres, ServerHandle};

async fn server() -> ServerHandle {
    ServerHandle::start(&Postgres)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_old_rows_never_lowers_a_fence() {
    let server = server().await;
    // A short response timeout makes the purge floor (twice that) short too.
    let backend = PostgresBackend::connect(&format!("{}?response_timeout_ms=1000", server.url()))
        .await
        .expect("connect");
    let err = backend
        .purge_expired(Duration::from_millis(1500))
        .await
        .expect_err("too soon");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");

    let first = backend
        .acquire_once("purged", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&first).await.expect("release");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let purged = backend
        .purge_expired(Duration::from_millis(2000))
        .await
        .expect("purge");
    assert!(purged >= 1, "nothing was purged");
    let second = backend
        .acquire_once("purged", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    assert!(
        second.fence() > first.fence(),
        "{:?} after {:?}",
        second.fence(),
        first.fence()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_purge_deletes_the_places_of_vanished_waiters() {
    let server = server().await;
    let backend = PostgresBackend::connect(&format!(
        "{}?response_timeout_ms=1000&purge=false",
        server.url()
    ))
    .await
    .expect("connect");
    let admin = sqlx::PgPool::connect(&server.url()).await.expect("admin");
    let places = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM public.distlock_locks_queue")
            .fetch_one(&admin)
            .await
            .expect("count")
    };
    let key = LockKey::new("queued").expect("key");
    let holder = backend
        .acquire_once("queued", Duration::from_secs(10))
        .await
        .expect("acquire")
        .expect("free");
    let waiter = backend
        .try_acquire_in_turn(
            &key,
            Duration::from_secs(10),
            OwnerToken::random(),
            Duration::from_millis(100),
        )
        .await
        .expect("queue");
    assert!(matches!(waiter, AcquireOutcome::Held { .. }), "{waiter:?}");
    assert_eq!(places().await, 1);
    tokio::time::sleep(Duration::from_millis(2200)).await;
    backend
        .purge_expired(Duration::from_millis(2000))
        .await
        .expect("purge");
    assert_eq!(
        places().await,
        0,
        "a vanished waiter's place outlived the purge"
    );
    backend.release_lease(&holder).await.expect("release");
}

/// A role whose sessions commit without waiting for the flush: by default the lock
/// statements set `synchronous_commit = on` themselves, and the fences are durable;
/// with `synchronous_commit=server` the backend reads the role's `off` and declares
/// its fences best effort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_commits_without_flushing_is_declared_as_it_is() {
    let server = server().await;
    let mut conn = sqlx::PgConnection::connect(&server.url())
        .await
        .expect("admin");
    for statement in [
        "CREATE ROLE lazy LOGIN PASSWORD 'lazy-password'",
        "ALTER ROLE lazy SET synchronous_commit = off",
        "CREATE SCHEMA lazy AUTHORIZATION lazy",
        "GRANT CREATE ON DATABASE postgres TO lazy",
    ] {
        sqlx::query(statement)
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let url = server.url();
    let (_, host) = url.split_once('@').expect("a url with credentials");
    let lazy = format!("postgres://lazy:lazy-password@{host}");
    let lazy = |query: &str| {
        let separator = if lazy.contains('?') { '&' } else { '?' };
        format!("{lazy}{separator}schema=lazy{query}")
    };
    let forced = PostgresBackend::connect(&lazy("")).await.expect("connect");
    assert_eq!(
        forced.capabilities().fence_durability,
        FenceDurability::Durable
    );
    let servers = PostgresBackend::connect(&lazy("&synchronous_commit=server"))
        .await
        .expect("connect");
    assert_eq!(
        servers.capabilities().fence_durability,
        FenceDurability::BestEffort,
        "the role commits without flushing"
    );
    assert!(!servers.capabilities().leases_survive_restart);
    // The owner's own role keeps the server's default, on: durable.
    let on = PostgresBackend::connect(&format!(
        "{url}?table=server_locks&synchronous_commit=server"
    ))
    .await
    .expect("connect");
    assert_eq!(on.capabilities().fence_durability, FenceDurability::Durable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_options_are_declared_in_the_capabilities() {
    let server = server().await;
    let durable = PostgresBackend::connect(&server.url())
        .await
        .expect("connect");
    assert_eq!(
        durable.capabilities().fence_durability,
        FenceDurability::Durable
    );
    assert!(durable.capabilities().leases_survive_restart);

    let fast = PostgresBackend::connect(&format!(
        "{}?table=fast_locks&unlogged=true&synchronous_commit=off",
        server.url()
    ))
    .await
    .expect("connect");
    assert_eq!(
        fast.capabilities().fence_durability,
        FenceDurability::BestEffort
    );
    assert!(!fast.capabilities().leases_survive_restart);
    let lease = fast
        .acquire_once("quick", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    assert_eq!(
        fast.release_lease(&lease).await.expect("release"),
        ReleaseOutcome::Released
    );

    let mut conn = sqlx::PgConnection::connect(&server.url())
        .await
        .expect("admin");
    let persistence: String = sqlx::query_scalar(
        "SELECT relpersistence::text FROM pg_class WHERE relname = 'fast_locks'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("catalog");
    assert_eq!(persistence, "u", "the table is not unlogged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_are_refused_before_reaching_the_server() {
    for url in [
        "postgres://u:p@127.0.0.1:1/db?table=locks%3BDROP%20TABLE%20x",
        "postgres://u:p@127.0.0.1:1/db?schema=%22public%22",
    ] {
        let err = PostgresBackend::connect(url).await.expect_err(url);
        assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    }
}

use sqlx::Connection as _;

/// Behind PgBouncer in transaction mode, start-up options are refused or dropped, yet
/// the server must still end a statement the backend gave up on (what makes the purge
/// safe). Each of the backend's statements carries its timeout (seen in
/// `pg_stat_activity` while it waits on a row lock), and a statement sent that way is
/// ended by the server, on a connection that stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_the_server_still_ends_a_statement_at_the_response_timeout() {
    use sqlx::postgres::PgConnectOptions;
    use sqlx::{ConnectOptions as _, Executor as _};

    let server = ServerHandle::start(&distlock_testservers::PgBouncer)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = server.url();
    let backend = PostgresBackend::connect(&format!("{url}&response_timeout_ms=800"))
        .await
        .expect("connect through PgBouncer");
    assert!(backend.config().pgbouncer());
    let held = backend
        .acquire_once("stuck", Duration::from_secs(60))
        .await
        .expect("acquire")
        .expect("free");
    // Plain connections through PgBouncer: the row lock, a probe, the control.
    let plain: PgConnectOptions = url
        .split('?')
        .next()
        .unwrap_or_default()
        .parse::<PgConnectOptions>()
        .expect("url")
        .extra_float_digits(None);
    let mut blocker = plain.connect().await.expect("blocker");
    blocker
        .execute(sqlx::raw_sql(
            "BEGIN; SELECT 1 FROM distlock_locks WHERE key = 'stuck' FOR UPDATE",
        ))
        .await
        .expect("row lock");
    let waiting = "SELECT query FROM pg_stat_activity WHERE state = 'active' \
                   AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()";

    // The backend's acquire waits on the row with its timeout in the same batch.
    let (reply, seen) = tokio::join!(
        backend.try_acquire(held.key(), Duration::from_secs(5)),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            sqlx::query_scalar::<_, String>(waiting)
                .persistent(false)
                .fetch_all(&mut blocker)
                .await
                .expect("pg_stat_activity")
        }
    );
    let err = reply.expect_err("the row is locked");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        seen.iter()
            .any(|q| q.starts_with("SET LOCAL statement_timeout = '800'; ")),
        "the waiting statement does not carry its timeout: {seen:?}"
    );

    // A statement sent that way is ended by the server, on a connection still open.
    let mut probe = plain.connect().await.expect("probe");
    let ended = tokio::time::timeout(
        Duration::from_secs(5),
        probe.execute(sqlx::raw_sql(
            "SET LOCAL statement_timeout = '300'; \
             SELECT 1 FROM distlock_locks WHERE key = 'stuck' FOR UPDATE",
        )),
    )
    .await
    .expect("the server did not end the statement");
    let code = match ended {
        Err(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
        other => panic!("the statement was not cancelled: {other:?}"),
    };
    assert_eq!(code.as_deref(), Some("57014"));

    blocker
        .execute(sqlx::raw_sql("ROLLBACK"))
        .await
        .expect("rollback");
}

/// A server whose certificate another CA signed is refused at connect, as a
/// configuration error (not retryable); trusting the right CA, the same server is
/// reached.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_of_another_ca_is_a_configuration_error() {
    let tls = distlock_testservers::TlsMaterial::generate().expect("certificates");
    let server = ServerHandle::start_tls(&distlock_testservers::Postgres, &tls)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let wrong = server.tls_url(&tls, &tls.wrong_ca_file()).expect("url");
    let err = PostgresBackend::connect(&wrong)
        .await
        .expect_err("another CA");
    assert_eq!(err.kind(), ErrorKind::Configuration, "{err}");
    assert!(!err.is_retryable(), "{err}");
    let right = server.tls_url(&tls, &tls.ca_file()).expect("url");
    PostgresBackend::connect(&right)
        .await
        .expect("the right CA");
}

/// "The user's" table: accounts 1 and 2 with a balance of 100 each, migrated for
/// fenced statements.
async fn accounts_table(
    conn: &mut sqlx::PgConnection,
) -> Result<distlock_postgres::fenced::FencedTable, distlock_core::BoxError> {
    sqlx::query("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
        .execute(&mut *conn)
        .await?;
    sqlx::query("INSERT INTO accounts VALUES (1, 100), (2, 100)")
        .execute(&mut *conn)
        .await?;
    let accounts = distlock_postgres::fenced::FencedTable::new("accounts")?;
    accounts.migrate(conn).await?;
    Ok(accounts)
}

/// `FencedTable` on a table of "the user's": migrated twice, written in the user's
/// transactions, upserted, claimed, and refused under a stale fence with the
/// transaction aborted and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_statements_on_the_users_table_in_the_users_transactions(
) -> Result<(), distlock_core::BoxError> {
    use distlock_core::FencingToken;
    use distlock_postgres::fenced;
    use sqlx::{Connection, PgConnection};

    let server = server().await;
    let mut conn = PgConnection::connect(&server.url()).await?;
    let accounts = accounts_table(&mut conn).await?;
    accounts.migrate(&mut conn).await?;
    let f = |n| fenced::fence_arg(FencingToken::new(n)).expect("fence");
    let add = accounts.update("balance = balance + $2", "id = $3");

    // Fence 5 writes, in a transaction with another statement of the user's.
    let mut tx = conn.begin().await?;
    let rows = fenced::execute(
        sqlx::query(&add).bind(f(5)).bind(10_i64).bind(1_i64),
        &mut *tx,
    )
    .await?;
    assert_eq!(rows, 1);
    sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 2")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;

    // Fence 7 writes row 1; then the holder of 5 is refused, inside its transaction,
    // and its transaction's other write goes too.
    fenced::execute(
        sqlx::query(&add).bind(f(7)).bind(1_i64).bind(1_i64),
        &mut conn,
    )
    .await?;
    let mut tx = conn.begin().await?;
    sqlx::query("UPDATE accounts SET balance = 0 WHERE id = 2")
        .execute(&mut *tx)
        .await?;
    let stale = fenced::execute(
        sqlx::query(&add).bind(f(5)).bind(1000_i64).bind(1_i64),
        &mut *tx,
    )
    .await
    .expect_err("fence 5 after 7");
    assert_eq!(stale.kind(), ErrorKind::StaleFence, "{stale}");
    assert!(stale.message().contains("fence 7"), "{stale}");
    drop(tx);
    let rows: Vec<(i64, i64, i64)> =
        sqlx::query_as("SELECT id, balance, fence FROM accounts ORDER BY id")
            .fetch_all(&mut conn)
            .await?;
    assert_eq!(rows, vec![(1, 111, 7), (2, 90, 0)]);

    // A statement over several rows is refused whole when one row is newer.
    let all = accounts.update("balance = balance + $2", "id = ANY($3)");
    let stale = fenced::execute(
        sqlx::query(&all)
            .bind(f(6))
            .bind(1_i64)
            .bind(vec![1_i64, 2]),
        &mut conn,
    )
    .await
    .expect_err("row 1 is at 7");
    assert_eq!(stale.kind(), ErrorKind::StaleFence);
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 2")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(balance, 90, "row 2 was written by a refused statement");

    // An upsert: a new row takes the fence from VALUES, an existing one is checked.
    let upsert = format!(
        "INSERT INTO accounts (id, balance, fence) VALUES ($2, $3, $1) \
         ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance, {}",
        accounts.assignment()
    );
    fenced::execute(
        sqlx::query(&upsert).bind(f(3)).bind(3_i64).bind(30_i64),
        &mut conn,
    )
    .await?;
    fenced::execute(
        sqlx::query(&upsert).bind(f(8)).bind(1_i64).bind(80_i64),
        &mut conn,
    )
    .await?;
    let stale = fenced::execute(
        sqlx::query(&upsert).bind(f(7)).bind(1_i64).bind(70_i64),
        &mut conn,
    )
    .await
    .expect_err("upsert under 7 after 8");
    assert_eq!(stale.kind(), ErrorKind::StaleFence);

    // A claim (an empty SET) raises the fence without writing.
    let claim = accounts.update("", "id = $2");
    fenced::execute(sqlx::query(&claim).bind(f(9)).bind(2_i64), &mut conn).await?;
    let stale = fenced::execute(
        sqlx::query(&add).bind(f(8)).bind(1_i64).bind(2_i64),
        &mut conn,
    )
    .await
    .expect_err("write under 8 after a claim under 9");
    assert_eq!(stale.kind(), ErrorKind::StaleFence);
    let rows: Vec<(i64, i64, i64)> =
        sqlx::query_as("SELECT id, balance, fence FROM accounts ORDER BY id")
            .fetch_all(&mut conn)
            .await?;
    assert_eq!(rows, vec![(1, 80, 8), (2, 90, 9), (3, 30, 3)]);

    // No statement, fenced or not, lowers a fence: the table's trigger refuses it.
    let lowered = sqlx::query("UPDATE accounts SET fence = 1 WHERE id = 1")
        .execute(&mut conn)
        .await
        .map_err(fenced::from_sqlx)
        .expect_err("a plain UPDATE lowering the fence");
    assert_eq!(lowered.kind(), ErrorKind::StaleFence, "{lowered}");
    sqlx::query("UPDATE accounts SET balance = 81 WHERE id = 1")
        .execute(&mut conn)
        .await?;
    let fence: i64 = sqlx::query_scalar("SELECT fence FROM accounts WHERE id = 1")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(fence, 8);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_releases_of_names_that_had_a_waiter_notify_and_every_waiter_is_woken(
) -> Result<(), distlock_core::BoxError> {
    use std::sync::Arc;

    use distlock_core::{LockClient, LockOptions};
    use sqlx::{Connection, PgConnection};

    let server = server().await;
    let mut conn = PgConnection::connect(&server.url()).await?;
    // A lock table made before the `waited` column: connecting adds it.
    sqlx::query(
        "CREATE TABLE distlock_locks (key text PRIMARY KEY, owner bytea NOT NULL, \
         fence bigint NOT NULL, expires_at timestamptz NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let backend = Arc::new(PostgresBackend::connect(&server.url()).await?);
    let waited = |key: &'static str| {
        let url = server.url();
        async move {
            let mut conn = PgConnection::connect(&url).await?;
            let found: Option<bool> =
                sqlx::query_scalar("SELECT waited FROM distlock_locks WHERE key = $1")
                    .bind(key)
                    .fetch_optional(&mut conn)
                    .await?;
            Ok::<_, distlock_core::BoxError>(found)
        }
    };

    // Nobody waits: the release sends no notification (the row is not marked).
    let alone = backend
        .acquire_once("alone", Duration::from_secs(5))
        .await?
        .expect("free");
    backend.release_lease(&alone).await?;
    assert_eq!(waited("alone").await?, Some(false));

    // Two waiters on a held name, each polling no more often than every 30 s: only a
    // notification can hand the lock on within seconds, to one and then the other.
    let holder = backend
        .acquire_once("shared", Duration::from_secs(60))
        .await?
        .expect("free");
    let options = LockOptions::new(Duration::from_secs(60))
        .with_backoff(Duration::from_secs(30), Duration::from_secs(30));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..2 {
        let client = LockClient::with_options(backend.clone(), options.clone())?;
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = client.lock("shared", Duration::from_secs(60)).await;
            let _ = tx.send(guard);
        });
    }
    let marked = tokio::time::timeout(Duration::from_secs(10), async {
        while waited("shared").await? != Some(true) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok::<_, distlock_core::BoxError>(())
    })
    .await;
    assert!(matches!(marked, Ok(Ok(()))), "no waiter marked the name");
    // Both waiters have made their first attempt and gone to sleep.
    tokio::time::sleep(Duration::from_millis(500)).await;
    backend.release_lease(&holder).await?;
    for n in 1..=2 {
        let guard = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("waiter {n} was not woken by the release"))
            .expect("a waiter's answer")?;
        guard.release().await?;
    }
    Ok(())
}

/// A transfer between two rows under a set of two keys (`LockClient::lock_all`): one
/// transaction writes each row under its own key's fence. Once another holder has
/// written one row under a newer fence, the set's next transfer is refused whole: the
/// stale statement aborts the transaction, and the other row's write goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_under_a_set_writes_each_row_under_its_own_key_s_fence(
) -> Result<(), distlock_core::BoxError> {
    use distlock_core::{LockClient, LossReason};
    use distlock_postgres::fenced;
    use sqlx::{Connection, PgConnection};
    use std::sync::Arc;

    let server = server().await;
    let backend = Arc::new(PostgresBackend::connect(&server.url()).await?);
    let mut conn = PgConnection::connect(&server.url()).await?;
    let accounts = accounts_table(&mut conn).await?;
    let add = accounts.update("balance = balance + $2", "id = $3");

    // Renewed every second, so that the loss is found within about one.
    let options = distlock_core::LockOptions::new(Duration::from_secs(3));
    let client = LockClient::with_options(backend.clone(), options)?;
    let set = client
        .lock_all(["account/1", "account/2"], Duration::from_secs(5))
        .await?;
    let fences = set.fences();
    let (of_1, of_2) = (
        fences.get("account/1").expect("in the set"),
        fences.get("account/2").expect("in the set"),
    );
    /// Moves `amount` from row 1 to row 2 in one transaction, each row under its key's
    /// fence.
    async fn transfer(
        conn: &mut PgConnection,
        add: &str,
        fences: [(distlock_core::FencingToken, i64); 2],
        amount: i64,
    ) -> distlock_core::Result<()> {
        let mut tx = conn.begin().await.map_err(fenced::from_sqlx)?;
        for ((fence, id), by) in fences.into_iter().zip([-amount, amount]) {
            let query = sqlx::query(add)
                .bind(fenced::fence_arg(fence)?)
                .bind(by)
                .bind(id);
            fenced::execute(query, &mut *tx).await?;
        }
        tx.commit().await.map_err(fenced::from_sqlx)
    }
    let of_set = [(of_1, 1), (of_2, 2)];
    transfer(&mut conn, &add, of_set, 10).await?;

    // The set loses account/2 (deleted behind its back); another holder writes row 2.
    let lost = set.lost();
    assert!(backend.force_release(&LockKey::new("account/2")?).await?);
    let other = LockClient::new(backend.clone());
    let newer = other.lock("account/2", Duration::from_secs(5)).await?;
    assert!(newer.fence() > of_2);
    fenced::execute(
        sqlx::query(&add)
            .bind(fenced::fence_arg(newer.fence())?)
            .bind(1_i64)
            .bind(2_i64),
        &mut conn,
    )
    .await?;

    // The set's next transfer is refused whole.
    let refused = transfer(&mut conn, &add, of_set, 10)
        .await
        .expect_err("row 2 was written under a newer fence");
    assert_eq!(refused.kind(), ErrorKind::StaleFence, "{refused}");
    let rows: Vec<(i64, i64)> = sqlx::query_as("SELECT id, balance FROM accounts ORDER BY id")
        .fetch_all(&mut conn)
        .await?;
    assert_eq!(
        rows,
        vec![(1, 90), (2, 111)],
        "a refused transfer wrote a row"
    );
    let (key, reason) = tokio::time::timeout(Duration::from_secs(5), lost)
        .await?
        .expect("a loss, not a release");
    assert_eq!((key.as_str(), reason), ("account/2", LossReason::NotHeld));
    newer.release().await?;
    Ok(())
}

/// Whether `wakes` yields within `within` milliseconds.
async fn woken(wakes: &mut distlock_core::backend::ChangeStream, within: u64) -> bool {
    use futures_util::StreamExt as _;
    tokio::time::timeout(Duration::from_millis(within), wakes.next())
        .await
        .is_ok()
}

/// A release of a key with fair waiters hands the key to the head of the queue and wakes
/// it, not the waiters behind it; a racing waiter of the key is woken too. The head's
/// next fair step finds the key its own (as a waiter without notifications finds it at
/// its next poll). Once the head releases it, the next waiter is woken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_head_of_the_queue_not_the_herd() {
    let server = server().await;
    let backend = PostgresBackend::connect(&server.url())
        .await
        .expect("connect");
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

/// A process that connects (and so migrates) while others use the tables does not wait
/// for their transactions: the migration takes no table's lock when there is nothing to
/// change. `ADD COLUMN IF NOT EXISTS` and `CREATE INDEX IF NOT EXISTS` lock the table
/// even then, which stalled every lock operation behind a connecting process, and
/// deadlocked it with fair steps (which write both tables) for a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_while_others_write_the_tables_waits_for_no_one() {
    let server = server().await;
    let first = PostgresBackend::connect(&server.url())
        .await
        .expect("connect");
    let admin = sqlx::PgPool::connect(&server.url()).await.expect("admin");
    let mut open = admin.begin().await.expect("begin");
    for statement in [
        "INSERT INTO public.distlock_locks (key, owner, fence, expires_at) \
         VALUES ('busy', '\\x00', 0, clock_timestamp())",
        "INSERT INTO public.distlock_locks_queue (key, owner, until) \
         VALUES ('busy', '\\x00', clock_timestamp())",
    ] {
        sqlx::query(statement)
            .execute(&mut *open)
            .await
            .expect("a write left open");
    }
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        PostgresBackend::connect(&server.url()),
    )
    .await
    .expect("connecting waited for another transaction's writes")
    .expect("connect");
    open.rollback().await.expect("rollback");
    let lease = second
        .acquire_once("busy", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    first.release_lease(&lease).await.expect("release");
}

/// The fence sequence's value a fair step reports when it is turned down is read after
/// it wrote its place. A release that has locked the waiter's place (to hand it the key
/// as that place stood) makes the step wait, so the step's value covers the fence that
/// release mints, and the handoff is dropped: its lease ends with the older place, so
/// its validity must not count from this step. A handoff minted after the step is
/// taken. Here an open transaction stands for the release (it locks the place and
/// mints a fence), and the notification is sent by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_of_a_place_as_it_stood_before_a_step_is_not_counted_from_that_step() {
    let server = server().await;
    let backend = PostgresBackend::connect(&server.url())
        .await
        .expect("connect");
    let admin = sqlx::PgPool::connect(&server.url()).await.expect("admin");
    let source: String =
        sqlx::query_scalar("SELECT prosrc FROM pg_proc WHERE proname = 'distlock_locks_hand_over'")
            .fetch_one(&admin)
            .await
            .expect("the handoff function");
    let channel = source
        .split("pg_notify('")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("a channel in the function")
        .to_owned();

    let key = LockKey::new("place-race").expect("key");
    let (ttl, place) = (Duration::from_secs(10), Duration::from_secs(10));
    let _holder = backend
        .acquire_once(key.as_str(), ttl)
        .await
        .expect("acquire")
        .expect("free");
    let (ahead, waiter) = (OwnerToken::random(), OwnerToken::random());
    let mut wakes = backend
        .watch_in_turn(&key, &waiter)
        .await
        .expect("watch")
        .expect("notifications");
    for owner in [ahead, waiter] {
        let step = backend
            .try_acquire_in_turn(&key, ttl, owner, place)
            .await
            .expect("queue");
        assert!(matches!(step, AcquireOutcome::Held { .. }), "{step:?}");
    }

    // The "release" locks the waiter's place, then the waiter steps again (with
    // another waiter ahead of it, so the step writes only its place) and waits.
    let mut release = admin.begin().await.expect("begin");
    sqlx::query(
        "SELECT 1 FROM public.distlock_locks_queue WHERE key = $1 AND owner = $2 FOR UPDATE",
    )
    .bind(key.as_str())
    .bind(&waiter.as_bytes()[..])
    .execute(&mut *release)
    .await
    .expect("lock the place");
    let step = {
        let (backend, key) = (backend.clone(), key.clone());
        tokio::spawn(async move { backend.try_acquire_in_turn(&key, ttl, waiter, place).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !step.is_finished(),
        "the step did not wait for the locked place"
    );
    let minted: i64 = sqlx::query_scalar("SELECT nextval('public.distlock_locks_fence')")
        .fetch_one(&mut *release)
        .await
        .expect("mint");
    release.commit().await.expect("commit");
    let step = step.await.expect("join").expect("step");
    assert!(matches!(step, AcquireOutcome::Held { .. }), "{step:?}");
    let notify = |fence: i64| {
        let payload = format!("{}\n{}:{fence}", key.as_str(), waiter.to_hex());
        let (admin, channel) = (admin.clone(), channel.clone());
        async move {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(channel)
                .bind(payload)
                .execute(&admin)
                .await
                .expect("notify");
        }
    };
    notify(minted).await;
    assert!(woken(&mut wakes, 2000).await, "the waiter was not woken");
    assert_eq!(
        handed(&backend, &key, &waiter),
        None,
        "a handoff minted while the step waited was counted from that step"
    );

    // A fence minted after the step returned: taken, counted from the step.
    let later: i64 = sqlx::query_scalar("SELECT nextval('public.distlock_locks_fence')")
        .fetch_one(&admin)
        .await
        .expect("mint");
    notify(later).await;
    assert!(woken(&mut wakes, 2000).await, "the waiter was not woken");
    let handed = handed(&backend, &key, &waiter).expect("a handoff minted after the step");
    assert_eq!(handed.fence.get(), u64::try_from(later).expect("positive"));
}

/// A grant whose statement waited on the server for the key's row, past the wait of
/// the `lock()` that sent it, is applied once the row is free: the client's cleanup
/// releases it again after the server's bound on a statement (the response timeout,
/// declared as `applied_within`), so it does not hold the key for its whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_applied_after_its_wait_gave_up_is_given_back_within_the_statement_timeout() {
    use sqlx::{Connection, Executor};

    let server = server().await;
    let bound = Duration::from_secs(9);
    let backend = std::sync::Arc::new(
        // Without notifications, so that the wait's first step is the grant (the
        // registration of a watch would wait on the row first).
        PostgresBackend::connect(&format!(
            "{}?response_timeout_ms={}&notify=false",
            server.url(),
            bound.as_millis()
        ))
        .await
        .expect("connect"),
    );
    assert_eq!(backend.capabilities().applied_within, Some(bound));
    // The key's row exists (a lease granted and released), and another transaction
    // holds it, as a purge or a fair step would.
    let first = backend
        .acquire_once("late", Duration::from_secs(5))
        .await
        .expect("acquire")
        .expect("free");
    backend.release_lease(&first).await.expect("release");
    let mut blocker = sqlx::PgConnection::connect(&server.url())
        .await
        .expect("blocker");
    blocker
        .execute(sqlx::raw_sql(
            "BEGIN; SELECT 1 FROM distlock_locks WHERE key = 'late' FOR UPDATE",
        ))
        .await
        .expect("row lock");
    let client = distlock_core::LockClient::new(backend.clone());
    let started = tokio::time::Instant::now();
    let waited = client.lock("late", Duration::from_millis(500)).await;
    assert_eq!(
        waited.map(drop).map_err(|e| e.kind()),
        Err(ErrorKind::Timeout)
    );
    // The row comes free 7 s in, after the cleanup's fixed passes (the last at 6.25 s
    // after the wait gave up): the statement still waiting on it is applied then.
    tokio::time::sleep_until(started + Duration::from_secs(7)).await;
    blocker
        .execute(sqlx::raw_sql("ROLLBACK"))
        .await
        .expect("rollback");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let key = LockKey::new("late").expect("key");
    assert!(
        backend.inspect(&key).await.expect("inspect").is_some(),
        "the statement that waited on the row was supposed to grant the key"
    );
    // The bound after the wait gave up (0.5 s + 9 s), a pass 250 ms after it, and room.
    tokio::time::sleep_until(started + Duration::from_secs(11)).await;
    assert_eq!(
        backend
            .inspect(&key)
            .await
            .expect("inspect")
            .map(|i| i.fence),
        None,
        "the late grant was still held 11 s in (its TTL is 30 s)"
    );
}

/// What `backend` heard was handed to `owner` on `key`; `None` where it hears of no
/// handoffs.
fn handed(backend: &PostgresBackend, key: &LockKey, owner: &OwnerToken) -> Option<Handoff> {
    backend.handoffs()?.handed_over(key, owner)
}

/// A stale-fence refusal (SQLSTATE `DLF01`) whose detail names no fence is still a
/// stale fence, and names no made-up fence: never "fence 0".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_fence_refusal_without_the_rows_fence_names_none(
) -> Result<(), distlock_core::BoxError> {
    use distlock_postgres::fenced;
    use sqlx::{Connection, PgConnection};

    let server = server().await;
    let mut conn = PgConnection::connect(&server.url()).await?;
    for detail in ["", "USING DETAIL = 'not a fence',", "USING DETAIL = '0',"] {
        let raise = format!(
            "DO $$ BEGIN RAISE EXCEPTION 'stale' {} ERRCODE = 'DLF01'; END $$",
            match detail {
                "" => "USING".to_owned(),
                d => d.to_owned(),
            }
        );
        let refused = fenced::execute(sqlx::query(&raise), &mut conn)
            .await
            .expect_err("the statement raises DLF01");
        assert_eq!(refused.kind(), ErrorKind::StaleFence, "{refused}");
        let text = refused.to_string();
        assert!(text.contains("a higher fence"), "{detail:?}: {text}");
        assert!(!text.contains("fence 0"), "{detail:?}: {text}");
    }
    Ok(())
}

/// A lock store made by the previous version (no holder columns), with a live lease,
/// a live permit and a term in it: connecting migrates it in place; the old rows read
/// as held by no one known, their owners release them as before, and every new grant
/// stores its holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_the_previous_schema_migrates_and_its_leases_stay_held(
) -> Result<(), distlock_core::BoxError> {
    use distlock_core::{FencingToken, Holder, LockClient, LockOptions};
    use sqlx::{Connection, PgConnection};

    let server = server().await;
    let mut conn = PgConnection::connect(&server.url()).await?;
    // The previous version's tables, as its migration made them.
    for statement in [
        "CREATE TABLE distlock_locks (key text PRIMARY KEY, owner bytea NOT NULL, \
           fence bigint NOT NULL, expires_at timestamptz NOT NULL, \
           waited boolean NOT NULL DEFAULT false)",
        "CREATE SEQUENCE distlock_locks_fence AS bigint",
        "CREATE TABLE distlock_locks_queue (key text NOT NULL, owner bytea NOT NULL, \
           seq bigint GENERATED BY DEFAULT AS IDENTITY, until timestamptz NOT NULL, \
           ttl_ms float8, PRIMARY KEY (key, owner))",
        "CREATE TABLE distlock_locks_names (name text PRIMARY KEY, \
           lim bigint NOT NULL, term bigint NOT NULL DEFAULT 0)",
        "CREATE TABLE distlock_locks_permits (name text NOT NULL, owner bytea NOT NULL, \
           count bigint NOT NULL, fence bigint NOT NULL, \
           expires_at timestamptz NOT NULL, value text, PRIMARY KEY (name, owner))",
        "CREATE TABLE distlock_locks_places (name text NOT NULL, owner bytea NOT NULL, \
           count bigint NOT NULL, until timestamptz NOT NULL, PRIMARY KEY (name, owner))",
        "CREATE TABLE distlock_locks_terms (name text NOT NULL, fence bigint NOT NULL, \
           previous bigint NOT NULL, value text NOT NULL, PRIMARY KEY (name, fence))",
    ] {
        sqlx::query(statement).execute(&mut conn).await?;
    }
    // A lease and a leader's permit, granted by the previous version, live for a minute.
    let (lease_owner, leader_owner) = (OwnerToken::random(), OwnerToken::random());
    sqlx::query(
        "INSERT INTO distlock_locks (key, owner, fence, expires_at) \
         VALUES ('old', $1, 7, clock_timestamp() + interval '60 seconds')",
    )
    .bind(&lease_owner.as_bytes()[..])
    .execute(&mut conn)
    .await?;
    for statement in [
        "INSERT INTO distlock_locks_names (name, lim, term) VALUES ('leader', 1, 8)",
        "INSERT INTO distlock_locks_permits (name, owner, count, fence, expires_at, value) \
         VALUES ('leader', $1, 1, 8, clock_timestamp() + interval '60 seconds', '10.0.0.8:80')",
        "INSERT INTO distlock_locks_terms (name, fence, previous, value) \
         VALUES ('leader', 8, 0, '10.0.0.8:80')",
    ] {
        let query = sqlx::query(statement);
        let query = if statement.contains("$1") {
            query.bind(&leader_owner.as_bytes()[..])
        } else {
            query
        };
        query.execute(&mut conn).await?;
    }
    sqlx::query("SELECT setval('distlock_locks_fence', 8)")
        .execute(&mut conn)
        .await?;

    let backend = std::sync::Arc::new(PostgresBackend::connect(&server.url()).await?);
    // The old lease: held, fence kept, no holder known.
    let old = LockKey::new("old")?;
    let info = backend
        .inspect(&old)
        .await?
        .expect("the old lease is still held");
    assert_eq!(info.fence, FencingToken::new(7));
    assert_eq!((info.holder, info.granted_at), (None, None));
    let listed = backend.list("").await?;
    assert!(
        listed.iter().any(|(k, i)| *k == old && i.holder.is_none()),
        "{listed:?}"
    );
    // The old leader: its permit and term read back, with no holder known.
    let client = LockClient::with_options(
        backend.clone(),
        LockOptions::new(Duration::from_secs(30))
            .with_holder(Holder::new("migrated-host:1")?.with_payload("after the upgrade")?),
    )?;
    let election = client.election("leader")?;
    let leader = election
        .leader()
        .await?
        .expect("the old leader still leads");
    assert_eq!(
        (
            leader.fence,
            leader.value.as_str(),
            leader.holder,
            leader.granted_at
        ),
        (FencingToken::new(8), "10.0.0.8:80", None, None)
    );
    // Its owner releases the old lease as before; the next grant stores its holder.
    assert_eq!(
        backend.release(&old, &lease_owner).await?,
        ReleaseOutcome::Released
    );
    let Ok(guard) = client.try_lock("old").await? else {
        panic!("the released key was still held");
    };
    let info = backend.inspect(&old).await?.expect("held");
    assert!(info.fence > FencingToken::new(8), "{info:?}");
    let holder = info
        .holder
        .clone()
        .expect("a holder stored with the new grant");
    assert_eq!(
        (holder.id(), holder.payload()),
        ("migrated-host:1", Some("after the upgrade"))
    );
    assert!(info.granted_at.is_some(), "{info:?}");
    guard.release().await?;
    // A new semaphore grant beside the old leader's permit stores its holder too.
    let semaphore = client.semaphore("workers", 2)?;
    let Ok(permit) = semaphore.try_acquire().await? else {
        panic!("a fresh semaphore refused its first permit");
    };
    let holders = semaphore.holders().await?;
    assert_eq!(
        holders
            .iter()
            .map(|h| h.holder.as_ref().map(Holder::id))
            .collect::<Vec<_>>(),
        [Some("migrated-host:1")]
    );
    permit.release().await?;
    Ok(())
}
