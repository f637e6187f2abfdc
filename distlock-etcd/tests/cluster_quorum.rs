//! The suite's quorum cases on a three-member etcd cluster, every member running:
//! each fault hits a member by its role at the time (the leader where a case takes
//! down its first member, the followers after it), and a client's links to the members
//! are cut one by one. The rest of the suite runs on a cluster whose leader was
//! stopped (`tests/cluster.rs`).

use distlock_etcd::EtcdBackend;
use distlock_testservers::EtcdCluster;

fn main() -> std::process::ExitCode {
    distlock_conformance::run_selected_as_tests(
        |case| case.name().starts_with("quorum_"),
        || async {
            let cluster = EtcdCluster::start(3).await?;
            let url = |url: String| async move { EtcdBackend::connect(&url).await };
            cluster.target(url).await
        },
    )
}
