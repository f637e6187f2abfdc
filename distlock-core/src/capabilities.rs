//! [`Capabilities`]: what a backend can do, as plain data that tests, docs and the
//! client read instead of special-casing backend names.

use std::time::Duration;

use crate::error::{Error, Result};

/// What happens to the fencing counter when the server restarts and loses its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FenceDurability {
    /// The counter is stored durably before a grant is returned; a restart never makes
    /// it go backwards.
    Durable,
    /// After a restart that lost data, the backend either keeps tokens increasing (for
    /// example by anchoring them to the server's clock) or refuses to grant until it
    /// can; it never hands out a token it may have handed out before.
    ///
    /// A backend that anchors its tokens to clocks declares this on the conditions its
    /// docs state: the clock of the server that mints a token never steps back past
    /// the last token handed out, and, where another server takes over (a failover, a
    /// Redis Cluster master's replica, a Redlock master restarted empty), that
    /// server's clock is not behind the old one's by more than the time between the
    /// last grant it missed and its first. Keep such servers' clocks synchronised
    /// (NTP, slewing rather than stepping).
    FailsClosed,
    /// Tokens increase while the server keeps its data; after a restart that lost it
    /// they may repeat. Do not rely on them for fencing across such restarts.
    BestEffort,
}

/// Whether a backend keeps the [`Holder`](crate::Holder) with every lease and permit
/// grant, and by whose clock it records the grant's time
/// ([`LockInfo::granted_at`](crate::LockInfo::granted_at)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HolderRecords {
    /// Holders are not kept: [`LockInfo::holder`](crate::LockInfo::holder) is always `None`.
    NotKept,
    /// Kept, with the grant's time by the server's clock.
    ServerClock,
    /// Kept, with the grant's time by the granting client's clock, as it sent the
    /// request: the server has no clock a client can read (etcd). Clients whose clocks
    /// disagree record times that disagree as much.
    ClientClock,
}

/// How many round trips to the server each operation takes at most, once the backend
/// is warmed up (connections open, scripts or statements prepared): contract point 9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RoundTrips {
    /// [`LockBackend::try_grant`](crate::LockBackend::try_grant), granted or not.
    pub acquire: u32,
    /// [`LockBackend::release`](crate::LockBackend::release).
    pub release: u32,
    /// [`LockBackend::renew`](crate::LockBackend::renew).
    pub extend: u32,
}

impl RoundTrips {
    /// At most `acquire`, `release` and `extend` round trips for those operations.
    pub const fn new(acquire: u32, release: u32, extend: u32) -> Self {
        RoundTrips {
            acquire,
            release,
            extend,
        }
    }
}

impl Default for RoundTrips {
    /// One round trip per operation.
    fn default() -> Self {
        RoundTrips {
            acquire: 1,
            release: 1,
            extend: 1,
        }
    }
}

/// How far the clocks that judge a lease's expiry may run ahead of this process's
/// clock, as an allowance that core takes off every lease's validity (contract point
/// 7): `ttl × per_million / 1,000,000 + fixed`.
///
/// A backend whose expiry one server judges, by its own clock, can keep
/// [`ClockDrift::NONE`]. A backend that holds a lease on several independent servers
/// (Redlock) declares the drift it assumes between their clocks and this one, so that a
/// lease is given up before the first of them could free the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct ClockDrift {
    /// The rate allowance, in parts per million of the TTL.
    pub per_million: u32,
    /// A fixed allowance, whatever the TTL.
    pub fixed: Duration,
}

impl ClockDrift {
    /// An allowance of `per_million` parts per million of the TTL, plus `fixed`.
    pub const fn new(per_million: u32, fixed: Duration) -> Self {
        ClockDrift { per_million, fixed }
    }

    /// No allowance.
    pub const NONE: ClockDrift = ClockDrift {
        per_million: 0,
        fixed: Duration::ZERO,
    };

    /// What is taken off the validity of a lease of `ttl`.
    pub fn allowance(&self, ttl: Duration) -> Duration {
        let rate = ttl.as_nanos() * u128::from(self.per_million) / 1_000_000;
        Duration::from_nanos(u64::try_from(rate).unwrap_or(u64::MAX)).saturating_add(self.fixed)
    }
}

