//! [`DockerNetwork`]: a Docker network the harness creates for its servers, and
//! removes once the last of them is gone.
//!
//! testcontainers can create a network for a container, but removes it once, best
//! effort: when Docker still counts an endpoint of the container just removed, the
//! removal fails, the failure is only logged, and the network is left behind. The
//! harness owns its networks instead and retries the removal until Docker lets it go.

use std::sync::Arc;
use std::time::Duration;

use testcontainers::bollard::errors::Error as DockerError;
use testcontainers::bollard::models::NetworkCreateRequest;
use testcontainers::bollard::Docker;

use crate::HarnessError;

/// How long a removal is retried for before the network is reported as left behind.
const REMOVE_WITHIN: Duration = Duration::from_secs(30);

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
        docker
            .create_network(NetworkCreateRequest {
                name: name.clone(),
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
