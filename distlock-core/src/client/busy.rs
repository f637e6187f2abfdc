//! [`Busy`]: why a single try did not take its key.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::key::LockKey;

/// Why a single try ([`LockClient::try_lock`](crate::LockClient::try_lock) and the
/// other `try_` calls) did not take its key. A try that finds the key taken is not an
/// error: it answers `Ok(Err(Busy))`, and the backend's own failures stay the outer
/// error. `?` turns a `Busy` into an [`ErrorKind::Busy`] error where the caller
/// treats busy as a failure, with the holder's remaining time as its
/// [`retry_after`](Error::retry_after) when the backend told it.
///
/// ```
/// use std::sync::Arc;
/// use distlock_core::{BusyReason, LockClient, MemoryBackend};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let backend = Arc::new(MemoryBackend::new());
/// let (ours, theirs) = (LockClient::new(backend.clone()), LockClient::new(backend));
/// let held = theirs.try_lock("ledger").await?.expect("the key is free");
/// match ours.try_lock("ledger").await? {
///     Ok(_guard) => unreachable!("another client holds it"),
///     Err(busy) => {
///         assert_eq!(busy.reason(), BusyReason::Held);
///         assert!(busy.holder_remaining().is_some()); // the memory backend tells it
///     }
/// }
/// held.release().await
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    key: LockKey,
    reason: BusyReason,
    remaining: Option<Duration>,
}

/// What kept a try from its key (see [`Busy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BusyReason {
    /// The server refused it: another owner holds the key (for a semaphore, its
    /// permits; for a read-write lock, the other side), or, in fair mode, waiters are
    /// queued ahead of this one.
    Held,
    /// The server was not asked: another task of this client (or a clone of it)
    /// holds the key, waits for it or is trying it. A client lets one of its tasks at a
    /// time race for a key, so the key may be free on the server; it goes to that task
    /// first. (Within [`reentrant`](crate::LockClient::reentrant), a key this task
    /// holds is granted again instead.)
    ThisClient,
}

impl Busy {
    /// The server refused `key`; `remaining` is the holder's TTL as it answered.
    pub(crate) fn held(key: LockKey, remaining: Option<Duration>) -> Self {
        Busy {
            key,
            reason: BusyReason::Held,
            remaining,
        }
    }

    /// Another task of this client has its turn on `key`.
    pub(crate) fn this_client(key: LockKey) -> Self {
        Busy {
            key,
            reason: BusyReason::ThisClient,
            remaining: None,
        }
    }

    /// The key the try did not take (for a set, the first key found busy).
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// Why it did not take it.
    pub fn reason(&self) -> BusyReason {
        self.reason
    }

    /// The holder's remaining TTL by the server's clock, when the backend answered it
    /// with the refusal: a hint of when a retry may succeed, not a promise (the holder
    /// may renew or release first).
    pub fn holder_remaining(&self) -> Option<Duration> {
        self.remaining
    }
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            BusyReason::Held => write!(f, "{:?} is held by another owner", self.key.as_str())?,
            BusyReason::ThisClient => write!(
                f,
                "{:?} is held, waited for or tried by another task of this client",
                self.key
            )?,
        }
        if let Some(remaining) = self.remaining {
            write!(f, " for {remaining:?} more")?;
        }
        Ok(())
    }
}

impl std::error::Error for Busy {}

impl From<Busy> for Error {
    fn from(busy: Busy) -> Self {
        let error = Error::new(ErrorKind::Busy, busy.to_string());
        match busy.remaining {
            Some(remaining) => error.with_retry_after(remaining),
            None => error,
        }
    }
}
