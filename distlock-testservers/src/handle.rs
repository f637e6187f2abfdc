//! [`ServerHandle`]: one server in a container, and the control over it.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::ServerControl;
use distlock_core::BoxError;
use testcontainers::bollard::models::PortBinding;
use testcontainers::bollard::query_parameters::InspectContainerOptions;
use testcontainers::bollard::Docker;
use testcontainers::core::{CmdWaitFor, ContainerPort, ExecCommand};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, ContainerRequest, CopyTargetOptions, GenericImage, ImageExt};
use tokio::time::{sleep, timeout, Instant};

use crate::error::HarnessError;
use crate::image::{image_source, pinned};
use crate::network::DockerNetwork;
use crate::server::{ConnectionKill, ImageSource, Server};
use crate::sockets;
use crate::tls::{TlsMaterial, IN_CONTAINER};

/// How long a server may take to become ready after a start or restart.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// How long one readiness check may take.
const CHECK_WITHIN: Duration = Duration::from_secs(5);

/// A server running in a container, with control over it. Dropping it removes the
/// container.
pub struct ServerHandle {
    server: &'static dyn Server,
    source: ImageSource,
    container: ContainerAsync<GenericImage>,
    /// The network the harness made for it (shared with the other members of a
    /// cluster): after the container, so that it is dropped after it.
    network: Option<Arc<DockerNetwork>>,
    host_port: u16,
    password: String,
    /// Whether the server serves TLS only (started by [`ServerHandle::start_tls`]).
    tls: bool,
    /// Its address on the Docker network created for it by
    /// [`ServerHandle::start_direct`].
    direct: Option<IpAddr>,
}

impl fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerHandle")
            .field("server", &self.server.name())
            .field("source", &self.source)
            .field("container", &self.container.id())
            .field("host_port", &self.host_port)
            .field("password", &"<redacted>")
            .field("tls", &self.tls)
            .field("direct", &self.direct)
            .finish()
    }
}

/// Where the harness looks for host ports when the system's ephemeral range cannot
/// be read or leaves no room below it.
const HOST_PORTS_FROM: u16 = 20_000;

/// The ports this process has mapped a container to: never handed out twice, so two
/// servers started at once cannot be given the same one.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// This process's claims on the host ports it hands out, held for its life: one file
/// per port under the system's temporary directory, locked. Test binaries run at once
/// (`scripts/run-tests.sh` runs two), and a port another one claimed is never handed
/// out here, even while that one's container is stopped for a restart and the port
/// is free. The lock goes with the process, however it ends.
static CLAIMS: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());

/// Claims `port` for this process: `false` when another process holds it. Where no
/// claim file can be made, the port is this process's to check alone.
fn claim(port: u16) -> bool {
    let dir = std::env::temp_dir().join("distlock-testservers-ports");
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    let Ok(file) = file else {
        return true;
    };
    match file.try_lock() {
        Ok(()) => {
            CLAIMS.lock().unwrap_or_else(|e| e.into_inner()).push(file);
            true
        }
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(_)) => true,
    }
}

/// The first port of the kernel's ephemeral range, from which it picks the local ports
/// of outgoing connections and of listeners bound to port 0 (and Docker its own
/// mappings).
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

/// A host port for a container's mapping, free now and kept for the container's life
/// (restarts included, which is why it is chosen here and not by Docker).
///
/// It is taken below the kernel's ephemeral range where there is room, so that no
/// outgoing connection, listener on port 0 or Docker mapping of its own can take it
/// between this check and the container's start (or while the container is stopped
/// for a restart); never twice in one process, nor one another process claimed.
fn free_port() -> Result<u16, HarnessError> {
    let below = ephemeral_start().unwrap_or(32_768);
    let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    if below > HOST_PORTS_FROM + 1_000 {
        for _ in 0..200 {
            let port = rand::random_range(HOST_PORTS_FROM..below);
            if !handed.contains(&port)
                && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
                && claim(port)
            {
                handed.insert(port);
                return Ok(port);
            }
        }
    }
    // No room below the ephemeral range (or none free there): one the kernel picks.
    for _ in 0..200 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(HarnessError::NoPort)?;
        let port = listener.local_addr().map_err(HarnessError::NoPort)?.port();
        if !handed.contains(&port) && claim(port) {
            handed.insert(port);
            return Ok(port);
        }
    }
    Err(HarnessError::NoPort(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "every port tried is in use or already mapped by this process",
    )))
}

