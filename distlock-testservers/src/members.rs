//! What an etcd cluster and a ZooKeeper ensemble share as conformance targets: the
//! suite runs on all their members at once, the ones stopped as a crash stops them
//! still named in the clients' configuration.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use distlock_conformance::{LinkControl, LinkedClient, ServerControl, Target};
use distlock_core::{BoxError, DynLockBackend, LockBackend};
use futures_util::future::BoxFuture;

use crate::handle::ServerHandle;
use crate::redlock::{Every, Links};

/// A replicated set's members and which of them leads now: what a fault schedule needs
/// to hit the leader, or a follower, of an etcd cluster, a ZooKeeper ensemble or a
/// Redis master behind Sentinel.
#[async_trait]
pub trait Roles: Send + Sync + fmt::Debug {
    /// The members a fault can hit, in a fixed order (a Sentinel set's data servers,
    /// not its Sentinels).
    fn members(&self) -> Vec<Arc<dyn ServerControl>>;

    /// The index in [`members`](Self::members) of the member that leads now; `None`
    /// while none does, or none can say.
    async fn leader(&self) -> Option<usize>;

    /// What the one that leads is called: `leader`, or `master`.
    fn leader_word(&self) -> &'static str {
        "leader"
    }
}

/// `members` as the controls a [`Roles`] answers.
pub(crate) fn controls(members: &[Arc<ServerHandle>]) -> Vec<Arc<dyn ServerControl>> {
    members
        .iter()
        .cloned()
        .map(|m| -> Arc<dyn ServerControl> { m })
        .collect()
}

/// Waits up to a minute until `leader` names a member other than `stopped`.
pub(crate) async fn new_leader<F, Fut>(stopped: usize, mut leader: F) -> Result<(), BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<usize>>,
{
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match leader().await {
            Some(new) if new != stopped => return Ok(()),
            _ if tokio::time::Instant::now() >= give_up => {
                return Err("no new leader within 60 s".into())
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Which members a linked client's proxies lead to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Linked {
    /// Every member, stopped ones too: a proxy in front of a stopped member accepts
    /// each connection and then closes it.
    Every,
    /// The running members only: for a client library that takes a connection a
    /// proxy accepted and then closed for a failed request, where it would have
    /// skipped a member that refused the connection.
    Running,
}

/// The conformance target for a backend on a cluster's `members`: the backend
/// `connect` makes from the URL `url_of` writes for every member's port (stopped ones
/// included, as a client's configuration would still name them), more clients of it,
/// clients behind a proxy per member whose links are cut and slowed as one (per
/// member in `linked`), and control over the members not in `stopped` as one server
/// (paused, restarted or killed together). No round-trip meter: a client talks to
/// whichever member it reached. The target keeps `keep` (the cluster) alive.
pub(crate) async fn target<B, F, Fut>(
    members: Vec<Arc<ServerHandle>>,
    stopped: &[usize],
    linked: Linked,
    url_of: fn(&[u16]) -> String,
    connect: F,
    keep: Arc<dyn Send + Sync>,
) -> Result<Target, BoxError>
where
    B: LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    let ports: Vec<u16> = members.iter().map(|m| m.host_port()).collect();
    let url = url_of(&ports);
    let backend = connect(url.clone()).await?;
    let connect = Arc::new(connect);
    let running: Vec<Arc<ServerHandle>> = (0..members.len())
        .filter(|i| !stopped.contains(i))
        .map(|i| members[i].clone())
        .collect();
    let proxied = match linked {
        Linked::Every => members,
        Linked::Running => running.clone(),
    };
    let linked = {
        let (connect, keep) = (connect.clone(), keep.clone());
        move || -> BoxFuture<'static, Result<LinkedClient, BoxError>> {
            let (connect, all, _keep) = (connect.clone(), proxied.clone(), keep.clone());
            Box::pin(async move {
                let links = Links::start(&all).await?;
                let backend: Arc<DynLockBackend> = Arc::new(connect(url_of(&links.ports())).await?);
                let link: Arc<dyn LinkControl> = Arc::new(links);
                Ok((backend, link))
            })
        }
    };
    let clients = {
        let (connect, url) = (connect.clone(), url.clone());
        move || -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>> {
            let (connect, url, _keep) = (connect.clone(), url.clone(), keep.clone());
            Box::pin(async move {
                let backend: Arc<DynLockBackend> = Arc::new(connect(url).await?);
                Ok(backend)
            })
        }
    };
    let control: Arc<dyn ServerControl> = Arc::new(Every::new(running));
    Ok(Target::new(Arc::new(backend))
        .with_clients(clients)
        .with_links(linked)
        .with_control(control))
}
