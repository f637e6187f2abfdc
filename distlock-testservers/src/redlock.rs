//! Independent Redis masters for a Redlock, and the conformance target over them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{
    LinkControl, LinkedClient, MemberLinkedClient, RoundTripMeter, ServerControl, Target,
};
use distlock_core::{BoxError, DynLockBackend, LockBackend};
use futures_util::future::{join_all, BoxFuture};

use crate::error::HarnessError;
use crate::every::Every;
use crate::handle::ServerHandle;
use crate::network::DockerNetwork;
use crate::proxy::Proxy;
use crate::redis::Redis;

/// Independent Redis masters (no replication, no cluster) sharing one password, each
/// in a container of its own on a Docker network the harness creates for them: what a
/// Redlock runs on. Each member is a [`ServerHandle`], so one can be killed, paused or
/// restarted (empty: these servers do not persist) on its own.
#[derive(Debug)]
pub struct RedisMasters {
    members: Vec<Arc<ServerHandle>>,
}

impl RedisMasters {
    /// Starts `masters` Redis servers at once.
    pub async fn start(masters: usize) -> Result<Self, HarnessError> {
        let network = DockerNetwork::create("distlock-redlock").await?;
        let password = format!("pw{:016x}", rand::random::<u64>());
        let started = join_all((0..masters).map(|_| {
            ServerHandle::start_networked(
                &Redis,
                network.clone(),
                Some(password.clone()),
                |request, _| request,
            )
        }))
        .await;
        let members = started
            .into_iter()
            .map(|m| m.map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedisMasters { members })
    }

    /// The members, in the order of the URLs' hosts.
    pub fn members(&self) -> &[Arc<ServerHandle>] {
        &self.members
    }

    /// The password every member checks.
    pub fn password(&self) -> &str {
        self.members.first().map_or("", |m| m.password())
    }

    /// The Redlock URL of the members at their ports on 127.0.0.1.
    pub fn url(&self) -> String {
        let ports: Vec<u16> = self.members.iter().map(|m| m.host_port()).collect();
        redlock_url(self.password(), &ports)
    }

    /// The Redlock URL of the members at their addresses on their Docker network,
    /// with no port proxy in the way (for benchmarks).
    pub fn direct_url(&self) -> Option<String> {
        let hosts = self
            .members
            .iter()
            .map(|m| m.direct_address())
            .collect::<Option<Vec<_>>>()?;
        Some(format!(
            "redlock://:{}@{}",
            self.password(),
            hosts.join(",")
        ))
    }
}

/// A Redlock URL over the masters listening on `ports` of 127.0.0.1.
fn redlock_url(password: &str, ports: &[u16]) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("redlock://:{password}@{}", hosts.join(","))
}

/// A client's proxies to every member, as one link and one meter: the link is cut
/// and slowed to all members at once, and the requests of an operation sent to all
/// members at once, with their replies, count one round trip ([`Proxy::start_group`]).
#[derive(Debug)]
pub(crate) struct Links(Vec<Arc<Proxy>>);

impl Links {
    pub(crate) async fn start(members: &[Arc<ServerHandle>]) -> Result<Self, BoxError> {
        let ports: Vec<u16> = members.iter().map(|m| m.host_port()).collect();
        let proxies = Proxy::start_group(&ports).await?;
        Ok(Links(proxies.into_iter().map(Arc::new).collect()))
    }

    pub(crate) fn ports(&self) -> Vec<u16> {
        self.0.iter().map(|p| p.port()).collect()
    }

    pub(crate) fn each(&self) -> Vec<Arc<dyn LinkControl>> {
        self.0
            .iter()
            .map(|p| {
                let link: Arc<dyn LinkControl> = p.clone();
                link
            })
            .collect()
    }
}

impl RoundTripMeter for Links {
    fn round_trips(&self) -> u64 {
        self.0.first().map_or(0, |p| p.round_trips())
    }
}

