//! Choosing a backend by URL, so that a service swaps backends by changing one setting.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use distlock_core::backend::{encode, is_secret_name, redact_url, Descriptor};
use distlock_core::{DynLockBackend, Error, ErrorKind, LockBackend, MemoryBackend, Result};

fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Configuration, message.into())
}

/// One of distlock's own network backends, whether this build has it or not: the
/// facade's feature that builds it and the URL schemes it serves. [`BACKENDS`] lists
/// them all, for what a build must say of a backend it lacks (the feature to turn
/// on); what a build has is its crates' own [`Descriptor`]s ([`descriptors`]), which
/// [`Connector::new`], [`schemes`] and the command line read (a test checks each
/// entry here against its crate's descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
/// in-memory backend (`memory://`) is always there. A slice: a release that adds a
/// backend adds an entry, and breaks no one.
pub const BACKENDS: &[KnownBackend] = &[
    KnownBackend {
        name: "redis",
        feature: "redis",
        schemes: &[
            "redis",
            "rediss",
            "redis-cluster",
            "redis-sentinel",
            "redlock",
            "redlocks",
        ],
        built: cfg!(feature = "redis"),
    },
    KnownBackend {
        name: "postgres",
        feature: "postgres",
        schemes: &["postgres", "postgresql"],
        built: cfg!(feature = "postgres"),
    },
    KnownBackend {
        name: "mysql",
        feature: "mysql",
        schemes: &["mysql", "mariadb"],
        built: cfg!(feature = "mysql"),
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

/// The descriptors of this build's backends (each crate's `DESCRIPTOR`: its schemes,
/// the feature each needs, its default port, how to connect, and the tables it keeps),
/// in [`BACKENDS`]' order; `memory://` is not among them.
pub fn descriptors() -> Vec<Descriptor> {
    #[allow(unused_mut)]
    let mut built = Vec::with_capacity(BACKENDS.len());
    #[cfg(feature = "redis")]
    built.push(distlock_redis::DESCRIPTOR);
    #[cfg(feature = "postgres")]
    built.push(distlock_postgres::DESCRIPTOR);
    #[cfg(feature = "mysql")]
    built.push(distlock_mysql::DESCRIPTOR);
    #[cfg(feature = "etcd")]
    built.push(distlock_etcd::DESCRIPTOR);
    #[cfg(feature = "zookeeper")]
    built.push(distlock_zookeeper::DESCRIPTOR);
    built
}

/// The URL schemes this build can connect to: `memory`, and those of each backend
/// whose feature is on, less those that need a feature this build lacks
/// (`redis-cluster://` needs `redis-cluster`; `redis-sentinel://`, `redis-sentinel`;
/// `rediss://` and `redlocks://`,
/// `redis-tls`; `etcds://`, `etcd-tls`).
pub fn schemes() -> Vec<&'static str> {
    let mut all = vec!["memory"];
    for backend in descriptors() {
        all.extend(backend.built_schemes());
    }
    all
}

/// The facade's feature that would let this build connect to `scheme`, a scheme of
/// one of distlock's own backends: the backend's, or, for a scheme of a built backend
/// that needs one of its crate's features, the facade's feature for it
/// (`{backend}-{feature}`, as `redis-tls`).
fn feature_for(scheme: &str) -> Option<String> {
    let known = BACKENDS.iter().find(|b| b.schemes.contains(&scheme))?;
    let needs = descriptors()
        .into_iter()
        .filter(|d| d.name() == known.name)
        .flat_map(|d| d.schemes().iter())
        .find(|s| s.name() == scheme)
        .and_then(|s| s.feature());
    Some(match needs {
        Some(feature) => format!("{}-{feature}", known.feature),
        None => known.feature.to_owned(),
    })
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
    /// The backends of this build: `memory://`, and each backend whose feature is on,
    /// under the schemes [`schemes`] lists (see [`connect`]).
    pub fn new() -> Self {
        let connector = Connector {
            entries: Vec::new(),
        }
        .with_backend(&["memory"], |_| async { Ok(MemoryBackend::new()) });
        descriptors().iter().fold(connector, |connector, backend| {
            connector.with_descriptor(backend)
        })
    }

    /// Adds a backend crate's [`Descriptor`] (its `DESCRIPTOR`), under each scheme
    /// this build of it serves: how [`Connector::new`] adds distlock's own, and how a
    /// third party's crate that declares one joins.
    pub fn with_descriptor(self, backend: &Descriptor) -> Self {
        let schemes: Vec<&str> = backend.built_schemes().collect();
        self.with_shared(&schemes, backend.connect_fn())
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
        Err(config_error(match feature_for(scheme) {
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
/// | `redis://`, `rediss://`, `redis-cluster://`, `redis-sentinel://` | [`RedisBackend`](distlock_redis::RedisBackend) on one server (feature `redis`; `redis-tls` for `rediss://`), a Redis Cluster (feature `redis-cluster`) or the master behind Redis Sentinel (feature `redis-sentinel`) |
/// | `redlock://`, `redlocks://` | [`RedlockBackend`](distlock_redis::RedlockBackend) over several Redis masters (feature `redis`) |
/// | `postgres://`, `postgresql://` | [`PostgresBackend`](distlock_postgres::PostgresBackend) (feature `postgres`) |
/// | `mysql://`, `mariadb://` | [`MySqlBackend`](distlock_mysql::MySqlBackend) on MySQL or MariaDB (feature `mysql`) |
/// | `etcd://`, `etcds://` | [`EtcdBackend`](distlock_etcd::EtcdBackend) (feature `etcd`) |
/// | `zookeeper://`, `zk://` | [`ZooKeeperBackend`](distlock_zookeeper::ZooKeeperBackend) (feature `zookeeper`) |
///
/// The rest of the URL is the backend's own (see each backend's config). An unknown
/// scheme is an [`ErrorKind::Configuration`] error that names it; no error shows the
/// URL's password. Other backends (a third party's) join through a [`Connector`].
pub async fn connect(url: &str) -> Result<Arc<DynLockBackend>> {
    Connector::new().connect(url).await
}

/// A backend setting for a service's configuration (a file, or the environment), so
/// that swapping backends is changing this one setting. Two forms, for two styles of
/// configuration file:
///
/// - **one URL**: `{ "url": "postgres://app:s3cret@db/app?table=billing_locks" }`;
/// - **its parts**, each a field, as configuration files usually spell a server: the
///   backend's URL scheme, its hosts, credentials, path and options.
///
/// With the `serde` feature:
///
/// ```
/// # #[cfg(not(feature = "serde"))] fn main() {}
/// # #[cfg(feature = "serde")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock::Result<()> {
/// let by_url: distlock::BackendConfig = serde_json::from_str(r#"{ "url": "memory://" }"#).unwrap();
/// assert_eq!(by_url.connect().await?.name(), "memory");
///
/// // The same settings as parts (shown as JSON; TOML or YAML through serde alike).
/// let by_parts: distlock::BackendConfig = serde_json::from_str(r#"{
///     "backend": "postgres",
///     "hosts": ["db.internal:5433"],
///     "user": "app",
///     "password": "p+w&d",
///     "path": "app",
///     "options": { "table": "billing_locks", "response_timeout_ms": 2000 }
/// }"#).unwrap();
/// assert_eq!(
///     by_parts.to_url()?,
///     "postgres://app:p%2Bw%26d@db.internal:5433/app?table=billing_locks&response_timeout_ms=2000"
/// );
/// # Ok(()) }
/// ```
///
/// The parts become a URL (each percent-encoded as needed, so a password is written
/// as it is), which the backend reads as it reads any URL: the same defaults, and the
/// same configuration error for an option it does not know, naming it and the valid
/// ones. A field this type does not know is refused when the configuration is read,
/// naming the fields it knows. `Debug` never shows the password.
#[derive(Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[non_exhaustive]
pub struct BackendConfig {
    /// The backend's whole URL (see [`connect`]); then no other field is given.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub url: Option<String>,
    /// The backend, by its URL scheme (`redis`, `postgres`, `mysql`, `etcd`, `zookeeper`,
    /// `redlock`, `redis-cluster`, `memory`, ... as in [`connect`]'s table), when the
    /// setting is given in parts.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub backend: Option<String>,
    /// The servers, each `host` or `host:port` (an IPv6 host in brackets); each port
    /// defaults to its server's own.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty")
    )]
    pub hosts: Vec<String>,
    /// The user name, as written.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub user: Option<String>,
    /// The password, as written: it is percent-encoded into the URL here.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub password: Option<String>,
    /// The URL's path, without its leading `/`: PostgreSQL's database, Redis's
    /// database number, ZooKeeper's root node.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub path: Option<String>,
    /// The backend's options (its config type lists them), each a string, a number
    /// or a boolean, in the order given.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty", with = "ordered")
    )]
    pub options: Vec<(String, OptionValue)>,
}

/// One option's value in a [`BackendConfig`] given in parts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "serde", serde(untagged))]
#[non_exhaustive]
pub enum OptionValue {
    /// `true` or `false`.
    Bool(bool),
    /// A whole number (a time-out in milliseconds, a count).
    Number(i64),
    /// Any other value, as written.
    Text(String),
}

impl From<bool> for OptionValue {
    fn from(value: bool) -> Self {
        OptionValue::Bool(value)
    }
}

impl From<i64> for OptionValue {
    fn from(value: i64) -> Self {
        OptionValue::Number(value)
    }
}

impl From<&str> for OptionValue {
    fn from(value: &str) -> Self {
        OptionValue::Text(value.to_owned())
    }
}

impl From<String> for OptionValue {
    fn from(value: String) -> Self {
        OptionValue::Text(value)
    }
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Number(n) => write!(f, "{n}"),
            OptionValue::Text(t) => f.write_str(t),
        }
    }
}

