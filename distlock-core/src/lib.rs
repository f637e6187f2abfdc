//! The core of distlock: one lock contract that Redis, PostgreSQL, etcd and an
//! in-memory store all keep, and the client that makes the safe path the easy one.
//!
//! - [`LockBackend`] is the small trait a backend implements. Its docs hold **the
//!   contract**, written once; the conformance suite checks every point of it.
//! - [`LockClient`] is what services use: [`lock`](LockClient::lock) waits with a
//!   deadline, [`LockGuard`] renews the lease in the background, exposes the
//!   [fencing token](LockGuard::fence), and tells the holder when it
//!   [lost](LockGuard::lost) the lock; [`with_lock`](LockClient::with_lock) cancels
//!   work whose lock was lost. In [fair mode](LockOptions::with_fair) waiters are
//!   served in the order they asked, across clients, where the backend keeps a queue
//!   ([`LockBackend::fair`]); [re-entrant holds](LockGuard::reenter) and
//!   [scopes](LockClient::reentrant) are opt-in.
//! - [`LockBackendExt`](backend::LockBackendExt) does the contract's per-call work once, for every backend:
//!   TTLs checked, validity counted from before the request, leases built, late grants
//!   given back. [`WakeRegistry`](backend::WakeRegistry) is the one registry of waiters per key,
//!   and [`HandoffBook`](backend::HandoffBook) what a backend whose releases hand the key
//!   to the head of its queue keeps of its fair waiters.
//! - Beyond the mutex, on backends with [permits](LockBackend::permits): a
//!   [`Semaphore`], a [`RwLock`] (writers first) and leader [`Election`] (campaign,
//!   observe, resign), each grant a lease held by a [`LockGuard`] with its own fence.
//!   Their contract is [`PermitBackend`](backend::PermitBackend)'s.
//! - [`MemoryBackend`] is the in-process reference implementation.
//! - [`FencedStore`] is a resource that refuses writes under a stale fence, atomically
//!   on its own server; [`LockClient::with_fenced_lock`] hands the work a
//!   [`FencedHandle`] that writes through one. [`MemoryStore`] and [`FileStore`] are
//!   here; the backends' crates have adapters for Redis, PostgreSQL and etcd.
//!
//! # Why fencing tokens
//!
//! A lease can expire under a holder that is paused (garbage collection, a stalled
//! VM, a long network partition): when it resumes it still believes it holds the
//! lock, while another holder already does. No lock service can prevent that alone.
//! Every grant therefore carries a [`FencingToken`] that strictly increases per key;
//! give it to the protected resource, and have the resource refuse writes with a token
//! smaller than one it has already seen: a [`FencedStore`] is such a resource.
//!
//! # Metrics and traces
//!
//! With the `metrics` feature, [`LockClient`] records each lock through the
//! [`metrics`](https://docs.rs/metrics) facade, to the recorder the service installed
//! (a Prometheus exporter, say). Every series has a `backend` label (the backend's
//! [`name`](LockBackend::name)); with [`LockOptions::with_key_labels`] also a `key`
//! label (off by default: each key is then a series of its own). Semaphores,
//! read-write locks and elections are counted as locks are.
//!
//! | metric | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `distlock_acquisitions_total` | counter | `outcome`: `acquired`, `busy`, `timeout`, `error` | calls to [`lock`](LockClient::lock) and [`try_lock`](LockClient::try_lock) (and the calls built on them), by how they ended |
//! | `distlock_wait_seconds` | histogram | `outcome` | how long each of those calls took |
//! | `distlock_held` | gauge | | leases held now by this process |
//! | `distlock_hold_seconds` | histogram | | how long each lease was held, from its grant to its release or loss |
//! | `distlock_renewals_total` | counter | `result`: `renewed`, `not_held`, `failed` | renewals, automatic and by [`LockGuard::extend`] |
//! | `distlock_losses_total` | counter | `reason`: `not_held`, `renewal_failed`, `expired`, `hold_limit` | leases lost while held ([`LossReason`]) |
//! | `distlock_backend_requests_total` | counter | `step`: `grant`, `grant_all`, `renew`, `release`, `inspect`, `watch`, `leave_queue`, `ping`, `force_release`, `scan`; `result`: `ok`, `unavailable`, `timeout`, `error`, `cancelled` | requests the client sent to its backend: each step of [`LockBackend`] (a key found held is an `ok` answer), the opening of a watch, and a request given up before it answered (`cancelled`: a wait's deadline, a dropped call). A call the circuit breaker refuses is not sent, and not counted |
//! | `distlock_backend_request_seconds` | histogram | `step`, `result` | how long each of those requests took |
//! | `distlock_leader` | gauge | `election` (the election's name) | 1 while a [`LeaderLoop`] of this process leads, 0 otherwise |
//! | `distlock_breaker_transitions_total` | counter | `state`: `open`, `half-open`, `closed` | changes of a client's circuit breaker ([`LockOptions::with_circuit_breaker`]), by the state entered; each is also a warning in the log |
//!
//! Traces come through `tracing`, whatever the feature. Each call to take a lock is an
//! info-level span, `lock_acquire` or `lock_try_acquire`, with the fields `key`,
//! `backend`, and, once the call ends, `outcome` (as above) and `fence` (when
//! acquired). A grant is an info-level event, `"lock acquired"`, and a loss a
//! warning, `"lock lost: <reason>"` with a `reason` field (as above); both carry the
//! key, the backend and the fence. A renewal that fails is a warning; renewals,
//! releases and waits are otherwise debug-level.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

#[cfg(feature = "axum")]
mod axum;
pub mod backend;
mod capabilities;
mod client;
mod duration;
mod error;
mod fenced;
mod handoff;
mod holder;
mod key;
mod kinds;
mod lease;
mod memory;
mod permits;
mod redact;
mod support;
pub mod testing;
mod token;
mod wake;

pub use backend::{DynLockBackend, LockBackend, LockInfo, PermitHolder};
pub use client::{
    BreakerOptions, BreakerState, Busy, BusyReason, Health, KeyState, KeyStates, LeaseEnd,
    LockClient, LockGuard, LockOptions, Locked, LossReason,
};
pub use duration::{format_duration, parse_duration};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use fenced::{
    DynFencedStore, FencedHandle, FencedStore, FencedStoreExt, FencedValue, FileStore, MemoryStore,
    MAX_FENCE,
};
pub use holder::{Holder, MAX_HOLDER_ID, MAX_HOLDER_PAYLOAD};
pub use key::LockKey;
pub use kinds::{
    Election, Fences, Leader, LeaderHealth, LeaderLoop, Leadership, MultiGuard, Observation,
    Observations, ResumeToken, RwLock, Semaphore, TermEnd, TermOutcome, LEASE_ELECTION_PREFIX,
};
pub use memory::MemoryBackend;
pub use token::FencingToken;
