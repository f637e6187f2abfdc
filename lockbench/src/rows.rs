//! What each row name of a report stands for, and the check that a row ran the
//! backend it names.
//!
//! A row is exactly what ran: a name lockbench does not know is an error, never a
//! stand-in, and once a row's target is open its backend's own name and the servers
//! it runs on are compared with what the row name promises. A run whose target fails
//! that check is not run under that name.

use distlock::DynLockBackend;
use std::sync::Arc;

use distlock_conformance::Target;
use distlock_testservers::{
    external_url, EtcdCluster, RedisCluster, RedisMasters, RedisSentinel, Roles, Server,
    ServerHandle, ZooKeeperEnsemble,
};

use crate::run::BoxError;

/// Backends over several servers: Redlock over that many independent masters, a Redis
/// Cluster of three masters, a Redis master with two replicas behind three Sentinels,
/// a three-member etcd cluster and a three-member ZooKeeper ensemble.
pub(crate) const SEVERAL_SERVERS: [(&str, Row); 6] = [
    ("redlock-3", Row::Redlock { masters: 3 }),
    ("redlock-5", Row::Redlock { masters: 5 }),
    ("redis-cluster", Row::Cluster { masters: 3 }),
    ("redis-sentinel", Row::Sentinel { replicas: 2 }),
    ("etcd-3", Row::EtcdCluster { members: 3 }),
    ("zookeeper-3", Row::Ensemble { members: 3 }),
];

/// Each replicated row and the single-server row it is set beside (the cost of the
/// replication, as a ratio in one run).
pub(crate) const REPLICATED: [(&str, &str); 3] = [
    ("redis-sentinel", "redis"),
    ("etcd-3", "etcd"),
    ("zookeeper-3", "zookeeper"),
];

/// What a row name stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Row {
    /// distlock's in-process backend.
    Memory,
    /// One server of `distlock-testservers` and its backend.
    Server(&'static dyn Server),
    /// `RedlockBackend` over `masters` independent Redis masters.
    Redlock { masters: usize },
    /// `RedisBackend` on a Redis Cluster of `masters` masters.
    Cluster { masters: usize },
    /// `RedisBackend` on a Redis master with `replicas` replicas behind three
    /// Sentinels.
    Sentinel { replicas: usize },
    /// `EtcdBackend` on an etcd cluster of `members` members.
    EtcdCluster { members: usize },
    /// `ZooKeeperBackend` on a ZooKeeper ensemble of `members` members.
    Ensemble { members: usize },
}

impl Row {
    /// The row `name` stands for: an unknown name is an error, never a stand-in.
    pub(crate) fn parse(name: &str) -> Result<Row, String> {
        if name == "memory" {
            return Ok(Row::Memory);
        }
        if let Some(server) = distlock_testservers::by_name(name) {
            return Ok(Row::Server(server));
        }
        SEVERAL_SERVERS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, row)| *row)
            .ok_or_else(|| {
                format!(
                    "no backend is named {name:?}; known: {}",
                    backend_names().join(", ")
                )
            })
    }

    /// The name the row's backend gives itself ([`distlock::LockBackend::name`]).
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            Row::Memory => "memory",
            Row::Server(server) => server.backend_name(),
            Row::Redlock { .. } => "redlock",
            Row::Cluster { .. } | Row::Sentinel { .. } => "redis",
            Row::EtcdCluster { .. } => "etcd",
            Row::Ensemble { .. } => "zookeeper",
        }
    }

    /// How many lock servers the row runs on (0 for the in-process backend).
    pub(crate) fn servers(&self) -> usize {
        match self {
            Row::Memory => 0,
            Row::Server(_) => 1,
            Row::Redlock { masters } | Row::Cluster { masters } => *masters,
            Row::Sentinel { replicas } => 1 + replicas,
            Row::EtcdCluster { members } | Row::Ensemble { members } => *members,
        }
    }

    /// Whether `backend`, running on `servers` lock servers, is what this row names;
    /// if not, what differs.
    pub(crate) fn check(&self, backend: &DynLockBackend, servers: usize) -> Result<(), String> {
        let (expected, found) = (self.backend_name(), backend.name());
        if expected != found {
            return Err(format!(
                "the row's backend calls itself {found:?}, where the row names a {expected:?} backend"
            ));
        }
        if servers != self.servers() {
            return Err(format!(
                "the row's backend runs on {servers} lock servers, where the row names {}",
                self.servers()
            ));
        }
        Ok(())
    }
}

