//! The MySQL and MariaDB backend of distlock: a lock table.
//!
//! ```no_run
//! # async fn demo() -> distlock_core::Result<()> {
//! use std::sync::Arc;
//! use distlock_core::LockClient;
//! use distlock_mysql::MySqlBackend;
//!
//! let backend = MySqlBackend::connect("mysql://app:password@db/app?table=service_locks").await?;
//! let client = LockClient::new(Arc::new(backend));
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! The lock table services write by hand (`INSERT … ON DUPLICATE KEY UPDATE`, taking
//! over a row whose lease ran out), without its usual faults. One row per lock name:
//! `name`, `owner` (the 128-bit owner token), `fence` and `expires_at`, in an InnoDB
//! table the backend creates on connect with an idempotent migration, beside a
//! one-row table `<table>_floor`. Every operation is one statement in autocommit mode
//! — one round trip — and judges time by the server's clock in UTC, to the
//! microsecond (`UTC_TIMESTAMP(6)`), never a client's:
//!
//! - **acquire** inserts the row, or takes over a row whose lease has ended, and draws
//!   the fence in the same statement, under the row's lock; the statement reports the
//!   fence, or a refusal with the holder's remaining TTL, in its OK packet, so nothing
//!   is read back;
//! - **release** ends the lease only for its owner, comparing the whole owner token on
//!   the server (the row stays, with its fence, until the purge);
//! - **extend** moves `expires_at` only for its owner and only while the lease is live;
//! - **inspect** and **list** read the holder's fence and remaining TTL;
//! - **a set of keys** (`LockClient::lock_all`) is one batch of statements in one round
//!   trip, all or none (`LockBackend::sets`): a short transaction at `READ
//!   COMMITTED` takes every key as a single acquire does, in the keys' sorted order,
//!   counts the keys its owners hold, ends those leases again when that is not all of
//!   them, and commits; a read after the commit gives the answer. The count goes
//!   through the session's user variable `@distlock_set`. A refused set also ends a
//!   lease its own owner held on one of its keys before (a retry of a set whose
//!   answer was lost gives that set back). A batch that does not finish (cancelled,
//!   cut off, or a lock wait that ran out, which fails only its statement and leaves
//!   the transaction open) closes its connection, and the server rolls the
//!   transaction back.
//!
//! MySQL has no notifications a waiter could listen for, so waiters poll, with
//! backoff (`capabilities.change_notification` is false); a refused grant reports the
//! holder's remaining TTL, so a waiter never sleeps past the lease's end.
//!
//! **Fair mode** (contract point 10; [`LockOptions::with_fair`](distlock_core::LockOptions::with_fair))
//! keeps a key's waiters in a third table, `<table>_queue`: one row per waiter (`name`,
//! `owner`, an `AUTO_INCREMENT` `seq` for the order of arrival, and `until`, when its
//! place runs out). The fair step is one short transaction at `READ COMMITTED`: it
//! first takes the key's row in the lock table exclusively (creating it, ended and
//! with no fence minted, for a new name), so the fair steps and plain acquisitions of
//! a key run one at a time and no two waiters' steps can deadlock; then it drops the
//! places that ran out, queues the owner (or renews its place, keeping its `seq`), and,
//! when the owner is at the head, takes the key as the plain acquire does and leaves
//! the queue. Nine or ten round trips, where a plain acquire takes one. A fair step
//! (or a purge) that does not finish, cut at its deadline or failed part way, closes
//! its connection rather than give it back: dropped while its `BEGIN` was in flight,
//! it would leave the connection inside a transaction the driver does not know of,
//! and the next caller's statements would run in it, uncommitted. A vanished
//! waiter leaves the queue once its place runs out; a waiter that gives up deletes its
//! row. Permits (semaphores, read-write locks) are not offered
//! (`LockBackend::permits` answers `None`: a semaphore on this backend is an error that
//! says so). Elections run over a lease instead: each term is a lock on
//! `election/<name>`, with no recorded terms and no proclaim (see
//! [`Election`](distlock_core::Election)).
//!
//! Under contention, a deadlock the server broke (1213) or a row-lock wait that ran
//! out (1205) means "not acquired", never an error.
//!
//! # What it guarantees
//!
//! The contract of [`distlock_core::LockBackend`], fair mode included, but its
//! optional permit points, proved by the conformance suite against a real MariaDB
//! server, fault cases included.
//!
//! - **Fences are durable** ([`FenceDurability::Durable`](distlock_core::backend::FenceDurability))
//!   and strictly increasing per name: each row keeps its name's fence and a grant
//!   raises it by one under the row's lock; a name's first row starts above the
//!   highest fence any purged row had (the floor), and the purge raises the floor and
//!   deletes rows in one transaction that no grant overlaps. With InnoDB's default
//!   `innodb_flush_log_at_trx_commit=1` every grant is on disk before its reply;
//!   with 0 or 2 a crash can lose the last grants, and the fences they minted can be
//!   minted again: do not run the lock table so.
//! - **Leases survive a restart** (a clean one or a crash), being InnoDB rows.
//! - **Bounded storage.** A released lease's row is kept for its fence until the
//!   purge: every `purge_every_ms` (30 s unless set) the backend deletes the rows of
//!   released leases and of leases that ran out more than `purge_after_ms` ago (a
//!   minute unless set). `purge=false` turns it off where another process purges
//!   ([`MySqlBackend::purge_expired`]).
//!
//! # What it does not guarantee
//!
//! - **Replicas and failover.** Leases and fences live on the primary. With MySQL's
//!   asynchronous replication (or MariaDB's), a failover to a replica that had not
//!   yet applied the last grants loses them: a second holder can then be granted the
//!   same name, under a fence the first holder already had. Semi-synchronous
//!   replication (`rpl_semi_sync_master_wait_point=AFTER_SYNC`) or Galera narrow
//!   this; the backend cannot detect it. Never point the backend at a replica: a
//!   read-only server's refusal (1290) is reported as unavailable, but a replica
//!   opened for writes would grant locks of its own.
//! - **A late grant can hold the key until its TTL.** InnoDB bounds each wait for a
//!   row lock (`innodb_lock_wait_timeout`: the response timeout, rounded up to whole
//!   seconds, on the backend's own pool; the pool's own setting, 50 s by default, with
//!   `from_pool`), not a statement: a statement the client gave up on (a wait that
//!   reached its deadline while the statement waited for the key's row) can still be
//!   applied after the client's cleanup made its last pass, 6.25 s after the attempt
//!   was abandoned, and that grant then holds the key until its TTL. No bound is
//!   declared ([`Capabilities::applied_within`](distlock_core::backend::Capabilities::applied_within)
//!   is `None`).
//! - **Session locks are not used.** MySQL's `GET_LOCK` ties a lock to a connection:
//!   it has no TTL a holder could renew, no fence, ends whenever the connection drops
//!   (a pooled connection, a proxy or a failover), and is not replicated. The table
//!   gives a lease that outlives a connection, a fence, and listing; it costs a row
//!   write per operation. lockbench measures `GET_LOCK`/`RELEASE_LOCK` beside it as
//!   the session-lock floor.
//! - A statement that waited on a row lock judges leases by the clock at its start (a
//!   lease looks alive a little longer; a new lease ends a little sooner): safe in
//!   both directions, see `sql.rs`.
//!
//! # Fenced writes
//!
//! [`fenced::FencedTable`] makes your own statements on your own tables refuse a stale
//! fence, inside your transactions (a column and a trigger); [`fenced::MySqlStore`] is
//! a fenced store on a table of its own (the contract is
//! `distlock_core::FencedStore`'s): one statement per write, the fence compared and
//! stored with the value.
//!
//! # Configuration
//!
//! See [`MySqlConfig`]: `mysql://` and `mariadb://` URLs, the table (validated as a
//! plain identifier, so no setting can inject SQL), pool size, migration, purge and
//! timeouts. Credentials are redacted in `Debug` output and errors.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod config;
mod error;
pub mod fenced;
mod sql;

pub use backend::MySqlBackend;
pub use config::{MySqlConfig, DEFAULT_PORT, SCHEMES};
pub use distlock_core::backend::Endpoint;
/// The sqlx this crate is built on, for [`MySqlBackend::from_pool`]'s pool and
/// [`MySqlConfig::new`]'s options.
pub use sqlx;

/// Connects to the backend `url` names, as a shared trait object: the one entry
/// `distlock::connect` calls for this crate's [`SCHEMES`].
pub async fn connect(
    url: &str,
) -> distlock_core::Result<std::sync::Arc<distlock_core::DynLockBackend>> {
    Ok(std::sync::Arc::new(MySqlBackend::connect(url).await?))
}

/// This crate as whoever chooses backends by URL finds it (the `distlock` facade's
/// `connect`, the `distlock` command line, lockbench): its name, its [`SCHEMES`] and
/// the feature each needs, its server's [`DEFAULT_PORT`], [`connect`], and the tables it keeps
/// (`distlock migrate`).
pub const DESCRIPTOR: distlock_core::backend::Descriptor = {
    use distlock_core::backend::{Descriptor, Migration};
    Descriptor::new("mysql", &config::SCHEME_LIST, DEFAULT_PORT, |url| {
        Box::pin(async move { connect(&url).await })
    })
    .with_migration(Migration::new(
        |url| Ok(MySqlBackend::migration_sql(&MySqlConfig::from_url(url)?)),
        |url| {
            Box::pin(async move {
                let config = MySqlConfig::from_url(&url)?.with_migrate(true);
                let backend = MySqlBackend::connect_with(config).await?;
                Ok(format!(
                    "the tables of {} are in place",
                    backend.config().table()
                ))
            })
        },
    ))
};
