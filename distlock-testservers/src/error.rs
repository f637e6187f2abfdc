//! Why a test server could not be started or controlled.

use std::time::Duration;

use distlock_core::BoxError;

/// Why a server could not be started or controlled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// `DISTLOCK_IMAGES` holds something other than official, local or auto.
    #[error("DISTLOCK_IMAGES must be official, local or auto, not {0:?}")]
    BadImageChoice(String),
    /// `images.txt` has no line for this server.
    #[error("images.txt pins no image for {0}")]
    NoPin(&'static str),
    /// The Docker engine could not be reached.
    #[error("the Docker engine cannot be reached: {0}")]
    Docker(#[source] BoxError),
    /// The container did not start.
    #[error(
        "cannot start a {server} container from {image}: {source}. Is the Docker engine running? \
         Without a registry, build the local image first: scripts/build-images.sh"
    )]
    Start {
        /// The server.
        server: &'static str,
        /// The image tried.
        image: String,
        /// What Docker said.
        #[source]
        source: BoxError,
    },
    /// The server started but its own client never found it ready.
    #[error("the {server} server did not become ready within {within:?}: {last}")]
    NotReady {
        /// The server.
        server: &'static str,
        /// How long the harness waited.
        within: Duration,
        /// The last check's error.
        last: String,
    },
    /// The members of a cluster started but could not be made one cluster.
    #[error("the cluster could not be formed: {0}")]
    Cluster(String),
    /// The harness has no TLS set-up for this server.
    #[error("the harness cannot start {0} with TLS")]
    NoTls(&'static str),
    /// No free port could be found for the mapping.
    #[error("no free local port: {0}")]
    NoPort(#[source] std::io::Error),
}
