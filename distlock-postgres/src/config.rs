//! [`PostgresConfig`]: what a `postgres://` or `postgresql://` URL says.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use distlock_core::{redact_url, support, Error, Result};
use sqlx::postgres::PgConnectOptions;

/// The URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["postgres", "postgresql"];

/// How `COMMIT` waits for the write-ahead log, per lock statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynchronousCommit {
    /// The server's setting (by default `on`: flushed to disk before the reply).
    Server,
    /// `on`: flushed before the reply; fences are durable.
    On,
    /// `off`: the reply may come before the flush; a crash may lose the last grants,
    /// so fences are declared best effort.
    Off,
}

/// Where and how to reach PostgreSQL, from a URL:
///
/// `postgres[ql]://user:password@host:port/db?schema=..&table=..&pool_size=..&synchronous_commit=on|off&unlogged=true|false&notify=true|false&response_timeout_ms=..&acquire_timeout_ms=..`
///
/// - `schema` (default `public`) and `table` (default `distlock_locks`) name the lock
///   table: lowercase letters, digits and `_`, starting with a letter or `_`, at most
///   63 bytes; anything else is refused, so no setting can inject SQL;
/// - `pool_size` (default 10) bounds the connections;
/// - `synchronous_commit` (default: the server's) sets commit durability per statement;
/// - `unlogged=true` creates the table `UNLOGGED` (faster; leases are lost on a crash,
///   fences stay durable since they come from a logged sequence);
/// - `notify=false` turns off LISTEN; waiters then poll;
/// - `pgbouncer=true` is the mode for PgBouncer in transaction pooling (see the crate
///   docs); it turns LISTEN off;
/// - `purge_every_ms` (default 30000) is how often the rows of ended leases are
///   deleted; `purge=false` turns that off;
/// - `response_timeout_ms` (default 5000) bounds each statement, `acquire_timeout_ms`
///   (default 3000) each wait for a pooled connection.
///
/// Other parameters go to sqlx, TLS among them (this crate's `tls` feature):
/// `sslmode=verify-full` with `sslrootcert` (the CA, a PEM file) checks the server's
/// certificate against the URL's host; `sslcert` and `sslkey` present a client
/// certificate. A certificate the CA did not sign is a configuration error at connect.
/// `Debug` and errors show the URL with its password replaced by `***`.
#[derive(Clone)]
pub struct PostgresConfig {
    pub(crate) connect: PgConnectOptions,
    pub(crate) shown_url: String,
    pub(crate) password: Option<String>,
    pub(crate) schema: String,
    pub(crate) table: String,
    pub(crate) pool_size: u32,
    pub(crate) synchronous_commit: SynchronousCommit,
    pub(crate) unlogged: bool,
    pub(crate) notify: bool,
    pub(crate) response_timeout: Duration,
    pub(crate) acquire_timeout: Duration,
    pub(crate) purge_every: Option<Duration>,
    pub(crate) pgbouncer: bool,
}

fn config_error(message: impl Into<String>) -> Error {
    support::config_error("postgres", message)
}

/// Checks an identifier: what it may be is narrow on purpose, so that it needs no
/// escaping and cannot carry SQL.
pub(crate) fn check_identifier(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(config_error(format!(
            "the {what} name {name:?} is not allowed: use 1 to 63 lowercase letters, digits or _, not starting with a digit"
        )))
    }
}

fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value {
        "true" | "on" | "1" => Ok(true),
        "false" | "off" | "0" => Ok(false),
        _ => Err(config_error(format!(
            "{name} must be true or false, not {value:?}"
        ))),
    }
}

