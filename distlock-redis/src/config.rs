//! [`RedisConfig`]: what a `redis://` or `rediss://` URL says.

use std::fmt;
use std::time::Duration;

use std::str::FromStr;

use distlock_core::backend::ClockDrift;
use distlock_core::backend::{ConnectionUrl, Endpoint, Options, Scheme};
use distlock_core::{Error, Result};

/// Where and how to reach Redis: built from a URL ([`from_url`](Self::from_url), or
/// `str::parse`), or typed ([`RedisConfig::new`] and the `with_` setters); the same
/// settings either way.
///
/// `redis[s]://[user][:password]@host[:port][/db][?prefix=..&wait_replicas=..&wait_timeout_ms=..&response_timeout_ms=..&connect_timeout_ms=..]`
///
/// or, for a Redis Cluster, `redis-cluster://[user][:password]@host1[:port],host2[:port],...[?options]`:
/// the cluster's seeds (one is enough to find the others), with the same credentials
/// and options, database 0 only, no `wait_replicas` and no TLS.
///
/// or, for a master with replicas behind Redis Sentinel (this crate's `sentinel`
/// feature), `redis-sentinel://[user][:password]@sentinel1[:port],sentinel2[:port],...[/db]?master=<name>[&options]`:
/// the Sentinels (port 26379 unless given), asked in turn which server is the master
/// they monitor under `name`; the credentials, database and options are the data
/// servers', every option of one server applies (`wait_replicas` too), and the
/// Sentinels themselves are reached without credentials or TLS. The backend follows
/// a failover: see the crate docs on Sentinel for what one can cost.
///
/// - the port is 6379 unless given; user and password are percent-encoded where they
///   hold a reserved character (`%40` for `@`, say); a raw `+` stays a `+`;
/// - `rediss://` is TLS (needs this crate's `tls` feature): the server's certificate
///   is checked against the URL's host, trusting the system's roots, or only the CA in
///   `ca_file` (a PEM file) where given; `cert_file` and `key_file` (PEM) present a
///   client certificate (tested with `ca_file`; the default roots and client
///   certificates are not exercised by this crate's tests). A certificate the trusted
///   CAs did not sign is a configuration error at connect;
/// - user and password are Redis ACL credentials (or `requirepass` with no user);
/// - `db` is the database number;
/// - `prefix` (default `distlock:`) is put before every key this backend writes;
/// - `wait_replicas` (default 0) makes every acquire and extend also `WAIT` for that
///   many replicas, in the same round trip (see the crate docs on replication);
/// - `wait_timeout_ms` (default 100) bounds that wait;
/// - `response_timeout_ms` (default 5000) and `connect_timeout_ms` (default 3000) bound
///   each command and each connection attempt;
/// - `fence_grace_ms` (default 60000) is how long a key's fence counter outlives its
///   last lease (see the crate docs on bounded storage);
/// - `protocol` (`resp2` or `resp3`) goes to the redis driver.
///
/// Any other option is a configuration error that names it and lists these. `Debug`
/// and every error show the URL with its password replaced by `***`.
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) endpoints: Vec<Endpoint>,
    pub(crate) cluster: bool,
    pub(crate) tls: bool,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
    pub(crate) protocol: Option<String>,
    pub(crate) prefix: String,
    pub(crate) wait_replicas: u32,
    pub(crate) wait_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) fence_grace: Duration,
    pub(crate) tls_files: TlsFiles,
    /// Set on the masters of a Redlock: the acquire script then proposes fences from
    /// the counter alone while it exists (see the crate docs on Redlock).
    pub(crate) redlock_member: bool,
    /// The name the Sentinels in `endpoints` monitor the master under, for a
    /// `redis-sentinel://` URL.
    pub(crate) master_name: Option<String>,
}

/// The PEM files a `rediss://` URL names: the CA to trust instead of the system's
/// roots (`ca_file`), and a client certificate and key (`cert_file`, `key_file`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<std::path::PathBuf>,
    pub(crate) cert: Option<std::path::PathBuf>,
    pub(crate) key: Option<std::path::PathBuf>,
}

/// How long a fence counter outlives its key's last lease, unless the URL says.
pub(crate) const DEFAULT_FENCE_GRACE: Duration = Duration::from_secs(60);

