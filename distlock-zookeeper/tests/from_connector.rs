//! The whole conformance suite on a backend whose sessions are made from the
//! service's own connector ([`ZooKeeperBackend::from_connector`]), against a real
//! ZooKeeper: the lock settings and servers from the URL, the session settings from
//! the connector.

use std::time::Duration;

use distlock_zookeeper::zookeeper_client::Client;
use distlock_zookeeper::{ZooKeeperBackend, ZooKeeperConfig};

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::ZooKeeper,
    |url| async move {
        let config = ZooKeeperConfig::from_url(&url)?;
        // As a service makes its connector, with its own session settings.
        let connector = Client::connector()
            .with_session_timeout(Duration::from_secs(8))
            .with_connection_timeout(Duration::from_secs(2));
        ZooKeeperBackend::from_connector(connector, config).await
    }
));
