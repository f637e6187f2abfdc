//! MariaDB, with a root password over TCP and a database `distlock`; data survives a
//! restart.

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::server::{ConnectionKill, ImageSource, Server};

/// MariaDB (InnoDB), user `root`, database `distlock`, room for 500 connections. The
/// local image runs Debian's MariaDB 10.11, the official image `mariadb:10.11`.
#[derive(Debug, Clone, Copy)]
pub struct MariaDb;

/// The database the tests use; both images create it at first start.
const DATABASE: &str = "distlock";

impl Server for MariaDb {
    fn name(&self) -> &'static str {
        "mariadb"
    }

    fn backend_name(&self) -> &'static str {
        "mysql"
    }

    fn port(&self) -> u16 {
        3306
    }

    fn started_line(&self) -> WaitFor {
        WaitFor::message_on_stderr("ready for connections")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage> {
        let request = request
            .with_env_var("MARIADB_ROOT_PASSWORD", password)
            .with_env_var("MARIADB_DATABASE", DATABASE);
        match source {
            // The official image's entrypoint hands these to the server as options.
            ImageSource::Official => request.with_cmd(["--max-connections=500"]),
            // The local image's entrypoint sets them itself.
            ImageSource::Local => request,
        }
    }

    fn url(&self, host_port: u16, password: &str) -> String {
        format!("mariadb://root:{password}@127.0.0.1:{host_port}/{DATABASE}")
    }

    fn metered_url(&self, host_port: u16, password: &str) -> String {
        // One pooled connection, so that the warm-up prepares every statement on the
        // connection the counted operations use.
        format!("{}?pool_size=1", self.url(host_port, password))
    }

    fn ready_check(&self, password: &str) -> ExecCommand {
        // Over TCP, so that the official image's initialisation server (on its socket
        // only) does not count as ready. The password goes in the environment.
        ExecCommand::new([
            "mariadb-admin",
            "ping",
            "--protocol=tcp",
            "-h",
            "127.0.0.1",
            "-u",
            "root",
        ])
        .with_env_vars([("MYSQL_PWD", password)])
    }

    fn tls_url(
        &self,
        host_port: u16,
        password: &str,
        _: &crate::tls::TlsMaterial,
        ca_file: &std::path::Path,
    ) -> Option<String> {
        Some(format!(
            "{}?ca_file={}",
            self.url(host_port, password),
            ca_file.display()
        ))
    }

    fn tls_ready_check(&self, password: &str) -> Option<ExecCommand> {
        // The server takes TLS connections only (require_secure_transport); the check
        // asks for TLS without checking the certificate: it checks the server answers.
        Some(
            ExecCommand::new([
                "mariadb-admin",
                "ping",
                "--protocol=tcp",
                "--ssl",
                "-h",
                "127.0.0.1",
                "-u",
                "root",
            ])
            .with_env_vars([("MYSQL_PWD", password)]),
        )
    }

    fn connection_kill(&self, password: &str) -> ConnectionKill {
        // Every client connection but the kill's own (and the server's own threads),
        // then the count alone on standard output.
        let script = "q() { mariadb --protocol=tcp -h 127.0.0.1 -u root -N -B -e \"$1\"; }; \
             ids=$(q \"SELECT id FROM information_schema.processlist \
                     WHERE id <> CONNECTION_ID() AND command NOT IN ('Daemon', 'Binlog Dump') \
                       AND user NOT IN ('system user', 'event_scheduler')\") || exit 1; \
             n=0; for id in $ids; do q \"KILL CONNECTION $id\" 2>/dev/null && n=$((n+1)); done; \
             echo $n";
        ConnectionKill::Exec(
            ExecCommand::new(["sh", "-c", script]).with_env_vars([("MYSQL_PWD", password)]),
        )
    }
}
