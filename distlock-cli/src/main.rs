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
mod exit;
mod operator;
mod run;
mod signals;

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use distlock::{parse_duration, LockClient, LockKey};

use crate::exit::{failed, say, EXIT_CODES};
use crate::operator::{
    force_release, health, inspect, list, migrate, watch, MEMORY_IS_PER_PROCESS,
};
use crate::run::RunArgs;

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
    /// Prints who holds KEY, as `inspect` does, then each change of its holder (a grant,
    /// a release, an expiry, a takeover), one line each, until SIGINT, SIGTERM or
    /// SIGHUP, or --count lines. A release is seen at once where the backend notifies
    /// its waiters, an expiry as the lease ends, and a grant within half a second; a
    /// holder that came and went between two looks is not shown.
    Watch {
        /// The lock's key.
        key: String,
        /// Stop after this many lines.
        #[arg(long)]
        count: Option<usize>,
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
        Command::Inspect { key, .. }
        | Command::Watch { key, .. }
        | Command::ForceRelease { key, .. } => Some(key.as_str()),
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
    let backend = match distlock::Connector::new().connect(&url).await {
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
        (Command::Watch { count, json, .. }, Some(key)) => {
            watch(&operator(), &key, count, json).await
        }
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
