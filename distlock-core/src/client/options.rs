//! [`LockOptions`]: how long leases last, how they are renewed, and how waiters back off.

use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::holder::Holder;

/// How a [`LockClient`](crate::LockClient) takes and keeps locks.
///
/// The defaults follow the common practice of lock libraries: a 30 s TTL, renewed
/// every third of it, and the holder told it lost the lock a tenth of the TTL before
/// its validity runs out when renewal cannot get through.
///
/// The same options serve every backend: a client fits the TTL to what its backend
/// grants (see [`LockClient::with_options`](crate::LockClient::with_options)). With the
/// `serde` feature they are read from a configuration file, each field optional (a
/// field left out keeps its default), durations written as `30s` or `1500ms`, a field
/// it does not know refused with its name, and timings that do not fit together
/// refused as [`validate`](Self::validate) refuses them:
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use std::time::Duration;
/// use distlock_core::LockOptions;
///
/// let options: LockOptions = serde_json::from_str(
///     r#"{ "ttl": "10s", "renew_interval": "2s", "fair": true,
///          "circuit_breaker": { "failures": 5, "open_for": "30s" } }"#,
/// ).expect("options");
/// assert_eq!(options.ttl(), Duration::from_secs(10));
/// assert_eq!(options.loss_margin(), Duration::from_secs(1)); // a tenth of the TTL
///
/// let typo = serde_json::from_str::<LockOptions>(r#"{ "tll": "10s" }"#).unwrap_err();
/// assert!(typo.to_string().contains("unknown field `tll`"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    auto_renew: bool,
    renew_interval: Option<Duration>,
    loss_margin: Option<Duration>,
    min_validity: Option<Duration>,
    backoff_initial: Duration,
    backoff_max: Duration,
    fair: bool,
    queue_place: Duration,
    key_labels: bool,
    circuit_breaker: Option<BreakerOptions>,
    hold_at_least: Option<Duration>,
    hold_at_most: Option<Duration>,
    holder: Option<Holder>,
    fenced: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            auto_renew: true,
            renew_interval: None,
            loss_margin: None,
            min_validity: None,
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(500),
            fair: false,
            queue_place: Duration::from_secs(3),
            key_labels: false,
            circuit_breaker: None,
            hold_at_least: None,
            hold_at_most: None,
            holder: None,
            fenced: true,
        }
    }
}

