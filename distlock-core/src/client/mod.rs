//! [`LockClient`]: waiting with a deadline, guards, auto-renewal and the loss signal,
//! on top of any [`LockBackend`](crate::LockBackend).

pub(crate) mod attempt;
pub(crate) mod background;
mod backoff;
pub(crate) mod breaker;
mod busy;
mod cleanup;
pub(crate) mod deferred;
#[cfg(test)]
mod forwarding;
pub(crate) mod guard;
pub(crate) mod local;
mod lock_client;
mod locked;
#[cfg(feature = "metrics")]
mod metered;
mod observe;
mod operator;
mod options;
pub(crate) mod reentrant;
mod sequencer;
pub(crate) mod telemetry;

pub use self::breaker::BreakerState;
pub use self::busy::{Busy, BusyReason};
pub use self::guard::LockGuard;
pub(crate) use self::lock_client::{deadline_after, within_deadline};
pub use self::lock_client::{Health, LockClient};
pub use self::locked::{LeaseEnd, Locked};
pub use self::observe::{KeyState, KeyStates};
pub use self::options::{BreakerOptions, LockOptions};
pub use crate::lease::LossReason;
