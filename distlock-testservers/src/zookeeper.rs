//! ZooKeeper, one server or an ensemble, with TTL nodes enabled; data survives a
//! restart.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{ServerControl as _, Target};
use distlock_core::{BoxError, LockBackend};
use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::HarnessError;
use crate::handle::ServerHandle;
use crate::network::DockerNetwork;
use crate::server::{ConnectionKill, ImageSource, Server};

/// ZooKeeper serving clients on 2181, without authentication, with TTL nodes enabled
/// (`zookeeper.extendedTypesEnabled`), empty container nodes and run-out TTL nodes
/// deleted every second (`znode.container.checkIntervalMs`; a minute by default), and
/// the four-letter words `srvr`, `ruok`, `stat` and `mntr`.
#[derive(Debug, Clone, Copy)]
pub struct ZooKeeper;

/// The server's system properties, for the official image (the local image's
/// entrypoint sets the same).
const JVMFLAGS: &str = "-Dzookeeper.extendedTypesEnabled=true \
    -Dznode.container.checkIntervalMs=1000 -Dznode.container.maxPerMinute=600000";
const WORDS: &str = "srvr,ruok,stat,mntr";

impl Server for ZooKeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn port(&self) -> u16 {
        2181
    }

    fn started_line(&self) -> WaitFor {
        // The official image logs to stdout, the local one (slf4j-simple) to stderr.
        WaitFor::message_on_either_std("binding to port")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        _: &str,
    ) -> ContainerRequest<GenericImage> {
        match source {
            ImageSource::Official => request
                .with_env_var("JVMFLAGS", JVMFLAGS)
                .with_env_var("ZOO_4LW_COMMANDS_WHITELIST", WORDS)
                .with_env_var("ZOO_ADMINSERVER_ENABLED", "false"),
            ImageSource::Local => request,
        }
    }

    fn url(&self, host_port: u16, _: &str) -> String {
        format!("zookeeper://127.0.0.1:{host_port}")
    }

    fn has_password(&self) -> bool {
        // Digest credentials are identities, not a login a server can refuse.
        false
    }

    fn ready_check(&self, _: &str) -> ExecCommand {
        // Ready once it serves requests: standalone, or a leader or follower of a
        // quorum. The local image has nc; the official one has zkServer.sh on PATH.
        ExecCommand::new([
            "sh",
            "-c",
            "if command -v nc >/dev/null; then echo srvr | nc -q 1 127.0.0.1 2181 \
             | grep -Eq '^Mode: (standalone|leader|follower)'; else zkServer.sh status; fi",
        ])
    }

    fn connection_kill(&self, _: &str) -> ConnectionKill {
        // ZooKeeper has no command to close its clients' connections.
        ConnectionKill::LocalSockets
    }
}

/// A ZooKeeper ensemble in containers, on a Docker network the harness creates for
/// it (the members reach each other by name; clients reach each member on its own
/// 127.0.0.1 port). Each member is a [`ServerHandle`], so one can be stopped, paused
/// or killed on its own.
#[derive(Debug, Clone)]
pub struct ZooKeeperEnsemble {
    members: Vec<Arc<ServerHandle>>,
    /// The members stopped by [`stop_leader`](Self::stop_leader).
    stopped: Vec<usize>,
}

