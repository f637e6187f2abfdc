//! lockbench: distlock's comparison run.
//!
//! For each backend it starts a server (a container, or the URL in
//! `DISTLOCK_<BACKEND>_URL`), runs the scenarios on it with the raw floors and (on
//! Redis) the peer crate rslock beside distlock, then the conformance suite, and
//! writes `report.md`, `results.json`, `latency.svg`, `handoff.svg` and `sweep.svg` into the
//! results folder.
//!
//! ```text
//! lockbench [--quick | --soak] [--out DIR] [--backends memory,redis,postgres,mariadb,etcd,zookeeper] [--require-all] [--skip-suite]
//! lockbench torture [--quick | --soak] [--out DIR] [--backends ...] [--require-all]
//! ```
//!
//! Three modes (see [`Mode`](run::Mode)): `--quick` for CI, the standard run by default (what
//! `scripts/lockbench.sh` runs with no flags, about 40 minutes with its build), and
//! `--soak`, the long run (`--full` is its former name).
//!
//! `lockbench torture` is the safety run (see the `torture` module): many clients,
//! faults on a schedule, and a fenced register that must refuse every stale write.
//!
//! `lockbench --help` says the same on standard output.
//!
//! Without Docker it still runs the memory backend and says which backends it could
//! not start, and why; `--require-all` makes that an error (for CI).

mod compare;
mod floors;
mod layer;
mod meter;
mod options;
mod peers;
mod report;
mod rows;
mod run;
mod scenarios;
mod sets;
mod stats;
mod storage;
mod torture;

use std::process::ExitCode;

use clap::Parser;

use crate::options::RunOptions;

#[derive(Debug, Parser)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Args {
    /// Another run than the comparison.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunOptions,
    /// Leave the conformance suite out of the comparison (each row's conformance
    /// column then says "not run" and why): for CI, where `cargo test` has just run
    /// every backend's suite.
    #[arg(long)]
    skip_suite: bool,
}

/// The runs besides the comparison.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Many clients, faults on a schedule, and a fenced register that must refuse
    /// every stale write (torture.md, torture.json).
    Torture(torture::TortureArgs),
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let Args {
        command,
        run,
        skip_suite,
    } = Args::parse();
    match command {
        Some(Command::Torture(torture)) => torture::main(torture.run).await,
        None => compare::main(run, skip_suite).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;
    use crate::run::Mode;

    fn mode(args: &[&str]) -> Result<Mode, clap::Error> {
        let parsed =
            Args::try_parse_from(std::iter::once("lockbench").chain(args.iter().copied()))?;
        Ok(parsed.run.mode())
    }

    #[test]
    fn the_standard_run_is_the_default_and_the_soak_is_asked_for() {
        assert_eq!(mode(&[]).expect("no flags"), Mode::Standard);
        assert_eq!(mode(&["--quick"]).expect("--quick"), Mode::Quick);
        assert_eq!(mode(&["--soak"]).expect("--soak"), Mode::Soak);
        // The soak's former name still works.
        assert_eq!(mode(&["--full"]).expect("--full"), Mode::Soak);
        assert!(mode(&["--quick", "--soak"]).is_err());
    }

    #[test]
    fn only_the_comparison_can_leave_the_suite_out() {
        let parse = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("lockbench").chain(args.iter().copied()))
        };
        assert!(
            parse(&["--quick", "--skip-suite"])
                .expect("parses")
                .skip_suite
        );
        assert!(!parse(&["--quick"]).expect("parses").skip_suite);
        assert!(
            parse(&["torture", "--quick", "--skip-suite"]).is_err(),
            "the torture run has no suite to leave out"
        );
    }

    #[test]
    fn the_standard_run_sits_between_the_quick_run_and_the_soak() {
        use crate::scenarios::Sizes;
        let (quick, standard, soak) = (
            Sizes::of(Mode::Quick),
            Sizes::of(Mode::Standard),
            Sizes::of(Mode::Soak),
        );
        assert!(quick.cycles < standard.cycles && standard.cycles < soak.cycles);
        assert!(quick.storage_names < standard.storage_names);
        assert!(standard.storage_names < soak.storage_names);
        assert!(
            !soak.short_bounds,
            "the soak waits out each backend's own bounds"
        );
    }
}
