//! The settings both SQL backends take under the same names, with the same defaults,
//! read from a URL and checked the same way: [`Common`], and the typed setters and
//! getters each backend's config exposes for them ([`common_settings!`](crate::common_settings)).

use std::time::Duration;

use distlock_core::backend::{config_error, Options};
use distlock_core::Result;

/// The largest connection pool a backend opens.
const MAX_POOL: u32 = 1000;

/// The lock settings the SQL backends share; each backend's config keeps one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Common {
    /// The lock table's name (`table`, default `distlock_locks`).
    pub table: String,
    /// The most connections the backend's own pool opens (`pool_size`, default 10).
    pub pool_size: u32,
    /// Whether connecting creates the tables that are missing (`migrate`, default on).
    pub migrate: bool,
    /// The bound on each statement (`response_timeout_ms`, default 5 s).
    pub response_timeout: Duration,
    /// The bound on each wait for a pooled connection, connecting included
    /// (`acquire_timeout_ms`, default 3 s).
    pub acquire_timeout: Duration,
    /// How often the rows of ended leases are deleted; `None` never
    /// (`purge_every_ms`, default 30 s; `purge=false`).
    pub purge_every: Option<Duration>,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            table: "distlock_locks".into(),
            pool_size: 10,
            migrate: true,
            response_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(3),
            purge_every: Some(Duration::from_secs(30)),
        }
    }
}

impl Common {
    /// Reads the shared options a URL gives (`table`, `pool_size`, `migrate`,
    /// `response_timeout_ms`, `acquire_timeout_ms`, `purge_every_ms`, `purge`) over
    /// the values already set; a configuration error of `backend` for a value that
    /// does not read.
    pub fn read(&mut self, backend: &'static str, options: &mut Options) -> Result<()> {
        if let Some(table) = options.take("table")? {
            self.table = table;
        }
        if let Some(size) = options.take("pool_size")? {
            self.pool_size = size.parse().map_err(|_| {
                config_error(
                    backend,
                    format!("pool_size must be 1 to {MAX_POOL}, not {size:?}"),
                )
            })?;
        }
        if let Some(migrate) = options.flag("migrate")? {
            self.migrate = migrate;
        }
        if let Some(timeout) = options.millis("response_timeout_ms")? {
            self.response_timeout = timeout;
        }
        if let Some(timeout) = options.millis("acquire_timeout_ms")? {
            self.acquire_timeout = timeout;
        }
        if let Some(every) = options.millis("purge_every_ms")? {
            self.purge_every = Some(every);
        }
        if options.flag("purge")? == Some(false) {
            self.purge_every = None;
        }
        Ok(())
    }

    /// Checks the shared settings, however they were set: the table a name of at most
    /// `max_table` bytes that needs no quoting, the pool 1 to 1000 connections, both
    /// time-outs above zero.
    pub fn check(&self, backend: &'static str, max_table: usize) -> Result<()> {
        check_identifier(backend, "table", &self.table, max_table)?;
        if !(1..=MAX_POOL).contains(&self.pool_size) {
            return Err(config_error(
                backend,
                format!("pool_size must be 1 to {MAX_POOL}, not {}", self.pool_size),
            ));
        }
        if self.response_timeout.is_zero() || self.acquire_timeout.is_zero() {
            return Err(config_error(
                backend,
                "response_timeout_ms and acquire_timeout_ms must be above 0",
            ));
        }
        Ok(())
    }
}

/// Checks an identifier (`what`: a table, a schema): what it may be is narrow on
/// purpose, so that it needs no quoting and cannot carry SQL. At most `max` bytes.
pub fn check_identifier(backend: &'static str, what: &str, name: &str, max: usize) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= max {
        Ok(())
    } else {
        Err(config_error(
            backend,
            format!(
                "the {what} name {name:?} is not allowed: use 1 to {max} lowercase letters, digits or _, not starting with a digit"
            ),
        ))
    }
}

