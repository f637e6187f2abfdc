//! The block this crate's README (and the conformance suite's) shows, built and run
//! here: `distlock/tests/docs.rs` checks that each document shows it word for word.

mod my_backend {
    pub(super) struct MyBackend;

    impl MyBackend {
        /// An in-process backend, fresh for each simulated run.
        #[allow(clippy::new_ret_no_self)]
        pub(super) fn new() -> distlock_core::MemoryBackend {
            distlock_core::MemoryBackend::new()
        }
    }
}

mod simulation_readme {
    use super::my_backend;

    // begin: simulation-readme
    // tests/simulation.rs
    #[test]
    fn every_kind_keeps_its_promises_under_faults() {
        let simulation = distlock_sim::Simulation::new(my_backend::MyBackend::new);
        let summary = simulation.run_seeds(0..500, 2);
        for failure in &summary.failures {
            eprintln!("{}", failure.explain());
        }
        assert_eq!(summary.failed, 0);
    }
    // end
}
