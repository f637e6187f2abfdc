//! The faults a torture run injects, on a schedule: through the target's own server
//! control and the links of its clients, as the conformance suite's fault cases do.

use std::sync::Arc;
use std::time::Duration;

use distlock::{BoxError, Capabilities, FenceDurability};
use distlock_conformance::{LinkControl, ServerControl};
use tokio::time::{sleep, Instant};

use super::history::{Fault, FaultKind};

/// What the schedule can reach.
pub(crate) struct Injector {
    pub(crate) control: Option<Arc<dyn ServerControl>>,
    pub(crate) links: Vec<Arc<dyn LinkControl>>,
    pub(crate) ttl: Duration,
    pub(crate) start: Instant,
}

impl Injector {
    /// The faults this target can be given: a server control for the server's faults,
    /// links for the partition and the latency.
    pub(crate) fn available(&self) -> Vec<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(|kind| match kind {
                FaultKind::Partition | FaultKind::Latency => !self.links.is_empty(),
                FaultKind::KillConnections => self
                    .control
                    .as_ref()
                    .is_some_and(|c| c.can_kill_connections()),
                _ => self.control.is_some(),
            })
            .collect()
    }

    /// Injects one fault and waits out its length; the fault as it happened.
    pub(crate) async fn inject(
        &self,
        kind: FaultKind,
        capabilities: &Capabilities,
    ) -> Result<Fault, BoxError> {
        let begun = Instant::now();
        // Longer than the TTL, so that leases run out inside the fault.
        let long = self.ttl.mul_f64(1.5);
        let link = || self.links[rand::random_range(0..self.links.len())].clone();
        let control = || self.control.clone().ok_or("no server control");
        match kind {
            FaultKind::Pause => {
                let control = control()?;
                control.pause().await?;
                sleep(long).await;
                control.unpause().await?;
            }
            FaultKind::Partition => {
                let link = link();
                link.cut().await?;
                sleep(long).await;
                link.heal().await?;
            }
            FaultKind::Latency => {
                let link = link();
                link.set_latency(self.ttl / 20).await?;
                sleep(self.ttl * 2).await;
                link.set_latency(Duration::ZERO).await?;
            }
            FaultKind::KillConnections => control()?.kill_connections().await?,
            FaultKind::Restart => control()?.restart().await?,
            FaultKind::KillAndStart => {
                let control = control()?;
                control.kill().await?;
                sleep(self.ttl / 2).await;
                control.start().await?;
            }
        }
        let at = |i: Instant| i.saturating_duration_since(self.start).as_secs_f64();
        Ok(Fault {
            kind,
            start: at(begun),
            end: at(Instant::now()),
            declared: declared(kind, capabilities),
        })
    }

    /// Heals every link and unpauses the server, after the schedule or an error.
    pub(crate) async fn heal_all(&self) {
        for link in &self.links {
            let _ = link.heal().await;
            let _ = link.set_latency(Duration::ZERO).await;
        }
        if let Some(control) = &self.control {
            let _ = control.unpause().await;
        }
    }
}

/// What the backend's capabilities say it cannot keep through `kind`, if anything.
fn declared(kind: FaultKind, capabilities: &Capabilities) -> Option<String> {
    if !matches!(kind, FaultKind::Restart | FaultKind::KillAndStart) {
        return None;
    }
    let mut said = Vec::new();
    if !capabilities.leases_survive_restart {
        said.push("leases may be lost (capabilities.leases_survive_restart is false)");
    }
    if capabilities.fence_durability == FenceDurability::BestEffort {
        said.push("fences may go back (capabilities.fence_durability is BestEffort)");
    }
    (!said.is_empty()).then(|| said.join("; "))
}
