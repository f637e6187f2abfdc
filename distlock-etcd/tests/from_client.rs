//! The whole conformance suite on a backend made from the service's own etcd client
//! ([`EtcdBackend::from_client`]), against a real etcd: the lock settings from the
//! URL, the connection from the client.

use distlock_core::{Error, ErrorKind};
use distlock_etcd::{EtcdBackend, EtcdConfig};

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::Etcd,
    |url| async move {
        let config = EtcdConfig::from_url(&url)?;
        // As a service makes its client.
        let client = distlock_etcd::etcd_client::Client::connect(config.endpoints(), None)
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        EtcdBackend::from_client(client, config).await
    }
));
