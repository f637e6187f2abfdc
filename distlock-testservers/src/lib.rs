//! Real servers for distlock's tests and benchmarks: Redis, PostgreSQL, MariaDB, etcd
//! and ZooKeeper in
//! containers started by testcontainers, at pinned versions, with the fault controls
//! of [`ServerControl`] (pause, restart, kill,
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
mod sockets;
mod tls;
pub mod zookeeper;

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use distlock_conformance::fenced::StoreTarget;
use distlock_conformance::{LinkControl, LinkedClient, ServerControl, Target};
use distlock_core::{BoxError, DynFencedStore, DynLockBackend, FencedStore, LockBackend};
use futures_util::future::BoxFuture;
use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage};

pub use error::HarnessError;
pub use etcd::{enable_auth as enable_etcd_auth, Etcd, EtcdCluster};
pub use handle::ServerHandle;
pub use image::{image_source, ImageSource};
pub use mariadb::MariaDb;
pub use members::Roles;
pub use pgbouncer::PgBouncer;
pub use postgres::Postgres;
pub use proxy::Proxy;
pub use redis::{cluster_target, Redis, RedisCluster};
pub use redlock::{redlock_target, Every, RedisMasters};
pub use sentinel::{RedisSentinel, Sentinel};
pub use tls::TlsMaterial;
pub use zookeeper::{ZooKeeper, ZooKeeperEnsemble};

/// One kind of server the harness can start: everything that differs between them.
pub trait Server: Send + Sync + fmt::Debug + 'static {
    /// A short lowercase name; also the server's line in `images.txt`.
    fn name(&self) -> &'static str;

    /// The name the backend that serves this server gives itself
    /// (`LockBackend::name`): the server's own name unless another backend serves it
    /// (MariaDB is served by the MySQL backend).
    fn backend_name(&self) -> &'static str {
        self.name()
    }

    /// The port the server listens on inside its container.
    fn port(&self) -> u16;

    /// The log line that says the server has started.
    fn started_line(&self) -> WaitFor;

    /// Adds the server's command line or environment to a container request, for the
    /// image `source`, with `password` as the server's password.
    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage>;

    /// A URL for distlock's backend, credentials included.
    fn url(&self, host_port: u16, password: &str) -> String;

    /// Whether the server runs from the local image only (it has no official image;
    /// `images.txt` then says `local` for it).
    fn local_only(&self) -> bool {
        false
    }

    /// The line of `images.txt` whose official image runs the server: its own, unless
    /// it is another server's program in another mode (a Redis Sentinel runs Redis's
    /// image).
    fn image_entry(&self) -> &'static str {
        self.name()
    }

    /// The program its container starts: the local image's entrypoint for the server
    /// (`/usr/local/bin/distlock-<name>`), and the official image's own (`None`).
    fn entrypoint(&self, source: ImageSource) -> Option<String> {
        match source {
            ImageSource::Local => Some(format!("/usr/local/bin/distlock-{}", self.name())),
            ImageSource::Official => None,
        }
    }

    /// Whether the server checks a password (so that a wrong one can be tried).
    fn has_password(&self) -> bool {
        true
    }

    /// The URL for the instance whose round trips are counted: [`url`](Self::url),
    /// with whatever makes a warmed-up backend reuse its warm connection.
    fn metered_url(&self, host_port: u16, password: &str) -> String {
        self.url(host_port, password)
    }

    /// A command of the server's own client, run inside the container, that exits 0
    /// once the server serves requests. Secrets go in its environment, never its
    /// arguments.
    fn ready_check(&self, password: &str) -> ExecCommand;

    /// How to close every client connection while the server stays up.
    fn connection_kill(&self, password: &str) -> ConnectionKill;

    /// The URL of the TLS server, trusting the CA in `ca_file` (with `tls`'s client
    /// certificate where the server asks for one).
    fn tls_url(
        &self,
        _host_port: u16,
        _password: &str,
        _tls: &TlsMaterial,
        _ca_file: &std::path::Path,
    ) -> Option<String> {
        None
    }

    /// [`ready_check`](Self::ready_check) over TLS; `None` where the harness has no TLS
    /// set-up for the server. (The local image serves TLS only wherever it finds
    /// `ca.pem`, `server.pem`, `server.key`, `client.pem` and `client.key` under
    /// `/tls`, which [`ServerHandle::start_tls`] puts there.)
    fn tls_ready_check(&self, _password: &str) -> Option<ExecCommand> {
        None
    }

    /// The environment variable that points the tests at a running server instead.
    fn url_variable(&self) -> String {
        format!("DISTLOCK_{}_URL", self.name().to_uppercase())
    }
}

/// How a server's client connections are closed.
#[derive(Debug)]
pub enum ConnectionKill {
    /// A command of the server's own, run inside the container, that prints the
    /// number of connections it closed (and nothing else) on standard output.
    Exec(ExecCommand),
    /// The server has none: this machine aborts its connections to the server's port
    /// (`ss -K`), where the kernel and the process's rights allow it.
    LocalSockets,
}

/// Every server a backend is compared on, in a fixed order. ([`PgBouncer`] is a way
/// to reach PostgreSQL, tested by the PostgreSQL backend's own tests, not listed here.)
pub const ALL: [&dyn Server; 5] = [&Redis, &Postgres, &MariaDb, &Etcd, &ZooKeeper];

/// The server named `name`.
pub fn by_name(name: &str) -> Option<&'static dyn Server> {
    ALL.into_iter().find(|s| s.name() == name)
}

/// The URL of an already running `server`, from its environment variable.
pub fn external_url(server: &dyn Server) -> Option<String> {
    std::env::var(server.url_variable())
        .ok()
        .filter(|v| !v.is_empty())
}

