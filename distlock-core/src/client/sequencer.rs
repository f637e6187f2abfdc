//! The sequencer check: whether a grant's fence is still the live holder's, asked by a
//! resource that receives a request carrying one and cannot keep a fence itself.

use tokio::time::Instant;

use crate::backend::LockInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::token::FencingToken;

use super::lock_client::LockClient;

impl LockClient {
    /// Whether `fence` is the fence of `key`'s live holder: Chubby's sequencer check,
    /// for a resource that receives a request carrying a holder's key and fence (its
    /// sequencer) and cannot keep the highest fence it has seen, as a
    /// [`FencedStore`](crate::FencedStore) does.
    ///
    /// The holder as [`inspect`](Self::inspect) shows it when `fence` is its fence, its
    /// remaining TTL counted from before the request; otherwise an
    /// [`ErrorKind::StaleFence`] error (not retryable: the same fence stays stale),
    /// whether another lease holds the key, or it is free, or the answer arrived after
    /// the lease it showed had run out by that count. One request, on
    /// every backend; an [`ErrorKind::InvalidKey`] error for a key that is not one, and
    /// an [`ErrorKind::InvalidInput`] error for [`FencingToken::NONE`] (an efficiency
    /// lock's lease has no fence to check), each with nothing sent.
    ///
    /// The answer is the server's as of its read: the lease may end at any time after,
    /// by its [`remaining`](LockInfo::remaining) TTL or by a release. A resource that
    /// checks, then acts, acts on what was true when it checked, so the check narrows
    /// the window in which a stale holder's request is served to the time between the
    /// two; a store that compares fences in the same step as its write
    /// ([`FencedStore`](crate::FencedStore)) closes it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{ErrorKind, LockClient, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(Arc::new(MemoryBackend::new()));
    /// let guard = client.lock("ledger", Duration::from_secs(5)).await?;
    /// let fence = guard.fence();
    /// // The resource, given ("ledger", fence) with a request:
    /// assert_eq!(client.check("ledger", fence).await?.fence, fence);
    /// guard.release().await?;
    /// let stale = client.check("ledger", fence).await.unwrap_err();
    /// assert_eq!(stale.kind(), ErrorKind::StaleFence);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(&self, key: &str, fence: FencingToken) -> Result<LockInfo> {
        let key = LockKey::new(key)?;
        if fence.is_none() {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "a sequencer check on {key} needs a fence: an efficiency lock's lease has none"
                ),
            )
            .with_not_sent());
        }
        let asked = Instant::now();
        match self.backend().inspect(&key).await? {
            Some(mut info) if info.fence == fence => {
                // The lease's end by the server's remaining TTL, counted from before
                // the request: an answer that arrives later shows a lease that may
                // have been granted to another holder since.
                let now = Instant::now();
                // A remaining TTL past any clock's range ends nowhere near now.
                let Some(ends) = asked.checked_add(info.remaining) else {
                    return Ok(info);
                };
                if ends <= now {
                    return Err(Error::new(
                        ErrorKind::StaleFence,
                        format!(
                            "fence {fence} of {key} was live when the server read it, but its \
                             lease ran out before the answer arrived ({:?} after it was asked)",
                            now - asked
                        ),
                    )
                    .with_backend(self.backend().name().to_owned()));
                }
                info.remaining = ends - now;
                Ok(info)
            }
            held => {
                let now = match held {
                    Some(info) if info.fence.is_none() => {
                        "it is held by a lease without a fence".to_owned()
                    }
                    Some(info) => format!("it is held under fence {}", info.fence),
                    None => "it is free".to_owned(),
                };
                Err(Error::new(
                    ErrorKind::StaleFence,
                    format!("fence {fence} is not the live holder's of {key}: {now}"),
                )
                .with_backend(self.backend().name().to_owned()))
            }
        }
    }
}
