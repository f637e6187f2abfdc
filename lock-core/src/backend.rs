//! [`LockBackend`], the one trait every backend implements, and the contract it keeps.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{Stream, StreamExt};

use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::lease::{
    AcquireOutcome, AcquireRequest, ExtendOutcome, Lease, LockInfo, ReleaseOutcome,
};
use crate::token::OwnerToken;

/// A stream that yields whenever a watched key may have been released.
///
/// An item is a hint, not a promise that the key is free: the waiter tries again. A
/// stream that ends means notifications stopped (a lost connection); the waiter then
/// falls back to polling.
pub type ChangeStream = Pin<Box<dyn Stream<Item = ()> + Send + 'static>>;

/// A backend behind a pointer: what [`LockClient`](crate::LockClient) and the
/// conformance suite take.
pub type DynLockBackend = dyn LockBackend;

/// A store that grants leases on named locks.
///
/// The required methods are the primitives; waiting, renewal and guards are built on
/// them by [`LockClient`](crate::LockClient), and small conveniences live in
/// [`LockBackendExt`]. The trait is object safe: `Arc<dyn LockBackend>` is how it is
/// usually held.
///
/// # Contract
///
/// Every backend keeps these points; the conformance suite (`distlock-conformance`)
/// has a case for each, and a backend that cannot keep one says so in its
/// [`Capabilities`] and its docs.
///
/// 1. **Mutual exclusion.** At most one unexpired lease exists per key at any instant.
/// 2. **Server time.** Expiry is judged by the server's clock only, never a client's.
///    A lease frees its key once its TTL has passed on the server, and not before.
/// 3. **Owner tokens.** Every acquisition carries a fresh random owner token of 128
///    bits ([`AcquireRequest::owner`]). Release and extend compare it atomically on the
///    server, in one round trip.
/// 4. **Release.** Releasing a lease that is no longer held (expired, taken over,
///    already released) answers [`ReleaseOutcome::NotHeld`] — distinct from
///    [`ReleaseOutcome::Released`] and from an error — and never touches the current
///    holder. Repeating a release or an extend whose reply was lost is harmless.
/// 5. **Extend.** Extending succeeds only while the lease is still held: it never
///    re-acquires a free key, and it keeps the fencing token.
/// 6. **Fencing.** The fencing token strictly increases per key over every successful
///    acquisition, takeovers after expiry included, and is never reused. What a
///    data-losing server restart does to it is declared in
///    [`Capabilities::fence_durability`]; where that says
///    [`Durable`](crate::FenceDurability::Durable) or
///    [`FailsClosed`](crate::FenceDurability::FailsClosed), it never goes backwards.
/// 7. **Validity.** A returned lease's [`Lease::valid_until`] is measured from the
///    instant *before* the request was sent, so the round trip is never counted as
///    validity; a backend never returns a lease that has already expired.
///    ([`LockClient`](crate::LockClient) also refuses leases below a minimum validity.)
///
/// Input is checked before anything is sent: keys by [`LockKey`], TTLs by
/// [`Capabilities::check_ttl`]; bad input is a typed error, never a panic.
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug {
    /// A short name for logs, errors and reports ("memory", "redis", ...).
    fn name(&self) -> &str;

    /// What this backend can do and its limits.
    fn capabilities(&self) -> &Capabilities;

    /// Takes `request.key` for `request.ttl` if it is free or its lease has expired;
    /// otherwise answers [`AcquireOutcome::Held`]. One round trip.
    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome>;

    /// Releases `key` if `owner` holds it. One round trip; see contract point 4.
    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome>;

    /// Sets the lease's TTL to `ttl` from now if it is still held. One round trip; see
    /// contract point 5.
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<ExtendOutcome>;

    /// The current holder's fencing token and remaining TTL, or `None` when the key is
    /// free. Never the owner token.
    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>>;

    /// Starts watching `key` for releases, when the backend can
    /// ([`Capabilities::change_notification`]). Call it *before* the attempt it is to
    /// wake, so that a release in between is not missed. `None` means "poll".
    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let _ = key;
        Ok(None)
    }

    /// Deletes `key` whoever holds it: an operator breaking a stuck lock. The holder
    /// learns it lost the lock at its next renewal. `true` when a lease was removed.
    /// Backends that cannot do this answer [`ErrorKind::Unsupported`].
    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let _ = key;
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("the {} backend cannot force a release", self.name()),
        ))
    }
}

macro_rules! forward_backend {
    ($($ptr:ty),*) => {$(
        #[async_trait]
        impl<T: LockBackend + ?Sized> LockBackend for $ptr {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn capabilities(&self) -> &Capabilities {
                (**self).capabilities()
            }
            async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
                (**self).try_acquire(request).await
            }
            async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
                (**self).release(key, owner).await
            }
            async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<ExtendOutcome> {
                (**self).extend(lease, ttl).await
            }
            async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
                (**self).inspect(key).await
            }
            async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
                (**self).watch(key).await
            }
            async fn force_release(&self, key: &LockKey) -> Result<bool> {
                (**self).force_release(key).await
            }
        }
    )*};
}

forward_backend!(Arc<T>, Box<T>);

/// Conveniences over [`LockBackend`], implemented for every backend. Do not implement
/// it yourself.
#[async_trait]
pub trait LockBackendExt: LockBackend {
    /// Checks `key` and `ttl`, then tries once to acquire: `Some(lease)` or `None`
    /// when another lease holds the key.
    async fn acquire_once(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        let key = LockKey::new(key)?;
        let ttl = self.capabilities().check_ttl(ttl)?;
        match self.try_acquire(&AcquireRequest::new(key, ttl)).await? {
            AcquireOutcome::Acquired(lease) => Ok(Some(lease)),
            AcquireOutcome::Held { .. } => Ok(None),
        }
    }

    /// Releases `lease`.
    async fn release_lease(&self, lease: &Lease) -> Result<ReleaseOutcome> {
        self.release(lease.key(), lease.owner()).await
    }
}

impl<T: LockBackend + ?Sized> LockBackendExt for T {}

/// The next item of an optional change stream; pending forever without one.
pub(crate) async fn next_change(changes: &mut Option<ChangeStream>) -> Option<()> {
    match changes {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
