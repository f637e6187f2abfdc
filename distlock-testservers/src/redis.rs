//! Redis, without persistence: a restart loses its data, as the official image's
//! default does.

use testcontainers::core::{ExecCommand, WaitFor};
use testcontainers::{ContainerRequest, GenericImage, ImageExt};

use crate::{ConnectionKill, ImageSource, Server, TlsMaterial};

/// Redis (`redis-server`), password-protected, `maxmemory-policy noeviction`.
#[derive(Debug, Clone, Copy)]
pub struct Redis;

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
            ImageSource::Official => request.with_cmd([
                "redis-server",
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxmemory-policy",
                "noeviction",
                "--requirepass",
                password,
            ]),
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