/// The conformance target for a backend on `server`: what a backend's
/// `tests/conformance.rs` hands to `conformance_main!`. `connect` makes the backend from
/// a URL.
///
/// With the server's URL in its environment variable, the target is that server,
/// without control (the fault cases are then reported as not run). Otherwise a
/// container is started and the target is built by [`target_on`].
pub async fn target<B, F, Fut>(server: &'static dyn Server, connect: F) -> Result<Target, BoxError>
where
    B: LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    if let Some(url) = external_url(server) {
        return Ok(Target::new(Arc::new(connect(url).await?)));
    }
    target_on(ServerHandle::start(server).await?, connect).await
}

/// The target of the fenced-store suite for a store on `server`: the store `connect`
/// makes from the server's URL, and more clients of it, each with connections of its
/// own. With the server's URL in its environment variable, that server; otherwise a
/// container of its own, which the target owns.
pub async fn store_target<S, F, Fut>(
    server: &'static dyn Server,
    connect: F,
) -> Result<StoreTarget, BoxError>
where
    S: FencedStore + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<S>> + Send + 'static,
{
    let (url, handle) = match external_url(server) {
        Some(url) => (url, None),
        None => {
            let handle = ServerHandle::start(server).await?;
            (handle.url(), Some(Arc::new(handle)))
        }
    };
    let store = connect(url.clone()).await?;
    let connect = Arc::new(connect);
    Ok(StoreTarget::new(Arc::new(store)).with_clients(
        move || -> BoxFuture<'static, distlock_core::Result<Arc<DynFencedStore>>> {
            let (url, connect, _keep) = (url.clone(), connect.clone(), handle.clone());
            Box::pin(async move {
                let store: Arc<DynFencedStore> = Arc::new(connect(url).await?);
                Ok(store)
            })
        },
    ))
}

/// A conformance target for a backend on `server` serving TLS only (from the local
/// image, with certificates of a fresh test CA): the backend `connect` makes from the
/// TLS URL, which trusts that CA, and more clients of the same URL. No control and no
/// links: the cases that need neither (what the suite checks of every backend) run
/// over TLS. The target owns the server.
pub async fn tls_target<B, F, Fut>(
    server: &'static dyn Server,
    connect: F,
) -> Result<Target, BoxError>
where
    B: LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    let tls = TlsMaterial::generate()?;
    let handle = Arc::new(ServerHandle::start_tls(server, &tls).await?);
    let url = handle
        .tls_url(&tls, &tls.ca_file())
        .ok_or_else(|| format!("the harness has no TLS URL for {}", server.name()))?;
    let backend = connect(url.clone()).await?;
    let connect = Arc::new(connect);
    let keep = Arc::new((handle, tls));
    Ok(Target::new(Arc::new(backend)).with_clients(
        move || -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>> {
            let (url, connect, _keep) = (url.clone(), connect.clone(), keep.clone());
            Box::pin(async move {
                let backend: Arc<DynLockBackend> = Arc::new(connect(url).await?);
                Ok(backend)
            })
        },
    ))
}

/// A new backend from `url` for each call: another client, or one with wrong
/// credentials.
pub(crate) fn connector<B, F, Fut>(
    connect: Arc<F>,
    url: String,
) -> impl Fn() -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>> + Send + Sync + 'static
where
    B: LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    move || {
        let (url, connect) = (url.clone(), connect.clone());
        Box::pin(async move {
            let backend: Arc<DynLockBackend> = Arc::new(connect(url).await?);
            Ok(backend)
        })
    }
}

/// The conformance target for a backend on the running server `handle`: the backend
/// `connect` makes from its URL, with the server's control, a second backend behind a
/// [`Proxy`] for the round-trip case, more clients with connections of their own,
/// clients behind a [`Proxy`] of their own whose link can be cut and slowed, and (where the server checks a password) a way to connect with a wrong one.
/// The target owns the server.
pub async fn target_on<B, F, Fut>(handle: ServerHandle, connect: F) -> Result<Target, BoxError>
where
    B: LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    let server = handle.server();
    let backend = connect(handle.url()).await?;
    let proxy = Proxy::start(handle.host_port()).await?;
    let metered = connect(server.metered_url(proxy.port(), handle.password())).await?;
    let connect = Arc::new(connect);
    let connector = |url: String| connector(connect.clone(), url);
    // A new backend behind a proxy of its own, whose link can be cut and slowed.
    let linked = {
        let (connect, port, password) = (
            connect.clone(),
            handle.host_port(),
            handle.password().to_owned(),
        );
        move || -> BoxFuture<'static, Result<LinkedClient, BoxError>> {
            let (connect, password) = (connect.clone(), password.clone());
            Box::pin(async move {
                let proxy = Proxy::start(port).await?;
                let backend: Arc<DynLockBackend> =
                    Arc::new(connect(server.url(proxy.port(), &password)).await?);
                let link: Arc<dyn LinkControl> = Arc::new(proxy);
                Ok((backend, link))
            })
        }
    };
    let mut target = Target::new(Arc::new(backend))
        .with_round_trip_meter(Arc::new(metered), Arc::new(proxy))
        .with_clients(connector(handle.url()))
        .with_links(linked);
    if server.has_password() {
        let secret = format!("wrong{:016x}", rand::random::<u64>());
        let url = server.url(handle.host_port(), &secret);
        target = target.with_wrong_credentials(secret, connector(url));
    }
    let control: Arc<dyn ServerControl> = Arc::new(handle);
    Ok(target.with_control(control))
}
