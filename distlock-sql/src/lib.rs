//! What distlock's SQL backends (`distlock-postgres` and `distlock-mysql`) share, on
//! sqlx, without naming a database driver:
//!
//! - [`Pool`]: the connections a backend runs its statements on, its own or a
//!   service's, with the one pooling policy both backends follow (see [`pool`]);
//! - [`Settings`], [`Setting`], [`timed_out`] and [`bounded`]: the two time-outs that
//!   bound every operation (a pooled connection, and each statement's answer), and
//!   the error that names the one that ran out;
//! - [`fence_arg`] and [`execute`]: the fence as the signed 64-bit integer a fenced
//!   statement binds, and a fenced statement run on any executor;
//! - [`Common`] and [`common_settings!`]: the settings both backends take under the
//!   same names, read from a URL and checked the same way.
//!
//! A service does not use this crate directly: the backend crates re-export what
//! their users need (each backend's `fenced::fence_arg`, for instance).
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use distlock_core::backend::{check_fence, Endpoint};
use distlock_core::{Error, ErrorKind, FencingToken, Holder, Result};

pub mod common;
pub mod pool;

pub use common::{check_identifier, Common};
pub use pool::{Checkout, Pool, IDLE_LIMIT};

/// One of the two time-outs a SQL backend bounds its work with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Waiting for a pooled connection, connecting included (`acquire_timeout_ms`).
    Acquire,
    /// One statement's answer, or one short transaction's (`response_timeout_ms`).
    Response,
}

impl Setting {
    /// The URL parameter that sets it.
    pub fn parameter(self) -> &'static str {
        match self {
            Setting::Acquire => "acquire_timeout_ms",
            Setting::Response => "response_timeout_ms",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Setting::Acquire => "no connection from the pool",
            Setting::Response => "no answer",
        }
    }
}

/// What a SQL backend's settings tell the shared code: its name, its server, its
/// time-outs, and how it reads a driver error.
pub trait Settings {
    /// The backend's name, as its errors carry it.
    fn backend(&self) -> &'static str;

    /// The server, for errors.
    fn endpoint(&self) -> Endpoint;

    /// The server's protocol as errors name it ("PostgreSQL", "MySQL"); the backend's
    /// name unless the backend says otherwise.
    fn protocol(&self) -> &'static str {
        self.backend()
    }

    /// The value of `setting`.
    fn timeout(&self, setting: Setting) -> Duration;

    /// A driver error as the backend reports it: its kind, and the driver's text
    /// with any credential scrubbed.
    fn driver_error(&self, error: sqlx::Error) -> Error;
}

/// The operation did not finish within `setting`'s time-out: an
/// [`ErrorKind::Unavailable`] error that says where, which setting, and its value.
pub fn timed_out(settings: &impl Settings, setting: Setting) -> Error {
    let value = settings.timeout(setting);
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "{} for {} within {value:?} ({}={})",
            setting.what(),
            settings.endpoint(),
            setting.parameter(),
            value.as_millis()
        ),
    )
    .with_backend(settings.backend())
}

/// Runs `op` within the response time-out: a time-out (or a connection that could not
/// be had) outside, the statement's own result inside, for the caller to read.
pub async fn bounded<T>(
    settings: &impl Settings,
    op: impl Future<Output = Result<std::result::Result<T, sqlx::Error>>>,
) -> Result<std::result::Result<T, sqlx::Error>> {
    tokio::time::timeout(settings.timeout(Setting::Response), op)
        .await
        .map_err(|_| timed_out(settings, Setting::Response))?
}

/// [`bounded`], with the driver's error read as the backend's.
pub async fn run<T>(
    settings: &impl Settings,
    op: impl Future<Output = Result<std::result::Result<T, sqlx::Error>>>,
) -> Result<T> {
    bounded(settings, op)
        .await?
        .map_err(|e| settings.driver_error(e))
}

