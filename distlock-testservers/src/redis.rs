//! Redis, without persistence: a restart loses its data, as the official image's
//! default does.

use std::sync::Arc;
use std::time::Duration;

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use async_trait::async_trait;
use distlock_conformance::ServerControl;
use distlock_core::BoxError;

use crate::error::HarnessError;
use crate::every::Every;
use crate::handle::ServerHandle;
use crate::network::DockerNetwork;
use crate::server::{ConnectionKill, ImageSource, Server};
use crate::tls::TlsMaterial;

/// Redis (`redis-server`), password-protected, `maxmemory-policy noeviction`.
#[derive(Debug, Clone, Copy)]
pub struct Redis;

/// The official image's command line, with `extra` arguments last.
pub(crate) fn official_command(password: &str, extra: &[&str]) -> Vec<String> {
    let mut cmd: Vec<String> = [
        "redis-server",
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory-policy",
        "noeviction",
        "--requirepass",
        password,
    ]
    .map(String::from)
    .to_vec();
    cmd.extend(extra.iter().map(|a| (*a).to_owned()));
    cmd
}

/// `redis-cli` with the password in its environment (never on its command line).
fn cli(args: &[&str], password: &str) -> ExecCommand {
    let mut cmd = vec!["redis-cli", "--no-auth-warning"];
    cmd.extend_from_slice(args);
    ExecCommand::new(cmd).with_env_vars([("REDISCLI_AUTH", password)])
}

impl Server for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn port(&self) -> u16 {
        6379
    }

    fn started_line(&self) -> WaitFor {
        WaitFor::message_on_stdout("Ready to accept connections")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage> {
        match source {
            ImageSource::Official => request.with_cmd(official_command(password, &[])),
            ImageSource::Local => request.with_env_var("REDIS_PASSWORD", password),
        }
    }

    fn url(&self, host_port: u16, password: &str) -> String {
        format!("redis://:{password}@127.0.0.1:{host_port}")
    }

    fn ready_check(&self, password: &str) -> ExecCommand {
        // redis-cli exits 0 on an error reply too (LOADING, NOAUTH), so the shell
        // checks the reply.
        ExecCommand::new([
            "sh",
            "-c",
            "test \"$(redis-cli --no-auth-warning ping)\" = PONG",
        ])
        .with_env_vars([("REDISCLI_AUTH", password)])
    }

    fn tls_url(
        &self,
        host_port: u16,
        password: &str,
        _: &TlsMaterial,
        ca_file: &std::path::Path,
    ) -> Option<String> {
        Some(format!(
            "rediss://:{password}@127.0.0.1:{host_port}?ca_file={}",
            ca_file.display()
        ))
    }

    fn tls_ready_check(&self, password: &str) -> Option<ExecCommand> {
        Some(
            ExecCommand::new([
                "sh",
                "-c",
                "test \"$(redis-cli --tls --cacert /tls/ca.pem --no-auth-warning ping)\" = PONG",
            ])
            .with_env_vars([("REDISCLI_AUTH", password)]),
        )
    }

    fn connection_kill(&self, password: &str) -> ConnectionKill {
        ConnectionKill::Exec(cli(&["CLIENT", "KILL", "TYPE", "normal"], password))
    }
}

/// The arguments that make a member of a Redis Cluster.
const CLUSTER_ARGS: [&str; 4] = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];

/// [`CLUSTER_ARGS`], and the password a replica gives its master (without it a
/// replica never syncs, and cannot take over).
fn cluster_args(password: &str) -> Vec<&str> {
    let mut args = CLUSTER_ARGS.to_vec();
    args.extend(["--masterauth", password]);
    args
}

/// How long a new cluster may take to agree on its slots.
const CLUSTER_READY_WITHIN: Duration = Duration::from_secs(30);

