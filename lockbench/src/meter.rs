//! Server time: the CPU time the server itself spent on a scenario, read from its own
//! statistics, so that a gap between two clients can be put down to the server's work
//! or to the client's.

use crate::BoxError;

/// Reads Redis's `INFO cpu`: the CPU time (user and system) of the server process.
/// Unlike `INFO commandstats`, it counts a script's commands once, and the reading,
/// parsing and replying around every command too.
#[derive(Clone)]
pub(crate) struct RedisMeter {
    conn: redis::aio::MultiplexedConnection,
}

impl RedisMeter {
    /// A meter on the server at `url` (its own connection).
    pub(crate) async fn connect(url: &str) -> Result<Self, BoxError> {
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        let meter = RedisMeter { conn };
        meter.busy_us().await?;
        Ok(meter)
    }

    /// The CPU time the server process has used so far, in microseconds.
    pub(crate) async fn busy_us(&self) -> Result<f64, BoxError> {
        let mut conn = self.conn.clone();
        let text: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
        cpu_us(&text).ok_or_else(|| "INFO cpu has no used_cpu_sys or used_cpu_user".into())
    }
}

/// `used_cpu_sys` plus `used_cpu_user` (seconds) of `INFO cpu`, in microseconds.
fn cpu_us(text: &str) -> Option<f64> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
    };
    Some((field("used_cpu_sys:")? + field("used_cpu_user:")?) * 1e6)
}

/// Measures what `run` costs the server, per operation, when a meter is given: the
/// figure is set on the summary `run` returns.
pub(crate) async fn server_time<F>(
    meter: Option<&RedisMeter>,
    run: F,
) -> Result<crate::stats::Summary, BoxError>
where
    F: std::future::Future<Output = Result<crate::stats::Summary, BoxError>>,
{
    let Some(meter) = meter else {
        return run.await;
    };
    let before = meter.busy_us().await?;
    let mut summary = run.await?;
    let after = meter.busy_us().await?;
    if summary.count > 0 {
        summary.server_cpu_us = Some((after - before) / summary.count as f64);
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_process_cpu_time() {
        let text = "# CPU\r\nused_cpu_sys:0.250000\r\nused_cpu_user:0.125000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_sys_main_thread:0.2\r\n";
        assert_eq!(cpu_us(text), Some(375_000.0));
        assert_eq!(cpu_us("# CPU\r\nused_cpu_sys:0.1\r\n"), None);
    }
}
