//! Observing a key the client need not hold: each change of its holder, as Redisson's
//! lock events and etcd's watch give them to a service that waits on no lock.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::Stream;
use tracing::debug;

use crate::backend::{next_change, DynLockBackend, LockInfo};
use crate::error::Result;
use crate::holder::Holder;
use crate::key::LockKey;
use crate::token::FencingToken;
use crate::wake::ChangeStream;

use super::lock_client::LockClient;

/// What [`LockClient::observe`] reports of a key: its holder, or that it is free.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyState {
    /// Held: the holder as [`LockClient::inspect`] shows it (its fence, its remaining
    /// TTL when it was seen, and its identity where the backend keeps it).
    Held(LockInfo),
    /// Free: no lease holds the key (it was released, expired or broken, and not
    /// granted again yet).
    Free,
}

/// The stream [`LockClient::observe`] returns. It never ends on its own; errors are
/// items (a retryable one means the observer will look again).
pub type KeyStates = Pin<Box<dyn Stream<Item = Result<KeyState>> + Send>>;

impl LockClient {
    /// Each change of `key`'s holder from now on, for a service that does not hold the
    /// lock: first the key as it is, then an item each time a look finds another
    /// holder (a grant, a takeover) or finds it free (a release, an expiry, a forced
    /// release). A holder's renewals are not changes. An
    /// [`ErrorKind::InvalidKey`](crate::ErrorKind::InvalidKey) error, with nothing sent,
    /// for a key that is not one.
    ///
    /// It looks with one [`inspect`](Self::inspect) at a time: when the backend reports
    /// a release ([`Capabilities::change_notification`](crate::backend::Capabilities::change_notification)),
    /// when the holder's lease would run out, and otherwise every
    /// [`LockOptions::backoff_max`](crate::LockOptions::backoff_max) (500 ms by
    /// default), and never twice within 50 ms. So a release is seen at once where the
    /// backend notifies, an expiry as the lease ends, and a grant within that period; a holder
    /// that came and went between two looks is not seen. A new holder is told apart by
    /// its fence, and where leases carry none (an efficiency lock) by its holder and
    /// grant time.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{KeyState, LockClient, MemoryBackend};
    /// use futures_util::StreamExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let mut states = client.observe("ledger")?;
    /// assert_eq!(states.next().await.expect("an item")?, KeyState::Free);
    /// let guard = client.lock("ledger", Duration::from_secs(5)).await?;
    /// let KeyState::Held(holder) = states.next().await.expect("an item")? else {
    ///     panic!("not held");
    /// };
    /// assert_eq!(holder.fence, guard.fence());
    /// guard.release().await?;
    /// assert_eq!(states.next().await.expect("an item")?, KeyState::Free);
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self, key: &str) -> Result<KeyStates> {
        let key = LockKey::new(key)?;
        let watcher = KeyWatcher {
            backend: self.backend().clone(),
            key,
            every: self.options().backoff_max(),
            wait: None,
            last: None,
            changes: None,
        };
        Ok(Box::pin(futures_util::stream::unfold(
            watcher,
            |mut watcher| async move {
                let item = watcher.next().await;
                Some((item, watcher))
            },
        )))
    }
}

/// The shortest wait between two looks.
const SOONEST: Duration = Duration::from_millis(50);

/// What tells one holder from the next: its fence, and its holder and grant time for
/// leases without one.
type Identity = Option<(FencingToken, Option<Holder>, Option<SystemTime>)>;

/// The state behind [`LockClient::observe`].
struct KeyWatcher {
    backend: Arc<DynLockBackend>,
    key: LockKey,
    every: Duration,
    /// How long to wait before the next look; `None` before the first.
    wait: Option<Duration>,
    /// The holder last reported; `None` before the first report.
    last: Option<Identity>,
    changes: Option<ChangeStream>,
}

impl KeyWatcher {
    async fn next(&mut self) -> Result<KeyState> {
        loop {
            match self.wait {
                Some(wait) => {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        change = next_change(&mut self.changes) => {
                            if change.is_none() {
                                debug!("change notifications ended; polling instead");
                                self.changes = None;
                            }
                        }
                    }
                }
                // Watching starts before the first look, so that no release after it
                // is missed.
                None if self.backend.capabilities().change_notification => {
                    self.changes = match self.backend.watch(&self.key).await {
                        Ok(changes) => changes,
                        Err(error) => {
                            debug!(%error, "cannot watch the key; polling instead");
                            None
                        }
                    };
                }
                None => {}
            }
            // Until a look succeeds, the next one waits the whole period.
            self.wait = Some(self.every);
            let seen = self.backend.inspect(&self.key).await?;
            if let Some(info) = &seen {
                // Look again as the lease runs out, to see its expiry; no sooner than
                // SOONEST, for a server that shows a lease at its end a while longer
                // (a TTL kept in whole seconds).
                let ends = info.remaining.saturating_add(Duration::from_millis(5));
                self.wait = Some(self.every.min(ends.max(SOONEST)));
            }
            let identity = seen
                .as_ref()
                .map(|info| (info.fence, info.holder.clone(), info.granted_at));
            if self.last.as_ref() != Some(&identity) {
                self.last = Some(identity);
                return Ok(seen.map_or(KeyState::Free, KeyState::Held));
            }
        }
    }
}
