//! [`EtcdConfig`]: what an `etcd://` URL says.

use std::fmt;
use std::time::Duration;

use distlock_core::{support, Error, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["etcd", "etcds"];

/// Where and how to reach etcd, from a URL:
///
/// `etcd[s]://[user:password@]host:port[,host:port...][/][?prefix=..&timeout_ms=..&connect_timeout_ms=..]`
///
/// - `etcds://` is TLS (needs this crate's `tls` feature);
/// - several endpoints, comma-separated, are members of one cluster;
/// - user and password are etcd auth credentials;
/// - `prefix` (default `distlock/`) is put before every key this backend writes;
/// - `timeout_ms` (default 5000) bounds each request, `connect_timeout_ms` (default
///   3000) each connection attempt;
/// - with `etcds://`: `ca_file` (required: the CA that signed the servers'
///   certificates; no system roots are trusted), `cert_file` and `key_file` (a client
///   certificate, for a cluster run with `--client-cert-auth`), and `server_name` (the
///   name the certificates are checked against, where it is not the endpoint's host).
///
/// `Debug` and errors never show the password.
#[derive(Clone)]
pub struct EtcdConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) tls: bool,
    pub(crate) user: Option<(String, String)>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) tls_files: TlsFiles,
}

/// What an `etcds://` URL names: the CA that signed the servers' certificates
/// (`ca_file`), a client certificate and key (`cert_file`, `key_file`) for a cluster
/// that asks for one, and the name to check the certificates against where it is not
/// the endpoint's host (`server_name`).
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) ca: Option<std::path::PathBuf>,
    pub(crate) cert: Option<std::path::PathBuf>,
    pub(crate) key: Option<std::path::PathBuf>,
    pub(crate) server_name: Option<String>,
}

fn config_error(message: impl Into<String>) -> Error {
    support::config_error("etcd", message)
}

fn decode(part: &str) -> String {
    url::form_urlencoded::parse(format!("x={part}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

impl EtcdConfig {
    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error names what is wrong, never
    /// echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| config_error("not a URL: expected etcd://host:port"))?;
        if !SCHEMES.contains(&scheme) {
            return Err(config_error(format!(
                "the scheme {scheme:?} is not served by the etcd backend (it serves {SCHEMES:?})"
            )));
        }
        let tls = scheme == "etcds";
        if tls && !cfg!(feature = "tls") {
            return Err(config_error(
                "etcds:// needs the `tls` feature of distlock-etcd",
            ));
        }
        let (authority_path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority = authority_path.trim_end_matches('/');
        if authority.contains('/') {
            return Err(config_error("an etcd URL has no path"));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let user = match userinfo {
            None => None,
            Some(u) => {
                let (name, password) = u.split_once(':').ok_or_else(|| {
                    config_error("etcd credentials need both a user and a password")
                })?;
                Some((decode(name), decode(password)))
            }
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| config_error(format!("the endpoint {host:?} needs a port")))?;
            if name.is_empty() || port.parse::<u16>().is_err() {
                return Err(config_error(format!(
                    "the endpoint {host:?} is not host:port"
                )));
            }
            let scheme = if tls { "https" } else { "http" };
            endpoints.push(format!("{scheme}://{host}"));
        }
        let mut config = EtcdConfig {
            endpoints,
            tls,
            user,
            prefix: "distlock/".into(),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            tls_files: TlsFiles::default(),
        };
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let millis = |v: &str| support::positive_millis("etcd", &name, v);
            match name.as_ref() {
                "prefix" => config.prefix = support::key_prefix("etcd", &value)?,
                "timeout_ms" => config.timeout = millis(&value)?,
                "connect_timeout_ms" => config.connect_timeout = millis(&value)?,
                "ca_file" => config.tls_files.ca = Some(value.as_ref().into()),
                "cert_file" => config.tls_files.cert = Some(value.as_ref().into()),
                "key_file" => config.tls_files.key = Some(value.as_ref().into()),
                "server_name" => config.tls_files.server_name = Some(value.into_owned()),
                other => return Err(config_error(format!("unknown parameter {other:?}"))),
            }
        }
        let files = &config.tls_files;
        let named = files.ca.is_some()
            || files.cert.is_some()
            || files.key.is_some()
            || files.server_name.is_some();
        if named && !tls {
            return Err(config_error(
                "ca_file, cert_file, key_file and server_name need an etcds:// URL",
            ));
        }
        if tls && files.ca.is_none() {
            return Err(config_error(
                "etcds:// needs ca_file, the CA that signed the servers' certificates",
            ));
        }
        if files.cert.is_some() != files.key.is_some() {
            return Err(config_error("cert_file and key_file go together"));
        }
        Ok(config)
    }

    /// The endpoints, as the client reaches them.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn scrub(&self, text: String) -> String {
        support::scrub(text, self.user.as_ref().map(|(_, pw)| pw.as_str()))
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls)
            .field(
                "user",
                &self.user.as_ref().map(|(name, _)| format!("{name}:***")),
            )
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("tls_files", &self.tls_files)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn tls_settings_need_etcds_and_a_ca() {
        let err = EtcdConfig::from_url("etcd://h:2379?ca_file=/ca.pem").expect_err("etcd://");
        assert!(err.to_string().contains("etcds://"), "{err}");
        if cfg!(feature = "tls") {
            for (url, says) in [
                ("etcds://h:2379", "ca_file"),
                (
                    "etcds://h:2379?ca_file=/ca.pem&cert_file=/c.pem",
                    "go together",
                ),
            ] {
                let err = EtcdConfig::from_url(url).expect_err(url);
                assert!(err.to_string().contains(says), "{url}: {err}");
            }
            let ok =
                EtcdConfig::from_url("etcds://h:2379?ca_file=/ca.pem&server_name=etcd.internal")
                    .expect("etcds");
            assert_eq!(ok.endpoints(), ["https://h:2379"]);
        }
    }

    #[test]
    fn parses_several_endpoints_credentials_and_options() {
        let c = EtcdConfig::from_url(
            "etcd://root:s3cret@a:2379,b:2379,10.0.0.3:2379/?prefix=svc/&timeout_ms=700",
        )
        .expect("valid");
        assert_eq!(
            c.endpoints(),
            ["http://a:2379", "http://b:2379", "http://10.0.0.3:2379"]
        );
        assert_eq!(c.prefix(), "svc/");
        assert_eq!(c.timeout, Duration::from_millis(700));
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("root:***"),
            "{shown}"
        );
    }

    #[test]
    fn bad_urls_are_configuration_errors_without_the_password() {
        for bad in [
            "redis://h:1",
            "etcd://u:s3cret@h",
            "etcd://u:s3cret@h:notaport",
            "etcd://u:s3cret@h:2379/path",
            "etcd://u:s3cret@h:2379?timeout_ms=0",
            "etcd://u:s3cret@h:2379?what=1",
            "etcd://s3cret@h:2379",
            "h:2379",
        ] {
            let err = EtcdConfig::from_url(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }
}
