//! The whole conformance suite on a three-member etcd cluster whose leader was
//! stopped: the backend's URL still names all three members, and the fault cases
//! pause, restart and kill the two that are left.

use distlock_etcd::EtcdBackend;
use distlock_testservers::EtcdCluster;

distlock_conformance::conformance_main!(async {
    let mut cluster = EtcdCluster::start(3).await?;
    cluster.stop_leader().await?;
    let url = |url: String| async move { EtcdBackend::connect(&url).await };
    cluster.target(url).await
});