impl ServerHandle {
    /// Starts `server` and waits until its own client finds it ready.
    pub async fn start(server: &'static dyn Server) -> Result<Self, HarnessError> {
        Self::start_inner(server, None, None, |request, _| request).await
    }

    /// Starts `server` with `password` as its password (for a server that checks
    /// one, [`Server::has_password`]), written into its URL as it is: a test of how a
    /// password holding reserved characters is read.
    pub async fn start_with_password(
        server: &'static dyn Server,
        password: &str,
    ) -> Result<Self, HarnessError> {
        Self::start_inner(server, None, Some(password.to_owned()), |request, _| {
            request
        })
        .await
    }

    /// Starts `server` serving TLS only, with `tls`'s server certificate, from the
    /// local image (the TLS set-up is written for it); an error where the harness has
    /// no TLS set-up for the server. Its URLs come from [`tls_url`](Self::tls_url).
    pub async fn start_tls(
        server: &'static dyn Server,
        tls: &TlsMaterial,
    ) -> Result<Self, HarnessError> {
        Self::start_inner(server, Some(tls), None, |request, _| request).await
    }

    /// Starts `server` on a Docker network created for it alone (and removed with it),
    /// so that besides its port on 127.0.0.1 it can be reached at its own address on
    /// that network: through the kernel's bridge, without Docker's userland port
    /// proxy in the way. Benchmarks use [`direct_url`](Self::direct_url): its round
    /// trip is a local one, with no proxy process relaying each request.
    pub async fn start_direct(server: &'static dyn Server) -> Result<Self, HarnessError> {
        let network = DockerNetwork::create("distlock-direct").await?;
        Self::start_networked(server, network, None, |request, _| request).await
    }

    /// Starts `server` on `network` (removed once the last handle on it is
    /// dropped), with `password` where given (members of one
    /// cluster share theirs), and `adjust` applied to its container request last; its
    /// address there is [`direct_url`](Self::direct_url)'s.
    pub(crate) async fn start_networked(
        server: &'static dyn Server,
        network: Arc<DockerNetwork>,
        password: Option<String>,
        adjust: impl FnOnce(
            ContainerRequest<GenericImage>,
            ImageSource,
        ) -> ContainerRequest<GenericImage>,
    ) -> Result<Self, HarnessError> {
        let name = network.name().to_owned();
        let mut handle = Self::start_inner(server, None, password, move |request, source| {
            adjust(request.with_network(name), source)
        })
        .await?;
        handle.network = Some(network);
        let ip = handle
            .container
            .get_bridge_ip_address()
            .await
            .map_err(|e| HarnessError::Docker(Box::new(e)))?;
        handle.direct = Some(ip);
        Ok(handle)
    }

    /// The URL of a server started by [`start_tls`](Self::start_tls), trusting the CA
    /// in `ca_file` (and presenting `tls`'s client certificate where the server asks
    /// for one).
    pub fn tls_url(&self, tls: &TlsMaterial, ca_file: &std::path::Path) -> Option<String> {
        self.server
            .tls_url(self.host_port, &self.password, tls, ca_file)
    }

    async fn start_inner(
        server: &'static dyn Server,
        tls: Option<&TlsMaterial>,
        password: Option<String>,
        adjust: impl FnOnce(
            ContainerRequest<GenericImage>,
            ImageSource,
        ) -> ContainerRequest<GenericImage>,
    ) -> Result<Self, HarnessError> {
        let source = match tls {
            Some(_) => ImageSource::Local,
            None => image_source(server).await?,
        };
        let password = password.unwrap_or_else(|| format!("pw{:016x}", rand::random::<u64>()));
        let host_port = free_port()?;
        let port = ContainerPort::Tcp(server.port());
        let entry = match source {
            ImageSource::Official => server.image_entry(),
            ImageSource::Local => "local",
        };
        let (name, tag) = pinned(entry).ok_or(HarnessError::NoPin(server.name()))?;
        let mut image = GenericImage::new(name, tag);
        if let Some(entrypoint) = server.entrypoint(source) {
            image = image.with_entrypoint(&entrypoint);
        }
        let request = image
            .with_exposed_port(port)
            .with_wait_for(server.started_line())
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
        let mut request = server.configure(request, source, &password);
        if let Some(tls) = tls {
            server
                .tls_ready_check(&password)
                .ok_or(HarnessError::NoTls(server.name()))?;
            for (name, contents) in &tls.container_files {
                request = request.with_copy_to(
                    CopyTargetOptions::new(format!("{IN_CONTAINER}/{name}")).with_mode(0o644),
                    contents.clone().into_bytes(),
                );
            }
        }
        let request = adjust(request, source);
        let container = request.start().await.map_err(|e| HarnessError::Start {
            server: server.name(),
            image: format!("{name}:{tag}"),
            source: Box::new(e),
        })?;
        let handle = ServerHandle {
            server,
            source,
            container,
            network: None,
            host_port,
            password,
            tls: tls.is_some(),
            direct: None,
        };
        handle.wait_ready(READY_WITHIN).await?;
        Ok(handle)
    }