/// A Redis Cluster of masters only, each in a container on a Docker network the
/// harness creates for it, sharing one password. The members announce their addresses
/// on that network, which clients on this machine reach directly (each member's
/// [`ServerHandle::direct_url`]); their 127.0.0.1 ports would redirect a cluster client
/// to addresses it could not follow. Each member is a [`ServerHandle`], so one can be
/// stopped, paused or killed on its own.
#[derive(Debug)]
pub struct RedisCluster {
    members: Vec<Arc<ServerHandle>>,
}

impl RedisCluster {
    /// Starts `masters` members (at least 3, as Redis Cluster needs), assigns every
    /// slot among them (`redis-cli --cluster create`), and waits until each member
    /// reports the cluster ready.
    pub async fn start(masters: usize) -> Result<Self, HarnessError> {
        Self::start_with_replicas(masters, 0).await
    }

    /// [`start`](Self::start), with `replicas` replicas of each master: the members
    /// after the first `masters` (so that a master can fail over).
    pub async fn start_with_replicas(
        masters: usize,
        replicas: usize,
    ) -> Result<Self, HarnessError> {
        if masters < 3 {
            return Err(HarnessError::Cluster(format!(
                "a Redis Cluster needs 3 masters or more, not {masters}"
            )));
        }
        let network = DockerNetwork::create("distlock-rcluster").await?;
        let password = format!("pw{:016x}", rand::random::<u64>());
        let started = futures_util::future::join_all((0..masters * (1 + replicas)).map(|_| {
            let password = password.clone();
            ServerHandle::start_networked(
                &Redis,
                network.clone(),
                Some(password.clone()),
                move |request, source| match source {
                    ImageSource::Official => {
                        request.with_cmd(official_command(&password, &cluster_args(&password)))
                    }
                    ImageSource::Local => request.with_cmd(cluster_args(&password)),
                },
            )
        }))
        .await;
        let members = started
            .into_iter()
            .map(|m| m.map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let mut create = vec!["redis-cli".to_owned(), "--no-auth-warning".into()];
        create.push("--cluster".into());
        create.push("create".into());
        for member in &members {
            create.push(member.direct_address().ok_or_else(|| {
                HarnessError::Cluster("a member has no address on the cluster's network".into())
            })?);
        }
        create.push("--cluster-replicas".into());
        create.push(replicas.to_string());
        create.push("--cluster-yes".into());
        let cluster = RedisCluster { members };
        let first = &cluster.members[0];
        first
            .exec(ExecCommand::new(create).with_env_vars([("REDISCLI_AUTH", first.password())]))
            .await
            .map_err(|e| {
                HarnessError::Cluster(format!("redis-cli --cluster create failed: {e}"))
            })?;
        wait_cluster_ready(&cluster.members).await?;
        Ok(cluster)
    }

    /// The members, in order: the masters first, then the replicas.
    pub fn members(&self) -> &[Arc<ServerHandle>] {
        &self.members
    }

    /// The `redis-cluster://` URL of every member at its address on the cluster's
    /// network.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .filter_map(|m| m.direct_address())
            .collect();
        let password = self.members.first().map_or("", |m| m.password());
        format!("redis-cluster://:{password}@{}", hosts.join(","))
    }

    /// Each member's URL at its address on the cluster's network (what a cluster
    /// client is given as its seeds).
    pub fn urls(&self) -> Vec<String> {
        self.members.iter().filter_map(|m| m.direct_url()).collect()
    }
}

/// The conformance target for a backend on `cluster`: the backend `connect` makes from
/// the cluster's URL, every member as one server for the fault cases, more clients,
/// and wrong credentials. A cluster client follows redirections to the members'
/// own addresses, around any proxy: the round-trip and partition cases do not run.
/// The target owns the cluster.
pub async fn cluster_target<B, F, Fut>(
    cluster: RedisCluster,
    connect: F,
) -> Result<distlock_conformance::Target, distlock_core::BoxError>
where
    B: distlock_core::LockBackend + 'static,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = distlock_core::Result<B>> + Send + 'static,
{
    let url = cluster.url();
    let backend = connect(url.clone()).await?;
    let connect = Arc::new(connect);
    let connector = |url: String| crate::targets::connector(connect.clone(), url);
    let password = cluster
        .members
        .first()
        .map_or(String::new(), |m| m.password().to_owned());
    let secret = format!("wrong{:016x}", rand::random::<u64>());
    let wrong = url.replacen(&format!(":{password}@"), &format!(":{secret}@"), 1);
    Ok(distlock_conformance::Target::new(Arc::new(backend))
        .with_clients(connector(url))
        .with_wrong_credentials(secret, connector(wrong))
        .with_control(Arc::new(ClusterMembers::new(cluster.members))))
}

