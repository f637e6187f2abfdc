//! [`PermitBackend`]: the server steps behind semaphores, read-write locks and
//! leader election, and the contract they keep.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::error::{Error, ErrorKind, Result};
use crate::holder::Holder;
use crate::key::LockKey;
use crate::lease::{AcquireRequest, ExtendRequest, Grant, ReleaseOutcome, Renewal};
use crate::token::{FencingToken, OwnerToken};
use crate::wake::ChangeStream;

/// The longest value a [`Claim`] may carry, in bytes.
pub const MAX_CLAIM_VALUE: usize = 1024;

/// How many terms (grants that carry a value) a backend keeps per name at least, for
/// [`PermitBackend::terms`].
pub const TERMS_KEPT: usize = 64;

/// What one grant takes of a name's permits: `count` of its `limit`, and, for an
/// election, the candidate's value that observers read.
///
/// ```
/// use distlock_core::backend::Claim;
///
/// let three_of_ten = Claim::new(3, 10)?;
/// assert_eq!((three_of_ten.count(), three_of_ten.limit()), (3, 10));
/// assert!(Claim::new(0, 10).is_err());
/// assert!(Claim::new(11, 10).is_err());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    count: u32,
    limit: u32,
    value: Option<String>,
}

impl Claim {
    /// `count` permits of a name that has `limit`; an [`ErrorKind::Configuration`]
    /// error unless `1 <= count <= limit`.
    pub fn new(count: u32, limit: u32) -> Result<Self> {
        if count == 0 || count > limit {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!("a claim takes from 1 to its limit of permits; asked {count} of {limit}"),
            ));
        }
        Ok(Claim {
            count,
            limit,
            value: None,
        })
    }

    /// A claim whose `1 <= count <= limit` the caller has made sure of.
    pub(crate) const fn checked_already(count: u32, limit: u32) -> Self {
        Claim {
            count,
            limit,
            value: None,
        }
    }

    /// The same claim carrying `value` (an election's candidate, such as its address):
    /// a [`ErrorKind::Configuration`] error when it is longer than
    /// [`MAX_CLAIM_VALUE`] bytes or holds a NUL character.
    pub fn with_value(mut self, value: impl Into<String>) -> Result<Self> {
        let value = value.into();
        if value.len() > MAX_CLAIM_VALUE || value.contains('\0') {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "a claim's value is at most {MAX_CLAIM_VALUE} bytes without NUL characters ({} bytes given)",
                    value.len()
                ),
            ));
        }
        self.value = Some(value);
        Ok(self)
    }

    /// The error a backend answers when the live grants on `name` have another limit
    /// (`held`) than this claim (point 2 of [`PermitBackend`]'s contract): a
    /// non-retryable [`ErrorKind::Configuration`] error naming both.
    pub fn limit_conflict(&self, name: &LockKey, held: u64, backend: &str) -> Error {
        Error::new(
            ErrorKind::Configuration,
            format!(
                "{name:?} has a limit of {held} permits; this claim gives {}",
                self.limit
            ),
        )
        .with_backend(backend.to_owned())
    }

    /// How many permits a grant takes.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// How many permits the name has.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The value observers read, if any.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }
}

/// A live grant on a name, as [`PermitBackend::holders`] shows it: never the owner.
///
/// Built with [`PermitHolder::new`] and, where the backend keeps holders,
/// [`PermitHolder::held_by`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitHolder {
    /// Its fencing token.
    pub fence: FencingToken,
    /// How many permits it holds.
    pub count: u32,
    /// Its remaining TTL by the server's clock.
    pub remaining: Duration,
    /// The value its claim carried.
    pub value: Option<String>,
    /// Who holds it, as stored with the grant (see [`LockInfo::holder`](crate::LockInfo::holder)).
    pub holder: Option<Holder>,
    /// When it was granted (see [`LockInfo::granted_at`](crate::LockInfo::granted_at)).
    pub granted_at: Option<SystemTime>,
}

