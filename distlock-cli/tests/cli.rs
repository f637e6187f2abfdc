//! The `distlock` binary end to end: against real Redis, PostgreSQL and etcd servers,
//! and its exit codes and errors against the memory backend.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use distlock_conformance::ServerControl;
use distlock_testservers::{Etcd, MariaDb, Postgres, Redis, Server, ServerHandle, ZooKeeper};
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// `distlock` on `url`, with its output captured and nothing on its stdin.
fn distlock(url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("DISTLOCK_URL", url)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs `distlock` to its end, which must come within a minute.
async fn finish(url: &str, args: &[&str]) -> Output {
    let run = distlock(url, args).output();
    timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("distlock {args:?} ran over a minute"))
        .expect("distlock runs")
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap_or(-1)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)))
}

/// A directory of the test's own for its commands' marks.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "distlock-cli-{name}-{}-{:x}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(Instant::now().elapsed().as_nanos());
    hasher.finish()
}

/// Waits until `path` exists: a command's sign that it runs.
async fn appears(path: &Path, within: Duration) {
    let give_up = Instant::now() + within;
    while !path.exists() {
        assert!(
            Instant::now() < give_up,
            "{} did not appear within {within:?}",
            path.display()
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// A `distlock run` under way; its code once it ends, which must come `within`.
async fn ends(child: Child, within: Duration) -> Output {
    timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("distlock run did not end within {within:?}"))
        .expect("distlock runs")
}

/// `distlock run OPTIONS KEY -- sh -c SCRIPT DIR` under way (the script finds `DIR` in
/// `$0`).
fn run_script(url: &str, dir: &Path, options: &[&str], key: &str, script: &str) -> Child {
    let dir = dir.to_str().expect("a UTF-8 path");
    let mut args = vec!["run"];
    args.extend_from_slice(options);
    args.extend_from_slice(&[key, "--", "sh", "-c", script, dir]);
    distlock(url, &args).spawn().expect("distlock starts")
}

/// [`run_script`], once its script has made `mark` in `dir`: it holds the lock.
async fn holding(
    url: &str,
    dir: &Path,
    options: &[&str],
    key: &str,
    script: &str,
    mark: &str,
) -> Child {
    let holder = run_script(url, dir, options, key, script);
    appears(&dir.join(mark), Duration::from_secs(20)).await;
    holder
}

/// Whether process `pid` still exists.
fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

async fn end_to_end(server: &'static dyn Server) {
    let handle = ServerHandle::start(server)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", server.name()));
    let url = handle.url();
    let dir = scratch(server.name());
    runs_never_overlap(&url, &dir).await;
    the_cron_example_runs_once_at_a_time(&url).await;
    a_busy_lock_exits_like_flock_and_signals_reach_the_command(&url, &dir).await;
    force_release_stops_the_holders_command(&url, &dir).await;
    max_runtime_stops_the_command(&url, &dir).await;
    a_paused_server_stops_the_command(&url, &dir, &handle).await;
    health_answers_and_fails_while_the_server_is_down(server.backend_name(), &url, &handle).await;
    refused_credentials_and_migrations(server, &url, &handle).await;
    elect_and_observe(&url).await;
    watch_follows_the_holder(&url).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `distlock watch KEY`: the key free, then held by a `run` (its fence), then free
/// again once the run's command has finished, and the watch exits after its count.
async fn watch_follows_the_holder(url: &str) {
    use tokio::io::AsyncBufReadExt;
    let key = "cli/watched";
    let mut watcher = distlock(url, &["watch", key, "--count", "3", "--json"])
        .spawn()
        .expect("spawn");
    let out = watcher.stdout.take().expect("stdout");
    let mut seen = tokio::io::BufReader::new(out).lines();
    let free = next_json(&mut seen).await;
    assert_eq!(
        (&free["key"], &free["held"]),
        (&key.into(), &false.into()),
        "{free}"
    );
    // Held for two seconds, beyond the watch's half-second polling.
    let run = finish(url, &["run", key, "--", "sleep", "2"]).await;
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    let held = next_json(&mut seen).await;
    assert_eq!(held["held"], true, "{held}");
    assert!(held["fence"].as_u64().is_some_and(|f| f > 0), "{held}");
    let freed = next_json(&mut seen).await;
    assert_eq!(freed["held"], false, "{freed}");
    let done = timeout(Duration::from_secs(30), watcher.wait())
        .await
        .expect("exits after its count")
        .expect("status");
    assert_eq!(done.code(), Some(0));
}

/// The next line `child` prints, as JSON, within 30 s.
async fn next_json(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> serde_json::Value {
    let line = timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line within 30 s")
        .expect("stdout")
        .expect("a line before the end");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// `elect` leads until SIGTERM and then resigns (exit 0); a second campaign is not
/// elected while it leads (exit 1 at its --wait); `observe` prints the leader, then the
/// vacancy the resignation leaves.
async fn elect_and_observe(url: &str) {
    use tokio::io::AsyncBufReadExt;
    let name = "cli-election";
    let mut leader = distlock(url, &["elect", name, "10.0.0.1:80", "--json"])
        .spawn()
        .expect("spawn");
    let out = leader.stdout.take().expect("stdout");
    let mut said = tokio::io::BufReader::new(out).lines();
    let elected = next_json(&mut said).await;
    assert_eq!(elected["event"], "elected", "{elected}");
    assert_eq!(elected["value"], "10.0.0.1:80", "{elected}");

    let second = finish(url, &["elect", name, "10.0.0.2:80", "--wait", "1s"]).await;
    assert_eq!(code(&second), 1, "{}", stderr(&second));
    assert!(
        stderr(&second).contains("not elected"),
        "{}",
        stderr(&second)
    );

    let mut observer = distlock(url, &["observe", name, "--count", "2", "--json"])
        .spawn()
        .expect("spawn");
    let out = observer.stdout.take().expect("stdout");
    let mut seen = tokio::io::BufReader::new(out).lines();
    let first = next_json(&mut seen).await;
    assert_eq!(first["event"], "elected", "{first}");
    assert_eq!(first["value"], "10.0.0.1:80", "{first}");
    assert_eq!(first["term"], elected["term"], "{first}");

    let pid = leader.id().expect("a pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signalled");
    let resigned = timeout(Duration::from_secs(30), leader.wait())
        .await
        .expect("exits within 30 s")
        .expect("status");
    assert_eq!(resigned.code(), Some(0));
    let vacant = next_json(&mut seen).await;
    assert_eq!(vacant["event"], "vacant", "{vacant}");
    let done = timeout(Duration::from_secs(30), observer.wait())
        .await
        .expect("exits after its count")
        .expect("status");
    assert_eq!(done.code(), Some(0));
}

/// `examples/cron/reports.cron`'s command line, as cron would run it on two hosts at
/// once (its job, `examples/cron/build-reports`, in place of the installed path): one
/// builds the report under a fence, the other skips with 1; and a third host whose
/// cron starts after the build has finished skips too (`--at-least`).
async fn the_cron_example_runs_once_at_a_time(url: &str) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cron");
    let crontab = std::fs::read_to_string(examples.join("reports.cron")).expect("crontab");
    let line = crontab
        .lines()
        .find(|l| l.starts_with("0 * * * *"))
        .expect("the schedule line");
    // The five time fields and the user, then `distlock` and its arguments.
    let words: Vec<&str> = line.split_whitespace().skip(6).collect();
    assert_eq!(words.first(), Some(&"distlock"), "{line}");
    let job = examples.join("build-reports");
    let args: Vec<&str> = words[1..]
        .iter()
        .map(|w| match *w {
            "/usr/local/bin/build-reports" => job.to_str().expect("a path"),
            w => w,
        })
        .collect();
    let hosts: Vec<Child> = (0..2)
        .map(|_| distlock(url, &args).spawn().expect("spawn"))
        .collect();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for host in hosts {
        let output = ends(host, Duration::from_secs(60)).await;
        outcomes.push((
            code(&output),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        ));
    }
    outcomes.sort();
    assert_eq!(
        outcomes.iter().map(|(c, _)| *c).collect::<Vec<_>>(),
        [0, 1],
        "one host builds, the other skips: {outcomes:?}"
    );
    assert!(
        outcomes[0]
            .1
            .contains("building reports/hourly under fence ")
            && outcomes[0].1.contains("report written"),
        "{outcomes:?}"
    );
    // A late host, the build done: the slot is still taken.
    let late = ends(
        distlock(url, &args).spawn().expect("spawn"),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the test ran too slow to tell"
    );
    assert_eq!(
        code(&late),
        1,
        "a late host built the report again: {}",
        stderr(&late)
    );
}

/// `--max-runtime` stops a command that runs past it, as a loss does (75), and the
/// lock is free again soon after.
async fn max_runtime_stops_the_command(url: &str, dir: &Path) {
    let script = r#"trap 'echo stopped > "$0/overran"; exit 0' TERM; touch "$0/running"; while :; do sleep 0.1; done"#;
    let options = ["--ttl", "3s", "--grace", "500ms", "--max-runtime", "2s"];
    let started = Instant::now();
    let holder = holding(url, dir, &options, "cli/overrun", script, "running").await;
    let output = ends(holder, Duration::from_secs(20)).await;
    let ran = started.elapsed();
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--max-runtime"),
        "{}",
        stderr(&output)
    );
    assert!(
        dir.join("overran").exists(),
        "the command was not sent SIGTERM"
    );
    assert!(
        ran >= Duration::from_secs(2),
        "stopped before its limit: {ran:?}"
    );
    assert!(ran < Duration::from_secs(8), "stopped late: {ran:?}");
    // Free again once the holder must have stopped (a loss margin after the limit).
    let mut free = false;
    for _ in 0..50 {
        let shown = json(&finish(url, &["inspect", "--json", "cli/overrun"]).await);
        if shown["held"] == false {
            free = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        free,
        "the lock was still held 5 s after the command was stopped"
    );
}

/// Refused credentials exit 77, not 69; `migrate --print` writes PostgreSQL's tables,
/// which `migrate` creates, and says there is nothing to do elsewhere.
async fn refused_credentials_and_migrations(
    server: &'static dyn Server,
    url: &str,
    handle: &ServerHandle,
) {
    if server.has_password() {
        let wrong = url.replacen(handle.password(), "not-the-password", 1);
        let refused = finish(&wrong, &["inspect", "k"]).await;
        assert_eq!(code(&refused), 77, "{}", stderr(&refused));
        assert!(!stderr(&refused).contains(handle.password()));
    }
    let printed = finish(url, &["migrate", "--print"]).await;
    assert_eq!(code(&printed), 0, "{}", stderr(&printed));
    let sql = String::from_utf8_lossy(&printed.stdout).into_owned();
    let migrated = finish(
        &format!("{url}?table=cli_locks&migrate=false"),
        &["migrate"],
    )
    .await;
    let keeps_tables = match server.name() {
        "postgres" => Some("CREATE TABLE IF NOT EXISTS \"public\".\"distlock_locks\""),
        "mariadb" => Some("CREATE TABLE IF NOT EXISTS `distlock_locks`"),
        _ => None,
    };
    if let Some(create) = keeps_tables {
        assert!(sql.contains(create), "{sql}");
        assert_eq!(code(&migrated), 0, "{}", stderr(&migrated));
        let there = finish(&format!("{url}?table=cli_locks&migrate=false"), &["list"]).await;
        assert_eq!(code(&there), 0, "{}", stderr(&there));
    } else {
        assert!(sql.contains("keeps no tables"), "{sql}");
    }
}

/// `distlock health` exits 0 with the round trip's latency on a server that answers,
/// and 69 within its --timeout, on one line with no password, on one that is down.
async fn health_answers_and_fails_while_the_server_is_down(
    name: &str,
    url: &str,
    handle: &ServerHandle,
) {
    let ok = finish(url, &["health"]).await;
    assert_eq!(code(&ok), 0, "{}", stderr(&ok));
    let said = String::from_utf8_lossy(&ok.stdout);
    assert!(
        said.starts_with(&format!("{name}: ok, one round trip in ")),
        "{said}"
    );
    let as_json = json(&finish(url, &["health", "--json"]).await);
    assert_eq!(as_json["backend"], name);
    assert!(as_json["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0));
    handle.kill().await.expect("killed");
    let started = Instant::now();
    let down = finish(url, &["health", "--timeout", "5s"]).await;
    assert_eq!(code(&down), 69, "{}", stderr(&down));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let said = stderr(&down);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(!said.contains(handle.password()), "{said}");
    handle.start().await.expect("started again");
}

/// Four `run`s of one key, each a command that fails if another is inside: all get
/// their turn, one at a time, with increasing fences.
async fn runs_never_overlap(url: &str, dir: &Path) {
    let script = r#"mkdir "$0/inside" || exit 99
echo "$DISTLOCK_KEY $DISTLOCK_FENCE" >> "$0/fences"
sleep 0.3
rmdir "$0/inside""#;
    let started = Instant::now();
    let options = ["--ttl", "2s", "--wait", "60s"];
    let runs: Vec<Child> = (0..4)
        .map(|_| run_script(url, dir, &options, "cli/overlap", script))
        .collect();
    for run in runs {
        let output = ends(run, Duration::from_secs(60)).await;
        assert_eq!(
            code(&output),
            0,
            "a run failed (99: two inside at once): {}",
            stderr(&output)
        );
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "four 0.3 s runs overlapped"
    );
    let fences = std::fs::read_to_string(dir.join("fences")).expect("fences written");
    let fences: Vec<u64> = fences
        .lines()
        .map(|l| {
            let (key, fence) = l.split_once(' ').expect("key and fence");
            assert_eq!(key, "cli/overlap");
            fence.parse().expect("a fence")
        })
        .collect();
    assert_eq!(fences.len(), 4, "{fences:?}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not increasing: {fences:?}"
    );
}

async fn a_busy_lock_exits_like_flock_and_signals_reach_the_command(url: &str, dir: &Path) {
    let script = r#"touch "$0/busy"; exec sleep 60"#;
    let options = ["--ttl", "2s", "--payload", "nightly: report\nbuild 7"];
    let before = std::time::SystemTime::now();
    let holder = holding(url, dir, &options, "cli/busy", script, "busy").await;
    let pid = holder.id().expect("a pid");

    let started = Instant::now();
    let output = finish(url, &["run", "--no-wait", "cli/busy", "--", "true"]).await;
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(stderr(&output).contains("held"), "{}", stderr(&output));
    assert!(started.elapsed() < Duration::from_secs(10));
    let output = finish(url, &["run", "-n", "-E", "3", "cli/busy", "--", "true"]).await;
    assert_eq!(code(&output), 3, "{}", stderr(&output));
    let started = Instant::now();
    let output = finish(url, &["run", "--wait", "1s", "cli/busy", "--", "true"]).await;
    assert_eq!(code(&output), 1, "{}", stderr(&output));
    assert!(started.elapsed() >= Duration::from_secs(1));

    let shown = json(&finish(url, &["inspect", "--json", "cli/busy"]).await);
    assert_eq!(shown["held"], true, "{shown}");
    assert!(shown["fence"].as_u64().is_some_and(|f| f > 0), "{shown}");
    let ttl_ms = shown["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(ttl_ms <= 2000, "{shown}");
    // Who holds it: distlock's own process on this host, with the payload, since it
    // was granted (by the server's clock, or etcd's client's: both this host's here).
    let id = shown["holder"].as_str().expect("a holder");
    assert!(id.ends_with(&format!(":{pid}")), "{shown}");
    assert_eq!(shown["payload"], "nightly: report\nbuild 7", "{shown}");
    let granted_ms = shown["granted_at_ms"].as_u64().expect("granted_at_ms");
    let since = |t: std::time::SystemTime| {
        let since = t.duration_since(std::time::UNIX_EPOCH).expect("after 1970");
        u64::try_from(since.as_millis()).expect("ms")
    };
    assert!(
        granted_ms + 2_000 >= since(before) && granted_ms <= since(std::time::SystemTime::now()),
        "{shown}"
    );
    assert!(
        shown["granted_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{shown}"
    );
    let listed = json(&finish(url, &["list", "--json", "cli/b"]).await);
    let keys: Vec<&str> = listed
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    assert_eq!(keys, ["cli/busy"], "{listed}");
    let shown = finish(url, &["inspect", "cli/busy"]).await;
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    println!("distlock inspect cli/busy: {shown}");
    let by = format!("cli/busy: held by {id} [nightly: report\\nbuild 7] since ");
    assert!(
        shown.starts_with(&by) && shown.contains(" ago), fence ") && shown.ends_with(" s left\n"),
        "{shown}"
    );
    let text = finish(url, &["list", "cli/"]).await;
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    println!("distlock list cli/: {text}");
    assert!(
        text.starts_with("cli/busy\tfence ") && text.contains(&format!("\tby {id} [")),
        "{text:?}"
    );

    // SIGTERM to distlock reaches the command, whose exit ends the run and the lock.
    let pid = holder
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("signalled");
    let output = ends(holder, Duration::from_secs(20)).await;
    assert_eq!(code(&output), 128 + 15, "{}", stderr(&output));
    let shown = json(&finish(url, &["inspect", "--json", "cli/busy"]).await);
    assert_eq!(
        shown["held"], false,
        "released once the command ended: {shown}"
    );
}

async fn force_release_stops_the_holders_command(url: &str, dir: &Path) {
    // A command that ignores SIGTERM: SIGKILL ends it after the grace period.
    let script = r#"trap "" TERM; echo $$ > "$0/pid.new"; mv "$0/pid.new" "$0/pid"; while :; do sleep 0.1; done"#;
    let options = ["--ttl", "2s", "--grace", "1s"];
    let holder = holding(url, dir, &options, "cli/broken", script, "pid").await;
    let pid: i32 = std::fs::read_to_string(dir.join("pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");

    // Without --yes, and no terminal to ask on: refused, the lock untouched.
    let refused = finish(url, &["force-release", "cli/broken"]).await;
    assert_eq!(code(&refused), 64, "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    assert_eq!(
        json(&finish(url, &["inspect", "--json", "cli/broken"]).await)["held"],
        true
    );

    let broken_at = Instant::now();
    let broke = finish(url, &["force-release", "--yes", "cli/broken"]).await;
    assert_eq!(code(&broke), 0, "{}", stderr(&broke));
    let output = ends(holder, Duration::from_secs(20)).await;
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    assert!(stderr(&output).contains("was lost"), "{}", stderr(&output));
    // Noticed at the next renewal (a third of the ttl) or sooner, then a 1 s grace.
    assert!(
        broken_at.elapsed() < Duration::from_secs(8),
        "{:?}",
        broken_at.elapsed()
    );
    assert!(!alive(pid), "the command outlived its run");
    let again = finish(url, &["force-release", "--yes", "cli/broken"]).await;
    assert_eq!(code(&again), 1, "nothing to break: {}", stderr(&again));
}

async fn a_paused_server_stops_the_command(url: &str, dir: &Path, server: &ServerHandle) {
    let script = r#"trap 'echo stopped > "$0/stopped"; exit 0' TERM; touch "$0/paused"; while :; do sleep 0.1; done"#;
    let options = ["--ttl", "2s", "--grace", "500ms"];
    let holder = holding(url, dir, &options, "cli/paused", script, "paused").await;
    server.pause().await.expect("paused");
    let paused_at = Instant::now();
    let output = timeout(Duration::from_secs(30), holder.wait_with_output()).await;
    server.unpause().await.expect("unpaused");
    let output = output
        .expect("run did not stop its command within 30 s of the pause")
        .expect("distlock runs");
    // The command exits 0 on SIGTERM; the run's code says the lock was lost.
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    assert!(
        dir.join("stopped").exists(),
        "the command was not sent SIGTERM"
    );
    // Lost a loss margin before the 2 s lease runs out, not later.
    assert!(
        paused_at.elapsed() < Duration::from_secs(2) + Duration::from_secs(5),
        "{:?}",
        paused_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_end_to_end() {
    end_to_end(&Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_end_to_end() {
    end_to_end(&Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_end_to_end() {
    end_to_end(&MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_end_to_end() {
    end_to_end(&Etcd).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_end_to_end() {
    end_to_end(&ZooKeeper).await;
}

/// A URL whose port is an HTTP server's, on every network backend: exit 64 (the URL is
/// wrong, and no wait helps), at once, with one line that names the endpoint.
#[tokio::test]
async fn a_port_of_another_protocol_exits_64_on_every_backend() {
    let (_server, addr) =
        distlock_conformance::adoption::http_endpoint().unwrap_or_else(|e| panic!("{e}"));
    for scheme in ["redis", "postgres", "mysql", "etcd", "zk"] {
        let url = match scheme {
            "etcd" => format!("etcd://{addr}"),
            "redis" => format!("redis://:pw@{addr}"),
            _ => format!("{scheme}://u:pw@{addr}/db"),
        };
        let started = std::time::Instant::now();
        let out = finish(&url, &["inspect", "k"]).await;
        let took = started.elapsed();
        let err = stderr(&out);
        assert_eq!(code(&out), 64, "{scheme}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{scheme}: {err}");
        assert!(
            err.contains(&addr) && err.contains("protocol"),
            "{scheme}: {err}"
        );
        assert!(took < Duration::from_secs(5), "{scheme}: {took:?}");
    }
}

#[tokio::test]
async fn exit_codes_and_one_line_errors_without_a_server() {
    let memory = "memory://";
    let healthy = finish(memory, &["health"]).await;
    assert_eq!(code(&healthy), 0, "{}", stderr(&healthy));
    // Nothing listens on port 1 of this machine.
    let nobody = finish("redis://127.0.0.1:1", &["health", "--timeout", "3s"]).await;
    assert_eq!(code(&nobody), 69, "{}", stderr(&nobody));
    let own = finish(memory, &["run", "k", "--", "sh", "-c", "exit 7"]).await;
    assert_eq!(code(&own), 7);
    let signalled = finish(memory, &["run", "k", "--", "sh", "-c", "kill -9 $$"]).await;
    assert_eq!(code(&signalled), 128 + 9);
    let missing = finish(memory, &["run", "k", "--", "distlock-no-such-command"]).await;
    assert_eq!(code(&missing), 127, "{}", stderr(&missing));
    let dir = scratch("exit-codes");
    let not_executable = dir.join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\n").expect("written");
    let path = not_executable.to_str().expect("a UTF-8 path");
    let refused = finish(memory, &["run", "k", "--", path]).await;
    assert_eq!(code(&refused), 126, "{}", stderr(&refused));
    let _ = std::fs::remove_dir_all(&dir);
    // -v: grants (and losses) on stderr.
    let logged = finish(memory, &["-v", "run", "k", "--", "true"]).await;
    assert!(
        stderr(&logged).contains("lock acquired"),
        "{}",
        stderr(&logged)
    );
    let quiet = finish(memory, &["run", "k", "--", "true"]).await;
    assert_eq!(stderr(&quiet), "", "without -v, nothing");
    let env = finish(
        memory,
        &[
            "run",
            "jobs/x",
            "--",
            "sh",
            "-c",
            r#"echo "$DISTLOCK_KEY $DISTLOCK_FENCE""#,
        ],
    )
    .await;
    let shown = String::from_utf8_lossy(&env.stdout);
    assert!(
        shown.starts_with("jobs/x ") && shown.trim().ends_with(char::is_numeric),
        "{shown}"
    );
    // A process group of its own, unless --foreground.
    let group = r#"test "$(cut -d' ' -f5 /proc/$$/stat)" "$0" "$(cut -d' ' -f5 /proc/$PPID/stat)""#;
    let own = finish(memory, &["run", "k", "--", "sh", "-c", group, "!="]).await;
    assert_eq!(code(&own), 0, "the command shares distlock's group");
    let shared = finish(
        memory,
        &["run", "--foreground", "k", "--", "sh", "-c", group, "="],
    )
    .await;
    assert_eq!(
        code(&shared),
        0,
        "--foreground: the command has a group of its own"
    );
    let text = finish(memory, &["inspect", "k"]).await;
    assert_eq!(String::from_utf8_lossy(&text.stdout), "k: free\n");
    // memory:// is this process's alone, and an operator's command says so.
    assert!(
        stderr(&text).contains("memory:// is this command's own in-memory backend"),
        "{}",
        stderr(&text)
    );
    let free = json(&finish(memory, &["inspect", "--json", "k"]).await);
    assert_eq!(free, serde_json::json!({ "key": "k", "held": false }));
    let nothing = finish(memory, &["force-release", "--yes", "k"]).await;
    assert_eq!(code(&nothing), 1);

    // clap's errors in full: what is wrong, the usage, and where help is.
    for (args, names) in [
        (
            &["run", "--ttl", "2x", "k", "--", "true"][..],
            "'2x' for '--ttl <TTL>'",
        ),
        (&["run", "k"][..], "<COMMAND>"),
    ] {
        let output = finish(memory, args).await;
        let err = stderr(&output);
        assert_eq!(code(&output), 64, "{args:?}: {err}");
        assert!(err.starts_with("distlock: error: "), "{err}");
        assert!(err.contains(names) && err.contains("--help"), "{err}");
    }
    let output = finish(memory, &["run", "k"]).await;
    assert!(
        stderr(&output).contains("<KEY> -- <COMMAND>..."),
        "the usage says the command goes after --: {}",
        stderr(&output)
    );
    // The exit codes are in --help; completions for each shell.
    let help = finish(memory, &["--help"]).await;
    let shown = String::from_utf8_lossy(&help.stdout);
    assert!(
        shown.contains("Exit codes:") && shown.contains("77   the backend refused the credentials"),
        "{shown}"
    );
    for (shell, sign) in [
        ("bash", "_distlock()"),
        ("zsh", "#compdef distlock"),
        ("fish", "complete -c distlock"),
    ] {
        let output = finish(memory, &["completions", shell]).await;
        assert_eq!(code(&output), 0, "{shell}: {}", stderr(&output));
        let script = String::from_utf8_lossy(&output.stdout);
        assert!(
            script.contains(sign) && script.contains("force-release"),
            "{shell}: {script}"
        );
    }
    for (args, url) in [
        (&["run", "bad\u{7}key", "--", "true"][..], memory),
        (&["run", "--ttl", "0s", "k", "--", "true"][..], memory),
        (&["list"][..], "mongodb://app:s3cret@db.invalid/x"),
        (
            &["run", "k", "--", "true"][..],
            "redis://:s3cret@127.0.0.1:1?wait_replicas=x",
        ),
    ] {
        let output = finish(url, args).await;
        let err = stderr(&output);
        assert_eq!(code(&output), 64, "{args:?} on {url}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(err.starts_with("distlock: error: "), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    // A server that refuses connections (loopback): unavailable, not a hang.
    let started = Instant::now();
    let output = finish("redis://:s3cret@127.0.0.1:1", &["run", "k", "--", "true"]).await;
    let err = stderr(&output);
    assert_eq!(code(&output), 69, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("s3cret"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let output = finish("", &["run", "k", "--", "true"]).await;
    assert_eq!(code(&output), 64, "{}", stderr(&output));
}
