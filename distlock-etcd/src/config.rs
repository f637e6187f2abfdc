//! [`EtcdConfig`]: what an `etcd://` URL says.

use std::fmt;
use std::time::Duration;

use std::str::FromStr;

use distlock_core::backend::{ConnectionUrl, Endpoint, Scheme};
use distlock_core::{Error, Result};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &Scheme::names(&SCHEME_LIST);

/// Each of [`SCHEMES`] with the crate feature it needs beyond the defaults: the
/// one list of them, which `SCHEMES` and the crate's `DESCRIPTOR` read.
pub(crate) const SCHEME_LIST: [Scheme; 2] = [
    Scheme::new("etcd"),
    Scheme::with_feature("etcds", "tls", cfg!(feature = "tls")),
];

/// Where and how to reach etcd: built from a URL ([`from_url`](Self::from_url), or
/// `str::parse`), or typed ([`EtcdConfig::new`] and the `with_` setters); the same
/// settings either way.
///
/// `etcd[s]://[user:password@]host[:port][,host[:port]...][/][?prefix=..&response_timeout_ms=..&connect_timeout_ms=..]`
///
/// - `etcds://` is TLS (needs this crate's `tls` feature);
/// - several endpoints, comma-separated, are members of one cluster; the port is 2379
///   unless given;
/// - user and password are etcd auth credentials, percent-encoded where they hold a
///   reserved character (`%40` for `@`, say); a raw `+` stays a `+`;
/// - `prefix` (default `distlock/`) is put before every key this backend writes;
/// - `response_timeout_ms` (default 5000; `timeout_ms` is its old name) bounds each
///   request, `connect_timeout_ms` (default 3000) each connection attempt;
/// - with `etcds://`: `ca_file` (required: the CA that signed the servers'
///   certificates; no system roots are trusted), `cert_file` and `key_file` (a client
///   certificate, for a cluster run with `--client-cert-auth`), and `server_name` (the
///   name the certificates are checked against, where it is not the endpoint's host).
///
/// Any other option is a configuration error that names it and lists these.
/// `Debug` and errors never show the password.
#[derive(Clone)]
pub struct EtcdConfig {
    pub(crate) endpoints: Vec<Endpoint>,
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

/// etcd's client port, where a URL names none.
pub const DEFAULT_PORT: u16 = 2379;

fn config_error(message: impl Into<String>) -> Error {
    distlock_core::backend::config_error("etcd", message)
}

impl Default for EtcdConfig {
    /// One member at `127.0.0.1:2379`, with every default.
    fn default() -> Self {
        EtcdConfig::new([Endpoint::new("127.0.0.1", DEFAULT_PORT)])
    }
}

impl FromStr for EtcdConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        EtcdConfig::from_url(url)
    }
}

