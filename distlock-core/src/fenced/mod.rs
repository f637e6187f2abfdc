//! Fenced resources: stores that refuse a write from a holder whose fence is stale.
//!
//! A [`FencingToken`] protects nothing until the resource checks it. A
//! [`FencedStore`] is a store that does, atomically, on its own server; the adapters
//! for the stores people write to are beside each backend (`distlock_redis::fenced`,
//! `distlock_postgres::fenced`, `distlock_etcd::fenced`, and outside distlock
//! `distlock_zookeeper::fenced`), and [`FileStore`] writes
//! files on one host. [`FencedHandle`] pairs a store with a guard's fence, and
//! [`LockClient::with_fenced_lock`](crate::LockClient::with_fenced_lock) hands one to
//! the work, so that writes under the lock go through the check by default.

mod file;
mod memory;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::token::FencingToken;

pub use self::file::FileStore;
pub use self::memory::MemoryStore;

/// What a fenced store answered to one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceCheck<T> {
    /// The fence was not below the highest one the resource has seen: the step took
    /// effect, and the resource's fence is now the one offered.
    Accepted(T),
    /// The resource has seen a higher fence, `current`; nothing changed.
    Stale {
        /// The highest fence the resource has seen.
        current: FencingToken,
    },
}

/// A resource as it is stored: the highest fence it has seen and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedValue {
    /// The highest fence the resource has accepted, by a write or a claiming read.
    pub fence: FencingToken,
    /// The last value written; `None` when the resource was only ever read under a
    /// fence (a claim), never written.
    pub value: Option<Vec<u8>>,
}

impl FencedValue {
    /// A resource whose highest fence is `fence`, holding `value` (`None`: claimed by
    /// a read, never written).
    pub fn new(fence: FencingToken, value: Option<Vec<u8>>) -> Self {
        FencedValue { fence, value }
    }
}

/// A store whose resources refuse writes under a stale fence: the server steps an
/// adapter implements.
///
/// Resources are named like locks (a [`LockKey`]: 1 to 256 bytes of UTF-8, no control
/// characters), usually the key of the lock that protects them. Callers use
/// [`FencedStoreExt`], which checks names and fences once, for every store, and turns
/// a [`FenceCheck::Stale`] answer into an [`ErrorKind::StaleFence`] error. The trait
/// is object safe.
///
/// # Contract
///
/// The conformance suite (`distlock_conformance::fenced`) checks every point.
///
/// 1. **One atomic step.** A step under fence `f` compares `f` with the highest fence
///    the resource has seen and, only when `f` is not below it, applies the write and
///    stores `f`, in one step on the store's server. No other write can come between
///    the compare and the write (a check, then a write, in two steps is the bug this
///    point rules out).
/// 2. **The fence never goes down.** Once the resource has seen `f`, a step under any
///    fence below `f` answers [`FenceCheck::Stale`] with the highest fence seen, and
///    changes nothing, whatever order concurrent writers arrive in.
/// 3. **The same fence is accepted again.** A step under exactly the highest fence
///    seen is accepted: the same holder may write twice.
/// 4. **Numbers, not text.** Fences compare as unsigned integers over the whole range
///    `1..=`[`MAX_FENCE`] (so 10 is above 9, and 2⁵³ + 1 is above 2⁵³), however the
///    store keeps them. [`FencingToken::NONE`] (0, an efficiency lock's lease) is no
///    fence: [`FencedStoreExt`] refuses it ([`check_fence`]) before the store sees it.
/// 5. **A claiming read raises the fence.** [`claim_fenced`](Self::claim_fenced)
///    under `f` is a step like a write that stores `f` without changing the value, so
///    that after a newer holder has read, an older one can no longer write what it
///    computed from an earlier read (a read-modify-write under the lock is then safe).
/// 6. **Resources are independent**, and a fence, once stored, is kept for as long as
///    the resource is: a store that forgets a fence would accept a stale write.
#[async_trait]
pub trait FencedStore: Send + Sync + fmt::Debug {
    /// A short name of the store ("redis", "postgres", "file", ...), for errors.
    fn name(&self) -> &str;

    /// Writes `value` to `resource` if `fence` is not below the highest fence the
    /// resource has seen, and stores `fence` with it, in one step.
    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>>;

