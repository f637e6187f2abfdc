//! Real servers for the suite, the backends' tests and the benchmarks: Redis,
//! PostgreSQL and etcd in containers started by testcontainers, at pinned versions,
//! with a handle to pause, restart and kill them.
//!
//! # Images
//!
//! The official images (`redis:7.2.5`, `postgres:16.4`, `quay.io/coreos/etcd:v3.5.15`)
//! are used where they are present or can be pulled. Where no registry can be
//! reached, `scripts/build-images.sh` builds one local image from Debian's packages
//! (`distlock/servers:bookworm-3`: Redis 7.0, PostgreSQL 15, etcd 3.4) that serves
//! all three. `DISTLOCK_IMAGES` picks: `official`, `local`, or `auto` (the default:
//! the official image if present locally, else the local image if present, else the
//! official image, pulled).
//!
//! # Servers already running
//!
//! `DISTLOCK_REDIS_URL`, `DISTLOCK_POSTGRES_URL` and `DISTLOCK_ETCD_URL` point the
//! tests at servers that are already running instead (see [`external_url`]); the
//! fault cases then have no control over them and are reported as not run.
//!
//! Clients reach the containers through a port mapped on 127.0.0.1 that stays the same
//! across restarts.
//!
//! # Killing connections
//!
//! Redis closes its clients' connections on `CLIENT KILL`, PostgreSQL on
//! `pg_terminate_backend`. etcd has no such command, so the handle aborts this
//! machine's connections to the etcd port itself, with `ss -K` (socket destroy: it needs
//! `CAP_NET_ADMIN` and a kernel that supports it). Whether that works is tried once,
//! on a connection of the harness's own; where it does not, the case that needs it is
//! reported as not run.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::BoxError;
use testcontainers::bollard::models::PortBinding;
use testcontainers::core::{ContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

use crate::target::ServerControl;

/// The local image that `scripts/build-images.sh` builds.
pub const LOCAL_IMAGE: (&str, &str) = ("distlock/servers", "bookworm-3");

/// How long a server may take to become ready after a start or restart.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// A server the harness can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// Redis, without persistence: a restart loses its data.
    Redis,
    /// PostgreSQL: data survives a restart.
    Postgres,
    /// etcd, one member: data survives a restart.
    Etcd,
}

impl ServerKind {
    /// Every kind, in a fixed order.
    pub const ALL: [ServerKind; 3] = [ServerKind::Redis, ServerKind::Postgres, ServerKind::Etcd];

    /// A short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Postgres => "postgres",
            ServerKind::Etcd => "etcd",
        }
    }

    /// The port the server listens on inside its container.
    pub fn container_port(self) -> u16 {
        match self {
            ServerKind::Redis => 6379,
            ServerKind::Postgres => 5432,
            ServerKind::Etcd => 2379,
        }
    }

    /// The official image and its pinned tag.
    pub fn official_image(self) -> (&'static str, &'static str) {
        match self {
            ServerKind::Redis => ("redis", "7.2.5"),
            ServerKind::Postgres => ("postgres", "16.4"),
            ServerKind::Etcd => ("quay.io/coreos/etcd", "v3.5.15"),
        }
    }

    /// The environment variable that points the tests at a running server instead.
    pub fn url_variable(self) -> &'static str {
        match self {
            ServerKind::Redis => "DISTLOCK_REDIS_URL",
            ServerKind::Postgres => "DISTLOCK_POSTGRES_URL",
            ServerKind::Etcd => "DISTLOCK_ETCD_URL",
        }
    }

    /// The log line that says the server is ready, and whether it goes to stderr.
    fn ready_line(self) -> (&'static str, bool) {
        match self {
            ServerKind::Redis => ("Ready to accept connections", false),
            ServerKind::Postgres => ("database system is ready to accept connections", true),
            ServerKind::Etcd => ("ready to serve client requests", true),
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The URL of an already running server of `kind`, from its environment variable.
pub fn external_url(kind: ServerKind) -> Option<String> {
    std::env::var(kind.url_variable())
        .ok()
        .filter(|v| !v.is_empty())
}

/// Which image a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// The official image of the server's project.
    Official,
    /// The image built from Debian's packages by `scripts/build-images.sh`.
    Local,
}

/// Why a server could not be started or controlled.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// `DISTLOCK_IMAGES` holds something other than official, local or auto.
    #[error("DISTLOCK_IMAGES must be official, local or auto, not {0:?}")]
    BadImageChoice(String),
    /// The container did not start.
    #[error(
        "cannot start a {kind} container from {image}: {source}. Is the Docker engine running? \
         Without a registry, build the local image first: scripts/build-images.sh"
    )]
    Start {
        /// The server.
        kind: ServerKind,
        /// The image tried.
        image: String,
        /// What Docker said.
        #[source]
        source: BoxError,
    },
    /// The server started but never answered its protocol.
    #[error("the {kind} server did not become ready within {within:?}: {last}")]
    NotReady {
        /// The server.
        kind: ServerKind,
        /// How long the harness waited.
        within: Duration,
        /// The last probe's error.
        last: String,
    },
    /// No free port could be found for the mapping.
    #[error("no free local port: {0}")]
    NoPort(#[source] std::io::Error),
}

