//! The whole conformance suite against a real ZooKeeper: a container started here, with
//! its fault controls, or the server `DISTLOCK_ZOOKEEPER_URL` names (no fault cases).

use distlock_zookeeper::ZooKeeperBackend;

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::ZooKeeper,
    |url| async move { ZooKeeperBackend::connect(&url).await }
));