/// A row's target, on servers started for it (or the external server its variable
/// names): never another backend in its place.
pub(crate) struct Opened {
    /// The conformance target, as the backend's own tests get it (it owns the servers).
    pub(crate) target: Target,
    /// The backend's URL, each server started here at its address on its Docker
    /// network (no port proxy); `None` in process.
    pub(crate) url: Option<String>,
    /// Each Redis server's own `redis://` URL there: the one server, or the masters.
    pub(crate) redis_urls: Vec<String>,
    /// How many lock servers it runs on.
    pub(crate) servers: usize,
    /// Where the torture run's server faults land, where not on the whole target: a
    /// minority of Redlock's masters (so a majority always keeps its leases), one of a
    /// cluster's masters.
    pub(crate) fault_members: Vec<Arc<ServerHandle>>,
    /// Where it runs, for the report.
    pub(crate) server: String,
    /// A replicated row's members with their roles, for faults aimed at the leader
    /// (or master) or at a follower.
    pub(crate) roles: Option<Arc<dyn Roles>>,
    /// The ID of the one server's container, where this run started it: the server's
    /// CPU time is read from its control group.
    pub(crate) container: Option<String>,
}

/// Starts the servers of `row` and opens its target, as its own tests do.
pub(crate) async fn open(row: Row) -> Result<Opened, BoxError> {
    let connect = |url: String| async move { crate::run::connect(&url).await };
    let on_network = "reached at their addresses on a Docker network (no port proxy)";
    let mut roles: Option<Arc<dyn Roles>> = None;
    let mut container = None;
    let (target, url, redis_urls, fault_members, server, servers) = match row {
        Row::Memory => {
            let target = Target::memory();
            (target, None, vec![], vec![], "in process".to_owned(), 0)
        }
        Row::Server(kind) => {
            if let Some(url) = external_url(kind) {
                let backend = crate::run::connect(&url)
                    .await
                    .map_err(|e| format!("external, but connecting failed: {e}"))?;
                let target = Target::new(backend);
                let server = format!("external ({}): no faults injected", kind.url_variable());
                (
                    target,
                    Some(url.clone()),
                    redis_url(kind, &url),
                    vec![],
                    server,
                    1,
                )
            } else {
                let handle = ServerHandle::start_direct(kind).await?;
                container = Some(handle.container_id().to_owned());
                let url = handle
                    .direct_url()
                    .ok_or("the server's network address is unknown")?;
                let server = format!(
                    "container, {:?} image, reached at its address on a Docker network (no port proxy)",
                    handle.image_source()
                );
                let target = distlock_testservers::target_on(handle, connect).await?;
                (
                    target,
                    Some(url.clone()),
                    redis_url(kind, &url),
                    vec![],
                    server,
                    1,
                )
            }
        }
        Row::Redlock { masters } => {
            let started = RedisMasters::start(masters).await?;
            let members = started.members();
            let redis_urls = members.iter().filter_map(|m| m.direct_url()).collect();
            let url = started
                .direct_url()
                .ok_or("the masters' network addresses are unknown")?;
            let servers = members.len();
            let faults = members[..(servers - 1) / 2].to_vec();
            let server = format!("{servers} independent masters in containers, {on_network}");
            let target = distlock_testservers::redlock_target(started, connect).await?;
            (target, Some(url), redis_urls, faults, server, servers)
        }
        Row::Cluster { masters } => {
            let cluster = RedisCluster::start(masters).await?;
            let url = cluster.url();
            let servers = cluster.members().len();
            let faults = cluster.members()[..1].to_vec();
            let server = format!("a cluster of {servers} masters in containers, {on_network}");
            let target = distlock_testservers::cluster_target(cluster, connect).await?;
            (target, Some(url), vec![], faults, server, servers)
        }
        Row::Sentinel { replicas } => {
            let set = RedisSentinel::start(replicas).await?;
            let url = set.url();
            roles = Some(Arc::new(set.clone()));
            let server = format!(
                "a master and {replicas} replicas behind 3 Sentinels in containers, {on_network}"
            );
            let target = set.target(connect).await?;
            (target, Some(url), vec![], vec![], server, 1 + replicas)
        }
        Row::EtcdCluster { members } => {
            let cluster = EtcdCluster::start(members).await?;
            let url = cluster.url();
            roles = Some(Arc::new(cluster.clone()));
            let server = format!(
                "a cluster of {members} members in containers, reached through their 127.0.0.1 ports"
            );
            let target = cluster.target(connect).await?;
            (target, Some(url), vec![], vec![], server, members)
        }
        Row::Ensemble { members } => {
            let ensemble = ZooKeeperEnsemble::start(members).await?;
            let url = ensemble.url();
            roles = Some(Arc::new(ensemble.clone()));
            let server = format!(
                "an ensemble of {members} members in containers, reached through their 127.0.0.1 ports"
            );
            let target = ensemble.target(connect).await?;
            (target, Some(url), vec![], vec![], server, members)
        }
    };
    Ok(Opened {
        target,
        url,
        redis_urls,
        servers,
        fault_members,
        server,
        roles,
        container,
    })
}

