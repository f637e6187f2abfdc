//! Turning the redis driver's errors into distlock's.

use distlock_core::{Error, ErrorKind};
use redis::{RedisError, RetryMethod, ServerErrorKind};

use crate::config::RedisConfig;

/// Maps a driver error to a distlock error of the right kind, keeping the driver's
/// error as the source and scrubbing the password from the message.
pub(crate) fn from_redis(config: &RedisConfig, e: RedisError) -> Error {
    from_redis_after(config, e, false)
}

/// [`from_redis`] for the error of a request sent again after an earlier send of it
/// may have been applied (`sent_before`: its connection dropped with no reply): a
/// resend that was refused is then not "not sent", since the request as a whole may
/// have been, and whatever it took must be given back.
pub(crate) fn from_redis_after(config: &RedisConfig, e: RedisError, sent_before: bool) -> Error {
    let code = e.code().unwrap_or_default();
    let kind = match e.kind() {
        _ if distlock_core::backend::is_certificate_refused(&e) => ErrorKind::Configuration,
        redis::ErrorKind::AuthenticationFailed => ErrorKind::Authentication,
        _ if matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM") => ErrorKind::Authentication,
        // A cluster client's first connections report refused credentials only in the
        // text of the I/O error it makes of them (redis's cluster connection writes the
        // first error `to_string()` into "Failed to create initial connections"): no
        // code or type is left to read.
        _ if e.to_string().contains("AuthenticationFailed") => ErrorKind::Authentication,
        // A server that wants a password, sent a request before any was given: Redis
        // answers a request of more than a few arguments (a script's call, say) with
        // "Protocol error: unauthenticated multibulk length" and closes the
        // connection, where a short one gets NOAUTH.
        _ if e.to_string().contains("unauthenticated") => ErrorKind::Authentication,
        redis::ErrorKind::InvalidClientConfig => ErrorKind::Configuration,
        // A reply of the wrong shape is the server's answer, not a fault of the link.
        redis::ErrorKind::UnexpectedReturnType => ErrorKind::Backend,
        redis::ErrorKind::Server(ServerErrorKind::ReadOnly) => ErrorKind::Unavailable,
        // A master with too few replicas in reach for its `min-replicas-to-write`
        // (one cut off from its replicas, or one a failover left behind), one that lost
        // its link to its own master, or one still loading its data: refused, not run.
        _ if matches!(code, "NOREPLICAS" | "MASTERDOWN" | "LOADING") => ErrorKind::Unavailable,
        _ if e.is_io_error()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_connection_refusal() =>
        {
            ErrorKind::Unavailable
        }
        _ if !matches!(e.retry_method(), RetryMethod::NoRetry) => ErrorKind::Unavailable,
        _ => ErrorKind::Backend,
    };
    let detail = config.scrub(e.to_string());
    let detail = match kind {
        ErrorKind::Unavailable | ErrorKind::Authentication => {
            format!("{detail} ({})", config.endpoint_list())
        }
        _ => detail,
    };
    let mut error = distlock_core::backend::driver_error(kind, "redis", detail);
    if e.is_connection_refusal() && !sent_before {
        // The connection was refused: the request never left this process.
        error = error.with_not_sent();
    }
    // The server's code where it gave one, else the driver's kind (a refused
    // password arrives as the driver's `AuthenticationFailed`).
    match code {
        "" => error.with_code(format!("{:?}", e.kind())),
        code => error.with_code(code.to_owned()),
    }
}

/// [`from_redis`] for an error of a connection's first exchange: an answer that is not
/// Redis's protocol (RESP) means the URL names the port of another service, said as
/// such.
pub(crate) fn connect_error(config: &RedisConfig, e: RedisError) -> Error {
    if e.kind() == redis::ErrorKind::Parse {
        let detail = config.scrub(e.to_string());
        return distlock_core::backend::wrong_protocol(
            "redis",
            &config.endpoint_list(),
            "Redis",
            detail,
        );
    }
    from_redis(config, e)
}

/// Connecting to `config`'s servers took longer than its connect and response
/// time-outs allow: says where, which settings, and their values.
pub(crate) fn connect_timed_out(config: &RedisConfig) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "no connection to {} within {:?} (connect_timeout_ms={}, then response_timeout_ms={} for the handshake)",
            config.endpoint_list(),
            config.connect_timeout + config.response_timeout,
            config.connect_timeout.as_millis(),
            config.response_timeout.as_millis()
        ),
    )
    .with_backend("redis")
}

/// An answer the scripts never give.
pub(crate) fn unexpected(what: &str) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("unexpected reply from redis: {what}"),
    )
    .with_backend("redis")
}
