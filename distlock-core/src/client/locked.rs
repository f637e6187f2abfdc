//! [`Locked`]: what work run under a lock returned, and what became of the lease; and
//! how a guard's hold ends.

use crate::lease::LossReason;

/// What [`LockClient::with_lock`](crate::LockClient::with_lock) (and its kin) returns
/// once the work under the lock has run to its end: the work's output, and what became
/// of the lease after it.
///
/// Finished work is never turned into an error: a release that finds the lease gone
/// comes back as [`LeaseEnd::Lost`] beside the output, for the caller to judge (work
/// that wrote through a [fenced store](crate::FencedStore) had each write checked
/// there; other work may have overlapped the next holder's at its end). Work cut short
/// by a loss while it ran is an [`ErrorKind::LockLost`](crate::ErrorKind::LockLost)
/// error, not a `Locked`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "the lease may have been lost under the work: look at `lease()`, or take the output with `into_output()`"]
pub struct Locked<T> {
    output: T,
    lease: LeaseEnd,
}

/// What became of a lease once the work under it had finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEnd {
    /// The lease was held until the work finished, then released: no other holder
    /// was granted the lock while the work ran.
    Released,
    /// No loss was told while the work ran, but the release found the lease gone, for
    /// this reason: it ran out or was taken in the meantime, so another holder may
    /// have been granted the lock before the work finished.
    Lost(LossReason),
    /// The lease was held as far as the client knew when the work finished, but the
    /// release did not get through (its error is logged at warn): the lease runs out
    /// at its TTL.
    ReleaseFailed,
}

impl<T> Locked<T> {
    pub(crate) fn new(output: T, lease: LeaseEnd) -> Self {
        Locked { output, lease }
    }

    /// The work's output.
    pub fn output(&self) -> &T {
        &self.output
    }

    /// The work's output, the lease's end left unread.
    pub fn into_output(self) -> T {
        self.output
    }

    /// What became of the lease.
    pub fn lease(&self) -> LeaseEnd {
        self.lease
    }

    /// The output and what became of the lease.
    pub fn into_parts(self) -> (T, LeaseEnd) {
        (self.output, self.lease)
    }

    /// Whether the lease was held until the work finished and then released
    /// ([`LeaseEnd::Released`]).
    pub fn held_throughout(&self) -> bool {
        self.lease == LeaseEnd::Released
    }
}

impl<T, E> Locked<Result<T, E>> {
    /// The work's `Result` turned inside out: `Err` with the work's error, or the
    /// output beside the lease's end.
    pub fn transpose(self) -> Result<Locked<T>, E> {
        let Locked { output, lease } = self;
        output.map(|output| Locked { output, lease })
    }
}

/// How a lease's hold ended: released by its holder, or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The last hold was released or dropped while the lease was held.
    Released,
    /// The lease was lost, for this reason.
    Lost(LossReason),
}

impl End {
    /// The loss, if it was one.
    pub(crate) fn loss(self) -> Option<LossReason> {
        match self {
            End::Released => None,
            End::Lost(reason) => Some(reason),
        }
    }
}