impl LockOptions {
    /// The defaults with a TTL of `ttl`.
    pub fn new(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            ..Self::default()
        }
    }

    /// Sets the lease TTL: how long the lock outlives a holder that vanished.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Turns auto-renewal on (the default) or off. Without it a guard's lease simply
    /// runs out, and [`LockGuard::lost`](crate::LockGuard::lost) fires a loss margin
    /// before it does.
    pub fn with_auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }

    /// How often a held lease is renewed; by default a third of the TTL. Where the
    /// backend notifies changes, a change to the key (on a semaphore, read-write lock
    /// or election, to any grant of its name) also asks for a check of the lease: at
    /// once, unless a check so asked came within a quarter of this interval, and then
    /// at the end of that quarter. A holder renews at most five times per interval
    /// however busy its name, and learns that its lease was deleted at once after a
    /// quiet spell, within a quarter interval and a round trip on a busy name.
    pub fn with_renew_interval(mut self, every: Duration) -> Self {
        self.renew_interval = Some(every);
        self
    }

    /// How long before the local validity runs out a holder whose renewals fail is
    /// told it lost the lock; by default a tenth of the TTL. It covers clock-rate
    /// differences between client and server and the time to stop work.
    pub fn with_loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = Some(margin);
        self
    }

    /// The least validity a fresh lease must have to be handed out; one granted
    /// below it (a very slow round trip) is released and tried again. By default a
    /// quarter of the TTL.
    pub fn with_min_validity(mut self, min: Duration) -> Self {
        self.min_validity = Some(min);
        self
    }

    /// The first and the largest sleep between attempts of a waiter. With change
    /// notification the waiter sleeps until notified, but re-checks at least every
    /// `max`.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }

    /// Turns fair mode on or off (off by default). In fair mode a waiter joins the
    /// key's queue on the server and is granted the lock in the order it asked,
    /// across every client (contract point 10 of
    /// [`LockBackend`](crate::LockBackend)); the backend must have
    /// a [fair mode](crate::LockBackend::fair). Each task is then its own
    /// waiter on the server: the tasks of one client do not line up locally first.
    /// A fair waiter costs more than a racing one: it calls the server at least three
    /// times per [`queue_place`](Self::with_queue_place), and each handoff waits for
    /// the head of the queue to hear of the release.
    pub fn with_fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// Turns the fence off for an efficiency lock (on by default, a fenced lock).
    ///
    /// A lease can run out under a holder that is paused or cut off, while the next
    /// holder goes ahead: two processes then both believe they hold the lock. Where
    /// the resource the lock protects checks the fencing token of every write
    /// ([`FencedStore`](crate::FencedStore)), it refuses the older holder's, and the
    /// lock is a correctness guarantee; that needs a fenced lock. Where the resource
    /// cannot check a token, the fence protects nothing, and the lock is an
    /// efficiency optimisation: it keeps work from being done twice most of the time
    /// (a job run once, a cache filled once), and a rare overlap costs some duplicated
    /// work, not corrupted data. Such a lock need not pay for the fence.
    ///
    /// Off, a plain grant on a backend whose
    /// [`Capabilities::unfenced_grants`](crate::backend::Capabilities::unfenced_grants)
    /// is set takes a cheaper step that mints no fence (on Redis a single `SET NX`),
    /// and its lease carries [`FencingToken::NONE`](crate::FencingToken::NONE).
    /// Everything else the contract promises stays: expiry by the server's clock,
    /// owner-checked release and extend, renewal, the lost-lock signal, and waiting
    /// by notification. Every fenced store refuses a write or read under
    /// [`FencingToken::NONE`](crate::FencingToken::NONE) (through
    /// [`LockGuard::fenced`](crate::LockGuard::fenced) too) with an
    /// [`ErrorKind::InvalidInput`] error that says why, and
    /// [`LockClient::with_fenced_lock`](crate::LockClient::with_fenced_lock) refuses a
    /// client with this option off, on every backend, with an
    /// [`ErrorKind::Configuration`] error. Where the backend's fence costs nothing
    /// extra, for fair locks and sets of keys, and for the semaphores, read-write
    /// locks and elections made from the client (known by their fences), the option
    /// changes nothing else: the lease carries a fence as always.
    pub fn with_fenced(mut self, on: bool) -> Self {
        self.fenced = on;
        self
    }

    /// Whether grants must carry a fence (a fenced lock) or may go without one (an
    /// efficiency lock).
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// How long a fair waiter's place in the queue outlives its last call to the
    /// server; 3 s by default. A waiter that vanished (crashed, cut off) blocks those
    /// behind it for at most this long (rounded up to the backend's TTL granularity
    /// and minimum, as for a TTL) once the lock is free. A waiter calls again at least
    /// every third of it. Where a release hands the lock to the head of the queue
    /// ([`FairBackend::handoffs`](crate::backend::FairBackend::handoffs)),
    /// what it hands over lasts at most the place too, counted from the waiter's last
    /// call: when that leaves the [minimum validity](Self::with_min_validity), the
    /// waiter holds the lock with no request of its own (so a place comfortably longer
    /// than the minimum validity makes handoffs cheaper); otherwise its next fair step
    /// renews it for the TTL.
    pub fn with_queue_place(mut self, place: Duration) -> Self {
        self.queue_place = place;
        self
    }

    /// Whether the client's metrics carry the lock's key as a `key` label (off by
    /// default). Each key is then a series of its own in every metric: turn it on only
    /// where the keys are few and fixed, never for keys made per request or per
    /// record. See the crate docs' section on metrics.
    pub fn with_key_labels(mut self, on: bool) -> Self {
        self.key_labels = on;
        self
    }

    /// Holds every lease at least `at_least` from its grant (off by default), as
    /// ShedLock's `lockAtLeastFor`. Every grant asks the server for the longer of the
    /// TTL and `at_least`, and every renewal within the hold for no less than what is
    /// left of it, so a holder that crashes or is cut off keeps the key on the server
    /// until then. A release (or a dropped guard) before then does not free the key but
    /// shortens the lease, in one step, to end `at_least` after the grant, and stops
    /// renewal. A job run once per schedule slot on several hosts uses it so that a
    /// host whose clock or scheduler is a little behind finds the key still held for
    /// that slot, however quickly the first run finished, or whether it finished at all
    /// (see [`LockClient::run_once`](crate::LockClient::run_once)).
    ///
    /// `at_least` is fitted to the backend as the TTL is (rounded up to its TTL
    /// granularity; a configuration error above its maximum TTL or above
    /// [`with_hold_at_most`](Self::with_hold_at_most)). The time is counted from when
    /// the grant's reply arrived on the client, so the lease lasts at least that long
    /// from the grant on the server, by the client's clock: where the backend declares
    /// a clock drift ([`Capabilities::clock_drift`](crate::backend::Capabilities::clock_drift)),
    /// the server is asked for the drift's allowance more, and
    /// [`LockClient::options`](crate::LockClient::options) shows the least hold so
    /// widened. The early release keeps the key no longer than the least hold, rounded
    /// up to the backend's TTL granularity and minimum TTL
    /// ([`LockBackend::release_after`](crate::LockBackend::release_after)). A backend
    /// that renews only to the granted TTL
    /// ([`Capabilities::extend_any_ttl`](crate::backend::Capabilities::extend_any_ttl)
    /// false: etcd, ZooKeeper) grants for `at_least` where it is the longer, and renews
    /// to it while the lease is held: there a holder that vanishes after the least hold
    /// keeps the key up to `at_least` after its last renewal, not its TTL.
    pub fn with_hold_at_least(mut self, at_least: Duration) -> Self {
        self.hold_at_least = Some(at_least);
        self
    }

    /// Holds every lease at most `at_most` from its grant (off by default): a bound on
    /// a hung holder. When it is reached the hold ends as a loss
    /// ([`LossReason::HoldLimit`](crate::LossReason::HoldLimit)):
    /// [`LockGuard::lost`](crate::LockGuard::lost) fires and work under
    /// [`with_lock`](crate::LockClient::with_lock) is cancelled, while code that
    /// ignores the signal may still run (which is what the fence is for). The lease is
    /// given back a [loss margin](Self::with_loss_margin) later, when the holder must
    /// have stopped. Renewals never extend the lease past that point, so on the server
    /// it ends then (rounded up to the backend's TTL granularity) even if the holder
    /// has vanished; a backend that renews only to the granted TTL (etcd) may keep it
    /// until the TTL its last renewal gave. Counted from the grant's reply on the
    /// client's clock.
    pub fn with_hold_at_most(mut self, at_most: Duration) -> Self {
        self.hold_at_most = Some(at_most);
        self
    }

    /// Names the holder that every grant of this client stores
    /// ([`Holder`]; by default [`Holder::this_process`]), where the backend keeps
    /// holders ([`Capabilities::holder_records`](crate::backend::Capabilities::holder_records)).
    /// For another payload per call, make a client with other options on the same
    /// backend.
    pub fn with_holder(mut self, holder: Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    /// The holder every grant stores: the one set, or [`Holder::this_process`].
    pub fn holder(&self) -> Holder {
        self.holder.clone().unwrap_or_else(Holder::this_process)
    }

    /// The least a lease is held, when set ([`with_hold_at_least`](Self::with_hold_at_least)).
    pub fn hold_at_least(&self) -> Option<Duration> {
        self.hold_at_least
    }

    /// The TTL every grant asks for: the TTL, or the least hold where that is longer,
    /// so that the server keeps the key that long even if its holder vanishes.
    pub(crate) fn grant_ttl(&self) -> Duration {
        self.hold_at_least
            .map_or(self.ttl, |least| least.max(self.ttl))
    }

    /// The most a lease is held, when set ([`with_hold_at_most`](Self::with_hold_at_most)).
    pub fn hold_at_most(&self) -> Option<Duration> {
        self.hold_at_most
    }

    /// Whether metrics carry the key as a label.
    pub fn key_labels(&self) -> bool {
        self.key_labels
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether held leases are renewed automatically.
    pub fn auto_renew(&self) -> bool {
        self.auto_renew
    }

    /// The renewal interval in force.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.ttl / 3)
    }

    /// The loss margin in force.
    pub fn loss_margin(&self) -> Duration {
        self.loss_margin.unwrap_or(self.ttl / 10)
    }

    /// The minimum validity in force.
    pub fn min_validity(&self) -> Duration {
        self.min_validity.unwrap_or(self.ttl / 4)
    }

    /// The first sleep of a polling waiter.
    pub fn backoff_initial(&self) -> Duration {
        self.backoff_initial
    }

    /// The largest sleep of a waiter.
    pub fn backoff_max(&self) -> Duration {
        self.backoff_max
    }

    /// Whether waiters are served in the order they asked.
    pub fn fair(&self) -> bool {
        self.fair
    }

    /// How long a fair waiter's place outlives its last call.
    pub fn queue_place(&self) -> Duration {
        self.queue_place
    }

    /// Turns the circuit breaker on (it is off by default): after
    /// [`failures`](BreakerOptions::failures) consecutive acquisition attempts found
    /// the backend unavailable, acquisitions fail at once with
    /// [`ErrorKind::CircuitOpen`] for [`open_for`](BreakerOptions::open_for), then
    /// one probe call decides whether it closes again. A call it refuses sends
    /// nothing, so leaves nothing to clean up. Renewals and releases of leases
    /// already held never wait on it. A client and its clones share one breaker
    /// with the [semaphores](crate::LockClient::semaphore),
    /// [read-write locks](crate::LockClient::rw_lock) (readers and writers alike) and
    /// [elections](crate::LockClient::election) made from them. State changes are
    /// logged (warn) and counted in
    /// `distlock_breaker_transitions_total`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use distlock_core::{BreakerOptions, ErrorKind, LockClient, LockOptions, MemoryBackend};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> distlock_core::Result<()> {
    /// let options = LockOptions::new(Duration::from_secs(30))
    ///     // Open after 5 attempts in a row find the backend unavailable; stay open 5 s.
    ///     .with_circuit_breaker(BreakerOptions::new(5, Duration::from_secs(5)));
    /// let locks = LockClient::with_options(Arc::new(MemoryBackend::new()), options)?;
    /// match locks.lock("jobs/nightly", Duration::from_secs(10)).await {
    ///     Ok(guard) => guard.release().await?,
    ///     // Failed at once, without a call: the message says how long it stays open.
    ///     Err(e) if e.kind() == ErrorKind::CircuitOpen => eprintln!("shedding: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// let health = locks.health().await?; // one round trip, whatever the breaker says
    /// println!("{} answered in {:?}", health.backend(), health.latency());
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_circuit_breaker(mut self, breaker: BreakerOptions) -> Self {
        self.circuit_breaker = Some(breaker);
        self
    }

    /// The circuit breaker's settings, when it is on.
    pub fn circuit_breaker(&self) -> Option<BreakerOptions> {
        self.circuit_breaker
    }

    /// Checks that the timings fit together (the loss margin inside the TTL, renewal
    /// before the margin, the minimum validity above the margin), as
    /// [`LockClient::with_options`](crate::LockClient::with_options) does: an
    /// [`ErrorKind::Configuration`] error saying which does not.
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::new(ErrorKind::Configuration, msg));
        if let Some(breaker) = &self.circuit_breaker {
            breaker.validate()?;
        }
        if self.ttl.is_zero() {
            return bad("the ttl must be greater than zero".into());
        }
        let (ttl, renew, margin, min) = (
            self.ttl,
            self.renew_interval(),
            self.loss_margin(),
            self.min_validity(),
        );
        if margin >= ttl {
            return bad(format!(
                "the loss margin {margin:?} must be shorter than the ttl {ttl:?}"
            ));
        }
        if self.auto_renew && (renew.is_zero() || renew >= ttl - margin) {
            return bad(format!(
                "the renewal interval {renew:?} must be above zero and below the ttl less the loss margin ({:?})",
                ttl - margin
            ));
        }
        if min <= margin || min > ttl {
            return bad(format!(
                "the minimum validity {min:?} must be above the loss margin {margin:?} and at most the ttl {ttl:?}"
            ));
        }
        if self.hold_at_most.is_some_and(|most| most.is_zero()) {
            return bad("the most a lease is held must be above zero".into());
        }
        if let (Some(least), Some(most)) = (self.hold_at_least, self.hold_at_most) {
            if least > most {
                return bad(format!(
                    "the least a lease is held ({least:?}) must not be above the most ({most:?})"
                ));
            }
        }
        if self.queue_place < Duration::from_millis(30) {
            return bad(format!(
                "the queue place {:?} must be at least 30 ms, so that a waiter can call again within it",
                self.queue_place
            ));
        }
        if self.backoff_initial.is_zero() || self.backoff_max < self.backoff_initial {
            return bad(
                "the backoff must start above zero and its maximum be at least its start".into(),
            );
        }
        Ok(())
    }
}

