//! [`RedisConfig`]: what a `redis://` or `rediss://` URL says.

use std::fmt;
use std::time::Duration;

use distlock_core::{redact_url, support, ClockDrift, Error, Result};

/// Where and how to reach Redis, from a URL:
///
/// `redis[s]://[user][:password]@host[:port][/db][?prefix=..&wait_replicas=..&wait_timeout_ms=..&response_timeout_ms=..&connect_timeout_ms=..]`
///
/// or, for a Redis Cluster, `redis-cluster://[user][:password]@host1[:port],host2[:port],...[?options]`:
/// the cluster's seeds (one is enough to find the others), with the same credentials
/// and options, database 0 only, no `wait_replicas` and no TLS.
///
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
///   last lease (see the crate docs on bounded storage).
///
/// Other query parameters go to the redis driver unchanged. `Debug` and every error
/// show the URL with its password replaced by `***`.
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) driver_url: String,
    pub(crate) prefix: String,
    pub(crate) wait_replicas: u32,
    pub(crate) wait_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) fence_grace: Duration,
    pub(crate) password: Option<String>,
    pub(crate) tls_files: TlsFiles,
    /// Set on the masters of a Redlock: the acquire script then proposes fences from
    /// the counter alone while it exists (see the crate docs on Redlock).
    pub(crate) redlock_member: bool,
    /// A Redis Cluster's seeds, as driver URLs; empty for one server.
    pub(crate) cluster_seeds: Vec<String>,
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

/// The URL schemes this backend serves: one server (`redis`, `rediss`), a Redis
/// Cluster (`redis-cluster`), or a Redlock over several masters (`redlock`,
/// `redlocks`).
pub const SCHEMES: &[&str] = &["redis", "rediss", "redis-cluster", "redlock", "redlocks"];

fn config_error(message: impl Into<String>) -> Error {
    support::config_error("redis", message)
}

