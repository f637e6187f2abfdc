//! The whole conformance suite on a three-member ensemble whose leader was stopped:
//! the backend's URL still names all three members, and the fault cases pause,
//! restart and kill the two that are left.

use distlock_testservers::ZooKeeperEnsemble;
use distlock_zookeeper::ZooKeeperBackend;

distlock_conformance::conformance_main!(async {
    let mut ensemble = ZooKeeperEnsemble::start(3).await?;
    ensemble.stop_leader().await?;
    let url = |url: String| async move { ZooKeeperBackend::connect(&url).await };
    ensemble.target(url).await
});
