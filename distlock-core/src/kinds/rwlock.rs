//! [`RwLock`]: a read-write lock on a backend's
//! [`PermitBackend`](crate::backend::PermitBackend), each grant a lease held through a
//! [`LockGuard`].

use std::time::Duration;

use super::claim::Claims;
use crate::client::{Busy, LockClient, LockGuard};
use crate::error::Result;
use crate::key::LockKey;
use crate::permits::{Claim, PermitHolder};

/// A read-write lock across processes: any number of readers, or one writer, never
/// both; every grant a lease with its own fencing token, which strictly increases per
/// name over readers and writers alike.
///
/// **Policy: writers first.** A writer that waits keeps a place on the server that
/// holds back new readers (point 4 of the [`PermitBackend`](crate::backend::PermitBackend)
/// contract); readers that already hold finish, then the writer is granted. So a
/// stream of readers never starves a writer, while a stream of writers can hold
/// readers back. Writers among themselves race. A waiting writer that vanishes holds
/// readers back until its place runs out ([`LockOptions::with_queue_place`](crate::LockOptions::with_queue_place), 3 s by
/// default).
///
/// It is a name's permits with a limit of [`RwLock::PERMITS`]: a reader takes one, a
/// writer all of them.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let config = LockClient::new(Arc::new(MemoryBackend::new())).rw_lock("config")?;
/// let wait = Duration::from_secs(1);
/// let r1 = config.read(wait).await?;
/// let r2 = config.read(wait).await?; // readers share
/// assert!(config.try_write().await?.is_err());
/// r1.release().await?;
/// r2.release().await?;
/// let w = config.write(wait).await?;
/// assert!(config.try_read().await?.is_err());
/// w.release().await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    claims: Claims,
}

impl LockClient {
    /// A read-write lock on `name`, on this client's backend, sharing what a
    /// [`semaphore`](Self::semaphore) shares; the same errors but the limit's.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        Ok(RwLock {
            claims: Claims::new(self, name)?,
        })
    }
}

impl RwLock {
    /// The limit of a read-write lock's name: a reader takes one permit, a writer
    /// all.
    pub const PERMITS: u32 = u32::MAX;

    /// The name.
    pub fn name(&self) -> &LockKey {
        self.claims.name()
    }

    /// Waits up to `wait` to read.
    pub async fn read(&self, wait: Duration) -> Result<LockGuard> {
        self.claims.acquire(Self::reader(), wait).await
    }

    /// Tries once to read: [`Busy`] while a writer holds the lock or waits for it.
    pub async fn try_read(&self) -> Result<std::result::Result<LockGuard, Busy>> {
        self.claims.try_acquire(Self::reader()).await
    }

    /// Waits up to `wait` to write, holding back new readers meanwhile.
    pub async fn write(&self, wait: Duration) -> Result<LockGuard> {
        self.claims.acquire(Self::writer(), wait).await
    }

    /// Tries once to write: [`Busy`] while anyone holds the lock.
    pub async fn try_write(&self) -> Result<std::result::Result<LockGuard, Busy>> {
        self.claims.try_acquire(Self::writer()).await
    }

    /// The live grants (readers hold a count of 1, a writer [`Self::PERMITS`]).
    pub async fn holders(&self) -> Result<Vec<PermitHolder>> {
        self.claims.holders().await
    }

    /// Waits for the releases and cleanups this lock (and its clones) runs in the
    /// background; as [`LockClient::flush`](crate::LockClient::flush).
    pub async fn flush(&self) {
        self.claims.flush().await;
    }

    fn reader() -> Claim {
        Claim::checked_already(1, Self::PERMITS)
    }

    fn writer() -> Claim {
        Claim::checked_already(Self::PERMITS, Self::PERMITS)
    }
}
