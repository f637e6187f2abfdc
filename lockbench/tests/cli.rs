//! The `lockbench` binary from outside, on what needs no server: a bad flag is a
//! command-line error, and a server that cannot be reached is a row that says it was
//! not run, and why, without its credentials, and an error under `--require-all`.
//!
//! (The runs themselves are `scripts/test.sh`'s quick comparison and torture runs,
//! which use the binary this test builds, and `scripts/lockbench.sh`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_lockbench");

/// A results folder of its own, removed when dropped.
struct Out(PathBuf);

impl Out {
    fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("lockbench-cli-{:016x}", rand::random::<u64>()));
        Out(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.0.join(file))
            .unwrap_or_else(|e| panic!("{file} was not written: {e}"))
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The comparison run on Redis at `url`, nothing else.
fn compare_on_redis(url: &str, out: &Out, extra: &[&str]) -> Output {
    Command::new(BIN)
        .env("DISTLOCK_REDIS_URL", url)
        .args(["--quick", "--skip-suite", "--backends", "redis", "--out"])
        .arg(out.path())
        .args(extra)
        .output()
        .expect("lockbench runs")
}

#[test]
fn an_unknown_backend_is_a_command_line_error_that_lists_the_known_ones() {
    let output = Command::new(BIN)
        .args(["--backends", "memory,nosuch"])
        .output()
        .expect("lockbench runs");
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("'nosuch'"), "{stderr}");
    assert!(
        stderr.contains("redlock-3") && stderr.contains("zookeeper"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Port 1 on loopback: nothing listens there, so the connection is refused at once.
const UNREACHABLE: &str = "redis://:sekrit-pass@127.0.0.1:1";

#[test]
fn a_server_that_cannot_be_reached_is_a_row_not_run_with_its_reason_and_no_credentials() {
    let out = Out::new();
    let output = compare_on_redis(UNREACHABLE, &out, &[]);
    let (stdout, stderr) = text(&output);
    // Without --require-all, a backend that could not start is reported, not failed.
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("redis was not run: external, but connecting failed"),
        "{stderr}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&out.read("results.json")).expect("results.json is JSON");
    let rows = results["backends"].as_array().expect("a list of rows");
    assert_eq!(rows.len(), 1, "{results}");
    assert_eq!(rows[0]["backend"], "redis");
    assert_eq!(rows[0]["started"], false);
    let server = rows[0]["server"].as_str().expect("the server column");
    assert!(server.contains("Connection refused"), "{server}");
    // No figure for a server that did not run.
    for figure in ["s1_client", "s1_primitives", "s2_throughput", "s3_handoff"] {
        assert!(rows[0][figure].is_null(), "{figure}: {}", rows[0]);
    }
    let report = out.read("report.md");
    assert!(report.contains("not started"), "{report}");
    for (what, said) in [
        ("stdout", &stdout),
        ("stderr", &stderr),
        ("report.md", &report),
        ("results.json", &results.to_string()),
    ] {
        assert!(
            !said.contains("sekrit"),
            "the password is in {what}: {said}"
        );
    }
}

#[test]
fn under_require_all_a_server_not_run_fails_the_run_as_the_harness() {
    let out = Out::new();
    let output = compare_on_redis(UNREACHABLE, &out, &["--require-all"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stderr.contains("redis was not run"), "{stderr}");
    // What was not run is still written down.
    assert!(out.read("report.md").contains("not started"));
}
