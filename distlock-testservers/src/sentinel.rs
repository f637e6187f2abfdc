//! Redis behind Sentinel: a master, its replicas and three Sentinels, each in a
//! container on a Docker network the harness creates, so that a failover can be made
//! to happen by stopping, pausing or killing the master.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{ServerControl, Target};
use distlock_core::{BoxError, LockBackend};
use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::error::HarnessError;
use crate::every::Every;
use crate::handle::ServerHandle;
use crate::network::DockerNetwork;
use crate::redis::Redis;
use crate::server::{ConnectionKill, ImageSource, Server};

/// The name the Sentinels monitor the master under.
pub const MASTER_NAME: &str = "distlock";

/// How long the Sentinels wait without an answer before they call the master down
/// (`down-after-milliseconds`): longer than the suite's short pauses, so that those
/// make no failover (a pause past 2 s puts a Sentinel in its TILT mode when it
/// resumes, and TILT makes none either).
const DOWN_AFTER: Duration = Duration::from_secs(3);

/// How long a replica may go without acknowledging before its master stops counting
/// it (`min-replicas-max-lag`, seconds): below the Sentinels' down-after time, so that
/// a master paused long enough to be failed over finds, when it resumes, no replica
/// it counts.
const MIN_REPLICAS_MAX_LAG: &str = "2";

/// How long a new set may take to agree on its master, and a failover to finish.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A Redis Sentinel (`redis-server <conf> --sentinel`), monitoring the master at
/// `MASTER_IP` under [`MASTER_NAME`] with `REDIS_PASSWORD` (both in its
/// environment), two Sentinels of three agreeing that it is down. It writes its
/// configuration once: a Sentinel started again keeps what it learnt (the master
/// after a failover, the other Sentinels, the replicas).
#[derive(Debug, Clone, Copy)]
pub struct Sentinel;

/// The script a Sentinel's container runs under `sh -c`.
const SENTINEL_SCRIPT: &str = r#"conf=/tmp/sentinel.conf
if [ ! -f "$conf" ]; then
  printf 'port 26379\nbind 0.0.0.0\nprotected-mode no\nsentinel monitor %s %s 6379 2\nsentinel auth-pass %s %s\nsentinel down-after-milliseconds %s %s\nsentinel failover-timeout %s 6000\nsentinel parallel-syncs %s 1\n' \
    "$MASTER_NAME" "$MASTER_IP" "$MASTER_NAME" "$REDIS_PASSWORD" "$MASTER_NAME" "$DOWN_AFTER_MS" "$MASTER_NAME" "$MASTER_NAME" > "$conf"
fi
exec redis-server "$conf" --sentinel"#;

impl Server for Sentinel {
    fn name(&self) -> &'static str {
        "redis-sentinel"
    }

    fn backend_name(&self) -> &'static str {
        "redis"
    }

    fn port(&self) -> u16 {
        26379
    }

    fn started_line(&self) -> WaitFor {
        WaitFor::message_on_stdout("Sentinel ID is")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        _: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage> {
        request
            .with_env_var("REDIS_PASSWORD", password)
            .with_env_var("MASTER_NAME", MASTER_NAME)
            .with_env_var("DOWN_AFTER_MS", DOWN_AFTER.as_millis().to_string())
            .with_cmd(["-c", SENTINEL_SCRIPT])
    }

    fn url(&self, host_port: u16, _: &str) -> String {
        format!("redis://127.0.0.1:{host_port}")
    }

    fn image_entry(&self) -> &'static str {
        "redis"
    }

    fn entrypoint(&self, _: ImageSource) -> Option<String> {
        Some("/bin/sh".to_owned())
    }

    fn has_password(&self) -> bool {
        false
    }

    fn ready_check(&self, _: &str) -> ExecCommand {
        ExecCommand::new(["sh", "-c", "test \"$(redis-cli -p 26379 ping)\" = PONG"])
    }

    fn connection_kill(&self, _: &str) -> ConnectionKill {
        ConnectionKill::Exec(ExecCommand::new([
            "redis-cli",
            "-p",
            "26379",
            "CLIENT",
            "KILL",
            "TYPE",
            "normal",
        ]))
    }
}