#[async_trait]
impl LinkControl for Links {
    async fn cut(&self) -> Result<(), BoxError> {
        for p in &self.0 {
            p.cut().await?;
        }
        Ok(())
    }
    async fn heal(&self) -> Result<(), BoxError> {
        for p in &self.0 {
            p.heal().await?;
        }
        Ok(())
    }
    async fn set_latency(&self, one_way: Duration) -> Result<(), BoxError> {
        for p in &self.0 {
            p.set_latency(one_way).await?;
        }
        Ok(())
    }
    fn can_hold_replies(&self) -> bool {
        self.0.iter().all(|p| p.can_hold_replies())
    }
    async fn hold_replies(&self) -> Result<(), BoxError> {
        for p in &self.0 {
            p.hold_replies().await?;
        }
        Ok(())
    }
    fn can_fail_connections(&self) -> bool {
        self.0.iter().all(|p| p.can_fail_connections())
    }
    async fn reset_after_requests(&self) -> Result<(), BoxError> {
        for p in &self.0 {
            p.reset_after_requests().await?;
        }
        Ok(())
    }
    async fn refuse_connections(&self) -> Result<(), BoxError> {
        for p in &self.0 {
            p.refuse_connections().await?;
        }
        Ok(())
    }
    async fn drop_new_connections(&self) -> Result<(), BoxError> {
        for p in &self.0 {
            p.drop_new_connections().await?;
        }
        Ok(())
    }
}

/// The conformance target for a Redlock backend on `masters`: the backend `connect`
/// makes from a Redlock URL; the masters as one server for the suite's fault cases;
/// each master for the quorum cases; a second backend behind a proxy per master for
/// the round-trip case; clients behind proxies whose links can be cut to all masters
/// or to each; and wrong credentials. The target owns the masters.
pub async fn redlock_target<B, F, Fut>(
    masters: RedisMasters,
    connect: F,
) -> Result<Target, BoxError>
where
    B: LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    let members = masters.members.clone();
    let password = masters.password().to_owned();
    let backend = connect(masters.url()).await?;
    let metered_links = Links::start(&members).await?;
    let metered = connect(redlock_url(&password, &metered_links.ports())).await?;
    let connect = Arc::new(connect);
    let connector = |url: String| crate::targets::connector(connect.clone(), url);
    // A new client behind a proxy per member: its links, as one and one by one.
    let through_links = {
        let (connect, members, password) = (connect.clone(), members.clone(), password.clone());
        move || -> BoxFuture<'static, Result<(Arc<DynLockBackend>, Links), BoxError>> {
            let (connect, members, password) = (connect.clone(), members.clone(), password.clone());
            Box::pin(async move {
                let links = Links::start(&members).await?;
                let backend: Arc<DynLockBackend> =
                    Arc::new(connect(redlock_url(&password, &links.ports())).await?);
                Ok((backend, links))
            })
        }
    };
    let linked = {
        let through_links = through_links.clone();
        move || -> BoxFuture<'static, Result<LinkedClient, BoxError>> {
            let made = through_links();
            Box::pin(async move {
                let (backend, links) = made.await?;
                let link: Arc<dyn LinkControl> = Arc::new(links);
                Ok((backend, link))
            })
        }
    };
    let member_linked = move || -> BoxFuture<'static, Result<MemberLinkedClient, BoxError>> {
        let made = through_links();
        Box::pin(async move {
            let (backend, links) = made.await?;
            Ok((backend, links.each()))
        })
    };
    let secret = format!("wrong{:016x}", rand::random::<u64>());
    let ports: Vec<u16> = members.iter().map(|m| m.host_port()).collect();
    let wrong = redlock_url(&secret, &ports);
    let controls: Vec<Arc<dyn ServerControl>> = members
        .iter()
        .map(|m| {
            let control: Arc<dyn ServerControl> = m.clone();
            control
        })
        .collect();
    Ok(Target::new(Arc::new(backend))
        .with_round_trip_meter(Arc::new(metered), Arc::new(metered_links))
        .with_clients(connector(masters.url()))
        .with_links(linked)
        .with_wrong_credentials(secret, connector(wrong))
        .with_control(Arc::new(Every::new(members)))
        .with_members(controls, member_linked))
}