/// When a client's circuit breaker opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerOptions {
    failures: u32,
    open_for: Duration,
}

impl Default for BreakerOptions {
    /// Opens after 5 consecutive failures, for 5 s.
    fn default() -> Self {
        BreakerOptions {
            failures: 5,
            open_for: Duration::from_secs(5),
        }
    }
}

impl BreakerOptions {
    /// Opens after `failures` consecutive acquisition attempts that failed with
    /// [`ErrorKind::Unavailable`] or a backend [`ErrorKind::Timeout`], and stays open
    /// for `open_for` before one probe call is let through.
    pub fn new(failures: u32, open_for: Duration) -> Self {
        BreakerOptions { failures, open_for }
    }

    /// How many consecutive failures open the breaker.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// How long the breaker stays open before a probe call is let through.
    pub fn open_for(&self) -> Duration {
        self.open_for
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.failures == 0 || self.open_for.is_zero() {
            return Err(Error::new(
                ErrorKind::Configuration,
                format!(
                    "the circuit breaker needs at least 1 failure and an open time above zero (got {} and {:?})",
                    self.failures, self.open_for
                ),
            ));
        }
        Ok(())
    }
}

/// [`LockOptions`] and [`BreakerOptions`] in a configuration file, through serde: every
/// field optional (a missing one keeps its default), durations as people write them
/// ([`parse_duration`](crate::parse_duration)), and a field it does not know refused
/// with its name.
#[cfg(feature = "serde")]
mod serde_form {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::holder::Holder;

