//! The suite's quorum cases on a three-member ZooKeeper ensemble, every member
//! running: each fault hits a member by its role at the time (the leader where a case
//! takes down its first member, the followers after it), and a client's links to the
//! members are cut one by one. The rest of the suite runs on an ensemble whose leader
//! was stopped (`tests/ensemble.rs`).

use distlock_testservers::ZooKeeperEnsemble;
use distlock_zookeeper::ZooKeeperBackend;

fn main() -> std::process::ExitCode {
    distlock_conformance::run_selected_as_tests(
        |case| case.name().starts_with("quorum_"),
        || async {
            let ensemble = ZooKeeperEnsemble::start(3).await?;
            let url = |url: String| async move { ZooKeeperBackend::connect(&url).await };
            ensemble.target(url).await
        },
    )
}
