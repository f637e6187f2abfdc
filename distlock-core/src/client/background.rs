//! The work a client does in tasks of its own (a release on drop, the cleanup of an
//! abandoned attempt), counted so that [`LockClient::flush`](super::LockClient::flush)
//! can wait for it before a process ends.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// How much background work of one client (and its clones) is under way.
#[derive(Clone, Default)]
pub(crate) struct Background(Arc<Count>);

#[derive(Default)]
struct Count {
    running: AtomicUsize,
    idle: Notify,
}

impl Background {
    /// Counts one piece of work until the returned token is dropped.
    pub(crate) fn begin(&self) -> Working {
        self.0.running.fetch_add(1, Ordering::AcqRel);
        Working(self.clone())
    }

    /// Returns once no work counted here is under way.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.0.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.0.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl fmt::Debug for Background {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Background")
            .field("running", &self.0.running.load(Ordering::Relaxed))
            .finish()
    }
}

/// One piece of background work, counted until dropped (finished, or its task
/// cancelled).
pub(crate) struct Working(Background);

impl Drop for Working {
    fn drop(&mut self) {
        if self.0 .0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0 .0.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_every_piece_and_no_longer() {
        let background = Background::default();
        background.idle().await;
        let first = background.begin();
        let second = background.begin();
        let waiter = tokio::spawn({
            let background = background.clone();
            async move { background.idle().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(first);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "idle with one piece still running");
        drop(second);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("idle once the last piece ended")
            .expect("joined");
    }
}
