//! [`ZooKeeperConfig`]: what a `zookeeper://` URL says.

use std::fmt;
use std::time::Duration;

use distlock_core::{support, Error, LockKey, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["zookeeper", "zk"];

/// Where and how to reach ZooKeeper, from a URL:
///
/// `zookeeper://[user:password@]host:port[,host:port...][/root/path][?timeout_ms=..&session_timeout_ms=..&connect_timeout_ms=..&max_clock_skew_ms=..]`
///
/// - `zk://` is the same;
/// - several servers, comma-separated, are members of one ensemble;
/// - user and password are ZooKeeper `digest` credentials: the nodes this backend
///   creates then carry the `creator_all` ACL (not tested against a server here);
///   without them, by anyone (`world:anyone`);
/// - the path (default `/distlock`) is the node under which every lock lives;
/// - `timeout_ms` (default 5000) bounds each operation, `connect_timeout_ms` (default
///   3000) each connection attempt, `session_timeout_ms` (default 10000) is the
///   session timeout asked of the server (which clamps it to its own limits);
/// - `max_clock_skew_ms` (default 10) is how far apart the ensemble members' clocks
///   may be: expiry is judged by the leader's clock, and a new leader's clock may be
///   ahead of the old one's, so this is taken off every lease's validity
///   ([`ClockDrift`](distlock_core::ClockDrift)).
///
/// `Debug` and errors never show the password.
#[derive(Clone)]
pub struct ZooKeeperConfig {
    pub(crate) servers: Vec<String>,
    pub(crate) user: Option<(String, String)>,
    pub(crate) root: String,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_clock_skew: Duration,
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
    support::config_error("zookeeper", message)
}

fn decode(part: &str) -> String {
    url::form_urlencoded::parse(format!("x={part}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Checks a root path: absolute, no empty, `.` or `..` segment, no control character,
/// at most 200 bytes.
fn root_path(path: &str) -> Result<String> {
    let path = decode(path);
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
    Ok(path)
}

impl ZooKeeperConfig {
    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration)
    /// error names what is wrong, never echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| config_error("not a URL: expected zookeeper://host:port"))?;
        if !SCHEMES.contains(&scheme) {
            return Err(config_error(format!(
                "the scheme {scheme:?} is not served by the zookeeper backend (it serves {SCHEMES:?})"
            )));
        }
        let (authority_path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match authority_path.find('/') {
            Some(at) => authority_path.split_at(at),
            None => (authority_path, ""),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let user = match userinfo {
            None => None,
            Some(u) => {
                let (name, password) = u.split_once(':').ok_or_else(|| {
                    config_error("ZooKeeper credentials need both a user and a password")
                })?;
                Some((decode(name), decode(password)))
            }
        };
        let mut servers = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| config_error(format!("the server {host:?} needs a port")))?;
            if name.is_empty() || port.parse::<u16>().is_err() {
                return Err(config_error(format!(
                    "the server {host:?} is not host:port"
                )));
            }
            servers.push(host.to_owned());
        }
        let root = match path.trim_end_matches('/') {
            "" => "/distlock".to_owned(),
            p => root_path(p)?,
        };
        let mut config = ZooKeeperConfig {
            servers,
            user,
            root,
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            session_timeout: Duration::from_secs(10),
            max_clock_skew: Duration::from_millis(10),
        };
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let millis = |v: &str| support::positive_millis("zookeeper", &name, v);
            match name.as_ref() {
                "timeout_ms" => config.timeout = millis(&value)?,
                "connect_timeout_ms" => config.connect_timeout = millis(&value)?,
                "session_timeout_ms" => config.session_timeout = millis(&value)?,
                "max_clock_skew_ms" => {
                    config.max_clock_skew = match value.as_ref() {
                        "0" => Duration::ZERO,
                        v => millis(v)?,
                    }
                }
                other => return Err(config_error(format!("unknown parameter {other:?}"))),
            }
        }
        Ok(config)
    }

    /// The servers, as `host:port`.
    pub fn servers(&self) -> &[String] {
        &self.servers
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
        support::scrub(text, self.user.as_ref().map(|(_, pw)| pw.as_str()))
    }
}

impl fmt::Debug for ZooKeeperConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperConfig")
            .field("servers", &self.servers)
            .field(
                "user",
                &self.user.as_ref().map(|(name, _)| format!("{name}:***")),
            )
            .field("root", &self.root)
            .field("timeout", &self.timeout)
            .field("session_timeout", &self.session_timeout)
            .field("max_clock_skew", &self.max_clock_skew)
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
            "zookeeper://u:s3cret@h",
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
}
