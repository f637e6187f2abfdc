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
//! millisecond expiry. Each operation is one Lua script, so each is atomic and takes
//! one round trip:
//!
//! - **acquire** sets the key only if it is absent (`SET NX PX`) and mints the fence in
//!   the same step;
//! - **release** deletes the key only if the owner token matches, and publishes on the
//!   key's release channel, so waiters wake at once (expiry publishes nothing; waiters
//!   never sleep past the holder's remaining TTL);
//! - **extend** re-arms the expiry (`PEXPIRE`) only if the owner token matches, and never
//!   re-creates the key;
//! - **inspect** reads the holder's fence and remaining TTL.
//!
//! Scripts are called by hash (`EVALSHA`) and loaded again when the server has
//! forgotten them (after a restart or `SCRIPT FLUSH`).
//!
//! # What it guarantees
//!
//! The whole contract of [`distlock_core::LockBackend`], on a single Redis server, proved by
//! the conformance suite against a real server, fault cases included.
//!
//! **Fencing across data loss** ([`FenceDurability::FailsClosed`](distlock_core::FenceDurability)):
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
//! - **Redis Cluster** is not supported by this backend's connection (single endpoint);
//!   its keys are hash-tagged so that a lock and its counter would share a slot.
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
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod config;
mod error;
pub mod fenced;

pub use backend::RedisBackend;
pub use config::{RedisConfig, SCHEMES};
