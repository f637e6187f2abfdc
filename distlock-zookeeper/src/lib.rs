//! The ZooKeeper backend of distlock, written as a third party would write one: on
//! the public API of `distlock-core` only, and tested by the public conformance suite.
//!
//! ```no_run
//! # async fn demo() -> distlock_core::Result<()> {
//! use std::sync::Arc;
//! use distlock_core::LockClient;
//! use distlock_zookeeper::ZooKeeperBackend;
//!
//! let backend = ZooKeeperBackend::connect("zookeeper://10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181").await?;
//! let client = LockClient::new(Arc::new(backend));
//! # Ok(()) }
//! ```
//!
//! It is built only against distlock-core's public API, as a third party's backend
//! would be; the `distlock` facade serves it under its [`SCHEMES`] with its
//! `zookeeper` feature, and chooses it by URL like any other backend.
//!
//! # How a lease maps onto ZooKeeper
//!
//! ZooKeeper's own expiry is per *session*, not per lock, so the first question is
//! what a lease's TTL becomes. There were three choices:
//!
//! - **Ephemeral nodes (the session is the lease)**, as Curator's `InterProcessMutex`
//!   does. The node lives as long as the client's session, whatever TTL was asked:
//!   a live client that never renews holds the lock for ever, and a session that
//!   expires (a client cut off for the session timeout) frees the lock *before* the TTL
//!   the holder was told, so another client can take it while the holder still counts
//!   on its validity: contract points 1 and 2 both fail. A session per lease, with the
//!   TTL as its timeout, would cost a connection per lock and is still bounded by the
//!   server's `minSessionTimeout`/`maxSessionTimeout` (by default 4 s to 40 s).
//! - **TTL nodes** (ZooKeeper 3.5.3 and later, with
//!   `-Dzookeeper.extendedTypesEnabled=true`): a persistent node that the server deletes
//!   once it has gone unmodified for its TTL. The TTL is per node, and a renewal is a
//!   write. But the server deletes it lazily, at its next check
//!   (`znode.container.checkIntervalMs`, a minute by default), so it cannot be what
//!   decides when another client may take the key.
//! - **What this backend does**: a lease is a TTL node of the lease's TTL (so the
//!   server cleans up after a client that vanished), and *expiry is judged by the
//!   server's clock* from the node's modification time: a lease is live while
//!   `now ≤ mtime + ttl`, where `now` is the modification time of a write this request
//!   made (its own node's creation, or a write to the root node). Both times come from
//!   the leader's clock, never a client's. A contender that finds an expired lease
//!   deletes it, only at the version it judged, and a renewal that finds its own lease
//!   already expired deletes it and answers "not held". The cost: a TTL node's TTL is
//!   fixed when it is created, so a lease renews only to the TTL it was granted
//!   (`capabilities.extend_any_ttl` is false, as on etcd), though the early release
//!   of a lease held at least a while writes the shorter TTL it is then judged by
//!   into its data; and the server must have TTL
//!   nodes enabled (otherwise every grant is an
//!   [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error that
//!   says so).
//!
//! # Nodes
//!
//! Under the root (`/distlock` unless the URL gives a path), each key has a container
//! node, `k-<the key, percent-encoded>` ([`ZooKeeperConfig::key_node`]), which goes
//! once it is empty: with the release of the lease whose grant made it, or else at the
//! server's next check of its containers. In it:
//!
//! - `l-<owner token>`: a lease, a TTL node holding its TTL. The path names the
//!   acquisition, so it is never reused: a delete or a write to it can only ever touch
//!   that one acquisition's lease.
//! - `p-<owner token>`: a fair waiter's place, a TTL node of the place's duration,
//!   written again on every call of its waiter.
//!
//! The holder is the **live lease created first** (lowest creation zxid).
//!
//! - **acquire**, on a key whose node this backend has not made or found lately (it
//!   remembers the last few thousand), as on every fresh key: one `multi` creates the
//!   key's node and the lease node together, one write. When it succeeds the key's node
//!   is new, so no lease is ahead: granted, in one round trip. When the key's node is
//!   there already, the `multi` writes nothing and the backend goes on as on a key it
//!   knows: it creates its lease node and lists the key's nodes in the same round
//!   trip, then reads the leases created before it. None live: granted (the expired
//!   ones are deleted first, each only at the version judged). One live: its node is
//!   deleted again, and the answer is "held" with the holder's remaining TTL.
//! - **the fence is the lease node's creation zxid**: durable, cluster-wide, and
//!   strictly increasing, since a lease is granted only once every lease created
//!   before it is gone ([`FenceDurability::Durable`](distlock_core::backend::FenceDurability)).
//! - **release deletes the owner's node only**: one `multi` writes it (the write
//!   tells the server's time) and deletes it. The path names the acquisition, so only
//!   its lease can be deleted. Whether it had run out is judged from the last write
//!   this backend made to it (its grant or a renewal: only the owner writes its node,
//!   so the node's own time is never earlier); a lease this backend has not written
//!   lately (the last few thousand) is read in the same round trip, the read sent
//!   first, so that it sees the lease as the delete finds it. An expired lease is
//!   deleted too, and reported "not held". When this backend's grant of the lease made
//!   the key's node, the same `multi` deletes that node after the lease. So a cycle on
//!   a fresh key is two requests and two writes, as a bare create and delete are
//!   (where an emptied node left to the server would cost it a write of its own).
//!   With anything else under the key's node (a lease, a waiter's place), the `multi`
//!   writes nothing and is sent again without it: a second round trip.
//! - **extend** reads the lease and writes it at the version read; the write's time
//!   says whether the lease had already run out before it.
//! - **waiters watch only their predecessor**: a fair waiter
//!   ([`LockOptions::with_fair`](distlock_core::LockOptions::with_fair)) watches the
//!   place queued just before its own, and the head of the queue watches the holder's
//!   lease, so a release wakes one waiter, not the herd
//!   ([`FairBackend::watch_in_turn`](distlock_core::backend::FairBackend::watch_in_turn)). A
//!   plain waiter has no place: every plain waiter watches the holder, and a release
//!   wakes them all, as on the other backends. A renewal (a write to the lease) does
//!   not wake a waiter.
//! - **inspect, list and force release** write the root node once (an empty write)
//!   to learn the server's time, then read the key's leases: ZooKeeper has no other
//!   way to tell a client the time.
//! - **fenced resources**: [`fenced::ZooKeeperStore`] keeps a resource's fence and
//!   value in one persistent node, `<root>/fenced/k-<resource>`, and takes each step
//!   as a write conditional on the version it compared (see its docs). It passes the
//!   fenced-store suite on a real ZooKeeper, and is the torture run's register on
//!   ZooKeeper.
//! - **fair mode** (contract point 10): a call makes or refreshes the waiter's place
//!   and reads the key's nodes; the waiter at the head of the live places, with no
//!   live lease, takes the lock as a plain acquire does, then deletes its place.
//!
//! # What it guarantees
//!
//! The contract of [`distlock_core::LockBackend`], proved by the conformance suite on
//! a real server (its fault cases included) and on a three-member ensemble whose
//! leader was stopped, the suite's quorum cases on a whole ensemble with the leader,
//! then a follower, killed, paused beyond the TTL and restarted
//! (`tests/ensemble_quorum.rs`), and tests of a held lock through the loss of the
//! leader and of waiters woken one at a time.
//!
//! # What it does not guarantee, or does differently
//!
//! - **The ensemble's clocks**: a lease's expiry is judged from times the leader
//!   wrote. After a change of leader, times from two servers' clocks meet, so each
//!   lease's validity is shortened by `max_clock_skew_ms` (10 ms by default; see
//!   [`ClockDrift`](distlock_core::backend::ClockDrift)). Run the members under NTP.
//! - **extend renews to the granted TTL** only (above).
//! - **Nothing is sent while the session is disconnected**: every operation fails at
//!   once with a retryable [`ErrorKind::Unavailable`](distlock_core::ErrorKind::Unavailable)
//!   until the driver has reconnected. The driver would keep such a request and send
//!   it on reconnecting, so a grant could be made long after its caller was told it
//!   failed, and hold the key for a whole TTL under an owner nobody knows. A request
//!   already sent when the connection broke is failed by the driver, never resent.
//!   On an ensemble, a member that dies, stalls or is cut off under the session costs
//!   such failures until the session has moved to another member; a
//!   [`LockClient`](distlock_core::LockClient)'s wait and renewals try again within
//!   their deadlines.
//! - **Round trips** (contract point 9, as the suite's proxy counts them): an
//!   acquire on a fresh key takes one. On a key in use it takes up to five: the
//!   `multi` that finds the key's node there (only when this backend has not seen the
//!   key lately), the create and the listing (sent together as two requests, which
//!   the proxy counts two), the read of the leases ahead, and a delete. It takes more
//!   in two rare cases: a lease judged expired is renewed at that moment (one more),
//!   or the same acquisition is retried after its reply was lost (its node is then
//!   refreshed and listed again, two more). Release of a lease this backend granted
//!   or renewed lately takes one (two when something else is under the key's node
//!   its grant made: the `multi` is sent again without that node); of another lease
//!   it sends the read and the `multi` together, one round trip in time, which the
//!   proxy counts as one or two as the replies fall. Extend takes two. The
//!   capabilities declare five, two and two.
//! - **No semaphores or read-write locks** (`LockBackend::permits` answers
//!   `None`): their cases are reported as not run. Elections run over a lease instead:
//!   each term is a lock on `election/<name>`, with no recorded terms and no proclaim
//!   (see [`Election`](distlock_core::Election)); the cases that need recorded terms
//!   are reported as not run.
//! - **Credentials** are ZooKeeper `digest` identities: with them, the nodes this
//!   backend creates carry the `creator_all` ACL, and a refusal by an ACL (`NoAuth`)
//!   maps to an [`ErrorKind::Authentication`](distlock_core::ErrorKind::Authentication)
//!   error. A wrong password is not refused at connect (ZooKeeper's digest scheme has
//!   no login): it is refused at the first node the right one created. Tested on a
//!   server (`tests/adoption.rs`): a password holding `+`, `&`, `%` and `@`, raw or
//!   percent-encoded, makes the nodes only that password opens. The suite's
//!   wrong-credentials case is not run, for want of a connect-time refusal.
//! - **What a vanished client leaves**: its lease is free for others at its TTL, and
//!   its nodes are deleted by the server at the next check after that (a minute by
//!   default; every second on distlock's test servers, which set
//!   `-Dznode.container.checkIntervalMs=1000`).
//!
//! # Configuration
//!
//! See [`ZooKeeperConfig`]: `zookeeper://host[:port][,host[:port]...][/root]`, digest
//! credentials, timeouts and the clock-skew allowance; or the same typed
//! (`ZooKeeperConfig::new(..).with_root(..)`), connected with
//! [`ZooKeeperBackend::connect_with`]. The backend keeps its own session and opens a
//! new one when the old one expires, so it takes a service's
//! [`Connector`](zookeeper_client::Connector) rather than a client
//! ([`ZooKeeperBackend::from_connector`]). Credentials are redacted in `Debug` output
//! and errors.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod config;
mod error;
pub mod fenced;
mod node;
mod session;

