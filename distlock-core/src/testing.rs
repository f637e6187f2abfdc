//! Hooks for replaying a run of the client bit for bit, as a deterministic simulation
//! does (the `distlock-sim` crate). Nothing here belongs in a service.
//!
//! A run of the client is a function of its inputs but for two things: the random
//! bytes of owner tokens and jitter, which come from the operating system, and the
//! order in which the runtime polls tasks and timers. The second is fixed by a
//! current-thread runtime on a paused clock whose own generator is seeded (tokio's
//! `Builder::rng_seed`, behind `--cfg tokio_unstable`); the first by
//! [`SeededRandomness`]. Where this crate iterates a map to wake waiters or to
//! answer, it does so in the keys' order.

use crate::support::random;

/// While it lives, owner tokens and jitter drawn **on this thread** come from a
/// generator seeded with the given seed, not from the operating system: the same seed
/// draws the same bytes. Dropping it returns the thread to the generator it had.
///
/// The seeded bytes are predictable. Two processes seeded alike draw the same owner
/// tokens, and an owner token is what tells one holder from another: a service that
/// seeds its threads can grant one lock to two holders. Only a simulation, where
/// every client shares one seeded thread, may use it.
///
/// ```
/// use distlock_core::testing::SeededRandomness;
///
/// let seeded = SeededRandomness::new(42);
/// // ... a simulated run on this thread ...
/// drop(seeded);
/// ```
#[derive(Debug)]
#[must_use = "the thread is seeded only while this lives"]
pub struct SeededRandomness {
    before: Option<u64>,
    /// Not `Send`: the seed belongs to the thread that set it.
    _thread: std::marker::PhantomData<*const ()>,
}

impl SeededRandomness {
    /// Seeds this thread's owner tokens and jitter with `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRandomness {
            before: random::set_seeded(Some(seed)),
            _thread: std::marker::PhantomData,
        }
    }
}

impl Drop for SeededRandomness {
    fn drop(&mut self) {
        random::set_seeded(self.before);
    }
}
