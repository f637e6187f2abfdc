//! PostgreSQL, with password authentication; data survives a restart.

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::server::{ConnectionKill, ImageSource, Server};
use crate::tls::TlsMaterial;

/// PostgreSQL, user `postgres`, database `postgres`, with room for 300 connections
/// (PostgreSQL's default is 100).
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

/// The test server's `max_connections`, above PostgreSQL's default of 100: the
/// torture run's full mode has 16 clients of up to 11 connections each (a pool of 10
/// and a listener), all as the superuser, so with the default they could take every
/// slot, the superuser's reserved ones included, and the connection kill's own
/// `psql` was refused ("sorry, too many clients already", exit code 2).
const MAX_CONNECTIONS: u32 = 300;

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
        source: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage> {
        let limit = format!("max_connections={MAX_CONNECTIONS}");
        let request = request.with_env_var("POSTGRES_PASSWORD", password);
        match source {
            // The official image's command is the server's; the local image's
            // entrypoint hands its arguments to the server.
            ImageSource::Official => request.with_cmd(["postgres", "-c", limit.as_str()]),
            ImageSource::Local => request.with_cmd(["-c", limit.as_str()]),
        }
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
            // -tA: the count alone, so that the harness reads how many it closed.
            ExecCommand::new([
                "psql",
                "-tA",
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use distlock_conformance::ServerControl;
    use tokio::time::{sleep, Instant};

    use super::*;
    use crate::handle::ServerHandle;

    /// Runs `script` in the container with the password set; `Ok` when it exits 0.
    async fn sh(handle: &ServerHandle, script: &str) -> Result<(), distlock_core::BoxError> {
        handle
            .exec(
                ExecCommand::new(["sh", "-c", script])
                    .with_env_vars([("PGPASSWORD", handle.password())]),
            )
            .await
    }

    /// Polls `script` until it exits 0, for at most `within`.
    async fn until(handle: &ServerHandle, script: &str, within: Duration) {
        let give_up = Instant::now() + within;
        while let Err(e) = sh(handle, script).await {
            assert!(Instant::now() < give_up, "{script}: still failing: {e}");
            sleep(Duration::from_millis(250)).await;
        }
    }

    const SESSIONS: &str = "psql -h 127.0.0.1 -U postgres -tAc \
        \"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'\"";

    #[tokio::test]
    async fn connections_are_killed_with_more_superuser_sessions_open_than_the_default_limit() {
        let handle = ServerHandle::start(&Postgres).await.expect("started");
        sh(
            &handle,
            "for i in $(seq 150); do \
               psql -h 127.0.0.1 -U postgres -c 'SELECT pg_sleep(120)' >/dev/null 2>&1 & \
             done",
        )
        .await
        .expect("sessions started");
        until(
            &handle,
            &format!("[ \"$({SESSIONS})\" -ge 151 ]"),
            Duration::from_secs(60),
        )
        .await;
        handle
            .kill_connections()
            .await
            .expect("the kill gets a connection of its own and ends the others");
        until(
            &handle,
            &format!("[ \"$({SESSIONS})\" -le 1 ]"),
            Duration::from_secs(30),
        )
        .await;
    }
}
