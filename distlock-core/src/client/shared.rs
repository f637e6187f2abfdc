//! [`Semaphore`] and [`RwLock`]: the shared kinds, each grant a lease held through a
//! [`LockGuard`], on a backend's [`PermitBackend`](crate::backend::PermitBackend).

use std::sync::Arc;
use std::time::Duration;

use super::background::Background;
use super::claim::{permits_of, ClaimView};
use super::deferred::Starts;
use super::{LockClient, LockGuard, LockOptions};
use crate::backend::DynLockBackend;
use crate::error::Result;
use crate::key::LockKey;
use crate::permits::{Claim, PermitHolder};

/// Clients of one name's permits, one per claim, sharing their deferred starts.
#[derive(Debug, Clone)]
pub(crate) struct Claims {
    backend: Arc<DynLockBackend>,
    name: LockKey,
    options: LockOptions,
    starts: Starts,
    background: Background,
}

impl Claims {
    /// Checks the name, the options and that `backend` has permits.
    pub(crate) fn new(
        backend: Arc<DynLockBackend>,
        name: &str,
        options: LockOptions,
    ) -> Result<Self> {
        let name = LockKey::new(name)?;
        // Every wait keeps a place (point 4 of the permit contract).
        let options = options.with_fair(true);
        let claims = Claims {
            backend,
            name,
            options,
            starts: Starts::default(),
            background: Background::default(),
        };
        claims.client(Claim::new(1, 1)?)?;
        Ok(claims)
    }

    /// A client whose every grant is `claim` on the name.
    pub(crate) fn client(&self, claim: Claim) -> Result<LockClient> {
        let view = Arc::new(ClaimView::new(self.backend.clone(), claim)?);
        let mut client = LockClient::with_options(view, self.options.clone())?;
        client.starts = self.starts.clone();
        client.background = self.background.clone();
        Ok(client)
    }

    /// As [`LockClient::flush`], for every claim's client.
    pub(crate) async fn flush(&self) {
        self.background.idle().await;
    }

    pub(crate) fn name(&self) -> &LockKey {
        &self.name
    }

    pub(crate) fn backend(&self) -> &Arc<DynLockBackend> {
        &self.backend
    }

    pub(crate) fn options(&self) -> &LockOptions {
        &self.options
    }

    pub(crate) async fn acquire(&self, claim: Claim, wait: Duration) -> Result<LockGuard> {
        self.client(claim)?.lock(self.name.as_str(), wait).await
    }

    pub(crate) async fn try_acquire(&self, claim: Claim) -> Result<Option<LockGuard>> {
        self.client(claim)?.try_lock(self.name.as_str()).await
    }

    pub(crate) async fn holders(&self) -> Result<Vec<PermitHolder>> {
        permits_of(&*self.backend)?.holders(&self.name).await
    }
}

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
/// use distlock_core::{MemoryBackend, Semaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let backend = Arc::new(MemoryBackend::new());
/// let uploads = Semaphore::new(backend, "uploads", 2)?;
/// let a = uploads.acquire(Duration::from_secs(1)).await?;
/// let b = uploads.acquire(Duration::from_secs(1)).await?;
/// assert!(uploads.try_acquire().await?.is_none()); // both permits are held
/// assert!(b.fence() > a.fence());
/// a.release().await?;
/// assert!(uploads.try_acquire().await?.is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    claims: Claims,
    limit: u32,
}

impl Semaphore {
    /// A semaphore of `limit` permits on `name`, with the default [`LockOptions`].
    pub fn new(backend: Arc<DynLockBackend>, name: &str, limit: u32) -> Result<Self> {
        Self::with_options(backend, name, limit, LockOptions::default())
    }

    /// A semaphore with `options` (TTL, renewal, backoff, how long a waiter's place
    /// lasts; fair mode does not apply). A configuration error when the limit is zero,
    /// the options do not fit together or the backend has no permits
    /// ([`LockBackend::permits`](crate::LockBackend::permits)).
    pub fn with_options(
        backend: Arc<DynLockBackend>,
        name: &str,
        limit: u32,
        options: LockOptions,
    ) -> Result<Self> {
        Claim::new(1, limit)?;
        Ok(Semaphore {
            claims: Claims::new(backend, name, options)?,
            limit,
        })
    }

