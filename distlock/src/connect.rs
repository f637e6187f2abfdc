//! Choosing a backend by URL, so that a service swaps backends by changing one setting.

use std::fmt;
use std::sync::Arc;

use distlock_core::{redact_url, DynLockBackend, Error, ErrorKind, MemoryBackend, Result};

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message.into())
}

/// The URL schemes this build can connect to (each backend's feature adds its own).
pub fn schemes() -> Vec<&'static str> {
    let backends: [&[&'static str]; 4] = [
        &["memory"],
        #[cfg(feature = "redis")]
        distlock_redis::SCHEMES,
        #[cfg(not(feature = "redis"))]
        &[],
        #[cfg(feature = "postgres")]
        distlock_postgres::SCHEMES,
        #[cfg(not(feature = "postgres"))]
        &[],
        #[cfg(feature = "etcd")]
        distlock_etcd::SCHEMES,
        #[cfg(not(feature = "etcd"))]
        &[],
    ];
    backends.concat()
}

#[cfg(not(all(feature = "redis", feature = "postgres", feature = "etcd")))]
fn not_built(scheme: &str, feature: &str) -> Error {
    config_error(format!(
        "the {scheme}:// scheme needs distlock's `{feature}` feature, which this build lacks"
    ))
}

/// Connects to the backend a URL names, by its scheme:
///
/// | scheme | backend |
/// | --- | --- |
/// | `memory://` | a new in-process [`MemoryBackend`] |
/// | `redis://`, `rediss://`, `redis-cluster://` | [`RedisBackend`](distlock_redis::RedisBackend) on one server or a Redis Cluster (feature `redis`) |
/// | `redlock://`, `redlocks://` | [`RedlockBackend`](distlock_redis::RedlockBackend) over several Redis masters (feature `redis`) |
/// | `postgres://`, `postgresql://` | [`PostgresBackend`](distlock_postgres::PostgresBackend) (feature `postgres`) |
/// | `etcd://`, `etcds://` | [`EtcdBackend`](distlock_etcd::EtcdBackend) (feature `etcd`) |
///
/// The rest of the URL is the backend's own (see each backend's config). An unknown
/// scheme is an [`ErrorKind::Configuration`] error that names it; no error shows the
/// URL's password.
pub async fn connect(url: &str) -> Result<Arc<DynLockBackend>> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(config_error(format!(
            "{} is not a backend URL: expected scheme://..., with a scheme among {:?}",
            redact_url(url),
            schemes()
        )));
    };
    match scheme {
        "memory" => Ok(Arc::new(MemoryBackend::new())),
        "redis" | "rediss" | "redis-cluster" => {
            #[cfg(feature = "redis")]
            return Ok(Arc::new(distlock_redis::RedisBackend::connect(url).await?));
            #[cfg(not(feature = "redis"))]
            return Err(not_built(scheme, "redis"));
        }
        "redlock" | "redlocks" => {
            #[cfg(feature = "redis")]
            return Ok(Arc::new(
                distlock_redis::RedlockBackend::connect(url).await?,
            ));
            #[cfg(not(feature = "redis"))]
            return Err(not_built(scheme, "redis"));
        }
        "postgres" | "postgresql" => {
            #[cfg(feature = "postgres")]
            return Ok(Arc::new(
                distlock_postgres::PostgresBackend::connect(url).await?,
            ));
            #[cfg(not(feature = "postgres"))]
            return Err(not_built(scheme, "postgres"));
        }
        "etcd" | "etcds" => {
            #[cfg(feature = "etcd")]
            return Ok(Arc::new(distlock_etcd::EtcdBackend::connect(url).await?));
            #[cfg(not(feature = "etcd"))]
            return Err(not_built(scheme, "etcd"));
        }
        other => Err(config_error(format!(
            "unknown backend scheme {other:?}: this build knows {:?}",
            schemes()
        ))),
    }
}

/// A backend setting for a service's configuration (a file, or the environment):
/// one URL, so that swapping backends is changing one value.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock::Result<()> {
/// let config: distlock::BackendConfig = serde_json::from_str(r#"{ "url": "memory://" }"#).unwrap();
/// let backend = config.connect().await?;
/// assert_eq!(backend.name(), "memory");
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct BackendConfig {
    /// The backend's URL; see [`connect`].
    pub url: String,
}

impl BackendConfig {
    /// The setting from the environment variable `var`; a configuration error when it
    /// is unset or empty.
    pub fn from_env(var: &str) -> Result<Self> {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => Ok(BackendConfig { url }),
            _ => Err(config_error(format!(
                "the environment variable {var} holds no backend URL"
            ))),
        }
    }

    /// Connects to the backend; see [`connect`].
    pub async fn connect(&self) -> Result<Arc<DynLockBackend>> {
        connect(&self.url).await
    }
}

impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendConfig")
            .field("url", &redact_url(&self.url))
            .finish()
    }
}
