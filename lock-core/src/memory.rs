//! [`MemoryBackend`]: the in-process reference implementation of the contract.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{ChangeStream, LockBackend};
use crate::capabilities::{Capabilities, FenceDurability};
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::lease::{
    AcquireOutcome, AcquireRequest, ExtendOutcome, Lease, LockInfo, ReleaseOutcome,
};
use crate::token::{FencingToken, OwnerToken};

const NAME: &str = "memory";

/// An in-process lock store that keeps the whole contract.
///
/// It is the embedded default (a single process coordinating its own tasks), the
/// backend the client's own tests use, and the reference the conformance suite is
/// checked against. Clones share one store.
///
/// "The server's clock" is this process's monotonic clock (tokio's, so paused-time
/// tests work). Fencing tokens come from one counter for all keys, so they increase
/// per key and are never reused; the counter lives as long as the store.
///
/// For tests it can simulate the faults of a real server: [`pause`](Self::pause)
/// (requests hang, time goes on), [`stop`](Self::stop) (requests fail as unavailable;
/// leases are lost) and [`restart`](Self::restart) (leases are lost, the fencing
/// counter is kept, as a durable server would keep it).
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    server: watch::Sender<ServerState>,
    capabilities: Capabilities,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<LockKey, Holder>,
    last_fence: u64,
    watchers: HashMap<LockKey, watch::Sender<()>>,
}

#[derive(Debug)]
struct Holder {
    owner: OwnerToken,
    fence: FencingToken,
    expires_at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    Up,
    Paused,
    Down,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    pub fn new() -> Self {
        let capabilities = Capabilities {
            fence_durability: FenceDurability::Durable,
            leases_survive_restart: false,
            change_notification: true,
            force_release: true,
            ..Capabilities::default()
        };
        MemoryBackend {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                server: watch::Sender::new(ServerState::Up),
                capabilities,
            }),
        }
    }

    /// Simulates a frozen server: requests wait until [`resume`](Self::resume); leases
    /// keep expiring meanwhile.
    pub fn pause(&self) {
        self.shared.server.send_replace(ServerState::Paused);
    }

    /// Ends a [`pause`](Self::pause).
    pub fn resume(&self) {
        self.shared.server.send_replace(ServerState::Up);
    }

    /// Simulates a killed server: requests fail with [`ErrorKind::Unavailable`] until
    /// [`start`](Self::start), and every lease is lost.
    pub fn stop(&self) {
        self.shared.server.send_replace(ServerState::Down);
        self.clear_leases();
    }

    /// Brings a [`stop`](Self::stop)ped server back.
    pub fn start(&self) {
        self.shared.server.send_replace(ServerState::Up);
    }

    /// Simulates a restart that loses every lease but keeps the fencing counter.
    pub fn restart(&self) {
        self.stop();
        self.start();
    }

    fn clear_leases(&self) {
        let mut state = self.lock_state();
        let keys: Vec<LockKey> = state.locks.drain().map(|(k, _)| k).collect();
        for key in keys {
            state.notify(&key);
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // The state is only touched in short sections that cannot panic halfway, so a
        // poisoned mutex still holds consistent data.
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits while the simulated server is paused; fails while it is down.
    async fn reachable(&self) -> Result<()> {
        let mut rx = self.shared.server.subscribe();
        loop {
            let now = *rx.borrow_and_update();
            match now {
                ServerState::Up => return Ok(()),
                ServerState::Down => {
                    return Err(Error::new(ErrorKind::Unavailable, "the server is stopped")
                        .with_backend(NAME))
                }
                ServerState::Paused => {
                    if rx.changed().await.is_err() {
                        return Err(Error::new(ErrorKind::Unavailable, "the server is gone")
                            .with_backend(NAME));
                    }
                }
            }
        }
    }
}

impl State {
    /// The live holder of `key`, dropping an expired one.
    fn live(&mut self, key: &LockKey, now: Instant) -> Option<&mut Holder> {
        if self.locks.get(key).is_some_and(|h| h.expires_at <= now) {
            self.locks.remove(key);
        }
        self.locks.get_mut(key)
    }

    fn notify(&mut self, key: &LockKey) {
        if let Some(tx) = self.watchers.get(key) {
            if tx.receiver_count() == 0 {
                self.watchers.remove(key);
            } else {
                tx.send_replace(());
            }
        }
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.shared.capabilities
    }

    async fn try_acquire(&self, request: &AcquireRequest) -> Result<AcquireOutcome> {
        let ttl = self.shared.capabilities.check_ttl(request.ttl)?;
        let sent_at = Instant::now();
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        if let Some(holder) = state.live(&request.key, now) {
            if holder.owner == request.owner {
                // A retry of a request whose reply was lost: the grant is already ours.
                let lease = Lease::new(
                    request.key.clone(),
                    request.owner,
                    holder.fence,
                    sent_at + ttl,
                );
                holder.expires_at = now + ttl;
                return Ok(AcquireOutcome::Acquired(lease));
            }
            return Ok(AcquireOutcome::Held {
                remaining: Some(holder.expires_at.saturating_duration_since(now)),
            });
        }
        state.last_fence += 1;
        let fence = FencingToken::new(state.last_fence);
        state.locks.insert(
            request.key.clone(),
            Holder {
                owner: request.owner,
                fence,
                expires_at: now + ttl,
            },
        );
        Ok(AcquireOutcome::Acquired(Lease::new(
            request.key.clone(),
            request.owner,
            fence,
            sent_at + ttl,
        )))
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        match state.live(key, now) {
            Some(holder) if holder.owner == *owner => {
                state.locks.remove(key);
                state.notify(key);
                Ok(ReleaseOutcome::Released)
            }
            _ => Ok(ReleaseOutcome::NotHeld),
        }
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<ExtendOutcome> {
        let ttl = self.shared.capabilities.check_ttl(ttl)?;
        let sent_at = Instant::now();
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        match state.live(lease.key(), now) {
            Some(holder) if holder.owner == *lease.owner() => {
                holder.expires_at = now + ttl;
                Ok(ExtendOutcome::Extended(Lease::new(
                    lease.key().clone(),
                    holder.owner,
                    holder.fence,
                    sent_at + ttl,
                )))
            }
            _ => Ok(ExtendOutcome::NotHeld),
        }
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        Ok(state.live(key, now).map(|h| LockInfo {
            fence: h.fence,
            remaining: h.expires_at.saturating_duration_since(now),
        }))
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.reachable().await?;
        let mut rx = {
            let mut state = self.lock_state();
            state
                .watchers
                .entry(key.clone())
                .or_insert_with(|| watch::Sender::new(()))
                .subscribe()
        };
        rx.mark_unchanged();
        let changes = stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        });
        Ok(Some(Box::pin(changes)))
    }

    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        self.reachable().await?;
        let now = Instant::now();
        let mut state = self.lock_state();
        let removed = state.live(key, now).is_some();
        if removed {
            state.locks.remove(key);
            state.notify(key);
        }
        Ok(removed)
    }
}
