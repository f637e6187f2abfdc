//! `distlock run`: a command under a lock, stopped if the lock is lost.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use distlock::{
    format_duration, parse_duration, DynLockBackend, ErrorKind, Holder, LockClient, LockGuard,
    LockOptions, LossReason,
};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::exit::{self, failed, say};
use crate::signals::Signals;

// No doc comment: clap would show it as `run`'s help in place of the command's own.
#[derive(Debug, clap::Args)]
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

/// How long after the SIGKILL the command is taken to be gone, and `lost()` to have
/// been heard: part of the loss margin beside the grace.
const KILL_SLACK: Duration = Duration::from_millis(250);

/// The lock's options for `ttl` and the grace the command gets after SIGTERM, and
/// that grace: the loss is signalled a loss margin before the lease can run out, and
/// the margin covers the grace and the kill, so that the command is gone while the
/// lease is still valid. The default grace is half the default margin (a tenth of
/// the TTL); a longer grace widens the margin, and one that leaves no room for
/// renewal is a configuration error.
pub(crate) fn options_for(
    ttl: Duration,
    grace: Option<Duration>,
) -> distlock::Result<(LockOptions, Duration)> {
    let defaults = LockOptions::new(ttl);
    defaults.validate().map_err(|e| {
        distlock::Error::new(
            e.kind(),
            format!("--ttl {}: {}", format_duration(ttl), e.message()),
        )
    })?;
    let given = grace;
    let grace = grace.unwrap_or(defaults.loss_margin() / 2);
    let margin = defaults.loss_margin().max(grace + KILL_SLACK);
    let min_validity = defaults.min_validity().max(margin + ttl / 10).min(ttl);
    let options = defaults
        .with_loss_margin(margin)
        .with_min_validity(min_validity);
    options.validate().map_err(|e| {
        let (ttl, margin) = (format_duration(ttl), format_duration(margin));
        let message = match given {
            Some(grace) => format!(
                "--grace {} does not fit in --ttl {ttl}: the loss is signalled {margin} before the lease runs out, so that the command is killed while the lease is still valid, and that leaves no room for renewal; raise --ttl or lower --grace ({})",
                format_duration(grace),
                e.message()
            ),
            None => format!(
                "--ttl {ttl} is too short: the loss is signalled {margin} before the lease runs out (the default grace and the time to kill the command), and that leaves no room for renewal; raise --ttl ({})",
                e.message()
            ),
        };
        distlock::Error::new(ErrorKind::Configuration, message)
    })?;
    Ok((options, grace))
}

/// The holder `--holder` and `--payload` name, if either is given.
fn holder_of(args: &RunArgs) -> distlock::Result<Option<Holder>> {
    let holder = match &args.holder {
        Some(id) => Holder::new(id.as_str())?,
        None if args.payload.is_some() => Holder::this_process(),
        None => return Ok(None),
    };
    match &args.payload {
        Some(payload) => holder.with_payload(payload.as_str()).map(Some),
        None => Ok(Some(holder)),
    }
}

/// Takes the lock, runs the command, and gives the exit code.
pub(crate) async fn run(backend: Arc<DynLockBackend>, args: RunArgs) -> u8 {
    let (options, grace) = match options_for(args.ttl, args.grace) {
        Ok(fitted) => fitted,
        Err(e) => return failed(&e),
    };
    let options = match args.at_least {
        Some(at_least) => options.with_hold_at_least(at_least),
        None => options,
    };
    let options = match args.max_runtime {
        Some(at_most) => options.with_hold_at_most(at_most),
        None => options,
    };
    let options = match holder_of(&args) {
        Ok(Some(holder)) => options.with_holder(holder),
        Ok(None) => options,
        Err(e) => return failed(&e),
    };
    let client = match LockClient::with_options(backend, options) {
        Ok(client) => client,
        Err(e) => return failed(&e),
    };
    let code = hold_and_run(&client, args, grace).await;
    // A wait that timed out with a step in flight, or a release that failed, leaves a
    // cleanup running in the background: done before the process ends, or what it
    // gives back would stay held (and queued) until its TTL.
    if tokio::time::timeout(FLUSH_AT_MOST, client.flush())
        .await
        .is_err()
    {
        say(format_args!(
            "warning: releases still under way after {FLUSH_AT_MOST:?}; what they hold runs out at its ttl"
        ));
    }
    code
}

/// How long the end of a run waits for the client's background releases.
const FLUSH_AT_MOST: Duration = Duration::from_secs(10);

async fn hold_and_run(client: &LockClient, args: RunArgs, grace: Duration) -> u8 {
    let guard = match take(client, &args).await {
        Ok(Ok(guard)) => guard,
        Ok(Err(busy)) => {
            say(format_args!("{busy}"));
            return args.conflict_exit_code;
        }
        Err(e) => return failed(&e),
    };
    let fence = guard.fence();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("DISTLOCK_KEY", &args.key)
        .env("DISTLOCK_FENCE", fence.to_string());
    if !args.foreground {
        // A group of its own, so that a stop reaches whatever the command started.
        command.process_group(0);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                std::io::ErrorKind::PermissionDenied => exit::NOT_EXECUTABLE,
                _ => exit::UNAVAILABLE,
            };
            say(format_args!("error: cannot run {:?}: {e}", args.command[0]));
            let _ = guard.release().await;
            return code;
        }
    };
    supervise(child, guard, &args, grace).await
}

