//! The simulated network: each process's client reaches the one server through a
//! [`Link`] of its own, whose every request and reply may be delayed, lost, stalled or
//! cut off, as this seed's faults draw.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, Capabilities, ChangeStream, Claim, ClockDrift, ExtendRequest, FairBackend,
    Grant, Handoffs, HolderRecords, OperatorBackend, OwnerToken, PermitBackend, PermitHolder,
    ReleaseOutcome, Renewal, SetBackend, SetGrant, Term,
};
use distlock_core::{Error, ErrorKind, LockBackend, LockInfo, LockKey, Result};
use tokio::time::Instant;

use crate::faults::Faults;
use crate::history::{Recorder, What, NET};
use crate::queue::{Queues, Timers};
use crate::rng::SimRng;

/// The network's state, shared by every link of one run.
#[derive(Debug)]
pub(crate) struct Net {
    faults: Faults,
    /// Where a server's answer that the server, asked at once, contradicts is told.
    rec: Recorder,
    /// Set once the run's faults stop: requests only meet latency from then on.
    calm: std::sync::atomic::AtomicBool,
    /// The server's timers, where fair queues are modelled: where the server keeps
    /// holders, so that a handoff's recipient can be told.
    timers: Option<Timers>,
    state: Mutex<NetState>,
}

#[derive(Debug)]
struct NetState {
    rng: SimRng,
    /// Per process: until when it is cut off (both ways, or replies only), stalled.
    procs: Vec<ProcNet>,
    /// Until when the server answers nobody (restarting, its state kept).
    server_down_until: Instant,
    /// Per key and owner, how many times the server granted or renewed it: an early
    /// end scheduled for a drifting clock applies only if none came since.
    grants: std::collections::BTreeMap<(LockKey, [u8; 16]), u64>,
    /// The fair queues as the server's applied steps say they must be.
    queues: Queues,
    /// Per key and owner, the fences the server granted it: a renewal is the
    /// owner's (contract point 5), so one sent under an earlier grant renews the
    /// owner's later grant of the same key, whose fence it answers for.
    fences: std::collections::BTreeMap<(LockKey, [u8; 16]), Vec<u64>>,
    /// Per owner, when its renewals answered `Renewed` within the last window.
    renewals: std::collections::BTreeMap<[u8; 16], std::collections::VecDeque<Instant>>,
    /// The requests sent, and what became of them, counted for the report.
    pub(crate) counts: Counts,
}

/// What the network did to the requests of one run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Requests sent.
    pub sent: u64,
    /// Requests lost on the way to the server (never applied).
    pub requests_lost: u64,
    /// Replies lost after the server applied the request.
    pub replies_lost: u64,
    /// Requests the server applied twice.
    pub duplicated: u64,
    /// Requests that met a stalled process or a server down.
    pub stalled: u64,
    /// Replies read late, by a process paused while its request was in flight.
    pub paused: u64,
    /// Restarts of the server without its state.
    pub restarts: u64,
    /// Leases and permits the server let go early, the holder's clock running slow.
    pub drifted: u64,
}

#[derive(Debug, Clone, Copy)]
struct ProcNet {
    cut_until: Instant,
    replies_cut_until: Instant,
    stalled_until: Instant,
    /// How much of the clock-drift allowance this process's clock runs slow by, in
    /// thousandths.
    drift_per_mille: u32,
}

/// The window over which a holder's renewals are counted: the renewal interval of
/// the shortest TTL the kinds take (a third of it).
const RENEWAL_WINDOW: Duration = Duration::from_millis(333);
/// The most renewals answered `Renewed` a holder may make in one window: the one it
/// schedules, and one check per quarter interval that changes to its key or name ask
/// for (so at most four), with one more for a window that straddles two intervals.
const RENEWALS_PER_WINDOW: usize = 6;

/// The key as a release (or a queue left) found it: its fence, and when the step
/// began.
#[derive(Debug, Clone, Copy)]
struct Release {
    began: Instant,
    fence: Option<u64>,
}

