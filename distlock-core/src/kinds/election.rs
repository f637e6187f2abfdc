//! [`Election`]: leader election on a name's single permit, with campaign, observe
//! and resign.

use std::collections::VecDeque;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::Stream;
use tracing::debug;

use super::claim::permits_of;
use super::claim::Claims;
use crate::backend::{next_change, ChangeStream, DynLockBackend};
use crate::client::{Busy, LockClient, LockGuard};
use crate::error::{Error, ErrorKind, Result};
use crate::holder::Holder;
use crate::key::LockKey;
use crate::lease::{LockInfo, Renewal};
use crate::permits::{Claim, PermitHolder};
use crate::token::{FencingToken, OwnerToken};

/// A leader: its term's fencing token, the value it campaigned with, and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The term's fencing token: strictly increases from term to term.
    pub fence: FencingToken,
    /// The value it campaigned with (an address, say).
    pub value: String,
    /// Who campaigned, as stored with the term (see
    /// [`LockInfo::holder`](crate::LockInfo::holder)).
    pub holder: Option<Holder>,
    /// When the term began (see [`LockInfo::granted_at`](crate::LockInfo::granted_at)).
    pub granted_at: Option<SystemTime>,
}

/// A term as [`Election::resume`] resumes it: its fence and its owner token. Its
/// string form is `<fence>.<owner token in hex>`; parsing anything else is an
/// [`ErrorKind::Configuration`] error.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ResumeToken {
    fence: FencingToken,
    owner: OwnerToken,
}

impl ResumeToken {
    /// The fence of the term it resumes.
    pub fn fence(&self) -> FencingToken {
        self.fence
    }
}

impl std::fmt::Debug for ResumeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeToken")
            .field("fence", &self.fence)
            .field("owner", &self.owner)
            .finish()
    }
}

impl std::fmt::Display for ResumeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.fence.get(), self.owner.to_hex())
    }
}

impl std::str::FromStr for ResumeToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::new(
                ErrorKind::Configuration,
                "a resume token is `<fence>.<32 hex digits>`: this one is not",
            )
        };
        let (fence, owner) = s.split_once('.').ok_or_else(bad)?;
        let fence = fence
            .parse::<u64>()
            .ok()
            .filter(|f| *f > 0)
            .ok_or_else(bad)?;
        Ok(ResumeToken {
            fence: FencingToken::new(fence),
            owner: OwnerToken::from_hex(owner).ok_or_else(bad)?,
        })
    }
}

/// What an observer of an election sees, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observation {
    /// A leader's term began (the first item may be a term that began before the
    /// observer started).
    Elected(Leader),
    /// The leader of the last term reported changed its value
    /// ([`Leadership::proclaim`]): the same term, its new value.
    Proclaimed(Leader),
    /// Nobody leads now: the last leader resigned or its lease ran out, and nobody
    /// was elected since the observer last looked.
    Vacant,
    /// Terms were elected that the backend no longer kept when the observer looked
    /// (more than [`TERMS_KEPT`](crate::backend::TERMS_KEPT) since the last item): the items
    /// go on from the oldest kept.
    Missed,
}

/// The stream [`Election::observe`] returns. It never ends on its own; errors are
/// items (a retryable one means the observer will look again).
pub type Observations = Pin<Box<dyn Stream<Item = Result<Observation>> + Send>>;

