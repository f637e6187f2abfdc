//! What an etcd cluster and a ZooKeeper ensemble share as conformance targets: the
//! suite runs on all their members at once, the ones stopped as a crash stops them
//! still named in the clients' configuration.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use distlock_conformance::{LinkControl, LinkedClient, MemberLinkedClient, ServerControl, Target};
use distlock_core::{BoxError, DynLockBackend, LockBackend};
use futures_util::future::BoxFuture;

use crate::every::Every;
use crate::handle::ServerHandle;
use crate::redlock::Links;

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

    /// Cuts member `index` off from the rest of the set, both ways (from the other
    /// members, and behind Sentinel from the Sentinels too), while clients still reach
    /// it: a partition that leaves it in the minority.
    async fn isolate(&self, index: usize) -> Result<(), BoxError>;

    /// Ends [`isolate`](Self::isolate) of member `index`; nothing where it is not cut
    /// off.
    async fn rejoin(&self, index: usize) -> Result<(), BoxError>;
}

/// [`Roles::isolate`] (or, with `cut` false, [`Roles::rejoin`]) of member `index` of
/// `members`, whose peers are the other members and `also` (a Sentinel set's
/// Sentinels).
pub(crate) async fn isolation(
    members: &[Arc<ServerHandle>],
    also: &[Arc<ServerHandle>],
    index: usize,
    cut: bool,
) -> Result<(), BoxError> {
    let member = members
        .get(index)
        .ok_or_else(|| format!("no member {index} of {}", members.len()))?;
    let peers: Vec<&ServerHandle> = members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, m)| &**m)
        .chain(also.iter().map(|m| &**m))
        .collect();
    if cut {
        crate::isolation::isolate(member, &peers).await
    } else {
        crate::isolation::rejoin(member, &peers).await
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

/// The members in the order of their roles while `leader` leads: the leader first,
/// then the followers in their own order.
fn by_role(size: usize, leader: usize) -> Vec<usize> {
    std::iter::once(leader)
        .chain((0..size).filter(|&i| i != leader))
        .collect()
}

/// Waits up to a minute until a member of `set` leads; its index.
async fn some_leader(set: &dyn Roles) -> Result<usize, BoxError> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(leader) = set.leader().await {
            return Ok(leader);
        }
        if tokio::time::Instant::now() >= give_up {
            return Err(format!("no member was {} within 60 s", set.leader_word()).into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A member of a replicated set named by its role, for the suite's quorum cases:
/// position 0 is the leader, the others the followers in their own order. A call that
/// takes a member down (pause, stop, kill, restart, a connection kill) hits the member
/// in that role at the time, waiting for one to lead if none does; the call that
/// brings it back (unpause, start) goes to that same member, wherever the lead has
/// gone since.
#[derive(Debug)]
struct ByRole {
    set: Arc<dyn Roles>,
    position: usize,
    /// The member the last fault hit, until it is brought back.
    hit: std::sync::Mutex<Option<usize>>,
}

impl ByRole {
    /// The member in this role now.
    async fn now(&self) -> Result<Arc<dyn ServerControl>, BoxError> {
        let members = self.set.members();
        let order = by_role(members.len(), some_leader(&*self.set).await?);
        let index = order[self.position];
        *self.hit.lock().unwrap_or_else(|e| e.into_inner()) = Some(index);
        Ok(members[index].clone())
    }

    /// The member the last fault hit, or the one in this role now where none was hit.
    async fn hit(&self) -> Result<Arc<dyn ServerControl>, BoxError> {
        let hit = self.hit.lock().unwrap_or_else(|e| e.into_inner()).take();
        match hit {
            Some(index) => Ok(self.set.members()[index].clone()),
            None => self.now().await,
        }
    }
}

#[async_trait]
impl ServerControl for ByRole {
    async fn pause(&self) -> Result<(), BoxError> {
        self.now().await?.pause().await
    }

    async fn unpause(&self) -> Result<(), BoxError> {
        self.hit().await?.unpause().await
    }

    async fn restart(&self) -> Result<(), BoxError> {
        let member = self.now().await?;
        self.hit.lock().unwrap_or_else(|e| e.into_inner()).take();
        member.restart().await
    }

    async fn kill(&self) -> Result<(), BoxError> {
        self.now().await?.kill().await
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.hit().await?.start().await
    }

    async fn stop(&self) -> Result<(), BoxError> {
        self.now().await?.stop().await
    }

    fn can_kill_connections(&self) -> bool {
        self.set.members()[0].can_kill_connections()
    }

    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        let member = self.now().await?;
        self.hit.lock().unwrap_or_else(|e| e.into_inner()).take();
        member.kill_connections_counted().await
    }

    async fn kill_connections(&self) -> Result<(), BoxError> {
        self.kill_connections_counted().await.map(drop)
    }

    async fn ready(&self) -> Result<(), BoxError> {
        for member in self.set.members() {
            member.ready().await?;
        }
        Ok(())
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
/// whichever member it reached. The target keeps `set` (the cluster) alive.
///
/// Where no member is stopped, the target has members too, for the quorum cases: by
/// role in `set`, the leader first (see [`ByRole`]), and clients with a proxy per
/// member whose links are cut one by one, listed in the same order of roles as it is
/// when the client is made.
pub(crate) async fn target<B, F, Fut>(
    members: Vec<Arc<ServerHandle>>,
    stopped: &[usize],
    linked: Linked,
    url_of: fn(&[u16]) -> String,
    connect: F,
    set: Arc<dyn Roles>,
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
        Linked::Every => members.clone(),
        Linked::Running => running.clone(),
    };
    let linked = {
        let (connect, keep) = (connect.clone(), set.clone());
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
        let (connect, url, keep) = (connect.clone(), url.clone(), set.clone());
        move || -> BoxFuture<'static, distlock_core::Result<Arc<DynLockBackend>>> {
            let (connect, url, _keep) = (connect.clone(), url.clone(), keep.clone());
            Box::pin(async move {
                let backend: Arc<DynLockBackend> = Arc::new(connect(url).await?);
                Ok(backend)
            })
        }
    };
    let control: Arc<dyn ServerControl> = Arc::new(Every::new(running));
    let target = Target::new(Arc::new(backend))
        .with_clients(clients)
        .with_links(linked)
        .with_control(control);
    if !stopped.is_empty() {
        return Ok(target);
    }
    let in_roles: Vec<Arc<dyn ServerControl>> = (0..members.len())
        .map(|position| -> Arc<dyn ServerControl> {
            Arc::new(ByRole {
                set: set.clone(),
                position,
                hit: Default::default(),
            })
        })
        .collect();
    let member_linked = move || -> BoxFuture<'static, Result<MemberLinkedClient, BoxError>> {
        let (connect, all, set) = (connect.clone(), members.clone(), set.clone());
        Box::pin(async move {
            let links = Links::start(&all).await?;
            let backend: Arc<DynLockBackend> = Arc::new(connect(url_of(&links.ports())).await?);
            let each = links.each();
            let order = by_role(each.len(), some_leader(&*set).await?);
            Ok((
                backend,
                order.into_iter().map(|i| each[i].clone()).collect(),
            ))
        })
    };
    Ok(target
        .with_members(in_roles, member_linked)
        .members_replicate())
}
