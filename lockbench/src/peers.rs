//! The peer libraries the comparison run measures beside distlock, driven the way
//! their users drive them, through the same scenarios.

use std::time::Duration;

use crate::run::BoxError;

/// The peer crate's name and version, as the report shows it.
pub(crate) const RSLOCK: &str = "rslock 0.10";
use crate::scenarios::{Contender, SCENARIO_TTL};

/// rslock (the Redlock crate) on one Redis server (a quorum of one), or on several
/// independent masters (Redlock).
///
/// Its `lock` is one `SET NX PX` per server, sent to all at once and waited for from
/// all (retried up to three times, up to 200 ms apart, when the key is taken), and its
/// release one script call per server, so an uncontended cycle is two round trips,
/// like distlock's. It has no notification: a waiter polls. It has no fences.
#[derive(Clone, Debug)]
pub(crate) struct Rslock {
    manager: rslock::LockManager,
}

impl Rslock {
    /// A lock manager on the servers at `urls`, with rslock's default retries.
    pub(crate) fn new(urls: Vec<String>) -> Self {
        Rslock {
            manager: rslock::LockManager::new(urls),
        }
    }
}

impl Contender for Rslock {
    type Held = rslock::Lock;

    async fn try_take(&self, key: &str) -> Result<Option<rslock::Lock>, BoxError> {
        match self.manager.lock(key.as_bytes(), SCENARIO_TTL).await {
            Ok(lock) => Ok(Some(lock)),
            Err(rslock::LockError::Unavailable) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn take(&self, key: &str, wait: Duration) -> Result<rslock::Lock, BoxError> {
        // `acquire_no_guard` retries until it gets the lock; the deadline is ours.
        match tokio::time::timeout(
            wait,
            self.manager.acquire_no_guard(key.as_bytes(), SCENARIO_TTL),
        )
        .await
        {
            Ok(lock) => Ok(lock?),
            Err(_) => Err(format!("rslock did not acquire {key} within {wait:?}").into()),
        }
    }

    async fn give_back(&self, held: rslock::Lock) -> Result<(), BoxError> {
        // rslock's release is best effort and reports nothing.
        held.release().await;
        Ok(())
    }
}
