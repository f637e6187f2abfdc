//! [`Semaphore`]: a counting semaphore on a backend's
//! [`PermitBackend`](crate::backend::PermitBackend), each grant a lease held through a
//! [`LockGuard`].

use std::time::Duration;

use super::claim::Claims;
use crate::client::{Busy, LockClient, LockGuard};
use crate::error::Result;
use crate::key::LockKey;
use crate::permits::{Claim, PermitHolder};

/// A counting semaphore across processes: at most `limit` permits of a name are held
/// at any instant, each grant a lease with its own owner, TTL, renewal, loss signal
/// and fencing token, which strictly increases per name.
///
/// Each grant is a [`LockGuard`]: release it (or drop it) to give its permits back;
/// [`LockGuard::lost`] tells the holder when the lease ran out under it. Waiters keep
/// a place on the server while they wait, so that a claim of many permits
/// ([`acquire_many`](Self::acquire_many)) is not starved by a stream of smaller ones.
/// Every client of a name must give the same limit: another limit, while permits of
/// the name are held, is an [`ErrorKind::Configuration`](crate::ErrorKind) error.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let locks = LockClient::new(Arc::new(MemoryBackend::new()));
/// let uploads = locks.semaphore("uploads", 2)?;
/// let a = uploads.acquire(Duration::from_secs(1)).await?;
/// let b = uploads.acquire(Duration::from_secs(1)).await?;
/// assert!(uploads.try_acquire().await?.is_err()); // both permits are held
/// assert!(b.fence() > a.fence());
/// a.release().await?;
/// assert!(uploads.try_acquire().await?.is_ok());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    claims: Claims,
    limit: u32,
}

impl LockClient {
    /// A counting semaphore of `limit` permits on `name`, on this client's backend.
    ///
    /// The semaphore, and the read-write locks and elections this client makes, share
    /// what the client's locks have: its options (the TTL, renewal, backoff and how
    /// long a waiter's place lasts; fair mode does not apply, since every waiter keeps
    /// a place), its circuit breaker, its background work
    /// ([`flush`](Self::flush) waits for theirs too), and its metrics and spans, under
    /// the backend's name.
    ///
    /// A configuration error when `name` is not a valid key, the limit is zero or the
    /// backend has no permits ([`LockBackend::permits`](crate::LockBackend::permits)).
    pub fn semaphore(&self, name: &str, limit: u32) -> Result<Semaphore> {
        Claim::new(1, limit)?;
        Ok(Semaphore {
            claims: Claims::new(self, name)?,
            limit,
        })
    }
}

impl Semaphore {
    /// The name.
    pub fn name(&self) -> &LockKey {
        self.claims.name()
    }

    /// How many permits the name has.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Waits up to `wait` for one permit; as [`LockClient::lock`](crate::LockClient::lock).
    pub async fn acquire(&self, wait: Duration) -> Result<LockGuard> {
        self.acquire_many(1, wait).await
    }

    /// Waits up to `wait` for `count` permits at once, held by one guard; a
    /// configuration error when `count` is zero or above the limit.
    pub async fn acquire_many(&self, count: u32, wait: Duration) -> Result<LockGuard> {
        self.claims
            .acquire(Claim::new(count, self.limit)?, wait)
            .await
    }

    /// Tries once for one permit: a guard, or [`Busy`] when they are all held.
    pub async fn try_acquire(&self) -> Result<std::result::Result<LockGuard, Busy>> {
        self.try_acquire_many(1).await
    }

    /// Tries once for `count` permits.
    pub async fn try_acquire_many(
        &self,
        count: u32,
    ) -> Result<std::result::Result<LockGuard, Busy>> {
        self.claims
            .try_acquire(Claim::new(count, self.limit)?)
            .await
    }

    /// The live grants, oldest first.
    pub async fn holders(&self) -> Result<Vec<PermitHolder>> {
        self.claims.holders().await
    }

    /// Waits for the releases and cleanups this semaphore (and its clones) runs in
    /// the background; as [`LockClient::flush`](crate::LockClient::flush).
    pub async fn flush(&self) {
        self.claims.flush().await;
    }

    /// How many permits are free now: a snapshot, already stale when it arrives.
    pub async fn available(&self) -> Result<u32> {
        let held: u64 = self
            .holders()
            .await?
            .iter()
            .map(|h| u64::from(h.count))
            .sum();
        Ok(u32::try_from(u64::from(self.limit).saturating_sub(held)).unwrap_or(0))
    }
}