    /// Raises `resource`'s fence to `fence` and returns its value, if `fence` is not
    /// below the highest fence the resource has seen, in one step.
    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>>;

    /// The resource's fence and value as stored, without claiming it; `None` when it
    /// has never been written or claimed.
    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>>;
}

/// A store behind a pointer.
pub type DynFencedStore = dyn FencedStore;

/// The highest fence every store can keep: `i64::MAX`. Redis counters, PostgreSQL's
/// `bigint` and etcd's revisions are signed 64-bit numbers, so no backend mints more.
pub const MAX_FENCE: FencingToken = FencingToken::new(i64::MAX as u64);

macro_rules! forward_store {
    ($($ptr:ty),*) => {$(
        #[async_trait]
        impl<T: FencedStore + ?Sized> FencedStore for $ptr {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn put_fenced(
                &self,
                resource: &LockKey,
                fence: FencingToken,
                value: &[u8],
            ) -> Result<FenceCheck<()>> {
                (**self).put_fenced(resource, fence, value).await
            }
            async fn claim_fenced(
                &self,
                resource: &LockKey,
                fence: FencingToken,
            ) -> Result<FenceCheck<Option<Vec<u8>>>> {
                (**self).claim_fenced(resource, fence).await
            }
            async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
                (**self).inspect_fenced(resource).await
            }
        }
    )*};
}

forward_store!(Arc<T>, Box<T>, &T);

/// The operations callers use on any [`FencedStore`]: names and fences are checked
/// before anything is sent, and a stale answer becomes an [`ErrorKind::StaleFence`]
/// error. Implemented for every store; do not implement it yourself.
#[async_trait]
pub trait FencedStoreExt: FencedStore {
    /// Writes `value` to `resource` under `fence`. An [`ErrorKind::StaleFence`] error
    /// when the resource has seen a higher fence (nothing is written);
    /// [`ErrorKind::InvalidKey`] for a bad name, [`ErrorKind::InvalidInput`] for a
    /// fence above [`MAX_FENCE`].
    async fn write(&self, resource: &str, fence: FencingToken, value: &[u8]) -> Result<()> {
        let resource = checked(resource, fence)?;
        self.put_fenced(&resource, fence, value).await?.into_result(
            self.name(),
            resource.as_str(),
            fence,
        )
    }

    /// Reads `resource` under `fence`, raising its fence to `fence` (contract point
    /// 5), so that no older holder can write after this read. Errors as
    /// [`write`](Self::write).
    async fn read(&self, resource: &str, fence: FencingToken) -> Result<Option<Vec<u8>>> {
        let resource = checked(resource, fence)?;
        self.claim_fenced(&resource, fence).await?.into_result(
            self.name(),
            resource.as_str(),
            fence,
        )
    }

    /// The resource's fence and value, without claiming it.
    async fn inspect(&self, resource: &str) -> Result<Option<FencedValue>> {
        self.inspect_fenced(&LockKey::new(resource)?).await
    }
}

impl<T: FencedStore + ?Sized> FencedStoreExt for T {}

fn checked(resource: &str, fence: FencingToken) -> Result<LockKey> {
    let resource = LockKey::new(resource)?;
    check_fence(fence)?;
    Ok(resource)
}

/// An [`ErrorKind::InvalidInput`] error for [`FencingToken::NONE`] (an efficiency
/// lock's lease, which carries no fence) and for a fence above [`MAX_FENCE`]: for
/// adapters' own operations, to check before anything is sent, as [`FencedStoreExt`]
/// does.
pub fn check_fence(fence: FencingToken) -> Result<()> {
    if fence.is_none() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "this lease carries no fence (an efficiency lock's, LockOptions::with_fenced(false)), \
             and a fenced store takes only a fenced lock's token",
        ));
    }
    if fence > MAX_FENCE {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("fence {fence} is above {MAX_FENCE}, the highest a fenced store keeps"),
        ));
    }
    Ok(())
}

