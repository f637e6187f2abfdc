//! PostgreSQL, with password authentication; data survives a restart.

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::{ConnectionKill, ImageSource, Server, TlsMaterial};

/// PostgreSQL, user `postgres`, database `postgres`.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

impl Server for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn port(&self) -> u16 {
        5432
    }

    fn started_line(&self) -> WaitFor {
        WaitFor::message_on_stderr("database system is ready to accept connections")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        _: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage> {
        request.with_env_var("POSTGRES_PASSWORD", password)
    }

    fn url(&self, host_port: u16, password: &str) -> String {
        format!("postgres://postgres:{password}@127.0.0.1:{host_port}/postgres")
    }

    fn metered_url(&self, host_port: u16, password: &str) -> String {
        // One pooled connection, so that the warm-up prepares every statement on the
        // connection the counted operations use.
        format!("{}?pool_size=1", self.url(host_port, password))
    }

    fn ready_check(&self, _: &str) -> ExecCommand {
        // Over TCP, so that the official image's initialisation server (on its Unix
        // socket only) does not count as ready.
        ExecCommand::new(["pg_isready", "-q", "-h", "127.0.0.1", "-U", "postgres"])
    }

    fn tls_url(
        &self,
        host_port: u16,
        password: &str,
        _: &TlsMaterial,
        ca_file: &std::path::Path,
    ) -> Option<String> {
        Some(format!(
            "{}?sslmode=verify-full&sslrootcert={}",
            self.url(host_port, password),
            ca_file.display()
        ))
    }

    fn tls_ready_check(&self, password: &str) -> Option<ExecCommand> {
        // pg_isready asks for no encryption of its own; it checks the server answers.
        Some(self.ready_check(password))
    }

    fn connection_kill(&self, password: &str) -> ConnectionKill {
        let sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                   WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()";
        ConnectionKill::Exec(
            ExecCommand::new([
                "psql",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .with_env_vars([("PGPASSWORD", password)]),
        )
    }
}