/// The guard: at once, within `--wait`, or whenever the lock comes free. `Err` with
/// what to tell the user when the lock stayed busy.
async fn take(client: &LockClient, args: &RunArgs) -> distlock::Result<Result<LockGuard, String>> {
    if args.no_wait {
        return Ok(client
            .try_lock(&args.key)
            .await?
            .map_err(|busy| busy.to_string()));
    }
    match client
        .lock(&args.key, args.wait.unwrap_or(Duration::MAX))
        .await
    {
        Ok(guard) => Ok(Ok(guard)),
        Err(e) if e.kind() == ErrorKind::Timeout && args.wait.is_some() => {
            Ok(Err(format!("{} is held by another holder", args.key)))
        }
        Err(e) => Err(e),
    }
}

/// Waits for the command, passing on the signals distlock gets, and stops it if the
/// lock is lost.
async fn supervise(mut child: Child, guard: LockGuard, args: &RunArgs, grace: Duration) -> u8 {
    let Some(pid) = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
    else {
        // The command has already been reaped: nothing to supervise.
        return finish(child.wait().await, guard, args).await;
    };
    let target = if args.foreground {
        Target::Process(pid)
    } else {
        Target::Group(pid)
    };
    let lost = guard.lost();
    tokio::pin!(lost);
    let mut signals = Signals::new();
    loop {
        tokio::select! {
            status = child.wait() => return finish(status, guard, args).await,
            // `None` (released without a loss) cannot come while `guard` is here.
            Some(reason) = &mut lost => {
                if reason == LossReason::HoldLimit {
                    say(format_args!(
                        "the command ran past --max-runtime while holding {}; stopping it",
                        args.key
                    ));
                } else {
                    say(format_args!(
                        "the lock {} was lost ({reason}); stopping the command",
                        args.key
                    ));
                }
                stop(&mut child, target, grace).await;
                drop(guard);
                return exit::LOST;
            }
            Some(received) = signals.next() => {
                // Passed on; the command decides, and its exit ends the run.
                target.send(received);
            }
        }
    }
}

/// The run's code once the command exited by itself: the command's own, unless the
/// release found that the lock had been lost meanwhile.
async fn finish(status: std::io::Result<ExitStatus>, guard: LockGuard, args: &RunArgs) -> u8 {
    let release = guard.release().await;
    let code = match status {
        Ok(status) => code_of(status),
        Err(e) => {
            say(format_args!("error: lost track of the command: {e}"));
            exit::UNAVAILABLE
        }
    };
    match release {
        Ok(()) => code,
        Err(e) if e.kind() == ErrorKind::NotHeld => {
            say(format_args!(
                "the lock {} was lost before the command finished: its work may have overlapped another holder's",
                args.key
            ));
            exit::LOST
        }
        Err(e) => {
            // The command finished under a lease nobody reported lost; it runs out at
            // its TTL.
            say(format_args!("warning: the release failed: {e}"));
            code
        }
    }
}

/// Where distlock's signals go: the command's process group, or the command alone
/// (`--foreground`).
#[derive(Debug, Clone, Copy)]
enum Target {
    Group(Pid),
    Process(Pid),
}

impl Target {
    fn send(self, signal: Signal) {
        // An error means it is gone already.
        let _ = match self {
            Target::Group(group) => killpg(group, signal),
            Target::Process(pid) => kill(pid, signal),
        };
    }
}

/// SIGTERM to the command, then SIGKILL once `grace` has passed.
async fn stop(child: &mut Child, target: Target, grace: Duration) {
    target.send(Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_ok() {
        // The leader is gone; what it started may linger in its group.
        if let Target::Group(_) = target {
            target.send(Signal::SIGKILL);
        }
        return;
    }
    say("the command did not stop within the grace period; killing it");
    target.send(Signal::SIGKILL);
    let _ = child.wait().await;
}

/// A shell's exit code for a status: the code, or 128+N for signal N.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        (None, None) => exit::UNAVAILABLE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command is killed while the lease is still valid: the loss margin covers
    /// the grace and the kill, by default and with a grace given.
    #[test]
    fn the_grace_ends_inside_the_loss_margin() {
        for (ttl, grace) in [
            (Duration::from_secs(30), None),
            (Duration::from_secs(2), None),
            (Duration::from_secs(30), Some(Duration::from_secs(10))),
            (Duration::from_secs(2), Some(Duration::from_secs(1))),
        ] {
            let (options, grace) = options_for(ttl, grace).expect("fits");
            assert!(
                grace + KILL_SLACK <= options.loss_margin(),
                "ttl {ttl:?}: a grace of {grace:?} outlives the loss margin {:?}",
                options.loss_margin()
            );
        }
        assert_eq!(
            options_for(Duration::from_secs(30), None).expect("fits").1,
            Duration::from_millis(1500)
        );
        let refused = options_for(Duration::from_secs(2), Some(Duration::from_secs(5)))
            .expect_err("no room for renewal");
        assert_eq!(refused.kind(), ErrorKind::Configuration, "{refused}");
        assert!(refused.to_string().contains("--grace 5s"), "{refused}");
    }

    /// A TTL no lock can take, or too short for the default grace, is named as the
    /// TTL's fault, never as a `--grace` that was not given.
    #[test]
    fn a_bad_ttl_names_the_ttl() {
        let zero = options_for(Duration::ZERO, None).expect_err("a zero ttl");
        assert_eq!(zero.kind(), ErrorKind::Configuration, "{zero}");
        assert!(
            zero.to_string()
                .contains("--ttl 0ms: the ttl must be greater than zero"),
            "{zero}"
        );
        assert!(!zero.to_string().contains("--grace"), "{zero}");
        let short = options_for(Duration::from_millis(200), None).expect_err("too short");
        assert_eq!(short.kind(), ErrorKind::Configuration, "{short}");
        assert!(
            short.to_string().contains("--ttl 200ms is too short"),
            "{short}"
        );
        assert!(!short.to_string().contains("--grace"), "{short}");
    }
}
