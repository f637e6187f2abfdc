//! The whole conformance suite on a backend made from the service's own sqlx pool
//! ([`PostgresBackend::from_pool`]), against a real PostgreSQL: the lock settings from
//! the URL, the connection from the pool.

use std::str::FromStr;

use distlock_core::{Error, ErrorKind};
use distlock_postgres::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use distlock_postgres::{PostgresBackend, PostgresConfig};

distlock_conformance::conformance_main!(distlock_testservers::target(
    &distlock_testservers::Postgres,
    |url| async move {
        let config = PostgresConfig::from_url(&url)?;
        let server = url.split('?').next().unwrap_or(&url);
        let options = PgConnectOptions::from_str(server)
            .map_err(|e| Error::new(ErrorKind::Configuration, e.to_string()))?;
        // As a service makes its pool; lazily, so that wrong credentials surface
        // through the backend's first statement.
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_size())
            .connect_lazy_with(options);
        PostgresBackend::from_pool(pool, config).await
    }
));