/// Leader election across processes: one leader at a time, each term a lease with its
/// own fencing token, renewal and loss signal.
///
/// - [`campaign`](Self::campaign) waits to become the leader, with a value such as
///   an address, and returns the [`Leadership`];
/// - [`observe`](Self::observe) streams every term in order, as [`Observation`]s:
///   every leader, each once, in the order of their fences, even one whose term was
///   shorter than the observer's look; and when the election is vacant;
/// - [`Leadership::resign`] ends the term; [`LockGuard::lost`] (through the
///   leadership) tells the leader when its lease ran out under it.
///
/// It runs on every backend, in one of two ways ([`records_terms`](Self::records_terms)
/// says which):
///
/// - **Recorded terms**, where the backend has permits
///   ([`LockBackend::permits`](crate::LockBackend::permits)): the name's permits with a
///   limit of one, each campaign's value recorded as a term
///   ([`PermitBackend`](crate::backend::PermitBackend) points 1 and 5). Everything
///   above holds.
/// - **A lease**, where it has none (Redlock, MySQL/MariaDB, ZooKeeper): each term is a
///   lease on the lock key `election/<name>` ([`LEASE_ELECTION_PREFIX`]), with the
///   campaign's value stored as its holder's payload in place of the client's
///   ([`LockOptions::with_holder`](crate::LockOptions::with_holder); where the backend
///   keeps no holders, [`Leader::value`] reads empty); one leader at a
///   time, fences, renewal, the loss signal and resigning are the lock's. No terms are
///   recorded, so an observer sees the leaders that hold the lease when it looks: a
///   term that begins and ends between two looks is not seen, and no
///   [`Observation::Missed`] marks it. [`Leadership::proclaim`] is unsupported. The
///   value must also be a valid holder payload (no URL with a password).
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use futures_util::StreamExt;
/// use distlock_core::{LockClient, MemoryBackend, Observation};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> distlock_core::Result<()> {
/// let election = LockClient::new(Arc::new(MemoryBackend::new())).election("scheduler")?;
/// let mut observer = election.observe();
/// assert_eq!(observer.next().await.transpose()?, Some(Observation::Vacant));
/// let leadership = election.campaign("10.0.0.7:8080", Duration::from_secs(1)).await?;
/// let Some(Observation::Elected(leader)) = observer.next().await.transpose()? else {
///     panic!("an election")
/// };
/// assert_eq!((leader.value.as_str(), leader.fence), ("10.0.0.7:8080", leadership.fence()));
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    claims: Claims,
    /// The lock key each term holds, where the backend has no permits.
    lease: Option<LockKey>,
}

/// What the lock key of an election that runs over a lease starts with: the election
/// `scheduler` holds the key `election/scheduler` (see [`Election`]).
pub const LEASE_ELECTION_PREFIX: &str = "election/";

impl LockClient {
    /// An election on `name`, on this client's backend, sharing what a
    /// [`semaphore`](Self::semaphore) shares (a term's lease lasts the client's TTL
    /// past the leader's last renewal); the same errors but the limit's. Where the
    /// backend has no permits, the election runs over a lease on the lock key
    /// `election/<name>` (an [`ErrorKind::InvalidKey`] error when that key is too long).
    pub fn election(&self, name: &str) -> Result<Election> {
        if self.raw().permits().is_some() {
            return Ok(Election {
                claims: Claims::new(self, name)?,
                lease: None,
            });
        }
        let claims = Claims::sharing(self, name, self.options().clone())?;
        let lease = LockKey::new(format!("{LEASE_ELECTION_PREFIX}{name}"))?;
        Ok(Election {
            claims,
            lease: Some(lease),
        })
    }
}

impl Election {
    /// The name.
    pub fn name(&self) -> &LockKey {
        self.claims.name()
    }

    /// Waits up to `wait` to become the leader, with `value` for observers (at most
    /// [`MAX_CLAIM_VALUE`](crate::backend::MAX_CLAIM_VALUE) bytes, no NUL: otherwise a
    /// configuration error).
    pub async fn campaign(&self, value: &str, wait: Duration) -> Result<Leadership> {
        let claim = Claim::new(1, 1)?.with_value(value)?;
        let guard = match &self.lease {
            None => self.claims.acquire(claim, wait).await?,
            Some(key) => self.lease_client(value)?.lock(key.as_str(), wait).await?,
        };
        Ok(self.leadership(guard, value))
    }

    /// Tries once to become the leader: [`Busy`] while another leads.
    pub async fn try_campaign(&self, value: &str) -> Result<std::result::Result<Leadership, Busy>> {
        let claim = Claim::new(1, 1)?.with_value(value)?;
        let guard = match &self.lease {
            None => self.claims.try_acquire(claim).await?,
            Some(key) => self.lease_client(value)?.try_lock(key.as_str()).await?,
        };
        Ok(guard.map(|guard| self.leadership(guard, value)))
    }

