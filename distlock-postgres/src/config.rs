//! [`PostgresConfig`]: what a `postgres://` or `postgresql://` URL says.

use std::fmt;
use std::str::FromStr;

use distlock_core::backend::{ConnectionUrl, Endpoint, Scheme};
use distlock_core::{Error, Result};
use distlock_sql::Common;
use sqlx::postgres::PgConnectOptions;

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &Scheme::names(&SCHEME_LIST);

/// Each of [`SCHEMES`] with the crate feature it needs beyond the defaults: the
/// one list of them, which `SCHEMES` and the crate's `DESCRIPTOR` read.
pub(crate) const SCHEME_LIST: [Scheme; 2] = [Scheme::new("postgres"), Scheme::new("postgresql")];

/// How `COMMIT` waits for the write-ahead log, per lock statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynchronousCommit {
    /// The setting the server gives the backend's sessions (its configuration, or the
    /// role's or database's), read when the backend connects: fences are declared
    /// durable only where it is not `off`. A change made on the server later is not
    /// seen.
    Server,
    /// `on`, set on each lock statement whatever the server's setting: flushed before
    /// the reply; fences are durable. The default.
    On,
    /// `off`: the reply may come before the flush; a crash may lose the last grants,
    /// so fences are declared best effort.
    Off,
}

/// Where and how to reach PostgreSQL, and which lock table to use: built from a URL
/// ([`from_url`](Self::from_url), or `str::parse`), or typed
/// ([`PostgresConfig::new`] from sqlx's own [`PgConnectOptions`], and the `with_`
/// setters); the same settings either way. With a pool the service already has, only
/// the lock settings are read (see [`PostgresBackend::from_pool`](crate::PostgresBackend::from_pool)).
///
/// `postgres[ql]://user:password@host[:port]/db?schema=..&table=..&pool_size=..&synchronous_commit=on|off&unlogged=true|false&notify=true|false&migrate=true|false&response_timeout_ms=..&acquire_timeout_ms=..`
///
/// - the port is 5432 unless given; user, password and database are percent-encoded
///   where they hold a reserved character (`%40` for `@`, say); a raw `+` stays a `+`;
/// - `schema` (default `public`) and `table` (default `distlock_locks`) name the lock
///   table: lowercase letters, digits and `_`, starting with a letter or `_`, at most
///   63 bytes; anything else is refused, so no setting can inject SQL;
/// - `pool_size` (default 10) bounds the connections;
/// - `synchronous_commit` (`on`, the default, `off` or `server`) sets commit durability
///   per statement; `server` keeps the server's setting, read at connect, and
///   declares fences durable only where it is not `off`;
/// - `unlogged=true` creates the table `UNLOGGED` (faster; leases are lost on a crash,
///   fences stay durable since they come from a logged sequence);
/// - `notify=false` turns off LISTEN; waiters then poll;
/// - `pgbouncer=true` is the mode for PgBouncer in transaction pooling (see the crate
///   docs); it turns LISTEN off;
/// - `migrate=false` leaves the tables to a DBA: the backend then only checks at
///   connect that they are there ([`PostgresBackend::migration_sql`](crate::PostgresBackend::migration_sql)
///   prints what to run);
/// - `purge_every_ms` (default 30000) is how often the rows of ended leases are
///   deleted; `purge=false` turns that off;
/// - `response_timeout_ms` (default 5000) bounds each statement, `acquire_timeout_ms`
///   (default 3000) each wait for a pooled connection, connecting included;
/// - `ca_file`, `cert_file` and `key_file` (PEM files) are TLS as on the other
///   backends: `ca_file` alone checks the server's certificate against the host
///   (`sslmode=verify-full` unless `sslmode` says otherwise); they are sqlx's
///   `sslrootcert`, `sslcert` and `sslkey`, also accepted under those names;
/// - TLS is verified or absent: without `sslmode` or `ca_file` the connection is plain
///   text (`sslmode=disable`, never sqlx's default `prefer`, which tries TLS without
///   checking the certificate and falls back); `sslmode=prefer`, `allow` or `require`,
///   which do not check it, are refused unless `insecure_tls=true` says so.
///
/// A Unix socket has no URL here: build the config typed, from
/// `PgConnectOptions::new().socket(path)`.
///
/// sqlx's own options `sslmode`, `sslrootcert`, `sslcert`, `sslkey`,
/// `application_name`, `options` and `statement-cache-capacity` go to sqlx (TLS needs
/// this crate's `tls` feature). Any other option is a configuration error that names it
/// and lists the valid ones. `Debug` and errors show the URL with its password
/// replaced by `***`.
#[derive(Clone)]
pub struct PostgresConfig {
    pub(crate) connect: PgConnectOptions,
    pub(crate) shown_url: String,
    pub(crate) password: Option<String>,
    pub(crate) schema: String,
    pub(crate) common: Common,
    pub(crate) synchronous_commit: SynchronousCommit,
    pub(crate) unlogged: bool,
    pub(crate) notify: Option<bool>,
    pub(crate) pgbouncer: bool,
}

