//! Choosing a backend by URL, so that a service swaps backends by changing one setting.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use distlock_core::backend::redact_url;
use distlock_core::{DynLockBackend, Error, ErrorKind, LockBackend, MemoryBackend, Result};

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message.into())
}

/// One of distlock's own network backends: the feature that builds it and the URL
/// schemes it serves. [`BACKENDS`] is the one list of them: [`Connector::new`], the
/// hint for a scheme whose feature is off, [`schemes`] and the command line's help
/// are all read from it (a test checks each entry against its crate's own `SCHEMES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownBackend {
    /// The backend's name, as its crate's `LockBackend::name` gives it.
    pub name: &'static str,
    /// The facade's feature that builds it.
    pub feature: &'static str,
    /// The URL schemes it serves.
    pub schemes: &'static [&'static str],
    /// Whether this build has it (its feature is on).
    pub built: bool,
}

/// distlock's own network backends, whether this build has them or not; the
/// in-memory backend (`memory://`) is always there.
pub const BACKENDS: [KnownBackend; 4] = [
    KnownBackend {
        name: "redis",
        feature: "redis",
        schemes: &["redis", "rediss", "redis-cluster", "redlock", "redlocks"],
        built: cfg!(feature = "redis"),
    },
    KnownBackend {
        name: "postgres",
        feature: "postgres",
        schemes: &["postgres", "postgresql"],
        built: cfg!(feature = "postgres"),
    },
    KnownBackend {
        name: "etcd",
        feature: "etcd",
        schemes: &["etcd", "etcds"],
        built: cfg!(feature = "etcd"),
    },
    KnownBackend {
        name: "zookeeper",
        feature: "zookeeper",
        schemes: &["zookeeper", "zk"],
        built: cfg!(feature = "zookeeper"),
    },
];

/// The URL schemes this build can connect to: `memory`, and those of each backend
/// whose feature is on.
pub fn schemes() -> Vec<&'static str> {
    let mut all = vec!["memory"];
    for backend in BACKENDS.iter().filter(|b| b.built) {
        all.extend_from_slice(backend.schemes);
    }
    all
}

/// What connects to one URL scheme's backend.
type Factory = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Arc<DynLockBackend>>> + Send>>
        + Send
        + Sync,
>;

/// Which backend each URL scheme connects to: the backends of this build, and any a
/// service adds, its own or a third party's, so that those too are chosen by URL.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock::Result<()> {
/// use distlock::{Connector, MemoryBackend};
///
/// // A third party's backend joins under its own scheme.
/// let connector = Connector::new()
///     .with_backend(&["mine"], |_url| async { Ok(MemoryBackend::new()) });
/// let backend = connector.connect("mine://anything").await?;
/// assert_eq!(backend.name(), "memory");
/// assert!(connector.schemes().contains(&"mine".to_owned()));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connector {
    /// The schemes, in the order they were added; a later one wins.
    entries: Vec<(String, Factory)>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("schemes", &self.schemes())
            .finish()
    }
}

impl Default for Connector {
    fn default() -> Self {
        Connector::new()
    }
}

impl Connector {
    /// The backends of this build: `memory://`, and each backend whose feature is on
    /// (see [`connect`]).
    pub fn new() -> Self {
        let connector = Connector {
            entries: Vec::new(),
        }
        .with_backend(&["memory"], |_| async { Ok(MemoryBackend::new()) });
        #[cfg(feature = "redis")]
        let connector = connector.with_shared(distlock_redis::SCHEMES, |url| async move {
            distlock_redis::connect(&url).await
        });
        #[cfg(feature = "postgres")]
        let connector = connector.with_shared(distlock_postgres::SCHEMES, |url| async move {
            distlock_postgres::connect(&url).await
        });
        #[cfg(feature = "etcd")]
        let connector = connector.with_shared(distlock_etcd::SCHEMES, |url| async move {
            distlock_etcd::connect(&url).await
        });
        #[cfg(feature = "zookeeper")]
        let connector = connector.with_shared(distlock_zookeeper::SCHEMES, |url| async move {
            distlock_zookeeper::connect(&url).await
        });
        connector
    }

    /// Adds under `schemes` a backend `connect` makes already shared: what
    /// [`with_backend`](Self::with_backend) and each of this build's backends use.
    fn with_shared<F, Fut>(mut self, schemes: &[&str], connect: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<DynLockBackend>>> + Send + 'static,
    {
        let connect = Arc::new(connect);
        let factory: Factory = Arc::new(move |url| Box::pin(connect(url)));
        for scheme in schemes {
            self.entries.retain(|(s, _)| s != scheme);
            self.entries.push(((*scheme).to_owned(), factory.clone()));
        }
        self
    }

    /// Adds a backend under `schemes`: `connect` makes it from the whole URL. A scheme
    /// added before, by this build or an earlier call, now connects to this backend.
    pub fn with_backend<B, F, Fut>(self, schemes: &[&str], connect: F) -> Self
    where
        B: LockBackend + 'static,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<B>> + Send + 'static,
    {
        self.with_shared(schemes, move |url| {
            let made = connect(url);
            async move {
                let backend: Arc<DynLockBackend> = Arc::new(made.await?);
                Ok(backend)
            }
        })
    }

    /// The schemes it connects to, in the order they were added.
    pub fn schemes(&self) -> Vec<String> {
        self.entries.iter().map(|(s, _)| s.clone()).collect()
    }

    /// Connects to the backend `url` names, by its scheme. An unknown scheme is an
    /// [`ErrorKind::Configuration`] error that names it (and the feature that would
    /// add it, for one of distlock's own); no error shows the URL's password.
    pub async fn connect(&self, url: &str) -> Result<Arc<DynLockBackend>> {
        let Some((scheme, _)) = url.split_once("://") else {
            return Err(config_error(format!(
                "{} is not a backend URL: expected scheme://..., with a scheme among {:?}",
                redact_url(url),
                self.schemes()
            )));
        };
        if let Some((_, factory)) = self.entries.iter().find(|(s, _)| s == scheme) {
            return factory(url.to_owned()).await;
        }
        let feature = BACKENDS
            .iter()
            .find(|b| b.schemes.contains(&scheme))
            .map(|b| b.feature);
        Err(config_error(match feature {
            Some(feature) => format!(
                "the {scheme}:// scheme needs distlock's `{feature}` feature, which this build lacks"
            ),
            None => format!(
                "unknown backend scheme {scheme:?}: this build knows {:?}",
                self.schemes()
            ),
        }))
    }
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
/// | `zookeeper://`, `zk://` | [`ZooKeeperBackend`](distlock_zookeeper::ZooKeeperBackend) (feature `zookeeper`) |
///
/// The rest of the URL is the backend's own (see each backend's config). An unknown
/// scheme is an [`ErrorKind::Configuration`] error that names it; no error shows the
/// URL's password. Other backends (a third party's) join through a [`Connector`].
pub async fn connect(url: &str) -> Result<Arc<DynLockBackend>> {
    Connector::new().connect(url).await
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

    /// Connects to the backend through `connector`, which may know schemes beyond
    /// this build's.
    pub async fn connect_with(&self, connector: &Connector) -> Result<Arc<DynLockBackend>> {
        connector.connect(&self.url).await
    }
}

impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendConfig")
            .field("url", &redact_url(&self.url))
            .finish()
    }
}