impl PostgresConfig {
    /// Parses a URL; a [`ErrorKind::Configuration`](distlock_core::ErrorKind::Configuration) error names what is wrong, never
    /// echoing the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut parsed =
            url::Url::parse(url).map_err(|e| config_error(format!("not a valid URL ({e})")))?;
        if !SCHEMES.contains(&parsed.scheme()) {
            return Err(config_error(format!(
                "the scheme {:?} is not served by the postgres backend (it serves {SCHEMES:?})",
                parsed.scheme()
            )));
        }
        let mut config = PostgresConfig {
            connect: PgConnectOptions::new(),
            shown_url: String::new(),
            password: parsed.password().map(|p| p.to_owned()),
            schema: "public".into(),
            table: "distlock_locks".into(),
            pool_size: 10,
            synchronous_commit: SynchronousCommit::Server,
            unlogged: false,
            notify: true,
            response_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(3),
            purge_every: Some(Duration::from_secs(30)),
            pgbouncer: false,
        };
        let mut notify_asked = None;
        let mut passed_on = Vec::new();
        for (name, value) in parsed.query_pairs() {
            let millis = |v: &str| support::positive_millis("postgres", &name, v);
            match name.as_ref() {
                "schema" => {
                    check_identifier("schema", &value)?;
                    config.schema = value.into_owned();
                }
                "table" => {
                    check_identifier("table", &value)?;
                    config.table = value.into_owned();
                }
                "pool_size" => {
                    config.pool_size = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| {
                            config_error(format!("pool_size must be 1 to 1000, not {value:?}"))
                        })?;
                }
                "synchronous_commit" => {
                    config.synchronous_commit = match value.as_ref() {
                        "on" => SynchronousCommit::On,
                        "off" => SynchronousCommit::Off,
                        other => {
                            return Err(config_error(format!(
                                "synchronous_commit must be on or off, not {other:?}"
                            )))
                        }
                    }
                }
                "unlogged" => config.unlogged = parse_bool("unlogged", &value)?,
                "notify" => notify_asked = Some(parse_bool("notify", &value)?),
                "pgbouncer" => config.pgbouncer = parse_bool("pgbouncer", &value)?,
                "response_timeout_ms" => config.response_timeout = millis(&value)?,
                "acquire_timeout_ms" => config.acquire_timeout = millis(&value)?,
                "purge_every_ms" => config.purge_every = Some(millis(&value)?),
                "purge" => {
                    if !parse_bool("purge", &value)? {
                        config.purge_every = None;
                    }
                }
                _ => passed_on.push((name.into_owned(), value.into_owned())),
            }
        }
        config.notify = match (config.pgbouncer, notify_asked) {
            (true, Some(true)) => return Err(config_error(
                "notify=true cannot work with pgbouncer=true: LISTEN needs a session of its own, \
                     which transaction pooling does not keep (waiters poll instead)",
            )),
            (true, _) => false,
            (false, asked) => asked.unwrap_or(true),
        };
        if passed_on.is_empty() {
            parsed.set_query(None);
        } else {
            parsed.query_pairs_mut().clear().extend_pairs(passed_on);
        }
        let driver_url = parsed.to_string();
        config.shown_url = redact_url(&driver_url);
        let mut connect = PgConnectOptions::from_str(&driver_url).map_err(|e| {
            config_error(format!(
                "sqlx refused the URL: {}",
                config.scrub(e.to_string())
            ))
        })?;
        // The server ends any statement that outlives the response timeout, so none can
        // run on after the backend gave up on it (see `purge_expired`). Behind PgBouncer
        // these settings go with each statement instead (`session_settings`): a pooler
        // refuses or drops start-up options, and a session's settings do not follow a
        // client from one server connection to the next.
        if config.pgbouncer {
            connect = connect.extra_float_digits(None);
        } else {
            for (name, value) in config.session_settings() {
                connect = connect.options([(name, value)]);
            }
        }
        config.connect = connect.application_name("distlock");
        Ok(config)
    }

    /// The settings every statement runs under: the server-side statement timeout, and
    /// the commit durability where the URL set one.
    pub(crate) fn session_settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = vec![(
            "statement_timeout",
            self.response_timeout.as_millis().to_string(),
        )];
        match self.synchronous_commit {
            SynchronousCommit::On => settings.push(("synchronous_commit", "on".into())),
            SynchronousCommit::Off => settings.push(("synchronous_commit", "off".into())),
            SynchronousCommit::Server => {}
        }
        settings
    }

    /// Whether the backend runs in its PgBouncer mode (`pgbouncer=true`): each
    /// operation one simple-protocol batch that sets its own timeout, no prepared
    /// statements, no start-up options, no LISTEN.
    pub fn pgbouncer(&self) -> bool {
        self.pgbouncer
    }

    /// The lock table's schema.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The lock table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// How often the backend deletes the rows of leases that ended (`purge_every_ms`,
    /// 30 s unless set; `None` with `purge=false`). See
    /// [`PostgresBackend::purge_expired`](crate::PostgresBackend::purge_expired).
    pub fn purge_every(&self) -> Option<Duration> {
        self.purge_every
    }

    /// Whether fences survive a crash: commits are flushed before the reply.
    pub fn durable_commits(&self) -> bool {
        self.synchronous_commit != SynchronousCommit::Off
    }

    /// Replaces the password, wherever it appears in `text`, by `***`.
    pub(crate) fn scrub(&self, text: String) -> String {
        support::scrub(text, self.password.as_deref())
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.shown_url)
            .field("schema", &self.schema)
            .field("table", &self.table)
            .field("pool_size", &self.pool_size)
            .field("synchronous_commit", &self.synchronous_commit)
            .field("unlogged", &self.unlogged)
            .field("notify", &self.notify)
            .field("purge_every", &self.purge_every)
            .field("pgbouncer", &self.pgbouncer)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock_core::ErrorKind;

    #[test]
    fn pgbouncer_mode_turns_notifications_off_and_refuses_them() {
        let parse = |q: &str| PostgresConfig::from_url(&format!("postgres://u:s3cret@h/db{q}"));
        let bouncer = parse("?pgbouncer=true").expect("pgbouncer");
        assert!(bouncer.pgbouncer());
        assert!(!bouncer.notify);
        assert!(parse("?pgbouncer=true&notify=false").is_ok());
        let err = parse("?pgbouncer=true&notify=true").expect_err("notify");
        assert_eq!(err.kind(), ErrorKind::Configuration);
        assert!(err.to_string().contains("notify=true"), "{err}");
        assert!(!err.to_string().contains("s3cret"));
        // Without it, nothing changes.
        let direct = parse("").expect("direct");
        assert!(!direct.pgbouncer() && direct.notify);
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
        assert!(c.unlogged && !c.notify);
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
}
