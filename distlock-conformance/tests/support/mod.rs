//! What the tests of broken backends share.

use std::fmt::Debug;

use distlock_conformance::{case, run_case, Outcome, Target};

/// Runs `case_name` on `target(bug)` (it must fail) and on `target(clean)`, the same
/// backend without the bug (it must pass).
pub(crate) async fn assert_caught<B: Debug + Copy>(
    target: impl Fn(B) -> Target,
    clean: B,
    bug: B,
    case_name: &str,
) {
    let case = case(case_name).unwrap_or_else(|| panic!("no case named {case_name}"));
    let report = run_case(&target(clean), case).await;
    assert_eq!(
        report.outcome,
        Outcome::Passed,
        "{case_name} fails even without the bug"
    );
    match run_case(&target(bug), case).await.outcome {
        Outcome::Failed(msg) => eprintln!("{bug:?} caught by {case_name}: {msg}"),
        other => panic!("{bug:?} was not caught by {case_name}: {other:?}"),
    }
}
