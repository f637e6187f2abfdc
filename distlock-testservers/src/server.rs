//! [`Server`]: one kind of server the harness starts, and what differs between
//! them; [`ImageSource`]: which image it runs; [`ConnectionKill`]: how each closes
//! its clients' connections.

use std::fmt;

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage};

use crate::tls::TlsMaterial;

/// Which image a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// The official image of the server's project.
    Official,
    /// The image built from Debian's packages by `scripts/build-images.sh`.
    Local,
}

/// One kind of server the harness can start: everything that differs between them.
pub trait Server: Send + Sync + fmt::Debug + 'static {
    /// A short lowercase name; also the server's line in `images.txt`.
    fn name(&self) -> &'static str;

    /// The name the backend that serves this server gives itself
    /// (`LockBackend::name`): the server's own name unless another backend serves it
    /// (MariaDB is served by the MySQL backend).
    fn backend_name(&self) -> &'static str {
        self.name()
    }

    /// The port the server listens on inside its container.
    fn port(&self) -> u16;

    /// The log line that says the server has started.
    fn started_line(&self) -> WaitFor;

    /// Adds the server's command line or environment to a container request, for the
    /// image `source`, with `password` as the server's password.
    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage>;

    /// A URL for distlock's backend, credentials included.
    fn url(&self, host_port: u16, password: &str) -> String;

    /// Whether the server runs from the local image only (it has no official image;
    /// `images.txt` then says `local` for it).
    fn local_only(&self) -> bool {
        false
    }

    /// The line of `images.txt` whose official image runs the server: its own, unless
    /// it is another server's program in another mode (a Redis Sentinel runs Redis's
    /// image).
    fn image_entry(&self) -> &'static str {
        self.name()
    }

    /// The program its container starts: the local image's entrypoint for the server
    /// (`/usr/local/bin/distlock-<name>`), and the official image's own (`None`).
    fn entrypoint(&self, source: ImageSource) -> Option<String> {
        match source {
            ImageSource::Local => Some(format!("/usr/local/bin/distlock-{}", self.name())),
            ImageSource::Official => None,
        }
    }

    /// Whether the server checks a password (so that a wrong one can be tried).
    fn has_password(&self) -> bool {
        true
    }

    /// The URL for the instance whose round trips are counted: [`url`](Self::url),
    /// with whatever makes a warmed-up backend reuse its warm connection.
    fn metered_url(&self, host_port: u16, password: &str) -> String {
        self.url(host_port, password)
    }

    /// A command of the server's own client, run inside the container, that exits 0
    /// once the server serves requests. Secrets go in its environment, never its
    /// arguments.
    fn ready_check(&self, password: &str) -> ExecCommand;

    /// How to close every client connection while the server stays up.
    fn connection_kill(&self, password: &str) -> ConnectionKill;

    /// The URL of the TLS server, trusting the CA in `ca_file` (with `tls`'s client
    /// certificate where the server asks for one).
    fn tls_url(
        &self,
        _host_port: u16,
        _password: &str,
        _tls: &TlsMaterial,
        _ca_file: &std::path::Path,
    ) -> Option<String> {
        None
    }

    /// [`ready_check`](Self::ready_check) over TLS; `None` where the harness has no TLS
    /// set-up for the server. (The local image serves TLS only wherever it finds
    /// `ca.pem`, `server.pem`, `server.key`, `client.pem` and `client.key` under
    /// `/tls`, which [`ServerHandle::start_tls`](crate::ServerHandle::start_tls) puts there.)
    fn tls_ready_check(&self, _password: &str) -> Option<ExecCommand> {
        None
    }

    /// The environment variable that points the tests at a running server instead.
    fn url_variable(&self) -> String {
        format!("DISTLOCK_{}_URL", self.name().to_uppercase())
    }
}

/// How a server's client connections are closed.
#[derive(Debug)]
pub enum ConnectionKill {
    /// A command of the server's own, run inside the container, that prints the
    /// number of connections it closed (and nothing else) on standard output.
    Exec(ExecCommand),
    /// The server has none: this machine aborts its connections to the server's port
    /// (`ss -K`), where the kernel and the process's rights allow it.
    LocalSockets,
}