/// The process slot a holder identity names (`p<slot>.<life>`, as each process's
/// client stores it).
fn slot_of(holder: &str) -> Option<usize> {
    holder.strip_prefix('p')?.split('.').next()?.parse().ok()
}

/// What the network does to one request, drawn when it is sent.
struct Fate {
    out: Duration,
    back: Duration,
    lose_request: bool,
    lose_reply: bool,
    duplicate: bool,
}

impl Net {
    pub(crate) fn new(
        faults: Faults,
        mut rng: SimRng,
        procs: usize,
        rec: Recorder,
        server: &Capabilities,
    ) -> Self {
        let now = Instant::now();
        let procs = (0..procs)
            .map(|_| ProcNet {
                cut_until: now,
                replies_cut_until: now,
                stalled_until: now,
                drift_per_mille: u32::try_from(rng.below(1001)).unwrap_or(1000),
            })
            .collect();
        Net {
            faults,
            rec,
            calm: std::sync::atomic::AtomicBool::new(false),
            timers: (server.holder_records != HolderRecords::NotKept).then(|| Timers::new(server)),
            state: Mutex::new(NetState {
                rng,
                procs,
                server_down_until: now,
                grants: std::collections::BTreeMap::new(),
                queues: Queues::default(),
                fences: std::collections::BTreeMap::new(),
                renewals: std::collections::BTreeMap::new(),
                counts: Counts::default(),
            }),
        }
    }

    /// After the server granted or renewed `owner`'s lease (or permit) of `key` for
    /// `ttl` at `proc`'s request: where `proc`'s clock runs slow, ends it on the server
    /// that much before `ttl` has passed, unless granted or renewed again by then.
    fn drift(
        self: &Arc<Self>,
        server: Arc<dyn LockBackend>,
        proc: usize,
        key: &LockKey,
        owner: OwnerToken,
        ttl: Duration,
        permit: bool,
    ) {
        let share = self.proc(proc).drift_per_mille;
        let early = self
            .faults
            .clock_drift
            .allowance(ttl)
            .mul_f64(f64::from(share) / 1000.0);
        let generation = {
            let mut state = self.state();
            let generation = state
                .grants
                .entry((key.clone(), *owner.as_bytes()))
                .or_default();
            *generation += 1;
            *generation
        };
        if early.is_zero() {
            return;
        }
        let (net, key) = (self.clone(), key.clone());
        tokio::spawn(async move {
            tokio::time::sleep(ttl.saturating_sub(early)).await;
            let current = net
                .state()
                .grants
                .get(&(key.clone(), *owner.as_bytes()))
                .copied();
            if current != Some(generation) {
                return;
            }
            net.count(|c| c.drifted += 1);
            match (permit, server.permits()) {
                (true, Some(permits)) => {
                    let _ = permits.release_permits(&key, &owner).await;
                }
                _ => {
                    let before = net.before_release(&*server, &key).await;
                    let released = server.release(&key, &owner).await;
                    if let Ok(ReleaseOutcome::Released) = released {
                        net.released(&*server, &key, owner, before).await;
                    }
                }
            }
        });
    }