/// The limits a backend imposes and what it promises, where no method can say it:
/// what TTLs it takes, what its fences survive, its round trips and clock drift.
/// Which optional features it has is said by its accessors instead
/// ([`LockBackend::fair`](crate::LockBackend::fair) and the others).
///
/// Build one from [`Capabilities::default`] and set the fields that differ.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The shortest TTL the backend accepts.
    pub min_ttl: Duration,
    /// The longest TTL the backend accepts.
    pub max_ttl: Duration,
    /// TTLs must be a whole multiple of this (etcd: one second; Redis: one millisecond).
    pub ttl_granularity: Duration,
    /// What a data-losing restart does to the fencing counter.
    pub fence_durability: FenceDurability,
    /// Whether leases are guaranteed to survive a server restart (a durable store).
    /// `false` promises nothing either way.
    pub leases_survive_restart: bool,
    /// Whether [`LockBackend::watch`](crate::LockBackend::watch) reports releases, so
    /// waiters wake at once instead of polling. Declared here, not left to what
    /// `watch` answers, because a watch opens a subscription: the client decides
    /// before it asks whether a guard watches its key. It must be `true` exactly where
    /// `watch` answers a stream: the conformance suite checks the two agree.
    pub change_notification: bool,
    /// Whether [`LockBackendExt::extend`](crate::backend::LockBackendExt::extend) accepts any valid
    /// TTL, or only the TTL the lease was granted with (etcd renews a lease to its
    /// granted TTL; another TTL is an [`ErrorKind::InvalidTtl`](crate::ErrorKind::InvalidTtl) error).
    pub extend_any_ttl: bool,
    /// The round trips each operation takes at most (contract point 9).
    pub round_trips: RoundTrips,
    /// The clock drift core allows for when it counts a lease's validity.
    pub clock_drift: ClockDrift,
    /// How long after it was sent a request whose reply never came may still be
    /// applied, at most, by a server that kept running: the server's own bound on a
    /// statement (PostgreSQL's `statement_timeout`). `None` when nothing on the server
    /// bounds it. No declaration covers a server that was paused or stalled (a
    /// frozen process, a VM suspended): it applies what waited in its socket once it
    /// resumes, however late.
    ///
    /// A [`LockClient`](crate::LockClient) releases what an abandoned attempt may have
    /// been granted at once, again 0.25 s, 1.25 s and 6.25 s later, and, where this
    /// bound is longer, once more when it has passed since the attempt was abandoned:
    /// a grant applied within the bound is then given back before long. One applied
    /// later than every pass runs out at its TTL.
    pub applied_within: Option<Duration>,
    /// Whether the holder of each grant is kept with it, and by whose clock its grant
    /// time is recorded.
    pub holder_records: HolderRecords,
    /// Whether an efficiency lock's plain grants
    /// ([`LockOptions::with_fenced`](crate::LockOptions::with_fenced) off) take a
    /// cheaper step here that mints no fence: their leases then carry
    /// [`FencingToken::NONE`](crate::FencingToken::NONE), and where holders are kept
    /// ([`holder_records`](Self::holder_records)) their grant time is by the client's
    /// clock. `false` (the default): the backend's fence costs nothing extra (a
    /// revision, a zxid, a sequence drawn in the same statement), so the option changes
    /// nothing and every grant carries a fence. Fair steps and sets of keys always
    /// take the fenced step.
    pub unfenced_grants: bool,
}

impl Default for Capabilities {
    /// Millisecond TTLs from 1 ms to one year, best-effort fences, extend to any TTL,
    /// one round trip per operation, no clock drift, no change notification, and no
    /// bound on when a request may still be applied, no holders kept, and a fence on
    /// every grant.
    fn default() -> Self {
        Capabilities {
            min_ttl: Duration::from_millis(1),
            max_ttl: Duration::from_secs(365 * 24 * 3600),
            ttl_granularity: Duration::from_millis(1),
            fence_durability: FenceDurability::BestEffort,
            leases_survive_restart: false,
            change_notification: false,
            extend_any_ttl: true,
            round_trips: RoundTrips::default(),
            clock_drift: ClockDrift::NONE,
            applied_within: None,
            holder_records: HolderRecords::NotKept,
            unfenced_grants: false,
        }
    }
}

impl Capabilities {
    /// Checks a TTL against these limits: an
    /// [`ErrorKind::InvalidTtl`](crate::ErrorKind::InvalidTtl) error when it is zero,
    /// out of range or not a multiple of the granularity. Nothing is rounded: a
    /// backend's steps take the TTL they are given or refuse it (the client fits its
    /// TTL once, with [`fit_ttl`](Self::fit_ttl), before any step).
    pub fn check_ttl(&self, ttl: Duration) -> Result<Duration> {
        if ttl.is_zero() {
            return Err(Error::invalid_ttl("the ttl must be greater than zero"));
        }
        if ttl < self.min_ttl {
            return Err(Error::invalid_ttl(format!(
                "the ttl {ttl:?} is below this backend's minimum of {:?}",
                self.min_ttl
            )));
        }
        if ttl > self.max_ttl {
            return Err(Error::invalid_ttl(format!(
                "the ttl {ttl:?} is above this backend's maximum of {:?}",
                self.max_ttl
            )));
        }
        let grain = self.ttl_granularity.as_nanos();
        if grain > 1 && !ttl.as_nanos().is_multiple_of(grain) {
            return Err(Error::invalid_ttl(format!(
                "the ttl {ttl:?} is not a whole multiple of this backend's granularity of {:?}",
                self.ttl_granularity
            )));
        }
        Ok(ttl)
    }