impl RedisConfig {
    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error names what is wrong, never
    /// echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        if let Some(rest) = url.strip_prefix("redis-cluster://") {
            return Self::cluster(rest);
        }
        let mut parsed =
            url::Url::parse(url).map_err(|e| config_error(format!("not a valid URL ({e})")))?;
        if !["redis", "rediss"].contains(&parsed.scheme()) {
            return Err(config_error(format!(
                "the scheme {:?} is not the redis backend's (redis://, rediss:// or redis-cluster://; a Redlock is redlock://)",
                parsed.scheme()
            )));
        }
        if parsed.scheme() == "rediss" && !cfg!(feature = "tls") {
            return Err(config_error(
                "rediss:// needs the `tls` feature of distlock-redis",
            ));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(config_error("the URL names no host"));
        }
        let mut config = RedisConfig {
            driver_url: String::new(),
            prefix: "distlock:".to_owned(),
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
            response_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            fence_grace: DEFAULT_FENCE_GRACE,
            password: parsed.password().map(|p| p.to_owned()),
            tls_files: TlsFiles::default(),
            redlock_member: false,
            cluster_seeds: Vec::new(),
        };
        let mut passed_on = Vec::new();
        for (name, value) in parsed.query_pairs() {
            let millis = |v: &str| support::positive_millis("redis", &name, v);
            match name.as_ref() {
                "prefix" => config.prefix = support::key_prefix("redis", &value)?,
                "wait_replicas" => {
                    config.wait_replicas = value.parse().map_err(|_| {
                        config_error(format!(
                            "wait_replicas must be a whole number, not {value:?}"
                        ))
                    })?;
                }
                "wait_timeout_ms" => config.wait_timeout = millis(&value)?,
                "response_timeout_ms" => config.response_timeout = millis(&value)?,
                "connect_timeout_ms" => config.connect_timeout = millis(&value)?,
                "fence_grace_ms" => config.fence_grace = millis(&value)?,
                "ca_file" => config.tls_files.ca = Some(value.as_ref().into()),
                "cert_file" => config.tls_files.cert = Some(value.as_ref().into()),
                "key_file" => config.tls_files.key = Some(value.as_ref().into()),
                _ => passed_on.push((name.into_owned(), value.into_owned())),
            }
        }
        let files = &config.tls_files;
        if (files.ca.is_some() || files.cert.is_some()) && parsed.scheme() != "rediss" {
            return Err(config_error("ca_file and cert_file need a rediss:// URL"));
        }
        if files.cert.is_some() != files.key.is_some() {
            return Err(config_error("cert_file and key_file go together"));
        }
        if passed_on.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(passed_on);
        }
        config.driver_url = parsed.to_string();
        Ok(config)
    }

    /// A Redis Cluster's settings: the first seed's, with every seed's URL.
    fn cluster(rest: &str) -> Result<Self> {
        let hosts = Hosts::parse(rest)?;
        let query = if hosts.query.is_empty() {
            String::new()
        } else {
            format!("?{}", hosts.query)
        };
        let seeds = hosts
            .urls("redis", &query)
            .iter()
            .map(|url| Self::from_url(url))
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = seeds.first() else {
            return Err(config_error("a Redis Cluster URL names no seed"));
        };
        if first.wait_replicas > 0 {
            return Err(config_error(
                "wait_replicas is not supported on a Redis Cluster (its WAIT would not reach the key's master)",
            ));
        }
        if !matches!(hosts.path, "" | "/" | "/0") {
            return Err(config_error("a Redis Cluster has database 0 only"));
        }
        let mut config = first.clone();
        config.cluster_seeds = seeds.into_iter().map(|s| s.driver_url).collect();
        Ok(config)
    }

    /// How many seeds a Redis Cluster URL (`redis-cluster://`) names; 0 for one server.
    pub fn cluster_seeds(&self) -> usize {
        self.cluster_seeds.len()
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

    /// Replaces the password, wherever it appears in `text`, by `***`.
    pub(crate) fn scrub(&self, text: String) -> String {
        support::scrub(text, self.password.as_deref())
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.driver_url))
            .field(
                "cluster_seeds",
                &self
                    .cluster_seeds
                    .iter()
                    .map(|s| redact_url(s))
                    .collect::<Vec<_>>(),
            )
            .field("prefix", &self.prefix)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("fence_grace", &self.fence_grace)
            .field("tls_files", &self.tls_files)
            .finish()
    }
}

/// A URL naming several hosts, `scheme://[userinfo@]host1,host2,...[/path][?query]`,
/// cut into its parts.
struct Hosts<'a> {
    userinfo: String,
    hosts: Vec<&'a str>,
    path: &'a str,
    query: &'a str,
}