    fn state(&self) -> MutexGuard<'_, NetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn counts(&self) -> Counts {
        self.state().counts
    }

    /// Cuts `proc` off, both ways or its replies only, for `span` from now.
    pub(crate) fn cut(&self, proc: usize, span: Duration, replies_only: bool) {
        let until = Instant::now() + span;
        let mut state = self.state();
        let p = &mut state.procs[proc];
        if replies_only {
            p.replies_cut_until = p.replies_cut_until.max(until);
        } else {
            p.cut_until = p.cut_until.max(until);
        }
    }

    /// Stalls everything `proc` sends and receives for `span` from now, as a process
    /// frozen by a pause does.
    pub(crate) fn stall(&self, proc: usize, span: Duration) {
        let until = Instant::now() + span;
        let mut state = self.state();
        let p = &mut state.procs[proc];
        p.stalled_until = p.stalled_until.max(until);
    }

    /// The server answers nobody for `span` (a restart that keeps its state).
    pub(crate) fn server_down(&self, span: Duration) {
        let until = Instant::now() + span;
        let mut state = self.state();
        state.server_down_until = state.server_down_until.max(until);
    }

    /// Checks a lease step's answer against the server, asked at the same instant
    /// (before anything else runs): a grant's lease must be there with its fence, a
    /// key answered held must be held, a renewal's lease there with its fence, and a
    /// lease answered not held must not be. A contradiction is recorded.
    async fn check_answer(
        &self,
        server: &dyn LockBackend,
        key: &LockKey,
        answer: Answer,
        permit: bool,
    ) {
        let fence = match answer {
            Answer::Granted(fence) | Answer::Renewed(fence, ..) | Answer::NotHeld(fence) => fence,
            Answer::Held => 0,
        };
        let found = match server.permits().filter(|_| permit) {
            Some(permits) => match permits.holders(key).await {
                Ok(holders) => Some(holders.iter().map(|h| h.fence.get()).collect::<Vec<_>>()),
                Err(_) => return,
            },
            None => match server.inspect(key).await {
                Ok(info) => Some(info.map(|i| i.fence.get()).into_iter().collect()),
                Err(_) => return,
            },
        }
        .unwrap_or_default();
        let holds = |f: u64| found.contains(&f);
        // A renewal renews its owner's grant (contract point 5), whatever fence the
        // renewing guard knew: one sent by an incarnation that crashed before it
        // landed renews the grant its successor resumed the term under, as the same
        // owner. A live guard's renewal must find its own fence: otherwise it goes on
        // believing in a fence its owner no longer holds.
        let owners_grant = |owner: &OwnerToken| {
            self.state()
                .fences
                .get(&(key.clone(), *owner.as_bytes()))
                .is_some_and(|granted| granted.iter().any(|f| holds(*f)))
        };
        let wrong = match answer {
            // An unfenced grant's fence says nothing: the key must be held.
            Answer::Granted(0) | Answer::Renewed(0, ..) | Answer::Held => found.is_empty(),
            Answer::Renewed(_, owner, dead) => !(holds(fence) || dead && owners_grant(&owner)),
            Answer::Granted(_) => !holds(fence),
            Answer::NotHeld(0) => false,
            Answer::NotHeld(_) => holds(fence),
        };
        if wrong {
            self.rec.record(
                NET,
                What::Answered(format!(
                    "the server answered {} for {}, and at that instant it had {}",
                    answer.name(fence),
                    logical(key),
                    if found.is_empty() {
                        "no holder".to_owned()
                    } else {
                        format!("holders with fences {found:?}")
                    }
                )),
            );
        }
    }

    /// The server granted `owner` `key` with `fence`.
    fn granted(&self, key: &LockKey, owner: &OwnerToken, fence: u64) {
        self.state()
            .fences
            .entry((key.clone(), *owner.as_bytes()))
            .or_default()
            .push(fence);
    }

    /// Counts a restart of the server without its state, whose queues are gone too.
    pub(crate) fn count_restart(&self) {
        let mut state = self.state();
        state.counts.restarts += 1;
        state.queues.clear();
    }

    /// A fair step applied by the server for `proc`, begun at `began`: kept in the
    /// queues' model, and a grant checked against it.
    fn fair_stepped(&self, request: &AcquireRequest, proc: usize, began: Instant, grant: &Grant) {
        let (Some(timers), Some(place)) = (&self.timers, request.place()) else {
            return;
        };
        let granted = match grant {
            Grant::Granted(_) => true,
            Grant::Held { .. } => false,
            _ => return,
        };
        let unfair = self.state().queues.stepped(
            timers,
            request.key(),
            *request.owner(),
            proc,
            place,
            (began, Instant::now()),
            granted,
        );
        self.unfair(request.key(), unfair);
    }

    /// What a release (or a queue left) may hand over is judged against: the key's
    /// fence before the step, and when the step began.
    async fn before_release(&self, server: &dyn LockBackend, key: &LockKey) -> Release {
        let fence = match server.inspect(key).await {
            Ok(info) => info.map(|i| i.fence.get()),
            Err(_) => None,
        };
        Release {
            began: Instant::now(),
            fence,
        }
    }

    /// After `owner` released `key`, or left its queue: where the server handed the
    /// key over (it is held now, by a new grant), whether to the first live waiter.
    async fn released(
        &self,
        server: &dyn LockBackend,
        key: &LockKey,
        owner: OwnerToken,
        before: Release,
    ) {
        let Some(timers) = &self.timers else {
            return;
        };
        let to = match server.inspect(key).await {
            Ok(Some(info)) if Some(info.fence.get()) != before.fence => Some(
                info.holder
                    .as_ref()
                    .and_then(|h| slot_of(h.id()))
                    .unwrap_or(usize::MAX),
            ),
            Ok(_) => None,
            Err(_) => return,
        };
        let unfair =
            self.state()
                .queues
                .released(timers, key, owner, (before.began, Instant::now()), to);
        self.unfair(key, unfair);
    }

    /// `owner` left `key`'s queue, in a step begun as `before` says: its place is
    /// gone, and a grant handed to it was handed on.
    async fn left(
        &self,
        server: &dyn LockBackend,
        key: &LockKey,
        owner: OwnerToken,
        before: Release,
    ) {
        self.state().queues.left(key, owner);
        self.released(server, key, owner, before).await;
    }

    /// `owner`'s renewal of `key` was answered `Renewed`: more than
    /// [`RENEWALS_PER_WINDOW`] such in one [`RENEWAL_WINDOW`] is recorded, once per
    /// burst.
    fn renewed(&self, key: &LockKey, owner: &OwnerToken) {
        let now = Instant::now();
        let count = {
            let mut state = self.state();
            let times = state.renewals.entry(*owner.as_bytes()).or_default();
            times.push_back(now);
            while times.front().is_some_and(|t| *t + RENEWAL_WINDOW <= now) {
                times.pop_front();
            }
            times.len()
        };
        if count == RENEWALS_PER_WINDOW + 1 {
            self.rec.record(
                NET,
                What::Costly(format!(
                    "a holder of {} renewed {count} times within {RENEWAL_WINDOW:?}",
                    logical(key)
                )),
            );
        }
    }

    fn unfair(&self, key: &LockKey, unfair: Option<String>) {
        if let Some(detail) = unfair {
            self.rec
                .record(NET, What::Unfair(format!("{}: {detail}", logical(key))));
        }
    }

    /// Stops every fault from now on.
    pub(crate) fn calm(&self) {
        self.calm.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn fate(&self) -> Fate {
        let f = if self.calm.load(std::sync::atomic::Ordering::SeqCst) {
            Faults {
                latency_ms: self.faults.latency_ms,
                ..Faults::NONE
            }
        } else {
            self.faults
        };
        let mut state = self.state();
        state.counts.sent += 1;
        let rng = &mut state.rng;
        let out = rng.millis(f.latency_ms.0, f.latency_ms.1);
        let back = rng.millis(f.latency_ms.0, f.latency_ms.1);
        let slow = rng.chance(f.delay_per_mille);
        let (out, back) = if slow {
            let extra = rng.millis(0, f.delay_max_ms);
            if rng.chance(500) {
                (out + extra, back)
            } else {
                (out, back + extra)
            }
        } else {
            (out, back)
        };
        // The process paused while its request was in flight: it reads the reply
        // once it resumes, by when its clock has moved on.
        let pause = rng
            .chance(f.pause_per_mille)
            .then(|| rng.millis(f.pause_ms.0, f.pause_ms.1));
        let fate = Fate {
            out,
            back: back + pause.unwrap_or_default(),
            lose_request: rng.chance(f.lose_request_per_mille),
            lose_reply: rng.chance(f.lose_reply_per_mille),
            duplicate: rng.chance(f.duplicate_per_mille),
        };
        if pause.is_some() {
            state.counts.paused += 1;
        }
        fate
    }

    fn proc(&self, proc: usize) -> ProcNet {
        self.state().procs[proc]
    }

    fn count(&self, what: impl FnOnce(&mut Counts)) {
        what(&mut self.state().counts);
    }

    /// Waits while `proc` is stalled or the server is down.
    async fn through_stalls(&self, proc: usize) {
        loop {
            let (stalled, down) = {
                let state = self.state();
                (state.procs[proc].stalled_until, state.server_down_until)
            };
            let until = stalled.max(down);
            if until <= Instant::now() {
                return;
            }
            self.count(|c| c.stalled += 1);
            tokio::time::sleep_until(until).await;
        }
    }
}

