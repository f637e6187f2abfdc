//! The faults a torture run injects, on a schedule: through the target's own server
//! control and the links of its clients, as the conformance suite's fault cases do.
//!
//! A fault the harness cannot inject is the harness's outcome, never a safety
//! finding: the injector waits until the servers serve again before each attempt,
//! tries a fault [`ATTEMPTS`] times, and reports one that still fails as not injected,
//! with why.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use distlock::backend::{Capabilities, FenceDurability};
use distlock::BoxError;
use distlock_conformance::{LinkControl, ServerControl};
use tokio::time::{sleep, timeout, Instant};

use super::history::{Excuses, Fault, FaultKind};

/// How many times a fault is tried before it is reported as not injected.
pub(crate) const ATTEMPTS: usize = 3;

/// How long the injector waits for the servers to serve before an attempt.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// Which of a target's servers its server faults land on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultScope {
    /// Its one server, or every server it runs on.
    Whole,
    /// `members` of Redlock's `of` masters, fewer than a majority: the contract must
    /// hold through such faults whatever the capabilities declare, so none is
    /// excused. A master restarted or killed stays down for longer than the TTL
    /// before it starts again, as Redlock's rule for masters without durable
    /// persistence requires.
    Minority { of: usize, members: usize },
    /// One of a cluster's `of` masters: the keys it serves go through the fault, as a
    /// single server's would, under the capabilities' declarations.
    OneOf { of: usize },
}

impl fmt::Display for FaultScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultScope::Whole => f.write_str("the server"),
            FaultScope::Minority { of, members } => write!(
                f,
                "{members} of {of} masters (a minority; restarted or killed, down for 1.5 TTLs before they start: Redlock's delayed restart)"
            ),
            FaultScope::OneOf { of } => write!(f, "1 of {of} cluster masters"),
        }
    }
}

/// A fault the schedule could not inject after every attempt: the harness's outcome.
#[derive(Debug, Clone)]
pub(crate) struct NotInjected {
    pub(crate) kind: FaultKind,
    pub(crate) attempts: usize,
    /// The last attempt's error.
    pub(crate) last: String,
}

impl fmt::Display for NotInjected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: not injected in {} attempts; the last said: {}",
            self.kind.label(),
            self.attempts,
            self.last
        )
    }
}