impl ZooKeeperEnsemble {
    /// Starts `size` members at once and waits until each serves requests (which it
    /// does only once a quorum has elected a leader).
    pub async fn start(size: usize) -> Result<Self, HarnessError> {
        let network = DockerNetwork::create("distlock-zk").await?;
        let names: Vec<String> = (1..=size)
            .map(|i| format!("{}-m{i}", network.name()))
            .collect();
        let servers = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("server.{}={n}:2888:3888;2181", i + 1))
            .collect::<Vec<_>>()
            .join(" ");
        let started = futures_util::future::join_all(names.iter().enumerate().map(|(i, name)| {
            let (name, servers) = (name.clone(), servers.clone());
            ServerHandle::start_networked(
                &ZooKeeper,
                network.clone(),
                None,
                move |request, source| {
                    let id = (i + 1).to_string();
                    let request = match source {
                        ImageSource::Official => request
                            .with_env_var("ZOO_MY_ID", id)
                            .with_env_var("ZOO_SERVERS", servers)
                            .with_env_var("ZOO_CFG_EXTRA", "quorumListenOnAllIPs=true"),
                        ImageSource::Local => request
                            .with_env_var("DISTLOCK_ZK_ID", id)
                            .with_env_var("DISTLOCK_ZK_SERVERS", servers),
                    };
                    request.with_container_name(name)
                },
            )
        }))
        .await;
        let members = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(ZooKeeperEnsemble {
            members: members.into_iter().map(Arc::new).collect(),
            stopped: Vec::new(),
        })
    }

    /// The members, in order.
    pub fn members(&self) -> &[Arc<ServerHandle>] {
        &self.members
    }

    /// `zookeeper://127.0.0.1:P1,127.0.0.1:P2,...`: every member, stopped ones too.
    pub fn url(&self) -> String {
        let ports: Vec<u16> = self.members.iter().map(|m| m.host_port()).collect();
        url_of(&ports)
    }

    /// Stops the leader (a kill, as a crash), waits until the others have elected a
    /// new one, and answers the index of the member stopped.
    pub async fn stop_leader(&mut self) -> Result<usize, BoxError> {
        let leader = self.leader().await.ok_or("the ensemble has no leader")?;
        self.members[leader].kill().await?;
        self.stopped.push(leader);
        crate::members::new_leader(leader, || self.leader()).await?;
        Ok(leader)
    }

    /// The conformance target for a backend on the ensemble: the backend `connect`
    /// makes from [`url`](Self::url) (every member, any stopped by
    /// [`stop_leader`](Self::stop_leader) included, as a client's configuration would
    /// still name it), more clients of it, clients behind a proxy per member whose
    /// links are cut and slowed as one, and control over the running members as one
    /// server (paused, restarted or killed together). No round-trip meter: a client
    /// talks to whichever member it reached. The target owns the ensemble.
    ///
    /// With no member stopped, the target has the members too, for the quorum cases:
    /// each named by its role when a fault hits it (the leader first, then the
    /// followers), members that replicate each lease among themselves.
    pub async fn target<B, F, Fut>(self, connect: F) -> Result<Target, BoxError>
    where
        B: LockBackend + 'static,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = distlock_core::Result<B>> + Send + 'static,
    {
        let (members, stopped) = (self.members.clone(), self.stopped.clone());
        let linked = crate::members::Linked::Every;
        crate::members::target(members, &stopped, linked, url_of, connect, Arc::new(self)).await
    }

    /// The index of the member that is the leader now, asked of each member with the
    /// four-letter word `srvr` on its port; `None` while there is none.
    pub async fn leader(&self) -> Option<usize> {
        for (i, member) in self.members.iter().enumerate() {
            if mode(member.host_port()).await.as_deref() == Some("leader") {
                return Some(i);
            }
        }
        None
    }
}

fn url_of(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("zookeeper://{}", hosts.join(","))
}

/// What `srvr` on 127.0.0.1:`port` says the server's mode is.
async fn mode(port: u16) -> Option<String> {
    let ask = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream.write_all(b"srvr").await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        answer
            .lines()
            .find_map(|l| l.strip_prefix("Mode: "))
            .map(str::to_owned)
    };
    tokio::time::timeout(Duration::from_secs(3), ask)
        .await
        .ok()?
}

#[async_trait::async_trait]
impl crate::members::Roles for ZooKeeperEnsemble {
    fn members(&self) -> Vec<Arc<dyn distlock_conformance::ServerControl>> {
        crate::members::controls(&self.members)
    }

    async fn leader(&self) -> Option<usize> {
        ZooKeeperEnsemble::leader(self).await
    }

    async fn isolate(&self, index: usize) -> Result<(), BoxError> {
        crate::members::isolation(&self.members, &[], index, true).await
    }

    async fn rejoin(&self, index: usize) -> Result<(), BoxError> {
        crate::members::isolation(&self.members, &[], index, false).await
    }
}
