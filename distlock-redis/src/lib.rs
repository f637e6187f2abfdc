//! The Redis backend of distlock.
//!
//! ```no_run
//! # async fn demo() -> distlock_core::Result<()> {
//! use std::sync::Arc;
//! use distlock_core::LockClient;
//! use distlock_redis::RedisBackend;
//!
//! let backend = RedisBackend::connect("redis://:password@127.0.0.1:6379/0?prefix=myapp:").await?;
//! let client = LockClient::new(Arc::new(backend));
//! # Ok(()) }
//! ```
//!
//! # How it works
//!
//! A lock is one string key, `<prefix>{<key>}`, holding `<owner token>:<fence>` with a
//! millisecond expiry (and a trailing `!` once a waiter has found it held, `!!` once a
//! fair waiter has queued for it). Each operation is one Lua script, so each is atomic
//! and takes one round trip (a release may take two, and so may an efficiency lock's
//! acquire that finds the key held, below; the capabilities declare two for each):
//!
//! - **acquire** sets the key only if it is absent (`SET NX PX`) and mints the fence in
//!   the same step. An efficiency lock's acquire
//!   (`LockOptions::with_fenced(false)`; the capabilities' `unfenced_grants`) is no
//!   script: one `SET NX PX GET` storing `<owner>:0` (no fence: the lease carries
//!   `FencingToken::NONE`) and the holder with its grant time by the client's clock.
//!   The value `GET` returns tells a retry whose reply was lost (this owner's grant:
//!   its expiry is restarted, a second round trip) from another holder, whose grant
//!   a waiter then marks with a `!` (a second round trip only a waiter takes, where
//!   acquire.lua marks in its own step), so that its release wakes the waiters; a
//!   waiter told "held" this way learns no remaining TTL. Fair steps and sets of keys
//!   are fenced always. On a Redlock each master takes the same `SET NX PX GET`, and
//!   there is no fence to agree on. `SET` takes `NX` and `GET` together from Redis
//!   7.0 on: the efficiency lock needs Redis 7.0 or later (the test servers run
//!   Debian bookworm's 7.0; no older server is tested);
//! - **release** deletes the key only if the owner token matches, and publishes on the
//!   key's release channel when someone waited for that grant, so waiters wake at once
//!   (a waiter subscribes before it asks, and its refused ask marks the grant; a
//!   release nobody waited for publishes nothing, and neither does expiry: waiters
//!   never sleep past the holder's remaining TTL). A release names only the lock,
//!   with the owner and the prefix's length,
//!   from which the script makes the channel's name (`<prefix>released:{<key>}`) where
//!   it publishes: a request less than half the size of one naming the fair queue's
//!   keys and the channel too. Measured, an uncontended cycle costs the client CPU in
//!   proportion to the bytes it sends (distlock/guides/benchmarks.md). It leaves a grant a fair waiter
//!   queued for (`!!`) to the full release below, which hands the lock over, a round
//!   trip later. A fair lock's release (`FairBackend::release_in_turn`), where fair
//!   waiters are to be expected, sends the full release at once;
//! - **extend** re-arms the expiry (`PEXPIRE`) only if the owner token matches, and never
//!   re-creates the key;
//! - **inspect** reads the holder's fence and remaining TTL;
//! - **a set of keys** (`LockClient::lock_all`) is taken by one script, all or none:
//!   every key checked first, then each set and its fence minted as a single acquire
//!   does (`LockBackend::sets`). On one server only: a Redis Cluster spreads a
//!   set's keys over slots, and a Redlock's sets go key by key.
//!
//! Several independent masters are [`RedlockBackend`]'s (below).
//!
//! **Fair mode** (contract point 10; [`LockOptions::with_fair`](distlock_core::LockOptions::with_fair)):
//! a key's waiters queue beside the lock, in its slot: `<prefix>{<key>}:queue` (owner
//! → order of arrival) and `<prefix>{<key>}:places` (owner → when its place runs out,
//! by the server's clock), two sorted sets, and `<prefix>{<key>}:ttls` (owner → the TTL
//! it asks for), a hash. The fair step is one script: it drops the places that ran
//! out, queues the caller or renews its place, and grants only to the head once the
//! key is free, with the plain acquire's own code. All three expire with the longest
//! place in them, so a queue everyone left takes no memory.
//!
//! **A release hands the lock over** (`FairBackend::handoffs`): when the key has
//! fair waiters, the release's script grants it to the first whose place is live, with
//! the next fence, for that waiter's TTL or until its place runs out if that is sooner
//! (a waiter that vanished holds it no longer than it would have held the queue), and
//! publishes `<owner>:<fence>`. Only that waiter is woken (and any racing waiters), and
//! it holds the lock without a request of its own when what it was handed has the
//! client's minimum validity left (a place longer than a quarter of the TTL, with the
//! defaults); otherwise its next fair step, finding the key its own, renews it for the
//! TTL. Either way a handoff is one script on the server, not one per waiter. A waiter
//! that gives up gives back a lock handed to it, which passes to the next; one that
//! gives up while at the head otherwise wakes them all, since any of them may be next.
//! A lease that runs out hands nothing over: the head's next fair step takes the key.
//! Not on a Redlock master, and not where grants wait for replicas
//! ([`RedisConfig::wait_replicas`]): the release does not wait, so the head is then
//! woken, and takes the key with a fair step as before.
//!
//! A vanished waiter leaves the queue once its place runs out (`queue_place`, 3 s
//! unless set). The same holds on a Redis Cluster. Redlock has no fair mode (below).
//!
//! **Semaphores, read-write locks and elections**
//! ([`PermitBackend`](distlock_core::backend::PermitBackend), `LockBackend::permits`): a name's
//! permits are four keys in one slot, `<prefix>permits{<name>}:grants` (owners by when
//! their grant runs out, by the server's clock), `:info` (the limit, the fence counter
//! and each grant's and place's details), `:places` and `:terms`; one script per step.
//! Each step keeps the keys alive at least twice the TTL it was given, or the place.
//! Fences are minted as a lock's are (`max(counter + 1, server time in µs)`), so they
//! fail closed after a restart that lost the keys. Also on a Redis Cluster; not on a
//! Redlock (below).
//!
//! **Listing** (`LockBackend::operator`, what `distlock list` shows): the lock records
//! under the prefix are found with `SCAN` on one server, in batches that never block
//! it for long; on a Redis Cluster with `KEYS` on every master (each master walks all
//! its keys at once: list rarely on a large cluster); on a Redlock on every master,
//! keeping each key a majority agrees on. Then each key is inspected, one round trip
//! each.
//!
//! Scripts are called by hash (`EVALSHA`) and loaded again when the server has
//! forgotten them (after a restart or `SCRIPT FLUSH`).
//!
//! # What it guarantees
//!
//! The whole contract of [`distlock_core::LockBackend`], on a single Redis server, proved by
//! the conformance suite against a real server, fault cases included.
//!
//! **Fencing across data loss** ([`FenceDurability::FailsClosed`](distlock_core::backend::FenceDurability)):
//! each key has a fence counter, `<prefix>{<key>}:fence`, and each new fence is the
//! larger of the counter plus one and the server's clock (`TIME`) in microseconds. A
//! Redis without persistence restarts empty, counter included; the next fence then
//! comes from the clock, which is past every fence handed out before.
//!
//! **Bounded storage.** A counter expires `fence_grace_ms` (one minute unless set)
//! after its key's last lease would have, so nothing of a lock name stays on the
//! server longer than its last lease plus that grace: a service that locks per order
//! or per user does not grow the server without limit. The next fence of a name whose
//! counter expired also comes from the clock. Both hold as long as the server's wall
//! clock never steps back by more than the grace (or across a restart).
//!
//! **What the fences need of clocks.** Where the counter is gone (a restart that lost
//! data, a counter expired after `fence_grace_ms`, an evicted key) or lags (a replica
//! promoted before the last writes reached it: a failover of a primary with replicas,
//! or a Redis Cluster master's), the next fence comes from the clock of the server
//! that mints it. It is above every fence handed out before only while that clock is
//! ahead of the last fence: on one server, while its clock never steps back by more
//! than the grace; across a failover, while the promoted server's clock is not behind
//! the old primary's by more than the time between the last grant the replica missed
//! and the first one it makes. Keep the servers' clocks synchronised (NTP, with
//! slewing rather than stepping) where fences must rise across a failover;
//! [`FailsClosed`](distlock_core::backend::FenceDurability) is declared on that
//! condition, and no test here varies the servers' clocks.
//!
//! # What it does not guarantee
//!
//! - **Replication.** Redis replicates asynchronously: a primary that fails over right
//!   after granting a lock may lose the grant, and a second holder can get in. The
//!   `wait_replicas=N` URL option sends `WAIT N` in the same round trip as every acquire
//!   and extend, and fails the operation (retryably) when fewer replicas acknowledge;
//!   this narrows the window but does not close it (a replica that acknowledged can
//!   still lose the write on its own restart). Use etcd where a lock must survive the
//!   loss of a server.
//! - **Eviction.** Run the server with `maxmemory-policy noeviction`. An `allkeys-*`
//!   policy can evict lock keys (two holders) and fence counters (fences then come
//!   from the clock alone).
//! - **Leases across a restart** survive only if the server persists them; the backend
//!   does not promise either way.
//! - **Redis Cluster** (`redis-cluster://:password@host1:6379,host2:6379,...`, the
//!   seeds; see [`RedisConfig`]; the `cluster` feature, distlock's `redis-cluster`) is served with the same scripts: a lock and its
//!   counter share a slot by their hash tag, a release is published cluster-wide, and
//!   the client follows the cluster's slots and redirections. Each master replicates
//!   to its replicas asynchronously, as above: a master that fails over right after a
//!   grant can lose it, and a second holder can get in; the fence still rises (the
//!   replica's counter, or its clock). `wait_replicas` is refused on a cluster, TLS to
//!   a cluster is not supported yet, and a cluster has database 0 only. The suite runs
//!   on a three-master cluster (`tests/cluster.rs`, every case but the round-trip and
//!   partition ones, which need a proxy a cluster client would route around), and
//!   `tests/cluster_failover.rs` kills a key's master and checks that the backend
//!   follows its replica, with fences rising whether the lease survived or not.
//!
//! # Redis behind Sentinel
//!
//! `redis-sentinel://:password@sentinel1:26379,sentinel2:26379,sentinel3:26379?master=mymaster`
//! (the `sentinel` feature, distlock's `redis-sentinel`; see [`RedisConfig`]) sends
//! every operation to the master the Sentinels monitor under that name, with the
//! scripts above: a master with replicas, Redis's most common highly-available form.
//! A service that has its own `redis::sentinel::SentinelClient` hands it to
//! `RedisBackend::from_sentinel_client` instead.
//!
//! - **Finding the master.** Before the first request, and after any request that
//!   shows the master lost (its connection refused, dropped or timed out, or a write
//!   refused with `READONLY` by a server that has become a replica), the backend asks
//!   the Sentinels (the driver's Sentinel client), checks with `ROLE` that the server
//!   they name is a master, and connects to it. One lookup runs at a time; each
//!   caller's wait for it, the lookup included, is bounded by `connect_timeout_ms`
//!   plus `response_timeout_ms`. While no master is found, an operation fails with a
//!   retryable [`Unavailable`](distlock_core::ErrorKind::Unavailable) error marked not
//!   sent, and a `LockClient`'s wait tries again until its deadline. A request whose
//!   connection dropped is sent once more, to the master found then, as on one server
//!   (every script is idempotent for its owner). Release notifications come over a
//!   pub/sub connection to the master; when it drops, waiters poll until the next wait
//!   subscribes on the new master.
//! - **What a failover can cost.** Replication is asynchronous: a grant, a renewal or
//!   a release that the master applied and no replica received before the promotion
//!   is lost with it. A lost grant lets a second holder in while the first still
//!   believes it holds; the first learns it at its next renewal (the lock-lost
//!   signal). A lost release leaves the key held until its TTL. The capabilities
//!   declare it as for a restart (`leases_survive_restart: false`). `wait_replicas=N`
//!   makes each acquire and extend fail, retryably, unless N replicas acknowledged
//!   it, so that a grant returned survives the promotion of any replica that
//!   acknowledged it (Sentinel promotes, by default, the replica with the most
//!   replicated data), though not every failure (above).
//! - **Fences rise across a promotion** on the condition above: every fence is at
//!   least the minting server's clock in microseconds, so the promoted replica's
//!   first fence is above every fence of the old master unless its clock is behind
//!   the old master's by more than the failover took (at least the Sentinels'
//!   `down-after-milliseconds`). `tests/sentinel_failover.rs` makes the case on real
//!   servers: the replicas cut off, a grant on the master, the master killed, a
//!   replica promoted; the backend follows it, the key is granted again with a greater
//!   fence, the first holder's write to a fenced store is refused, and its renewal
//!   finds the lease gone. A backend with `wait_replicas=1` refuses the grant nobody
//!   acknowledged.
//! - **A master the Sentinels replaced** while it was paused or cut off keeps granting,
//!   when it resumes, to the clients still connected to it, until the Sentinels demote
//!   it (about nine seconds in the torture run here). The torture run found this on
//!   servers without `min-replicas-to-write`: after a master paused past its failover
//!   resumed, 99 overlapping holders and 2 fence inversions (a grant completing after
//!   another had completed with a greater fence). The fenced register accepted no
//!   stale write. Run the
//!   servers with `min-replicas-to-write 1` and a `min-replicas-max-lag` below the
//!   Sentinels' `down-after-milliseconds`: a master whose replicas have moved on then
//!   refuses writes (`NOREPLICAS`, a retryable error here, after which the backend asks
//!   the Sentinels again; `tests/sentinel_failover.rs` cuts a master off from its
//!   replicas and sees it refuse grants within seconds, before any failover). Redis
//!   counts its replicas once a second, so a master resuming can still take a write
//!   in its first second back. With those settings
//!   the torture run's standard row (six faults on the master, five of them
//!   failovers) saw no fence inversion and one overlap, inside a failover, of the kind
//!   declared (a lease the failover lost). Write through a fenced store either way.
//! - **What the declaration rests on.** Behind Sentinel (and on a Redis Cluster, whose
//!   masters fail over the same way) the capabilities declare
//!   [`FailsClosed`](distlock_core::backend::FenceDurability) on the conditions above,
//!   which the backend cannot check from the client: the servers' clocks agree, and
//!   the servers run with `min-replicas-to-write` (without it a replaced master that
//!   resumes mints fences beside its successor's, and they can go backwards).
//! - The Sentinels are reached without credentials or TLS, and the data servers
//!   without TLS. The conformance suite runs on a master with two replicas and three
//!   Sentinels (`tests/sentinel.rs`, the fault cases on every server at once; not the
//!   round-trip and partition cases, which need a proxy that a client finding the
//!   master through the Sentinels would go around).
//!
//! # Redlock: one lease on a majority of independent masters
//!
//! [`RedlockBackend`] (`redlock://:password@host1:6379,host2:6379,host3:6379`; see
//! [`RedlockConfig`]) holds each lease on a majority of three or more independent
//! Redis masters, each running the scripts above:
//!
//! - **acquire** goes to every master at once with the same owner token, each waited
//!   for at most `node_timeout_ms`. It is granted once a majority has granted, and the
//!   requests still under way finish in the background, so that the lease lands on
//!   every master that can take it (as on redsync and rslock, which wait for every
//!   master): a holder that got all three of three masters keeps a majority when one
//!   restarts empty. As soon as a majority can no longer grant, it answers held (or
//!   the masters' error) and releases whatever it took, everywhere. The lease's validity is the TTL less the
//!   time the acquire took (counted from before sending, as for every backend) and less
//!   the clock-drift allowance (`drift_ppm`, 1% unless set, plus `drift_ms`, 2 ms),
//!   which core takes off ([`Capabilities::clock_drift`](distlock_core::backend::Capabilities));
//! - **extend** goes to every master and succeeds only with a majority; its validity
//!   is counted the same way. **release** goes to every master: released once a
//!   majority has released the lease, not held once a majority did not hold it, and
//!   otherwise (masters that did not answer) a retryable error saying how many
//!   masters answered what: the silent masters may have let the lease run out and
//!   granted it to another majority, so the release cannot say it was held to the end
//!   (redsync's `Unlock` fails in the same case);
//! - **inspect** shows a holder where a majority of the masters agree on its owner,
//!   and a free key only where the answers rule a holder out: an acquire returns at a
//!   majority, so a master may not have the grant yet, and a master that did not answer
//!   counts as one that may hold it. One master saying free while the others are
//!   silent is a retryable error, never "free";
//! - an operation returns as soon as its outcome is decided: a slow or paused master
//!   does not hold it up (a granted acquire's, a release's or a renewal's request to it
//!   still completes in the background);
//! - **retries** are the client's: [`LockClient`](distlock_core::LockClient) waits
//!   with jittered backoff, and wakes on a release published by any master;
//! - **no fair mode**: a queue would have to be kept on every master, with a majority
//!   agreeing on its order. `LockBackend::fair` answers `None`, and a fair client is refused
//!   with a configuration error;
//! - **no permits** (semaphores, read-write locks), for the same reason:
//!   `LockBackend::permits` answers `None`, and those kinds are refused with a configuration
//!   error. Elections run over a lease instead: each term is a lock on `election/<name>`,
//!   with no recorded terms and no proclaim (see [`Election`](distlock_core::Election)).
//!
//! **Fences.** Each master proposes the next fence from its own counter (one more
//! than the counter; where the counter is gone, the clock in microseconds rounded
//! down to 10 ms, so that masters starting a key's counter together usually agree). The grant's
//! fence is the largest proposal of the majority that granted; where some of them
//! proposed less, a second round trip writes it to them, so that a majority holds it
//! before the grant is returned. A master that grants after that (the acquire returns at
//! a majority and lets the rest finish) is then given the agreed fence too, so that a
//! retry by the same owner (a lost reply, a leader resuming its term) answers the fence
//! the holder was given whichever masters answer it (`tests/redlock.rs`). A retry that
//! reaches such a master before it was given the agreed fence, or while it cannot be
//! reached, may answer the larger fence: still above every fence granted before, but
//! not the one the holder had.
//! Any two majorities share a master, so the next grant
//! reads a counter at least as high: fences strictly increase per key across grants on
//! different majorities (the suite's `quorum_fences_increase_across_different_majorities`
//! proves it on real masters, a minority cut off or killed each round). While the
//! masters' counters agree, an acquire takes one round trip; it declares two.
//!
//! **What a master restarted empty does** (Kleppmann's critique of Redlock). A master
//! that restarts without its data forgets the leases it held: if it was part of a
//! holder's only majority, a second client can form a majority of its own while the
//! first lease is still valid. The capabilities declare it
//! (`leases_survive_restart: false`), and `tests/redlock.rs` shows it happening on real
//! masters. What still holds is the fence
//! ([`FenceDurability::FailsClosed`](distlock_core::backend::FenceDurability)): the restarted
//! master's counter is gone, so it proposes from its clock, above every fence handed
//! out before (as long as the masters' wall clocks agree to within the time the
//! restart took, less the 10 ms the clock is rounded to), and a fenced store refuses the first holder's writes once the second
//! has written. A master restored from an older snapshot (RDB) is outside this: its
//! counter goes back and its proposal may repeat a fence.
//!
//! **Mitigations**, as the Redlock authors advise: run the masters with
//! `appendonly yes` and `appendfsync always`, so that a restart keeps leases and
//! counters; or keep a restarted master out of service (firewalled, or not started)
//! for longer than the longest TTL in use, so that every lease it forgot has expired
//! before it answers again. Either way, write through a fenced store.
//!
//! # Fenced writes
//!
//! [`fenced::RedisStore`] writes your own string keys and hash fields under a fence,
//! refusing a stale one in the same script that writes: the store side of the safety
//! story (the contract is `distlock_core::FencedStore`'s).
//!
//! # Configuration
//!
//! See [`RedisConfig`] for the URL's form: `redis://` and `rediss://` (TLS, with the
//! `tls` feature), ACL user and password, database number, key prefix, `WAIT`, and
//! timeouts. Credentials are redacted in `Debug` output and errors.
//!
//! TLS uses rustls's process-wide crypto provider, which the redis driver reads: the
//! first `rediss://` connection installs ring there when the application has installed
//! no provider, after which installing another fails. An application with a provider
//! of its own installs it before connecting.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod config;
mod connection;
mod error;
pub mod fenced;
mod permits;
mod redlock;
mod scripts;
#[cfg(feature = "sentinel")]
mod sentinel;