impl PermitHolder {
    /// A live grant of `count` permits with `fence`, `remaining` and its claim's
    /// `value`, with no holder.
    pub fn new(
        fence: FencingToken,
        count: u32,
        remaining: Duration,
        value: Option<String>,
    ) -> Self {
        PermitHolder {
            fence,
            count,
            remaining,
            value,
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

/// A grant that carried a value (an election's leader), as the name's record of terms
/// keeps it.
///
/// Built with [`Term::new`] and, where the backend keeps holders, [`Term::held_by`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Term {
    /// The grant's fencing token.
    pub fence: FencingToken,
    /// The fence of the term recorded before it on the same name; zero for the first.
    pub previous: u64,
    /// The value its claim carried.
    pub value: String,
    /// Who held it, as stored with the grant (see [`LockInfo::holder`](crate::LockInfo::holder)).
    pub holder: Option<Holder>,
    /// When it was granted (see [`LockInfo::granted_at`](crate::LockInfo::granted_at)).
    pub granted_at: Option<SystemTime>,
}

impl Term {
    /// The term granted with `fence`, after the term `previous`, carrying `value`,
    /// with no holder.
    pub fn new(fence: FencingToken, previous: u64, value: String) -> Self {
        Term {
            fence,
            previous,
            value,
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

/// The server steps of the shared kinds: semaphores
/// ([`Semaphore`](crate::Semaphore)), read-write locks ([`RwLock`](crate::RwLock)) and
/// leader election ([`Election`](crate::Election)). A backend that has them returns itself
/// from [`LockBackend::permits`](crate::LockBackend::permits).
///
/// Permits live in a namespace of their own: a name used for permits and the same
/// name used as a [`LockBackend`](crate::LockBackend) key are two different things.
///
/// # Contract
///
/// Points 2 (server time), 3 (owner tokens), 4 (release), 5 (extend), 7 (validity) and
/// 8 (errors) of [`LockBackend`](crate::LockBackend)'s contract hold for every grant of permits as for a
/// lease, each grant being one owner's lease on the name. Besides:
///
/// 1. **Limit.** At any instant, the live grants on a name hold at most its limit of
///    permits in all: a grant of a [`Claim`] of `count` is made only when the
///    unexpired grants hold at most `limit - count`.
/// 2. **One limit per name.** A claim whose limit differs from the limit of the live
///    grants on its name is refused with an [`ErrorKind::Configuration`] error. Once
///    no grant lives, the next claim sets the limit.
/// 3. **Fencing.** Every grant on a name gets a fencing token above every earlier
///    grant's on that name, as in [`LockBackend`](crate::LockBackend)'s point 6; what a data-losing
///    restart does to it is declared in [`Capabilities::fence_durability`](crate::backend::Capabilities::fence_durability).
/// 4. **Places.** A claim made with a `place` that is not granted keeps the owner's
///    place for `place` from now (rounded up as a TTL is), renewed by each call with
///    the same owner, and taken away by the grant or by
///    [`leave_queue`](Self::leave_queue). **While another owner keeps a place for a
///    claim of a larger count, a claim is not granted**, so that a stream of small
///    claims never starves a large one: a read-write lock's waiting writer holds back
///    new readers. Claims of equal counts race.
/// 5. **Terms.** A grant whose claim carries a value is recorded as a [`Term`], with
///    the fence of the term recorded before it on the name, and the last
///    [`TERMS_KEPT`] terms of a name are kept at least as long as a grant of the name
///    lives, or a place is kept.
/// 6. **Proclaim**, where the backend has it ([`proclaim`](PermitBackend::proclaim)
///    does not answer [`ErrorKind::Unsupported`]). In one step, only while `owner`'s
///    grant on the name is live: its value becomes the new one, and so does its
///    term's, and the name's watchers are told; its fence, expiry, holder and grant
///    time stay. Otherwise [`Renewal::NotHeld`], with nothing changed: a leader whose
///    term ended cannot change what its successor's observers read.
#[async_trait]
pub trait PermitBackend: Send + Sync + fmt::Debug {
    /// The grant step: in one atomic step on the server, drops the grants and places
    /// of `request.key()` that ran out, and grants `claim` to `request.owner()` for
    /// `request.ttl()` if points 1, 2 and 4 allow, minting the next fence; otherwise
    /// [`Grant::Held`], with the time until the first live grant runs out, and the
    /// owner's place kept when the request carries a
    /// [`place`](AcquireRequest::place) (point 4). An owner that already holds a grant
    /// on the name is granted again, its expiry restarted and its fence kept.
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant>;

    /// Releases `owner`'s grant on `key`; as [`LockBackend::release`](crate::LockBackend::release).
    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome>;

    /// Renews `request.owner()`'s grant on `request.key()`; as [`LockBackend::renew`](crate::LockBackend::renew).
    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal>;

    /// Takes `owner`'s place on `key` away; harmless when it has none.
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()>;

    /// Sets the value of `owner`'s live grant on `key`, and of its term, to `value`
    /// (point 6): [`Renewal::Renewed`], or [`Renewal::NotHeld`] with nothing changed.
    /// `value` is one a [`Claim`] accepts. By default an [`ErrorKind::Unsupported`]
    /// error: a backend without it still serves elections, whose leaders then keep the
    /// value they campaigned with.
    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        let _ = (key, owner, value);
        Err(Error::new(
            ErrorKind::Unsupported,
            "this backend cannot change a leader's value (PermitBackend::proclaim)",
        ))
    }

    /// The live grants on `key`, oldest fence first.
    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>>;

    /// The kept terms of `key` whose fence is above `after`, oldest first (point 5).
    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>>;

    /// Starts watching `key` for releases and grants, when the backend can
    /// ([`Capabilities::change_notification`](crate::backend::Capabilities::change_notification)); as [`LockBackend::watch`](crate::LockBackend::watch).
    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let _ = key;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_refuse_bad_counts_and_values() {
        assert!(Claim::new(1, 1).is_ok());
        assert!(Claim::new(u32::MAX, u32::MAX).is_ok());
        for (count, limit) in [(0, 1), (2, 1), (0, 0)] {
            assert_eq!(
                Claim::new(count, limit).map_err(|e| e.kind()),
                Err(ErrorKind::Configuration)
            );
        }
        let one = Claim::new(1, 1).expect("one of one is a claim");
        assert!(one.clone().with_value("10.0.0.1:80").is_ok());
        for bad in ["a\0b".to_owned(), "x".repeat(MAX_CLAIM_VALUE + 1)] {
            assert_eq!(
                one.clone().with_value(bad).map_err(|e| e.kind()),
                Err(ErrorKind::Configuration)
            );
        }
    }
}