    /// Resumes the term `token` names, after a restart of the process that led it
    /// (etcd's `ResumeElection`): one try, as that term's owner, with `value` for
    /// observers (checked as a campaign's).
    ///
    /// - While that term's lease lives, the backend grants it again to its owner: the
    ///   returned leadership is the same term, [`fence`](LockGuard::fence) equal to
    ///   [`ResumeToken::fence`], its expiry restarted, renewed from now on as a
    ///   campaign's is. On an election that records terms its value stays the one the
    ///   term last had on the server; `value` is what this leadership reports.
    /// - Once it ran out: [`Busy`] while another leads; where nobody does, a new term,
    ///   with a fence above the token's, as [`try_campaign`](Self::try_campaign) would
    ///   win.
    ///
    /// A resumed term is fenced as any: a write its earlier process made under the
    /// same fence is indistinguishable from its own, so a process that resumes should
    /// hold nothing it did not write down before it stopped.
    ///
    /// The token is the term's owner, and whoever presents it is: two live processes
    /// that resume the same token both lead the same term, with one fence, and
    /// nothing (not the fence, not the backend) tells them apart. Hand a token to one
    /// process only, the one that replaces the process that wrote it, and only once
    /// that process has stopped.
    pub async fn resume(
        &self,
        token: &ResumeToken,
        value: &str,
    ) -> Result<std::result::Result<Leadership, Busy>> {
        let claim = Claim::new(1, 1)?.with_value(value)?;
        let guard = match &self.lease {
            None => self.claims.try_acquire_as(claim, token.owner).await?,
            Some(key) => {
                self.lease_client(value)?
                    .try_lock_as(key.as_str(), token.owner)
                    .await?
            }
        };
        Ok(guard.map(|guard| self.leadership(guard, value)))
    }

    /// Whether the backend records each term, so that observers see every leader and
    /// leaders can [`proclaim`](Leadership::proclaim); otherwise the election runs
    /// over a lease (see [`Election`]).
    pub fn records_terms(&self) -> bool {
        self.lease.is_none()
    }

    /// The client of a campaign over a lease: its grants store the holder of the
    /// client's options with `value` as the payload.
    fn lease_client(&self, value: &str) -> Result<LockClient> {
        let holder = self.claims.options().holder().with_payload(value)?;
        self.claims.lease_client(holder)
    }

    fn leadership(&self, guard: LockGuard, value: &str) -> Leadership {
        Leadership {
            guard,
            value: value.to_owned(),
            backend: self.claims.backend().clone(),
            records_terms: self.records_terms(),
        }
    }

    /// Waits for the releases and cleanups this election (and its clones) runs in the
    /// background; as [`LockClient::flush`](crate::LockClient::flush).
    pub async fn flush(&self) {
        self.claims.flush().await;
    }

    /// The current leader, if any: a snapshot.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        match &self.lease {
            None => Ok(leader_of(self.claims.holders().await?)),
            Some(key) => Ok(self
                .claims
                .backend()
                .inspect(key)
                .await?
                .map(leader_of_lease)),
        }
    }

    /// Every term from now on, in order (see [`Observation`]). It looks when the
    /// backend reports a change ([`Capabilities::change_notification`](crate::backend::Capabilities::change_notification)),
    /// and otherwise every [`LockOptions::backoff_max`](crate::LockOptions::backoff_max) (500 ms by default); the
    /// recorded terms make sure no leader is skipped between looks.
    pub fn observe(&self) -> Observations {
        let observer = Observer {
            backend: self.claims.backend().clone(),
            name: self.claims.name().clone(),
            lease: self.lease.clone(),
            every: self.claims.options().backoff_max(),
            last: None,
            vacant: false,
            value: None,
            ready: VecDeque::new(),
            changes: None,
            looked: false,
        };
        Box::pin(futures_util::stream::unfold(observer, |mut o| async move {
            let item = o.next().await;
            Some((item, o))
        }))
    }
}