/// Waits until every one of `members` reports the cluster ready: it agrees on its
/// slots (`cluster_state:ok`), and a replica has synced with its master (before that
/// it could not take over). Within [`CLUSTER_READY_WITHIN`].
async fn wait_cluster_ready(members: &[Arc<ServerHandle>]) -> Result<(), HarnessError> {
    let deadline = tokio::time::Instant::now() + CLUSTER_READY_WITHIN;
    for member in members {
        loop {
            let ready = ExecCommand::new([
                "sh",
                "-c",
                "redis-cli --no-auth-warning cluster info | grep -q '^cluster_state:ok' && \
                 { redis-cli --no-auth-warning info replication | grep -q '^role:master' || \
                   redis-cli --no-auth-warning info replication | grep -q '^master_link_status:up'; }",
            ])
            .with_env_vars([("REDISCLI_AUTH", member.password())]);
            match member.exec(ready).await {
                Ok(()) => break,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(HarnessError::Cluster(format!(
                        "no cluster_state:ok, or a replica not synced, within {CLUSTER_READY_WITHIN:?}: {e}"
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}

/// A cluster's members as one server for the fault cases, as [`Every`] makes them,
/// except that they start again one at a time, in the order of their addresses on the
/// cluster's network, are checked to be back at them, and are back once every member
/// reports the cluster ready (until then a node that saw another fail answers
/// `CLUSTERDOWN`, and a first grant can take longer than a short TTL). Docker gives a container
/// that starts again the lowest free address on its network: members started
/// together come back at each other's addresses, and a member that finds another
/// node at an address it knew marks that node's address unknown (`NOADDR`), so the
/// cluster answers `MOVED <slot> :0` until the nodes find each other again, which CI
/// once saw last beyond the suite's minute. Started together, three containers came
/// back at their own addresses in 1 of 6 rounds here; one at a time, in 4 of 4.
#[derive(Debug)]
struct ClusterMembers {
    /// By address, lowest first.
    members: Vec<Arc<ServerHandle>>,
    every: Every,
}

impl ClusterMembers {
    fn new(mut members: Vec<Arc<ServerHandle>>) -> Self {
        members.sort_by_key(|m| m.direct_ip());
        let every = Every::new(members.iter().cloned());
        ClusterMembers { members, every }
    }
}

#[async_trait]
impl ServerControl for ClusterMembers {
    async fn pause(&self) -> Result<(), BoxError> {
        self.every.pause().await
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        self.every.unpause().await
    }
    /// One member after the other: each takes back the only address free below the
    /// others'.
    async fn restart(&self) -> Result<(), BoxError> {
        for member in &self.members {
            member.restart().await?;
            member.check_address().await?;
        }
        Ok(wait_cluster_ready(&self.members).await?)
    }
    async fn kill(&self) -> Result<(), BoxError> {
        self.every.kill().await
    }
    /// Lowest address first: each takes back the lowest address still free, its own.
    async fn start(&self) -> Result<(), BoxError> {
        for member in &self.members {
            member.start().await?;
            member.check_address().await?;
        }
        Ok(wait_cluster_ready(&self.members).await?)
    }
    async fn stop(&self) -> Result<(), BoxError> {
        self.every.stop().await
    }
    fn can_kill_connections(&self) -> bool {
        self.every.can_kill_connections()
    }
    async fn kill_connections(&self) -> Result<(), BoxError> {
        self.every.kill_connections().await
    }
    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        self.every.kill_connections_counted().await
    }
    async fn ready(&self) -> Result<(), BoxError> {
        self.every.ready().await
    }
}
