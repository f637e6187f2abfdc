//! The whole conformance suite on a backend made from the service's own redis client
//! ([`RedisBackend::from_client`]), against a real Redis: the lock settings from the
//! URL, the server and credentials from the client.

use distlock_core::{Error, ErrorKind};
use distlock_redis::{RedisBackend, RedisConfig};

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::Redis,
    |url| async move {
        let config = RedisConfig::from_url(&url)?;
        let server = url.split('?').next().unwrap_or(&url);
        let client = distlock_redis::redis::Client::open(server)
            .map_err(|e| Error::new(ErrorKind::Configuration, e.to_string()))?;
        RedisBackend::from_client(client, config).await
    }
));
