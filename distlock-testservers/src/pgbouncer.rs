//! PostgreSQL behind PgBouncer in transaction pooling mode, from the local image only
//! (PgBouncer has no official image): PostgreSQL on 5432 and PgBouncer on 6432 in one
//! container.

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage};

use crate::postgres::Postgres;
use crate::server::{ConnectionKill, ImageSource, Server};

/// PgBouncer 1.18 (Debian's) in transaction pooling mode, in front of PostgreSQL;
/// user `postgres`, database `postgres`. Its URL asks the backend for its PgBouncer
/// mode (`pgbouncer=true`).
#[derive(Debug, Clone, Copy)]
pub struct PgBouncer;

impl Server for PgBouncer {
    fn name(&self) -> &'static str {
        "pgbouncer"
    }

    fn port(&self) -> u16 {
        6432
    }

    fn started_line(&self) -> WaitFor {
        WaitFor::message_on_stderr("process up")
    }

    fn configure(
        &self,
        request: ContainerRequest<GenericImage>,
        source: ImageSource,
        password: &str,
    ) -> ContainerRequest<GenericImage> {
        // The same container set-up as PostgreSQL's: its entrypoint starts both.
        Postgres.configure(request, source, password)
    }

    fn local_only(&self) -> bool {
        true
    }

    fn url(&self, host_port: u16, password: &str) -> String {
        format!("postgres://postgres:{password}@127.0.0.1:{host_port}/postgres?pgbouncer=true")
    }

    fn metered_url(&self, host_port: u16, password: &str) -> String {
        format!("{}&pool_size=1", self.url(host_port, password))
    }

    fn ready_check(&self, _: &str) -> ExecCommand {
        // Through PgBouncer's port: ready once both are.
        ExecCommand::new([
            "pg_isready",
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            "6432",
            "-U",
            "postgres",
        ])
    }

    fn connection_kill(&self, password: &str) -> ConnectionKill {
        // The server's side: PgBouncer then fails the clients whose transaction ran on
        // a killed connection, and opens new ones.
        Postgres.connection_kill(password)
    }
}