impl<'a> Hosts<'a> {
    /// `rest` is what follows `scheme://`.
    fn parse(rest: &'a str) -> Result<Self> {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
        };
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let mut seen = std::collections::HashSet::new();
        let mut list = Vec::new();
        for host in hosts.split(',') {
            if host.is_empty() {
                return Err(config_error("an empty host in the list of hosts"));
            }
            if !seen.insert(host.to_ascii_lowercase()) {
                return Err(config_error(format!(
                    "the host {host} is listed twice: each must be a server of its own"
                )));
            }
            list.push(host);
        }
        Ok(Hosts {
            userinfo,
            hosts: list,
            path,
            query,
        })
    }

    /// One URL per host, with `scheme` and `query` (`?` included, or empty).
    fn urls(&self, scheme: &str, query: &str) -> Vec<String> {
        self.hosts
            .iter()
            .map(|host| format!("{scheme}://{}{host}{}{query}", self.userinfo, self.path))
            .collect()
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
///   (one set of credentials for all);
/// - `drift_ppm` (default 10000, that is 1%) and `drift_ms` (default 2): the clock
///   drift allowed between the masters and this process, which core takes off every
///   lease's validity;
/// - `node_timeout_ms`: how long an operation waits for one master (default: 5% of
///   the TTL, at least 50 ms and at most 500 ms, and never more than
///   `response_timeout_ms`; 500 ms for release and inspect). It bounds an operation
///   that needs a slow master's answer to reach its outcome; one that does not, returns
///   without waiting for it.
///
/// `Debug` and errors show the masters with the password replaced by `***`.
#[derive(Clone)]
pub struct RedlockConfig {
    pub(crate) members: Vec<RedisConfig>,
    pub(crate) drift: ClockDrift,
    pub(crate) node_timeout: Option<Duration>,
}

impl RedlockConfig {
    /// Parses a `redlock://` or `redlocks://` URL; a
    /// [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error
    /// names what is wrong, never echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| config_error("not a valid URL (no scheme)"))?;
        let member_scheme = match scheme {
            "redlock" => "redis",
            "redlocks" => "rediss",
            other => {
                return Err(config_error(format!(
                    "the scheme {other:?} is not a Redlock's (redlock:// or redlocks://)"
                )))
            }
        };
        let hosts = Hosts::parse(rest)?;
        let mut config = RedlockConfig {
            members: Vec::new(),
            drift: ClockDrift {
                per_million: 10_000,
                fixed: Duration::from_millis(2),
            },
            node_timeout: None,
        };
        let mut passed_on = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in url::form_urlencoded::parse(hosts.query.as_bytes()) {
            match name.as_ref() {
                "drift_ppm" => {
                    config.drift.per_million = value
                        .parse()
                        .ok()
                        .filter(|ppm| *ppm < 500_000)
                        .ok_or_else(|| {
                            config_error(format!(
                                "drift_ppm must be a whole number below 500000, not {value:?}"
                            ))
                        })?;
                }
                "drift_ms" => {
                    config.drift.fixed = Duration::from_millis(value.parse().map_err(|_| {
                        config_error(format!("drift_ms must be a whole number, not {value:?}"))
                    })?);
                }
                "node_timeout_ms" => {
                    config.node_timeout = Some(support::positive_millis("redis", &name, &value)?)
                }
                _ => {
                    passed_on.append_pair(&name, &value);
                }
            }
        }
        let query = passed_on.finish();
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        for url in hosts.urls(member_scheme, &query) {
            let member = RedisConfig::from_url(&url)?;
            config.members.push(RedisConfig {
                redlock_member: true,
                ..member
            });
        }
        if config.members.len() < 3 {
            return Err(config_error(format!(
                "a Redlock needs three or more independent masters, not {}",
                config.members.len()
            )));
        }
        Ok(config)
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
    fn parses_options_and_passes_the_rest_on() {
        let c = RedisConfig::from_url(
            "redis://app:s3cret@cache:6380/2?prefix=svc:&wait_replicas=1&protocol=resp3",
        )
        .expect("valid");
        assert_eq!(c.prefix(), "svc:");
        assert_eq!(c.wait_replicas(), 1);
        assert_eq!(
            c.driver_url,
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
        let urls: Vec<&str> = c.members().iter().map(|m| m.driver_url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "redis://app:s3cret@a:6379/2?protocol=resp3",
                "redis://app:s3cret@b:6380/2?protocol=resp3",
                "redis://app:s3cret@c/2?protocol=resp3",
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
    fn a_cluster_url_names_its_seeds() {
        let c = RedisConfig::from_url("redis-cluster://:s3cret@a:7000,b:7001?prefix=svc:")
            .expect("valid");
        assert_eq!(c.cluster_seeds(), 2);
        assert_eq!(c.prefix(), "svc:");
        assert_eq!(
            c.cluster_seeds,
            ["redis://:s3cret@a:7000", "redis://:s3cret@b:7001"]
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
            ("redlock://:s3cret@a,,b,c", "empty host"),
            ("redlock://:s3cret@a,b,c?drift_ppm=600000", "drift_ppm"),
            ("redlock://:s3cret@a,b,c?drift_ms=x", "drift_ms"),
            (
                "redlock://:s3cret@a,b,c?node_timeout_ms=0",
                "node_timeout_ms",
            ),
            ("redlock://:s3cret@a,b:x,c", "valid URL"),
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
}
