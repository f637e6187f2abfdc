//! The conformance targets the harness builds over its servers: a backend's suite
//! ([`target`], [`target_on`]), its suite over TLS ([`tls_target`]), and a fenced
//! store's ([`store_target`]).

use std::future::Future;
use std::sync::Arc;

use distlock_conformance::fenced::StoreTarget;
use distlock_conformance::{LinkControl, LinkedClient, ServerControl, Target};
use distlock_core::{BoxError, DynFencedStore, DynLockBackend, FencedStore, LockBackend};
use futures_util::future::BoxFuture;

use crate::handle::ServerHandle;
use crate::proxy::Proxy;
use crate::server::Server;
use crate::tls::TlsMaterial;

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
