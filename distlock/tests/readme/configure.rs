// distlock/guides/configuration.md, "Three ways to configure a backend": each block between a `begin` and
// an `end` line is shown there word for word (tests/configure.rs checks it).
use std::sync::Arc;

use distlock::LockClient;

#[allow(dead_code)]
async fn by_url() -> distlock::Result<LockClient> {
    // begin: url
    // One string from the service's configuration; the scheme picks the backend.
    let backend = distlock::connect("postgres://app:s3cret@db.internal/app?table=billing_locks").await?;
    let client = LockClient::new(backend);
    // end
    Ok(client)
}

#[allow(dead_code)]
async fn typed() -> distlock::Result<LockClient> {
    // begin: typed
    use distlock::postgres::sqlx::postgres::PgConnectOptions;
    use distlock::postgres::{PostgresBackend, PostgresConfig};

    // The same settings, typed: sqlx's own connect options, the lock settings beside.
    let server = PgConnectOptions::new()
        .host("db.internal")
        .username("app")
        .password("s3cret")
        .database("app");
    let config = PostgresConfig::new(server)
        .with_table("billing_locks")
        .with_response_timeout(std::time::Duration::from_secs(2));
    let client = LockClient::new(Arc::new(PostgresBackend::connect_with(config).await?));
    // end
    Ok(client)
}

#[allow(dead_code)]
async fn from_what_the_service_has(
    pool: distlock::postgres::sqlx::PgPool,
    redis_client: distlock::redis::redis::Client,
    etcd_client: distlock::etcd::etcd_client::Client,
) -> distlock::Result<Vec<LockClient>> {
    // begin: own
    use distlock::etcd::{EtcdBackend, EtcdConfig};
    use distlock::postgres::{PostgresBackend, PostgresConfig};
    use distlock::redis::{RedisBackend, RedisConfig};

    // The service's own sqlx pool: no second pool; the lock settings only.
    let config = PostgresConfig::default().with_table("billing_locks");
    let on_postgres = PostgresBackend::from_pool(pool.clone(), config).await?;
    // Its redis client (server, credentials, TLS configured once).
    let config = RedisConfig::default().with_prefix("billing:");
    let on_redis = RedisBackend::from_client(redis_client.clone(), config).await?;
    // Its etcd client, shared.
    let config = EtcdConfig::default().with_prefix("billing/");
    let on_etcd = EtcdBackend::from_client(etcd_client.clone(), config).await?;
    // end
    Ok(vec![
        LockClient::new(Arc::new(on_postgres)),
        LockClient::new(Arc::new(on_redis)),
        LockClient::new(Arc::new(on_etcd)),
    ])
}

#[allow(dead_code)]
async fn lock_options(settings: &str) -> distlock::Result<LockClient> {
    // begin: options
    #[derive(serde::Deserialize)]
    struct Settings {
        lock_backend: distlock::BackendConfig,
        locks: distlock::LockOptions,
    }

    // `settings` is the service's configuration file, read as it reads the rest.
    let settings: Settings = serde_json::from_str(settings).expect("the settings");
    let backend = settings.lock_backend.connect().await?;
    let client = LockClient::with_options(backend, settings.locks)?;
    println!("leases last {:?} on {}", client.options().ttl(), client.backend().name());
    // end
    Ok(client)
}