/// Checks a connection out of `$pool` (a [`Pool`]) for `$settings`, runs `$body`
/// with it bound to `$conn`, and tells the pool how the work ended. Yields
/// `distlock_core::Result<Result<T, sqlx::Error>>`: a connection that could not be
/// had outside, the work's own result inside.
///
/// - `on_conn!(pool, settings, conn => body)`: one statement. The connection goes
///   back after a full reply or an error the server reported for the statement alone
///   ([`Checkout::settle`]).
/// - `on_conn!(pool, settings, transaction conn => body)`: a transaction, or a batch
///   that opens one. The connection goes back only if the body finished (`Ok`); one
///   that failed part way or was dropped may still be inside its transaction, so it
///   is closed and the server rolls the transaction back.
#[macro_export]
macro_rules! on_conn {
    ($pool:expr, $settings:expr, $conn:ident => $body:expr) => {
        async {
            let mut checkout = $pool.checkout($settings).await?;
            let result = {
                let $conn = checkout.conn();
                $body.await
            };
            checkout.settle(&result);
            Ok(result)
        }
    };
    ($pool:expr, $settings:expr, transaction $conn:ident => $body:expr) => {
        async {
            let mut checkout = $pool.checkout($settings).await?;
            let result = {
                let $conn = checkout.conn();
                $body.await
            };
            if result.is_ok() {
                checkout.finish();
            }
            Ok(result)
        }
    };
}

/// The kind of a sqlx error that says nothing of the database: a refused
/// certificate or a bad setting is [`ErrorKind::Configuration`]; a lost connection,
/// a pool that gave none, or a closed pool is [`ErrorKind::Unavailable`]. `None` for
/// the rest, which the backend reads by its server's codes.
pub fn transport_kind(e: &sqlx::Error) -> Option<ErrorKind> {
    if distlock_core::backend::is_certificate_refused(e) {
        return Some(ErrorKind::Configuration);
    }
    match e {
        sqlx::Error::Configuration(_) | sqlx::Error::Tls(_) => Some(ErrorKind::Configuration),
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Some(ErrorKind::Unavailable),
        _ => None,
    }
}

/// Whether `e`, an error of a new connection's first exchange, says the server
/// answered in another protocol: it sent a message that broke off at the end of the
/// stream (its length read from bytes that were no length: an HTTP server's
/// "HTTP/1.1 400" read as PostgreSQL's or MySQL's header), or one the driver could not
/// read at all (but for a sign-in it does not support, such as an authentication
/// plugin it lacks). A server of the right protocol never closes in the middle of a message
/// of its handshake; one that closes before saying anything (no bytes) is not
/// counted, since that is how a server at its connection limit or a proxy whose
/// upstream is down behaves too.
pub fn is_foreign_answer(e: &sqlx::Error) -> bool {
    match e {
        // The server's own protocol, but a sign-in the driver does not speak (an
        // authentication plugin or SASL mechanism it lacks) is not another protocol.
        sqlx::Error::Protocol(text) => {
            let text = text.to_lowercase();
            !["auth", "plugin", "sasl", "mechanism"]
                .iter()
                .any(|word| text.contains(word))
        }
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            let text = io.to_string();
            text.starts_with("expected to read ") && !text.ends_with(" got 0 bytes at EOF")
        }
        _ => false,
    }
}

/// An error of a new connection (or of a pool that makes one) as the backend reports
/// it: a [foreign answer](is_foreign_answer) says the endpoint speaks another protocol
/// ([`ErrorKind::Configuration`]), and the rest is
/// [`Settings::driver_error`]'s.
pub fn connect_error(settings: &impl Settings, e: sqlx::Error) -> Error {
    if !is_foreign_answer(&e) {
        return settings.driver_error(e);
    }
    let err = settings.driver_error(e);
    // The driver's text, with any credential scrubbed.
    let detail =
        std::error::Error::source(&err).map_or_else(|| err.to_string(), ToString::to_string);
    distlock_core::backend::wrong_protocol(
        settings.backend(),
        &settings.endpoint().to_string(),
        settings.protocol(),
        detail,
    )
}

