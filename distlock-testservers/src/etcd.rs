//! etcd, one member or a cluster; data survives a restart.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{ServerControl as _, Target};
use distlock_core::{BoxError, LockBackend};
use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::error::HarnessError;
use crate::handle::ServerHandle;
use crate::network::DockerNetwork;
use crate::server::{ConnectionKill, ImageSource, Server};
use crate::tls::TlsMaterial;

/// etcd serving clients on 2379, without authentication.
#[derive(Debug, Clone, Copy)]
pub struct Etcd;

const CLIENT_URL: &str = "http://0.0.0.0:2379";

impl Server for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn port(&self) -> u16 {
        2379
    }

    fn started_line(&self) -> WaitFor {
        WaitFor::message_on_stderr("ready to serve client requests")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        _: &str,
    ) -> ContainerRequest<GenericImage> {
        match source {
            ImageSource::Official => request.with_cmd(official_command(None)),
            // The local image's entrypoint sets the same flags.
            ImageSource::Local => request,
        }
    }

    fn url(&self, host_port: u16, _: &str) -> String {
        format!("etcd://127.0.0.1:{host_port}")
    }

    fn has_password(&self) -> bool {
        // The test server runs without authentication.
        false
    }

    fn ready_check(&self, _: &str) -> ExecCommand {
        // The official image has no shell: etcdctl's exit code says it.
        ExecCommand::new([
            "etcdctl",
            "--endpoints=http://127.0.0.1:2379",
            "--command-timeout=2s",
            "endpoint",
            "health",
        ])
    }

    fn tls_url(
        &self,
        host_port: u16,
        _: &str,
        tls: &TlsMaterial,
        ca_file: &std::path::Path,
    ) -> Option<String> {
        Some(format!(
            "etcds://127.0.0.1:{host_port}?ca_file={}&cert_file={}&key_file={}",
            ca_file.display(),
            tls.client_cert_file().display(),
            tls.client_key_file().display()
        ))
    }

    fn tls_ready_check(&self, _: &str) -> Option<ExecCommand> {
        Some(ExecCommand::new([
            "etcdctl",
            "--endpoints=https://127.0.0.1:2379",
            "--cacert=/tls/ca.pem",
            "--cert=/tls/client.pem",
            "--key=/tls/client.key",
            "--command-timeout=2s",
            "endpoint",
            "health",
        ]))
    }

    fn connection_kill(&self, _: &str) -> ConnectionKill {
        // etcd has no command to close its clients' connections.
        ConnectionKill::LocalSockets
    }
}

/// The official image's command line, as a member of `cluster` when given.
fn official_command(cluster: Option<&Membership>) -> Vec<String> {
    let advertise = cluster.map_or("http://127.0.0.1:2379".to_owned(), |m| {
        format!("http://{}:2379", m.name)
    });
    let mut cmd: Vec<String> = [
        "etcd",
        "--data-dir",
        "/etcd-data",
        "--listen-client-urls",
        CLIENT_URL,
        "--advertise-client-urls",
    ]
    .map(String::from)
    .to_vec();
    cmd.push(advertise);
    if let Some(m) = cluster {
        cmd.extend(["--name".to_owned(), m.name.clone()]);
        cmd.extend(m.peer_args());
    }
    cmd
}

/// One member's place in an etcd cluster on a Docker network of its own.
struct Membership {
    network: String,
    name: String,
    all: Vec<String>,
}

impl Membership {
    fn peer_args(&self) -> Vec<String> {
        let initial = self
            .all
            .iter()
            .map(|n| format!("{n}=http://{n}:2380"))
            .collect::<Vec<_>>()
            .join(",");
        vec![
            "--initial-advertise-peer-urls".into(),
            format!("http://{}:2380", self.name),
            "--listen-peer-urls".into(),
            "http://0.0.0.0:2380".into(),
            "--initial-cluster".into(),
            initial,
            "--initial-cluster-state".into(),
            "new".into(),
            "--initial-cluster-token".into(),
            self.network.clone(),
        ]
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
    ) -> ContainerRequest<GenericImage> {
        let request = match source {
            ImageSource::Official => request.with_cmd(official_command(Some(self))),
            ImageSource::Local => request
                .with_env_var("DISTLOCK_ETCD_NAME", &self.name)
                .with_env_var(
                    "DISTLOCK_ETCD_ADVERTISE",
                    format!("http://{}:2379", self.name),
                )
                .with_cmd(self.peer_args()),
        };
        request.with_container_name(&self.name)
    }
}

/// Turns authentication on for the etcd server `handle` runs: the user `root` with
/// `password` (given to etcdctl as one argument, no shell between, so that every
/// character reaches etcd as it is). The server then refuses a client without
/// credentials or with others; its URL stays without them, for the test to write.
pub async fn enable_auth(
    handle: &ServerHandle,
    password: &str,
) -> Result<(), distlock_core::BoxError> {
    let etcdctl = |args: &[&str]| {
        let mut all = vec!["etcdctl", "--endpoints=http://127.0.0.1:2379"];
        all.extend_from_slice(args);
        ExecCommand::new(all)
    };
    let new_password = format!("--new-user-password={password}");
    handle
        .exec(etcdctl(&["user", "add", "root", &new_password]))
        .await?;
    // Some versions create the root role with the root user, others do not.
    let _ = handle.exec(etcdctl(&["role", "add", "root"])).await;
    let _ = handle
        .exec(etcdctl(&["user", "grant-role", "root", "root"]))
        .await;
    handle.exec(etcdctl(&["auth", "enable"])).await
}

