//! The options every run of lockbench takes on its command line: the mode, where the
//! results go, and on which backends.

use clap::builder::PossibleValuesParser;

use crate::rows::backend_names;
use crate::run::Mode;

/// The backends every run goes through unless `--backends` says otherwise.
pub(crate) const DEFAULT_BACKENDS: &str = "memory,redis,postgres,mariadb,etcd,zookeeper,redlock-3,redlock-5,redis-cluster,redis-sentinel,etcd-3,zookeeper-3";

/// What every run of lockbench takes: its mode, where its results go, and on which
/// backends.
#[derive(Debug, clap::Args)]
pub(crate) struct RunOptions {
    /// The short run (a few minutes), as CI runs it.
    #[arg(long, conflicts_with = "soak")]
    quick: bool,
    /// The long run: larger scenarios, and a torture run of at least 100,000 lock
    /// operations per backend (over an hour for the two runs, with every
    /// backend). Without `--quick` or `--soak`, the standard run.
    #[arg(long, alias = "full")]
    soak: bool,
    /// The folder the results are written into.
    #[arg(long, default_value = "results")]
    pub(crate) out: String,
    /// The backends to run, in order: memory, every server of distlock-testservers,
    /// Redlock over 3 and 5 Redis masters, a 3-master Redis Cluster, a Redis master
    /// with 2 replicas behind 3 Sentinels, a 3-member etcd cluster and a 3-member
    /// ZooKeeper ensemble.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = DEFAULT_BACKENDS,
        value_parser = PossibleValuesParser::new(backend_names()),
    )]
    pub(crate) backends: Vec<String>,
    /// Fail when a backend's server cannot be started (for CI).
    #[arg(long)]
    pub(crate) require_all: bool,
}

impl RunOptions {
    /// The mode the flags ask for.
    pub(crate) fn mode(&self) -> Mode {
        match (self.quick, self.soak) {
            (true, _) => Mode::Quick,
            (false, true) => Mode::Soak,
            (false, false) => Mode::Standard,
        }
    }
}
