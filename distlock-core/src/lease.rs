//! What an acquisition asks for and what the backend answers.

use std::fmt;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::holder::Holder;
use crate::key::LockKey;
use crate::token::{FencingToken, OwnerToken};

/// What a backend's [`try_grant`](crate::LockBackend::try_grant) receives: a key, a
/// TTL the backend's [`Capabilities`](crate::backend::Capabilities) accept, the owner token
/// of this acquisition, and, for a fair step, the waiter's place
/// ([`place`](Self::place)).
///
/// Only distlock's core builds one, after checking the TTL against the backend's
/// capabilities, so a backend never sees a TTL it would have to refuse or round. The
/// caller mints the owner token, so that a caller who gives up on a request whose
/// reply never came can still release what the request may have taken.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    key: LockKey,
    ttl: Duration,
    owner: OwnerToken,
    place: Option<Duration>,
    holder: Holder,
    fenced: bool,
}

impl AcquireRequest {
    /// Built by [`LockBackendExt`](crate::backend::LockBackendExt) only, once `ttl` is checked.
    pub(crate) fn new(key: LockKey, ttl: Duration, owner: OwnerToken, holder: Holder) -> Self {
        AcquireRequest {
            key,
            ttl,
            owner,
            place: None,
            holder,
            fenced: true,
        }
    }

    /// This request as an efficiency lock's: one the backend may grant without a
    /// fence.
    pub(crate) fn unfenced(mut self) -> Self {
        self.fenced = false;
        self
    }

    /// This request as a fair step, keeping the owner's place for `place`.
    pub(crate) fn in_turn(mut self, place: Duration) -> Self {
        self.place = Some(place);
        self
    }

    /// The lock to take.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// How long the lease lasts unless extended, by the server's clock.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The secret of this acquisition; fresh for every acquisition.
    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// Who asks: a backend that keeps holders
    /// ([`Capabilities::holder_records`](crate::backend::Capabilities::holder_records))
    /// stores it with the grant, as [`Holder::encoded`] or in its parts.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// For a fair step (contract point 10), how long the owner's place in the key's
    /// queue lasts past this step: one the capabilities accept as a TTL. `None` for a
    /// plain grant, which ignores the queue. Core sends `Some` only to a backend whose
    /// [`fair`](crate::LockBackend::fair) answers.
    pub fn place(&self) -> Option<Duration> {
        self.place
    }

    /// Whether the grant must carry a fence: `true` unless an efficiency lock asks
    /// ([`LockOptions::with_fenced`](crate::LockOptions::with_fenced) off). A backend
    /// whose [`Capabilities::unfenced_grants`](crate::backend::Capabilities::unfenced_grants)
    /// is set may grant a plain request (no [`place`](Self::place)) that is not fenced
    /// with a cheaper step and answer [`FencingToken::NONE`]; any backend may ignore
    /// this and mint a fence as always.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// This request with `fenced` as [`fenced`](Self::fenced), for a backend that wraps
    /// another and changes what it forwards (the conformance suite's run of an
    /// efficiency lock, say).
    pub fn with_fenced(&self, fenced: bool) -> AcquireRequest {
        AcquireRequest {
            fenced,
            ..self.clone()
        }
    }

    /// This request with another place: `None` makes a fair step a plain grant. For a
    /// backend that wraps another and changes what it forwards (a test's deliberately
    /// broken backend, say); core itself never sends a place the backend's
    /// capabilities would refuse as a TTL, and a wrapper that sets one answers for it.
    pub fn with_place(&self, place: Option<Duration>) -> AcquireRequest {
        AcquireRequest {
            place,
            ..self.clone()
        }
    }
}

/// What a backend's [`renew`](crate::LockBackend::renew) receives: a held lease and a
/// TTL the backend's capabilities accept (for a backend that renews only to the granted
/// TTL, that TTL). Only distlock's core builds one.
#[derive(Debug, Clone)]
pub struct ExtendRequest {
    lease: Lease,
    ttl: Duration,
}

impl ExtendRequest {
    pub(crate) fn new(lease: Lease, ttl: Duration) -> Self {
        ExtendRequest { lease, ttl }
    }

    /// The lock.
    pub fn key(&self) -> &LockKey {
        self.lease.key()
    }

    /// The owner token of the lease to renew.
    pub fn owner(&self) -> &OwnerToken {
        self.lease.owner()
    }

    /// The lease's fencing token, which the renewal keeps.
    pub fn fence(&self) -> FencingToken {
        self.lease.fence()
    }

    /// The new TTL, from now, by the server's clock.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

/// A granted lease: the right to act as the lock's holder until [`Lease::valid_until`].
///
/// Only distlock's core builds leases, so that every lease's validity is counted the
/// same way: from the instant *before* the request was sent, plus the TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    key: LockKey,
    owner: OwnerToken,
    fence: FencingToken,
    ttl: Duration,
    valid_until: Instant,
}

impl Lease {
    /// A lease on `key` held by `owner` with fencing token `fence`, granted for `ttl`
    /// by a request sent at `sent_at` (this process's monotonic clock), less the
    /// backend's clock-drift allowance `drift`.
    pub(crate) fn new(
        key: LockKey,
        owner: OwnerToken,
        fence: FencingToken,
        ttl: Duration,
        sent_at: Instant,
        drift: Duration,
    ) -> Self {
        Lease {
            key,
            owner,
            fence,
            ttl,
            valid_until: sent_at + ttl.saturating_sub(drift),
        }
    }

