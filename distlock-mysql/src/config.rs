//! [`MySqlConfig`]: what a `mysql://` or `mariadb://` URL says.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use distlock_core::backend::{ConnectionUrl, Endpoint, Options, Scheme};
use distlock_core::{Error, Result};
use distlock_sql::Common;
use sqlx::mysql::{MySqlConnectOptions, MySqlSslMode};

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &Scheme::names(&SCHEME_LIST);

/// Each of [`SCHEMES`] with the crate feature it needs beyond the defaults: the
/// one list of them, which `SCHEMES` and the crate's `DESCRIPTOR` read.
pub(crate) const SCHEME_LIST: [Scheme; 2] = [Scheme::new("mysql"), Scheme::new("mariadb")];

/// MySQL's and MariaDB's port, where a URL names none.
pub const DEFAULT_PORT: u16 = 3306;

/// Where and how to reach MySQL or MariaDB, and which lock table to use: built from a
/// URL ([`from_url`](Self::from_url), or `str::parse`), or typed ([`MySqlConfig::new`]
/// from sqlx's own [`MySqlConnectOptions`], and the `with_` setters); the same
/// settings either way. With a pool the service already has, only the lock settings
/// are read (see [`MySqlBackend::from_pool`](crate::MySqlBackend::from_pool)).
///
/// `mysql://user:password@host[:port]/database?table=..&pool_size=..&migrate=true|false&purge_every_ms=..&purge=true|false&response_timeout_ms=..&acquire_timeout_ms=..`
/// (`mariadb://` is the same)
///
/// - the port is 3306 unless given; user, password and database are percent-encoded
///   where they hold a reserved character (`%40` for `@`, say); the database is
///   required, since the lock tables live in it;
/// - `table` (default `distlock_locks`) names the lock table: lowercase letters,
///   digits and `_`, starting with a letter or `_`, at most 48 bytes (the backend adds
///   suffixes of its own); anything else is refused, so no setting can inject SQL;
/// - `pool_size` (default 10) bounds the connections;
/// - `migrate=false` leaves the tables to a DBA: the backend then only checks at
///   connect that they are there ([`MySqlBackend::migration_sql`](crate::MySqlBackend::migration_sql)
///   prints what to run);
/// - `purge_every_ms` (default 30000) is how often the rows of released leases, and
///   of leases that ran out more than `purge_after_ms` (default 60000) ago, are
///   deleted; `purge=false` turns that off;
/// - `response_timeout_ms` (default 5000) bounds each statement (and is the server's
///   `innodb_lock_wait_timeout` for the backend's own connections, rounded up to whole
///   seconds), `acquire_timeout_ms` (default 3000) each wait for a pooled connection,
///   connecting included.
///
/// TLS, as on the other backends (this crate's `tls` feature, through rustls):
///
/// - `ca_file`, `cert_file` and `key_file` (PEM files): `ca_file` alone checks the
///   server's certificate against the CA and the URL's host (`ssl-mode=VERIFY_IDENTITY`
///   unless `ssl-mode` says otherwise); `cert_file` and `key_file` present a client
///   certificate. sqlx's names `ssl-ca`, `ssl-cert` and `ssl-key` are accepted too;
/// - `ssl-mode` is `VERIFY_IDENTITY` (the certificate and the host), `VERIFY_CA` (the
///   certificate only) or `DISABLED`; `REQUIRED` and `PREFERRED`, which do not check
///   the certificate (and `PREFERRED` falls back to plain text), are refused unless
///   `insecure_tls=true` says so;
/// - without any of them the connection is plain text (`DISABLED`, never sqlx's
///   unverified default `PREFERRED`), and the server must accept it.
///
/// A typed config keeps the `MySqlConnectOptions` it was given as they are. Any other
/// option is a configuration error that names it and lists the valid ones.
/// `Debug` and errors show the URL with its password replaced by `***`.
#[derive(Clone)]
pub struct MySqlConfig {
    pub(crate) connect: MySqlConnectOptions,
    pub(crate) shown_url: String,
    pub(crate) password: Option<String>,
    pub(crate) common: Common,
    pub(crate) purge_after: Duration,
}

/// A URL's TLS settings (see [`MySqlConfig`]).
struct Tls {
    mode: MySqlSslMode,
    ca_file: Option<String>,
    client: Option<(String, String)>,
}

