//! What every part of a lockbench run shares: its mode, the exit codes, the error
//! type, connecting by URL, and progress lines.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

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
    /// The default: every backend in both runs, in about 40 minutes with the build.
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

/// Writes a run's report and its data into `out` (made if missing): the Markdown as
/// `markdown.0`, the data as pretty JSON as `data.0`.
pub(crate) fn write_results(
    out: &std::path::Path,
    markdown: (&str, &str),
    data: (&str, &impl serde::Serialize),
) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join(markdown.0), markdown.1)?;
    std::fs::write(
        out.join(data.0),
        serde_json::to_string_pretty(data.1).unwrap_or_default(),
    )
}

/// When the run started, for the elapsed time on each progress line.
static STARTED: OnceLock<Instant> = OnceLock::new();

/// The rows the run goes through, in order, for "backend i of n".
static ROWS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Names the rows the run goes through, in order, and starts its clock.
pub(crate) fn plan_rows(rows: &[String]) {
    STARTED.get_or_init(Instant::now);
    *ROWS.lock().unwrap_or_else(|p| p.into_inner()) = rows.to_vec();
}

/// One progress line on stderr: the time since the run started, the backend and its
/// place among the run's rows, and what is happening.
pub(crate) fn progress(backend: &str, what: &str) {
    let elapsed = STARTED.get_or_init(Instant::now).elapsed().as_secs();
    let rows = ROWS.lock().unwrap_or_else(|p| p.into_inner());
    eprintln!("{}", progress_line(elapsed, backend, &rows, what));
}

/// What [`progress`] prints: `lockbench +1:05 [redis 2/8] conformance suite`.
fn progress_line(elapsed_secs: u64, backend: &str, rows: &[String], what: &str) -> String {
    let clock = format!("+{}:{:02}", elapsed_secs / 60, elapsed_secs % 60);
    match rows.iter().position(|row| row == backend) {
        Some(i) => format!(
            "lockbench {clock} [{backend} {}/{}] {what}",
            i + 1,
            rows.len()
        ),
        None => format!("lockbench {clock} [{backend}] {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::progress_line;

    #[test]
    fn a_progress_line_says_the_time_and_the_row_s_place() {
        let rows = ["memory".to_owned(), "redis".to_owned()];
        assert_eq!(
            progress_line(65, "redis", &rows, "conformance suite"),
            "lockbench +1:05 [redis 2/2] conformance suite"
        );
        assert_eq!(
            progress_line(3600, "rslock", &rows, "S2"),
            "lockbench +60:00 [rslock] S2"
        );
    }
}
