//! Turning sqlx's errors into distlock's.

use distlock_core::{Error, ErrorKind};
use sqlx::mysql::MySqlDatabaseError;

use crate::config::MySqlConfig;

/// The server's error number (`ER_...`), where the error is the server's.
pub(crate) fn number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// Errors of contention: a deadlock the server broke by rolling this statement back
/// (1213), or a row lock not had within `innodb_lock_wait_timeout` (1205). For an
/// acquisition they mean "not acquired", never failure.
pub(crate) fn is_contention(e: &sqlx::Error) -> bool {
    matches!(number(e), Some(1205 | 1213))
}

/// Maps a sqlx error to a distlock error of the right kind, with the (scrubbed) text
/// of the driver's error as its source.
pub(crate) fn from_sqlx(config: &MySqlConfig, e: sqlx::Error) -> Error {
    let kind = kind_of(&e);
    let detail = config.scrub(distlock_core::backend::error_chain(&e));
    let detail = match kind {
        ErrorKind::Unavailable | ErrorKind::Authentication | ErrorKind::Configuration => {
            format!("{detail} ({})", config.endpoint())
        }
        _ => detail,
    };
    let error = distlock_core::backend::driver_error(kind, "mysql", detail);
    match number(&e) {
        Some(code) => error.with_code(code.to_string()),
        None => error,
    }
}

/// The kind of a sqlx error.
pub(crate) fn kind_of(e: &sqlx::Error) -> ErrorKind {
    if let Some(kind) = distlock_sql::transport_kind(e) {
        return kind;
    }
    match (e, number(e)) {
        // Access denied for the user (password, or no such user from this host).
        (_, Some(1045 | 1698)) => ErrorKind::Authentication,
        // No such database, table or privilege: a setting to change.
        (_, Some(1044 | 1049 | 1142 | 1143 | 1146 | 1227)) => ErrorKind::Configuration,
        // Too many connections, the server shutting down, a connection killed, a
        // lock wait that ran out, a deadlock, a statement over its time (MariaDB's
        // max_statement_time, MySQL's max_execution_time), read-only (a replica, or a
        // primary during a failover).
        (_, Some(1040 | 1053 | 1205 | 1213 | 1290 | 1317 | 1792 | 1927 | 1969 | 3024)) => {
            ErrorKind::Unavailable
        }
        // The connection closed under a statement (the server restarting, or killed,
        // or a link cut) reads as a protocol error in sqlx's MySQL driver.
        (sqlx::Error::Protocol(_), _) => ErrorKind::Unavailable,
        _ => ErrorKind::Backend,
    }
}

impl distlock_sql::Settings for MySqlConfig {
    fn backend(&self) -> &'static str {
        "mysql"
    }

    fn protocol(&self) -> &'static str {
        "MySQL"
    }

    fn endpoint(&self) -> distlock_core::backend::Endpoint {
        MySqlConfig::endpoint(self)
    }

    fn timeout(&self, setting: distlock_sql::Setting) -> std::time::Duration {
        match setting {
            distlock_sql::Setting::Acquire => self.common.acquire_timeout,
            distlock_sql::Setting::Response => self.common.response_timeout,
        }
    }

    fn driver_error(&self, error: sqlx::Error) -> Error {
        from_sqlx(self, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_connections_and_pool_time_outs_are_unavailable() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(kind_of(&io), ErrorKind::Unavailable);
        assert_eq!(kind_of(&sqlx::Error::PoolTimedOut), ErrorKind::Unavailable);
        assert_eq!(
            kind_of(&sqlx::Error::Protocol("unexpected eof".into())),
            ErrorKind::Unavailable
        );
        assert_eq!(kind_of(&sqlx::Error::RowNotFound), ErrorKind::Backend);
    }
}
