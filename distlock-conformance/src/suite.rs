//! The runner both suites share (the lock suite on a [`Target`], the fenced-store suite
//! on a [`StoreTarget`](crate::fenced::StoreTarget)), the reports it makes, and the
//! test harness built on it.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::sync::RwLock;
use tokio::time::Instant;

use crate::case::{Case, ContractPoint};
use crate::cases::{CaseError, CaseResult, AREAS};
use crate::target::Target;

/// No case may run longer than this; a hang is a failure, never a stuck run.
const CASE_TIMEOUT: Duration = Duration::from_secs(240);

/// What a suite runs on, as the runner sees it: a [`Target`] (the lock suite) or a
/// [`StoreTarget`](crate::fenced::StoreTarget) (the fenced-store suite).
pub trait SuiteTarget: Send + Sync + Sized + 'static {
    /// The suite's cases, in the order the runner runs them.
    fn suite() -> Vec<&'static Case<Self>>;

    /// What is under test, by the name reports give it.
    fn subject(&self) -> String;

    /// Runs before a case's gate is read: a target may ask its parts what they offer.
    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Why `case` does not apply to this target whatever its gate says (the fence
    /// cases on an efficiency lock's run, say), or `None`.
    fn excludes(&self, case: &Case<Self>) -> Option<String> {
        let _ = case;
        None
    }

    /// The lock that gives a fault case the server alone: other cases hold it shared.
    /// `None` where no case faults the server.
    fn server_use(&self) -> Option<&RwLock<()>> {
        None
    }
}

impl<T: SuiteTarget> Case<T> {
    /// Why the case cannot run on `target`, or `None` when it can.
    pub fn skip_reason(&self, target: &T) -> Option<String> {
        (self.gate)(target).or_else(|| target.excludes(self))
    }
}

impl SuiteTarget for Target {
    fn suite() -> Vec<&'static Case<Self>> {
        cases().collect()
    }

    fn subject(&self) -> String {
        self.backend().name().to_owned()
    }

    fn prepare(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.probe_links())
    }

    fn server_use(&self) -> Option<&RwLock<()>> {
        Some(&self.server_use)
    }

    fn excludes(&self, case: &Case<Self>) -> Option<String> {
        if !(self.is_unfenced() && self.capabilities().unfenced_grants) {
            return None;
        }
        match case.point() {
            ContractPoint::Fencing => Some(
                "an efficiency lock's grants carry no fence on this backend (capabilities.unfenced_grants)"
                    .into(),
            ),
            ContractPoint::Election | ContractPoint::Semaphore | ContractPoint::ReadWrite => Some(
                "elections, semaphores and read-write locks are fenced whatever the client's options \
                 say; they run on the fenced lock's suite (this run turns every grant's fence off)"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// Every case of the lock suite, in the order the runner runs them (fault cases last).
pub fn cases() -> impl Iterator<Item = &'static Case> {
    AREAS.into_iter().flatten()
}

/// Finds a case by name.
pub fn case(name: &str) -> Option<&'static Case> {
    cases().find(|c| c.name() == name)
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
pub async fn run_case<T: SuiteTarget>(target: &T, case: &Case<T>) -> CaseReport {
    target.prepare().await;
    let (outcome, duration) = match (case.skip_reason(target), target.server_use()) {
        (Some(reason), _) => (Outcome::Skipped(reason), Duration::ZERO),
        (None, Some(server)) if case.fault() => {
            let _alone = server.write().await;
            timed((case.run)(target)).await
        }
        (None, Some(server)) => {
            let _shared = server.read().await;
            timed((case.run)(target)).await
        }
        (None, None) => timed((case.run)(target)).await,
    };
    CaseReport {
        name: case.name(),
        outcome,
        duration,
    }
}

/// Runs one case's future within the time limit, a panic counting as a failure.
async fn timed(run: impl Future<Output = CaseResult>) -> (Outcome, Duration) {
    let started = Instant::now();
    let outcome = match tokio::time::timeout(CASE_TIMEOUT, AssertUnwindSafe(run).catch_unwind())
        .await
    {
        Err(_) => Outcome::Failed(format!("the case did not finish within {CASE_TIMEOUT:?}")),
        Ok(Err(panic)) => Outcome::Failed(format!("the case panicked: {}", panic_message(&panic))),
        Ok(Ok(Ok(()))) => Outcome::Passed,
        Ok(Ok(Err(CaseError::Failed(msg)))) => Outcome::Failed(msg),
        Ok(Ok(Err(CaseError::Skipped(reason)))) => Outcome::Skipped(reason),
    };
    (outcome, started.elapsed())
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

/// Runs every case of `target`'s suite on it, one after another, and reports on each.
pub async fn run_suite<T: SuiteTarget>(target: &T) -> SuiteReport {
    let mut cases = Vec::new();
    for case in T::suite() {
        let report = run_case(target, case).await;
        tracing::info!(case = case.name(), outcome = ?report.outcome, duration = ?report.duration, "conformance case");
        cases.push(report);
    }
    SuiteReport {
        backend: target.subject(),
        cases,
    }
}

/// The main of a `harness = false` test target: builds the target once with `make`,
/// then runs every case of its suite as a test with libtest's command line and
/// output. Cases the target cannot run are reported as *ignored*, with the reason on
/// standard error — never as passed. Without `--test-threads`, four cases run at once.
///
/// Use it through [`conformance_main!`](crate::conformance_main) or
/// [`fenced_conformance_main!`](crate::fenced_conformance_main).
pub fn run_as_tests<T, F, Fut, E>(make: F) -> ExitCode
where
    T: SuiteTarget,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: fmt::Display,
{
    run_selected_as_tests(|_| true, make)
}

/// [`run_as_tests`] for the cases `select` picks, the others left out of the run (not
/// listed, not counted): for a second target that only some cases are about, such as
/// the quorum cases (`quorum_*`) on a cluster whose whole suite runs elsewhere.
///
/// ```ignore
/// // tests/quorum.rs, with `[[test]] name = "quorum" harness = false`
/// fn main() -> std::process::ExitCode {
///     distlock_conformance::run_selected_as_tests(
///         |case| case.name().starts_with("quorum_"),
///         || async { my_cluster_target().await },
///     )
/// }
/// ```
pub fn run_selected_as_tests<T, S, F, Fut, E>(select: S, make: F) -> ExitCode
where
    T: SuiteTarget,
    S: Fn(&Case<T>) -> bool,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, E>>,
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
    let target = match runtime.block_on(async {
        let target = make().await?;
        // A target's parts are asked what they offer before the gates are read.
        target.prepare().await;
        Ok::<_, E>(target)
    }) {
        Ok(target) => Arc::new(target),
        Err(e) => {
            eprintln!("conformance: cannot set up the target under test: {e}");
            return ExitCode::FAILURE;
        }
    };
    let trials = T::suite()
        .into_iter()
        .filter(|case| select(case))
        .map(|case| {
            let skip = case.skip_reason(&target);
            if let Some(reason) = &skip {
                eprintln!(
                    "conformance: {} cannot run on {}: {reason}",
                    case.name(),
                    target.subject()
                );
            }
            let (runtime, target) = (runtime.clone(), target.clone());
            Trial::test(case.name(), move || {
                match runtime.block_on(run_case(&*target, case)).outcome {
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