pub use backend::ZooKeeperBackend;
pub use config::{ZooKeeperConfig, DEFAULT_PORT, SCHEMES};
pub use distlock_core::backend::Endpoint;
/// The ZooKeeper client this backend is built on, so that a service's own
/// [`Connector`](zookeeper_client::Connector) (for
/// [`ZooKeeperBackend::from_connector`]) is of the same version.
pub use zookeeper_client;

/// Connects to the backend `url` names, as a shared trait object: the one entry
/// `distlock::connect` calls for this crate's [`SCHEMES`].
pub async fn connect(
    url: &str,
) -> distlock_core::Result<std::sync::Arc<distlock_core::DynLockBackend>> {
    Ok(std::sync::Arc::new(ZooKeeperBackend::connect(url).await?))
}

/// This crate as whoever chooses backends by URL finds it (the `distlock` facade's
/// `connect`, the `distlock` command line, lockbench): its name, its [`SCHEMES`] and
/// the feature each needs, its server's [`DEFAULT_PORT`], and [`connect`].
pub const DESCRIPTOR: distlock_core::backend::Descriptor = {
    use distlock_core::backend::Descriptor;
    Descriptor::new("zookeeper", &config::SCHEME_LIST, DEFAULT_PORT, |url| {
        Box::pin(async move { connect(&url).await })
    })
};