/// One process's client of the server, across the simulated network. Each process
/// incarnation has a link of its own: a crashed one's link is dead, so that what its
/// leftover tasks send never arrives.
#[derive(Debug)]
pub struct Link {
    server: Arc<dyn LockBackend>,
    net: Arc<Net>,
    proc: usize,
    dead: Arc<std::sync::atomic::AtomicBool>,
    capabilities: Capabilities,
}

impl Link {
    pub(crate) fn new(server: Arc<dyn LockBackend>, net: Arc<Net>, proc: usize) -> Self {
        let mut capabilities = server.capabilities().clone();
        // The processes' clocks run slow by up to the simulated drift: declared on top
        // of the server's own.
        let (declared, simulated) = (capabilities.clock_drift, net.faults.clock_drift);
        capabilities.clock_drift = ClockDrift::new(
            declared.per_million.saturating_add(simulated.per_million),
            declared.fixed + simulated.fixed,
        );
        // A request can wait on the wire for the longest latency and delay: the bound
        // on a request applied after its caller gave up.
        let f = net.faults;
        let late = Duration::from_millis(f.latency_ms.1 + f.delay_max_ms);
        capabilities.applied_within = Some(match capabilities.applied_within {
            Some(bound) => bound + late,
            None => late,
        });
        Link {
            server,
            net,
            proc,
            dead: Arc::default(),
            capabilities,
        }
    }