/// Redis's port, where a URL names none.
pub const DEFAULT_PORT: u16 = 6379;

/// A Sentinel's port, where a `redis-sentinel://` URL names none.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The URL schemes this backend serves: one server (`redis`, `rediss`), a Redis
/// Cluster (`redis-cluster`), a master behind Sentinel (`redis-sentinel`), or a
/// Redlock over several masters (`redlock`, `redlocks`).
pub const SCHEMES: &[&str] = &Scheme::names(&SCHEME_LIST);

/// Each of [`SCHEMES`] with the crate feature it needs beyond the defaults: the
/// one list of them, which `SCHEMES` and the crate's `DESCRIPTOR` read.
pub(crate) const SCHEME_LIST: [Scheme; 6] = [
    Scheme::new("redis"),
    Scheme::with_feature("rediss", "tls", cfg!(feature = "tls")),
    Scheme::with_feature("redis-cluster", "cluster", cfg!(feature = "cluster")),
    Scheme::with_feature("redis-sentinel", "sentinel", cfg!(feature = "sentinel")),
    Scheme::new("redlock"),
    Scheme::with_feature("redlocks", "tls", cfg!(feature = "tls")),
];

fn config_error(message: impl Into<String>) -> Error {
    distlock_core::backend::config_error("redis", message)
}

impl Default for RedisConfig {
    /// One server at `127.0.0.1:6379`, database 0, with every default.
    fn default() -> Self {
        RedisConfig::new(Endpoint::new("127.0.0.1", DEFAULT_PORT))
    }
}

impl FromStr for RedisConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        RedisConfig::from_url(url)
    }
}

impl RedisConfig {
    /// The server at `endpoint`, database 0, without TLS or credentials, with every
    /// default.
    pub fn new(endpoint: Endpoint) -> Self {
        RedisConfig {
            endpoints: vec![endpoint],
            cluster: false,
            tls: false,
            user: None,
            password: None,
            db: 0,
            protocol: None,
            prefix: "distlock:".to_owned(),
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            fence_grace: DEFAULT_FENCE_GRACE,
            tls_files: TlsFiles::default(),
            redlock_member: false,
            master_name: None,
        }
    }

    /// The master that `sentinels` monitor under `master_name`, found through them
    /// (this crate's `sentinel` feature), with every default.
    pub fn sentinel(
        master_name: impl Into<String>,
        sentinels: impl IntoIterator<Item = Endpoint>,
    ) -> Self {
        RedisConfig {
            endpoints: sentinels.into_iter().collect(),
            master_name: Some(master_name.into()),
            ..RedisConfig::default()
        }
    }

