//! The simulation's generator: SplitMix64, small and fast, and the same stream for
//! the same seed on every platform.

/// A seeded generator of the simulation's draws (faults, latencies, workloads).
#[derive(Debug, Clone)]
pub(crate) struct SimRng {
    state: u64,
}

impl SimRng {
    /// The generator for `seed`, with `stream` telling apart generators of one seed.
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut rng = SimRng {
            state: seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F),
        };
        rng.next();
        rng
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `per_mille` / 1000.
    pub(crate) fn chance(&mut self, per_mille: u32) -> bool {
        self.below(1000) < u64::from(per_mille)
    }

    /// A duration in `lo..=hi` milliseconds.
    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> std::time::Duration {
        std::time::Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }
}
