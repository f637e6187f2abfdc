//! Which faults a run draws, and how often.

use std::time::Duration;

use distlock_core::backend::ClockDrift;

/// The faults a simulated run draws from its seed, and their rates. Per request: a
/// latency, a delay (which reorders requests in flight), a pause of the process while
/// the request is in flight, a request lost, a reply lost after the server applied
/// the request, a request applied twice. Per run, at times
/// drawn from the seed: processes cut off both ways or one way, stalled (everything
/// they send and receive frozen, as a paused process), crashed (their tasks gone with
/// no release, their link dead) and restarted, the server down for a while with its
/// state kept, the server restarted without its state (where the simulation was given
/// a way to restart it: [`Simulation::restartable`](crate::Simulation::restartable)),
/// and work and waits dropped at an arbitrary await. And each process's clock runs
/// slow against the server's, by a share of `clock_drift` drawn per process: the
/// server lets a lease go that much before the holder's clock says its TTL has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// The one-way latency of each crossing, in milliseconds, low and high.
    pub latency_ms: (u64, u64),
    /// Per mille of requests delayed further, by up to `delay_max_ms`, one way.
    pub delay_per_mille: u32,
    /// The longest further delay.
    pub delay_max_ms: u64,
    /// Per mille of requests whose process pauses while they are in flight (a GC
    /// pause, a VM descheduled): the reply is read `pause_ms` late.
    pub pause_per_mille: u32,
    /// How long such a pause lasts, in milliseconds, low and high.
    pub pause_ms: (u64, u64),
    /// Per mille of requests lost before the server.
    pub lose_request_per_mille: u32,
    /// Per mille of replies lost after the server applied the request.
    pub lose_reply_per_mille: u32,
    /// Per mille of requests the server applies twice.
    pub duplicate_per_mille: u32,
    /// How long a client waits for a lost reply before its step fails with a timeout.
    pub response_timeout: Duration,
    /// How many process-level faults (cuts, stalls, crashes, server restarts) a run
    /// draws per 20 simulated seconds, at random times.
    pub process_faults: u32,
    /// Whether processes may crash (their leftover leases run out at their TTL).
    pub crashes: bool,
    /// Whether the server may restart without its state, where the simulation can
    /// restart it ([`Simulation::restartable`](crate::Simulation::restartable)).
    pub restarts: bool,
    /// How far each process's clock may run slow against the server's: a lease or
    /// permit granted or renewed for a TTL ends on the server a share of this
    /// allowance early (the share drawn per process, from none to all of it). The
    /// links declare it in their capabilities, on top of the server's own, so that the
    /// client leaves it out of every validity.
    pub clock_drift: ClockDrift,
}

impl Faults {
    /// Every fault, at rates that give each run of a few seconds several of each.
    pub const ALL: Faults = Faults {
        latency_ms: (1, 5),
        delay_per_mille: 50,
        delay_max_ms: 60,
        pause_per_mille: 5,
        pause_ms: (300, 2500),
        lose_request_per_mille: 30,
        lose_reply_per_mille: 30,
        duplicate_per_mille: 20,
        response_timeout: Duration::from_millis(250),
        process_faults: 6,
        crashes: true,
        restarts: true,
        clock_drift: ClockDrift::new(100_000, Duration::from_millis(10)),
    };

    /// No fault at all: latency only.
    pub const NONE: Faults = Faults {
        latency_ms: (1, 5),
        delay_per_mille: 0,
        delay_max_ms: 0,
        pause_per_mille: 0,
        pause_ms: (0, 0),
        lose_request_per_mille: 0,
        lose_reply_per_mille: 0,
        duplicate_per_mille: 0,
        response_timeout: Duration::from_millis(250),
        process_faults: 0,
        crashes: false,
        restarts: false,
        clock_drift: ClockDrift::NONE,
    };
}

impl Default for Faults {
    fn default() -> Self {
        Faults::ALL
    }
}