pub use backend::RedisBackend;
pub use config::{RedisConfig, RedlockConfig, DEFAULT_PORT, DEFAULT_SENTINEL_PORT, SCHEMES};
pub use distlock_core::backend::Endpoint;
/// The redis driver this crate is built on, for [`RedisBackend::from_client`].
pub use redis;
pub use redlock::RedlockBackend;

/// Connects to the backend `url` names, as a shared trait object: a [`RedlockBackend`]
/// for `redlock://` and `redlocks://`, a [`RedisBackend`] for the others of
/// [`SCHEMES`]. The one entry `distlock::connect` calls for this crate's schemes.
pub async fn connect(
    url: &str,
) -> distlock_core::Result<std::sync::Arc<distlock_core::DynLockBackend>> {
    if url.starts_with("redlock://") || url.starts_with("redlocks://") {
        return Ok(std::sync::Arc::new(RedlockBackend::connect(url).await?));
    }
    Ok(std::sync::Arc::new(RedisBackend::connect(url).await?))
}

/// This crate as whoever chooses backends by URL finds it (the `distlock` facade's
/// `connect`, the `distlock` command line, lockbench): its name, its [`SCHEMES`] and
/// the feature each needs, its server's [`DEFAULT_PORT`], and [`connect`].
pub const DESCRIPTOR: distlock_core::backend::Descriptor = {
    use distlock_core::backend::Descriptor;
    Descriptor::new("redis", &config::SCHEME_LIST, DEFAULT_PORT, |url| {
        Box::pin(async move { connect(&url).await })
    })
};
