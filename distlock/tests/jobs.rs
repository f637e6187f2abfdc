//! Jobs run once per schedule slot across hosts whose clocks disagree, on real
//! servers: `LockClient::run_once` keeps each slot's lock at least a while after the
//! job ends, so a host whose schedule runs behind finds the slot taken.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{Connector, LockClient, LockOptions};
use distlock_testservers::{Etcd, Postgres, Redis, Server, ServerHandle};
use tokio::time::{sleep_until, Instant};

/// The schedule: a slot every `INTERVAL`; the second host's clock runs `SKEW` behind
/// the first's, so it fires each slot that much later.
const INTERVAL: Duration = Duration::from_secs(3);
const SKEW: Duration = Duration::from_secs(1);
/// Longer than the skew, shorter than the interval less the skew.
const AT_LEAST: Duration = Duration::from_secs(2);

/// Runs `slots` slots of one job on both hosts, each host firing on its own clock;
/// `at_least` of `None` runs each slot without the least hold (a try, then release).
/// Which host ran which slot, in order.
async fn run_slots(
    hosts: &[LockClient; 2],
    job: &str,
    slots: u32,
    at_least: Option<Duration>,
) -> Vec<(u32, usize)> {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::new();
    for (host, client) in hosts.iter().enumerate() {
        let (client, runs, job) = (client.clone(), runs.clone(), job.to_owned());
        let offset = if host == 0 { Duration::ZERO } else { SKEW };
        tasks.push(tokio::spawn(async move {
            for slot in 0..slots {
                sleep_until(start + INTERVAL * slot + offset).await;
                let work = |_fence| {
                    let runs = runs.clone();
                    async move {
                        runs.lock().expect("runs").push((slot, host));
                        tokio::time::sleep(Duration::from_millis(100)).await; // the job
                    }
                };
                // A slot found taken is skipped, either way.
                match at_least {
                    Some(at_least) => {
                        let ran = client.run_once(&job, at_least, work).await;
                        if let Ok(done) = ran.expect("the backend answers") {
                            assert!(done.held_throughout(), "a slot's lease was lost");
                        }
                    }
                    None => {
                        if let Ok(guard) = client.try_lock(&job).await.expect("answers") {
                            work(guard.fence()).await;
                            guard.release().await.expect("released");
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a host's schedule");
    }
    let mut runs = runs.lock().expect("runs").clone();
    runs.sort_unstable();
    runs
}

async fn each_slot_runs_once(server: &'static dyn Server) {
    let handle = ServerHandle::start(server)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let options: LockOptions =
        serde_json::from_str(r#"{ "ttl": "2s" }"#).expect("the service's options");
    let connector = Connector::new();
    let mut hosts = Vec::new();
    for _ in 0..2 {
        let backend = connector
            .connect(&handle.url())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", server.name()));
        hosts.push(LockClient::with_options(backend, options.clone()).expect("options"));
    }
    let hosts: [LockClient; 2] = hosts.try_into().expect("two hosts");

    let once = run_slots(&hosts, "jobs/once", 3, Some(AT_LEAST)).await;
    assert_eq!(
        once,
        [(0, 0), (1, 0), (2, 0)],
        "{}: each slot ran once, on the host whose clock is ahead",
        server.name()
    );
    // The same schedule without the least hold: the late host runs each slot again.
    let twice = run_slots(&hosts, "jobs/twice", 2, None).await;
    assert_eq!(
        twice,
        [(0, 0), (0, 1), (1, 0), (1, 1)],
        "{}: without --at-least, the late host finds the key free",
        server.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_slot_runs_once_across_skewed_hosts() {
    for server in [&Redis as &'static dyn Server, &Postgres, &Etcd] {
        each_slot_runs_once(server).await;
    }
}
