//! `distlock`: run a command under a distributed lock, and look at or break locks, on
//! any backend distlock connects to by URL. See distlock/guides/operating.md for the exit codes.
//!
//! Unix only (Linux, macOS, the BSDs): `run` stops its command's whole process group
//! with signals when the lock is lost. The library crates build everywhere.
// On docs.rs, each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(unix))]
compile_error!(
    "distlock-cli runs on Unix only: `distlock run` stops its command's process group \
     with signals; use the distlock library crates on other platforms"
);

mod elect;
mod run;
mod signals;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use distlock::{parse_duration, Error, ErrorKind, LockClient, LockInfo, LockKey};

/// The exit codes `distlock` gives of its own. `run` otherwise exits with its
/// command's code.
pub(crate) mod exit {
    /// `run`: the lock was busy (`--no-wait`, or `--wait` ran out), as `flock` exits;
    /// `--conflict-exit-code` changes it. `force-release`: nothing was held.
    pub(crate) const BUSY: u8 = 1;
    /// Bad arguments or configuration: a URL, a key, a duration, a TTL (EX_USAGE).
    pub(crate) const USAGE: u8 = 64;
    /// The backend failed or could not be reached (EX_UNAVAILABLE).
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// The backend refused the credentials (EX_NOPERM): a setting to fix, not a server
    /// to wait for.
    pub(crate) const CREDENTIALS: u8 = 77;
    /// `run`: the lock was lost while the command ran, and the command was stopped
    /// (EX_TEMPFAIL: its work may be unfinished, and can be tried again).
    pub(crate) const LOST: u8 = 75;
    /// `run`: the command could not be executed.
    pub(crate) const NOT_EXECUTABLE: u8 = 126;
    /// `run`: the command was not found.
    pub(crate) const NOT_FOUND: u8 = 127;
}

