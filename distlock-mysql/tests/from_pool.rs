//! The whole conformance suite on a backend made from the service's own sqlx pool
//! ([`MySqlBackend::from_pool`]), against a real MariaDB: the lock settings from the
//! URL, the connection from the pool.

use distlock_mysql::sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use distlock_mysql::{MySqlBackend, MySqlConfig};

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::MariaDb,
    |url| async move {
        let config = MySqlConfig::from_url(&url)?;
        // As a service makes its pool (sqlx reads mysql:// URLs); lazily, so that wrong
        // credentials surface through the backend's first statement.
        let server = url
            .split('?')
            .next()
            .unwrap_or(&url)
            .replace("mariadb://", "mysql://");
        let options: MySqlConnectOptions = server.parse().map_err(|e| {
            distlock_core::Error::new(distlock_core::ErrorKind::Configuration, format!("{e}"))
        })?;
        let pool = MySqlPoolOptions::new()
            .max_connections(config.pool_size())
            .connect_lazy_with(options);
        MySqlBackend::from_pool(pool, config).await
    }
));
