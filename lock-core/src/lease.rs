//! What an acquisition asks for and what the backend answers.

use std::time::Duration;

use tokio::time::Instant;

use crate::key::LockKey;
use crate::token::{FencingToken, OwnerToken};

/// A request to acquire `key` for `ttl`, as the owner `owner`.
///
/// The caller mints the owner token, so that a caller who gives up on a request
/// whose reply never came can still release what the request may have taken.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lock to take.
    pub key: LockKey,
    /// How long the lease lasts unless extended, by the server's clock.
    pub ttl: Duration,
    /// The secret of this acquisition; fresh for every request.
    pub owner: OwnerToken,
}

impl AcquireRequest {
    /// A request with a fresh random owner token.
    pub fn new(key: LockKey, ttl: Duration) -> Self {
        AcquireRequest {
            key,
            ttl,
            owner: OwnerToken::random(),
        }
    }
}

/// A granted lease: the right to act as the lock's holder until [`Lease::valid_until`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    key: LockKey,
    owner: OwnerToken,
    fence: FencingToken,
    valid_until: Instant,
}

impl Lease {
    /// A lease on `key` held by `owner` with fencing token `fence`, valid until
    /// `valid_until` on this process's monotonic clock.
    ///
    /// Backends compute `valid_until` as *the instant before the request was sent*
    /// plus the TTL the server applied, so that network delay is never counted as
    /// validity.
    pub fn new(key: LockKey, owner: OwnerToken, fence: FencingToken, valid_until: Instant) -> Self {
        Lease {
            key,
            owner,
            fence,
            valid_until,
        }
    }

    /// The lock this lease is on.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The secret of this acquisition.
    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// The fencing token of this acquisition.
    pub fn fence(&self) -> FencingToken {
        self.fence
    }

    /// The instant (monotonic, local) after which the lease must be taken as expired.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The validity left now; zero once expired.
    pub fn remaining(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the validity has run out.
    pub fn is_expired(&self) -> bool {
        Instant::now() >= self.valid_until
    }
}

/// The answer to [`LockBackend::try_acquire`](crate::LockBackend::try_acquire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The lock was free (or its lease had expired) and is now held by the caller.
    Acquired(Lease),
    /// Another lease holds the key.
    Held {
        /// The holder's remaining TTL by the server's clock, when the backend knows
        /// it: a waiter need not sleep longer than this, since expiry may not be
        /// announced.
        remaining: Option<Duration>,
    },
}

/// The answer to [`LockBackend::release`](crate::LockBackend::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The lease was held by this owner and is now released.
    Released,
    /// This owner did not hold the key (expired, taken over, or already released);
    /// nothing was changed.
    NotHeld,
}

/// The answer to [`LockBackend::extend`](crate::LockBackend::extend).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtendOutcome {
    /// The lease was still held and now lasts the new TTL from before the request.
    Extended(Lease),
    /// This owner no longer holds the key; nothing was changed.
    NotHeld,
}

/// What [`LockBackend::inspect`](crate::LockBackend::inspect) shows of a held key:
/// never the owner token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockInfo {
    /// The current holder's fencing token.
    pub fence: FencingToken,
    /// The holder's remaining TTL by the server's clock.
    pub remaining: Duration,
}