    /// Marks this incarnation crashed: nothing it sends from now on arrives.
    pub(crate) fn kill(&self) {
        self.dead.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_dead(&self) -> bool {
        self.dead.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// One request across the network: `apply` runs on the server, in a task of its
    /// own once the request has crossed, so that a caller that gives up (drops this
    /// future) does not take back a request already on the wire.
    async fn call<T, F, Fut>(&self, apply: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(Arc<dyn LockBackend>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T>> + Send + 'static,
    {
        if self.is_dead() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "simulated: this process has crashed",
            ));
        }
        let fate = self.net.fate();
        let sent_at = Instant::now();
        let timeout = self.net.faults.response_timeout;
        self.net.through_stalls(self.proc).await;
        let lost = fate.lose_request || self.net.proc(self.proc).cut_until > Instant::now();
        if lost {
            self.net.count(|c| c.requests_lost += 1);
            tokio::time::sleep_until(sent_at + timeout).await;
            return Err(Error::new(
                ErrorKind::Timeout,
                "simulated: the request was lost on its way",
            ));
        }
        let server = self.server.clone();
        let net = self.net.clone();
        let duplicate = fate.duplicate;
        let out = fate.out;
        let applied = tokio::spawn(async move {
            // A request on the wire arrives even if its sender crashes meanwhile.
            tokio::time::sleep(out).await;
            let reply = apply(server.clone()).await;
            if duplicate {
                net.count(|c| c.duplicated += 1);
                let _ = apply(server).await;
            }
            reply
        });
        let reply = match applied.await {
            Ok(reply) => reply,
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    "simulated: the server's task ended",
                ))
            }
        };
        tokio::time::sleep(fate.back).await;
        self.net.through_stalls(self.proc).await;
        let p = self.net.proc(self.proc);
        let now = Instant::now();
        if fate.lose_reply || p.cut_until > now || p.replies_cut_until > now || self.is_dead() {
            self.net.count(|c| c.replies_lost += 1);
            tokio::time::sleep_until((sent_at + timeout).max(now)).await;
            return Err(Error::new(
                ErrorKind::Timeout,
                "simulated: the reply was lost after the server applied the request",
            ));
        }
        reply
    }

    /// A renewal across the network: of a lease, or with `permits` of a permit. Each
    /// answer is checked against the server as it is given, and a renewal answered
    /// `Renewed` is counted against the owner's renewal budget.
    async fn renewal(&self, request: &ExtendRequest, permits: bool) -> Result<Renewal> {
        let (sent, net, proc) = (request.clone(), self.net.clone(), self.proc);
        let dead = self.dead.clone();
        let renewal = self
            .call(move |s| {
                let (request, net, dead) = (sent.clone(), net.clone(), dead.clone());
                async move {
                    let renewal = if permits {
                        match s.permits() {
                            Some(p) => p.renew_permits(&request).await,
                            None => Err(unsupported("permits")),
                        }
                    } else {
                        s.renew(&request).await
                    };
                    let (key, fence) = (request.key(), request.fence().get());
                    match &renewal {
                        Ok(Renewal::Renewed) => {
                            net.check_answer(
                                &*s,
                                key,
                                Answer::Renewed(
                                    fence,
                                    *request.owner(),
                                    dead.load(std::sync::atomic::Ordering::SeqCst),
                                ),
                                permits,
                            )
                            .await;
                            net.drift(s, proc, key, *request.owner(), request.ttl(), permits);
                        }
                        Ok(Renewal::NotHeld) => {
                            net.check_answer(&*s, key, Answer::NotHeld(fence), permits)
                                .await;
                        }
                        _ => {}
                    }
                    renewal
                }
            })
            .await;
        if let Ok(Renewal::Renewed) = &renewal {
            self.net.renewed(request.key(), request.owner());
        }
        renewal
    }
}

