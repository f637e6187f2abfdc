//! [`ZooKeeperConfig`]: what a `zookeeper://` URL says.

use std::fmt;
use std::time::Duration;

use std::str::FromStr;

use distlock_core::backend::{ConnectionUrl, Endpoint, Scheme};
use distlock_core::{Error, LockKey, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &Scheme::names(&SCHEME_LIST);

/// Each of [`SCHEMES`] with the crate feature it needs beyond the defaults: the
/// one list of them, which `SCHEMES` and the crate's `DESCRIPTOR` read.
pub(crate) const SCHEME_LIST: [Scheme; 2] = [Scheme::new("zookeeper"), Scheme::new("zk")];

/// Where and how to reach ZooKeeper: built from a URL ([`from_url`](Self::from_url),
/// or `str::parse`), or typed ([`ZooKeeperConfig::new`] and the `with_` setters); the
/// same settings either way.
///
/// `zookeeper://[user:password@]host[:port][,host[:port]...][/root/path][?response_timeout_ms=..&session_timeout_ms=..&connect_timeout_ms=..&max_clock_skew_ms=..]`
///
/// - `zk://` is the same;
/// - several servers, comma-separated, are members of one ensemble; the port is 2181
///   unless given;
/// - user and password are ZooKeeper `digest` credentials (percent-encoded where they
///   hold a reserved character; a raw `+` stays a `+`): the nodes this backend
///   creates then carry the `creator_all` ACL, so only sessions with the same
///   credentials may touch them; without them (and without
///   [`with_creator_acl`](Self::with_creator_acl)), anyone may (`world:anyone`);
/// - the path (default `/distlock`) is the node under which every lock lives;
/// - `response_timeout_ms` (default 5000; `timeout_ms` is its old name) bounds each
///   operation, `connect_timeout_ms` (default 3000) each connection attempt,
///   `session_timeout_ms` (default 10000) is the session timeout asked of the server
///   (which clamps it to its own limits);
/// - `max_clock_skew_ms` (default 10) is how far apart the ensemble members' clocks
///   may be: expiry is judged by the leader's clock, and a new leader's clock may be
///   ahead of the old one's, so this is taken off every lease's validity
///   ([`ClockDrift`](distlock_core::backend::ClockDrift)).
///
/// Any other option is a configuration error that names it and lists these.
/// `Debug` and errors never show the password.
#[derive(Clone)]
pub struct ZooKeeperConfig {
    pub(crate) servers: Vec<Endpoint>,
    pub(crate) user: Option<(String, String)>,
    pub(crate) root: String,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_clock_skew: Duration,
    pub(crate) creator_acl: bool,
}

/// ZooKeeper's client port, where a URL names none.
pub const DEFAULT_PORT: u16 = 2181;

impl Default for ZooKeeperConfig {
    /// One server at `127.0.0.1:2181`, with every default.
    fn default() -> Self {
        ZooKeeperConfig::new([Endpoint::new("127.0.0.1", DEFAULT_PORT)])
    }
}

impl FromStr for ZooKeeperConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        ZooKeeperConfig::from_url(url)
    }
}

/// A key as one path segment: `k-` and the key with every byte outside
/// `[A-Za-z0-9._~-]` percent-encoded, so that `/`, `.`/`..`, and characters ZooKeeper
/// refuses in a path never reach it.
pub(crate) fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    out.push_str("k-");
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn config_error(message: impl Into<String>) -> Error {
    distlock_core::backend::config_error("zookeeper", message)
}

/// Checks a root path: absolute, no empty, `.` or `..` segment, no control character,
/// at most 200 bytes.
fn root_path(path: &str) -> Result<()> {
    let bad = path.len() > 200
        || path.chars().any(char::is_control)
        || path
            .split('/')
            .skip(1)
            .any(|s| s.is_empty() || s == "." || s == "..")
        || path == "/zookeeper"
        || path.starts_with("/zookeeper/");
    if bad || !path.starts_with('/') {
        return Err(config_error(format!(
            "the root path {path:?} is not a ZooKeeper path of non-empty segments \
             (no \".\" or \"..\", not under /zookeeper, at most 200 bytes)"
        )));
    }
    Ok(())
}

