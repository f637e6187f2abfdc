//! The fenced-store suite on a real ZooKeeper: a container started here, or the
//! server `DISTLOCK_ZOOKEEPER_URL` names.

use distlock_zookeeper::fenced::ZooKeeperStore;
use distlock_zookeeper::ZooKeeperBackend;

distlock_conformance::fenced_conformance_main!(distlock_testservers::store_target(
    &distlock_testservers::ZooKeeper,
    |url| async move { Ok(ZooKeeperStore::new(&ZooKeeperBackend::connect(&url).await?)) }
));
