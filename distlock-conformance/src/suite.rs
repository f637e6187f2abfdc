//! The case table, the runner that reports on it, and the test harness built on both.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::time::Instant;

use crate::cases::{self, CaseError, CaseResult};
use crate::target::Target;

/// No case may run longer than this; a hang is a failure, never a stuck run.
const CASE_TIMEOUT: Duration = Duration::from_secs(240);

type CaseFn = for<'a> fn(&'a Target) -> BoxFuture<'a, CaseResult>;
type Gate = fn(&Target) -> Option<String>;

/// One case of the suite.
pub struct Case {
    /// The case's name, as its function is named.
    pub name: &'static str,
    /// One line on what it checks.
    pub doc: &'static str,
    /// Whether it faults the server, and so must have it alone.
    pub fault: bool,
    gate: Gate,
    run: CaseFn,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("fault", &self.fault)
            .finish()
    }
}

impl Case {
    /// Why the case cannot run on `target`, or `None` when it can.
    pub fn skip_reason(&self, target: &Target) -> Option<String> {
        (self.gate)(target)
    }
}

fn always(_: &Target) -> Option<String> {
    None
}

fn needs_force_release(t: &Target) -> Option<String> {
    (!t.capabilities().force_release)
        .then(|| "the backend cannot force a release (capabilities.force_release)".into())
}

fn needs_notification(t: &Target) -> Option<String> {
    (!t.capabilities().change_notification)
        .then(|| "the backend has no change notification (capabilities.change_notification)".into())
}

fn needs_control(t: &Target) -> Option<String> {
    t.control()
        .is_none()
        .then(|| "no server control was given (Target::with_control)".into())
}

fn needs_connection_kill(t: &Target) -> Option<String> {
    match t.control() {
        None => needs_control(t),
        Some(c) if !c.can_kill_connections() => {
            Some("the server control cannot kill connections".into())
        }
        Some(_) => None,
    }
}

macro_rules! case_table {
    ($( $name:ident : $gate:ident, $fault:expr, $doc:literal; )*) => {
        /// Every case, in the order the runner runs them (fault cases last).
        pub static CASES: &[Case] = &[
            $( Case {
                name: stringify!($name),
                doc: $doc,
                fault: $fault,
                gate: $gate,
                run: |t| Box::pin(cases::$name(t)),
            }, )*
        ];
    };
}

case_table! {
    acquire_release_cycle: always, false, "Acquire, inspect, release and acquire again: the plain cycle works.";
    mutual_exclusion_under_contention: always, false, "Many tasks contend for one key: at no instant do two hold it, and fences increase.";
    release_by_non_owner_is_not_held: always, false, "A release by a non-owner answers not held and leaves the holder untouched.";
    release_after_expiry_is_not_held: always, false, "A holder whose lease expired cannot release the next holder's lease.";
    release_twice_is_not_held: always, false, "Releasing twice answers released then not held; a late retry spares the next holder.";
    release_racing_expiry_spares_the_next_holder: always, false, "A release racing the lease's expiry never deletes the holder that came next.";
    extend_after_expiry_fails_and_does_not_reacquire: always, false, "Extending an expired lease fails and does not re-acquire the free key.";
    extend_after_takeover_fails: always, false, "Extending after a takeover fails and leaves the new holder untouched.";
    extend_keeps_the_fence: always, false, "Extend keeps the fencing token, prolongs the lease, and can be repeated.";
    extend_racing_release_leaves_nothing: always, false, "Extend and release racing each other never leave the key behind.";
    expiry_frees_the_key_after_the_ttl_not_before: always, false, "An abandoned lease frees its key after its TTL, not before and not much later.";
    lease_validity_counted_from_before_the_request: always, false, "Validity is counted from before the request; a lease is never returned expired.";
    fencing_increases_across_release_and_reacquire: always, false, "Fences strictly increase across release and re-acquire.";
    fencing_increases_across_takeover: always, false, "A takeover after expiry gets a larger fence.";
    fencing_increases_over_many_keys: always, false, "Over many interleaved keys, each key's fences strictly increase.";
    bad_input_gives_typed_errors: always, false, "Bad keys and TTLs give typed errors; unknown keys are not held.";
    client_renewal_keeps_the_lease: always, false, "Auto-renewal keeps a lease alive across several TTLs.";
    client_lost_fires_when_the_lease_is_deleted: needs_force_release, false, "lost() fires when the lease is deleted behind the holder's back.";
    client_waiter_is_woken_by_the_release: needs_notification, false, "A waiter is woken by the release, not by its next poll.";
    client_validity_counts_from_the_successful_attempt: always, false, "A waited-for lease is valid from its successful attempt, not the first.";
    client_dropped_guard_releases: always, false, "Dropping a guard releases the lock in the background.";
    client_dropped_acquire_leaves_nothing: always, false, "A dropped waiting acquire leaves no lease behind.";
    fault_pause_beyond_ttl_signals_loss: needs_control, true, "A server paused beyond the TTL makes the holder learn it lost the lock, in time.";
    fault_short_pause_is_not_a_loss: needs_control, true, "A pause shorter than the validity is not a loss.";
    fault_restart_keeps_fences_and_declared_leases: needs_control, true, "A restart never makes a durable fence go backwards; leases survive as declared.";
    fault_killed_server_gives_typed_errors_then_recovers: needs_control, true, "A killed server gives typed errors in bounded time, and the backend recovers.";
    fault_killed_connections_do_not_stop_renewal: needs_connection_kill, true, "Renewal survives the server closing every connection.";
}