impl ZooKeeperConfig {
    /// The ensemble at `servers`, without credentials, with every default.
    pub fn new(servers: impl IntoIterator<Item = Endpoint>) -> Self {
        ZooKeeperConfig {
            servers: servers.into_iter().collect(),
            user: None,
            root: "/distlock".to_owned(),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            session_timeout: Duration::from_secs(10),
            max_clock_skew: Duration::from_millis(10),
            creator_acl: false,
        }
    }

    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration)
    /// error names what is wrong, never echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = ConnectionUrl::parse("zookeeper", url, SCHEMES, DEFAULT_PORT)?;
        let mut config = ZooKeeperConfig::new(url.endpoints.clone());
        config.user = match (&url.user, &url.password) {
            (None, None) => None,
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            _ => {
                return Err(config_error(
                    "ZooKeeper credentials need both a user and a password",
                ))
            }
        };
        match url.path.trim_end_matches('/') {
            "" => {}
            path => config.root = path.to_owned(),
        }
        let mut options = url.options();
        if let Some(timeout) = options
            .take_renamed("response_timeout_ms", "timeout_ms")?
            .map(|v| {
                distlock_core::backend::positive_millis("zookeeper", "response_timeout_ms", &v)
            })
            .transpose()?
        {
            config.timeout = timeout;
        }
        if let Some(timeout) = options.millis("connect_timeout_ms")? {
            config.connect_timeout = timeout;
        }
        if let Some(timeout) = options.millis("session_timeout_ms")? {
            config.session_timeout = timeout;
        }
        if let Some(skew) = options.take("max_clock_skew_ms")? {
            config.max_clock_skew = match skew.as_str() {
                "0" => Duration::ZERO,
                v => distlock_core::backend::positive_millis("zookeeper", "max_clock_skew_ms", v)?,
            }
        }
        options.finish()?;
        config.check()?;
        Ok(config)
    }

    /// Checks the settings as a whole: what [`from_url`](Self::from_url) and
    /// [`ZooKeeperBackend::connect_with`](crate::ZooKeeperBackend::connect_with) refuse.
    pub fn check(&self) -> Result<()> {
        if self.servers.is_empty() {
            return Err(config_error("no server: name at least one"));
        }
        root_path(&self.root)
    }

    /// `digest` credentials.
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Gives the nodes this backend creates the `creator_all` ACL even without
    /// credentials here: for a service's own connector that authenticates its
    /// sessions itself ([`ZooKeeperBackend::from_connector`](crate::ZooKeeperBackend::from_connector)).
    /// With [`with_credentials`](Self::with_credentials) (or a URL's user), the nodes
    /// carry it anyway.
    pub fn with_creator_acl(mut self) -> Self {
        self.creator_acl = true;
        self
    }

    /// Whether the nodes this backend creates carry the `creator_all` ACL (only the
    /// identities the creating session authenticated as may touch them), rather
    /// than `world:anyone`.
    pub fn creator_acl(&self) -> bool {
        self.creator_acl || self.user.is_some()
    }

    /// The node under which every lock lives (the URL's path).
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// How long each operation may take (`response_timeout_ms`).
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long each connection attempt may take (`connect_timeout_ms`).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The session timeout asked of the server (`session_timeout_ms`).
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How far apart the members' clocks may be (`max_clock_skew_ms`).
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// How long each operation may take.
    pub fn response_timeout(&self) -> Duration {
        self.timeout
    }

    /// The servers, as `host:port`.
    pub fn servers(&self) -> Vec<String> {
        self.servers.iter().map(Endpoint::to_string).collect()
    }

    /// The node under which every lock lives.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The node under which `key`'s leases and places live: the root, then `k-` and
    /// the key with every byte outside `[A-Za-z0-9._~-]` percent-encoded (so `/`
    /// becomes `%2F`). ZooKeeper deletes it once it has been left empty.
    pub fn key_node(&self, key: &LockKey) -> String {
        format!("{}/{}", self.root, encode_key(key.as_str()))
    }

    pub(crate) fn scrub(&self, text: String) -> String {
        distlock_core::backend::scrub(text, self.user.as_ref().map(|(_, pw)| pw.as_str()))
    }
}