impl<T> FenceCheck<T> {
    /// The same answer with the accepted value mapped by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> FenceCheck<U> {
        match self {
            FenceCheck::Accepted(value) => FenceCheck::Accepted(f(value)),
            FenceCheck::Stale { current } => FenceCheck::Stale { current },
        }
    }

    /// The accepted value, or the [`ErrorKind::StaleFence`] error every store gives:
    /// it names the `resource`, the `offered` fence and the current one, and the
    /// `store` as the backend.
    pub fn into_result(self, store: &str, resource: &str, offered: FencingToken) -> Result<T> {
        match self {
            FenceCheck::Accepted(value) => Ok(value),
            FenceCheck::Stale { current } => Err(Error::new(
                ErrorKind::StaleFence,
                format!(
                    "{resource:?} has seen fence {current}; a write under fence {offered} is stale"
                ),
            )
            .with_backend(store.to_owned())),
        }
    }
}

/// A lock's fence and a store to write through under it: what
/// [`LockClient::with_fenced_lock`](crate::LockClient::with_fenced_lock) hands the
/// work, and [`LockGuard::fenced`](crate::LockGuard::fenced) makes.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use distlock_core::{LockClient, MemoryBackend, MemoryStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(Arc::new(MemoryBackend::new()));
/// let store = MemoryStore::new();
/// client
///     .with_fenced_lock("invoice/7", Duration::from_secs(5), store.clone(), |fenced| async move {
///         let seen = fenced.read("invoice/7").await?;
///         fenced.write("invoice/7", b"paid").await?;
///         Ok::<_, distlock_core::Error>(seen)
///     })
///     .await?
///     .into_output()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencedHandle<S> {
    store: S,
    fence: FencingToken,
}

impl<S: FencedStore> FencedHandle<S> {
    /// Writes through `store` under `fence`.
    pub fn new(store: S, fence: FencingToken) -> Self {
        FencedHandle { store, fence }
    }

    /// The fence every write carries.
    pub fn fence(&self) -> FencingToken {
        self.fence
    }

    /// The store, for its own fenced operations (a PostgreSQL statement, a Redis hash
    /// field) that take the fence explicitly.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// [`FencedStoreExt::write`] under this handle's fence.
    pub async fn write(&self, resource: &str, value: &[u8]) -> Result<()> {
        self.store.write(resource, self.fence, value).await
    }

    /// [`FencedStoreExt::read`] under this handle's fence: a claiming read.
    pub async fn read(&self, resource: &str) -> Result<Option<Vec<u8>>> {
        self.store.read(resource, self.fence).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_names_and_fences_are_refused_before_the_store_sees_them() {
        let store = MemoryStore::new();
        let err = store
            .write("", FencingToken::new(1), b"x")
            .await
            .expect_err("empty name");
        assert_eq!(err.kind(), ErrorKind::InvalidKey);
        let err = store
            .write("r", FencingToken::new(u64::MAX), b"x")
            .await
            .expect_err("fence too high");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(store.inspect("r").await.expect("inspect"), None);
        store
            .write("r", MAX_FENCE, b"top")
            .await
            .expect("max fence");
    }

    #[tokio::test]
    async fn a_lease_without_a_fence_cannot_write() {
        let store = MemoryStore::new();
        let handle = FencedHandle::new(store.clone(), FencingToken::NONE);
        for err in [
            handle
                .write("r", b"x")
                .await
                .expect_err("a write under no fence"),
            handle.read("r").await.expect_err("a read under no fence"),
            check_fence(FencingToken::NONE).expect_err("no fence"),
        ] {
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.message().contains("efficiency lock"), "{err}");
        }
        assert_eq!(store.inspect("r").await.expect("inspect"), None);
        store
            .write("r", FencingToken::new(1), b"one")
            .await
            .expect("the lowest fence");
    }

    #[tokio::test]
    async fn a_stale_write_is_a_typed_error_naming_both_fences() {
        let store = MemoryStore::new();
        store
            .write("r", FencingToken::new(10), b"new")
            .await
            .expect("write");
        let err = store
            .write("r", FencingToken::new(9), b"old")
            .await
            .expect_err("stale");
        assert_eq!(err.kind(), ErrorKind::StaleFence);
        assert!(!err.is_retryable());
        assert!(err.message().contains("fence 10"), "{err}");
        assert!(err.message().contains("fence 9 "), "{err}");
    }
}