/// PostgreSQL's port, where a URL names none.
pub const DEFAULT_PORT: u16 = 5432;

/// The options a URL hands to sqlx unread.
const SQLX_OPTIONS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "application_name",
    "options",
    "statement-cache-capacity",
];

fn config_error(message: impl Into<String>) -> Error {
    distlock_core::backend::config_error("postgres", message)
}

/// The longest identifier PostgreSQL keeps whole.
const MAX_IDENTIFIER: usize = 63;

/// Checks an identifier (see [`distlock_sql::check_identifier`]).
pub(crate) fn check_identifier(what: &str, name: &str) -> Result<()> {
    distlock_sql::check_identifier("postgres", what, name, MAX_IDENTIFIER)
}

impl Default for PostgresConfig {
    /// sqlx's defaults ([`PgConnectOptions::new`]: the `PG*` environment variables,
    /// else a server on localhost), with every lock default.
    fn default() -> Self {
        PostgresConfig::new(PgConnectOptions::new())
    }
}

impl FromStr for PostgresConfig {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self> {
        PostgresConfig::from_url(url)
    }
}

impl PostgresConfig {
    /// The server sqlx's `connect` options name, with every lock default.
    pub fn new(connect: PgConnectOptions) -> Self {
        let shown_url = format!(
            "postgres://{}@{}/{}",
            distlock_core::backend::encode(connect.get_username()),
            Endpoint::new(connect.get_host(), connect.get_port()),
            distlock_core::backend::encode(connect.get_database().unwrap_or(""))
        );
        PostgresConfig {
            connect,
            shown_url,
            password: None,
            schema: "public".into(),
            common: Common::default(),
            synchronous_commit: SynchronousCommit::On,
            unlogged: false,
            notify: None,
            pgbouncer: false,
        }
    }

    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error names what is wrong, never
    /// echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = ConnectionUrl::parse("postgres", url, SCHEMES, DEFAULT_PORT)?;
        let [endpoint] = url.endpoints.as_slice() else {
            return Err(config_error(
                "a postgres URL names one server (for several, put PgBouncer or a proxy in front)",
            ));
        };
        let mut options = url.options();
        let schema = options.take("schema")?;
        let mut common = Common::default();
        common.read("postgres", &mut options)?;
        let synchronous_commit = options.take("synchronous_commit")?;
        let unlogged = options.flag("unlogged")?;
        let notify = options.flag("notify")?;
        let pgbouncer = options.flag("pgbouncer")?;
        let ca_file = options.take("ca_file")?;
        let insecure_tls = options.flag("insecure_tls")?;
        let cert_file = options.take("cert_file")?;
        let key_file = options.take("key_file")?;
        let passed_on = options.pass_on(SQLX_OPTIONS);
        options.finish()?;