/// What the schedule can reach.
pub(crate) struct Injector {
    pub(crate) control: Option<Arc<dyn ServerControl>>,
    /// Which servers `control` reaches.
    pub(crate) scope: FaultScope,
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
                FaultKind::LostReplies => self.links.iter().any(|l| l.can_hold_replies()),
                FaultKind::KillConnections => self
                    .control
                    .as_ref()
                    .is_some_and(|c| c.can_kill_connections()),
                _ => self.control.is_some(),
            })
            .collect()
    }

    /// Injects `kind`, waiting first until the servers serve; an attempt that fails
    /// is healed (links healed, the servers unpaused and started) and tried again,
    /// up to `attempts` times. The fault as it happened and the attempts it took, or
    /// what kept it from being injected.
    pub(crate) async fn inject_retrying(
        &self,
        kind: FaultKind,
        capabilities: &Capabilities,
        attempts: usize,
    ) -> Result<(Fault, usize), NotInjected> {
        let mut last = String::new();
        for attempt in 1..=attempts {
            if attempt > 1 {
                self.recover().await;
            }
            if let Some(control) = &self.control {
                match timeout(READY_WITHIN, control.ready()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        last = format!("the servers were not ready: {e}");
                        continue;
                    }
                    Err(_) => {
                        last = format!("the servers were not ready within {READY_WITHIN:?}");
                        continue;
                    }
                }
            }
            match self.inject(kind, capabilities).await {
                Ok(fault) => return Ok((fault, attempt)),
                Err(e) => last = e.to_string(),
            }
        }
        Err(NotInjected {
            kind,
            attempts,
            last,
        })
    }

    /// After a failed attempt: heals the links, unpauses and starts the servers (a
    /// fault that failed halfway may have left them paused or down), then pauses
    /// a little.
    async fn recover(&self) {
        self.heal_all().await;
        if let Some(control) = &self.control {
            if !matches!(
                timeout(Duration::from_secs(5), control.ready()).await,
                Ok(Ok(()))
            ) {
                let _ = control.start().await;
            }
        }
        sleep(self.ttl.min(Duration::from_secs(2))).await;
    }

    /// Whether a server brought down comes back only after every lease it held has run
    /// out (more than the TTL): for a minority of Redlock's masters, whose keys a
    /// restart loses.
    fn delayed_restarts(&self) -> bool {
        matches!(self.scope, FaultScope::Minority { .. })
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
            FaultKind::LostReplies => {
                // The requests still reach the server and are applied; their replies
                // wait past the TTL, then arrive, late, all at once.
                let holding: Vec<_> = self.links.iter().filter(|l| l.can_hold_replies()).collect();
                let link = holding[rand::random_range(0..holding.len())].clone();
                link.hold_replies().await?;
                sleep(long).await;
                link.heal().await?;
            }
            FaultKind::Latency => {
                let link = link();
                // Each way a fifth of the TTL: a round trip above a third of it, the
                // renewal's period.
                link.set_latency(self.ttl / 5).await?;
                sleep(self.ttl * 2).await;
                link.set_latency(Duration::ZERO).await?;
            }
            FaultKind::KillConnections => {
                // A kill that closed no connection did not happen: tried again, then
                // reported as not injected.
                if control()?.kill_connections_counted().await? == Some(0) {
                    return Err("the connection kill closed no connection".into());
                }
            }
            // A minority of Redlock's masters restarts as Redlock's rule for masters
            // that lose their keys says it must: down for longer than the TTL, so that
            // every lease it forgets has run out before it answers again. (Restarted at
            // once, it could complete a second majority beside a lease it had been
            // part of: Kleppmann's case, which the capabilities declare and the
            // backend's docs describe, not a fault the quorum can be asked to hide.)
            FaultKind::Restart if self.delayed_restarts() => {
                let control = control()?;
                control.stop().await?;
                sleep(long).await;
                control.start().await?;
            }
            FaultKind::Restart => control()?.restart().await?,
            FaultKind::KillAndStart => {
                let control = control()?;
                control.kill().await?;
                sleep(if self.delayed_restarts() {
                    long
                } else {
                    self.ttl / 2
                })
                .await;
                control.start().await?;
            }
        }
        let at = |i: Instant| i.saturating_duration_since(self.start).as_secs_f64();
        Ok(Fault {
            kind,
            start: at(begun),
            end: at(Instant::now()),
            declared: match self.scope {
                FaultScope::Minority { .. } => None,
                FaultScope::Whole | FaultScope::OneOf { .. } => declared(kind, capabilities),
            },
            excuses: match self.scope {
                FaultScope::Minority { .. } => Excuses::default(),
                FaultScope::Whole | FaultScope::OneOf { .. } => excuses(kind, capabilities),
            },
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

/// What the backend's capabilities excuse through `kind`: only a restart or a kill
/// can lose data, and only what the capabilities declare.
fn excuses(kind: FaultKind, capabilities: &Capabilities) -> Excuses {
    if !matches!(kind, FaultKind::Restart | FaultKind::KillAndStart) {
        return Excuses::default();
    }
    Excuses {
        leases_lost: !capabilities.leases_survive_restart,
        fences_back: capabilities.fence_durability == FenceDurability::BestEffort,
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;

    /// A server control whose restart is refused `refusals` times, then done; it
    /// records when each stop, kill and start was asked.
    #[derive(Debug)]
    struct Refusing {
        refusals: AtomicUsize,
        restarts: AtomicUsize,
        readiness_asked: AtomicUsize,
        asked: std::sync::Mutex<Vec<(&'static str, Instant)>>,
    }

    impl Refusing {
        fn new(refusals: usize) -> Arc<Self> {
            Arc::new(Refusing {
                refusals: AtomicUsize::new(refusals),
                restarts: AtomicUsize::new(0),
                readiness_asked: AtomicUsize::new(0),
                asked: Default::default(),
            })
        }

        fn ask(&self, what: &'static str) {
            self.asked
                .lock()
                .expect("not poisoned")
                .push((what, Instant::now()));
        }

        /// What was asked, and how long after the first ask.
        fn asked(&self) -> Vec<(&'static str, Duration)> {
            let asked = self.asked.lock().expect("not poisoned");
            let first = asked.first().map(|(_, at)| *at);
            asked
                .iter()
                .map(|(what, at)| (*what, at.duration_since(first.unwrap_or(*at))))
                .collect()
        }
    }

    #[async_trait]
    impl ServerControl for Refusing {
        async fn pause(&self) -> Result<(), BoxError> {
            Ok(())
        }
        async fn unpause(&self) -> Result<(), BoxError> {
            Ok(())
        }
        async fn restart(&self) -> Result<(), BoxError> {
            let left = self.refusals.load(Ordering::SeqCst);
            if left > 0 {
                self.refusals.store(left - 1, Ordering::SeqCst);
                return Err("exec process exited with code 2, expected 0".into());
            }
            self.restarts.fetch_add(1, Ordering::SeqCst);
            self.ask("restart");
            Ok(())
        }
        async fn kill(&self) -> Result<(), BoxError> {
            self.ask("kill");
            Ok(())
        }
        async fn start(&self) -> Result<(), BoxError> {
            self.ask("start");
            Ok(())
        }
        async fn stop(&self) -> Result<(), BoxError> {
            self.ask("stop");
            Ok(())
        }
        async fn ready(&self) -> Result<(), BoxError> {
            self.readiness_asked.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    fn injector(control: Arc<Refusing>, scope: FaultScope) -> Injector {
        Injector {
            control: Some(control),
            scope,
            links: Vec::new(),
            ttl: Duration::from_millis(20),
            start: Instant::now(),
        }
    }

    fn restart_loses_leases() -> Capabilities {
        let mut capabilities = Capabilities::default();
        capabilities.leases_survive_restart = false;
        capabilities
    }

    #[tokio::test]
    async fn a_refused_injection_is_tried_again_once_the_server_is_ready() {
        let control = Refusing::new(1);
        let injector = injector(control.clone(), FaultScope::Whole);
        let (fault, attempts) = injector
            .inject_retrying(FaultKind::Restart, &restart_loses_leases(), ATTEMPTS)
            .await
            .expect("no error");
        assert_eq!(attempts, 2);
        assert_eq!(fault.kind, FaultKind::Restart);
        assert_eq!(control.restarts.load(Ordering::SeqCst), 1);
        // Asked before each attempt, and once while recovering from the refusal.
        assert!(control.readiness_asked.load(Ordering::SeqCst) >= 2);
        assert!(
            fault.declared.is_some(),
            "a whole server's restart declares"
        );
    }

    #[tokio::test]
    async fn an_injection_refused_every_time_is_not_injected_and_says_why() {
        let control = Refusing::new(usize::MAX);
        let injector = injector(control.clone(), FaultScope::Whole);
        let not = injector
            .inject_retrying(FaultKind::Restart, &restart_loses_leases(), ATTEMPTS)
            .await
            .expect_err("an error");
        assert_eq!((not.kind, not.attempts), (FaultKind::Restart, ATTEMPTS));
        let said = not.to_string();
        assert!(
            said.contains("restart: not injected in 3 attempts") && said.contains("code 2"),
            "{said}"
        );
        assert_eq!(control.restarts.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_minority_fault_excuses_nothing() {
        let control = Refusing::new(0);
        let scope = FaultScope::Minority { of: 3, members: 1 };
        let (fault, _) = injector(control, scope)
            .inject_retrying(FaultKind::Restart, &restart_loses_leases(), ATTEMPTS)
            .await
            .expect("no error");
        assert_eq!(fault.declared, None);
        assert_eq!(fault.excuses, Excuses::default());
        assert!(
            scope
                .to_string()
                .starts_with("1 of 3 masters (a minority; restarted or killed, down for 1.5 TTLs"),
            "{scope}"
        );
    }

    /// A minority of Redlock's masters restarted or killed stays down for longer than
    /// the TTL before it starts, so that every lease it forgot has run out (Redlock's
    /// rule): without it, the torture run found a second majority formed beside a
    /// lease the restarted master had been part of. A whole server restarts at once.
    #[tokio::test]
    async fn a_minority_of_masters_comes_back_only_after_the_ttl() {
        let ttl = Duration::from_millis(20);
        let minority = FaultScope::Minority { of: 3, members: 1 };
        for (kind, down) in [
            (FaultKind::Restart, "stop"),
            (FaultKind::KillAndStart, "kill"),
        ] {
            let control = Refusing::new(0);
            injector(control.clone(), minority)
                .inject_retrying(kind, &restart_loses_leases(), ATTEMPTS)
                .await
                .expect("no error");
            let asked = control.asked();
            let names: Vec<_> = asked.iter().map(|(what, _)| *what).collect();
            assert_eq!(names, [down, "start"], "{kind:?}");
            assert!(asked[1].1 > ttl, "{kind:?} down for {:?}", asked[1].1);
        }
        let control = Refusing::new(0);
        injector(control.clone(), FaultScope::Whole)
            .inject_retrying(FaultKind::Restart, &restart_loses_leases(), ATTEMPTS)
            .await
            .expect("no error");
        let names: Vec<_> = control.asked().iter().map(|(what, _)| *what).collect();
        assert_eq!(names, ["restart"]);
    }
}