    /// The server.
    pub fn server(&self) -> &'static dyn Server {
        self.server
    }

    /// Which image it runs.
    pub fn image_source(&self) -> ImageSource {
        self.source
    }

    /// Its container's ID, as Docker names it (a benchmark reads the container's CPU
    /// time by it).
    pub fn container_id(&self) -> &str {
        self.container.id()
    }

    /// The port on 127.0.0.1 that reaches it; the same across restarts.
    pub fn host_port(&self) -> u16 {
        self.host_port
    }

    /// The server's password.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A URL for distlock's backend, credentials included.
    pub fn url(&self) -> String {
        self.server.url(self.host_port, &self.password)
    }

    /// `address:port` of a server started on a network of its own, as the other
    /// containers on that network reach it; `None` for any other server.
    pub fn direct_address(&self) -> Option<String> {
        Some(format!("{}:{}", self.direct?, self.server.port()))
    }

    /// The address on its network of a server started on a network of its own, as it
    /// was at first; `None` for any other server.
    pub(crate) fn direct_ip(&self) -> Option<IpAddr> {
        self.direct
    }

    /// The process ID of the container's first process, by which its namespaces are
    /// entered; `None` while the container is not running.
    pub(crate) async fn pid(&self) -> Result<Option<u32>, BoxError> {
        let docker = Docker::connect_with_local_defaults()?;
        let info = docker
            .inspect_container(self.container.id(), None::<InspectContainerOptions>)
            .await?;
        let state = info.state.unwrap_or_default();
        if state.running != Some(true) {
            return Ok(None);
        }
        Ok(state
            .pid
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|&pid| pid > 0))
    }

    /// Its address now on the network the harness made for it (which a restart may
    /// have changed); `None` for a server on no such network.
    pub(crate) async fn current_ip(&self) -> Result<Option<IpAddr>, BoxError> {
        if self.network.is_none() {
            return Ok(None);
        }
        Ok(Some(self.container.get_bridge_ip_address().await?))
    }

    /// For a server started on a network of its own, an error when it is no longer at
    /// the address it had there at first (Docker gives a container that starts again
    /// the lowest free address on its network, not necessarily its old one); `Ok` for
    /// any other server.
    pub(crate) async fn check_address(&self) -> Result<(), BoxError> {
        let Some(first) = self.direct else {
            return Ok(());
        };
        let now = self.container.get_bridge_ip_address().await?;
        if now != first {
            return Err(format!(
                "{} came back at {now} on its network, not at {first}",
                self.server.name()
            )
            .into());
        }
        Ok(())
    }

    /// For a server started by [`start_direct`](Self::start_direct), a URL for
    /// distlock's backend that reaches it at its address on its own network (valid
    /// until a restart, which may move it); `None` for any other server.
    pub fn direct_url(&self) -> Option<String> {
        let ip = self.direct?;
        let mut url = url::Url::parse(&self.url()).ok()?;
        url.set_ip_host(ip).ok()?;
        url.set_port(Some(self.server.port())).ok()?;
        Some(url.into())
    }

    /// Runs `command` inside the container and waits for it to exit: `Ok` when it
    /// exited 0, otherwise an error with its exit code.
    pub(crate) async fn exec(&self, command: ExecCommand) -> Result<(), BoxError> {
        self.container
            .exec(command.with_cmd_ready_condition(CmdWaitFor::exit_code(0)))
            .await?;
        Ok(())
    }

    /// Runs `command` inside the container; what it printed on standard output when
    /// it exited 0, otherwise an error with its exit code.
    pub(crate) async fn exec_output(&self, command: ExecCommand) -> Result<String, BoxError> {
        let mut run = self
            .container
            .exec(command.with_cmd_ready_condition(CmdWaitFor::exit_code(0)))
            .await?;
        let out = run.stdout_to_vec().await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Asks the server's own client, inside the container, whether the server serves
    /// requests. `Ok` when it does.
    pub async fn probe(&self) -> Result<(), BoxError> {
        let name = self.server.name();
        let check = match self.tls {
            true => self
                .server
                .tls_ready_check(&self.password)
                .ok_or("no TLS readiness check")?,
            false => self.server.ready_check(&self.password),
        };
        timeout(CHECK_WITHIN, self.exec(check))
            .await
            .map_err(|_| -> BoxError {
                format!("the {name} readiness check did not finish within {CHECK_WITHIN:?}").into()
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
                        server: self.server.name(),
                        within,
                        last: e.to_string(),
                    })
                }
                Err(_) => sleep(Duration::from_millis(100)).await,
            }
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

    async fn stop(&self) -> Result<(), BoxError> {
        Ok(self.container.stop_with_timeout(Some(10)).await?)
    }

    fn can_kill_connections(&self) -> bool {
        match self.server.connection_kill(&self.password) {
            ConnectionKill::Exec(_) => true,
            ConnectionKill::LocalSockets => sockets::can_be_killed(),
        }
    }

    async fn kill_connections(&self) -> Result<(), BoxError> {
        self.kill_connections_counted().await.map(drop)
    }

    async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
        match self.server.connection_kill(&self.password) {
            ConnectionKill::Exec(command) => {
                let said = self.exec_output(command).await?;
                let count = said.trim().parse().map_err(|_| -> BoxError {
                    format!(
                        "the {} connection kill printed {:?}, not the number it closed",
                        self.server.name(),
                        said.trim()
                    )
                    .into()
                })?;
                Ok(Some(count))
            }
            ConnectionKill::LocalSockets => {
                Ok(Some(sockets::kill_local_connections(self.host_port).await?))
            }
        }
    }

    async fn ready(&self) -> Result<(), BoxError> {
        Ok(self.wait_ready(READY_WITHIN).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports asked for at once (as the members of a cluster are started) are all
    /// different, free, and outside the range the kernel gives out on its own, where a
    /// connection or a port-0 listener could take one before Docker binds it (CI saw
    /// "port is already allocated" when two started servers met there).
    ///
    /// "Free" is checked against ports this test holds itself, every 32nd of the range:
    /// none may be handed out. (Binding each port again afterwards would race with
    /// the other processes on the machine, which may take one in between; CI saw it.)
    /// A picker that skipped its check would hand out one of the 400 or so held ports
    /// in 200 picks but about once in 500 runs.
    #[test]
    fn host_ports_are_distinct_free_and_out_of_the_kernel_s_way() {
        let below = ephemeral_start().unwrap_or(32_768);
        let held: Vec<std::net::TcpListener> = (HOST_PORTS_FROM..below)
            .step_by(32)
            .filter_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        let held_ports: std::collections::BTreeSet<u16> = held
            .iter()
            .filter_map(|listener| listener.local_addr().ok())
            .map(|addr| addr.port())
            .collect();
        assert!(held_ports.len() > 100, "held only {}", held_ports.len());
        let ports: Vec<u16> = (0..200).map(|_| free_port().expect("a port")).collect();
        drop(held);
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        if let Some(start) = ephemeral_start().filter(|&s| s > HOST_PORTS_FROM + 1_000) {
            assert!(ports.iter().all(|&p| p < start), "{ports:?} vs {start}");
        }
        let taken: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|port| held_ports.contains(port))
            .collect();
        assert!(taken.is_empty(), "ports in use were handed out: {taken:?}");
    }

    /// A port another process claimed is not this one's: the claim is a lock on a
    /// file another open of it (as another process makes) cannot take.
    #[test]
    fn a_port_claimed_elsewhere_is_not_claimed_here() {
        let port = 1; // never handed out: below any range the picker uses
        let path = std::env::temp_dir()
            .join("distlock-testservers-ports")
            .join(port.to_string());
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("the claims' directory");
        let elsewhere = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .expect("the claim file");
        elsewhere.try_lock().expect("claimed elsewhere");
        assert!(!claim(port), "a port held elsewhere was claimed");
        drop(elsewhere);
        assert!(claim(port), "a port held by no one was not claimed");
    }
}