    /// The name.
    pub fn name(&self) -> &LockKey {
        self.claims.name()
    }

    /// How many permits the name has.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Waits up to `wait` for one permit; as [`LockClient::lock`].
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

    /// Tries once for one permit: a guard, or `None` when they are all held.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.try_acquire_many(1).await
    }

    /// Tries once for `count` permits.
    pub async fn try_acquire_many(&self, count: u32) -> Result<Option<LockGuard>> {
        self.claims
            .try_acquire(Claim::new(count, self.limit)?)
            .await
    }

    /// The live grants, oldest first.
    pub async fn holders(&self) -> Result<Vec<PermitHolder>> {
        self.claims.holders().await
    }

    /// Waits for the releases and cleanups this semaphore (and its clones) runs in
    /// the background; as [`LockClient::flush`].
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

/// A read-write lock across processes: any number of readers, or one writer, never
/// both; every grant a lease with its own fencing token, which strictly increases per
/// name over readers and writers alike.
///
/// **Policy: writers first.** A writer that waits keeps a place on the server that
/// holds back new readers (point 4 of the [`PermitBackend`](crate::backend::PermitBackend)
/// contract); readers that already hold finish, then the writer is granted. So a
/// stream of readers never starves a writer, while a stream of writers can hold
/// readers back. Writers among themselves race. A waiting writer that vanishes holds
/// readers back until its place runs out ([`LockOptions::with_queue_place`], 3 s by
/// default).
///
/// It is a name's permits with a limit of [`RwLock::PERMITS`]: a reader takes one, a
/// writer all of them.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{MemoryBackend, RwLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let config = RwLock::new(Arc::new(MemoryBackend::new()), "config")?;
/// let wait = Duration::from_secs(1);
/// let r1 = config.read(wait).await?;
/// let r2 = config.read(wait).await?; // readers share
/// assert!(config.try_write().await?.is_none());
/// r1.release().await?;
/// r2.release().await?;
/// let w = config.write(wait).await?;
/// assert!(config.try_read().await?.is_none());
/// w.release().await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    claims: Claims,
}

impl RwLock {
    /// The limit of a read-write lock's name: a reader takes one permit, a writer
    /// all.
    pub const PERMITS: u32 = u32::MAX;

    /// A read-write lock on `name`, with the default [`LockOptions`].
    pub fn new(backend: Arc<DynLockBackend>, name: &str) -> Result<Self> {
        Self::with_options(backend, name, LockOptions::default())
    }

    /// A read-write lock with `options`; see [`Semaphore::with_options`].
    pub fn with_options(
        backend: Arc<DynLockBackend>,
        name: &str,
        options: LockOptions,
    ) -> Result<Self> {
        Ok(RwLock {
            claims: Claims::new(backend, name, options)?,
        })
    }

    /// The name.
    pub fn name(&self) -> &LockKey {
        self.claims.name()
    }

    /// Waits up to `wait` to read.
    pub async fn read(&self, wait: Duration) -> Result<LockGuard> {
        self.claims.acquire(Self::reader(), wait).await
    }

    /// Tries once to read: `None` while a writer holds the lock or waits for it.
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.claims.try_acquire(Self::reader()).await
    }

    /// Waits up to `wait` to write, holding back new readers meanwhile.
    pub async fn write(&self, wait: Duration) -> Result<LockGuard> {
        self.claims.acquire(Self::writer(), wait).await
    }

    /// Tries once to write: `None` while anyone holds the lock.
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.claims.try_acquire(Self::writer()).await
    }

    /// The live grants (readers hold a count of 1, a writer [`Self::PERMITS`]).
    pub async fn holders(&self) -> Result<Vec<PermitHolder>> {
        self.claims.holders().await
    }

    /// Waits for the releases and cleanups this lock (and its clones) runs in the
    /// background; as [`LockClient::flush`].
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
