//! CPU time: what the server itself spent on a scenario, read from its own statistics,
//! and what this process (the client) spent, read from the kernel's scheduler, so
//! that a gap between two clients can be put down to the server's work or to the
//! client's.

use std::path::{Path, PathBuf};

use crate::run::BoxError;

/// Reads Redis's `INFO cpu`: the CPU time (user and system) of the server process,
/// or, on a Redlock's masters, of every master's process together. Unlike `INFO
/// commandstats`, it counts a script's commands once, and the reading, parsing and
/// replying around every command too.
#[derive(Clone)]
pub(crate) struct RedisMeter {
    conns: Vec<redis::aio::MultiplexedConnection>,
}

impl RedisMeter {
    /// A meter on every server of `urls` (a connection to each), which sums them.
    pub(crate) async fn connect_all(urls: &[String]) -> Result<Self, BoxError> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            conns.push(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        if conns.is_empty() {
            return Err("no server to read the CPU time of".into());
        }
        let meter = RedisMeter { conns };
        meter.busy_us().await?;
        Ok(meter)
    }

    /// The CPU time the server processes have used so far, in microseconds.
    pub(crate) async fn busy_us(&self) -> Result<f64, BoxError> {
        let mut texts = Vec::with_capacity(self.conns.len());
        for conn in &self.conns {
            let mut conn = conn.clone();
            texts.push(
                redis::cmd("INFO")
                    .arg("cpu")
                    .query_async::<String>(&mut conn)
                    .await?,
            );
        }
        total_cpu_us(&texts).ok_or_else(|| "INFO cpu has no used_cpu_sys or used_cpu_user".into())
    }
}

/// The CPU time a server spends, read around each measured block.
#[derive(Clone)]
pub(crate) enum ServerMeter {
    /// Redis's own account ([`RedisMeter`]).
    Redis(RedisMeter),
    /// The server's container, from its control group's `cpu.stat` (`usage_usec`):
    /// every process in the container, as the kernel counts them.
    Cgroup(PathBuf),
}

impl ServerMeter {
    /// A meter on the container `id`, where its control group can be read on this
    /// machine (a local Docker engine on cgroup v2, or the unified hierarchy of a
    /// hybrid one); `None` otherwise, and the server's CPU is then not measured.
    pub(crate) fn container(id: &str) -> Option<Self> {
        // Docker's cgroupfs driver, then its systemd driver, each at the root of
        // cgroup v2 and under the unified hierarchy of a hybrid setup.
        let candidates = [
            format!("docker/{id}"),
            format!("system.slice/docker-{id}.scope"),
            format!("unified/docker/{id}"),
            format!("unified/system.slice/docker-{id}.scope"),
        ];
        candidates
            .iter()
            .map(|dir| Path::new("/sys/fs/cgroup").join(dir).join("cpu.stat"))
            .find(|path| read_usage_us(path).is_some())
            .map(ServerMeter::Cgroup)
    }

    /// What the report says the server's CPU was read from.
    pub(crate) fn source(&self) -> &'static str {
        match self {
            ServerMeter::Redis(_) => {
                "Redis's `INFO cpu` (on a Redlock row, every master's together)"
            }
            ServerMeter::Cgroup(_) => "its container's cgroup",
        }
    }

    /// The CPU time the server has used so far, in microseconds.
    pub(crate) async fn busy_us(&self) -> Result<f64, BoxError> {
        match self {
            ServerMeter::Redis(meter) => meter.busy_us().await,
            ServerMeter::Cgroup(path) => read_usage_us(path)
                .ok_or_else(|| format!("{} has no usage_usec", path.display()).into()),
        }
    }
}

/// `usage_usec` of a control group's `cpu.stat`.
fn read_usage_us(path: &Path) -> Option<f64> {
    usage_us(&std::fs::read_to_string(path).ok()?)
}

/// `usage_usec` of the text of a `cpu.stat`.
fn usage_us(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<f64>().ok())
}

/// The sum of [`cpu_us`] over the `INFO cpu` of several servers; `None` if any lacks it.
fn total_cpu_us(texts: &[String]) -> Option<f64> {
    texts.iter().map(|text| cpu_us(text)).sum()
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

/// The CPU time this process's threads have run so far, in microseconds: the sum of
/// the first field of `/proc/self/task/*/schedstat` (nanoseconds on a CPU), exact to
/// the nanosecond where `/proc/self/stat`'s ticks are 10 ms. Threads that have exited
/// are not counted; the runtime's workers live as long as the run. `None` where the
/// kernel does not provide it.
pub(crate) fn client_cpu_us() -> Option<f64> {
    let mut total_ns: u64 = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let mut path = task.ok()?.path();
        path.push("schedstat");
        // A thread that exited since the listing has no file left: it is not counted.
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        total_ns += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total_ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's CPU time by the kernel's tick count (`/proc/thread-self/stat`,
    /// user and system), in ticks: a second clock beside the scheduler's, coarse but
    /// independent.
    fn thread_ticks() -> u64 {
        let stat =
            std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
        // The fields after the command name, which is in parentheses and may hold spaces.
        let rest = &stat[stat.rfind(')').expect("the command's end") + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
    }

    #[test]
    fn counts_this_process_cpu_time() {
        let before = client_cpu_us().expect("/proc/self/task/*/schedstat");
        // Spins until the kernel's ticks say this thread ran 6 ticks (60 ms at 100 Hz),
        // however long a machine busy with other work takes to give it that.
        let ticks = thread_ticks();
        let mut x: u64 = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while thread_ticks() < ticks + 6 && std::time::Instant::now() < deadline {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        let ran = thread_ticks() - ticks;
        let spent = client_cpu_us().expect("schedstat") - before;
        // At least the ticks less the one each end may round away, at 100 Hz or more.
        assert!(ran >= 6, "the thread ran only {ran} ticks within a minute");
        assert!(
            spent > 40_000.0,
            "{spent} µs counted for {ran} ticks of work"
        );
    }

    #[test]
    fn reads_a_control_groups_cpu_time() {
        let text = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n";
        assert_eq!(usage_us(text), Some(1_234_567.0));
        assert_eq!(usage_us("user_usec 5\n"), None);
        // No container of that ID: not measured, rather than a figure of zero.
        assert!(ServerMeter::container("no-such-container").is_none());
    }

    #[test]
    fn reads_the_process_cpu_time() {
        let text = "# CPU\r\nused_cpu_sys:0.250000\r\nused_cpu_user:0.125000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_sys_main_thread:0.2\r\n";
        assert_eq!(cpu_us(text), Some(375_000.0));
        assert_eq!(cpu_us("# CPU\r\nused_cpu_sys:0.1\r\n"), None);
        // A Redlock's masters: summed, and nothing where one of them says nothing.
        let master = |sys: f64| format!("used_cpu_sys:{sys}\r\nused_cpu_user:0.5\r\n");
        assert_eq!(
            total_cpu_us(&[master(0.25), master(0.5), master(1.0)]),
            Some(3_250_000.0)
        );
        assert_eq!(total_cpu_us(&[master(0.25), "# CPU\r\n".into()]), None);
    }
}
