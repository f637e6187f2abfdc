//! The etcd backend of distlock: leases, transactions, revisions as fences.
//!
//! ```no_run
//! # async fn demo() -> distlock_core::Result<()> {
//! use std::sync::Arc;
//! use distlock_core::LockClient;
//! use distlock_etcd::EtcdBackend;
//!
//! let backend = EtcdBackend::connect("etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379").await?;
//! let client = LockClient::new(Arc::new(backend));
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! - **acquire** grants a lease with the TTL, under an ID derived from the owner token,
//!   then in one transaction creates the key only if it does not exist, attached to
//!   that lease. The fence is the key's creation revision. A failed attempt revokes its
//!   lease, so nothing is left behind. Two round trips.
//! - **release** is one transaction: the key is deleted only if it holds the whole
//!   owner token and is attached to this acquisition's lease (the lease ID is made of
//!   63 of the token's 128 bits, so it cannot stand for the token alone); the lease is
//!   then revoked in the background. A key that expired, was taken over or was already
//!   released fails the comparison, so the release reports "not held". A force release
//!   revokes the holder's lease, so the holder's later release reports "not held".
//! - **a set of keys** (`LockClient::lock_all`) is one transaction, all or none
//!   (`LockBackend::sets`): each key's lease is granted as for a single key, the
//!   grants sent side by side, then one transaction creates every key only if none
//!   exists. Every key of a set has the same fence, that transaction's revision, above
//!   every earlier fence of each of its keys. A refused set gives its leases back. A
//!   set retried by its owners after its reply was lost finds every key its own: it
//!   is granted again with the same fences, each lease restarted from the retry.
//! - **waiting** watches the key for its deletion (a release, a force release or the
//!   lease running out) instead of polling.
//! - **semaphores, read-write locks and elections**
//!   ([`PermitBackend`](distlock_core::backend::PermitBackend), `LockBackend::permits`): a
//!   name's keys are under `<prefix>\0permits\0<name>\0`: a gate holding the limit,
//!   a key per grant on the grant's lease (deleted by etcd when it runs out), a key
//!   per place on a lease of its own, and a key per term. A grant takes its lease,
//!   reads the name's keys and commits only if the gate has not moved since (a
//!   transaction that puts the gate again), reading again when another grant came
//!   first. Fences are creation revisions. A name's gate and its
//!   last 64 terms stay until deleted.
//! - **fair mode** (contract point 10; [`LockOptions::with_fair`](distlock_core::LockOptions::with_fair))
//!   orders waiters by revision, as etcd's own Lock API does: a waiter's place is a key
//!   under `<prefix>\0queue\0<key>\0`, created once, so its creation revision is its
//!   turn. The place hangs on a lease of its own (its ID from the owner token's other
//!   bits), which each call keeps alive, so a vanished waiter's place is deleted when
//!   that lease runs out: `queue_place` rounded up to whole seconds, at least 2 s, plus
//!   the up to half a second etcd takes to expire a lease. A call reads the head of the
//!   queue, its own place and the lock in one transaction beside the keep-alive; the
//!   head, once the lock is free, takes it as the plain acquire does and deletes its
//!   place in the same transaction (after granting the lock's lease, as the plain
//!   acquire does). A waiter that gives up revokes its place's lease.
//!
//! # What it guarantees
//!
//! The whole contract of [`distlock_core::LockBackend`], proved by the conformance suite
//! against a real etcd, fault cases included, and a test that stops a three-member
//! cluster's leader while a lock is held.
//!
//! - **Fences are revisions**: strictly increasing, durable and cluster-wide
//!   ([`FenceDurability::Durable`](distlock_core::backend::FenceDurability)).
//! - **Leases survive a restart and the loss of a member** (a quorum remains): etcd
//!   is the backend to pick when the lock must survive a server.
//! - **Every owner check is a linearizable read**, on any member: etcd serves a
//!   transaction that only compares (no read, no write) from the state of the member
//!   that received it, which may not have applied the grant yet, so a renewal checked
//!   that way finds no key and reports a lock lost that nobody took. Each check reads
//!   the key as well, which etcd confirms with the leader first. `tests/etcd.rs`
//!   (`a_renewal_right_after_the_grant_...`) renews 640 locks and permits on a
//!   three-member cluster as soon as each grant comes back.
//! - **A keepalive that hangs** while the cluster is unreachable is bounded by the
//!   request timeout, and the client tells the holder it lost the lock before its
//!   validity runs out.
//!
//! # What it does not guarantee, or does differently
//!
//! - **TTLs are whole seconds, at least 2 s** (etcd's minimum lease TTL is about 1.5 s
//!   with default timings); see [`Capabilities`](distlock_core::backend::Capabilities).
//!   A [`LockClient`](distlock_core::LockClient) lengthens another TTL to the next it
//!   can grant (1 s to 2 s, 2.5 s to 3 s); the backend's own steps refuse it.
//! - **A member that is down, with several endpoints**: etcd-client spreads requests
//!   over every endpoint, the down member's too. A request routed to a member that
//!   refuses the connection never left this process, so it is sent again (with a
//!   short pause, until the request timeout) and reaches a live member; connecting
//!   does the same. A member behind a proxy or load balancer that accepts the
//!   connection and then closes it is not told apart from a failure mid-request:
//!   requests routed there fail as [`ErrorKind::Unavailable`](distlock_core::ErrorKind::Unavailable)
//!   (retryable; a waiting lock and its renewals try again). Name the members
//!   themselves as endpoints.
//! - **A member that goes silent** (paused, or cut off without a reset: it neither
//!   answers nor refuses) holds each request the channel routes to it until the
//!   response time-out (`response_timeout_ms`, 5 s unless set); the request then fails
//!   retryably, and is not sent again by the backend, since it may have been applied.
//!   etcd-client's balancer does not route around such a member at once: in the test
//!   below, a client that reached only one member of three (its links to the other
//!   two cut) saw about two attempts in three fail this way (8 of 11 in one run)
//!   before each step went through. A [`LockClient`](distlock_core::LockClient)'s wait and renewals try
//!   again within their deadlines (as the same owner, which a step whose reply was
//!   lost already is); a renewal that fails past the lease's validity is a lost lock,
//!   signalled. `tests/etcd.rs` (`a_member_gone_silent_...`) checks the bound and the
//!   retryable error; `tests/cluster_quorum.rs` runs the suite's quorum cases with
//!   the leader, then a follower, killed, paused beyond the TTL and restarted.
//! - **extend renews to the granted TTL**: etcd's keepalive cannot change a lease's
//!   TTL, so extending with another TTL is an
//!   [`ErrorKind::InvalidTtl`](distlock_core::ErrorKind::InvalidTtl) error
//!   (`capabilities.extend_any_ttl` is false). The client's auto-renewal always uses
//!   the granted TTL. The early release of a lease held at least a while
//!   ([`LockBackend::release_after`](distlock_core::LockBackend::release_after)) moves
//!   the key and its holder record onto a fresh lease of what is left of the hold, in
//!   one transaction that holds only while the key is the owner's; the fence (the
//!   key's creation revision) is unchanged. Where that transaction's reply is lost,
//!   the fresh lease is left to run out at the hold's end (the key may live on it),
//!   and the owner's retry answers released.
//! - **Round trips** ([`RoundTrips`](distlock_core::backend::RoundTrips), contract point 9): an
//!   acquire takes two (a lease grant, then the transaction that creates the key), an
//!   extend two (a keep-alive stream opened, then its message, with the owner check
//!   sent alongside), a release one (the transaction). The conformance suite
//!   counts them on a real server.
//! - **A retried acquire** whose reply was lost (the same owner token) is granted
//!   again, plain or fair: the owner's lease is restarted by a keep-alive, so that its
//!   expiry counts from the retry on the server as in the client (one granted for a
//!   shorter TTL is revoked and granted again). A lease a step knows to hold nothing
//!   is revoked before the step answers, never in the background, where it could land
//!   after the same owner's next step and delete the key under that grant.
//! - **Inspect** reports the remaining TTL in whole seconds, as etcd does.
//!
//! # Fenced writes
//!
//! [`fenced::EtcdStore`] puts your own keys under a fence, refusing a stale one in the
//! transaction that writes (the contract is `distlock_core::FencedStore`'s).
//!
//! # Configuration
//!
//! See [`EtcdConfig`]: `etcd://host[:port][,host[:port]...]`, `etcds://` for TLS (with
//! the `tls` feature), user and password, key prefix, and timeouts; or the same typed
//! (`EtcdConfig::new(..).with_prefix(..)`), connected with
//! [`EtcdBackend::connect_with`]. A service that already has an
//! [`etcd_client::Client`] hands it to [`EtcdBackend::from_client`] instead: no second
//! connection. Credentials are redacted in `Debug` output and errors.
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

pub use backend::EtcdBackend;
pub use config::{EtcdConfig, DEFAULT_PORT, SCHEMES};
pub use distlock_core::backend::Endpoint;
/// The etcd client this crate is built on, for [`EtcdBackend::from_client`].
pub use etcd_client;

/// Connects to the backend `url` names, as a shared trait object: the one entry
/// `distlock::connect` calls for this crate's [`SCHEMES`].
pub async fn connect(
    url: &str,
) -> distlock_core::Result<std::sync::Arc<distlock_core::DynLockBackend>> {
    Ok(std::sync::Arc::new(EtcdBackend::connect(url).await?))
}

/// This crate as whoever chooses backends by URL finds it (the `distlock` facade's
/// `connect`, the `distlock` command line, lockbench): its name, its [`SCHEMES`] and
/// the feature each needs, its server's [`DEFAULT_PORT`], and [`connect`].
pub const DESCRIPTOR: distlock_core::backend::Descriptor = {
    use distlock_core::backend::Descriptor;
    Descriptor::new("etcd", &config::SCHEME_LIST, DEFAULT_PORT, |url| {
        Box::pin(async move { connect(&url).await })
    })
};
