//! Semaphores, read-write locks and elections on etcd: [`PermitBackend`] for
//! [`EtcdBackend`], with leases and a transaction that compares the name's gate.
//!
//! A name's permits are keys under `<prefix>\0permits\0<name>\0`: its gate (`gate`,
//! holding the limit), one key per grant (`g\0<owner>`, on the grant's lease, so that
//! etcd deletes it when the lease runs out), one per place (`p\0<owner>`, on a lease
//! of its own) and one per term (`t\0<owner>`, on no lease). A grant reads them all,
//! decides, and commits only if the gate has not moved since the read, putting the
//! gate again: two grants on one name can never both count the same free permits.
//! A grant's fence is its key's creation revision (durable and cluster-wide); a
//! term's record is created in the same transaction, so it has the same revision.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, ChangeStream, Claim, ExtendRequest, FairBackend, Grant, OwnerToken,
    PermitBackend, PermitHolder, ReleaseOutcome, Renewal, Term, TERMS_KEPT,
};
use distlock_core::{LockKey, Result};
use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};

use crate::backend::{fence, lease_id, place_lease_id, EtcdBackend};

/// How many times a grant reads again when another grant moved the gate meanwhile.
const ATTEMPTS: usize = 8;

/// What one read of a name shows.
struct Read {
    gate: Option<KeyValue>,
    grants: Vec<KeyValue>,
    places: Vec<KeyValue>,
    terms: Vec<KeyValue>,
}

/// A grant's value: `<count>:<0|1>:<value>`.
fn grant_value(claim: &Claim) -> String {
    let (flag, value) = match claim.value() {
        Some(value) => ("1", value),
        None => ("0", ""),
    };
    format!("{}:{flag}:{value}", claim.count())
}

fn parse_grant(kv: &KeyValue) -> Option<(u32, Option<String>)> {
    let text = std::str::from_utf8(kv.value()).ok()?;
    let mut parts = text.splitn(3, ':');
    let count = parts.next()?.parse().ok()?;
    let flag = parts.next()?;
    let value = parts.next()?;
    Some((count, (flag == "1").then(|| value.to_owned())))
}

fn revision(kv: &KeyValue) -> u64 {
    u64::try_from(kv.create_revision()).unwrap_or(0)
}

impl EtcdBackend {
    fn permit_base(&self, key: &LockKey) -> String {
        format!("{}\0permits\0{}\0", self.config().prefix, key)
    }

