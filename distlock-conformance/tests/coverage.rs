//! Every case of the suite shows that it can fail: a deliberately broken backend in
//! one of the `broken*.rs` tests is caught by it, with the failure that backend's bug
//! causes. The few cases no backend can fail are listed here with the reason; this
//! test fails when a case has neither, and when a listed case gains a broken backend
//! (so the list never hides one).

const BROKEN: &[&str] = &[
    include_str!("broken.rs"),
    include_str!("broken_fair.rs"),
    include_str!("broken_permits.rs"),
    include_str!("broken_quorums.rs"),
];

const BROKEN_STORES: &str = include_str!("broken_stores.rs");

/// Cases that check what `LockClient` or `LockBackendExt` do in core for every
/// backend: the backend cannot reach what they check, so no broken backend can fail
/// them (they still run on every backend, with its timing).
const CHECKS_CORE_ONLY: &[(&str, &str)] = &[
    (
        "client_validity_counts_from_the_successful_attempt",
        "core counts a lease's validity from the attempt that was granted; a backend reports only what its server did",
    ),
    (
        "reentrant_holds_count_and_the_last_release_frees",
        "re-entrant holds are counted by the client; the backend sees one lease",
    ),
    (
        "lease_validity_counted_from_before_the_request",
        "core counts validity from before the request (node-redlock #274 cannot be written as a backend)",
    ),
    (
        "set_rejects_bad_input",
        "the client checks a set's keys before it asks the backend anything",
    ),
    (
        "two_extends_in_flight_never_outlast_the_server",
        "core sends a guard's extends one after the other, whatever the backend (the core test two_extends_in_flight_never_leave_the_client_believing_past_the_server fails without it)",
    ),
    (
        "an_outage_costs_a_bounded_number_of_cleanups",
        "core retries a wait as the owner of an attempt whose outcome is unknown, under one cleanup, whatever the backend answers (the core test a_wait_through_time_outs_sends_one_cleanup fails without it)",
    ),
    (
        "latency_is_never_counted_as_validity",
        "core counts validity from before the request; a backend's answer carries no validity",
    ),
    (
        "a_resume_retried_after_a_lost_reply_keeps_its_term",
        "the cleanup an abandoned attempt arms runs in core, and core stops it when the same owner asks again, whatever the backend (the core test a_resume_retried_after_a_lost_reply_keeps_its_term fails without it)",
    ),
    (
        "holders_renew_at_a_bounded_rate_beside_a_churning_claimant",
        "core decides when a holder renews, and coalesces the checks its watch asks for, whatever the backend notifies (the core test holders_renew_at_a_bounded_rate_beside_a_churning_claimant fails without it)",
    ),
    (
        "a_sequencer_check_answered_after_the_lease_ran_out_is_stale",
        "core counts the lease a check's answer shows from before the request; a backend reports only what its server read (the core test a_sequencer_check_answered_after_the_lease_ran_out_is_stale fails without it)",
    ),
    (
        "a_cut_off_leader_loop_is_replaced_and_its_work_stopped",
        "the leader loop drops its work on the term's loss signal, which core gives; the broken permit stores have no links to cut",
    ),
];

/// Fenced-store cases that check what `FencedStoreExt` does in core for every store:
/// the store never sees what they send.
const STORE_CHECKS_CORE_ONLY: &[(&str, &str)] = &[(
    "a_lease_without_a_fence_is_refused",
    "core refuses FencingToken::NONE before any store sees it (check_fence; the core test a_lease_without_a_fence_cannot_write fails without it)",
)];

/// Whether a broken backend in `source` is caught by `case`: named in a `caught!`
/// line (`by case,`) or as an argument (`"case"`).
fn caught_in(source: &str, case: &str) -> bool {
    source.contains(&format!(" by {case},")) || source.contains(&format!("\"{case}\""))
}

#[test]
fn every_lock_case_has_a_broken_backend_or_a_reason() {
    let mut missing = Vec::new();
    let mut listed_but_caught = Vec::new();
    for case in distlock_conformance::cases() {
        let caught = BROKEN.iter().any(|source| caught_in(source, case.name()));
        let listed = CHECKS_CORE_ONLY
            .iter()
            .any(|(name, _)| *name == case.name());
        match (caught, listed) {
            (false, false) => missing.push(case.name()),
            (true, true) => listed_but_caught.push(case.name()),
            _ => {}
        }
    }
    assert!(
        missing.is_empty(),
        "cases with no broken backend that they catch: {missing:?}"
    );
    assert!(
        listed_but_caught.is_empty(),
        "cases listed as beyond any backend's reach, yet caught: {listed_but_caught:?}"
    );
    for (name, _) in CHECKS_CORE_ONLY {
        assert!(
            distlock_conformance::case(name).is_some(),
            "no case named {name}"
        );
    }
}

#[test]
fn every_fenced_store_case_has_a_broken_store() {
    let core_only = |name: &str| STORE_CHECKS_CORE_ONLY.iter().any(|(n, _)| *n == name);
    let missing: Vec<_> = distlock_conformance::fenced::cases()
        .iter()
        .map(|case| case.name())
        .filter(|name| !caught_in(BROKEN_STORES, name) && !core_only(name))
        .collect();
    assert!(
        missing.is_empty(),
        "fenced-store cases with no broken store that they catch: {missing:?}"
    );
    let listed_but_caught: Vec<_> = STORE_CHECKS_CORE_ONLY
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| caught_in(BROKEN_STORES, name))
        .collect();
    assert!(
        listed_but_caught.is_empty(),
        "store cases listed as beyond any store's reach, yet caught: {listed_but_caught:?}"
    );
    for (name, _) in STORE_CHECKS_CORE_ONLY {
        assert!(
            distlock_conformance::fenced::cases()
                .iter()
                .any(|case| case.name() == *name),
            "no store case named {name}"
        );
    }
}

/// The README's table names every case, so that each clause can be followed to the
/// case that checks it and the bug that case catches.
#[test]
fn the_readme_names_every_case() {
    let readme = include_str!("../README.md");
    let missing: Vec<_> = distlock_conformance::cases()
        .map(|case| case.name())
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "cases the README does not name: {missing:?}"
    );
}