#[async_trait]
impl LockBackend for Link {
    fn name(&self) -> &str {
        self.server.name()
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    async fn try_grant(&self, request: &AcquireRequest) -> Result<Grant> {
        let (request, net, proc) = (request.clone(), self.net.clone(), self.proc);
        self.call(move |s| {
            let (request, net) = (request.clone(), net.clone());
            async move {
                let began = Instant::now();
                let grant = s.try_grant(&request).await;
                let key = request.key();
                if let Ok(grant) = &grant {
                    net.fair_stepped(&request, proc, began, grant);
                }
                match &grant {
                    Ok(Grant::Granted(fence)) => {
                        net.granted(key, request.owner(), fence.get());
                        net.check_answer(&*s, key, Answer::Granted(fence.get()), false)
                            .await;
                        net.drift(s, proc, key, *request.owner(), request.ttl(), false);
                    }
                    // A fair step is held while others are queued ahead, too.
                    Ok(Grant::Held { .. }) if request.place().is_none() => {
                        net.check_answer(&*s, key, Answer::Held, false).await;
                    }
                    _ => {}
                }
                grant
            }
        })
        .await
    }

    async fn release(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let (key, owner, net) = (key.clone(), *owner, self.net.clone());
        self.call(move |s| {
            let (key, net) = (key.clone(), net.clone());
            async move {
                let before = net.before_release(&*s, &key).await;
                let released = s.release(&key, &owner).await;
                if let Ok(ReleaseOutcome::Released) = released {
                    net.released(&*s, &key, owner, before).await;
                }
                released
            }
        })
        .await
    }

    async fn renew(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.renewal(request, false).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<Option<LockInfo>> {
        let key = key.clone();
        self.call(move |s| {
            let key = key.clone();
            async move { s.inspect(&key).await }
        })
        .await
    }

    async fn watch(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let key = key.clone();
        self.call(move |s| {
            let key = key.clone();
            async move { s.watch(&key).await }
        })
        .await
    }

    fn fair(&self) -> Option<&dyn FairBackend> {
        self.server.fair().map(|_| self as &dyn FairBackend)
    }

    fn sets(&self) -> Option<&dyn SetBackend> {
        self.server.sets().map(|_| self as &dyn SetBackend)
    }

    fn operator(&self) -> Option<&dyn OperatorBackend> {
        self.server.operator().map(|_| self as &dyn OperatorBackend)
    }

    fn permits(&self) -> Option<&dyn PermitBackend> {
        self.server.permits().map(|_| self as &dyn PermitBackend)
    }
}

/// The server's optional feature, which the link forwards only where the server has it.
fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("simulated: the server has no {what}"),
    )
}