/// A server running in a container, with control over it.
pub struct ServerHandle {
    kind: ServerKind,
    source: ImageSource,
    container: ContainerAsync<GenericImage>,
    host_port: u16,
    password: String,
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("kind", &self.kind)
            .field("source", &self.source)
            .field("container", &self.container.id())
            .field("host_port", &self.host_port)
            .field("password", &"<redacted>")
            .finish()
    }
}

async fn image_present(name: &str, tag: &str) -> bool {
    tokio::process::Command::new("docker")
        .args(["image", "inspect", &format!("{name}:{tag}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// The image source that `DISTLOCK_IMAGES` asks for, resolved against the images
/// present on this machine.
pub async fn image_source(kind: ServerKind) -> Result<ImageSource, HarnessError> {
    let choice = std::env::var("DISTLOCK_IMAGES").unwrap_or_else(|_| "auto".into());
    match choice.as_str() {
        "official" => Ok(ImageSource::Official),
        "local" => Ok(ImageSource::Local),
        "auto" | "" => {
            let (name, tag) = kind.official_image();
            if image_present(name, tag).await {
                Ok(ImageSource::Official)
            } else if image_present(LOCAL_IMAGE.0, LOCAL_IMAGE.1).await {
                Ok(ImageSource::Local)
            } else {
                Ok(ImageSource::Official)
            }
        }
        other => Err(HarnessError::BadImageChoice(other.to_owned())),
    }
}

fn free_port() -> Result<u16, HarnessError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(HarnessError::NoPort)?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(HarnessError::NoPort)
}

impl ServerHandle {
    /// Starts a server of `kind` and waits until it answers its protocol.
    pub async fn start(kind: ServerKind) -> Result<Self, HarnessError> {
        Self::start_member(kind, None).await
    }

    /// Starts a server, as a member of `cluster` when given (etcd only).
    async fn start_member(
        kind: ServerKind,
        cluster: Option<&Membership>,
    ) -> Result<Self, HarnessError> {
        let source = image_source(kind).await?;
        let password = format!("pw{:016x}", rand::random::<u64>());
        let host_port = free_port()?;
        let port = ContainerPort::Tcp(kind.container_port());
        let (line, on_stderr) = kind.ready_line();
        let wait = if on_stderr {
            WaitFor::message_on_stderr(line)
        } else {
            WaitFor::message_on_stdout(line)
        };
        let (image, image_name) = match source {
            ImageSource::Official => {
                let (name, tag) = kind.official_image();
                (GenericImage::new(name, tag), format!("{name}:{tag}"))
            }
            ImageSource::Local => {
                let image = GenericImage::new(LOCAL_IMAGE.0, LOCAL_IMAGE.1)
                    .with_entrypoint(&format!("/usr/local/bin/distlock-{}", kind.name()));
                (image, format!("{}:{}", LOCAL_IMAGE.0, LOCAL_IMAGE.1))
            }
        };
        let image = image.with_exposed_port(port).with_wait_for(wait);
        let request = image
            .with_mapped_port(host_port, port)
            .with_host_config_modifier(move |config| {
                // Reachable from this machine only.
                if let Some(bindings) = config.port_bindings.as_mut() {
                    for binding in bindings.values_mut().flatten().flatten() {
                        *binding = PortBinding {
                            host_ip: Some("127.0.0.1".into()),
                            host_port: binding.host_port.clone(),
                        };
                    }
                }
            })
            .with_startup_timeout(READY_WITHIN);
        let request = match (kind, source) {
            (ServerKind::Redis, ImageSource::Official) => request.with_cmd([
                "redis-server",
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
                "--requirepass",
                &password,
            ]),
            (ServerKind::Redis, ImageSource::Local) => {
                request.with_env_var("REDIS_PASSWORD", &password)
            }
            (ServerKind::Postgres, _) => request.with_env_var("POSTGRES_PASSWORD", &password),
            (ServerKind::Etcd, ImageSource::Official) => {
                let advertise = cluster.map_or("http://127.0.0.1:2379".to_owned(), |m| {
                    format!("http://{}:2379", m.name)
                });
                let mut cmd: Vec<String> = [
                    "etcd",
                    "--data-dir",
                    "/etcd-data",
                    "--listen-client-urls",
                    "http://0.0.0.0:2379",
                    "--advertise-client-urls",
                ]
                .map(String::from)
                .to_vec();
                cmd.push(advertise);
                if let Some(m) = cluster {
                    cmd.extend(["--name".to_owned(), m.name.clone()]);
                    cmd.extend(m.peer_args());
                }
                request.with_cmd(cmd)
            }
            (ServerKind::Etcd, ImageSource::Local) => match cluster {
                None => request,
                Some(m) => request
                    .with_env_var("DISTLOCK_ETCD_NAME", &m.name)
                    .with_env_var("DISTLOCK_ETCD_ADVERTISE", format!("http://{}:2379", m.name))
                    .with_cmd(m.peer_args()),
            },
        };
        let request = match cluster {
            Some(m) => request
                .with_network(&m.network)
                .with_container_name(&m.name),
            None => request,
        };
        let container = request.start().await.map_err(|e| HarnessError::Start {
            kind,
            image: image_name,
            source: Box::new(e),
        })?;
        let handle = ServerHandle {
            kind,
            source,
            container,
            host_port,
            password,
        };
        handle.wait_ready(READY_WITHIN).await?;
        Ok(handle)
    }

    /// The server's kind.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// Which image it runs.
    pub fn image_source(&self) -> ImageSource {
        self.source
    }

    /// The port on 127.0.0.1 that reaches it; the same across restarts.
    pub fn host_port(&self) -> u16 {
        self.host_port
    }

    /// The server's password (Redis `requirepass`, PostgreSQL user `postgres`).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A URL for clients, credentials included: `redis://:PW@127.0.0.1:PORT`,
    /// `postgres://postgres:PW@127.0.0.1:PORT/postgres`, `etcd://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        let (pw, port) = (&self.password, self.host_port);
        match self.kind {
            ServerKind::Redis => format!("redis://:{pw}@127.0.0.1:{port}"),
            ServerKind::Postgres => format!("postgres://postgres:{pw}@127.0.0.1:{port}/postgres"),
            ServerKind::Etcd => format!("etcd://127.0.0.1:{port}"),
        }
    }

    /// One exchange in the server's own protocol: Redis `AUTH` and `PING`, a
    /// PostgreSQL startup message answered by an authentication request, etcd's
    /// `/health`. `Ok` when the server answered as a ready server does.
    pub async fn probe(&self) -> Result<(), BoxError> {
        timeout(
            Duration::from_secs(3),
            probe(self.kind, self.host_port, &self.password),
        )
        .await
        .map_err(|_| -> BoxError {
            format!("the {} server did not answer within 3 s", self.kind).into()
        })?
    }

    /// Probes until the server is ready, for at most `within`.
    pub async fn wait_ready(&self, within: Duration) -> Result<(), HarnessError> {
        let give_up = Instant::now() + within;
        loop {
            match self.probe().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= give_up => {
                    return Err(HarnessError::NotReady {
                        kind: self.kind,
                        within,
                        last: e.to_string(),
                    })
                }
                Err(_) => sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Runs a command inside the container (`docker exec`).
    async fn exec(&self, cmd: &[&str], env: &[(&str, &str)]) -> Result<(), BoxError> {
        let mut docker = tokio::process::Command::new("docker");
        docker.arg("exec");
        for (k, v) in env {
            // Passed by name, so that the value stays out of the process list.
            docker.arg("-e").arg(k).env(k, v);
        }
        let out = docker.arg(self.container.id()).args(cmd).output().await?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} failed: {}",
                cmd[0],
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into())
        }
    }
}

#[async_trait]
impl ServerControl for ServerHandle {
    async fn pause(&self) -> Result<(), BoxError> {
        Ok(self.container.pause().await?)
    }

    async fn unpause(&self) -> Result<(), BoxError> {
        Ok(self.container.unpause().await?)
    }

    async fn restart(&self) -> Result<(), BoxError> {
        self.container.stop_with_timeout(Some(10)).await?;
        self.container.start().await?;
        Ok(self.wait_ready(READY_WITHIN).await?)
    }

    async fn kill(&self) -> Result<(), BoxError> {
        Ok(self.container.stop_with_timeout(Some(0)).await?)
    }

    async fn start(&self) -> Result<(), BoxError> {
        self.container.start().await?;
        Ok(self.wait_ready(READY_WITHIN).await?)
    }

    fn can_kill_connections(&self) -> bool {
        match self.kind {
            ServerKind::Redis | ServerKind::Postgres => true,
            ServerKind::Etcd => sockets_can_be_killed(),
        }
    }

    async fn kill_connections(&self) -> Result<(), BoxError> {
        match self.kind {
            ServerKind::Redis => {
                let cmd = [
                    "redis-cli",
                    "--no-auth-warning",
                    "CLIENT",
                    "KILL",
                    "TYPE",
                    "normal",
                ];
                self.exec(&cmd, &[("REDISCLI_AUTH", &self.password)]).await
            }
            ServerKind::Postgres => {
                let sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                           WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
                let cmd = [
                    "psql",
                    "-h",
                    "127.0.0.1",
                    "-U",
                    "postgres",
                    "-d",
                    "postgres",
                    "-c",
                    sql,
                ];
                self.exec(&cmd, &[("PGPASSWORD", &self.password)]).await
            }
            // etcd has no command to close its clients' connections: they are cut on
            // this machine instead, as a network fault would.
            ServerKind::Etcd => kill_local_connections(self.host_port).await,
        }
    }
}

/// `ss` arguments that select this machine's TCP connections to 127.0.0.1:`port`.
fn to_port(port: u16) -> [String; 6] {
    [
        "-t".into(),
        "dst".into(),
        "127.0.0.1".into(),
        "dport".into(),
        "=".into(),
        format!(":{port}"),
    ]
}

/// The local ends (`address:port`) of this machine's established TCP connections to
/// 127.0.0.1:`port`.
async fn local_connections(port: u16) -> Result<std::collections::BTreeSet<String>, BoxError> {
    let listed = tokio::process::Command::new("ss")
        .args(["-H", "state", "established"])
        .args(to_port(port))
        .output()
        .await?;
    if !listed.status.success() {
        return Err(format!(
            "ss could not list the connections to port {port}: {}",
            String::from_utf8_lossy(&listed.stderr).trim()
        )
        .into());
    }
    // With a state filter the columns are: Recv-Q, Send-Q, local end, peer end.
    Ok(String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2).map(str::to_owned))
        .collect())
}