/// Finds a case by name.
pub fn case(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// How one case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The backend kept this point of the contract.
    Passed,
    /// The backend broke it; the message says how.
    Failed(String),
    /// The case could not run here; the reason says why. Not a pass.
    Skipped(String),
}

/// One case's result, for reports.
#[derive(Debug, Clone)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it ran.
    pub duration: Duration,
}

/// The whole suite's results on one backend.
#[derive(Debug, Clone)]
pub struct SuiteReport {
    /// The backend's name.
    pub backend: String,
    /// One report per case, in table order.
    pub cases: Vec<CaseReport>,
}

impl SuiteReport {
    /// How many cases passed, failed and were skipped.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.cases
            .iter()
            .fold((0, 0, 0), |(p, f, s), c| match c.outcome {
                Outcome::Passed => (p + 1, f, s),
                Outcome::Failed(_) => (p, f + 1, s),
                Outcome::Skipped(_) => (p, f, s + 1),
            })
    }
}

/// Runs one case on `target`, honouring its gate, its need for the server alone, and
/// the case time limit. A panic inside the case is a failure.
pub async fn run_case(target: &Target, case: &Case) -> CaseReport {
    let started = Instant::now();
    let outcome = match case.skip_reason(target) {
        Some(reason) => Outcome::Skipped(reason),
        None => {
            let run = AssertUnwindSafe((case.run)(target)).catch_unwind();
            let result = if case.fault {
                let _alone = target.server_use.write().await;
                tokio::time::timeout(CASE_TIMEOUT, run).await
            } else {
                let _shared = target.server_use.read().await;
                tokio::time::timeout(CASE_TIMEOUT, run).await
            };
            match result {
                Err(_) => {
                    Outcome::Failed(format!("the case did not finish within {CASE_TIMEOUT:?}"))
                }
                Ok(Err(panic)) => {
                    Outcome::Failed(format!("the case panicked: {}", panic_message(&panic)))
                }
                Ok(Ok(Ok(()))) => Outcome::Passed,
                Ok(Ok(Err(CaseError::Failed(msg)))) => Outcome::Failed(msg),
                Ok(Ok(Err(CaseError::Skipped(reason)))) => Outcome::Skipped(reason),
            }
        }
    };
    CaseReport {
        name: case.name,
        outcome,
        duration: started.elapsed(),
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

/// Runs every case on `target`, one after another, and reports on each.
pub async fn run_suite(target: &Target) -> SuiteReport {
    let mut cases = Vec::with_capacity(CASES.len());
    for case in CASES {
        let report = run_case(target, case).await;
        tracing::info!(case = case.name, outcome = ?report.outcome, duration = ?report.duration, "conformance case");
        cases.push(report);
    }
    SuiteReport {
        backend: target.backend().name().to_owned(),
        cases,
    }
}

/// The main of a `harness = false` test target: builds the target once with `make`,
/// then runs every case as a test with libtest's command line and output. Cases the
/// target cannot run are reported as *ignored*, with the reason on standard error —
/// never as passed. Without `--test-threads`, four cases run at once.
///
/// Use it through [`conformance_main!`](crate::conformance_main).
pub fn run_as_tests<F, Fut, E>(make: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Target, E>>,
    E: fmt::Display,
{
    let mut args = Arguments::from_args();
    if args.test_threads.is_none() {
        args.test_threads = Some(4);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            eprintln!("conformance: cannot start a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let target = match runtime.block_on(make()) {
        Ok(target) => Arc::new(target),
        Err(e) => {
            eprintln!("conformance: cannot set up the backend under test: {e}");
            return ExitCode::FAILURE;
        }
    };
    let trials = CASES
        .iter()
        .map(|case| {
            let skip = case.skip_reason(&target);
            if let Some(reason) = &skip {
                eprintln!(
                    "conformance: {} cannot run on {}: {reason}",
                    case.name,
                    target.backend().name()
                );
            }
            let (target, runtime) = (target.clone(), runtime.clone());
            Trial::test(case.name, move || {
                let report = runtime.block_on(run_case(&target, case));
                match report.outcome {
                    Outcome::Passed => Ok(()),
                    Outcome::Failed(msg) => Err(Failed::from(msg)),
                    Outcome::Skipped(reason) => {
                        Err(Failed::from(format!("cannot run here: {reason}")))
                    }
                }
            })
            .with_ignored_flag(skip.is_some())
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    // The target may own containers, whose removal on drop needs a runtime worker.
    let _ = runtime.block_on(async move { tokio::spawn(async move { drop(target) }).await });
    conclusion.exit_code()
}

/// Expands into the `main` of a `harness = false` test target that runs the whole
/// suite on the [`Target`](crate::Target) built by the given async expression.
///
/// ```ignore
/// // tests/conformance.rs, with `[[test]] name = "conformance" harness = false`
/// distlock_conformance::conformance_main!(async {
///     let backend = my_backend::connect("mystore://localhost").await?;
///     Ok::<_, my_backend::Error>(distlock_conformance::Target::new(std::sync::Arc::new(backend)))
/// });
/// ```
#[macro_export]
macro_rules! conformance_main {
    ($make:expr) => {
        fn main() -> ::std::process::ExitCode {
            $crate::run_as_tests(|| $make)
        }
    };
}