impl EtcdConfig {
    /// The members at `endpoints`, without TLS or credentials, with every default.
    pub fn new(endpoints: impl IntoIterator<Item = Endpoint>) -> Self {
        EtcdConfig {
            endpoints: endpoints.into_iter().collect(),
            tls: false,
            user: None,
            prefix: "distlock/".into(),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            tls_files: TlsFiles::default(),
        }
    }

    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error names what is wrong, never
    /// echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = ConnectionUrl::parse("etcd", url, SCHEMES, DEFAULT_PORT)?;
        if !matches!(url.path.as_str(), "" | "/") {
            return Err(config_error("an etcd URL has no path"));
        }
        let mut config = EtcdConfig::new(url.endpoints.clone());
        config.tls = url.scheme == "etcds";
        config.user = match (&url.user, &url.password) {
            (None, None) => None,
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            _ => {
                return Err(config_error(
                    "etcd credentials need both a user and a password",
                ))
            }
        };
        let mut options = url.options();
        if let Some(prefix) = options.take("prefix")? {
            config.prefix = prefix;
        }
        if let Some(timeout) = options
            .take_renamed("response_timeout_ms", "timeout_ms")?
            .map(|v| distlock_core::backend::positive_millis("etcd", "response_timeout_ms", &v))
            .transpose()?
        {
            config.timeout = timeout;
        }
        if let Some(timeout) = options.millis("connect_timeout_ms")? {
            config.connect_timeout = timeout;
        }
        config.tls_files.ca = options.take("ca_file")?.map(Into::into);
        config.tls_files.cert = options.take("cert_file")?.map(Into::into);
        config.tls_files.key = options.take("key_file")?.map(Into::into);
        config.tls_files.server_name = options.take("server_name")?;
        options.finish()?;
        config.check()?;
        Ok(config)
    }

    /// Checks the settings as a whole: what [`from_url`](Self::from_url) and
    /// [`EtcdBackend::connect_with`](crate::EtcdBackend::connect_with) refuse.
    pub fn check(&self) -> Result<()> {
        if self.endpoints.is_empty() {
            return Err(config_error("no endpoint: name at least one member"));
        }
        if self.tls && !cfg!(feature = "tls") {
            return Err(config_error(
                "etcds:// (TLS) needs the `tls` feature of distlock-etcd",
            ));
        }
        distlock_core::backend::key_prefix("etcd", &self.prefix)?;
        let files = &self.tls_files;
        let named = files.ca.is_some()
            || files.cert.is_some()
            || files.key.is_some()
            || files.server_name.is_some();
        if named && !self.tls {
            return Err(config_error(
                "ca_file, cert_file, key_file and server_name need an etcds:// URL (with_tls)",
            ));
        }
        if self.tls && files.ca.is_none() {
            return Err(config_error(
                "etcds:// needs ca_file, the CA that signed the servers' certificates",
            ));
        }
        if files.cert.is_some() != files.key.is_some() {
            return Err(config_error("cert_file and key_file go together"));
        }
        Ok(())
    }

    /// etcd auth credentials.
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// TLS (`etcds://`), trusting only the CA in the PEM file `ca_file`.
    pub fn with_tls(mut self, ca_file: impl Into<std::path::PathBuf>) -> Self {
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

    /// The name the servers' certificates are checked against (`server_name`).
    pub fn with_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls_files.server_name = Some(name.into());
        self
    }

    /// The key prefix (`prefix`).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long each request may take (`response_timeout_ms`).
    pub fn with_response_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long each connection attempt may take (`connect_timeout_ms`).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The endpoints, as the client reaches them (`http://host:port`, or `https://`).
    pub fn endpoints(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect()
    }

    /// The endpoints as `host:port`, for errors.
    pub(crate) fn endpoint_list(&self) -> String {
        self.endpoints
            .iter()
            .map(Endpoint::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How long each request may take.
    pub fn response_timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn scrub(&self, text: String) -> String {
        distlock_core::backend::scrub(text, self.user.as_ref().map(|(_, pw)| pw.as_str()))
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoint_list())
            .field("tls", &self.tls)
            .field(
                "user",
                &self.user.as_ref().map(|(name, _)| format!("{name}:***")),
            )
            .field("prefix", &self.prefix)
            .field("response_timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_files", &self.tls_files)
            .finish()
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
        let same = EtcdConfig::from_url("etcd://a?response_timeout_ms=700").expect("new name");
        assert_eq!(same.response_timeout(), Duration::from_millis(700));
        assert_eq!(same.endpoints(), ["http://a:2379"]);
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

    #[test]
    fn a_misspelt_option_is_named_with_the_valid_ones() {
        let err = EtcdConfig::from_url("etcd://h?prefx=svc/").expect_err("prefx");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        let text = err.to_string();
        assert!(
            text.contains("\"prefx\"") && text.contains("did you mean prefix?"),
            "{text}"
        );
        assert!(
            text.contains("connect_timeout_ms") && text.contains("response_timeout_ms"),
            "{text}"
        );
    }

    #[test]
    fn a_password_with_reserved_characters_is_read_as_written() {
        for (url, password) in [
            ("etcd://root:p+w&d%25%40x@h", "p+w&d%@x"),
            ("etcd://root:p+w&d%@x@h", "p+w&d%@x"),
        ] {
            let c = EtcdConfig::from_url(url).expect(url);
            assert_eq!(c.user, Some(("root".into(), password.into())), "{url}");
            assert!(!format!("{c:?}").contains("p+w"));
        }
    }

    #[test]
    fn typed_settings_are_the_urls() {
        let typed = EtcdConfig::new([Endpoint::new("a", 2379), Endpoint::new("b", 2380)])
            .with_credentials("root", "pw")
            .with_prefix("svc/")
            .with_response_timeout(Duration::from_millis(700));
        let parsed: EtcdConfig = "etcd://root:pw@a,b:2380?prefix=svc/&response_timeout_ms=700"
            .parse()
            .expect("valid");
        assert_eq!(format!("{typed:?}"), format!("{parsed:?}"));
        assert_eq!(typed.user, parsed.user);
        typed.check().expect("valid");
        assert!(EtcdConfig::default().with_prefix("a\nb").check().is_err());
        assert!(EtcdConfig::default()
            .with_client_certificate("/c.pem", "/k.pem")
            .check()
            .is_err());
    }
}
