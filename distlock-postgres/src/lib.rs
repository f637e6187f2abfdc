//! The PostgreSQL backend of distlock: a lock table.
//!
//! ```no_run
//! # async fn demo() -> distlock_core::Result<()> {
//! use std::sync::Arc;
//! use distlock_core::LockClient;
//! use distlock_postgres::PostgresBackend;
//!
//! let backend = PostgresBackend::connect("postgres://app:password@db/app?table=service_locks").await?;
//! let client = LockClient::new(Arc::new(backend));
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! One row per lock name: `key`, `owner` (the 128-bit owner token), `fence`,
//! `expires_at` and `waited`. The backend creates the table, and a sequence for
//! fences, with an idempotent migration on connect. Every operation is one statement
//! in autocommit mode — one round trip — and judges time by the server's
//! `clock_timestamp()`:
//!
//! - **acquire** inserts the row, or takes over a row whose lease has expired
//!   (`INSERT … ON CONFLICT DO UPDATE … WHERE expires_at <= clock_timestamp()`), and
//!   returns the fence, or the holder's remaining TTL;
//! - **release** ends the lease only for its owner (the row stays, with its fence,
//!   until the purge) and, for a name that has had a waiter, sends a notification
//!   (`pg_notify`) that wakes waiters listening on the table's channel. A waiter marks
//!   the name (`waited`) after LISTEN and before its first attempt, and the mark stays
//!   until the row is purged, so no release a waiter could miss goes unsent. Releases
//!   nobody waits for send none: NOTIFY makes the commits of every notifying
//!   transaction in the database wait for one another, which cost S2 (32 tasks on
//!   fresh names) more than half its throughput when every release notified;
//! - **extend** moves `expires_at` only for its owner and only while the lease is live;
//! - **inspect** reads the holder's fence and remaining TTL;
//! - **a set of keys** (`LockClient::lock_all`) is one statement, all or none
//!   (`LockBackend::sets`): every key is taken as a single acquire takes it, in
//!   the keys' sorted order, and a set taken only in part aborts its own statement (it
//!   casts a text naming the first key found held to an integer), so that PostgreSQL
//!   undoes every write of it. A set refused whole wrote nothing and reports the
//!   holder's remaining TTL when the statement's snapshot sees that holder; one
//!   refused in part reports the key, not the TTL.
//!
//! **Fair mode** (contract point 10; [`LockOptions::with_fair`](distlock_core::LockOptions::with_fair))
//! keeps a key's waiters in a second table, `<table>_queue`: one row per waiter
//! (`key`, `owner`, an identity `seq` for the order of arrival, `until`, when its
//! place runs out, and `ttl_ms`, the TTL of its last fair step). The fair step is one
//! statement, one round trip: a waiter with no live place ahead of it takes the key
//! as the plain acquire does and deletes its own row; any other upserts its row
//! (keeping its `seq`) and deletes the places that ran out. A vanished waiter leaves
//! the queue once its place runs out (`queue_place`, 3 s unless set). The purge
//! deletes places that ran out long ago with the ended leases.
//!
//! **A release hands the key over** (`FairBackend::handoffs`, answered where
//! notifications are on). A release of a name that has had a waiter (a forced one
//! too) calls the function `<table>_hand_over` in its own statement, with the key's row still locked
//! by it: the first waiter whose place is live (its queue row locked in turn) is
//! granted the key with the next fence, for its TTL or until its place runs out if
//! that is sooner, and leaves the queue; the notification's payload is the key, a
//! newline, and `<owner>:<fence>`. Only that fair waiter is woken (with any racing
//! waiters of the key), and it holds the lock without a request of its own: a fair
//! handoff costs the release and one notification. A waiter queued by an earlier
//! version, with no `ttl_ms`, is woken to ask (`<owner>` alone), and with no fair
//! waiter every waiter of the key is woken. A waiter that gives up calls
//! `<table>_leave_queue`, which locks the key's row before the queue, as a release
//! does, so it either finds the key handed to it, and passes it on as a release
//! would, or leaves the queue before any release sees it. Where notifications are off
//! (`notify=false`, PgBouncer) the release still hands the key over; the waiter finds
//! it its own at its next fair step, which renews it.
//!
//! **Semaphores, read-write locks and elections**
//! ([`PermitBackend`](distlock_core::backend::PermitBackend), `LockBackend::permits`) live in
//! four more tables, migrated with the others: `<table>_names` (a name's limit and its
//! last term), `<table>_permits` (the grants), `<table>_places` and `<table>_terms`.
//! The grant step is one call of the function `<table>_take_permits`, one round trip:
//! it locks the name's row first, and every statement after that reads a fresh
//! snapshot, so two grants on one name never count the same free permits. Fences come
//! from the lock table's logged sequence. Every release of permits notifies (a
//! `permits/<name>` payload on the table's channel). Expired grants and places are
//! deleted by the next grant on their name; the names, their last 64 terms, and the
//! expired rows of a name no grant comes to again stay until dropped:
//! `purge_expired` does not delete them.
//!
//! Under contention, serialization failures and unique violations (SQLSTATE 40001,
//! 40P01, 23505) mean "not acquired", never an error.
//!
//! # What it guarantees
//!
//! The whole contract of [`distlock_core::LockBackend`], proved by the conformance suite
//! against a real server, fault cases included.
//!
//! - **Fences are durable** ([`FenceDurability::Durable`](distlock_core::backend::FenceDurability))
//!   and strictly increasing per key: they come from one logged sequence, so neither a
//!   restart nor deleting old rows ([`PostgresBackend::purge_expired`]) makes a later
//!   fence smaller. Each lock statement sets `synchronous_commit = on` itself, whatever
//!   the server's or the role's setting, so that a commit is flushed before its reply.
//!   With `synchronous_commit=off` a crash may lose the last commits, and fences are
//!   declared best effort; with `synchronous_commit=server` the backend keeps the
//!   setting the server gives its sessions, reads it at connect, and declares fences
//!   best effort where it is `off`.
//! - **A late grant is given back.** Every statement runs under a `statement_timeout`
//!   of the response timeout, so a statement the client gave up on (a wait that
//!   reached its deadline while it waited on the server for the key's row) is applied
//!   within that time or not at all, on a server that kept running (a paused server
//!   applies what waited in its socket once it resumes): the backend declares it
//!   ([`Capabilities::applied_within`](distlock_core::backend::Capabilities::applied_within)),
//!   and the client's cleanup releases once more after it. Behind PgBouncer a batch may
//!   first wait in the pooler's queue (its `query_wait_timeout`), and nothing is
//!   declared: a grant applied after the cleanup's last pass, 6.25 s after the attempt
//!   was abandoned, holds the key until its TTL.
//! - **Leases survive a restart** (a clean one or a crash) with the default settings;
//!   with `unlogged=true` a crash empties the table (fences stay durable).
//! - **Bounded storage.** A released lease's row is marked ended, not deleted (see
//!   `sql.rs` for why); the backend deletes rows that ended more than twice the
//!   response timeout ago every `purge_every_ms` (30 s unless set), on its own. A lock
//!   name's row stays about that long after its last lease, not for good.
//!   `purge=false` turns it off where another process purges.
//! - **PgBouncer in transaction pooling mode**, with `pgbouncer=true` in the URL (the
//!   whole conformance suite passes through Debian's PgBouncer 1.18 in CI). In that
//!   mode each operation is one simple-protocol batch, still one round trip:
//!   `SET LOCAL statement_timeout` and `synchronous_commit` (unless `server`) followed by
//!   the statement with its arguments written as literals, so that no prepared
//!   statement, no start-up option and no session setting has to survive from one
//!   server connection to the next, and the server still ends a statement at the
//!   response timeout. PgBouncer needs nothing but `pool_mode = transaction`; the
//!   backend sends no `extra_float_digits` or `options` at start-up. LISTEN needs a
//!   session of its own, so notifications are off (waiters poll with backoff), and
//!   `notify=true` with `pgbouncer=true` is a configuration error. Without
//!   `pgbouncer=true` the backend prepares its statements, which transaction pooling
//!   breaks (`prepared statement "sqlx_s_1" already exists`), and PgBouncer's defaults
//!   refuse its start-up options.
//!
//! # What it does not guarantee
//!
//! - Leases live on one primary: with asynchronous replication, a failover can lose a
//!   grant that was not yet replicated. Use synchronous replication for that.
//! - Notifications are lost while the LISTEN connection is down; waiters notice the
//!   dropped stream and poll until it is back.
//!
//! # Fenced writes
//!
//! [`fenced::FencedTable`] makes your own statements on your own tables refuse a stale
//! fence, inside your transactions; [`fenced::PostgresStore`] is a fenced store on a
//! table of its own (the contract is `distlock_core::FencedStore`'s).
//!
//! # Configuration
//!
//! See [`PostgresConfig`]: `postgres://` and `postgresql://` URLs, TLS through
//! `sslmode` (with this crate's `tls` feature), schema and table (validated as plain
//! identifiers, so no setting can inject SQL), pool size, commit durability, an
//! unlogged table, and timeouts. Credentials are redacted in `Debug` output and errors.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod config;
mod error;
pub mod fenced;
mod permits;
mod sql;