    /// The same lease, renewed for `ttl` by a request sent at `sent_at`, less `drift`.
    pub(crate) fn renewed(&self, ttl: Duration, sent_at: Instant, drift: Duration) -> Self {
        Lease {
            ttl,
            valid_until: sent_at + ttl.saturating_sub(drift),
            ..self.clone()
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

    /// The fencing token of this acquisition: [`FencingToken::NONE`] for an efficiency
    /// lock's grant that carries none ([`is_fenced`](Self::is_fenced)).
    pub fn fence(&self) -> FencingToken {
        self.fence
    }

    /// Whether this lease carries a fence: every fenced lock's does; an efficiency
    /// lock's only where its backend's fence costs nothing extra
    /// ([`Capabilities::unfenced_grants`](crate::backend::Capabilities::unfenced_grants)
    /// unset).
    pub fn is_fenced(&self) -> bool {
        !self.fence.is_none()
    }

    /// The TTL it was granted (or last extended) with.
    pub fn ttl(&self) -> Duration {
        self.ttl
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

/// A backend's answer to one acquisition step
/// ([`LockBackend::try_grant`](crate::LockBackend::try_grant)): what the server did,
/// nothing more. Core turns it into an [`AcquireOutcome`] with a [`Lease`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grant {
    /// The key was free (or its lease had expired, or this same owner already held it)
    /// and is now held by the request's owner for the request's TTL, with this fence:
    /// [`FencingToken::NONE`] only for a request that is not
    /// [`fenced`](AcquireRequest::fenced).
    Granted(FencingToken),
    /// Another lease holds the key.
    Held {
        /// The holder's remaining TTL by the server's clock, when the backend knows it.
        remaining: Option<Duration>,
    },
}

/// A backend's answer to one set acquisition step
/// ([`SetBackend::try_grant_all`](crate::backend::SetBackend::try_grant_all)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetGrant {
    /// Every request was granted: each key is held by its request's owner for its
    /// request's TTL, with these fences, in the requests' order.
    Granted(Vec<FencingToken>),
    /// Another lease holds the key of the request at `index` (the first such found);
    /// no request was granted.
    Held {
        /// The position, in the requests, of the key found held.
        index: usize,
        /// That holder's remaining TTL by the server's clock, when the backend knows it.
        remaining: Option<Duration>,
    },
}

/// What [`LockBackendExt::try_acquire_all`](crate::backend::LockBackendExt::try_acquire_all)
/// gives: every lease, or the first key found held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// Every key is held, one lease per key, in the keys' order.
    Acquired(Vec<Lease>),
    /// The key at `index` was held by another lease; none was acquired.
    Held {
        /// The position, in the keys, of the key found held.
        index: usize,
        /// That holder's remaining TTL, when the backend knows it.
        remaining: Option<Duration>,
    },
}

/// A backend's answer to one renewal step
/// ([`LockBackend::renew`](crate::LockBackend::renew)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renewal {
    /// The owner still held the key; its expiry is now the request's TTL from when the
    /// server applied it, and its fence is unchanged.
    Renewed,
    /// The owner no longer holds the key; nothing was changed.
    NotHeld,
}

/// The answer to [`LockBackendExt::try_acquire`](crate::backend::LockBackendExt::try_acquire).
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

/// The answer to [`LockBackendExt::extend`](crate::backend::LockBackendExt::extend).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtendOutcome {
    /// The lease was still held and now lasts the new TTL from before the request.
    Extended(Lease),
    /// This owner no longer holds the key; nothing was changed.
    NotHeld,
}

/// What [`LockBackend::inspect`](crate::LockBackend::inspect) shows of a held key:
/// never the owner token.
///
/// Built with [`LockInfo::new`] and, where the backend keeps holders
/// ([`Capabilities::holder_records`](crate::backend::Capabilities::holder_records)),
/// [`LockInfo::held_by`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The current holder's fencing token: [`FencingToken::NONE`] for an efficiency
    /// lock's grant made without one.
    pub fence: FencingToken,
    /// The holder's remaining TTL by the server's clock.
    pub remaining: Duration,
    /// Who holds it, as stored with the lease; `None` where the backend keeps no
    /// holders, or the lease was granted before it did.
    pub holder: Option<Holder>,
    /// When the lease was granted (a renewal keeps it), by the clock
    /// [`Capabilities::holder_records`](crate::backend::Capabilities::holder_records)
    /// names (by the client's for a grant without a fence); `None` where `holder` is.
    pub granted_at: Option<SystemTime>,
}

impl LockInfo {
    /// A held key's fence and remaining TTL, with no holder.
    pub fn new(fence: FencingToken, remaining: Duration) -> Self {
        LockInfo {
            fence,
            remaining,
            holder: None,
            granted_at: None,
        }
    }

    /// The same, held by `holder` since `granted_at`.
    pub fn held_by(mut self, holder: Option<Holder>, granted_at: Option<SystemTime>) -> Self {
        self.holder = holder;
        self.granted_at = granted_at;
        self
    }
}

/// Why a guard lost its lock: the lease ended under its holder, not by the holder's
/// release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The server answered that this owner no longer holds the key: the lease was
    /// deleted behind the holder's back, or expired and was taken by someone else.
    NotHeld,
    /// Renewals did not get through, and the validity (less the loss margin) ran out.
    RenewalFailed,
    /// Auto-renewal was off, and the validity (less the loss margin) ran out.
    Expired,
    /// The hold reached its limit ([`LockOptions::with_hold_at_most`](crate::LockOptions::with_hold_at_most)):
    /// renewal stopped, and the lease was given back, while the work may still run.
    HoldLimit,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::NotHeld => "the server no longer holds the lease for this owner",
            LossReason::RenewalFailed => "renewal failed until the validity ran out",
            LossReason::Expired => "the lease expired without renewal",
            LossReason::HoldLimit => "the hold reached its limit",
        })
    }
}
