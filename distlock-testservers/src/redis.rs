//! Redis, without persistence: a restart loses its data, as the official image's
//! default does.

use std::time::Duration;

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::handle::{HarnessError, ServerHandle};
use crate::{ConnectionKill, ImageSource, Server, TlsMaterial};

/// Redis (`redis-server`), password-protected, `maxmemory-policy noeviction`.
#[derive(Debug, Clone, Copy)]
pub struct Redis;

/// The official image's command line, with `extra` arguments last.
fn official_command(password: &str, extra: &[&str]) -> Vec<String> {
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
    members: Vec<ServerHandle>,
}

impl RedisCluster {
    /// Starts `masters` members (at least 3, as Redis Cluster needs), assigns every
    /// slot among them (`redis-cli --cluster create`), and waits until each member
    /// reports the cluster ready.
    pub async fn start(masters: usize) -> Result<Self, HarnessError> {
        if masters < 3 {
            return Err(HarnessError::Cluster(format!(
                "a Redis Cluster needs 3 masters or more, not {masters}"
            )));
        }
        let network = format!("distlock-rcluster-{:08x}", rand::random::<u32>());
        let password = format!("pw{:016x}", rand::random::<u64>());
        let started = futures_util::future::join_all((0..masters).map(|_| {
            let password = password.clone();
            ServerHandle::start_networked(
                &Redis,
                network.clone(),
                Some(password.clone()),
                move |request, source| match source {
                    ImageSource::Official => {
                        request.with_cmd(official_command(&password, &CLUSTER_ARGS))
                    }
                    ImageSource::Local => request.with_cmd(CLUSTER_ARGS),
                },
            )
        }))
        .await;
        let members = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        let mut create = vec!["redis-cli".to_owned(), "--no-auth-warning".into()];
        create.push("--cluster".into());
        create.push("create".into());
        for member in &members {
            create.push(member.direct_address().ok_or_else(|| {
                HarnessError::Cluster("a member has no address on the cluster's network".into())
            })?);
        }
        create.push("--cluster-yes".into());
        let cluster = RedisCluster { members };
        let first = &cluster.members[0];
        first
            .exec(ExecCommand::new(create).with_env_vars([("REDISCLI_AUTH", first.password())]))
            .await
            .map_err(|e| {
                HarnessError::Cluster(format!("redis-cli --cluster create failed: {e}"))
            })?;
        let ready = || {
            ExecCommand::new([
                "sh",
                "-c",
                "redis-cli --no-auth-warning cluster info | grep -q '^cluster_state:ok'",
            ])
            .with_env_vars([("REDISCLI_AUTH", password.as_str())])
        };
        let deadline = tokio::time::Instant::now() + CLUSTER_READY_WITHIN;
        for member in &cluster.members {
            loop {
                match member.exec(ready()).await {
                    Ok(()) => break,
                    Err(e) if tokio::time::Instant::now() >= deadline => {
                        return Err(HarnessError::Cluster(format!(
                            "no cluster_state:ok within {CLUSTER_READY_WITHIN:?}: {e}"
                        )))
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        Ok(cluster)
    }

    /// The members, in order.
    pub fn members(&self) -> &[ServerHandle] {
        &self.members
    }

    /// Each member's URL at its address on the cluster's network (what a cluster
    /// client is given as its seeds).
    pub fn urls(&self) -> Vec<String> {
        self.members
            .iter()
            .filter_map(ServerHandle::direct_url)
            .collect()
    }
}