/// An etcd cluster of several members in containers, on a Docker network the harness
/// creates for it (the members reach each other by name; clients reach each member on
/// its own 127.0.0.1 port). Each member is a [`ServerHandle`], so one can be stopped,
/// paused or killed on its own.
#[derive(Debug, Clone)]
pub struct EtcdCluster {
    members: Vec<Arc<ServerHandle>>,
    /// The members stopped by [`stop_leader`](Self::stop_leader).
    stopped: Vec<usize>,
}

impl EtcdCluster {
    /// Starts `size` members at once (a lone member never becomes ready: it waits
    /// for a quorum) and waits until each answers.
    pub async fn start(size: usize) -> Result<Self, HarnessError> {
        let network = DockerNetwork::create("distlock-etcd").await?;
        let all: Vec<String> = (1..=size)
            .map(|i| format!("{}-m{i}", network.name()))
            .collect();
        let started = futures_util::future::join_all(all.iter().map(|name| {
            let membership = Membership {
                network: network.name().to_owned(),
                name: name.clone(),
                all: all.clone(),
            };
            ServerHandle::start_networked(&Etcd, network.clone(), None, move |request, source| {
                membership.configure(request, source)
            })
        }))
        .await;
        let members = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(EtcdCluster {
            members: members.into_iter().map(Arc::new).collect(),
            stopped: Vec::new(),
        })
    }

    /// The members, in order.
    pub fn members(&self) -> &[Arc<ServerHandle>] {
        &self.members
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,...`: every member, stopped ones too.
    pub fn url(&self) -> String {
        let ports: Vec<u16> = self.members.iter().map(|m| m.host_port()).collect();
        url_of(&ports)
    }

    /// The index of the member that is the leader now, as the running members report
    /// it (`etcdctl endpoint status`); `None` while none says it leads.
    pub async fn leader(&self) -> Option<usize> {
        for (i, member) in self.members.iter().enumerate() {
            if self.stopped.contains(&i) {
                continue;
            }
            let ask = member.exec_output(ExecCommand::new([
                "etcdctl",
                "--endpoints=http://127.0.0.1:2379",
                "--command-timeout=2s",
                "endpoint",
                "status",
                "--write-out=json",
            ]));
            // A member that cannot answer (paused, cut off) is not the one asked.
            let Ok(Ok(status)) = tokio::time::timeout(Duration::from_secs(5), ask).await else {
                continue;
            };
            let member_id = number_after(&status, "\"member_id\":");
            if member_id.is_some() && member_id == number_after(&status, "\"leader\":") {
                return Some(i);
            }
        }
        None
    }

    /// Stops the leader (a kill, as a crash), waits until the others have elected a
    /// new one, and answers the index of the member stopped.
    pub async fn stop_leader(&mut self) -> Result<usize, BoxError> {
        let leader = self.leader().await.ok_or("the cluster has no leader")?;
        self.members[leader].kill().await?;
        self.stopped.push(leader);
        crate::members::new_leader(leader, || self.leader()).await?;
        Ok(leader)
    }

    /// The conformance target for a backend on the cluster, as
    /// [`ZooKeeperEnsemble::target`](crate::ZooKeeperEnsemble::target) makes one: the
    /// backend `connect` makes from [`url`](Self::url), more clients, clients whose
    /// links are cut as one, and control over the running members as one server. The
    /// target owns the cluster. A linked client's proxies lead to the running members
    /// only: a proxy in front of a stopped member would accept each connection and
    /// then close it, which etcd-client's balanced channel reports as a failed request
    /// (a member that is down refuses the connection instead, and the backend sends
    /// the request again).
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
        let linked = crate::members::Linked::Running;
        crate::members::target(members, &stopped, linked, url_of, connect, Arc::new(self)).await
    }
}

/// `etcd://` with a host for each port.
fn url_of(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    format!("etcd://{}", hosts.join(","))
}

/// The unsigned number that follows `label` in `text`.
fn number_after(text: &str, label: &str) -> Option<u64> {
    let rest = &text[text.find(label)? + label.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[async_trait::async_trait]
impl crate::members::Roles for EtcdCluster {
    fn members(&self) -> Vec<Arc<dyn distlock_conformance::ServerControl>> {
        crate::members::controls(&self.members)
    }

    async fn leader(&self) -> Option<usize> {
        EtcdCluster::leader(self).await
    }

    async fn isolate(&self, index: usize) -> Result<(), BoxError> {
        crate::members::isolation(&self.members, &[], index, true).await
    }

    async fn rejoin(&self, index: usize) -> Result<(), BoxError> {
        crate::members::isolation(&self.members, &[], index, false).await
    }
}