#[async_trait]
impl FairBackend for Link {
    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let (key, owner, net) = (key.clone(), *owner, self.net.clone());
        self.call(move |s| {
            let (key, net) = (key.clone(), net.clone());
            async move {
                let Some(fair) = s.fair() else {
                    return Err(unsupported("fair queue"));
                };
                let before = net.before_release(&*s, &key).await;
                let left = fair.leave_queue(&key, &owner).await;
                if left.is_ok() {
                    net.left(&*s, &key, owner, before).await;
                }
                left
            }
        })
        .await
    }

    async fn watch_in_turn(
        &self,
        key: &LockKey,
        owner: &OwnerToken,
    ) -> Result<Option<ChangeStream>> {
        let (key, owner) = (key.clone(), *owner);
        self.call(move |s| {
            let key = key.clone();
            async move {
                match s.fair() {
                    Some(fair) => fair.watch_in_turn(&key, &owner).await,
                    None => Err(unsupported("fair queue")),
                }
            }
        })
        .await
    }

    async fn release_in_turn(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let (key, owner, net) = (key.clone(), *owner, self.net.clone());
        self.call(move |s| {
            let (key, net) = (key.clone(), net.clone());
            async move {
                let Some(fair) = s.fair() else {
                    return Err(unsupported("fair queue"));
                };
                let before = net.before_release(&*s, &key).await;
                let released = fair.release_in_turn(&key, &owner).await;
                if let Ok(ReleaseOutcome::Released) = released {
                    net.released(&*s, &key, owner, before).await;
                }
                released
            }
        })
        .await
    }

    fn handoffs(&self) -> Option<&dyn Handoffs> {
        self.server.fair().and_then(|fair| fair.handoffs())
    }
}

#[async_trait]
impl SetBackend for Link {
    async fn try_grant_all(&self, requests: &[AcquireRequest]) -> Result<SetGrant> {
        let (requests, net, proc) = (requests.to_vec(), self.net.clone(), self.proc);
        self.call(move |s| {
            let (requests, net) = (requests.clone(), net.clone());
            async move {
                let grant = match s.sets() {
                    Some(sets) => sets.try_grant_all(&requests).await,
                    None => Err(unsupported("sets")),
                };
                if let Ok(SetGrant::Granted(fences)) = &grant {
                    for (request, fence) in requests.iter().zip(fences) {
                        net.granted(request.key(), request.owner(), fence.get());
                    }
                    for request in &requests {
                        let (key, owner) = (request.key(), *request.owner());
                        net.drift(s.clone(), proc, key, owner, request.ttl(), false);
                    }
                }
                grant
            }
        })
        .await
    }
}

