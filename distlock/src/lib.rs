//! distlock: distributed locks with fencing tokens, one contract over several backends.
//!
//! This facade re-exports [`distlock_core`]: the [`LockBackend`] trait and its contract,
//! the [`LockClient`] with its guards, and the in-process [`MemoryBackend`]. Each
//! network backend is an opt-in cargo feature, as in sqlx: `redis` (module
//! [`redis`]), `postgres` (module [`postgres`]), `mysql` (module [`mysql`], MySQL and
//! MariaDB), `etcd` (module [`etcd`]) and `zookeeper` (module [`zookeeper`]); redis,
//! postgres, mysql and etcd each with a `-tls` variant. Add only what you use (`cargo add distlock --features
//! redis`): the etcd backend needs `protoc` at build time, and the others do not.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use distlock::{LockClient, MemoryBackend};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> distlock::Result<()> {
//! let client = LockClient::new(Arc::new(MemoryBackend::new()));
//! let written = client
//!     .with_lock("invoices/2026-11", Duration::from_secs(5), |fence| async move {
//!         // Hand `fence` to the storage you write to, so it can refuse stale writers.
//!         format!("written under fence {fence}")
//!     })
//!     .await?;
//! // The work's output, and whether the lease was held until the release.
//! assert!(written.output().starts_with("written under fence"));
//! assert!(written.held_throughout());
//! # Ok(())
//! # }
//! ```
//!
//! # Choosing a backend by configuration
//!
//! [`connect`] takes a URL and returns the backend its scheme names, so a service
//! swaps backends by changing one setting ([`BackendConfig`], from a file or the
//! environment). `examples/service.rs` takes its backend from `DISTLOCK_URL`.
//!
//! # Guides
//!
//! [`guides`] holds the guides beside the API: [locks and their
//! contract](guides::locks), [fencing in practice](guides::fencing), [configuring a
//! backend](guides::configuration), [operating](guides::operating) (the command line,
//! outages, metrics), [choosing a backend](guides::backends), and [the comparison and
//! safety runs](guides::benchmarks).
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod connect;
pub mod guides;
#[cfg(feature = "tower")]
pub mod tower;

pub use connect::{
    connect, descriptors, schemes, BackendConfig, Connector, KnownBackend, OptionValue, BACKENDS,
};
pub use distlock_core::*;

/// The Redis backend (feature `redis`).
#[cfg(feature = "redis")]
pub mod redis {
    pub use distlock_redis::*;
}

/// The PostgreSQL backend (feature `postgres`).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use distlock_postgres::*;
}

/// The MySQL and MariaDB backend (feature `mysql`).
#[cfg(feature = "mysql")]
pub mod mysql {
    pub use distlock_mysql::*;
}

/// The etcd backend (feature `etcd`).
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use distlock_etcd::*;
}

/// The ZooKeeper backend (feature `zookeeper`).
#[cfg(feature = "zookeeper")]
pub mod zookeeper {
    pub use distlock_zookeeper::*;
}
