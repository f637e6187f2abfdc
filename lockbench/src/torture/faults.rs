//! The faults a torture run injects, on a schedule: through the target's own server
//! control and the links of its clients, as the conformance suite's fault cases do.
//!
//! A fault the harness cannot inject is the harness's outcome, never a safety
//! finding: the injector waits until the servers serve again before each attempt,
//! tries a fault [`ATTEMPTS`] times, and reports one that still fails as not injected,
//! with why.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::backend::{Capabilities, FenceDurability};
use distlock::BoxError;
use distlock_conformance::{LinkControl, ServerControl};
use distlock_testservers::Roles;
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
    /// One member of a replicated set of `of` (an etcd cluster, a ZooKeeper ensemble,
    /// a Redis master's set behind Sentinel), by turns: the one that leads
    /// (`leader`: "leader" or "master") two faults in three, a follower the third. A
    /// leader taken down (paused, stopped or killed) comes back only once another
    /// member leads, so that each such fault is a failover under load.
    Roles { of: usize, leader: &'static str },
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
            FaultScope::Roles { of, leader } => write!(
                f,
                "1 of {of} members by turns: the {leader} two faults in three, a follower the third; a {leader} taken down comes back once another member is {leader} (or after {SUCCESSION_WITHIN:?})"
            ),
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

/// How long a leader taken down by a fault stays down at most, waiting for another
/// member to lead.
const SUCCESSION_WITHIN: Duration = Duration::from_secs(60);

/// What the schedule can reach.
pub(crate) struct Injector {
    pub(crate) control: Option<Arc<dyn ServerControl>>,
    /// Which servers `control` reaches.
    pub(crate) scope: FaultScope,
    /// For [`FaultScope::Roles`]: the members and which of them leads.
    pub(crate) roles: Option<Arc<dyn Roles>>,
    /// How many server faults were aimed by role so far (whose turn is next).
    pub(crate) turns: AtomicUsize,
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
                FaultKind::Isolate => self.roles.is_some(),
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

    /// For a server fault under [`FaultScope::Roles`], the member it hits this time:
    /// the leader, or (every third turn) a follower chosen at random.
    async fn aim(&self, kind: FaultKind) -> Result<Option<Aim>, BoxError> {
        let Some(roles) = &self.roles else {
            return Ok(None);
        };
        if !matches!(
            kind,
            FaultKind::Pause
                | FaultKind::Restart
                | FaultKind::KillAndStart
                | FaultKind::KillConnections
                | FaultKind::Isolate
        ) {
            return Ok(None);
        }
        let members = roles.members();
        let leader = roles
            .leader()
            .await
            .ok_or_else(|| format!("no member is {}", roles.leader_word()))?;
        let turn = self.turns.fetch_add(1, Ordering::SeqCst);
        let index = if turn % 3 == 2 && members.len() > 1 {
            (leader + 1 + rand::random_range(0..members.len() - 1)) % members.len()
        } else {
            leader
        };
        Ok(Some(Aim {
            index,
            control: members[index].clone(),
            leader,
            word: roles.leader_word(),
        }))
    }

    /// After `aim`'s member, the leader, was taken down: waits until another member
    /// leads, for at most [`SUCCESSION_WITHIN`]; who, and how long after `down`.
    async fn succession(&self, aim: &Aim, down: Instant) -> Option<(usize, Duration)> {
        let roles = self.roles.as_ref()?;
        let give_up = Instant::now() + SUCCESSION_WITHIN;
        while Instant::now() < give_up {
            if let Some(new) = roles.leader().await.filter(|l| *l != aim.index) {
                return Some((new, down.elapsed()));
            }
            sleep(Duration::from_millis(200)).await;
        }
        None
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
        let aim = self.aim(kind).await?;
        let control = || -> Result<Arc<dyn ServerControl>, BoxError> {
            match &aim {
                Some(aim) => Ok(aim.control.clone()),
                None => self
                    .control
                    .clone()
                    .ok_or_else(|| "no server control".into()),
            }
        };
        // A leader taken down: the member that leads next, and when.
        let mut succeeded = None;
        let leader_down = aim.as_ref().filter(|a| a.index == a.leader);
        match kind {
            FaultKind::Pause => {
                let control = control()?;
                control.pause().await?;
                let down = Instant::now();
                sleep(long).await;
                if let Some(aim) = leader_down {
                    succeeded = self.succession(aim, down).await;
                }
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
            FaultKind::Restart if leader_down.is_some() => {
                let control = control()?;
                control.stop().await?;
                let down = Instant::now();
                if let Some(aim) = leader_down {
                    succeeded = self.succession(aim, down).await;
                }
                control.start().await?;
            }
            FaultKind::Restart => control()?.restart().await?,
            FaultKind::Isolate => {
                let (Some(roles), Some(aim)) = (&self.roles, &aim) else {
                    return Err("no replicated set to isolate a member of".into());
                };
                roles.isolate(aim.index).await?;
                let down = Instant::now();
                sleep(long).await;
                if let Some(aim) = leader_down {
                    succeeded = self.succession(aim, down).await;
                }
                roles.rejoin(aim.index).await?;
            }
            FaultKind::KillAndStart => {
                let control = control()?;
                control.kill().await?;
                let down = Instant::now();
                sleep(if self.delayed_restarts() {
                    long
                } else {
                    self.ttl / 2
                })
                .await;
                if let Some(aim) = leader_down {
                    succeeded = self.succession(aim, down).await;
                }
                control.start().await?;
            }
        }
        let hit = aim.as_ref().map(|aim| aim.describe(kind, succeeded));
        // A fault that moved the lead is a failover: what the capabilities say a
        // data-losing restart may cost, it may cost too (an unreplicated write lost
        // with the old master), and nothing more. A follower's fault is excused
        // nothing: the leader keeps what it granted.
        let as_kind = match (&aim, succeeded) {
            (Some(aim), None) if aim.index != aim.leader => None,
            (Some(_), Some(_)) => Some(FaultKind::KillAndStart),
            _ => Some(kind),
        };
        let at = |i: Instant| i.saturating_duration_since(self.start).as_secs_f64();
        Ok(Fault {
            kind,
            start: at(begun),
            end: at(Instant::now()),
            declared: match self.scope {
                FaultScope::Minority { .. } => None,
                FaultScope::Whole | FaultScope::OneOf { .. } | FaultScope::Roles { .. } => {
                    as_kind.and_then(|kind| declared(kind, capabilities))
                }
            },
            excuses: match self.scope {
                FaultScope::Minority { .. } => Excuses::default(),
                FaultScope::Whole | FaultScope::OneOf { .. } | FaultScope::Roles { .. } => {
                    as_kind.map_or_else(Excuses::default, |kind| excuses(kind, capabilities))
                }
            },
            hit,
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
        if let Some(roles) = &self.roles {
            for index in 0..roles.members().len() {
                let _ = roles.rejoin(index).await;
            }
        }
    }
}

/// The member a server fault hits under [`FaultScope::Roles`].
struct Aim {
    index: usize,
    control: Arc<dyn ServerControl>,
    /// The member that led when the fault was aimed.
    leader: usize,
    /// What the leader is called.
    word: &'static str,
}

impl Aim {
    /// For the report: the member hit, whether it led, and who led after it.
    fn describe(&self, kind: FaultKind, succeeded: Option<(usize, Duration)>) -> String {
        let role = if self.index == self.leader {
            self.word
        } else {
            "follower"
        };
        let after = match (self.index == self.leader, succeeded, kind) {
            (false, _, _) | (true, _, FaultKind::KillConnections) => String::new(),
            (true, Some((new, after)), _) => {
                format!(
                    "; member {new} was {} {:.1} s later",
                    self.word,
                    after.as_secs_f64()
                )
            }
            (true, None, _) => format!(
                "; no other member was {} within {SUCCESSION_WITHIN:?}",
                self.word
            ),
        };
        format!("{}: member {} ({role}{after})", kind.label(), self.index)
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
            roles: None,
            turns: AtomicUsize::new(0),
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

    /// A member of a replicated set for the role tests: taken down (paused, stopped,
    /// killed) while it leads, it hands the lead to the next member; every step it
    /// is asked is recorded with whether it led then.
    #[derive(Debug)]
    struct Member {
        index: usize,
        set: Arc<Set>,
    }

    #[derive(Debug, Default)]
    struct Set {
        leader: std::sync::Mutex<usize>,
        size: usize,
        asked: std::sync::Mutex<Vec<(usize, &'static str, bool)>>,
    }

    impl Member {
        fn ask(&self, what: &'static str) {
            let mut leader = self.set.leader.lock().expect("not poisoned");
            let led = *leader == self.index;
            self.set
                .asked
                .lock()
                .expect("not poisoned")
                .push((self.index, what, led));
            if led && matches!(what, "pause" | "stop" | "kill" | "isolate") {
                *leader = (self.index + 1) % self.set.size;
            }
        }
    }

    #[async_trait]
    impl ServerControl for Member {
        async fn pause(&self) -> Result<(), BoxError> {
            self.ask("pause");
            Ok(())
        }
        async fn unpause(&self) -> Result<(), BoxError> {
            self.ask("unpause");
            Ok(())
        }
        async fn restart(&self) -> Result<(), BoxError> {
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
        fn can_kill_connections(&self) -> bool {
            true
        }
        async fn kill_connections_counted(&self) -> Result<Option<usize>, BoxError> {
            self.ask("kill connections");
            Ok(Some(1))
        }
        async fn ready(&self) -> Result<(), BoxError> {
            Ok(())
        }
    }

    #[derive(Debug)]
    struct Led(Arc<Set>);

    #[async_trait]
    impl Roles for Led {
        fn members(&self) -> Vec<Arc<dyn ServerControl>> {
            (0..self.0.size)
                .map(|index| -> Arc<dyn ServerControl> {
                    Arc::new(Member {
                        index,
                        set: self.0.clone(),
                    })
                })
                .collect()
        }
        async fn leader(&self) -> Option<usize> {
            Some(*self.0.leader.lock().expect("not poisoned"))
        }
        async fn isolate(&self, index: usize) -> Result<(), BoxError> {
            Member {
                index,
                set: self.0.clone(),
            }
            .ask("isolate");
            Ok(())
        }
        async fn rejoin(&self, index: usize) -> Result<(), BoxError> {
            Member {
                index,
                set: self.0.clone(),
            }
            .ask("rejoin");
            Ok(())
        }
    }

    /// Faults aimed by role hit the leader two turns in three and a follower the
    /// third; a leader taken down comes back only once another member leads, and the
    /// report line says who was hit, in which role, and who led next. A fault that
    /// moved the lead is excused as a data-losing failover would be, and no more.
    #[tokio::test]
    async fn faults_by_role_hit_the_leader_two_turns_in_three_and_wait_for_its_successor() {
        let set = Arc::new(Set {
            size: 3,
            ..Set::default()
        });
        let control = Refusing::new(0);
        let mut injector = injector(
            control,
            FaultScope::Roles {
                of: 3,
                leader: "leader",
            },
        );
        injector.roles = Some(Arc::new(Led(set.clone())));
        let kinds = [
            FaultKind::Pause,
            FaultKind::Restart,
            FaultKind::KillAndStart,
            FaultKind::KillConnections,
            FaultKind::Isolate,
        ];
        let mut hits = Vec::new();
        for _round in 0..2 {
            for kind in kinds {
                let (fault, _) = injector
                    .inject_retrying(kind, &restart_loses_leases(), ATTEMPTS)
                    .await
                    .expect("no error");
                let hit = fault.hit.clone().expect("a fault by role names its member");
                let led = hit.contains("(leader");
                let moved = led && kind != FaultKind::KillConnections;
                assert_eq!(
                    fault.excuses.leases_lost, moved,
                    "{hit}: only a fault that moved the lead is a failover"
                );
                hits.push((kind, hit, led));
            }
        }
        let leader_hits = hits.iter().filter(|(_, _, led)| *led).count();
        assert_eq!(leader_hits, 7, "{hits:#?}");
        for (kind, hit, led) in &hits {
            if *led && *kind != FaultKind::KillConnections {
                assert!(
                    hit.contains("was leader") && hit.contains("s later"),
                    "{hit}"
                );
            }
        }
        // A leader brought back (unpaused, started) only after another member led.
        for (member, what, led) in set.asked.lock().expect("not poisoned").iter() {
            if matches!(*what, "unpause" | "start" | "rejoin") {
                assert!(
                    !led,
                    "member {member} was brought back ({what}) while it still led"
                );
            }
        }
        assert!(FaultScope::Roles {
            of: 3,
            leader: "master"
        }
        .to_string()
        .starts_with("1 of 3 members by turns: the master two faults in three"));
    }
}
