//! [`DockerNetwork`]: a Docker network the harness creates for its servers, and
//! removes once the last of them is gone.
//!
//! testcontainers can create a network for a container, but removes it once, best
//! effort: when Docker still counts an endpoint of the container just removed, the
//! removal fails, the failure is only logged, and the network is left behind. The
//! harness owns its networks instead and retries the removal until Docker lets it go.
//!
//! A run that is killed (Ctrl-C, `kill`) drops nothing: testcontainers' watchdog
//! removes its containers, but its networks stay. Each network is labelled with the
//! process that made it ([`OWNER_LABEL`]), and the next network the harness creates
//! on this machine first removes those whose process has exited.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use testcontainers::bollard::errors::Error as DockerError;
use testcontainers::bollard::models::NetworkCreateRequest;
use testcontainers::bollard::query_parameters::ListNetworksOptionsBuilder;
use testcontainers::bollard::Docker;

use crate::error::HarnessError;

/// How long a removal is retried for before the network is reported as left behind.
const REMOVE_WITHIN: Duration = Duration::from_secs(30);

/// The label that names the process that made a network: see [`owner`].
const OWNER_LABEL: &str = "distlock.testservers.owner";

/// A Docker network created by the harness. Each container on it holds an `Arc` of
/// it, declared after the container so that the container goes first; dropping the
/// last one removes the network.
#[derive(Debug)]
pub(crate) struct DockerNetwork {
    name: String,
}

impl DockerNetwork {
    /// Creates a network named `{prefix}-{8 random hex digits}`.
    pub(crate) async fn create(prefix: &str) -> Result<Arc<Self>, HarnessError> {
        let name = format!("{prefix}-{:08x}", rand::random::<u32>());
        let docker = connect()?;
        remove_left_behind(&docker).await;
        let labels =
            owner(std::process::id()).map(|o| HashMap::from([(OWNER_LABEL.to_owned(), o)]));
        docker
            .create_network(NetworkCreateRequest {
                name: name.clone(),
                labels,
                ..Default::default()
            })
            .await
            .map_err(|e| HarnessError::Docker(Box::new(e)))?;
        Ok(Arc::new(DockerNetwork { name }))
    }

    /// Its name, as containers join it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for DockerNetwork {
    fn drop(&mut self) {
        let name = std::mem::take(&mut self.name);
        // A thread and a runtime of its own: a drop may run inside a runtime of
        // either flavour, or outside any.
        let removal = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => return Err(format!("no runtime to remove it on: {e}")),
            };
            runtime.block_on(remove(&name))
        });
        match removal.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("distlock-testservers: a Docker network was left behind: {e}"),
            Err(_) => eprintln!("distlock-testservers: removing a Docker network panicked"),
        }
    }
}

fn connect() -> Result<Docker, HarnessError> {
    Docker::connect_with_local_defaults().map_err(|e| HarnessError::Docker(Box::new(e)))
}