#[async_trait]
impl OperatorBackend for Link {
    async fn force_release(&self, key: &LockKey) -> Result<bool> {
        let key = key.clone();
        self.call(move |s| {
            let key = key.clone();
            async move {
                match s.operator() {
                    Some(op) => op.force_release(&key).await,
                    None => Err(unsupported("operator steps")),
                }
            }
        })
        .await
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(LockKey, LockInfo)>> {
        let prefix = prefix.to_owned();
        self.call(move |s| {
            let prefix = prefix.clone();
            async move {
                match s.operator() {
                    Some(op) => op.scan(&prefix).await,
                    None => Err(unsupported("operator steps")),
                }
            }
        })
        .await
    }
}

/// Runs one permit step on the server, or fails where it has no permits.
macro_rules! on_permits {
    ($self:ident, |$p:ident| $step:expr, [$($capture:ident),*]) => {{
        $( let $capture = $capture.clone(); )*
        $self
            .call(move |s| {
                $( let $capture = $capture.clone(); )*
                async move {
                    match s.permits() {
                        Some($p) => $step.await,
                        None => Err(unsupported("permits")),
                    }
                }
            })
            .await
    }};
}

#[async_trait]
impl PermitBackend for Link {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        let (request, claim, net, proc) =
            (request.clone(), claim.clone(), self.net.clone(), self.proc);
        self.call(move |s| {
            let (request, claim, net) = (request.clone(), claim.clone(), net.clone());
            async move {
                let grant = match s.permits() {
                    Some(p) => p.try_grant_permits(&request, &claim).await,
                    None => Err(unsupported("permits")),
                };
                let key = request.key();
                match &grant {
                    Ok(Grant::Granted(fence)) => {
                        net.granted(key, request.owner(), fence.get());
                        net.check_answer(&*s, key, Answer::Granted(fence.get()), true)
                            .await;
                        net.drift(s, proc, key, *request.owner(), request.ttl(), true);
                    }
                    Ok(Grant::Held { .. }) if request.place().is_none() => {
                        net.check_answer(&*s, key, Answer::Held, true).await;
                    }
                    _ => {}
                }
                grant
            }
        })
        .await
    }

    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let (key, owner) = (key.clone(), *owner);
        on_permits!(self, |p| p.release_permits(&key, &owner), [key, owner])
    }

    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        self.renewal(request, true).await
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let (key, owner) = (key.clone(), *owner);
        on_permits!(self, |p| p.leave_queue(&key, &owner), [key, owner])
    }

    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        let (key, owner, value) = (key.clone(), *owner, value.to_owned());
        on_permits!(
            self,
            |p| p.proclaim(&key, &owner, &value),
            [key, owner, value]
        )
    }

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let key = key.clone();
        on_permits!(self, |p| p.holders(&key), [key])
    }

    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        let key = key.clone();
        on_permits!(self, |p| p.terms(&key, after), [key])
    }

    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        let key = key.clone();
        on_permits!(self, |p| p.watch_permits(&key), [key])
    }
}

/// A server's answer to a lease or permit step, to check against the server.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// Granted with this fence.
    Granted(u64),
    /// The key held by someone else.
    Held,
    /// Renewed the lease of this fence, the grant of this owner; whether the process
    /// that sent it had crashed by the time the server applied it.
    Renewed(u64, OwnerToken, bool),
    /// The lease of this fence is not held.
    NotHeld(u64),
}

impl Answer {
    fn name(self, fence: u64) -> String {
        match self {
            Answer::Granted(_) => format!("granted (fence {fence})"),
            Answer::Held => "held".to_owned(),
            Answer::Renewed(..) => format!("renewed (fence {fence})"),
            Answer::NotHeld(_) => format!("not held (fence {fence})"),
        }
    }
}

/// A key as histories name it: without the run's namespace (`run<N>/`).
fn logical(key: &LockKey) -> String {
    let key = key.as_str();
    match key.find("run") {
        Some(at) => {
            let rest = &key[at + 3..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 && rest[digits..].starts_with('/') {
                format!("{}{}", &key[..at], &rest[digits + 1..])
            } else {
                key.to_owned()
            }
        }
        None => key.to_owned(),
    }
}