impl Tls {
    /// Takes the TLS options out of `options`: verified or absent, unless
    /// `insecure_tls=true` says otherwise.
    fn read(options: &mut Options) -> Result<Self> {
        let mut either = |ours: &'static str, sqlx: &'static str| -> Result<Option<String>> {
            match (options.take(ours)?, options.take(sqlx)?) {
                (Some(_), Some(_)) => Err(config_error(format!(
                    "{ours} and {sqlx} are one setting: give one of them"
                ))),
                (ours, sqlx) => Ok(ours.or(sqlx)),
            }
        };
        let ca_file = either("ca_file", "ssl-ca")?;
        let cert_file = either("cert_file", "ssl-cert")?;
        let key_file = either("key_file", "ssl-key")?;
        let mode = options.take("ssl-mode")?;
        let insecure = options.flag("insecure_tls")? == Some(true);
        let mode = match mode.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None if ca_file.is_some() || cert_file.is_some() => MySqlSslMode::VerifyIdentity,
            None | Some("DISABLED") => MySqlSslMode::Disabled,
            Some("VERIFY_IDENTITY") => MySqlSslMode::VerifyIdentity,
            Some("VERIFY_CA") => MySqlSslMode::VerifyCa,
            Some("REQUIRED") if insecure => MySqlSslMode::Required,
            Some("PREFERRED") if insecure => MySqlSslMode::Preferred,
            Some(unchecked @ ("REQUIRED" | "PREFERRED")) => {
                return Err(config_error(format!(
                    "ssl-mode={unchecked} encrypts without checking the server's certificate (and PREFERRED falls back to plain text): use ssl-mode=VERIFY_IDENTITY (with ca_file, or the roots sqlx trusts), or say insecure_tls=true to accept a server nobody checked"
                )))
            }
            Some(other) => {
                return Err(config_error(format!(
                    "ssl-mode must be VERIFY_IDENTITY, VERIFY_CA, DISABLED, or REQUIRED or PREFERRED with insecure_tls=true, not {other:?}"
                )))
            }
        };
        let client = match (cert_file, key_file) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(config_error("cert_file and key_file go together")),
        };
        Ok(Tls {
            mode,
            ca_file,
            client,
        })
    }

    /// `connect` with these settings.
    fn apply(self, connect: MySqlConnectOptions) -> MySqlConnectOptions {
        let mut connect = connect.ssl_mode(self.mode);
        if let Some(ca) = &self.ca_file {
            connect = connect.ssl_ca(ca);
        }
        if let Some((cert, key)) = &self.client {
            connect = connect.ssl_client_cert(cert).ssl_client_key(key);
        }
        connect
    }
}

/// The longest table name: MySQL's 64 less the longest suffix the backend adds
/// (`_fenced`), and some room.
const MAX_TABLE: usize = 48;

fn config_error(message: impl Into<String>) -> Error {
    distlock_core::backend::config_error("mysql", message)
}

impl FromStr for MySqlConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        MySqlConfig::from_url(url)
    }
}

impl MySqlConfig {
    /// The server sqlx's `connect` options name, with every lock default.
    pub fn new(connect: MySqlConnectOptions) -> Self {
        let shown_url = format!(
            "mysql://{}@{}/{}",
            distlock_core::backend::encode(connect.get_username()),
            Endpoint::new(connect.get_host(), connect.get_port()),
            distlock_core::backend::encode(connect.get_database().unwrap_or(""))
        );
        MySqlConfig {
            connect,
            shown_url,
            password: None,
            common: Common::default(),
            purge_after: Duration::from_secs(60),
        }
    }

    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration)
    /// error names what is wrong, never echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = ConnectionUrl::parse("mysql", url, SCHEMES, DEFAULT_PORT)?;
        let [endpoint] = url.endpoints.as_slice() else {
            return Err(config_error(
                "a mysql URL names one server (for several, put a proxy such as ProxySQL or MaxScale in front)",
            ));
        };
        let mut options = url.options();
        let mut common = Common::default();
        common.read("mysql", &mut options)?;
        let purge_after = options.millis("purge_after_ms")?;
        let tls = Tls::read(&mut options)?;
        options.finish()?;

        let database = url.path.strip_prefix('/').unwrap_or(&url.path);
        if database.is_empty() {
            return Err(config_error(format!(
                "the URL names no database: write mysql://user:password@{endpoint}/database, \
                 the database the lock tables live in"
            )));
        }
        let connect = MySqlConnectOptions::new()
            .host(&endpoint.host)
            .port(endpoint.port)
            .database(database);
        let mut connect = tls.apply(connect);
        if let Some(user) = &url.user {
            connect = connect.username(user);
        }
        if let Some(password) = &url.password {
            connect = connect.password(password);
        }

        let mut config = MySqlConfig::new(connect);
        config.shown_url = url.redacted();
        config.password = url.password.clone();
        config.common = common;
        if let Some(after) = purge_after {
            config.purge_after = after;
        }
        config.check()?;
        Ok(config)
    }

    /// Checks the settings as a whole: what [`from_url`](Self::from_url) and
    /// [`MySqlBackend::connect_with`](crate::MySqlBackend::connect_with) refuse.
    pub fn check(&self) -> Result<()> {
        self.common.check("mysql", MAX_TABLE)
    }

    distlock_sql::common_settings!();

    /// How long after its lease ended the periodic purge deletes a row
    /// (`purge_after_ms`).
    pub fn with_purge_after(mut self, after: Duration) -> Self {
        self.purge_after = after;
        self
    }

    /// The server, as `host:port`, for errors.
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint::new(self.connect.get_host(), self.connect.get_port())
    }

    /// Replaces the password, wherever it appears in `text`, by `***`.
    pub(crate) fn scrub(&self, text: String) -> String {
        distlock_core::backend::scrub(text, self.password.as_deref())
    }
}

