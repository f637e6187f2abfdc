//! What an operator asks of a lock service: who holds a key, which keys are held, and
//! breaking a stuck lock. On the client, where a service and the `distlock` command
//! line reach them, through the same layers as every other call (the circuit breaker
//! and the meter where they are on).

use tracing::warn;

use crate::backend::{LockBackendExt as _, LockInfo};
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;

use super::lock_client::LockClient;

impl LockClient {
    /// Who holds `key` now, as the backend shows it: its fence, its remaining TTL, and
    /// the holder and grant time where the backend keeps them
    /// ([`LockInfo`]); `None` when the key is free. One request; an
    /// [`ErrorKind::InvalidKey`] error, with nothing sent, for a key that is not one.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let guard = client.lock("ledger", Duration::from_secs(1)).await?;
    /// let held = client.inspect("ledger").await?.expect("held");
    /// assert_eq!(held.fence, guard.fence());
    /// guard.release().await?;
    /// assert!(client.inspect("ledger").await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, key: &str) -> Result<Option<LockInfo>> {
        let key = LockKey::new(key)?;
        self.backend().inspect(&key).await
    }

    /// The keys held now whose names start with `prefix` (`""`: every key), each with
    /// what [`inspect`](Self::inspect) shows of it, sorted by key. An
    /// [`ErrorKind::Unsupported`] error, with nothing sent, where the backend cannot
    /// list its locks ([`LockBackend::operator`](crate::LockBackend::operator)); an
    /// [`ErrorKind::InvalidKey`] error for a non-empty prefix that is not a key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        self.backend().list(prefix).await
    }

    /// Breaks the lock on `key`, whoever holds it: an operator's last resort for a
    /// stuck lock. `true` when a lease was removed, `false` when the key was free. The
    /// holder learns it lost the lock at its next renewal (its fence is what keeps
    /// its late writes out of a fenced store meanwhile). Logged at `warn` with the
    /// key. An [`ErrorKind::Unsupported`] error, with nothing
    /// sent, where the backend has no operator steps.
    pub async fn force_release(&self, key: &str) -> Result<bool> {
        let key = LockKey::new(key)?;
        let backend = self.backend();
        let Some(operator) = backend.operator() else {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("the {} backend cannot force a release", backend.name()),
            ));
        };
        let broken = operator.force_release(&key).await?;
        if broken {
            warn!(key = %key, "a lock was broken by force");
        }
        Ok(broken)
    }
}
