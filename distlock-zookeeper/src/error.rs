//! Turning zookeeper-client's errors into distlock's.

use distlock_core::{Error, ErrorKind};
use zookeeper_client::Error as ZkError;

use crate::config::ZooKeeperConfig;

/// Whether the session behind the client is over for good (expired, closed, or refused
/// its credentials), so that the next call needs a new one.
pub(crate) fn ends_session(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::SessionExpired | ZkError::ClientClosed | ZkError::AuthFailed
    )
}

/// Maps a driver error to a distlock error of the right kind, keeping the (scrubbed)
/// driver text as the source.
pub(crate) fn from_zk(config: &ZooKeeperConfig, e: ZkError) -> Error {
    let kind = match &e {
        ZkError::NoAuth | ZkError::AuthFailed => ErrorKind::Authentication,
        ZkError::ConnectionLoss
        | ZkError::Timeout
        | ZkError::NoHosts
        | ZkError::SessionExpired
        | ZkError::SessionMoved
        | ZkError::ClientClosed
        | ZkError::Throttled
        | ZkError::NotReadOnly => ErrorKind::Unavailable,
        // The driver's own word that a connection stopped answering ("no response
        // from connection in …ms"): a lost connection, as ConnectionLoss is.
        other if other.to_string().contains("no response from connection") => {
            ErrorKind::Unavailable
        }
        ZkError::Unimplemented => {
            return Error::new(
                ErrorKind::Configuration,
                "the server does not accept TTL nodes: start ZooKeeper (3.5.3 or later) with \
                 -Dzookeeper.extendedTypesEnabled=true",
            )
            .with_backend("zookeeper");
        }
        // A node the step needed was deleted meanwhile, under every try: a key's node
        // emptied and deleted by other processes' releases, again and again (churn).
        // Nothing was granted, and a retry may find the key quiet.
        ZkError::NoNode => {
            let detail = config.scrub(e.to_string());
            return distlock_core::backend::driver_error(
                ErrorKind::Backend,
                "zookeeper",
                format!("{detail}: a node this step needed was deleted under it by other clients, on every try; nothing was granted"),
            )
            .with_retryable(true);
        }
        _ => ErrorKind::Backend,
    };
    let detail = config.scrub(e.to_string());
    let detail = match kind {
        ErrorKind::Unavailable | ErrorKind::Authentication => {
            format!("{detail} ({})", config.servers().join(","))
        }
        _ => detail,
    };
    distlock_core::backend::driver_error(kind, "zookeeper", detail)
}

/// The operation did not finish within the timeout.
pub(crate) fn timed_out(config: &ZooKeeperConfig) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!(
            "no answer from {} within {:?} (response_timeout_ms={})",
            config.servers().join(","),
            config.timeout,
            config.timeout.as_millis()
        ),
    )
    .with_backend("zookeeper")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A grant that found the key's node deleted on every try (other processes'
    /// releases deleting it under churn) failed for good, so a leader loop or a
    /// waiter on it stopped; it is retryable, and says why.
    #[test]
    fn a_node_deleted_under_every_try_is_retryable() {
        let config = ZooKeeperConfig::from_url("zookeeper://127.0.0.1:2181").expect("config");
        let error = from_zk(&config, ZkError::NoNode);
        assert!(error.is_retryable(), "{error}");
        assert_eq!(error.kind(), ErrorKind::Backend);
        assert!(error.to_string().contains("deleted under it"), "{error}");
    }
}