/// Removes the network `name`, retrying while Docker refuses (it can still count the
/// endpoint of a container it has just removed); `Ok` once it is gone.
async fn remove(name: &str) -> Result<(), String> {
    let docker = connect().map_err(|e| e.to_string())?;
    let give_up = tokio::time::Instant::now() + REMOVE_WITHIN;
    loop {
        match docker.remove_network(name).await {
            Ok(()) => return Ok(()),
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= give_up => {
                return Err(format!("{name}: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Who process `pid` is, as [`OWNER_LABEL`] records it: this kernel's boot, this
/// process's PID namespace, the PID and the process's start time, so that a PID
/// reused by a later process does not pass for the one that made a network. `None`
/// where `/proc` does not tell (not Linux, or no such process): such networks are
/// not labelled, and never removed as left behind.
fn owner(pid: u32) -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command, field 2, is in parentheses and may hold spaces and parentheses
    // itself: the fields after the last ')' start at field 3, and the start time is
    // field 22.
    let started = stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?;
    Some(format!(
        "{}/{}/{pid}/{started}",
        boot.trim(),
        namespace.display()
    ))
}

/// The boot and PID namespace an [`owner`] label names, and its PID.
fn place_and_pid(label: &str) -> Option<(&str, &str)> {
    let (rest, _started) = label.rsplit_once('/')?;
    rest.rsplit_once('/')
}

/// Whether a network labelled `label` was made by a process of this machine and PID
/// namespace that has exited.
fn left_behind(label: &str) -> bool {
    let ours = owner(std::process::id());
    let (Some((our_place, _)), Some((their_place, pid))) = (
        ours.as_deref().and_then(place_and_pid),
        place_and_pid(label),
    ) else {
        return false;
    };
    match pid.parse::<u32>() {
        Ok(pid) if their_place == our_place => owner(pid).as_deref() != Some(label),
        _ => false,
    }
}

/// Removes, best effort and once each, the harness's networks whose process has
/// exited without removing them (a run killed midway). A network that still has a
/// container on it stays.
async fn remove_left_behind(docker: &Docker) {
    let filters = HashMap::from([("label", vec![OWNER_LABEL])]);
    let options = ListNetworksOptionsBuilder::default()
        .filters(&filters)
        .build();
    let Ok(networks) = docker.list_networks(Some(options)).await else {
        return;
    };
    for network in networks {
        let label = network.labels.as_ref().and_then(|l| l.get(OWNER_LABEL));
        if let (Some(name), Some(label)) = (network.name.as_deref(), label) {
            if left_behind(label) {
                let _ = docker.remove_network(name).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn labelled(docker: &Docker, name: &str, owner: String) {
        docker
            .create_network(NetworkCreateRequest {
                name: name.to_owned(),
                labels: Some(HashMap::from([(OWNER_LABEL.to_owned(), owner)])),
                ..Default::default()
            })
            .await
            .expect("create a network");
    }

    async fn exists(docker: &Docker, name: &str) -> bool {
        match docker.inspect_network(name, None).await {
            Ok(_) => true,
            Err(DockerError::DockerResponseServerError {
                status_code: 404, ..
            }) => false,
            Err(e) => panic!("inspect {name}: {e}"),
        }
    }

    /// A network whose process has exited is removed by the next network the harness
    /// creates; one whose process runs (this one), or one made elsewhere, stays.
    #[tokio::test]
    async fn a_network_left_by_an_exited_process_is_removed_by_the_next_run() {
        let ours = owner(std::process::id()).expect("this process, in /proc");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let gone = child.id();
        child.wait().expect("wait");
        let (place, _) = place_and_pid(&ours).expect("label");
        let tag = format!("{:08x}", rand::random::<u32>());
        let docker = connect().expect("docker");
        let (stale, reused, live, elsewhere) = (
            format!("distlock-stale-{tag}"),
            format!("distlock-reused-{tag}"),
            format!("distlock-live-{tag}"),
            format!("distlock-elsewhere-{tag}"),
        );
        labelled(&docker, &stale, format!("{place}/{gone}/1")).await;
        // This process's PID, with another start time: a process before it.
        labelled(
            &docker,
            &reused,
            format!("{place}/{}/1", std::process::id()),
        )
        .await;
        labelled(&docker, &live, ours).await;
        labelled(
            &docker,
            &elsewhere,
            format!("another-boot/pid:[1]/{gone}/1"),
        )
        .await;
        let made = DockerNetwork::create("distlock-next")
            .await
            .expect("create");
        let (stale_there, reused_there, live_there, elsewhere_there) = (
            exists(&docker, &stale).await,
            exists(&docker, &reused).await,
            exists(&docker, &live).await,
            exists(&docker, &elsewhere).await,
        );
        for name in [&stale, &reused, &live, &elsewhere] {
            let _ = docker.remove_network(name).await;
        }
        drop(made);
        assert!(!stale_there, "the exited process's network stayed");
        assert!(
            !reused_there,
            "the network of an earlier process with this PID stayed"
        );
        assert!(live_there, "a running process's network was removed");
        assert!(elsewhere_there, "another machine's network was removed");
    }
}
