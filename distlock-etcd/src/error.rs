//! Turning etcd-client's errors into distlock's.

use distlock_core::{Error, ErrorKind};
use etcd_client::Error as EtcdError;
use tonic::Code;

use crate::config::EtcdConfig;

/// Whether the server said the lease does not exist (expired or revoked).
pub(crate) fn is_lease_not_found(e: &EtcdError) -> bool {
    match e {
        EtcdError::GRpcStatus(s) => {
            s.code() == Code::NotFound || s.message().contains("lease not found")
        }
        EtcdError::LeaseKeepAliveError(message) => message.contains("not found"),
        _ => false,
    }
}

/// Whether the server said a lease with that ID already exists.
pub(crate) fn is_lease_taken(e: &EtcdError) -> bool {
    matches!(e, EtcdError::GRpcStatus(s) if s.message().contains("lease already exists"))
}

/// Whether the request never left this process: the connection to the member it was
/// routed to was refused or could not be made.
pub(crate) fn is_not_sent(e: &EtcdError) -> bool {
    match e {
        EtcdError::GRpcStatus(s) => {
            s.code() == Code::Unavailable && s.message().contains("connect error")
        }
        EtcdError::TransportError(t) => t.to_string().contains("connect"),
        _ => false,
    }
}

/// Whether a connection was refused: an I/O error of that kind among the sources.
fn connection_refused(e: &EtcdError) -> bool {
    any_cause(e, |cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// Whether `found` holds for one of `e`'s causes (etcd-client's error keeps its cause
/// inside, not as its `source`).
fn any_cause(e: &EtcdError, found: impl Fn(&(dyn std::error::Error + 'static)) -> bool) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = match e {
        EtcdError::GRpcStatus(status) => Some(status),
        EtcdError::TransportError(transport) => Some(transport),
        EtcdError::IoError(io) => Some(io),
        _ => None,
    };
    while let Some(cause) = source {
        if found(cause) {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Whether the client's own request time-out (the response time-out, set on the
/// client) ended the request: tonic's `TimeoutExpired` somewhere in its sources.
fn timed_out_in_client(e: &EtcdError) -> bool {
    any_cause(e, |cause| cause.is::<tonic::TimeoutExpired>())
}

/// Whether the answer could not be read as HTTP/2 at all (tonic's "h2 protocol
/// error", an HTTP/1 server's reply read as frames, say): the endpoint speaks
/// another protocol than gRPC.
fn foreign_answer(e: &EtcdError) -> bool {
    matches!(e, EtcdError::GRpcStatus(s)
        if s.code() == Code::Internal && s.message().starts_with("h2 protocol error"))
}

/// HTTP/2's connection preface, which a client sends first: an etcd member answers
/// it with a SETTINGS frame.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `answer`, to [`H2_PREFACE`], is not HTTP/2's: a server's first frame is
/// SETTINGS (type 4, the fourth byte of its header).
fn not_http2(answer: &[u8]) -> bool {
    answer.len() < 4 || answer[3] != 4
}

/// [`from_etcd`] for an error of a connection's first exchange: an answer that is not
/// HTTP/2 means the URL names the port of another service, said as such. Where the
/// driver's error does not tell (the connection broke under the exchange, as when an
/// HTTP/1 server answers and closes), each endpoint without TLS is asked directly.
pub(crate) async fn connect_error(config: &EtcdConfig, e: EtcdError) -> Error {
    let foreign = if foreign_answer(&e) {
        Some((config.endpoint_list(), String::new()))
    } else if config.tls
        || connection_refused(&e)
        || timed_out_in_client(&e)
        || !connection_broke(&e)
    {
        None
    } else {
        let mut found = None;
        for endpoint in &config.endpoints {
            let address = endpoint.to_string();
            let within = config
                .connect_timeout
                .min(std::time::Duration::from_secs(1));
            let probe = distlock_core::backend::probe_endpoint(&address, H2_PREFACE, within).await;
            if let distlock_core::backend::Probe::Answered(answer) = &probe {
                if not_http2(answer) {
                    let said = probe
                        .first_line()
                        .map(|line| format!("it answered {line:?}; "))
                        .unwrap_or_default();
                    found = Some((address, said));
                    break;
                }
            }
        }
        found
    };
    let Some((endpoint, said)) = foreign else {
        return from_etcd(config, e);
    };
    let detail = match &e {
        EtcdError::GRpcStatus(s) => s.message().to_owned(),
        _ => e.to_string(),
    };
    distlock_core::backend::wrong_protocol(
        "etcd",
        &endpoint,
        "etcd (gRPC over HTTP/2)",
        config.scrub(format!("{said}{}", one_line(&detail))),
    )
}

/// Whether the connection broke under the request, with no answer the driver could
/// read (a status made in this process from a transport error, or the request
/// cancelled as its connection closed): the one kind of failure whose cause a probe
/// may tell. An answer of the server's (refused credentials, say) is not probed.
fn connection_broke(e: &EtcdError) -> bool {
    match e {
        EtcdError::TransportError(_) | EtcdError::IoError(_) => true,
        EtcdError::GRpcStatus(s) => match s.code() {
            Code::Unknown => std::error::Error::source(s).is_some(),
            Code::Cancelled | Code::Unavailable | Code::Internal => true,
            _ => false,
        },
        _ => false,
    }
}

/// `text`'s first line.
fn one_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Maps a driver error to a distlock error of the right kind, keeping the (scrubbed)
/// driver text as the source.
pub(crate) fn from_etcd(config: &EtcdConfig, e: EtcdError) -> Error {
    if timed_out_in_client(&e) {
        return timed_out(config, Setting::Response);
    }
    let kind = match &e {
        EtcdError::TransportError(t) if distlock_core::backend::is_certificate_refused(t) => {
            ErrorKind::Configuration
        }
        EtcdError::GRpcStatus(s) if distlock_core::backend::is_certificate_refused(s) => {
            ErrorKind::Configuration
        }
        // A status with a source was made in this process from the error that broke
        // the request (a connection reset or closed under it, as when the server
        // restarts or kills connections): the server said nothing, and a retry may
        // help. A status the server sent is read from its answer and has none.
        EtcdError::GRpcStatus(s)
            if s.code() == Code::Unknown && std::error::Error::source(s).is_some() =>
        {
            ErrorKind::Unavailable
        }
        // A member shutting down (a restart) answers with raft's own error, which
        // etcd does not translate into a status code: the request was not applied
        // there, and another member, or this one once up, may take it.
        EtcdError::GRpcStatus(s) if s.code() == Code::Unknown && s.message() == "raft: stopped" => {
            ErrorKind::Unavailable
        }
        EtcdError::GRpcStatus(s) => match s.code() {
            Code::Unauthenticated | Code::PermissionDenied => ErrorKind::Authentication,
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted => ErrorKind::Unavailable,
            // etcd's refusals of credentials: "authentication failed, invalid user ID
            // or password", "user name is empty" (a request with none, to a server
            // with auth enabled), "user name not found".
            Code::InvalidArgument | Code::FailedPrecondition
                if s.message().contains("auth") || s.message().contains("user name") =>
            {
                ErrorKind::Authentication
            }
            _ => ErrorKind::Backend,
        },
        EtcdError::TransportError(_)
        | EtcdError::IoError(_)
        | EtcdError::LeaseKeepAliveError(_)
        | EtcdError::WatchError(_) => ErrorKind::Unavailable,
        EtcdError::InvalidArgs(_) | EtcdError::InvalidUri(_) | EtcdError::EndpointError(_) => {
            ErrorKind::Configuration
        }
        _ => ErrorKind::Backend,
    };
    // etcd-client's error keeps its cause inside: a transport error's says what
    // failed ("transport error" alone does not).
    let detail = match &e {
        // One line for what tonic tells in a nest of four errors.
        _ if connection_refused(&e) => "the connection was refused".to_owned(),
        EtcdError::TransportError(transport) => format!(
            "transport error: {}",
            distlock_core::backend::error_chain(transport)
        ),
        _ => e.to_string(),
    };
    let detail = config.scrub(detail);
    let detail = match kind {
        ErrorKind::Unavailable | ErrorKind::Authentication => {
            format!("{} ({})", detail, config.endpoint_list())
        }
        _ => detail,
    };
    let error = distlock_core::backend::driver_error(kind, "etcd", detail);
    match &e {
        EtcdError::GRpcStatus(status) => error.with_code(format!("{:?}", status.code())),
        _ => error,
    }
}

/// Which time-out fired.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Setting {
    /// Connecting (and authenticating): the connect and response time-outs together.
    Connect,
    /// One request: the response time-out.
    Response,
}

/// The request did not finish within `setting`'s time-out: says where, which setting,
/// and its value.
pub(crate) fn timed_out(config: &EtcdConfig, setting: Setting) -> Error {
    let ms = |d: std::time::Duration| d.as_millis();
    let what = match setting {
        Setting::Connect => format!(
            "{:?} (connect_timeout_ms={} + response_timeout_ms={})",
            config.connect_timeout + config.timeout,
            ms(config.connect_timeout),
            ms(config.timeout)
        ),
        Setting::Response => format!(
            "{:?} (response_timeout_ms={})",
            config.timeout,
            ms(config.timeout)
        ),
    };
    Error::new(
        ErrorKind::Unavailable,
        format!("no answer from {} within {what}", config.endpoint_list()),
    )
    .with_backend("etcd")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grpc_status_is_the_code_and_decides_the_kind() {
        let config = EtcdConfig::default();
        for (code, kind) in [
            (Code::Unauthenticated, ErrorKind::Authentication),
            (Code::Unavailable, ErrorKind::Unavailable),
            (Code::Internal, ErrorKind::Backend),
        ] {
            let e = from_etcd(
                &config,
                EtcdError::GRpcStatus(tonic::Status::new(code, "said")),
            );
            assert_eq!(e.kind(), kind, "{e}");
            assert_eq!(e.code(), Some(format!("{code:?}").as_str()));
        }
        // etcd's refusals of credentials, as it words them.
        for (code, said) in [
            (Code::InvalidArgument, "etcdserver: user name is empty"),
            (
                Code::InvalidArgument,
                "etcdserver: authentication failed, invalid user ID or password",
            ),
            (Code::FailedPrecondition, "etcdserver: user name not found"),
        ] {
            let e = from_etcd(
                &config,
                EtcdError::GRpcStatus(tonic::Status::new(code, said)),
            );
            assert_eq!(e.kind(), ErrorKind::Authentication, "{e}");
        }
        // A request broken under it by the connection (the soak's etcd row showed
        // these after killed connections and restarts, as "transport error" with a
        // broken pipe beneath): the server said nothing, so a retry may help.
        let broken = from_etcd(
            &config,
            EtcdError::GRpcStatus(tonic::Status::from_error(Box::new(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "stream closed because of a broken pipe",
            )))),
        );
        assert_eq!(broken.kind(), ErrorKind::Unavailable, "{broken}");
        assert!(broken.is_retryable());
        // A member that is shutting down says so in raft's words (the soak's etcd
        // row met it once in a restart).
        let stopping = from_etcd(
            &config,
            EtcdError::GRpcStatus(tonic::Status::new(Code::Unknown, "raft: stopped")),
        );
        assert_eq!(stopping.kind(), ErrorKind::Unavailable, "{stopping}");
        // The same code sent by the server is its own answer.
        let said = from_etcd(
            &config,
            EtcdError::GRpcStatus(tonic::Status::new(Code::Unknown, "said")),
        );
        assert_eq!(said.kind(), ErrorKind::Backend, "{said}");
        // The client's own time-out: a status whose source is tonic's TimeoutExpired.
        let late = from_etcd(
            &config,
            EtcdError::GRpcStatus(tonic::Status::from_error(Box::new(tonic::TimeoutExpired(
                (),
            )))),
        );
        assert!(
            late.to_string().contains("response_timeout_ms=5000"),
            "{late}"
        );
    }
}