        let database = url.path.strip_prefix('/').unwrap_or(&url.path);
        let mut driver_url = format!(
            "postgres://{endpoint}/{}",
            distlock_core::backend::encode(database)
        );
        for (i, (name, value)) in passed_on.iter().enumerate() {
            driver_url.push(if i == 0 { '?' } else { '&' });
            driver_url.push_str(&format!("{name}={}", distlock_core::backend::encode(value)));
        }
        let mut connect = PgConnectOptions::from_str(&driver_url)
            .map_err(|e| config_error(format!("sqlx refused the URL's settings: {e}")))?;
        if let Some(user) = &url.user {
            connect = connect.username(user);
        }
        if let Some(password) = &url.password {
            connect = connect.password(password);
        }
        // TLS is verified or absent: without a TLS option, plain text (sqlx's default,
        // `prefer`, would try TLS without checking the certificate, and fall back);
        // a mode that does not check it only with `insecure_tls=true`.
        let sslmode = passed_on
            .iter()
            .find(|(name, _)| name == "sslmode")
            .map(|(_, value)| value.as_str());
        match (sslmode, &ca_file) {
            (None, Some(_)) => connect = connect.ssl_mode(sqlx::postgres::PgSslMode::VerifyFull),
            (None, None) => connect = connect.ssl_mode(sqlx::postgres::PgSslMode::Disable),
            (Some("prefer" | "allow" | "require"), _) if insecure_tls != Some(true) => {
                return Err(config_error(format!(
                    "sslmode={} encrypts without checking the server's certificate (and prefer or allow fall back to plain text): use sslmode=verify-full (with ca_file, or the roots sqlx trusts), or say insecure_tls=true to accept a server nobody checked",
                    sslmode.unwrap_or_default()
                )))
            }
            _ => {}
        }
        if let Some(ca) = &ca_file {
            connect = connect.ssl_root_cert(ca);
        }
        match (&cert_file, &key_file) {
            (Some(cert), Some(key)) => connect = connect.ssl_client_cert(cert).ssl_client_key(key),
            (None, None) => {}
            _ => return Err(config_error("cert_file and key_file go together")),
        }

