//! Latency samples and their summary.

use std::time::Duration;

use serde::Serialize;

/// A summary of latency samples, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) count: usize,
    pub(crate) p50_us: f64,
    pub(crate) p90_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) mean_us: f64,
    pub(crate) max_us: f64,
    /// Operations per second over the wall time they took.
    pub(crate) per_sec: f64,
    /// CPU microseconds the server process used per operation, where the server
    /// reports it (Redis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server_cpu_us: Option<f64>,
    /// CPU microseconds this process (the client, with its runtime) used per
    /// operation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client_cpu_us: Option<f64>,
    /// In a handoff scenario: the share of handoffs in which the holder that had just
    /// released took the lock again, ahead of the waiters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) same_holder_share: Option<f64>,
    /// In a handoff scenario: the longest time a waiter waited for the lock, divided
    /// by the median wait (1 when every waiter waits alike; large when some starve).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wait_ratio: Option<f64>,
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Summary {
    /// Summarises `samples` measured over `wall` time.
    pub(crate) fn of(mut samples: Vec<Duration>, wall: Duration) -> Summary {
        samples.sort();
        let n = samples.len();
        let at = |q: f64| {
            if n == 0 {
                return 0.0;
            }
            let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            us(samples[i])
        };
        let mean = if n == 0 {
            0.0
        } else {
            samples.iter().map(|d| us(*d)).sum::<f64>() / n as f64
        };
        Summary {
            count: n,
            p50_us: at(0.50),
            p90_us: at(0.90),
            p99_us: at(0.99),
            mean_us: mean,
            max_us: samples.last().map(|d| us(*d)).unwrap_or(0.0),
            per_sec: if wall.is_zero() {
                0.0
            } else {
                n as f64 / wall.as_secs_f64()
            },
            server_cpu_us: None,
            client_cpu_us: None,
            same_holder_share: None,
            wait_ratio: None,
        }
    }
}

/// The longest of `waits` divided by their median; `None` without waits.
pub(crate) fn wait_ratio(mut waits: Vec<Duration>) -> Option<f64> {
    waits.sort();
    let median = *waits.get(waits.len().checked_sub(1)? / 2)?;
    let longest = *waits.last()?;
    (!median.is_zero()).then(|| longest.as_secs_f64() / median.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_samples() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = Summary::of(samples, Duration::from_secs(1));
        assert_eq!(
            (s.p50_us, s.p90_us, s.p99_us, s.max_us),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert_eq!(s.per_sec, 100.0);
        assert_eq!(Summary::of(vec![], Duration::ZERO).p50_us, 0.0);
    }

    #[test]
    fn the_wait_ratio_is_the_longest_over_the_median() {
        let ms = |v: &[u64]| v.iter().map(|m| Duration::from_millis(*m)).collect();
        assert_eq!(wait_ratio(ms(&[10, 20, 80])), Some(4.0));
        assert_eq!(wait_ratio(ms(&[5, 5, 5, 5])), Some(1.0));
        assert_eq!(wait_ratio(vec![]), None);
    }
}