    /// Every key of a name, in one range read.
    async fn read_permits(&self, base: &str) -> Result<Read> {
        let base = base.to_owned();
        let reply = self
            .request(|mut c| {
                let base = base.clone();
                async move { c.get(base, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let mut read = Read {
            gate: None,
            grants: Vec::new(),
            places: Vec::new(),
            terms: Vec::new(),
        };
        for kv in reply.kvs() {
            let rest = &kv.key()[base.len().min(kv.key().len())..];
            match rest.first() {
                Some(b'g') if rest.starts_with(b"gate") => read.gate = Some(kv.clone()),
                Some(b'g') => read.grants.push(kv.clone()),
                Some(b'p') => read.places.push(kv.clone()),
                Some(b't') => read.terms.push(kv.clone()),
                _ => {}
            }
        }
        read.grants.sort_by_key(revision);
        read.terms.sort_by_key(revision);
        Ok(read)
    }

    async fn keep_or_grant(&self, id: i64, ttl: Duration) -> Result<()> {
        if !self.grant_lease(id, ttl).await? {
            self.keep_alive_once(id).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl PermitBackend for EtcdBackend {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        let place = request.place();
        let base = self.permit_base(request.key());
        let owner = request.owner().to_hex();
        let (grant_key, place_key, term_key) = (
            format!("{base}g\0{owner}"),
            format!("{base}p\0{owner}"),
            format!("{base}t\0{owner}"),
        );
        let id = lease_id(request.owner());
        let fresh = self.grant_lease(id, request.ttl()).await?;
        for _ in 0..ATTEMPTS {
            let read = self.read_permits(&base).await?;
            if let Some(mine) = read
                .grants
                .iter()
                .find(|kv| kv.key() == grant_key.as_bytes())
            {
                // A retry of a grant whose reply was lost: it is ours already, while
                // the keep-alive finds its lease; gone, it took the grant with it.
                if !fresh && self.keep_alive_once(id).await?.is_none() {
                    return Ok(Grant::Held { remaining: None });
                }
                return Ok(Grant::Granted(fence(mine.create_revision())?));
            }
            let held_limit = read
                .gate
                .as_ref()
                .and_then(|g| std::str::from_utf8(g.value()).ok()?.parse::<u32>().ok());
            if !read.grants.is_empty() && held_limit.is_some_and(|l| l != claim.limit()) {
                self.revoke_now(id).await?;
                return Err(claim.limit_conflict(
                    request.key(),
                    held_limit.map(u64::from).unwrap_or_default(),
                    "etcd",
                ));
            }
            let used: u64 = read
                .grants
                .iter()
                .filter_map(parse_grant)
                .map(|(count, _)| u64::from(count))
                .sum();
            let held_back = read.places.iter().any(|kv| {
                kv.key() != place_key.as_bytes()
                    && std::str::from_utf8(kv.value())
                        .ok()
                        .and_then(|v| v.parse::<u32>().ok())
                        .is_some_and(|count| count > claim.count())
            });
            if used + u64::from(claim.count()) > u64::from(claim.limit()) || held_back {
                // Revoked before answering, not in the background: a wait's next
                // attempt, with the same owner, takes this lease again, and a revoke
                // landing after that would take it away under the grant.
                self.revoke_now(id).await?;
                if let Some(place) = place {
                    let place_id = place_lease_id(request.owner());
                    let placed = read
                        .places
                        .iter()
                        .any(|kv| kv.key() == place_key.as_bytes());
                    if placed && self.keep_alive_once(place_id).await?.is_some() {
                        // Kept: no put, which would wake every other waiter.
                        return Ok(Grant::Held { remaining: None });
                    }
                    self.keep_or_grant(place_id, place).await?;
                    let put = Txn::new().and_then([TxnOp::put(
                        place_key.clone(),
                        claim.count().to_string(),
                        Some(PutOptions::new().with_lease(place_id)),
                    )]);
                    self.txn(&put).await?;
                }
                return Ok(Grant::Held { remaining: None });
            }
            let gate = format!("{base}gate");
            let unmoved = match &read.gate {
                Some(kv) => {
                    Compare::mod_revision(gate.clone(), CompareOp::Equal, kv.mod_revision())
                }
                None => Compare::create_revision(gate.clone(), CompareOp::Equal, 0),
            };
            let mut ops = vec![
                TxnOp::put(gate, claim.limit().to_string(), None),
                TxnOp::put(
                    grant_key.clone(),
                    grant_value(claim),
                    Some(PutOptions::new().with_lease(id)),
                ),
                TxnOp::delete(place_key.clone(), None),
            ];
            if let Some(value) = claim.value() {
                let previous = read.terms.last().map_or(0, revision);
                ops.push(TxnOp::put(
                    term_key.clone(),
                    format!("{previous}:{value}"),
                    None,
                ));
                // Keep the newest terms: this one and the kept less one before it.
                let excess = (read.terms.len() + 1).saturating_sub(TERMS_KEPT);
                for old in read.terms.iter().take(excess) {
                    ops.push(TxnOp::delete(old.key().to_vec(), None));
                }
            }
            let txn = Txn::new().when([unmoved]).and_then(ops);
            let reply = self.txn(&txn).await?;
            if reply.succeeded() {
                if place.is_some() {
                    self.revoke_later(place_lease_id(request.owner()));
                }
                let revision = reply.header().map(|h| h.revision()).unwrap_or_default();
                return Ok(Grant::Granted(fence(revision)?));
            }
            // Another grant moved the gate between the read and the transaction.
        }
        self.revoke_now(id).await?;
        Ok(Grant::Held { remaining: None })
    }

    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let id = lease_id(owner);
        let grant_key = format!("{}g\0{}", self.permit_base(key), owner.to_hex());
        let txn = Txn::new()
            .when([Compare::lease(grant_key.clone(), CompareOp::Equal, id)])
            .and_then([TxnOp::delete(grant_key, None)]);
        if !self.txn(&txn).await?.succeeded() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.revoke_later(id);
        Ok(ReleaseOutcome::Released)
    }

    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        let id = lease_id(request.owner());
        let grant_key = format!(
            "{}g\0{}",
            self.permit_base(request.key()),
            request.owner().to_hex()
        );
        let check = Txn::new().when([Compare::lease(grant_key, CompareOp::Equal, id)]);
        let (kept, checked) = tokio::join!(self.keep_alive_once(id), self.txn(&check));
        let checked = checked?;
        if kept?.is_none() {
            return Ok(Renewal::NotHeld);
        }
        if !checked.succeeded() {
            self.revoke_later(id);
            return Ok(Renewal::NotHeld);
        }
        Ok(Renewal::Renewed)
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        // The lock's queue and a name's places are left alike: revoking the place's
        // lease deletes it.
        FairBackend::leave_queue(self, key, owner).await
    }

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let read = self.read_permits(&self.permit_base(key)).await?;
        let mut holders = Vec::with_capacity(read.grants.len());
        for kv in &read.grants {
            let Some((count, value)) = parse_grant(kv) else {
                continue;
            };
            let remaining = self.lease_left(kv.lease()).await;
            holders.push(PermitHolder {
                fence: fence(kv.create_revision())?,
                count,
                remaining,
                value,
            });
        }
        Ok(holders)
    }

    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        let read = self.read_permits(&self.permit_base(key)).await?;
        read.terms
            .iter()
            .filter(|kv| revision(kv) > after)
            .filter_map(|kv| {
                let text = std::str::from_utf8(kv.value()).ok()?;
                let (previous, value) = text.split_once(':')?;
                let previous = previous.parse().ok()?;
                Some(fence(kv.create_revision()).map(|fence| Term {
                    fence,
                    previous,
                    value: value.to_owned(),
                }))
            })
            .collect()
    }

    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.watch_prefix(self.permit_base(key), false)
            .await
            .map(Some)
    }
}