/// The exit codes, as `--help` shows them after the commands.
const EXIT_CODES: &str = "Exit codes:
  0    done (run: the command's own code, 128+N when signal N ended it)
  1    run: the lock was busy (-E changes it); force-release: nothing was held
  64   bad arguments or configuration (a URL, a key, a duration)
  69   the backend failed, or could not be reached in time
  75   run: the lock was lost, and the command was stopped
  77   the backend refused the credentials
  126  run: the command could not be executed
  127  run: the command was not found";

/// Distributed locks from the command line: run a command while holding a lock
/// (renewed all along, and the command stopped if the lock is lost), or look at and
/// break locks.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, about, long_about = None, after_help = EXIT_CODES)]
struct Cli {
    /// The backend's URL (its schemes are this build's: see --help).
    #[arg(long, env = "DISTLOCK_URL", hide_env_values = true, global = true)]
    url: Option<String>,

    /// Log what the client does to stderr: -v for grants, losses and renewal
    /// failures, -vv for every step.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a command while holding KEY, renewing the lock until it exits.
    ///
    /// The command gets DISTLOCK_KEY and DISTLOCK_FENCE in its environment, and runs in
    /// a process group of its own (unless --foreground): if the lock is lost it is sent
    /// SIGTERM, then SIGKILL after --grace (early enough for the SIGKILL to land while
    /// the lease is still valid), and distlock exits with 75. Otherwise distlock exits with the
    /// command's own code (128+N when signal N ended it). SIGINT, SIGTERM and SIGHUP
    /// sent to distlock are passed on to the command.
    Run(RunArgs),
    /// Shows who holds KEY: the holder and its payload, since when (by the clock the
    /// backend records grants with), its fence and remaining TTL.
    Inspect {
        /// The lock's key.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists the held locks whose keys start with PREFIX (every one without).
    List {
        /// The start of the keys to list.
        prefix: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Breaks KEY's lock whoever holds it; its holder learns of the loss at its next
    /// renewal. Asks first, unless given --yes.
    ForceRelease {
        /// The lock's key.
        key: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Creates the tables of a backend that keeps any (PostgreSQL, and MySQL or
    /// MariaDB: the lock table and its queue, sequence and permit tables), as
    /// connecting does unless `migrate=false`; with --print, writes the SQL instead,
    /// for a DBA or a migration tool to run. Redis, etcd, ZooKeeper and memory keep no
    /// schema: nothing to do.
    Migrate {
        /// Print the statements; connect to nothing.
        #[arg(long)]
        print: bool,
    },
    /// Checks that the backend answers, for readiness probes: connects, makes one
    /// round trip and prints its latency. Exits 0 when it answered; 69 when it could
    /// not be reached or did not answer within --timeout; 64 for a bad URL.
    Health {
        /// The longest the check may take, connecting included.
        #[arg(long, value_parser = parse_duration, default_value = "10s")]
        timeout: Duration,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Campaigns in the election NAME with VALUE (an address, say), prints the term
    /// once elected, and leads until SIGINT, SIGTERM or SIGHUP, then resigns and exits
    /// 0; exits 75 if the term is lost, and 1 if --wait runs out first (etcdctl's
    /// `elect NAME PROPOSAL`).
    Elect {
        /// The election's name.
        name: String,
        /// The value the leader is known by: `observe` and the election's leader show it.
        value: String,
        /// How long to wait to be elected; without it, as long as it takes.
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
        /// The term's lease TTL: how long the election stays led by a distlock that
        /// vanished. It is renewed every third of it.
        #[arg(long, value_parser = parse_duration, default_value = "30s")]
        ttl: Duration,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prints the election NAME's leader, then every term and vacancy in order, one
    /// line each, until SIGINT, SIGTERM or SIGHUP, or --count lines (etcdctl's
    /// `elect -l NAME`).
    Observe {
        /// The election's name.
        name: String,
        /// Stop after this many lines.
        #[arg(long)]
        count: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Writes the completion script of SHELL to stdout, e.g.
    /// `distlock completions bash > /etc/bash_completion.d/distlock`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The lock's key.
    pub(crate) key: String,
    /// How long to wait for the lock (500ms, 30s, 5m, 1h); without it, as long as it
    /// takes, through a server that stops answering for a while too.
    #[arg(long, value_parser = parse_duration, conflicts_with = "no_wait")]
    pub(crate) wait: Option<Duration>,
    /// Do not wait: exit at once if the lock is held.
    #[arg(long, short = 'n')]
    pub(crate) no_wait: bool,
    /// The lease's TTL: how long the lock outlives a distlock that vanished. It is
    /// renewed every third of it.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// How long the command has to exit after SIGTERM, once the lock is lost, before
    /// SIGKILL. The loss is signalled early enough for the SIGKILL to land while the
    /// lease is still valid, so that the command never runs on once another host can
    /// hold the lock: a tenth of --ttl before the lease can run out, or --grace plus
    /// 250 ms where that is longer. By default half of that tenth (1.5s at a 30s TTL);
    /// a grace that leaves no room in the TTL for renewal is refused.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) grace: Option<Duration>,
    /// Keep the lock at least this long from its grant, even when the command ends
    /// sooner (ShedLock's lockAtLeastFor): with --no-wait on every host, a host whose
    /// clock or cron runs a little behind finds the lock still held for this slot, and
    /// skips. Make it longer than the hosts' skew and shorter than the schedule's
    /// interval less that skew. Needs no more than --ttl on etcd, which renews only to
    /// the TTL.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) at_least: Option<Duration>,
    /// Hold the lock at most this long: then the command is stopped as on a loss
    /// (SIGTERM, then SIGKILL after --grace) and distlock exits with 75. The lease is
    /// given back once the command must have stopped.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) max_runtime: Option<Duration>,
    /// Who holds the lock, as `inspect` and `list` show it; by default this host's name
    /// and distlock's process id (`host:pid`).
    #[arg(long)]
    pub(crate) holder: Option<String>,
    /// A short text stored with the lock for `inspect` and `list` to show (a job's
    /// name, a build); anyone who can read the locks can read it.
    #[arg(long)]
    pub(crate) payload: Option<String>,
    /// Keep the command in distlock's own process group, so that it can read from the
    /// terminal; a stop then reaches the command alone, not what it started.
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The exit code when the lock is busy (flock's -E).
    #[arg(long, short = 'E', default_value_t = exit::BUSY)]
    pub(crate) conflict_exit_code: u8,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1..)]
    pub(crate) command: Vec<String>,
}

/// One line to stderr, as every message of distlock's own is.
pub(crate) fn say(message: impl std::fmt::Display) {
    eprintln!("distlock: {message}");
}

/// What an operator's command on `memory://` says first: that backend lives in this
/// process alone.
const MEMORY_IS_PER_PROCESS: &str = "note: memory:// is this command's own in-memory backend: it holds only what this process locks, so inspect, list, force-release and observe never see another process's locks or elections";

/// The exit code of an error: its kind decides.
pub(crate) fn code_of(error: &Error) -> u8 {
    match error.kind() {
        ErrorKind::InvalidKey
        | ErrorKind::InvalidTtl
        | ErrorKind::InvalidInput
        | ErrorKind::Configuration
        | ErrorKind::Unsupported => exit::USAGE,
        ErrorKind::Authentication => exit::CREDENTIALS,
        _ => exit::UNAVAILABLE,
    }
}

/// Reports `error` on one line (distlock's errors never show a password) and gives
/// its exit code.
pub(crate) fn failed(error: &Error) -> u8 {
    say(format_args!("error: {error}"));
    code_of(error)
}

/// The `--url` help, from the schemes this build connects to.
fn url_help() -> String {
    let schemes: Vec<String> = distlock::schemes()
        .iter()
        .map(|s| format!("{s}://"))
        .collect();
    format!("The backend's URL: {}", schemes.join(", "))
}

/// The command line's definition, with the `--url` help of this build.
fn command() -> clap::Command {
    Cli::command().mut_arg("url", |arg| arg.help(url_help()))
}

fn main() -> ExitCode {
    let parsed = command()
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            // clap's whole message: what is wrong, the usage and where help is.
            let text = e.render().to_string();
            eprint!("distlock: {text}");
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    if cli.verbose > 0 {
        let level = if cli.verbose > 1 {
            tracing_subscriber::filter::LevelFilter::DEBUG
        } else {
            tracing_subscriber::filter::LevelFilter::INFO
        };
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say(format_args!("error: cannot start the runtime: {e}"));
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let code = runtime.block_on(dispatch(cli));
    // `run` has flushed its client's background releases; what is left (the later
    // passes of a cleanup) is not waited for: a lease left behind runs out at its TTL.
    runtime.shutdown_timeout(Duration::from_secs(1));
    ExitCode::from(code)
}

async fn dispatch(cli: Cli) -> u8 {
    if let Command::Completions { shell } = cli.command {
        clap_complete::generate(shell, &mut command(), "distlock", &mut std::io::stdout());
        return 0;
    }
    let Some(url) = cli.url else {
        say("error: no backend: give --url or set DISTLOCK_URL");
        return exit::USAGE;
    };
    // Check what needs no server before connecting.
    let key = match &cli.command {
        Command::Run(args) => Some(args.key.as_str()),
        Command::Inspect { key, .. } | Command::ForceRelease { key, .. } => Some(key.as_str()),
        Command::List { .. }
        | Command::Elect { .. }
        | Command::Observe { .. }
        | Command::Health { .. }
        | Command::Migrate { .. }
        | Command::Completions { .. } => None,
    };
    let key = match key.map(LockKey::new).transpose() {
        Ok(key) => key,
        Err(e) => return failed(&e),
    };
    if let Command::Health { timeout, json } = cli.command {
        return health(&url, timeout, json).await;
    }
    if let Command::Migrate { print } = cli.command {
        return migrate(&url, print).await.unwrap_or_else(|e| failed(&e));
    }
    let backend = match connector().connect(&url).await {
        Ok(backend) => backend,
        Err(e) => return failed(&e),
    };
    // An operator's calls go through a client, as a service's would.
    let operator = || LockClient::new(backend.clone());
    if url.starts_with("memory:") && !matches!(cli.command, Command::Run(_) | Command::Elect { .. })
    {
        say(MEMORY_IS_PER_PROCESS);
    }
    let result = match (cli.command, key) {
        (Command::Run(args), _) => return run::run(backend, args).await,
        (
            Command::Elect {
                name,
                value,
                wait,
                ttl,
                json,
            },
            _,
        ) => return elect::elect(backend, &name, &value, wait, ttl, json).await,
        (Command::Observe { name, count, json }, _) => {
            return elect::observe(backend, &name, count, json).await
        }
        (Command::Inspect { json, .. }, Some(key)) => inspect(&operator(), &key, json).await,
        (Command::List { prefix, json }, _) => list(&operator(), prefix.as_deref(), json).await,
        (Command::ForceRelease { yes, .. }, Some(key)) => {
            force_release(&operator(), &key, yes).await
        }
        (Command::Health { .. } | Command::Migrate { .. } | Command::Completions { .. }, _) => {
            unreachable!("answered before connecting")
        }
        (_, None) => unreachable!("every command but list, elect, observe and health has a key"),
    };
    result.unwrap_or_else(|e| failed(&e))
}

/// `distlock migrate [--print]`.
async fn migrate(url: &str, print: bool) -> Result<u8, Error> {
    let migration = distlock::descriptors()
        .into_iter()
        .filter(|d| d.serves(url))
        .find_map(|d| d.migration().copied());
    if let Some(migration) = migration {
        if print {
            for statement in migration.statements(url)? {
                println!("{statement};");
            }
        } else {
            println!("{}", migration.run(url).await?);
        }
        return Ok(0);
    }
    let backend = connector().connect(url).await?;
    if print {
        println!("-- the {} backend keeps no tables", backend.name());
    } else {
        println!(
            "the {} backend keeps no tables: nothing to migrate",
            backend.name()
        );
    }
    Ok(0)
}

/// `distlock health`: connects and makes one round trip within `limit`.
async fn health(url: &str, limit: Duration, json: bool) -> u8 {
    let checked = tokio::time::timeout(limit, async {
        let backend = connector().connect(url).await?;
        distlock::LockClient::new(backend).health().await
    })
    .await;
    let health = match checked {
        Ok(Ok(health)) => health,
        Ok(Err(e)) => return failed(&e),
        Err(_) => {
            say(format_args!(
                "error: no answer within {} (--timeout)",
                seconds(limit)
            ));
            return exit::UNAVAILABLE;
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({
                "backend": health.backend(),
                "ok": true,
                "latency_ms": health.latency().as_secs_f64() * 1e3,
            })
        );
    } else {
        println!(
            "{}: ok, one round trip in {:.2} ms",
            health.backend(),
            health.latency().as_secs_f64() * 1e3
        );
    }
    0
}

/// The backends this build connects to: those of its features.
fn connector() -> distlock::Connector {
    distlock::Connector::new()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn held_json(key: &LockKey, info: Option<&LockInfo>) -> serde_json::Value {
    match info {
        Some(info) => {
            let mut held = serde_json::json!({
                "key": key.as_str(),
                "held": true,
                "fence": info.fence.get(),
                "ttl_ms": millis(info.remaining),
            });
            if let Some(holder) = &info.holder {
                held["holder"] = holder.id().into();
                held["payload"] = holder.payload().into();
            }
            if let Some(at) = info.granted_at {
                held["granted_at"] = utc(at).into();
                let ms = at
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default();
                held["granted_at_ms"] = millis(ms).into();
            }
            held
        }
        None => serde_json::json!({ "key": key.as_str(), "held": false }),
    }
}

/// Who holds a lock and since when, for a person: `held by api-7:4242 [its payload]
/// since 2026-11-30T02:50:01.123Z (12.3 s ago)`; what the backend does not keep is
/// left out.
fn holder_text(info: &LockInfo) -> String {
    let mut text = String::new();
    if let Some(holder) = &info.holder {
        text.push_str(&format!(" by {}", holder.id()));
        if let Some(payload) = holder.payload() {
            text.push_str(&format!(" [{}]", payload.escape_debug()));
        }
    }
    if let Some(at) = info.granted_at {
        let ago = SystemTime::now().duration_since(at).unwrap_or_default();
        text.push_str(&format!(" since {} ({} ago)", utc(at), seconds(ago)));
    }
    text
}

/// `at` in UTC, as RFC 3339 with milliseconds.
fn utc(at: SystemTime) -> String {
    let since = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

async fn inspect(client: &LockClient, key: &LockKey, json: bool) -> Result<u8, Error> {
    let info = client.inspect(key.as_str()).await?;
    if json {
        println!("{}", held_json(key, info.as_ref()));
    } else {
        match info {
            Some(info) => println!(
                "{key}: held{}, fence {}, {} left",
                holder_text(&info),
                info.fence,
                seconds(info.remaining)
            ),
            None => println!("{key}: free"),
        }
    }
    Ok(0)
}

async fn list(client: &LockClient, prefix: Option<&str>, json: bool) -> Result<u8, Error> {
    let held = client.list(prefix.unwrap_or("")).await?;
    if json {
        let all: Vec<_> = held.iter().map(|(k, i)| held_json(k, Some(i))).collect();
        println!("{}", serde_json::Value::Array(all));
    } else {
        for (key, info) in &held {
            println!(
                "{key}\tfence {}\t{} left\t{}",
                info.fence,
                seconds(info.remaining),
                holder_text(info).trim_start()
            );
        }
    }
    Ok(0)
}

async fn force_release(client: &LockClient, key: &LockKey, yes: bool) -> Result<u8, Error> {
    let backend = client.backend();
    if backend.operator().is_none() {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!("the {} backend cannot force a release", backend.name()),
        ));
    }
    if !yes {
        let Some(info) = client.inspect(key.as_str()).await? else {
            say(format_args!("{key} is not held"));
            return Ok(exit::BUSY);
        };
        if !std::io::stdin().is_terminal() {
            say("error: refusing to break a lock without asking: give --yes, or run from a terminal");
            return Ok(exit::USAGE);
        }
        eprint!(
            "distlock: break {key}, held{} with fence {} for {} more? [y/N] ",
            holder_text(&info),
            info.fence,
            seconds(info.remaining)
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let read = tokio::task::spawn_blocking(move || {
            std::io::stdin()
                .lock()
                .read_line(&mut answer)
                .map(|_| answer)
        })
        .await;
        let answer = match read {
            Ok(Ok(answer)) => answer,
            _ => String::new(),
        };
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            say("not broken");
            return Ok(exit::BUSY);
        }
    }
    if client.force_release(key.as_str()).await? {
        say(format_args!("broke {key}"));
        Ok(0)
    } else {
        say(format_args!("{key} is not held"));
        Ok(exit::BUSY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_times_are_written_in_utc() {
        let at = |ms: u64| utc(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_796_006_401_123), "2026-11-30T02:40:01.123Z");
        assert_eq!(at(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }
}