/// The options as a map in the configuration file, kept in the order written.
#[cfg(feature = "serde")]
mod ordered {
    use std::fmt;

    use serde::de::{MapAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};

    use super::OptionValue;

    pub(super) fn serialize<S: Serializer>(
        options: &[(String, OptionValue)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(options.len()))?;
        for (name, value) in options {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, OptionValue)>, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = Vec<(String, OptionValue)>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of option names to strings, numbers or booleans")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::new();
                while let Some(pair) = map.next_entry()? {
                    pairs.push(pair);
                }
                Ok(pairs)
            }
        }
        d.deserialize_map(Pairs)
    }
}

impl BackendConfig {
    /// The setting as one URL.
    pub fn from_url(url: impl Into<String>) -> Self {
        BackendConfig {
            url: Some(url.into()),
            ..Default::default()
        }
    }

    /// The setting in parts, for the backend of URL scheme `backend`; the other parts
    /// are added with the `with_` methods.
    ///
    /// ```
    /// use distlock::BackendConfig;
    ///
    /// let config = BackendConfig::from_parts("postgres")
    ///     .with_host("db.internal:5433")
    ///     .with_user("app")
    ///     .with_password("p+w&d")
    ///     .with_path("app")
    ///     .with_option("table", "billing_locks");
    /// assert_eq!(
    ///     config.to_url().unwrap(),
    ///     "postgres://app:p%2Bw%26d@db.internal:5433/app?table=billing_locks"
    /// );
    /// ```
    pub fn from_parts(backend: impl Into<String>) -> Self {
        BackendConfig {
            backend: Some(backend.into()),
            ..Default::default()
        }
    }

