//! The report's data: every figure of a run, as the JSON has it.

use serde::Serialize;

use crate::scenarios::{FloorRole, Takeover};
use crate::stats::Summary;

/// A floor, as reported.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FloorRow {
    pub(crate) name: String,
    pub(crate) role: FloorRole,
    pub(crate) summary: Summary,
}

/// The scenario names peers are measured in, as the report shows them.
pub(crate) const S1: &str = "S1 cycle";
/// S2, as the report names it.
pub(crate) const S2: &str = "S2 cycle under 32 clients";
/// S3, as the report names it.
pub(crate) const S3: &str = "S3 handoff, 16 waiters";

/// A peer library measured in one scenario on the same server.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PeerRow {
    pub(crate) peer: String,
    pub(crate) scenario: String,
    pub(crate) summary: Summary,
}

/// S1 and S3 of one kind beyond the mutex (semaphore, read-write lock, election).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KindRow {
    pub(crate) kind: String,
    pub(crate) s1: Summary,
    /// S3, for the kinds whose grant is exclusive.
    pub(crate) s3: Option<Summary>,
}

/// S2 at one concurrency: cycles per second of the client, the raw cycle floor and
/// rslock (on Redis), where each ran.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub(crate) struct SweepPoint {
    pub(crate) tasks: usize,
    pub(crate) client: Option<f64>,
    pub(crate) floor: Option<f64>,
    pub(crate) rslock: Option<f64>,
}

/// The conformance result of one backend.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Conformance {
    pub(crate) passed: usize,
    pub(crate) failed: Vec<(String, String)>,
    pub(crate) skipped: Vec<(String, String)>,
    /// How long the suite took on this backend.
    pub(crate) seconds: f64,
}

/// Everything measured on one backend.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct BackendRun {
    pub(crate) backend: String,
    /// How long this backend's part of the run took, its server's start included.
    pub(crate) seconds: f64,
    /// Where the server came from, or why it could not be started.
    pub(crate) server: String,
    pub(crate) started: bool,
    pub(crate) conformance: Option<Conformance>,
    /// Why the conformance suite did not run on this backend, when it was left out.
    pub(crate) suite_not_run: Option<String>,
    pub(crate) s1_client: Option<Summary>,
    pub(crate) s1_primitives: Option<Summary>,
    pub(crate) s2_throughput: Option<Summary>,
    /// S2 on the raw cycle floor, at the same concurrency and connection count.
    pub(crate) s2_floor: Option<Summary>,
    /// S2 on the fenced cycle's floor, where the backend has one.
    pub(crate) s2_fenced_floor: Option<Summary>,
    /// S1 on the efficiency lock (`LockOptions::with_fenced(false)`), where the
    /// backend grants it without a fence (`Capabilities::unfenced_grants`).
    pub(crate) s1_efficiency: Option<Summary>,
    /// S2 on the efficiency lock, where S1 ran on it.
    pub(crate) s2_efficiency: Option<Summary>,
    /// S2 on the floors that send distlock's own requests on the bare driver
    /// ([`FloorRole::Requests`]), where the backend has them.
    pub(crate) s2_request_floors: Vec<FloorRow>,
    /// Where the server's CPU time was read from, where it was measured.
    pub(crate) server_cpu_from: Option<&'static str>,
    /// S2 at each concurrency of the sweep.
    pub(crate) sweep: Vec<SweepPoint>,
    pub(crate) s3_handoff: Option<Summary>,
    /// S3 with each waiter on a client of its own, racing.
    pub(crate) s3_racing: Option<Summary>,
    /// S3 with each waiter on a client of its own, in fair mode; `None` where the
    /// backend has none.
    pub(crate) s3_fair: Option<Summary>,
    /// Whether a release handed the lock to the head of the queue in fair mode
    /// (`FairBackend::handoffs`), rather than waking it to ask.
    pub(crate) fair_handoff: bool,
    pub(crate) s4_takeover: Option<Takeover>,
    /// S1 and S3 of each kind beyond the mutex, where the backend has permits.
    pub(crate) kinds: Vec<KindRow>,
    /// Several keys under one lock: S1 of a two-key set, and opposite orders.
    pub(crate) sets: Option<crate::sets::SetRow>,
    /// The floors measured, each with its role (one round trip, the raw lock cycle).
    pub(crate) floors: Vec<FloorRow>,
    /// Peer libraries on the same server, in the same scenarios.
    pub(crate) peers: Vec<PeerRow>,
    /// How many lock operations (each a write on the server) the raw cycle floor does.
    pub(crate) floor_cycle_ops: f64,
    /// What the S4 target allows past the TTL, in milliseconds.
    pub(crate) takeover_allowance_ms: f64,
    /// S5: what the server keeps of many distinct lock names.
    pub(crate) storage: Option<crate::storage::Storage>,
    /// S6: requests through the tower layer, beside the bare handler and the bare lock.
    pub(crate) layer: Option<crate::layer::LayerRow>,
    pub(crate) errors: Vec<String>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) mode: String,
    pub(crate) unix_time: u64,
    pub(crate) cpus: usize,
    pub(crate) backends: Vec<BackendRun>,
}

impl BackendRun {
    /// The first floor: one round trip.
    pub(crate) fn round_trip(&self) -> Option<&Summary> {
        self.floor(FloorRole::RoundTrip)
    }

    /// The raw lock cycle's floor.
    pub(crate) fn cycle_floor(&self) -> Option<&Summary> {
        self.floor(FloorRole::Cycle)
    }

    /// The fenced cycle's floor, where the backend has one.
    pub(crate) fn fenced_floor(&self) -> Option<&Summary> {
        self.floor(FloorRole::FencedCycle)
    }

    fn floor(&self, role: FloorRole) -> Option<&Summary> {
        self.floors
            .iter()
            .find(|f| f.role == role)
            .map(|f| &f.summary)
    }
}