impl fmt::Debug for MySqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlConfig")
            .field("url", &self.shown_url)
            .field("table", &self.common.table)
            .field("pool_size", &self.common.pool_size)
            .field("migrate", &self.common.migrate)
            .field("purge_every", &self.common.purge_every)
            .field("purge_after", &self.purge_after)
            .field("response_timeout", &self.common.response_timeout)
            .field("acquire_timeout", &self.common.acquire_timeout)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL never asks for TLS that is not verified: sqlx's default would.
    #[test]
    fn tls_is_verified_or_absent_unless_insecure_tls_says_so() {
        let mode = |url: &str| {
            let config = MySqlConfig::from_url(url).expect(url);
            format!("{:?}", config.connect.get_ssl_mode())
        };
        assert_eq!(mode("mysql://app:pw@db/locks"), "Disabled");
        assert_eq!(
            mode("mysql://app:pw@db/locks?ca_file=/ca.pem"),
            "VerifyIdentity"
        );
        assert_eq!(
            mode("mysql://app:pw@db/locks?ssl-ca=/ca.pem"),
            "VerifyIdentity"
        );
        assert_eq!(
            mode("mysql://app:pw@db/locks?ca_file=/ca.pem&ssl-mode=verify_ca"),
            "VerifyCa"
        );
        for unchecked in ["REQUIRED", "PREFERRED"] {
            let url = format!("mysql://app:pw@db/locks?ssl-mode={unchecked}");
            let refused = MySqlConfig::from_url(&url).expect_err("unchecked");
            assert!(
                refused.to_string().contains("insecure_tls=true"),
                "{refused}"
            );
            let accepted = format!("{url}&insecure_tls=true");
            assert_eq!(mode(&accepted).to_uppercase(), unchecked);
        }
        for (url, says) in [
            (
                "mysql://app:pw@db/locks?ssl-mode=SOMETIMES",
                "ssl-mode must be",
            ),
            ("mysql://app:pw@db/locks?cert_file=/c.pem", "go together"),
            (
                "mysql://app:pw@db/locks?ca_file=/a&ssl-ca=/b",
                "one setting",
            ),
        ] {
            let refused = MySqlConfig::from_url(url).expect_err(url);
            assert!(refused.to_string().contains(says), "{url}: {refused}");
        }
    }

    #[test]
    fn a_url_is_read_and_debug_hides_the_password() {
        let config: MySqlConfig =
            "mariadb://app:s3cr%40t@db:3307/locks?table=service_locks&pool_size=4&purge=false"
                .parse()
                .expect("parsed");
        assert_eq!(config.table(), "service_locks");
        assert_eq!(config.pool_size(), 4);
        assert_eq!(config.purge_every(), None);
        assert_eq!(config.endpoint(), Endpoint::new("db", 3307));
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
        let defaults: MySqlConfig = "mysql://app@db/locks".parse().expect("parsed");
        assert_eq!(defaults.endpoint().port, DEFAULT_PORT);
        assert_eq!(defaults.table(), "distlock_locks");
        assert_eq!(defaults.purge_every(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn bad_settings_are_configuration_errors_that_say_what_to_change() {
        for (url, says) in [
            ("mysql://app:pw@db/locks?table=Locks", "table name"),
            ("mysql://app:pw@db/locks?table=a;drop", "table name"),
            ("mysql://app:pw@db/locks?pool_size=0", "pool_size"),
            ("mysql://app:pw@db/locks?pool_sise=3", "pool_sise"),
            ("mysql://app:pw@db", "names no database"),
            ("mysql://app:pw@a,b/locks", "one server"),
            ("mysql://app:pw@db/locks?sslmode=require", "sslmode"),
        ] {
            let error = MySqlConfig::from_url(url).expect_err(url);
            assert_eq!(
                error.kind(),
                distlock_core::ErrorKind::Configuration,
                "{url}"
            );
            let text = error.to_string();
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("pw@"), "{url}: {text}");
        }
        let long = "t".repeat(MAX_TABLE + 1);
        assert!(MySqlConfig::from_url(&format!("mysql://db/locks?table={long}")).is_err());
        let typed = MySqlConfig::new(MySqlConnectOptions::new()).with_pool_size(0);
        assert!(typed.check().is_err());
    }
}
