//! Random numbers from the operating system's generator, for owner tokens and jitter.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Fills `bytes` from the operating system's cryptographically secure generator.
///
/// Should the operating system refuse (it does not on the platforms tokio runs on,
/// once booted), the bytes come from the standard library's randomly keyed SipHash
/// over a process-wide counter and the clock instead: still unique per call and
/// unpredictable without the keys, so a token never repeats, and nothing panics.
pub(crate) fn fill(bytes: &mut [u8]) {
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
    fn filled_bytes_differ_between_calls() {
        let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
        fill(&mut a);
        fill(&mut b);
        assert_ne!(a, b);
    }
}
