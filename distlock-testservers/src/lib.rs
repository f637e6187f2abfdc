//! Real servers for distlock's tests and benchmarks: Redis, PostgreSQL, MariaDB, etcd
//! and ZooKeeper in
//! containers started by testcontainers, at pinned versions, with the fault controls
//! of [`ServerControl`](distlock_conformance::ServerControl) (pause, restart, kill,
//! kill connections), and a proxy per client that counts round trips and can cut the
//! client off or slow it.
//!
//! Each server is one module behind one small trait, [`Server`]: its port, how its
//! container is configured, its URL, and the commands of its own client that check its
//! readiness and close its clients' connections *inside* the container. A new server
//! is one module here and one entry in `images.txt`.
//!
//! # Images
//!
//! The image tags are written once, in `images.txt` beside this crate, which the
//! scripts read too. The official images are used where they are present or can be
//! pulled. Where no registry can be reached, `scripts/build-images.sh` builds one local
//! image from Debian's packages that serves every server, and PostgreSQL behind
//! PgBouncer ([`PgBouncer`], which has no official image and always runs from it).
//! `DISTLOCK_IMAGES` picks: `official`, `local`, or `auto` (the default: the official
//! image if present, else the local image if present, else the official image,
//! pulled).
//!
//! # Servers already running
//!
//! `DISTLOCK_REDIS_URL`, `DISTLOCK_POSTGRES_URL`, `DISTLOCK_MARIADB_URL`,
//! `DISTLOCK_ETCD_URL` and `DISTLOCK_ZOOKEEPER_URL` point the tests at servers that are already running instead (see [`external_url`]); the
//! fault cases then have no control over them and are reported as not run.
//!
//! # Leftovers
//!
//! Containers are removed when their handle is dropped, and testcontainers' watchdog
//! removes them when the run is interrupted (SIGINT, SIGTERM, SIGQUIT). A Docker
//! network the harness makes (for a cluster, or a server reached at its own address)
//! is removed once the last container on it is, retried until Docker lets it go. An
//! interrupted run leaves its networks behind (the watchdog removes containers only);
//! each is labelled with the process that made it, and the next network the harness
//! makes on this machine first removes those whose process has exited. Clients reach
//! a container through a port mapped on 127.0.0.1 only, the same across restarts.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, rust_2018_idioms)]

mod error;
pub mod etcd;
mod every;
mod handle;
mod image;
mod isolation;
pub mod mariadb;
mod members;
mod network;
pub mod pgbouncer;
pub mod postgres;
mod proxy;
pub mod redis;
pub mod redlock;
pub mod sentinel;
mod server;
mod sockets;
mod targets;
mod tls;
pub mod zookeeper;

pub use error::HarnessError;
pub use etcd::{enable_auth as enable_etcd_auth, Etcd, EtcdCluster};
pub use every::Every;
pub use handle::ServerHandle;
pub use image::image_source;
pub use mariadb::MariaDb;
pub use members::Roles;
pub use pgbouncer::PgBouncer;
pub use postgres::Postgres;
pub use proxy::Proxy;
pub use redis::{cluster_target, Redis, RedisCluster};
pub use redlock::{redlock_target, RedisMasters};
pub use sentinel::{RedisSentinel, Sentinel};
pub use server::{ConnectionKill, ImageSource, Server};
pub use targets::{external_url, store_target, target, target_on, tls_target};
pub use tls::TlsMaterial;
pub use zookeeper::{ZooKeeper, ZooKeeperEnsemble};

/// Every server a backend is compared on, in a fixed order. ([`PgBouncer`] is a way
/// to reach PostgreSQL, tested by the PostgreSQL backend's own tests, not listed here.)
pub const ALL: [&dyn Server; 5] = [&Redis, &Postgres, &MariaDb, &Etcd, &ZooKeeper];

/// The server named `name`.
pub fn by_name(name: &str) -> Option<&'static dyn Server> {
    ALL.into_iter().find(|s| s.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::{pinned, IMAGES};

    #[test]
    fn every_server_and_the_local_image_are_pinned() {
        for server in ALL {
            let (_, tag) = pinned(server.name()).unwrap_or_else(|| panic!("{}", server.name()));
            assert_ne!(tag, "latest", "{} is not pinned", server.name());
        }
        assert!(pinned("local").is_some());
        // A server with no official image says so instead of naming one.
        assert_eq!(pinned("pgbouncer"), None);
        assert!(IMAGES
            .lines()
            .any(|l| l.split_whitespace().eq(["pgbouncer", "local"])));
        assert_eq!(pinned("nothing"), None);
    }
}