pub use backend::PostgresBackend;
pub use config::{PostgresConfig, SynchronousCommit, DEFAULT_PORT, SCHEMES};
pub use distlock_core::backend::Endpoint;
/// The sqlx this crate is built on, for [`PostgresBackend::from_pool`]'s pool and
/// [`PostgresConfig::new`]'s options.
pub use sqlx;

/// Connects to the backend `url` names, as a shared trait object: the one entry
/// `distlock::connect` calls for this crate's [`SCHEMES`].
pub async fn connect(
    url: &str,
) -> distlock_core::Result<std::sync::Arc<distlock_core::DynLockBackend>> {
    Ok(std::sync::Arc::new(PostgresBackend::connect(url).await?))
}

/// This crate as whoever chooses backends by URL finds it (the `distlock` facade's
/// `connect`, the `distlock` command line, lockbench): its name, its [`SCHEMES`] and
/// the feature each needs, its server's [`DEFAULT_PORT`], [`connect`], and the tables it keeps
/// (`distlock migrate`).
pub const DESCRIPTOR: distlock_core::backend::Descriptor = {
    use distlock_core::backend::{Descriptor, Migration};
    Descriptor::new("postgres", &config::SCHEME_LIST, DEFAULT_PORT, |url| {
        Box::pin(async move { connect(&url).await })
    })
    .with_migration(Migration::new(
        |url| {
            Ok(PostgresBackend::migration_sql(&PostgresConfig::from_url(
                url,
            )?))
        },
        |url| {
            Box::pin(async move {
                let config = PostgresConfig::from_url(&url)?.with_migrate(true);
                let backend = PostgresBackend::connect_with(config).await?;
                let config = backend.config();
                Ok(format!(
                    "the tables of {}.{} are in place",
                    config.schema(),
                    config.table()
                ))
            })
        },
    ))
};