        let mut config = PostgresConfig::new(connect);
        config.shown_url = url.redacted();
        config.password = url.password.clone();
        if let Some(schema) = schema {
            config.schema = schema;
        }
        config.common = common;
        if let Some(commit) = synchronous_commit {
            config.synchronous_commit = match commit.as_str() {
                "on" => SynchronousCommit::On,
                "off" => SynchronousCommit::Off,
                "server" => SynchronousCommit::Server,
                other => {
                    return Err(config_error(format!(
                        "synchronous_commit must be on, off or server, not {other:?}"
                    )))
                }
            };
        }
        config.unlogged = unlogged.unwrap_or(false);
        config.notify = notify;
        config.pgbouncer = pgbouncer.unwrap_or(false);
        config.check()?;
        Ok(config)
    }

    /// Checks the settings as a whole: what [`from_url`](Self::from_url) and
    /// [`PostgresBackend::connect_with`](crate::PostgresBackend::connect_with) refuse.
    pub fn check(&self) -> Result<()> {
        check_identifier("schema", &self.schema)?;
        self.common.check("postgres", MAX_IDENTIFIER)?;
        if self.pgbouncer && self.notify == Some(true) {
            return Err(config_error(
                "notify=true cannot work with pgbouncer=true: LISTEN needs a session of its own, \
                 which transaction pooling does not keep (waiters poll instead)",
            ));
        }
        Ok(())
    }

    /// sqlx's options for the backend's own connections: the URL's, with the session
    /// settings as start-up options (none behind PgBouncer).
    pub(crate) fn connect_options(&self) -> PgConnectOptions {
        // The server ends any statement that outlives the response timeout, so none can
        // run on after the backend gave up on it (see `purge_expired`). Behind PgBouncer
        // these settings go with each statement instead (`session_settings`): a pooler
        // refuses or drops start-up options, and a session's settings do not follow a
        // client from one server connection to the next.
        let mut connect = self.connect.clone();
        if self.pgbouncer {
            connect = connect.extra_float_digits(None);
        } else {
            for (name, value) in self.session_settings() {
                connect = connect.options([(name, value)]);
            }
        }
        connect.application_name("distlock")
    }

    /// The settings every statement runs under: the server-side statement timeout, and
    /// the commit durability where the URL set one.
    pub(crate) fn session_settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = vec![(
            "statement_timeout",
            self.common.response_timeout.as_millis().to_string(),
        )];
        match self.synchronous_commit {
            SynchronousCommit::On => settings.push(("synchronous_commit", "on".into())),
            SynchronousCommit::Off => settings.push(("synchronous_commit", "off".into())),
            SynchronousCommit::Server => {}
        }
        settings
    }

    /// The lock table's schema (`schema`).
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Commit durability per statement (`synchronous_commit`).
    pub fn with_synchronous_commit(mut self, commit: SynchronousCommit) -> Self {
        self.synchronous_commit = commit;
        self
    }

    /// Whether the lock table is created `UNLOGGED` (`unlogged`).
    pub fn with_unlogged(mut self, unlogged: bool) -> Self {
        self.unlogged = unlogged;
        self
    }

    /// Whether waiters listen for releases (`notify`) or poll.
    pub fn with_notify(mut self, notify: bool) -> Self {
        self.notify = Some(notify);
        self
    }

    distlock_sql::common_settings!();

    /// The PgBouncer mode (`pgbouncer`).
    pub fn with_pgbouncer(mut self, pgbouncer: bool) -> Self {
        self.pgbouncer = pgbouncer;
        self
    }

    /// Whether the backend runs in its PgBouncer mode (`pgbouncer=true`): each
    /// operation one simple-protocol batch that sets its own timeout, no prepared
    /// statements, no start-up options, no LISTEN.
    pub fn pgbouncer(&self) -> bool {
        self.pgbouncer
    }

    /// Whether waiters listen for releases: unless turned off, and never behind
    /// PgBouncer.
    pub fn notify(&self) -> bool {
        !self.pgbouncer && self.notify.unwrap_or(true)
    }

    /// The lock table's schema.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Whether fences survive a crash as configured here: commits are flushed before
    /// the reply. With [`SynchronousCommit::Server`] the backend reads the server's
    /// setting at connect, and its capabilities say what it found.
    pub fn durable_commits(&self) -> bool {
        self.synchronous_commit != SynchronousCommit::Off
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

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.shown_url)
            .field("schema", &self.schema)
            .field("table", &self.common.table)
            .field("pool_size", &self.common.pool_size)
            .field("synchronous_commit", &self.synchronous_commit)
            .field("unlogged", &self.unlogged)
            .field("notify", &self.notify())
            .field("migrate", &self.common.migrate)
            .field("purge_every", &self.common.purge_every)
            .field("pgbouncer", &self.pgbouncer)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// TLS is verified or absent: never sqlx's unverified, downgradable `prefer`
    /// unless asked for by name.
    #[test]
    fn tls_is_verified_or_refused_unless_insecure_tls_says_so() {
        let mode = |url: &str| {
            let config = PostgresConfig::from_url(url).expect("url");
            format!("{:?}", config.connect.get_ssl_mode())
        };
        assert_eq!(mode("postgres://h/db"), "Disable");
        assert_eq!(mode("postgres://h/db?ca_file=/ca.pem"), "VerifyFull");
        assert_eq!(mode("postgres://h/db?sslmode=verify-full"), "VerifyFull");
        for unchecked in ["prefer", "allow", "require"] {
            let refused = PostgresConfig::from_url(&format!("postgres://h/db?sslmode={unchecked}"))
                .expect_err("a mode that checks no certificate");
            assert_eq!(refused.kind(), distlock_core::ErrorKind::Configuration);
            assert!(
                refused.to_string().contains("insecure_tls=true"),
                "{refused}"
            );
            let accepted = format!("postgres://h/db?sslmode={unchecked}&insecure_tls=true");
            assert!(PostgresConfig::from_url(&accepted).is_ok(), "{accepted}");
        }
    }

    /// Fences are declared durable by default only because each lock statement sets
    /// `synchronous_commit = on` itself, whatever the server or the role says.
    #[test]
    fn the_default_sets_synchronous_commit_on_for_each_statement() {
        let config = PostgresConfig::from_url("postgres://h/db").expect("url");
        assert!(config.durable_commits());
        assert!(
            config
                .session_settings()
                .contains(&("synchronous_commit", "on".to_owned())),
            "{:?}",
            config.session_settings()
        );
        let server =
            PostgresConfig::from_url("postgres://h/db?synchronous_commit=server").expect("url");
        assert!(!server
            .session_settings()
            .iter()
            .any(|(name, _)| *name == "synchronous_commit"));
    }
    use distlock_core::ErrorKind;

    #[test]
    fn pgbouncer_mode_turns_notifications_off_and_refuses_them() {
        let parse = |q: &str| PostgresConfig::from_url(&format!("postgres://u:s3cret@h/db{q}"));
        let bouncer = parse("?pgbouncer=true").expect("pgbouncer");
        assert!(bouncer.pgbouncer());
        assert!(!bouncer.notify());
        assert!(parse("?pgbouncer=true&notify=false").is_ok());
        let err = parse("?pgbouncer=true&notify=true").expect_err("notify");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(err.to_string().contains("notify=true"), "{err}");
        assert!(!err.to_string().contains("s3cret"));
        // Without it, nothing changes.
        let direct = parse("").expect("direct");
        assert!(!direct.pgbouncer() && direct.notify());
        assert_eq!(direct.session_settings()[0].0, "statement_timeout");
    }

    #[test]
    fn the_purge_runs_every_30_s_unless_set_or_turned_off() {
        let parse = |q: &str| PostgresConfig::from_url(&format!("postgres://u@h/db{q}"));
        assert_eq!(
            parse("").expect("default").purge_every(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse("?purge_every_ms=5000").expect("set").purge_every(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(parse("?purge=false").expect("off").purge_every(), None);
        for bad in ["?purge_every_ms=0", "?purge=maybe"] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
        }
    }

    #[test]
    fn hostile_identifiers_are_configuration_errors() {
        for bad in [
            "locks;DROP TABLE users",
            "\"quoted\"",
            "Upper",
            "1starts_with_digit",
            "has space",
            "dash-ed",
            "",
            &"x".repeat(64),
            "é",
        ] {
            for param in ["table", "schema"] {
                let url = format!("postgres://u:s3cret@h/db?{param}={}", url_escape(bad));
                let err = PostgresConfig::from_url(&url).expect_err(bad);
                assert_eq!(err.kind(), ErrorKind::Configuration, "{bad}: {err}");
                assert!(!err.to_string().contains("s3cret"));
            }
        }
        let ok = PostgresConfig::from_url("postgres://u:s3cret@h/db?schema=locks_v2&table=_held")
            .expect("valid");
        assert_eq!((ok.schema(), ok.table()), ("locks_v2", "_held"));
    }

    fn url_escape(s: &str) -> String {
        s.bytes().map(|b| format!("%{b:02X}")).collect()
    }

    #[test]
    fn debug_hides_the_password_and_options_parse() {
        let c = PostgresConfig::from_url(
            "postgresql://app:s3cret@db:5433/locks?synchronous_commit=off&unlogged=true&notify=false&application_name=x",
        )
        .expect("valid");
        assert!(!c.durable_commits());
        assert!(c.unlogged && !c.notify());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("s3cret") && shown.contains("app:***@db"),
            "{shown}"
        );
        for bad in [
            "redis://h",
            "postgres://h/db?pool_size=0",
            "postgres://h/db?notify=maybe",
            "postgres://h/db?synchronous_commit=local",
            "postgres://a,b/db",
            "postgres://h/db?cert_file=/c.pem",
        ] {
            assert_eq!(
                PostgresConfig::from_url(bad)
                    .map(|_| ())
                    .map_err(|e| e.kind()),
                Err(ErrorKind::Configuration),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_misspelt_table_is_an_error_not_the_shared_default() {
        let err = PostgresConfig::from_url("postgres://u:s3cret@h/db?tabel=svc_locks")
            .expect_err("tabel");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        let text = err.to_string();
        assert!(
            text.contains("\"tabel\"") && text.contains("did you mean table?"),
            "{text}"
        );
        assert!(
            text.contains("schema") && text.contains("sslmode"),
            "{text}"
        );
        assert!(!text.contains("s3cret"));
    }

    #[test]
    fn a_password_with_reserved_characters_and_default_port_are_read() {
        let c = PostgresConfig::from_url(
            "postgres://app:p+w&d%25%40x@db/my%20db?migrate=false&sslmode=disable",
        )
        .expect("valid");
        assert_eq!(c.password.as_deref(), Some("p+w&d%@x"));
        assert_eq!(c.endpoint(), Endpoint::new("db", 5432));
        assert_eq!(c.connect.get_database(), Some("my db"));
        assert!(!c.migrate());
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("p+w") && shown.contains("app:***@db:5432"),
            "{shown}"
        );
    }

    #[test]
    fn typed_settings_are_checked_as_the_urls_are() {
        let typed = PostgresConfig::new(PgConnectOptions::new().host("db").port(5433))
            .with_table("svc_locks")
            .with_migrate(false);
        typed.check().expect("valid");
        assert_eq!(typed.table(), "svc_locks");
        assert_eq!(typed.endpoint(), Endpoint::new("db", 5433));
        assert!(PostgresConfig::default().with_table("Bad").check().is_err());
        assert!(PostgresConfig::default().with_pool_size(0).check().is_err());
        // A zero time-out would fail every statement: refused, as MySQL's is.
        let zero = PostgresConfig::default().with_response_timeout(Duration::ZERO);
        let e = zero.check().expect_err("a zero response time-out");
        assert!(e.to_string().contains("above 0"), "{e}");
        assert!(PostgresConfig::default()
            .with_pgbouncer(true)
            .with_notify(true)
            .check()
            .is_err());
    }
}