/// The one server's URL where it is a Redis server (for the server's CPU meter and
/// the peer library on it).
fn redis_url(kind: &dyn Server, url: &str) -> Vec<String> {
    if kind.backend_name() == "redis" {
        vec![url.to_owned()]
    } else {
        Vec::new()
    }
}

/// The backends lockbench can run: memory, every server the test servers know, and
/// the Redis backend over several servers (see [`Row`]).
pub(crate) fn backend_names() -> Vec<&'static str> {
    let mut names = vec!["memory"];
    names.extend(distlock_testservers::ALL.map(|server| server.name()));
    names.extend(SEVERAL_SERVERS.map(|(name, _)| name));
    names
}

#[cfg(test)]
mod tests {
    use distlock::MemoryBackend;

    use super::*;

    #[test]
    fn every_known_name_is_its_own_row_and_no_other_name_is_memory() {
        for name in backend_names() {
            let row = Row::parse(name).expect(name);
            match row {
                Row::Memory => assert_eq!(name, "memory"),
                Row::Server(server) => assert_eq!(server.name(), name),
                Row::Redlock { masters } => assert_eq!(name, format!("redlock-{masters}")),
                Row::Cluster { masters } => {
                    assert_eq!((name, masters), ("redis-cluster", 3))
                }
                Row::Sentinel { replicas } => {
                    assert_eq!((name, replicas), ("redis-sentinel", 2))
                }
                Row::EtcdCluster { members } => assert_eq!(name, format!("etcd-{members}")),
                Row::Ensemble { members } => assert_eq!(name, format!("zookeeper-{members}")),
            }
        }
        let unknown = Row::parse("redlock-7").expect_err("an error");
        assert!(unknown.contains("redlock-7") && unknown.contains("known: memory"));
    }

    #[test]
    fn a_stand_in_is_caught_by_name_or_by_its_servers() {
        let memory: Arc<DynLockBackend> = Arc::new(MemoryBackend::new());
        for name in [
            "redlock-3",
            "redlock-5",
            "redis-cluster",
            "redis-sentinel",
            "etcd-3",
            "zookeeper-3",
            "redis",
            "zookeeper",
        ] {
            let row = Row::parse(name).expect("no error");
            let said = row.check(&*memory, row.servers()).expect_err("an error");
            assert!(said.contains("\"memory\""), "{name}: {said}");
        }
        Row::Memory.check(&*memory, 0).expect("no error");
        let servers = Row::Memory.check(&*memory, 1).expect_err("an error");
        assert!(servers.contains("runs on 1 lock servers"), "{servers}");
    }
}
