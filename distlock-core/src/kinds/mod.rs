//! The lock kinds built on [`LockClient`](crate::LockClient): sets of keys under one
//! lock, semaphores, read-write locks, elections and the leader loop. Each is a
//! client of the client: it reaches the wing below through [`LockClient`] and its
//! guards, and the permit-based kinds share one adapter (`claim`) that presents a
//! claim on a name's permits as a lock backend, so that the client's waits,
//! renewal, guards and loss signal serve them unchanged. Imports run one way, from
//! here to `client`; nothing in `client` names a kind.

mod claim;
mod election;
mod leader;
mod rwlock;
mod semaphore;
mod sets;

pub use self::election::{
    Election, Leader, Leadership, Observation, Observations, ResumeToken, LEASE_ELECTION_PREFIX,
};
pub use self::leader::{LeaderHealth, LeaderLoop, TermEnd, TermOutcome};
pub use self::rwlock::RwLock;
pub use self::semaphore::Semaphore;
pub use self::sets::{Fences, MultiGuard};
