//! Turning etcd-client's errors into distlock's.

use distlock_core::{support, Error, ErrorKind};
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

/// Maps a driver error to a distlock error of the right kind, keeping the (scrubbed)
/// driver text as the source.
pub(crate) fn from_etcd(config: &EtcdConfig, e: EtcdError) -> Error {
    let kind = match &e {
        EtcdError::GRpcStatus(s) => match s.code() {
            Code::Unauthenticated | Code::PermissionDenied => ErrorKind::Authentication,
            Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::ResourceExhausted
            | Code::Aborted => ErrorKind::Unavailable,
            Code::InvalidArgument | Code::FailedPrecondition if s.message().contains("auth") => {
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
    support::driver_error(kind, "etcd", config.scrub(e.to_string()))
}

/// The request did not finish within the timeout.
pub(crate) fn timed_out(config: &EtcdConfig) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("no answer within {:?}", config.timeout),
    )
    .with_backend("etcd")
}
