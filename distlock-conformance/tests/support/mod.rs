//! What the tests of broken backends share.

use std::fmt::Debug;

use distlock_conformance::{case, run_case, Outcome, Target};

/// Runs `case_name` on `target(bug)` and on `target(clean)`, the same backend without
/// the bug: the clean one must pass, and the broken one must fail with the failure
/// the bug causes, `expected` being part of the case's message (see [`check_failure`]).
pub(crate) async fn assert_caught<B: Debug + Copy>(
    target: impl Fn(B) -> Target,
    clean: B,
    bug: B,
    case_name: &str,
    expected: &str,
) {
    let case = case(case_name).unwrap_or_else(|| panic!("no case named {case_name}"));
    let report = run_case(&target(clean), case).await;
    assert_eq!(
        report.outcome,
        Outcome::Passed,
        "{case_name} fails even without the bug"
    );
    let outcome = run_case(&target(bug), case).await.outcome;
    check_failure(&format!("{bug:?}"), case_name, outcome, &[expected]);
}

/// A broken backend is caught only when its case failed, with a message that says
/// what the bug does (one of `expected` is part of it: a bug may show one of several
/// ways, as a race does): a case that ran out of time or panicked, or failed on
/// something else, has not shown that it catches the bug.
pub(crate) fn check_failure(bug: &str, case_name: &str, outcome: Outcome, expected: &[&str]) {
    let Outcome::Failed(msg) = outcome else {
        panic!("{bug} was not caught by {case_name}: {outcome:?}");
    };
    assert!(
        !msg.starts_with("the case did not finish within") && !msg.starts_with("the case panicked"),
        "{bug} made {case_name} fail without a finding of its own: {msg}"
    );
    assert!(
        expected.iter().any(|e| msg.contains(e)),
        "{bug} made {case_name} fail with another failure than the one it names \
         (expected one saying one of {expected:?}): {msg}"
    );
    eprintln!("{bug} caught by {case_name}: {msg}");
}
