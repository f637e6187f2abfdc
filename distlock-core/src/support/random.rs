//! Random numbers from the operating system's generator, for owner tokens and jitter;
//! or, on a thread that asked for it ([`crate::testing::SeededRandomness`]), from a
//! seeded generator, so that a simulation replays a run bit for bit.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many bytes each thread draws from the operating system at a time: one system
/// call serves 32 owner tokens, where a call per token was a tenth of an uncontended
/// lock cycle's CPU on the in-memory backend.
const POOL: usize = 512;

/// Bytes drawn from the operating system and not yet handed out, per thread.
struct Pool {
    bytes: [u8; POOL],
    /// How many bytes from the start have been handed out (and zeroed).
    used: usize,
}

thread_local! {
    static POOLED: RefCell<Pool> = const { RefCell::new(Pool { bytes: [0; POOL], used: POOL }) };
    /// The state of this thread's seeded generator, while one is set.
    static SEEDED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Sets this thread's seeded generator (`Some`) or returns it to the operating
/// system's (`None`); answers the state it replaced.
pub(crate) fn set_seeded(state: Option<u64>) -> Option<u64> {
    SEEDED.with(|seeded| seeded.replace(state))
}

/// Fills `bytes` from this thread's seeded generator, if it has one (SplitMix64: not
/// cryptographically secure, and not meant to be).
fn fill_seeded(bytes: &mut [u8]) -> bool {
    SEEDED
        .try_with(|seeded| {
            let Some(mut state) = seeded.get() else {
                return false;
            };
            for chunk in bytes.chunks_mut(8) {
                state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^= z >> 31;
                chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
            }
            seeded.set(Some(state));
            true
        })
        .unwrap_or(false)
}

/// Fills `bytes` with bytes from the operating system's cryptographically secure
/// generator, drawn ahead in blocks of [`POOL`] per thread; each byte is handed out
/// once, and zeroed in the pool when it is. A process that forks without `exec`
/// shares its threads' pools with the child (tokio does not support that).
pub(crate) fn fill(bytes: &mut [u8]) {
    if fill_seeded(bytes) {
        return;
    }
    if bytes.len() > POOL / 4 {
        return fill_from_os(bytes);
    }
    let pooled = POOLED.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        if POOL - pool.used < bytes.len() {
            fill_from_os(&mut pool.bytes);
            pool.used = 0;
        }
        let (start, end) = (pool.used, pool.used + bytes.len());
        bytes.copy_from_slice(&pool.bytes[start..end]);
        pool.bytes[start..end].fill(0);
        pool.used = end;
    });
    if pooled.is_err() {
        // The thread is ending and its pool is gone.
        fill_from_os(bytes);
    }
}

/// Fills `bytes` from the operating system's cryptographically secure generator.
///
/// Should the operating system refuse (it does not on the platforms tokio runs on,
/// once booted), the bytes come from the standard library's randomly keyed SipHash
/// over a process-wide counter and the clock instead: unpredictable without the keys,
/// and distinct between calls but for a negligible chance of collision; nothing
/// panics.
fn fill_from_os(bytes: &mut [u8]) {
    if getrandom::fill(bytes).is_ok() {
        return;
    }
    static CALLS: AtomicU64 = AtomicU64::new(0);
    for chunk in bytes.chunks_mut(8) {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
        hasher.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        let word = hasher.finish().to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// A uniformly random number in `0..=max`.
pub(crate) fn up_to(max: u64) -> u64 {
    let mut bytes = [0u8; 8];
    fill(&mut bytes);
    let value = u64::from_le_bytes(bytes);
    match max.checked_add(1) {
        // The whole range of u64.
        None => value,
        // A modulo's bias is at most (max + 1) / 2^64: nothing a jitter can notice.
        Some(span) => value % span,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_vary() {
        let draws: Vec<u64> = (0..200).map(|_| up_to(9)).collect();
        assert!(draws.iter().all(|d| *d <= 9));
        assert!(
            (0..=9).all(|v| draws.contains(&v)),
            "200 draws missed a value of ten"
        );
        assert_eq!(up_to(0), 0);
    }

    #[test]
    fn pooled_draws_never_hand_out_the_same_bytes_twice() {
        // More draws than one pool holds, from two threads: every 16-byte draw is
        // distinct (a repeat of 128 random bits would be a defect, not chance).
        let draw = || {
            (0..3 * POOL / 16)
                .map(|_| {
                    let mut token = [0u8; 16];
                    fill(&mut token);
                    token
                })
                .collect::<Vec<_>>()
        };
        let other = std::thread::spawn(draw);
        let mut all = draw();
        all.extend(other.join().expect("the other thread drew"));
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "a draw was handed out twice");
        assert!(
            all.iter().all(|t| t != &[0u8; 16]),
            "a zeroed byte was handed out"
        );
        // A draw larger than a pool's share goes to the operating system directly.
        let mut large = [0u8; POOL];
        fill(&mut large);
        assert_ne!(large, [0u8; POOL]);
    }

    #[test]
    fn a_seeded_thread_draws_the_same_bytes_for_the_same_seed() {
        let draw = |seed| {
            let before = set_seeded(Some(seed));
            let mut bytes = [0u8; 24];
            fill(&mut bytes);
            let drawn = (bytes, up_to(1_000_000));
            set_seeded(before);
            drawn
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        // Unseeded again: the operating system's bytes.
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn filled_bytes_differ_between_calls() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, b);
    }
}