/// The holder and grant time a lock table stores (a `holder` text column, and the
/// grant time read as milliseconds since the Unix epoch): both `None` for a row
/// written before the columns existed, or whose holder does not read back.
pub fn stored_holder(
    holder: Option<String>,
    granted_ms: Option<i64>,
) -> (Option<Holder>, Option<SystemTime>) {
    let Some(holder) = holder.as_deref().and_then(Holder::decode) else {
        return (None, None);
    };
    let granted_at = granted_ms
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    (Some(holder), granted_at)
}

/// The fence as the signed 64-bit integer (`bigint`, `BIGINT`) a fenced statement
/// binds; an [`ErrorKind::InvalidInput`] error above
/// [`MAX_FENCE`](distlock_core::MAX_FENCE), where a server's integer ends.
pub fn fence_arg(fence: FencingToken) -> Result<i64> {
    check_fence(fence)?;
    i64::try_from(fence.get())
        .map_err(|_| Error::new(ErrorKind::InvalidInput, "fence out of range"))
}

/// Runs a fenced statement on `executor` and answers the driver's result, its error
/// read by `read_error` (the backend's, which tells a stale fence from the rest).
pub async fn execute<'q, 'c, DB, E>(
    query: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments<'q>>,
    executor: E,
    read_error: fn(sqlx::Error) -> Error,
) -> Result<DB::QueryResult>
where
    DB: sqlx::Database,
    <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    E: sqlx::Executor<'c, Database = DB>,
{
    query.execute(executor).await.map_err(read_error)
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.parameter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;

    impl Settings for Fixed {
        fn backend(&self) -> &'static str {
            "sql"
        }
        fn endpoint(&self) -> Endpoint {
            Endpoint::new("db", 5432)
        }
        fn timeout(&self, setting: Setting) -> Duration {
            match setting {
                Setting::Acquire => Duration::from_millis(250),
                Setting::Response => Duration::from_secs(2),
            }
        }
        fn driver_error(&self, error: sqlx::Error) -> Error {
            Error::new(ErrorKind::Backend, error.to_string())
        }
    }

    #[test]
    fn a_time_out_names_its_setting_and_value() {
        let e = timed_out(&Fixed, Setting::Acquire);
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        let text = e.to_string();
        assert!(text.contains("acquire_timeout_ms=250"), "{text}");
        assert!(text.contains("db:5432"), "{text}");
        let e = timed_out(&Fixed, Setting::Response);
        assert!(e.to_string().contains("response_timeout_ms=2000"), "{e}");
    }

    #[test]
    fn lost_connections_and_pool_time_outs_are_unavailable() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(transport_kind(&io), Some(ErrorKind::Unavailable));
        assert_eq!(
            transport_kind(&sqlx::Error::PoolTimedOut),
            Some(ErrorKind::Unavailable)
        );
        assert_eq!(transport_kind(&sqlx::Error::RowNotFound), None);
    }

    #[test]
    fn a_message_broken_off_by_the_end_of_the_stream_is_a_foreign_answer() {
        let eof = |text: &str| {
            sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                text.to_owned(),
            ))
        };
        assert!(is_foreign_answer(&eof(
            "expected to read 1414811696 bytes, got 66 bytes at EOF"
        )));
        assert!(is_foreign_answer(&sqlx::Error::Protocol("unknown".into())));
        let plugin = sqlx::Error::Protocol("unknown authentication plugin: client_ed25519".into());
        assert!(!is_foreign_answer(&plugin));
        // Closed before a byte: a server at its limit does that too.
        assert!(!is_foreign_answer(&eof(
            "expected to read 5 bytes, got 0 bytes at EOF"
        )));
        let reset = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!is_foreign_answer(&reset));
    }

    #[test]
    fn a_fence_above_the_servers_integers_is_refused() {
        assert_eq!(fence_arg(FencingToken::new(7)).ok(), Some(7));
        let e = fence_arg(FencingToken::new(u64::MAX)).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
}