/// A master with replicas behind three Sentinels, sharing one password, each a
/// [`ServerHandle`] on a Docker network of its own, reached at its address there (as
/// the Sentinels name the master by it).
#[derive(Debug, Clone)]
pub struct RedisSentinel {
    /// The data servers: the first master at first, then its replicas.
    servers: Vec<Arc<ServerHandle>>,
    sentinels: Vec<Arc<ServerHandle>>,
}

impl RedisSentinel {
    /// Starts a master, `replicas` replicas of it and three Sentinels, and waits until
    /// every Sentinel knows the others and every replica has synced.
    pub async fn start(replicas: usize) -> Result<Self, HarnessError> {
        let network = DockerNetwork::create("distlock-sentinel").await?;
        let password = format!("pw{:016x}", rand::random::<u64>());
        let master = data_server(&network, &password, None).await?;
        let master_ip = master
            .direct_ip()
            .ok_or_else(|| HarnessError::Cluster("the master has no address".into()))?
            .to_string();
        let replicas = futures_util::future::join_all(
            (0..replicas).map(|_| data_server(&network, &password, Some(&master_ip))),
        )
        .await;
        let mut servers = vec![Arc::new(master)];
        for replica in replicas {
            servers.push(Arc::new(replica?));
        }
        let sentinels = futures_util::future::join_all((0..3).map(|_| {
            let master_ip = master_ip.clone();
            ServerHandle::start_networked(
                &Sentinel,
                network.clone(),
                Some(password.clone()),
                move |request, _| request.with_env_var("MASTER_IP", master_ip),
            )
        }))
        .await
        .into_iter()
        .map(|s| s.map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
        let set = RedisSentinel { servers, sentinels };
        set.wait_settled().await?;
        Ok(set)
    }

    /// The data servers, the first master first.
    pub fn servers(&self) -> &[Arc<ServerHandle>] {
        &self.servers
    }

    /// The Sentinels.
    pub fn sentinels(&self) -> &[Arc<ServerHandle>] {
        &self.sentinels
    }

    /// The `redis-sentinel://` URL of the Sentinels at their addresses on the set's
    /// network, with the data servers' password.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .filter_map(|s| s.direct_address())
            .collect();
        let password = self.servers.first().map_or("", |m| m.password());
        format!(
            "redis-sentinel://:{password}@{}?master={MASTER_NAME}",
            hosts.join(",")
        )
    }

    /// The index (in [`servers`](Self::servers)) of the server every running
    /// Sentinel names master now; `None` while they disagree or name none.
    pub async fn master(&self) -> Option<usize> {
        let mut named = None;
        for sentinel in &self.sentinels {
            let ask = ExecCommand::new([
                "redis-cli",
                "-p",
                "26379",
                "SENTINEL",
                "get-master-addr-by-name",
                MASTER_NAME,
            ]);
            let Ok(said) =
                tokio::time::timeout(Duration::from_secs(3), sentinel.exec_output(ask)).await
            else {
                continue;
            };
            let Ok(said) = said else { continue };
            let ip = said.lines().next()?.trim().to_owned();
            match &named {
                None => named = Some(ip),
                Some(other) if *other == ip => {}
                Some(_) => return None,
            }
        }
        let ip = named?;
        self.servers
            .iter()
            .position(|s| s.direct_ip().is_some_and(|a| a.to_string() == ip))
    }