    /// A Redis Cluster found through `seeds`, with every default.
    pub fn cluster(seeds: impl IntoIterator<Item = Endpoint>) -> Self {
        RedisConfig {
            endpoints: seeds.into_iter().collect(),
            cluster: true,
            ..RedisConfig::default()
        }
    }

    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error names what is wrong, never
    /// echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let port = match url.starts_with("redis-sentinel:") {
            true => DEFAULT_SENTINEL_PORT,
            false => DEFAULT_PORT,
        };
        let parsed = ConnectionUrl::parse("redis", url, SCHEMES, port)?;
        if parsed.scheme.starts_with("redlock") {
            return Err(config_error(
                "a redlock:// URL is a Redlock's: connect it with RedlockBackend (or distlock::connect)",
            ));
        }
        let mut config = RedisConfig {
            endpoints: parsed.endpoints.clone(),
            cluster: parsed.scheme == "redis-cluster",
            tls: parsed.scheme == "rediss",
            ..RedisConfig::default()
        };
        let sentinel = parsed.scheme == "redis-sentinel";
        if !config.cluster && !sentinel && config.endpoints.len() > 1 {
            return Err(config_error(
                "a redis:// URL names one server: several are a redis-cluster://, a redis-sentinel:// or a redlock:// URL",
            ));
        }
        config.read(&parsed)?;
        let mut options = parsed.options();
        config.read_options(&mut options)?;
        let master = options.take("master")?;
        match (sentinel, master) {
            (true, Some(name)) => config.master_name = Some(name),
            (true, None) => return Err(config_error(
                "a redis-sentinel:// URL names the master its Sentinels monitor: ?master=<name>",
            )),
            (false, Some(_)) => {
                return Err(config_error(
                    "master names the master of a redis-sentinel:// URL only",
                ))
            }
            (false, None) => {}
        }
        options.finish()?;
        config.check()?;
        Ok(config)
    }

    /// The credentials and database of `url`.
    pub(crate) fn read(&mut self, url: &ConnectionUrl) -> Result<()> {
        self.user = url.user.clone();
        self.password = url.password.clone();
        self.db = match url.path.trim_start_matches('/') {
            "" => 0,
            db => db.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
                config_error(format!("the database must be a number, not {db:?}"))
            })?,
        };
        Ok(())
    }

    /// Every option of a Redis URL.
    pub(crate) fn read_options(&mut self, options: &mut Options) -> Result<()> {
        if let Some(prefix) = options.take("prefix")? {
            self.prefix = prefix;
        }
        if let Some(n) = options.number("wait_replicas", "a whole number")? {
            self.wait_replicas = n;
        }
        if let Some(t) = options.millis("wait_timeout_ms")? {
            self.wait_timeout = t;
        }
        if let Some(t) = options.millis("response_timeout_ms")? {
            self.response_timeout = t;
        }
        if let Some(t) = options.millis("connect_timeout_ms")? {
            self.connect_timeout = t;
        }
        if let Some(t) = options.millis("fence_grace_ms")? {
            self.fence_grace = t;
        }
        self.tls_files.ca = options.take("ca_file")?.map(Into::into);
        self.tls_files.cert = options.take("cert_file")?.map(Into::into);
        self.tls_files.key = options.take("key_file")?.map(Into::into);
        self.protocol = options.take("protocol")?;
        Ok(())
    }

    /// Checks the settings as a whole: what [`from_url`](Self::from_url) and
    /// [`RedisBackend::connect_with`](crate::RedisBackend::connect_with) refuse.
    pub fn check(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(config_error("no server: name at least one"));
        }
        if let Some(name) = &self.master_name {
            if !cfg!(feature = "sentinel") {
                return Err(config_error(
                    "redis-sentinel:// (a master behind Sentinel) needs the `redis-sentinel` \
                     feature of distlock (the `sentinel` feature of distlock-redis)",
                ));
            }
            if self.cluster {
                return Err(config_error(
                    "a Redis Cluster is not found through Sentinel",
                ));
            }
            if self.tls {
                return Err(config_error(
                    "a master behind Sentinel is reached without TLS here",
                ));
            }
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(config_error(
                    "the Sentinels' master name must be a non-empty word",
                ));
            }
        }
        if self.cluster && !cfg!(feature = "cluster") {
            return Err(config_error(
                "redis-cluster:// (a Redis Cluster) needs the `redis-cluster` feature of \
                 distlock (the `cluster` feature of distlock-redis)",
            ));
        }
        if self.tls && !cfg!(feature = "tls") {
            return Err(config_error(
                "rediss:// (TLS) needs the `tls` feature of distlock-redis",
            ));
        }
        distlock_core::backend::key_prefix("redis", &self.prefix)?;
        let files = &self.tls_files;
        if (files.ca.is_some() || files.cert.is_some()) && !self.tls {
            return Err(config_error(
                "ca_file and cert_file need a rediss:// URL (with_tls)",
            ));
        }
        if files.cert.is_some() != files.key.is_some() {
            return Err(config_error("cert_file and key_file go together"));
        }
        if !matches!(
            self.protocol.as_deref(),
            None | Some("2" | "3" | "resp2" | "resp3")
        ) {
            return Err(config_error("protocol must be resp2 or resp3"));
        }
        if self.cluster {
            if self.wait_replicas > 0 {
                return Err(config_error(
                    "wait_replicas is not supported on a Redis Cluster (its WAIT would not reach the key's master)",
                ));
            }
            if self.db != 0 {
                return Err(config_error("a Redis Cluster has database 0 only"));
            }
            if self.tls {
                return Err(config_error("a Redis Cluster is reached without TLS here"));
            }
        }
        Ok(())
    }

    /// Redis ACL credentials (`user` may be empty: `requirepass` alone).
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        let user = user.into();
        self.user = (!user.is_empty()).then_some(user);
        self.password = Some(password.into());
        self
    }

    /// The database number (the URL's path).
    pub fn with_db(mut self, db: i64) -> Self {
        self.db = db;
        self
    }

    /// TLS (`rediss://`), trusting the system's roots; see [`with_ca_file`](Self::with_ca_file).
    pub fn with_tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// TLS trusting only the CA in the PEM file `ca_file`.
    pub fn with_ca_file(mut self, ca_file: impl Into<std::path::PathBuf>) -> Self {
        self.tls = true;
        self.tls_files.ca = Some(ca_file.into());
        self
    }

    /// A client certificate and its key (PEM files), with TLS.
    pub fn with_client_certificate(
        mut self,
        cert_file: impl Into<std::path::PathBuf>,
        key_file: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls_files.cert = Some(cert_file.into());
        self.tls_files.key = Some(key_file.into());
        self
    }

    /// The key prefix (`prefix`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How many replicas each acquire and extend waits for, and for how long
    /// (`wait_replicas`, `wait_timeout_ms`).
    pub fn with_wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }

    /// How long each command may take (`response_timeout_ms`).
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long each connection attempt may take (`connect_timeout_ms`).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a fence counter outlives its key's last lease (`fence_grace_ms`).
    pub fn with_fence_grace(mut self, grace: Duration) -> Self {
        self.fence_grace = grace;
        self
    }

    /// The driver's URL for `endpoint`: the credentials percent-encoded again.
    fn driver_url_for(&self, endpoint: &Endpoint) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let mut url = format!("{scheme}://");
        if self.user.is_some() || self.password.is_some() {
            url.push_str(&distlock_core::backend::encode(
                self.user.as_deref().unwrap_or(""),
            ));
            if let Some(password) = &self.password {
                url.push(':');
                url.push_str(&distlock_core::backend::encode(password));
            }
            url.push('@');
        }
        url.push_str(&format!("{endpoint}/{}", self.db));
        if let Some(protocol) = &self.protocol {
            url.push_str(&format!(
                "?protocol={}",
                distlock_core::backend::encode(protocol)
            ));
        }
        url
    }

    /// The driver's URL of the (first) server.
    pub(crate) fn driver_url(&self) -> String {
        self.driver_url_for(&self.endpoints[0])
    }

    /// The driver's URLs of every server (a cluster's seeds).
    #[cfg(feature = "cluster")]
    pub(crate) fn driver_urls(&self) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|e| self.driver_url_for(e))
            .collect()
    }

    /// The servers as `host:port`, for errors.
    pub(crate) fn endpoint_list(&self) -> String {
        self.endpoints
            .iter()
            .map(Endpoint::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The name the Sentinels monitor the master under, for a `redis-sentinel://`
    /// URL ([`RedisConfig::sentinel`]); `None` otherwise.
    pub fn master_name(&self) -> Option<&str> {
        self.master_name.as_deref()
    }

    /// How many seeds a Redis Cluster URL (`redis-cluster://`) names; 0 for one server.
    pub fn cluster_seeds(&self) -> usize {
        if self.cluster {
            self.endpoints.len()
        } else {
            0
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How long a key's fence counter outlives the key's last lease
    /// (`fence_grace_ms`; one minute unless set).
    pub fn fence_grace(&self) -> Duration {
        self.fence_grace
    }

    /// How many replicas each acquire and extend waits for.
    pub fn wait_replicas(&self) -> u32 {
        self.wait_replicas
    }

    /// How long each command may take.
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Replaces the password, wherever it appears in `text`, by `***`.
    pub(crate) fn scrub(&self, text: String) -> String {
        let text = distlock_core::backend::scrub(text, self.password.as_deref());
        match &self.password {
            Some(p) => {
                distlock_core::backend::scrub(text, Some(&distlock_core::backend::encode(p)))
            }
            None => text,
        }
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match (self.cluster, self.tls) {
            _ if self.master_name.is_some() => "redis-sentinel",
            (true, _) => "redis-cluster",
            (false, true) => "rediss",
            (false, false) => "redis",
        };
        let master = match &self.master_name {
            Some(name) => format!("?master={name}"),
            None => String::new(),
        };
        let user = match (&self.user, &self.password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}{}@",
                distlock_core::backend::encode(user.as_deref().unwrap_or("")),
                if password.is_some() { ":***" } else { "" }
            ),
        };
        f.debug_struct("RedisConfig")
            .field(
                "url",
                &format!(
                    "{scheme}://{user}{}/{}{master}",
                    self.endpoint_list(),
                    self.db
                ),
            )
            .field("prefix", &self.prefix)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("fence_grace", &self.fence_grace)
            .field("protocol", &self.protocol)
            .field("tls_files", &self.tls_files)
            .finish()
    }
}

/// The default per-master timeout's bounds (see [`RedlockConfig`]).
const DEFAULT_NODE_TIMEOUT_FLOOR: Duration = Duration::from_millis(50);
const DEFAULT_NODE_TIMEOUT_CAP: Duration = Duration::from_millis(500);

/// A Redlock over independent Redis masters, from a URL:
///
/// `redlock[s]://[user][:password]@host1[:port],host2[:port],host3[:port][/db][?options]`
///
/// - three or more distinct masters, separated by commas; the lock is held with a
///   majority of them (`n / 2 + 1`);
/// - `redlocks://` reaches every master over TLS, as `rediss://` does;
/// - user, password, database and every option of [`RedisConfig`] apply to each master
///   (one set of credentials for all); `response_timeout_ms` caps the node time-out
///   below, which bounds every call to a master in its place;
/// - `drift_ppm` (default 10000, that is 1%) and `drift_ms` (default 2): the clock
///   drift allowed between the masters and this process, which core takes off every
///   lease's validity;
/// - `node_timeout_ms`: how long an operation waits for one master (default: 5% of
///   the TTL, at least 50 ms and at most 500 ms, and never more than
///   `response_timeout_ms`; 500 ms for release and inspect). It bounds an operation
///   that needs a slow master's answer to reach its outcome; one that does not, returns
///   without waiting for it. It is the only time-out on a call to a master: the
///   masters' connections have no response time-out of their own, which would only
///   double it.
///
/// `Debug` and errors show the masters with the password replaced by `***`.
#[derive(Clone)]
pub struct RedlockConfig {
    pub(crate) members: Vec<RedisConfig>,
    pub(crate) drift: ClockDrift,
    pub(crate) node_timeout: Option<Duration>,
}

impl RedlockConfig {
    /// A Redlock over `masters`, each reached with `base`'s credentials, database and
    /// options, with the default drift and per-master timeout.
    pub fn new(base: RedisConfig, masters: impl IntoIterator<Item = Endpoint>) -> Self {
        RedlockConfig {
            members: masters
                .into_iter()
                .map(|endpoint| RedisConfig {
                    endpoints: vec![endpoint],
                    cluster: false,
                    redlock_member: true,
                    ..base.clone()
                })
                .collect(),
            drift: ClockDrift::new(10_000, Duration::from_millis(2)),
            node_timeout: None,
        }
    }

    /// The clock drift allowed between the masters and this process (`drift_ppm`,
    /// `drift_ms`).
    pub fn with_drift(mut self, drift: ClockDrift) -> Self {
        self.drift = drift;
        self
    }

    /// How long an operation waits for one master (`node_timeout_ms`).
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Parses a `redlock://` or `redlocks://` URL; a
    /// [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error
    /// names what is wrong, never echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = ConnectionUrl::parse("redis", url, &["redlock", "redlocks"], DEFAULT_PORT)
            .map_err(|e| {
                if url.starts_with("redis") {
                    config_error(format!(
                        "{}; a Redlock is redlock:// or redlocks://",
                        e.message()
                    ))
                } else {
                    e
                }
            })?;
        let mut base = RedisConfig {
            tls: parsed.scheme == "redlocks",
            ..RedisConfig::default()
        };
        base.read(&parsed)?;
        let mut options = parsed.options();
        let mut drift = ClockDrift::new(10_000, Duration::from_millis(2));
        if let Some(ppm) = options.take("drift_ppm")? {
            drift.per_million = ppm
                .parse()
                .ok()
                .filter(|ppm| *ppm < 500_000)
                .ok_or_else(|| {
                    config_error(format!(
                        "drift_ppm must be a whole number below 500000, not {ppm:?}"
                    ))
                })?;
        }
        if let Some(ms) = options.number::<u64>("drift_ms", "a whole number")? {
            drift.fixed = Duration::from_millis(ms);
        }
        let node_timeout = options.millis("node_timeout_ms")?;
        base.read_options(&mut options)?;
        options.finish()?;
        let mut config = RedlockConfig::new(base, parsed.endpoints.clone()).with_drift(drift);
        config.node_timeout = node_timeout;
        config.check()?;
        Ok(config)
    }

    /// Checks the settings as a whole: three or more masters, each as
    /// [`RedisConfig::check`] checks one.
    pub fn check(&self) -> Result<()> {
        if self.members.len() < 3 {
            return Err(config_error(format!(
                "a Redlock needs three or more independent masters, not {}",
                self.members.len()
            )));
        }
        self.members.iter().try_for_each(RedisConfig::check)
    }

    /// The masters' settings, in the URL's order.
    pub fn members(&self) -> &[RedisConfig] {
        &self.members
    }

    /// How many masters make a majority.
    pub fn quorum(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The clock drift allowed between the masters and this process.
    pub fn drift(&self) -> ClockDrift {
        self.drift
    }

    /// How long an acquire or extend of `ttl` waits for one master.
    pub fn node_timeout(&self, ttl: Duration) -> Duration {
        let response = self
            .members
            .iter()
            .map(|m| m.response_timeout)
            .min()
            .unwrap_or(Duration::from_secs(5));
        self.node_timeout
            .unwrap_or_else(|| {
                (ttl / 20).clamp(DEFAULT_NODE_TIMEOUT_FLOOR, DEFAULT_NODE_TIMEOUT_CAP)
            })
            .min(response)
    }
}

impl fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockConfig")
            .field("members", &self.members)
            .field("drift", &self.drift)
            .field("node_timeout", &self.node_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn tls_files_need_rediss_and_come_in_pairs() {
        for (url, says) in [
            ("redis://h?ca_file=/ca.pem", "rediss://"),
            ("redis://h?cert_file=/c.pem&key_file=/k.pem", "rediss://"),
            ("rediss://h?cert_file=/c.pem", "go together"),
        ] {
            if !cfg!(feature = "tls") && url.starts_with("rediss") {
                continue;
            }
            let err = RedisConfig::from_url(url).expect_err(url);
            assert_eq!(err.kind(), ErrorKind::Configuration);
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn the_fence_counter_grace_is_a_minute_unless_set() {
        let default = RedisConfig::from_url("redis://h").expect("default");
        assert_eq!(default.fence_grace(), Duration::from_secs(60));
        let set = RedisConfig::from_url("redis://h?fence_grace_ms=1500").expect("set");
        assert_eq!(set.fence_grace(), Duration::from_millis(1500));
        for bad in ["0", "-1", "soon"] {
            let err = RedisConfig::from_url(&format!("redis://:s3cret@h?fence_grace_ms={bad}"))
                .expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration);
            assert!(err.to_string().contains("fence_grace_ms"), "{err}");
        }
    }

    #[test]
    fn a_sentinel_url_names_the_sentinels_and_the_master() {
        let url = "redis-sentinel://app:s3cret@s1,s2:26380,s3/2?master=orders&wait_replicas=1";
        if !cfg!(feature = "sentinel") {
            let err = RedisConfig::from_url(url).expect_err("no sentinel feature");
            assert!(err.to_string().contains("redis-sentinel"), "{err}");
            return;
        }
        let c = RedisConfig::from_url(url).expect("valid");
        assert_eq!(c.master_name(), Some("orders"));
        assert_eq!(c.endpoint_list(), "s1:26379,s2:26380,s3:26379");
        assert_eq!((c.db, c.wait_replicas()), (2, 1));
        // The credentials and database are the data servers'.
        assert_eq!(c.driver_url(), "redis://app:s3cret@s1:26379/2");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("redis-sentinel://app:***@s1:26379,s2:26380,s3:26379/2?master=orders"),
            "{shown}"
        );
        let typed = RedisConfig::sentinel("orders", [Endpoint::new("s1", 26379)]);
        typed.check().expect("a typed sentinel config");
        for (bad, says) in [
            ("redis-sentinel://:s3cret@s1", "?master=<name>"),
            ("redis-sentinel://:s3cret@s1?master=", "non-empty word"),
            (
                "redis://:s3cret@h?master=orders",
                "redis-sentinel:// URL only",
            ),
            ("redis://:s3cret@h1,h2", "redis-sentinel://"),
        ] {
            let err = RedisConfig::from_url(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}");
            assert!(err.to_string().contains(says), "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{bad}: {err}");
        }
        let tls = RedisConfig::sentinel("orders", [Endpoint::new("s1", 26379)]).with_tls();
        let err = tls.check().expect_err("TLS behind Sentinel");
        assert!(err.to_string().contains("without TLS"), "{err}");
    }

    #[test]
    fn parses_options_and_passes_the_rest_on() {
        let c = RedisConfig::from_url(
            "redis://app:s3cret@cache:6380/2?prefix=svc:&wait_replicas=1&protocol=resp3",
        )
        .expect("valid");
        assert_eq!(c.prefix(), "svc:");
        assert_eq!(c.wait_replicas(), 1);
        assert_eq!(
            c.driver_url(),
            "redis://app:s3cret@cache:6380/2?protocol=resp3"
        );
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("app:***@cache"), "{shown}");
    }

    #[test]
    fn a_redlock_url_names_each_master_with_shared_options() {
        let c = RedlockConfig::from_url(
            "redlock://app:s3cret@a:6379,b:6380,c/2?prefix=svc:&drift_ppm=5000&node_timeout_ms=30&protocol=resp3",
        )
        .expect("valid");
        let urls: Vec<String> = c.members().iter().map(|m| m.driver_url()).collect();
        assert_eq!(
            urls,
            [
                "redis://app:s3cret@a:6379/2?protocol=resp3",
                "redis://app:s3cret@b:6380/2?protocol=resp3",
                "redis://app:s3cret@c:6379/2?protocol=resp3",
            ]
        );
        assert!(c
            .members()
            .iter()
            .all(|m| m.prefix() == "svc:" && m.redlock_member));
        assert_eq!(c.quorum(), 2);
        assert_eq!(c.drift().per_million, 5000);
        assert_eq!(c.drift().fixed, Duration::from_millis(2));
        assert_eq!(
            c.node_timeout(Duration::from_secs(10)),
            Duration::from_millis(30)
        );
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let five = RedlockConfig::from_url("redlock://a,b,c,d,e").expect("five");
        assert_eq!(five.quorum(), 3);
        assert_eq!(
            five.node_timeout(Duration::from_secs(5)),
            Duration::from_millis(250)
        );
        assert_eq!(
            five.node_timeout(Duration::from_secs(60)),
            Duration::from_millis(500)
        );
        assert_eq!(
            five.node_timeout(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
    }

    #[test]
    #[cfg(not(feature = "cluster"))]
    fn a_cluster_url_without_the_cluster_feature_names_the_feature() {
        let err = RedisConfig::from_url("redis-cluster://:s3cret@a:7000,b:7001")
            .expect_err("no cluster support in this build");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(err.to_string().contains("`redis-cluster` feature"), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn a_cluster_url_names_its_seeds() {
        let c = RedisConfig::from_url("redis-cluster://:s3cret@a:7000,b:7001?prefix=svc:")
            .expect("valid");
        assert_eq!(c.cluster_seeds(), 2);
        assert_eq!(c.prefix(), "svc:");
        assert_eq!(
            c.driver_urls(),
            ["redis://:s3cret@a:7000/0", "redis://:s3cret@b:7001/0"]
        );
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        for (bad, says) in [
            (
                "redis-cluster://:s3cret@a,b?wait_replicas=1",
                "wait_replicas",
            ),
            ("redis-cluster://:s3cret@a,b/2", "database 0"),
            ("redis-cluster://:s3cret@a,a", "listed twice"),
        ] {
            let err = RedisConfig::from_url(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
            assert!(err.to_string().contains(says), "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn bad_redlock_urls_are_configuration_errors_without_the_password() {
        for (bad, says) in [
            ("redlock://:s3cret@a,b", "three or more"),
            ("redlock://:s3cret@a,b,A", "listed twice"),
            ("redlock://:s3cret@a,,b,c", "an empty one"),
            ("redlock://:s3cret@a,b,c?drift_ppm=600000", "drift_ppm"),
            ("redlock://:s3cret@a,b,c?drift_ms=x", "drift_ms"),
            (
                "redlock://:s3cret@a,b,c?node_timeout_ms=0",
                "node_timeout_ms",
            ),
            ("redlock://:s3cret@a,b:x,c", "1 to 65535"),
            ("redis://:s3cret@a,b,c", "Redlock"),
        ] {
            let err = RedlockConfig::from_url(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
            assert!(err.to_string().contains(says), "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn bad_urls_are_configuration_errors_without_the_password() {
        for bad in [
            "postgres://u:s3cret@h/db",
            "redis://:s3cret@",
            "redis://:s3cret@h?wait_timeout_ms=0",
            "redis://:s3cret@h?wait_replicas=-1",
            "redis://:s3cret@h?prefix=a%0Ab",
            "::::",
        ] {
            let err = RedisConfig::from_url(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn a_misspelt_option_is_named_with_the_valid_ones() {
        for url in [
            "redis://:s3cret@h?prefx=svc:",
            "redis-cluster://:s3cret@a,b?prefx=svc:",
            "redlock://:s3cret@a,b,c?prefx=svc:",
        ] {
            let err = RedisConfig::from_url(url)
                .map(|_| ())
                .or_else(|e| match url.starts_with("redlock") {
                    true => RedlockConfig::from_url(url).map(|_| ()),
                    false => Err(e),
                })
                .expect_err(url);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{url}");
            let text = err.to_string();
            assert!(
                text.contains("\"prefx\"") && text.contains("did you mean prefix?"),
                "{text}"
            );
            assert!(
                text.contains("fence_grace_ms") && text.contains("protocol"),
                "{text}"
            );
            assert!(!text.contains("s3cret"), "{text}");
        }
        let err = RedlockConfig::from_url("redlock://a,b,c?drift_pm=1").expect_err("drift_pm");
        assert!(err.to_string().contains("did you mean drift_ppm?"), "{err}");
    }

    #[test]
    fn a_password_with_reserved_characters_reaches_the_driver_encoded() {
        for url in ["redis://app:p+w&d%25%40x@h", "redis://app:p+w&d%@x@h"] {
            let c = RedisConfig::from_url(url).expect(url);
            assert_eq!(c.password.as_deref(), Some("p+w&d%@x"), "{url}");
            assert_eq!(c.driver_url(), "redis://app:p%2Bw%26d%25%40x@h:6379/0");
            let info = redis::IntoConnectionInfo::into_connection_info(c.driver_url().as_str())
                .expect("the driver reads it");
            assert_eq!(info.redis_settings().password(), Some("p+w&d%@x"));
            assert!(!format!("{c:?}").contains("p+w"));
            assert!(!c.scrub(c.driver_url()).contains("p%2Bw"));
        }
    }

    #[test]
    fn typed_settings_are_the_urls() {
        let typed = RedisConfig::new(Endpoint::new("cache", 6380))
            .with_credentials("app", "pw")
            .with_db(2)
            .with_prefix("svc:")
            .with_response_timeout(Duration::from_millis(700));
        let parsed: RedisConfig = "redis://app:pw@cache:6380/2?prefix=svc:&response_timeout_ms=700"
            .parse()
            .expect("valid");
        assert_eq!(format!("{typed:?}"), format!("{parsed:?}"));
        assert_eq!(typed.driver_url(), parsed.driver_url());
        let redlock = RedlockConfig::new(
            RedisConfig::default().with_prefix("svc:"),
            ["a", "b", "c"].map(|h| Endpoint::new(h, 6379)),
        );
        redlock.check().expect("valid");
        assert_eq!(redlock.quorum(), 2);
        assert!(RedisConfig::cluster([Endpoint::new("a", 7000)])
            .with_db(1)
            .check()
            .is_err());
        assert!(RedisConfig::default().with_prefix("a\nb").check().is_err());
    }
}