impl fmt::Debug for ZooKeeperConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperConfig")
            .field("servers", &self.servers().join(","))
            .field(
                "user",
                &self.user.as_ref().map(|(name, _)| format!("{name}:***")),
            )
            .field("root", &self.root)
            .field("timeout", &self.timeout)
            .field("session_timeout", &self.session_timeout)
            .field("max_clock_skew", &self.max_clock_skew)
            .field("creator_acl", &self.creator_acl())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn parses_an_ensemble_credentials_a_root_and_options() {
        let c = ZooKeeperConfig::from_url(
            "zookeeper://app:s3cret@a:2181,b:2181,10.0.0.3:2181/svc/locks?timeout_ms=700&max_clock_skew_ms=0",
        )
        .expect("valid");
        assert_eq!(c.servers(), ["a:2181", "b:2181", "10.0.0.3:2181"]);
        assert_eq!(c.root(), "/svc/locks");
        assert_eq!(c.timeout, Duration::from_millis(700));
        assert_eq!(c.max_clock_skew, Duration::ZERO);
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("app:***"),
            "{shown}"
        );
        let d = ZooKeeperConfig::from_url("zk://h:2181/").expect("valid");
        assert_eq!(d.root(), "/distlock");
    }

    #[test]
    fn bad_urls_are_configuration_errors_without_the_password() {
        for bad in [
            "redis://h:1",
            "zookeeper://u:s3cret@h:notaport",
            "zookeeper://u:s3cret@h:2181//double",
            "zookeeper://u:s3cret@h:2181/a/../b",
            "zookeeper://u:s3cret@h:2181/zookeeper",
            "zookeeper://u:s3cret@h:2181?timeout_ms=0",
            "zookeeper://u:s3cret@h:2181?what=1",
            "zookeeper://s3cret@h:2181",
            "h:2181",
        ] {
            let err = ZooKeeperConfig::from_url(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn a_misspelt_option_is_named_with_the_valid_ones() {
        let err = ZooKeeperConfig::from_url("zk://h?session_timout_ms=9000").expect_err("typo");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        let text = err.to_string();
        assert!(text.contains("did you mean session_timeout_ms?"), "{text}");
        assert!(
            text.contains("max_clock_skew_ms") && text.contains("response_timeout_ms"),
            "{text}"
        );
    }

    #[test]
    fn a_password_and_a_root_with_reserved_characters_are_read_as_written() {
        let c = ZooKeeperConfig::from_url("zk://app:p+w&d%25%40x@h/svc+a/l%20b?timeout_ms=700")
            .expect("valid");
        assert_eq!(c.user, Some(("app".into(), "p+w&d%@x".into())));
        assert_eq!(c.root(), "/svc+a/l b");
        assert_eq!(c.servers(), ["h:2181"]);
        assert_eq!(c.response_timeout(), Duration::from_millis(700));
        let typed = ZooKeeperConfig::new([Endpoint::new("h", 2181)])
            .with_credentials("app", "p+w&d%@x")
            .with_root("/svc+a/l b")
            .with_response_timeout(Duration::from_millis(700));
        assert_eq!(format!("{typed:?}"), format!("{c:?}"));
        assert!(ZooKeeperConfig::default()
            .with_root("relative")
            .check()
            .is_err());
    }
}
