//! Exponential backoff with full jitter, for waiters that poll.

use std::time::Duration;

/// Successive sleeps of a uniformly random length between zero and a cap that doubles
/// each time, from `initial` up to `max` ("full jitter": waiters that collided once
/// spread out instead of colliding again in step).
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    cap: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            cap: initial.min(max),
            max,
        }
    }

    /// The next sleep.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let cap = self.cap;
        self.cap = (self.cap * 2).min(self.max);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(crate::support::random::up_to(nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_stay_under_a_doubling_cap() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(50));
        let caps = [10, 20, 40, 50, 50, 50];
        for cap in caps {
            let d = b.next_delay();
            assert!(d <= Duration::from_millis(cap), "{d:?} > {cap} ms");
        }
    }
}