    /// One more server, `host` or `host:port` (an IPv6 host in brackets).
    pub fn with_host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into());
        self
    }

    /// The user name.
    pub fn with_user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The password, as written.
    pub fn with_password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The URL's path, without its leading `/`.
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// One more backend option, after those already given.
    pub fn with_option(mut self, name: impl Into<String>, value: impl Into<OptionValue>) -> Self {
        self.options.push((name.into(), value.into()));
        self
    }

    /// The setting from the environment variable `var`, as one URL; a configuration
    /// error when it is unset or empty.
    pub fn from_env(var: &str) -> Result<Self> {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => Ok(BackendConfig::from_url(url)),
            _ => Err(config_error(format!(
                "the environment variable {var} holds no backend URL"
            ))),
        }
    }

    /// The URL the setting makes: `url` as given, or the parts, each percent-encoded.
    /// A configuration error when it gives both forms, or neither.
    pub fn to_url(&self) -> Result<String> {
        let parts = [
            ("backend", self.backend.is_some()),
            ("hosts", !self.hosts.is_empty()),
            ("user", self.user.is_some()),
            ("password", self.password.is_some()),
            ("path", self.path.is_some()),
            ("options", !self.options.is_empty()),
        ];
        let given: Vec<&str> = parts.iter().filter(|p| p.1).map(|p| p.0).collect();
        let Some(scheme) = &self.backend else {
            return match &self.url {
                Some(url) => Ok(url.clone()),
                None if given.is_empty() => Err(config_error(
                    "the backend setting is empty: give `url`, or `backend` and its parts",
                )),
                None => Err(config_error(format!(
                    "the backend setting gives {} but no `backend` (its URL scheme, one of {:?})",
                    given.join(", "),
                    schemes()
                ))),
            };
        };
        if self.url.is_some() {
            return Err(config_error(format!(
                "the backend setting gives both `url` and {}: give one form",
                given.join(", ")
            )));
        }
        let mut url = format!("{scheme}://");
        match (&self.user, &self.password) {
            (Some(user), Some(password)) => {
                url.push_str(&format!("{}:{}@", encode(user), encode(password)))
            }
            (Some(user), None) => url.push_str(&format!("{}@", encode(user))),
            (None, Some(password)) => url.push_str(&format!(":{}@", encode(password))),
            (None, None) => {}
        }
        url.push_str(&self.hosts.join(","));
        if let Some(path) = &self.path {
            let segments: Vec<String> = path
                .trim_start_matches('/')
                .split('/')
                .map(encode)
                .collect();
            url.push('/');
            url.push_str(&segments.join("/"));
        }
        for (i, (name, value)) in self.options.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{}={}", encode(name), encode(&value.to_string())));
        }
        Ok(url)
    }

    /// Connects to the backend; see [`connect`].
    pub async fn connect(&self) -> Result<Arc<DynLockBackend>> {
        connect(&self.to_url()?).await
    }

    /// Connects to the backend through `connector`, which may know schemes beyond
    /// this build's.
    pub async fn connect_with(&self, connector: &Connector) -> Result<Arc<DynLockBackend>> {
        connector.connect(&self.to_url()?).await
    }
}

impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("BackendConfig");
        if let Some(url) = &self.url {
            d.field("url", &redact_url(url));
        }
        if let Some(backend) = &self.backend {
            d.field("backend", backend)
                .field("hosts", &self.hosts)
                .field("user", &self.user)
                .field("password", &self.password.as_ref().map(|_| "***"))
                .field("path", &self.path);
            let options: Vec<String> = self
                .options
                .iter()
                .map(|(name, value)| {
                    if is_secret_name(name) {
                        format!("{name}=***")
                    } else {
                        format!("{name}={value}")
                    }
                })
                .collect();
            d.field("options", &options);
        }
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(scheme: &str) -> BackendConfig {
        BackendConfig {
            backend: Some(scheme.into()),
            ..Default::default()
        }
    }

    #[test]
    fn parts_make_the_url_each_part_encoded() {
        let config = BackendConfig {
            hosts: vec!["h1".into(), "[::1]:2380".into()],
            user: Some("a@b".into()),
            password: Some("p+w&d%@x".into()),
            path: Some("/svc/locks".into()),
            options: vec![
                ("response_timeout_ms".into(), OptionValue::Number(400)),
                ("tls".into(), OptionValue::Bool(true)),
                ("prefix".into(), OptionValue::Text("a b&c".into())),
            ],
            ..parts("zookeeper")
        };
        assert_eq!(
            config.to_url().expect("url"),
            "zookeeper://a%40b:p%2Bw%26d%25%40x@h1,[::1]:2380/svc/locks?response_timeout_ms=400&tls=true&prefix=a%20b%26c"
        );
        assert_eq!(parts("memory").to_url().expect("url"), "memory://");
        let shown = format!("{config:?}");
        assert!(!shown.contains("p+w") && shown.contains("***"), "{shown}");
    }

    #[test]
    fn both_forms_or_neither_or_parts_without_a_backend_are_refused() {
        let both = BackendConfig {
            url: Some("memory://".into()),
            ..parts("memory")
        };
        let none = BackendConfig::default();
        let headless = BackendConfig {
            hosts: vec!["h".into()],
            ..Default::default()
        };
        for (config, says) in [
            (both, "give one form"),
            (none, "is empty"),
            (headless, "gives hosts but no `backend`"),
        ] {
            let err = config.to_url().expect_err(says);
            assert_eq!(err.kind(), ErrorKind::Configuration);
            assert!(err.to_string().contains(says), "{err}");
        }
    }

    #[test]
    fn a_secret_option_is_hidden_in_debug() {
        let config = BackendConfig {
            options: vec![("password".into(), OptionValue::Text("s3cret".into()))],
            ..parts("redis")
        };
        assert!(!format!("{config:?}").contains("s3cret"));
        let config = BackendConfig::from_url("redis://:s3cret@h");
        assert!(!format!("{config:?}").contains("s3cret"));
    }
}