/// The typed setters and getters of the [`Common`] settings, for a backend's config
/// type whose field `common` holds them: `with_table`, `with_pool_size`,
/// `with_migrate`, `with_response_timeout`, `with_acquire_timeout`,
/// `with_purge_every`, and `table`, `pool_size`, `migrate`, `purge_every`. Used inside
/// the config's `impl` block.
#[macro_export]
macro_rules! common_settings {
    () => {
        /// The lock table's name (`table`).
        pub fn with_table(mut self, table: impl Into<String>) -> Self {
            self.common.table = table.into();
            self
        }

        /// How many connections the backend's own pool opens at most (`pool_size`).
        pub fn with_pool_size(mut self, size: u32) -> Self {
            self.common.pool_size = size;
            self
        }

        /// Whether connecting creates the tables that are missing (`migrate`, on
        /// unless turned off).
        pub fn with_migrate(mut self, migrate: bool) -> Self {
            self.common.migrate = migrate;
            self
        }

        /// The bound on each statement (`response_timeout_ms`).
        pub fn with_response_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.common.response_timeout = timeout;
            self
        }

        /// The bound on each wait for a pooled connection, connecting included
        /// (`acquire_timeout_ms`).
        pub fn with_acquire_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.common.acquire_timeout = timeout;
            self
        }

        /// How often the rows of ended leases are deleted; `None` never
        /// (`purge_every_ms`, `purge=false`).
        pub fn with_purge_every(mut self, every: Option<std::time::Duration>) -> Self {
            self.common.purge_every = every;
            self
        }

        /// The lock table's name.
        pub fn table(&self) -> &str {
            &self.common.table
        }

        /// The bound on the backend's own pool.
        pub fn pool_size(&self) -> u32 {
            self.common.pool_size
        }

        /// Whether connecting creates the missing tables.
        pub fn migrate(&self) -> bool {
            self.common.migrate
        }

        /// How often the rows of ended leases are deleted, if at all.
        pub fn purge_every(&self) -> Option<std::time::Duration> {
            self.common.purge_every
        }
    };
}

#[cfg(test)]
mod tests {
    use distlock_core::backend::ConnectionUrl;
    use distlock_core::ErrorKind;

    use super::*;

    fn read(query: &str) -> Result<Common> {
        let url = ConnectionUrl::parse("sql", &format!("sql://h/db?{query}"), &["sql"], 1)?;
        let mut options = url.options();
        let mut common = Common::default();
        common.read("sql", &mut options)?;
        options.finish()?;
        common.check("sql", 48)?;
        Ok(common)
    }

    #[test]
    fn the_shared_options_are_read_over_the_defaults() {
        let c = read("table=t1&pool_size=3&migrate=false&response_timeout_ms=700&acquire_timeout_ms=200&purge_every_ms=1000")
            .expect("reads");
        assert_eq!(
            c,
            Common {
                table: "t1".into(),
                pool_size: 3,
                migrate: false,
                response_timeout: Duration::from_millis(700),
                acquire_timeout: Duration::from_millis(200),
                purge_every: Some(Duration::from_secs(1)),
            }
        );
        assert_eq!(read("purge=false").expect("reads").purge_every, None);
        assert_eq!(read("").expect("reads"), Common::default());
    }

    #[test]
    fn bad_shared_settings_are_configuration_errors() {
        for (query, says) in [
            ("pool_size=0", "pool_size must be 1 to 1000"),
            ("pool_size=many", "pool_size must be 1 to 1000"),
            ("table=Locks", "the table name"),
            ("table=a;drop", "the table name"),
            ("response_timeout_ms=0", "response_timeout_ms"),
        ] {
            let e = read(query).expect_err(query);
            assert_eq!(e.kind(), ErrorKind::Configuration, "{query}");
            assert!(e.to_string().contains(says), "{query}: {e}");
        }
        let typed = Common {
            acquire_timeout: Duration::ZERO,
            ..Common::default()
        };
        let e = typed.check("sql", 48).expect_err("a zero time-out");
        assert!(e.to_string().contains("above 0"), "{e}");
    }
}