/// The leader of an election over a lease: the lease's holder, whose payload is the
/// value (the holder is shown without it).
fn leader_of_lease(info: LockInfo) -> Leader {
    let value = info.holder.as_ref().and_then(Holder::payload);
    Leader {
        fence: info.fence,
        value: value.unwrap_or_default().to_owned(),
        holder: info.holder.as_ref().and_then(|h| Holder::new(h.id()).ok()),
        granted_at: info.granted_at,
    }
}

fn leader_of(holders: Vec<PermitHolder>) -> Option<Leader> {
    let holder = holders.into_iter().last()?;
    Some(Leader {
        fence: holder.fence,
        value: holder.value.unwrap_or_default(),
        holder: holder.holder,
        granted_at: holder.granted_at,
    })
}

/// A term as leader: a [`LockGuard`] (its fence, [`lost`](LockGuard::lost) signal and
/// renewal) and the value it campaigned with. Dropping it resigns in the background.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns"]
pub struct Leadership {
    guard: LockGuard,
    value: String,
    backend: Arc<DynLockBackend>,
    records_terms: bool,
}

impl Leadership {
    /// The value it campaigned with, or last [proclaimed](Self::proclaim).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Changes the value observers read to `value` (etcd's `Proclaim`), fenced by
    /// this term: the server changes it only while this term lasts, so a leader whose
    /// term ended cannot change what its successor's observers read. Observers see it
    /// as [`Observation::Proclaimed`] (the latest value, where several came between
    /// two looks); [`Election::leader`] answers it at once.
    ///
    /// A configuration error for a value a campaign would refuse; an
    /// [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld) error, with nothing changed,
    /// once the term is over; an [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)
    /// error where the backend cannot (an election over a lease, see
    /// [`Election::records_terms`]; or see
    /// [`PermitBackend::proclaim`](crate::backend::PermitBackend::proclaim)).
    pub async fn proclaim(&mut self, value: &str) -> Result<()> {
        Claim::new(1, 1)?.with_value(value)?;
        if !self.records_terms {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "the {} backend keeps no election terms: a leader's value is fixed for its term",
                    self.backend.name()
                ),
            )
            .with_backend(self.backend.name().to_owned()));
        }
        let term_over = || {
            Error::new(
                ErrorKind::NotHeld,
                format!(
                    "the term of {:?} with fence {} is over",
                    self.guard.key().as_str(),
                    self.guard.fence()
                ),
            )
        };
        // Asked of the server even where this client counts the term lost: the
        // server's answer is the one that fences it.
        let permits = permits_of(&*self.backend)?;
        match permits
            .proclaim(self.guard.key(), &self.guard.owner(), value)
            .await?
        {
            Renewal::Renewed => {
                self.value = value.to_owned();
                Ok(())
            }
            Renewal::NotHeld => Err(term_over()),
        }
    }

    /// Ends the term, so that another candidate can be elected at once; as
    /// [`LockGuard::release`] (an [`ErrorKind::NotHeld`](crate::ErrorKind::NotHeld)
    /// error when the term had already run out).
    pub async fn resign(self) -> Result<()> {
        self.guard.release().await
    }

    /// What [`Election::resume`] takes to resume this term after the process restarts:
    /// write its string form ([`Display`](std::fmt::Display)) somewhere that outlives
    /// the process, and read it back with [`str::parse`]. It carries the term's owner
    /// token, with which a process can renew or end the term: keep it as a credential
    /// is kept (its `Debug` form hides it).
    pub fn resume_token(&self) -> ResumeToken {
        ResumeToken {
            fence: self.guard.fence(),
            owner: self.guard.owner(),
        }
    }

    /// The guard of the term's lease.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

