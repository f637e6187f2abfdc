//! A deterministic simulation of the distlock client under faults: the real
//! [`LockClient`](distlock_core::LockClient) and its lock kinds, on several simulated
//! processes, against one in-process backend behind a simulated network, with the
//! faults drawn from a seed. One seed is one schedule, replayed bit for bit; a range
//! of seeds is thousands of schedules a second.
//!
//! ```no_run
//! use distlock_core::MemoryBackend;
//! use distlock_sim::Simulation;
//!
//! let simulation = Simulation::new(MemoryBackend::new);
//! let summary = simulation.run_seeds(0..1_000, 2);
//! for failure in &summary.failures {
//!     eprintln!("{}", failure.explain());
//! }
//! assert_eq!(summary.failed, 0);
//! ```
//!
//! # The engine, and why
//!
//! Each run is one current-thread tokio runtime on a paused clock: every task of
//! every simulated process (the client's own renewal, cleanup and timer tasks
//! included) and the server's steps run on one thread, and time jumps to the next
//! timer whenever every task waits, so twenty simulated seconds take milliseconds.
//! A run is then a function of its inputs but for two generators: the client's
//! random bytes (owner tokens, jitter), which
//! [`distlock_core::testing::SeededRandomness`] seeds, and tokio's own (which ready
//! branch of a `select!` goes first, the order in which a watch channel wakes its
//! receivers), which the runtime's `rng_seed` seeds. That one is behind
//! `--cfg tokio_unstable`: build with `RUSTFLAGS="--cfg tokio_unstable"` or a
//! `.cargo/config.toml` that sets it, as this workspace's does ([`DETERMINISTIC`]
//! says whether it was). So the real client runs unmodified: no `cfg` in its code,
//! no mock clock, no fork of its logic.
//!
//! turmoil, the tokio team's simulator, was the other choice. It simulates hosts
//! with their own clocks over a simulated TCP, which suits a backend that speaks a
//! protocol; distlock's client speaks to its backend through a trait, so the network
//! here is a wrapper of that trait, which needs no socket, fails each step in the
//! ways a backend's step fails (a typed, retryable error), and hosts any in-process
//! backend, a third party's included, without a protocol of its own.
//!
//! # What a run does
//!
//! A run draws its kind from its seed ([`Kind`]: the fenced mutex racing (with
//! re-entrant holds), fair, and bounded by `hold_at_most`, the efficiency lock, a
//! semaphore, a read-write lock, sets of keys, the leader loop (a crashed leader
//! resuming its term from the token it wrote down), `run_once` jobs, and requests
//! to an in-process service through the tower layers `LimitLayer` and `LockLayer`),
//! then runs four processes for twenty simulated seconds and a quiet tail of six. Every request meets the faults of [`Faults`]: latency, delays
//! that reorder requests in flight, a pause of its process while it is in flight (the
//! reply read up to 2.5 s late), requests lost, replies lost after the server applied
//! the request, requests applied twice. At times drawn from the seed, processes are cut off (both ways, or
//! their replies only), stalled, or crashed (their tasks dropped with no release,
//! their link dead, so that nothing they left behind arrives) and restarted; the
//! server goes down for a while with its state kept, or, where the simulation was
//! told how ([`Simulation::restartable`]), restarts without it. Each process's clock
//! runs slow against the server's by a share of the declared drift drawn per process
//! ([`Faults::clock_drift`]: the server lets a lease go that much early). The
//! processes drop waits and work at arbitrary awaits.
//!
//! # What is checked
//!
//! Every answer the server gives to a grant or renewal must agree with the server
//! asked at that same instant, before anything else runs (a grant's lease there with
//! its fence, a key answered held indeed held, a renewed lease there, a lease answered
//! not held gone). A holder renews at most six times in any third of a second (its
//! scheduled renewal, and a check per quarter interval that changes to its key ask
//! for), whatever the traffic on its key. Where the backend keeps holders (so that a handoff's recipient can
//! be told), each key's fair queue is kept as the server's applied steps say it must
//! be, and every grant to a fair waiter, by its own step or handed over at a release,
//! must go to the first waiter whose place is live: none queued before it may still
//! have its place for certain, and a waiter that left the queue is never handed the
//! key. At each step a holder acts as holder, its guard must say it holds
//! and the server, asked at that instant, must agree (its lease with that fence, its permit within
//! the limit). Over the whole history ([`Violation`]): one holder at a time (at most
//! the limit for a semaphore, readers only beside readers), fences strictly
//! increasing from a hold to every hold granted after it ended, every wait ended by
//! its deadline, one `run_once` run per slot (crashed runners included), no step as
//! holder past a hold's bound, every step of a request's handler made under what its
//! layer holds (at most the limit in flight through `LimitLayer`, one handler per key
//! through `LockLayer`), a re-entry answered at once with the lease's own fence
//! (its end leaving the lease held), every term a leader loop led reported ended once
//! and in order by its `on_stopped_leading` callback (a term whose work failed, as
//! failed), a leader elected again once the faults stop, and
//! no leader left once the leader loops are shut down (each resigns).
//! Across a restart without state, what the backend's capabilities say it loses is
//! excused (a holder from before it may overlap one after it until its validity has
//! run out, a TTL at most), and nothing else: past that TTL, a holder whose lease is
//! gone must have been told, and fences must still increase. A failure's report names
//! the seed, and [`Simulation::shortest_failing`] the shortest prefix of its schedule
//! that still fails.
//!
//! # What is not simulated
//!
//! Clock drift is simulated as the server letting leases go early, within the drift
//! the links declare: a process's timers all run at one rate. A clock that steps is
//! not drawn: the client times every lease, wait and bound by the monotonic clock
//! (tokio's `Instant`), which does not step, and the wall clock only stamps holder
//! records, which no decision reads; skew between processes' wall clocks shows only in
//! when each fires a `run_once` slot, drawn as up to 500 ms late. A stalled process's own timers keep running (its network stalls,
//! not its threads). Change notifications reach a cut-off process (they are hints: every decision the
//! client makes on one is checked by a step that crosses the link). Of a bounded hold, the client's side is checked (no
//! step past the bound), not when the server frees the lease: a renewal stalled in
//! the process's network lands late.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod check;
mod faults;
mod history;
mod kind;
mod link;
mod process;
mod queue;
mod rng;
mod run;

pub use check::Violation;
pub use faults::Faults;
pub use history::{history_hash, Event, Proc, What};
pub use kind::Kind;
pub use link::{Counts, Link};
pub use run::{SeedReport, Simulation, Summary, DETERMINISTIC};