    /// Waits until the Sentinels agree on a master other than `old` (after it was
    /// killed, stopped or paused), and answers it.
    pub async fn wait_failover(&self, old: usize) -> Result<usize, BoxError> {
        let give_up = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            match self.master().await {
                Some(new) if new != old && self.serves_as_master(new).await => return Ok(new),
                _ if tokio::time::Instant::now() >= give_up => {
                    return Err(
                        format!("no failover from server {old} within {READY_WITHIN:?}").into(),
                    )
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Whether server `index` says it is a master.
    async fn serves_as_master(&self, index: usize) -> bool {
        let server = &self.servers[index];
        let role = cli(&["ROLE"], server.password());
        matches!(
            tokio::time::timeout(Duration::from_secs(3), server.exec_output(role)).await,
            Ok(Ok(said)) if said.lines().next().map(str::trim) == Some("master")
        )
    }

    /// Waits until every Sentinel names one master that says it is one, knows the
    /// other Sentinels, and every other running server is its replica with its link
    /// up. Within [`READY_WITHIN`].
    async fn wait_settled(&self) -> Result<(), HarnessError> {
        let give_up = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            let why = match self.master().await {
                None => "the Sentinels name no master, or disagree".to_owned(),
                Some(m) => match self.unsettled(m).await {
                    None => return Ok(()),
                    Some(why) => why,
                },
            };
            if tokio::time::Instant::now() >= give_up {
                return Err(HarnessError::Cluster(format!(
                    "the Sentinel set did not settle within {READY_WITHIN:?}: {why}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What is not yet settled around master `m`, if anything.
    async fn unsettled(&self, m: usize) -> Option<String> {
        if !self.serves_as_master(m).await {
            return Some(format!("server {m} is named master but is not one yet"));
        }
        let others = self.sentinels.len() - 1;
        for (i, sentinel) in self.sentinels.iter().enumerate() {
            let ask = ExecCommand::new([
                "redis-cli",
                "-p",
                "26379",
                "SENTINEL",
                "master",
                MASTER_NAME,
            ]);
            let said = sentinel.exec_output(ask).await.unwrap_or_default();
            let known = field(&said, "num-other-sentinels");
            if known != Some(others.to_string()) {
                return Some(format!(
                    "Sentinel {i} knows {known:?} other Sentinels, not {others}"
                ));
            }
        }
        for (i, server) in self.servers.iter().enumerate() {
            if i == m {
                continue;
            }
            let info = cli(&["INFO", "replication"], server.password());
            let said = server.exec_output(info).await.unwrap_or_default();
            let master_ip = self.servers[m].direct_ip().map(|a| a.to_string());
            let line = |name: &str| {
                said.lines()
                    .find_map(|l| l.trim().strip_prefix(name))
                    .map(str::to_owned)
            };
            if line("master_host:") != master_ip
                || line("master_link_status:").as_deref() != Some("up")
            {
                return Some(format!(
                    "server {i} is not yet a synced replica of server {m}"
                ));
            }
        }
        None
    }
}

/// A data server on `network`: a master, or a replica of the master at `master_ip`;
/// either with the password to give a master (so that an old master can follow a new
/// one after a failover).
async fn data_server(
    network: &Arc<DockerNetwork>,
    password: &str,
    master_ip: Option<&str>,
) -> Result<ServerHandle, HarnessError> {
    // As the backend's docs advise: a master that has lost its replicas (one a
    // failover left behind, once it resumes) takes no writes.
    let mut args = vec![
        "--masterauth".to_owned(),
        password.to_owned(),
        "--min-replicas-to-write".to_owned(),
        "1".to_owned(),
        "--min-replicas-max-lag".to_owned(),
        MIN_REPLICAS_MAX_LAG.to_owned(),
    ];
    if let Some(ip) = master_ip {
        args.extend(["--replicaof".to_owned(), ip.to_owned(), "6379".to_owned()]);
    }
    let official = crate::redis::official_command(
        password,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    ServerHandle::start_networked(
        &Redis,
        network.clone(),
        Some(password.to_owned()),
        move |request, source| match source {
            ImageSource::Official => request.with_cmd(official),
            ImageSource::Local => request.with_cmd(args),
        },
    )
    .await
}

/// The value after `name` in a reply that `redis-cli` printed one item a line.
fn field(said: &str, name: &str) -> Option<String> {
    let mut lines = said.lines().map(str::trim);
    lines.find(|l| *l == name)?;
    lines.next().map(str::to_owned)
}

/// `redis-cli` with the password in its environment.
fn cli(args: &[&str], password: &str) -> ExecCommand {
    let mut cmd = vec!["redis-cli", "--no-auth-warning"];
    cmd.extend_from_slice(args);
    ExecCommand::new(cmd).with_env_vars([("REDISCLI_AUTH", password)])
}

/// The data servers and the Sentinels as one server for the fault cases: paused and
/// killed together; started again the Sentinels last, after every data server, one
/// at a time in the order of their addresses (so that each takes back its own: Docker
/// gives a container that starts again the lowest free address on its network), and
/// back once the set has settled. Restarted, the Sentinels stop first, so that none
/// sees the master gone and fails it over while the data servers restart.
#[derive(Debug)]
struct SentinelSet {
    set: Arc<RedisSentinel>,
    every: Every,
}

impl SentinelSet {
    fn new(set: Arc<RedisSentinel>) -> Self {
        let every = Every::new(set.servers.iter().chain(&set.sentinels).cloned());
        SentinelSet { set, every }
    }

    /// Starts each of `members` in turn, lowest address first.
    async fn start_in_order(members: &[Arc<ServerHandle>]) -> Result<(), BoxError> {
        let mut members = members.to_vec();
        members.sort_by_key(|m| m.direct_ip());
        for member in members {
            member.start().await?;
            member.check_address().await?;
        }
        Ok(())
    }
}

#[async_trait]
impl ServerControl for SentinelSet {
    async fn pause(&self) -> Result<(), BoxError> {
        self.every.pause().await
    }
    async fn unpause(&self) -> Result<(), BoxError> {
        self.every.unpause().await
    }
    async fn restart(&self) -> Result<(), BoxError> {
        Every::new(self.set.sentinels.iter().cloned())
            .stop()
            .await?;
        Every::new(self.set.servers.iter().cloned()).stop().await?;
        self.start().await
    }
    async fn kill(&self) -> Result<(), BoxError> {
        self.every.kill().await
    }
    async fn start(&self) -> Result<(), BoxError> {
        Self::start_in_order(&self.set.servers).await?;
        Self::start_in_order(&self.set.sentinels).await?;
        Ok(self.set.wait_settled().await?)
    }
    async fn stop(&self) -> Result<(), BoxError> {
        self.every.stop().await
    }
    fn can_kill_connections(&self) -> bool {
        self.every.can_kill_connections()
    }
    async fn kill_connections(&self) -> Result<(), BoxError> {
        // The clients' connections are to the data servers; a Sentinel's are its
        // peers' and the clients' lookups.
        Every::new(self.set.servers.iter().cloned())
            .kill_connections()
            .await
    }
    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        Every::new(self.set.servers.iter().cloned())
            .kill_connections_counted()
            .await
    }
    async fn ready(&self) -> Result<(), BoxError> {
        self.every.ready().await?;
        Ok(self.set.wait_settled().await?)
    }
}

impl RedisSentinel {
    /// The conformance target for a backend on the set: the backend `connect` makes
    /// from [`url`](Self::url), more clients of it, wrong credentials, and the whole
    /// set as one server. No links or round-trip meter: a client reaches the master at
    /// the address the Sentinels name, around any proxy. The target owns the set.
    pub async fn target<B, F, Fut>(self, connect: F) -> Result<Target, BoxError>
    where
        B: LockBackend + 'static,
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = distlock_core::Result<B>> + Send + 'static,
    {
        let url = self.url();
        let backend = connect(url.clone()).await?;
        let connect = Arc::new(connect);
        let connector = |url: String| crate::targets::connector(connect.clone(), url);
        let password = self
            .servers
            .first()
            .map_or(String::new(), |m| m.password().to_owned());
        let secret = format!("wrong{:016x}", rand::random::<u64>());
        let wrong = url.replacen(&format!(":{password}@"), &format!(":{secret}@"), 1);
        let control = SentinelSet::new(Arc::new(self));
        Ok(Target::new(Arc::new(backend))
            .with_clients(connector(url))
            .with_wrong_credentials(secret, connector(wrong))
            .with_control(Arc::new(control)))
    }
}

#[async_trait]
impl crate::members::Roles for RedisSentinel {
    fn members(&self) -> Vec<Arc<dyn ServerControl>> {
        crate::members::controls(&self.servers)
    }

    /// The data server the Sentinels agree on and that says it is a master.
    async fn leader(&self) -> Option<usize> {
        let master = self.master().await?;
        self.serves_as_master(master).await.then_some(master)
    }

    fn leader_word(&self) -> &'static str {
        "master"
    }

    async fn isolate(&self, index: usize) -> Result<(), BoxError> {
        crate::members::isolation(&self.servers, &self.sentinels, index, true).await
    }

    async fn rejoin(&self, index: usize) -> Result<(), BoxError> {
        crate::members::isolation(&self.servers, &self.sentinels, index, false).await
    }
}
