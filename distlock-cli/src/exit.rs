//! The exit codes `distlock` gives of its own (`run` otherwise exits with its
//! command's code), and how it reports its own failures: one line to stderr, and the
//! exit code the error's kind decides.

use distlock::{Error, ErrorKind};

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

/// The exit codes, as `--help` shows them after the commands.
pub(crate) const EXIT_CODES: &str = "Exit codes:
  0    done (run: the command's own code, 128+N when signal N ended it)
  1    run: the lock was busy (-E changes it); force-release: nothing was held
  64   bad arguments or configuration (a URL, a key, a duration)
  69   the backend failed, or could not be reached in time
  75   run: the lock was lost, and the command was stopped
  77   the backend refused the credentials
  126  run: the command could not be executed
  127  run: the command was not found";

/// One line to stderr, as every message of distlock's own is.
pub(crate) fn say(message: impl std::fmt::Display) {
    eprintln!("distlock: {message}");
}

/// The exit code of an error: its kind decides.
pub(crate) fn code_of(error: &Error) -> u8 {
    match error.kind() {
        ErrorKind::InvalidKey
        | ErrorKind::InvalidTtl
        | ErrorKind::InvalidInput
        | ErrorKind::Configuration
        | ErrorKind::Unsupported => USAGE,
        ErrorKind::Authentication => CREDENTIALS,
        _ => UNAVAILABLE,
    }
}

/// Reports `error` on one line (distlock's errors never show a password) and gives
/// its exit code.
pub(crate) fn failed(error: &Error) -> u8 {
    say(format_args!("error: {error}"));
    code_of(error)
}