    use super::{BreakerOptions, LockOptions};
    use crate::duration::{format_duration, parse_duration};

    /// A duration written as `30s`, `1500ms`.
    #[derive(Clone, Copy)]
    struct Human(Duration);

    impl Serialize for Human {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_str(&format_duration(self.0))
        }
    }

    impl<'de> Deserialize<'de> for Human {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let text = String::deserialize(deserializer)?;
            parse_duration(&text)
                .map(Human)
                .map_err(|e| serde::de::Error::custom(e.message()))
        }
    }

    #[derive(Serialize, Deserialize, Default)]
    #[serde(deny_unknown_fields, default)]
    struct Form {
        #[serde(skip_serializing_if = "Option::is_none")]
        ttl: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        auto_renew: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        renew_interval: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        loss_margin: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        min_validity: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        backoff_initial: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        backoff_max: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        fair: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        queue_place: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        key_labels: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        circuit_breaker: Option<BreakerOptions>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hold_at_least: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        hold_at_most: Option<Human>,
        #[serde(skip_serializing_if = "Option::is_none")]
        holder: Option<Holder>,
        #[serde(skip_serializing_if = "Option::is_none")]
        fenced: Option<bool>,
    }

    /// With the `serde` feature: every field is written, the ones left to follow the
    /// TTL (renewal interval, loss margin, minimum validity) only where they were set.
    impl Serialize for LockOptions {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            Form {
                ttl: Some(Human(self.ttl)),
                auto_renew: Some(self.auto_renew),
                renew_interval: self.renew_interval.map(Human),
                loss_margin: self.loss_margin.map(Human),
                min_validity: self.min_validity.map(Human),
                backoff_initial: Some(Human(self.backoff_initial)),
                backoff_max: Some(Human(self.backoff_max)),
                fair: Some(self.fair),
                queue_place: Some(Human(self.queue_place)),
                key_labels: Some(self.key_labels),
                circuit_breaker: self.circuit_breaker,
                hold_at_least: self.hold_at_least.map(Human),
                hold_at_most: self.hold_at_most.map(Human),
                holder: self.holder.clone(),
                fenced: Some(self.fenced),
            }
            .serialize(serializer)
        }
    }

    /// With the `serde` feature: a field left out keeps its default; the options are
    /// checked as [`LockOptions::validate`] checks them, so a file whose timings do not
    /// fit together is refused as it is read.
    impl<'de> Deserialize<'de> for LockOptions {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let form = Form::deserialize(deserializer)?;
            let defaults = LockOptions::default();
            let or = |field: Option<Human>, default: Duration| field.map_or(default, |h| h.0);
            let options = LockOptions {
                ttl: or(form.ttl, defaults.ttl),
                auto_renew: form.auto_renew.unwrap_or(defaults.auto_renew),
                renew_interval: form.renew_interval.map(|h| h.0),
                loss_margin: form.loss_margin.map(|h| h.0),
                min_validity: form.min_validity.map(|h| h.0),
                backoff_initial: or(form.backoff_initial, defaults.backoff_initial),
                backoff_max: or(form.backoff_max, defaults.backoff_max),
                fair: form.fair.unwrap_or(defaults.fair),
                queue_place: or(form.queue_place, defaults.queue_place),
                key_labels: form.key_labels.unwrap_or(defaults.key_labels),
                circuit_breaker: form.circuit_breaker,
                hold_at_least: form.hold_at_least.map(|h| h.0),
                hold_at_most: form.hold_at_most.map(|h| h.0),
                holder: form.holder,
                fenced: form.fenced.unwrap_or(defaults.fenced),
            };
            options
                .validate()
                .map_err(|e| serde::de::Error::custom(e.message()))?;
            Ok(options)
        }
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct BreakerForm {
        failures: u32,
        open_for: Human,
    }

    /// With the `serde` feature: `{ "failures": 5, "open_for": "5s" }`.
    impl Serialize for BreakerOptions {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            BreakerForm {
                failures: self.failures,
                open_for: Human(self.open_for),
            }
            .serialize(serializer)
        }
    }

    /// With the `serde` feature: both fields, checked as the breaker checks them.
    impl<'de> Deserialize<'de> for BreakerOptions {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let form = BreakerForm::deserialize(deserializer)?;
            let options = BreakerOptions::new(form.failures, form.open_for.0);
            options
                .validate()
                .map_err(|e| serde::de::Error::custom(e.message()))?;
            Ok(options)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_consistent() {
        let o = LockOptions::default();
        assert!(o.validate().is_ok());
        assert_eq!(o.renew_interval(), Duration::from_secs(10));
        assert_eq!(o.loss_margin(), Duration::from_secs(3));
    }

    #[cfg(feature = "serde")]
    #[test]
    fn options_read_from_a_file_as_written_and_back() {
        let read = |json: &str| serde_json::from_str::<LockOptions>(json);
        assert_eq!(read("{}").expect("empty"), LockOptions::default());
        let options = read(
            r#"{ "ttl": "1s", "auto_renew": true, "renew_interval": "300ms",
                 "loss_margin": "100ms", "min_validity": "250ms",
                 "backoff_initial": "5ms", "backoff_max": "1.5s", "fair": true,
                 "queue_place": "2s", "key_labels": true,
                 "circuit_breaker": { "failures": 3, "open_for": "1m" } }"#,
        )
        .expect("every field");
        let built = LockOptions::new(Duration::from_secs(1))
            .with_renew_interval(Duration::from_millis(300))
            .with_loss_margin(Duration::from_millis(100))
            .with_min_validity(Duration::from_millis(250))
            .with_backoff(Duration::from_millis(5), Duration::from_millis(1500))
            .with_fair(true)
            .with_queue_place(Duration::from_secs(2))
            .with_key_labels(true)
            .with_circuit_breaker(BreakerOptions::new(3, Duration::from_secs(60)));
        assert_eq!(options, built);
        // Written and read again, the same options; durations as people write them.
        let written = serde_json::to_string(&options).expect("written");
        assert!(written.contains(r#""backoff_max":"1500ms""#), "{written}");
        assert_eq!(read(&written).expect("read back"), options);
        // A field it does not know, a duration it cannot read, timings that do not fit
        // together and a breaker that cannot open: each refused, and named.
        for (json, names) in [
            (r#"{ "ttl": "1s", "renew": "1s" }"#, "unknown field `renew`"),
            (r#"{ "ttl": "soon" }"#, "\"soon\""),
            (r#"{ "ttl": 30 }"#, "invalid type"),
            (r#"{ "ttl": "1s", "loss_margin": "2s" }"#, "loss margin"),
            (
                r#"{ "circuit_breaker": { "failures": 0, "open_for": "1s" } }"#,
                "circuit breaker",
            ),
            (
                r#"{ "circuit_breaker": { "failures": 1, "open": "1s" } }"#,
                "unknown field `open`",
            ),
        ] {
            let err = read(json).expect_err(json).to_string();
            assert!(err.contains(names), "{json}: {err}");
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn the_holder_is_read_from_a_file() {
        let read = |json: &str| serde_json::from_str::<LockOptions>(json);
        let options = read(r#"{ "holder": { "id": "billing-7", "payload": "release 3" } }"#)
            .expect("options");
        let holder = options.holder();
        assert_eq!(
            (holder.id(), holder.payload()),
            ("billing-7", Some("release 3"))
        );
        let written = serde_json::to_string(&options).expect("written");
        assert_eq!(read(&written).expect("read back"), options);
        // Without it, this process.
        assert_eq!(LockOptions::default().holder(), Holder::this_process());
        for (json, names) in [
            (r#"{ "holder": { "id": "" } }"#, "identity"),
            (
                r#"{ "holder": { "id": "a", "payload": "postgres://u:hunter2@db" } }"#,
                "password",
            ),
            (r#"{ "holder": { "name": "a" } }"#, "unknown field `name`"),
        ] {
            let err = read(json).expect_err(json).to_string();
            assert!(
                err.contains(names) && !err.contains("hunter2"),
                "{json}: {err}"
            );
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn hold_bounds_read_from_a_file() {
        let options: LockOptions =
            serde_json::from_str(r#"{ "hold_at_least": "50s", "hold_at_most": "50m" }"#)
                .expect("options");
        assert_eq!(options.hold_at_least(), Some(Duration::from_secs(50)));
        assert_eq!(options.hold_at_most(), Some(Duration::from_secs(3000)));
        let written = serde_json::to_string(&options).expect("written");
        assert_eq!(
            serde_json::from_str::<LockOptions>(&written).expect("read"),
            options
        );
        let crossed = r#"{ "hold_at_least": "2m", "hold_at_most": "1m" }"#;
        let error = serde_json::from_str::<LockOptions>(crossed).expect_err("refused");
        assert!(error.to_string().contains("must not be above"), "{error}");
    }

    #[test]
    fn inconsistent_timings_are_configuration_errors() {
        let ttl = Duration::from_secs(10);
        let cases = [
            LockOptions::new(Duration::ZERO),
            LockOptions::new(ttl).with_loss_margin(ttl),
            LockOptions::new(ttl).with_renew_interval(Duration::from_secs(9)),
            LockOptions::new(ttl).with_renew_interval(Duration::ZERO),
            LockOptions::new(ttl).with_min_validity(Duration::from_millis(500)),
            LockOptions::new(ttl).with_backoff(Duration::ZERO, Duration::from_secs(1)),
            LockOptions::new(ttl).with_queue_place(Duration::from_millis(10)),
        ];
        for o in cases {
            assert_eq!(
                o.validate().map_err(|e| e.kind()),
                Err(ErrorKind::Configuration),
                "{o:?}"
            );
        }
    }
}