impl Deref for Leadership {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

struct Observer {
    backend: Arc<DynLockBackend>,
    name: LockKey,
    /// The lock key of an election over a lease.
    lease: Option<LockKey>,
    every: Duration,
    /// The fence of the last term reported, or the baseline it started from.
    last: Option<u64>,
    /// The value last reported for that term.
    value: Option<String>,
    vacant: bool,
    ready: VecDeque<Observation>,
    changes: Option<ChangeStream>,
    looked: bool,
}

impl Observer {
    async fn next(&mut self) -> Result<Observation> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Ok(item);
            }
            if self.looked {
                tokio::select! {
                    () = tokio::time::sleep(self.every) => {}
                    change = next_change(&mut self.changes) => {
                        if change.is_none() {
                            debug!("change notifications ended; polling instead");
                            self.changes = None;
                        }
                    }
                }
            } else if self.backend.capabilities().change_notification {
                let watched = match &self.lease {
                    Some(key) => self.backend.watch(key).await,
                    None => permits_of(&*self.backend)?.watch_permits(&self.name).await,
                };
                self.changes = match watched {
                    Ok(changes) => changes,
                    Err(error) => {
                        debug!(%error, "cannot watch the election; polling instead");
                        None
                    }
                };
            }
            self.looked = true;
            self.look().await?;
        }
    }

    /// Reads the terms since the last one reported, then whether anyone leads.
    async fn look(&mut self) -> Result<()> {
        if let Some(key) = &self.lease {
            let leader = self.backend.inspect(key).await?.map(leader_of_lease);
            self.saw(leader);
            return Ok(());
        }
        let permits = permits_of(&*self.backend)?;
        let after = self.last.unwrap_or(0);
        let terms = permits.terms(&self.name, after).await?;
        let holders = permits.holders(&self.name).await?;
        match self.last {
            None => {
                // The first look: the current leader, if any, is the first item; the
                // terms before it are history.
                let baseline = terms.last().map_or(0, |t| t.fence.get());
                match leader_of(holders) {
                    Some(leader) => {
                        self.last = Some(leader.fence.get().max(baseline));
                        self.value = Some(leader.value.clone());
                        self.ready.push_back(Observation::Elected(leader));
                    }
                    None => {
                        self.last = Some(baseline);
                        self.vacant = true;
                        self.ready.push_back(Observation::Vacant);
                    }
                }
            }
            Some(last) => {
                let mut last = last;
                for term in terms {
                    // Each term names the one before it: a gap is terms not kept.
                    if term.previous != last {
                        self.ready.push_back(Observation::Missed);
                    }
                    last = term.fence.get();
                    self.last = Some(last);
                    self.value = Some(term.value.clone());
                    self.vacant = false;
                    self.ready.push_back(Observation::Elected(Leader {
                        fence: term.fence,
                        value: term.value,
                        holder: term.holder,
                        granted_at: term.granted_at,
                    }));
                }
                // The leader of the last term reported changed its value.
                if let Some(leader) = holders.last().filter(|h| h.fence.get() == last) {
                    if leader.value.is_some() && leader.value != self.value {
                        self.value.clone_from(&leader.value);
                        self.ready.push_back(Observation::Proclaimed(Leader {
                            fence: leader.fence,
                            value: leader.value.clone().unwrap_or_default(),
                            holder: leader.holder.clone(),
                            granted_at: leader.granted_at,
                        }));
                    }
                }
                if holders.is_empty() && !self.vacant {
                    self.vacant = true;
                    self.ready.push_back(Observation::Vacant);
                }
            }
        }
        Ok(())
    }

    /// One look at an election over a lease: the leader holding it now, if any.
    /// Reported when its fence is above the last reported; a vacancy once.
    fn saw(&mut self, leader: Option<Leader>) {
        match leader {
            Some(leader) if self.last.is_none_or(|last| leader.fence.get() > last) => {
                self.last = Some(leader.fence.get());
                self.value = Some(leader.value.clone());
                self.vacant = false;
                self.ready.push_back(Observation::Elected(leader));
            }
            Some(_) => {}
            None if !self.vacant => {
                self.vacant = true;
                if self.last.is_none() {
                    self.last = Some(0);
                }
                self.ready.push_back(Observation::Vacant);
            }
            None => {}
        }
    }
}
