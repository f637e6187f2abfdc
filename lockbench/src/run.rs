//! What every part of a lockbench run shares: its mode, the exit codes, the error
//! type, connecting by URL, and progress lines.

use std::sync::Arc;

use distlock::DynLockBackend;

/// The exit code of a run in which a safety or contract check failed: a violation
/// the run saw on a backend (a torture check, a conformance case).
pub(crate) const EXIT_VIOLATION: u8 = 1;

/// The exit code of a run whose checks all held but whose harness could not do what
/// its mode promises: a server not started (with `--require-all`), a fault not
/// injected as often as promised, a scenario that could not be measured. (2 is a
/// command-line error.)
pub(crate) const EXIT_HARNESS: u8 = 3;

/// Any error of a measurement: the report shows its text.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long and how hard a run goes; each run sizes its work from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `--quick`: every check once, for CI.
    Quick,
    /// The default: every backend in both runs, within a coffee break.
    Standard,
    /// `--soak`: the long run, at least 100,000 lock operations per backend under
    /// faults.
    Soak,
}

impl Mode {
    /// The mode's name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Quick => "quick",
            Mode::Standard => "standard",
            Mode::Soak => "soak",
        }
    }
}

/// Connects to the backend a URL names, as a service would: `distlock::connect`.
pub(crate) async fn connect(url: &str) -> distlock::Result<Arc<DynLockBackend>> {
    distlock::connect(url).await
}

/// One progress line on stderr, naming the backend.
pub(crate) fn progress(backend: &str, what: &str) {
    eprintln!("lockbench [{backend}] {what}");
}