    /// The TTL these limits grant for a requested `ttl`: `ttl` itself when they
    /// accept it, otherwise the shortest TTL above it that they accept (raised to the
    /// minimum, rounded up to the granularity). Never shorter than asked: a TTL bounds
    /// how long a crashed holder blocks everyone, and is also what keeps a paused
    /// holder's lease alive, so it is only ever lengthened. An
    /// [`ErrorKind::InvalidTtl`](crate::ErrorKind::InvalidTtl) error for a zero TTL
    /// (no backend can honour it) and for one above the maximum (honouring it would
    /// mean shortening it).
    ///
    /// [`LockClient::with_options`](crate::LockClient::with_options) fits its TTL with
    /// this, so that one [`LockOptions`](crate::LockOptions) serves every backend.
    pub fn fit_ttl(&self, ttl: Duration) -> Result<Duration> {
        if ttl.is_zero() {
            return Err(Error::invalid_ttl("the ttl must be greater than zero"));
        }
        if ttl > self.max_ttl {
            return Err(Error::invalid_ttl(format!(
                "the ttl {ttl:?} is above this backend's maximum of {:?}",
                self.max_ttl
            )));
        }
        // Rounding up past a maximum off the granularity lands on the maximum, which
        // the check then refuses.
        self.check_ttl(self.ttl_at_least(ttl))
    }

    /// A TTL of at least `at_least` that these limits accept (rounded up to the
    /// granularity and clamped to the minimum); for tests and tools that need "a short
    /// TTL" on any backend.
    pub fn ttl_at_least(&self, at_least: Duration) -> Duration {
        let grain = self.ttl_granularity.as_nanos().max(1);
        let wanted = at_least.max(self.min_ttl).as_nanos();
        let rounded = wanted.div_ceil(grain) * grain;
        let nanos = u64::try_from(rounded).unwrap_or(u64::MAX);
        Duration::from_nanos(nanos).min(self.max_ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn etcd_like() -> Capabilities {
        Capabilities {
            min_ttl: Duration::from_secs(2),
            ttl_granularity: Duration::from_secs(1),
            ..Capabilities::default()
        }
    }

    #[test]
    fn ttl_limits_give_typed_errors() {
        let c = etcd_like();
        for bad in [
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_millis(2500),
            Duration::from_secs(400 * 24 * 3600),
        ] {
            assert_eq!(
                c.check_ttl(bad).map_err(|e| e.kind()),
                Err(ErrorKind::InvalidTtl),
                "{bad:?}"
            );
        }
        assert!(c.check_ttl(Duration::from_secs(3)).is_ok());
    }

    #[test]
    fn a_ttl_is_fitted_up_never_down() {
        let c = etcd_like();
        for (asked, granted) in [
            (Duration::from_millis(1), Duration::from_secs(2)),
            (Duration::from_secs(1), Duration::from_secs(2)),
            (Duration::from_millis(2500), Duration::from_secs(3)),
            (Duration::from_secs(3), Duration::from_secs(3)),
            (c.max_ttl, c.max_ttl),
        ] {
            assert_eq!(c.fit_ttl(asked).ok(), Some(granted), "{asked:?}");
        }
        for bad in [Duration::ZERO, c.max_ttl + Duration::from_millis(1)] {
            assert_eq!(
                c.fit_ttl(bad).map_err(|e| e.kind()),
                Err(ErrorKind::InvalidTtl),
                "{bad:?}"
            );
        }
        // A maximum off the granularity: what rounds past it is refused, not cut.
        let odd = Capabilities {
            max_ttl: Duration::from_millis(4500),
            ..c
        };
        assert_eq!(
            odd.fit_ttl(Duration::from_millis(4200))
                .map_err(|e| e.kind()),
            Err(ErrorKind::InvalidTtl)
        );
        let d = Capabilities::default();
        assert_eq!(
            d.fit_ttl(Duration::from_micros(1500)).ok(),
            Some(Duration::from_millis(2))
        );
    }

    #[test]
    fn the_drift_allowance_is_a_rate_plus_a_fixed_part() {
        let redlock = ClockDrift {
            per_million: 10_000,
            fixed: Duration::from_millis(2),
        };
        assert_eq!(
            redlock.allowance(Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        assert_eq!(
            ClockDrift::NONE.allowance(Duration::from_secs(10)),
            Duration::ZERO
        );
        let huge = ClockDrift {
            per_million: u32::MAX,
            fixed: Duration::MAX,
        };
        assert_eq!(huge.allowance(Duration::MAX), Duration::MAX);
    }

    #[test]
    fn ttl_at_least_rounds_up_to_what_is_accepted() {
        let c = etcd_like();
        assert_eq!(
            c.ttl_at_least(Duration::from_millis(100)),
            Duration::from_secs(2)
        );
        assert_eq!(
            c.ttl_at_least(Duration::from_millis(2100)),
            Duration::from_secs(3)
        );
        let d = Capabilities::default();
        assert_eq!(
            d.ttl_at_least(Duration::from_micros(1500)),
            Duration::from_millis(2)
        );
    }
}
