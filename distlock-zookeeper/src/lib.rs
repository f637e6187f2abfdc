//! The ZooKeeper backend of distlock. (Docs below.)
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod backend;
mod config;
mod error;

pub use backend::ZooKeeperBackend;
pub use config::{ZooKeeperConfig, SCHEMES};