/// Aborts every TCP connection from this machine to 127.0.0.1:`port` with `ss -K`
/// (socket destroy: the kernel must support it and the process needs
/// `CAP_NET_ADMIN`); their owners' next read or write fails. An error when any of the
/// connections open before is still open after; clients that connect again at once
/// make new connections, which are not counted.
async fn kill_local_connections(port: u16) -> Result<(), BoxError> {
    let before = local_connections(port).await?;
    let killed = tokio::process::Command::new("ss")
        .arg("-K")
        .args(to_port(port))
        .output()
        .await?;
    let after = local_connections(port).await?;
    let left = before.intersection(&after).count();
    if left > 0 {
        return Err(format!(
            "ss -K left {left} connection(s) to port {port} open: {}",
            String::from_utf8_lossy(&killed.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// Whether [`kill_local_connections`] works on this machine: tried once, on a
/// connection of its own.
fn sockets_can_be_killed() -> bool {
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WORKS.get_or_init(|| {
        let attempt = || -> std::io::Result<bool> {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
            let port = listener.local_addr()?.port();
            let mut client = std::net::TcpStream::connect(("127.0.0.1", port))?;
            let (_server, _) = listener.accept()?;
            std::process::Command::new("ss")
                .arg("-K")
                .args(to_port(port))
                .output()?;
            // A destroyed socket fails at once; a live one would wait for data.
            client.set_read_timeout(Some(Duration::from_millis(200)))?;
            let mut buf = [0u8; 1];
            Ok(match std::io::Read::read(&mut client, &mut buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            })
        };
        attempt().unwrap_or(false)
    })
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
}

/// An etcd cluster of several members in containers, on a Docker network the harness
/// creates for it (the members reach each other by name; clients reach each member on
/// its own 127.0.0.1 port). Each member is a [`ServerHandle`], so one can be stopped,
/// paused or killed on its own.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<ServerHandle>,
}

impl EtcdCluster {
    /// Starts `size` members at once (a lone member never becomes ready: it waits
    /// for a quorum) and waits until each answers.
    pub async fn start(size: usize) -> Result<Self, HarnessError> {
        let network = format!("distlock-etcd-{:08x}", rand::random::<u32>());
        let all: Vec<String> = (1..=size).map(|i| format!("{network}-m{i}")).collect();
        let memberships: Vec<Membership> = all
            .iter()
            .map(|name| Membership {
                network: network.clone(),
                name: name.clone(),
                all: all.clone(),
            })
            .collect();
        let started = futures_util::future::join_all(
            memberships
                .iter()
                .map(|m| ServerHandle::start_member(ServerKind::Etcd, Some(m))),
        )
        .await;
        let members = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(EtcdCluster { members })
    }

    /// The members, in order.
    pub fn members(&self) -> &[ServerHandle] {
        &self.members
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,...`: every member.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.host_port()))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }
}

async fn probe(kind: ServerKind, port: u16, password: &str) -> Result<(), BoxError> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await?;
    let mut buf = vec![0u8; 512];
    match kind {
        ServerKind::Redis => {
            let auth = format!(
                "*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n*1\r\n$4\r\nPING\r\n",
                password.len()
            );
            conn.write_all(auth.as_bytes()).await?;
            let mut got = String::new();
            while !got.contains("PONG") {
                let n = conn.read(&mut buf).await?;
                if n == 0 {
                    return Err(format!("redis closed the connection after {got:?}").into());
                }
                got.push_str(&String::from_utf8_lossy(&buf[..n]));
                if got.starts_with('-') {
                    return Err(format!("redis answered {}", got.trim()).into());
                }
            }
            Ok(())
        }
        ServerKind::Postgres => {
            let params = b"user\0postgres\0database\0postgres\0\0";
            let len = u32::try_from(8 + params.len())?;
            let mut msg = Vec::with_capacity(len as usize);
            msg.extend_from_slice(&len.to_be_bytes());
            msg.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
            msg.extend_from_slice(params);
            conn.write_all(&msg).await?;
            let n = conn.read(&mut buf).await?;
            match buf.get(..n).and_then(|b| b.first()) {
                Some(b'R') => Ok(()),
                Some(b'E') => {
                    Err(format!("postgres refused: {}", String::from_utf8_lossy(&buf[5..n])).into())
                }
                _ => Err("postgres gave no answer".into()),
            }
        }
        ServerKind::Etcd => {
            conn.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .await?;
            let mut got = Vec::new();
            conn.read_to_end(&mut got).await?;
            let got = String::from_utf8_lossy(&got);
            if got.starts_with("HTTP/1.1 200") && got.contains("\"health\":\"true\"") {
                Ok(())
            } else {
                Err(format!(
                    "etcd /health answered {:?}",
                    got.lines().next().unwrap_or("")
                )
                .into())
            }
        }
    }
}
