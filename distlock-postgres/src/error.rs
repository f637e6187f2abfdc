//! Turning sqlx's errors into distlock's.

use distlock_core::{Error, ErrorKind};

use distlock_sql::Setting;

use crate::config::PostgresConfig;

/// SQLSTATEs of contention: under contention they mean "not acquired", not failure.
pub(crate) fn is_contention(e: &sqlx::Error) -> bool {
    matches!(
        sqlstate(e).as_deref(),
        Some("40001" | "40P01" | "23505" | "55P03")
    )
}

pub(crate) fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// Maps a sqlx error to a distlock error of the right kind, with the (scrubbed) text
/// of the driver's error as its source.
pub(crate) fn from_sqlx(config: &PostgresConfig, e: sqlx::Error) -> Error {
    let kind = kind_of(&e);
    let detail = config.scrub(distlock_core::backend::error_chain(&e));
    let detail = match kind {
        ErrorKind::Unavailable | ErrorKind::Authentication => {
            format!("{detail} ({})", config.endpoint())
        }
        _ => detail,
    };
    let error = distlock_core::backend::driver_error(kind, "postgres", detail);
    match sqlstate(&e) {
        Some(state) => error.with_code(state),
        None => error,
    }
}

/// The kind of a sqlx error.
pub(crate) fn kind_of(e: &sqlx::Error) -> ErrorKind {
    let state = sqlstate(e);
    if let Some(kind) = distlock_sql::transport_kind(e) {
        return kind;
    }
    match (e, state.as_deref()) {
        (_, Some("28P01" | "28000")) => ErrorKind::Authentication,
        // PgBouncer refuses a password with a protocol-violation code (08P01) and a
        // fixed message, not PostgreSQL's 28P01.
        (sqlx::Error::Database(db), Some("08P01"))
            if db.message().ends_with("authentication failed") =>
        {
            ErrorKind::Authentication
        }
        (_, Some("3D000" | "42501" | "42P01" | "3F000")) => ErrorKind::Configuration,
        (_, Some(s))
            if s.starts_with("08")
                || s.starts_with("57P")
                || s == "53300"
                || s == "40001"
                || s == "40P01" =>
        {
            ErrorKind::Unavailable
        }
        // sqlx reads the one-byte answer to its SSLRequest into a zeroed buffer: a
        // connection closed before the server said anything (a server restarting or
        // killed, a link cut) reads as the byte 0x00.
        (sqlx::Error::Protocol(message), _)
            if message.starts_with("unexpected response from SSLRequest: 0x00") =>
        {
            ErrorKind::Unavailable
        }
        _ => ErrorKind::Backend,
    }
}

impl distlock_sql::Settings for PostgresConfig {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn protocol(&self) -> &'static str {
        "PostgreSQL"
    }

    fn endpoint(&self) -> distlock_core::backend::Endpoint {
        PostgresConfig::endpoint(self)
    }

    fn timeout(&self, setting: Setting) -> std::time::Duration {
        match setting {
            Setting::Acquire => self.common.acquire_timeout,
            Setting::Response => self.common.response_timeout,
        }
    }

    fn driver_error(&self, error: sqlx::Error) -> Error {
        from_sqlx(self, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CI's quick torture run counted 117 such failures on PostgreSQL as backend
    /// errors, which a waiter does not retry.
    #[test]
    fn a_connection_closed_before_the_ssl_answer_is_unavailable() {
        let closed = sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".to_owned());
        assert_eq!(kind_of(&closed), ErrorKind::Unavailable);
        // Any other byte is the server's (or another program's) answer.
        let other = sqlx::Error::Protocol("unexpected response from SSLRequest: 0x48".to_owned());
        assert_eq!(kind_of(&other), ErrorKind::Backend);
    }
}
