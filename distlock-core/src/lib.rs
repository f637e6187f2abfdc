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
//!   ([`Capabilities::fair`]); [re-entrant holds](LockGuard::reenter) and
//!   [scopes](LockClient::reentrant) are opt-in.
//! - [`LockBackendExt`] does the contract's per-call work once, for every backend:
//!   TTLs checked, validity counted from before the request, leases built, late grants
//!   given back. [`WakeRegistry`] is the one registry of waiters per key.
//! - Beyond the mutex, on backends that declare [`Capabilities::permits`]: a
//!   [`Semaphore`], a [`RwLock`] (writers first) and leader [`Election`] (campaign,
//!   observe, resign), each grant a lease held by a [`LockGuard`] with its own fence.
//!   Their contract is [`PermitBackend`]'s.
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
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod capabilities;
mod client;
mod error;
mod fenced;
mod key;
mod lease;
mod memory;
mod permits;
mod redact;
pub mod support;
mod token;
mod wake;

pub use backend::{ChangeStream, DynLockBackend, LockBackend, LockBackendExt};
pub use capabilities::{Capabilities, ClockDrift, FenceDurability, RoundTrips};
pub use client::{
    Election, Leader, Leadership, LockClient, LockGuard, LockOptions, LossReason, Observation,
    Observations, RwLock, Semaphore,
};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use fenced::{
    check_fence, DynFencedStore, FenceCheck, FencedHandle, FencedStore, FencedStoreExt,
    FencedValue, FileStore, MemoryStore, MAX_FENCE,
};
pub use key::LockKey;
pub use lease::{
    AcquireOutcome, AcquireRequest, ExtendOutcome, ExtendRequest, Grant, Lease, LockInfo,
    ReleaseOutcome, Renewal,
};
pub use memory::MemoryBackend;
pub use permits::{Claim, PermitBackend, PermitHolder, Term, MAX_CLAIM_VALUE, TERMS_KEPT};
pub use redact::redact_url;
pub use token::{FencingToken, OwnerToken};
pub use wake::{Registration, WakeRegistry};
