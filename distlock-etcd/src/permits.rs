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

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use distlock_core::backend::{tag_holder, untag_holder};
use distlock_core::backend::{
    AcquireRequest, ChangeStream, Claim, ExtendRequest, FairBackend, Grant, OwnerToken,
    PermitBackend, PermitHolder, ReleaseOutcome, Renewal, Term, TERMS_KEPT,
};
use distlock_core::{Holder, LockKey, Result};
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};

use crate::backend::{check_txn, fence, lease_id, place_lease_id, EtcdBackend};

/// How many times a grant reads again when another grant moved the gate meanwhile.
const ATTEMPTS: usize = 8;

/// What one read of a name shows.
struct Read {
    gate: Option<KeyValue>,
    grants: Vec<KeyValue>,
    places: Vec<KeyValue>,
    terms: Vec<KeyValue>,
}

/// A grant's value: `<count>:<0|1>:<value>`, the holder tagged on the flag
/// ([`tag_holder`]), with the grant's time by this client's clock.
fn grant_value(claim: &Claim, holder: &Holder, at: SystemTime) -> String {
    let (flag, value) = match claim.value() {
        Some(value) => ("1", value),
        None => ("0", ""),
    };
    let (flag, front) = tag_holder(flag, holder, at);
    format!("{}:{flag}:{front}{value}", claim.count())
}

/// A grant's count, value, holder and grant time.
type Granted = (u32, Option<String>, Option<Holder>, Option<SystemTime>);

fn parse_grant(kv: &KeyValue) -> Option<Granted> {
    let text = std::str::from_utf8(kv.value()).ok()?;
    let mut parts = text.splitn(3, ':');
    let count = parts.next()?.parse().ok()?;
    let (flag, holder, granted_at, value) = untag_holder(parts.next()?, parts.next()?)?;
    Some((
        count,
        (flag == "1").then(|| value.to_owned()),
        holder,
        granted_at,
    ))
}

/// A grant's (`fields` 2: `<count>:<flag>`) or a term's (`fields` 1: `<previous>`)
/// record with `value` in place of its value, its holder kept; a grant's flag becomes
/// `1`, since it now carries a value. `None` for a record that does not read.
fn with_value(record: &[u8], fields: usize, value: &str) -> Option<String> {
    let text = std::str::from_utf8(record).ok()?;
    let mut parts = text.splitn(fields + 1, ':');
    let mut head: Vec<&str> = (0..fields).map(|_| parts.next()).collect::<Option<_>>()?;
    let last = head.pop()?;
    let (last, holder, granted_at, _) = untag_holder(last, parts.next()?)?;
    let last = if fields == 2 { "1" } else { last };
    let (tag, front) = match (&holder, granted_at) {
        (Some(holder), Some(at)) => tag_holder(last, holder, at),
        _ => (last.to_owned(), ""),
    };
    head.push(&tag);
    Some(format!("{}:{front}{value}", head.join(":")))
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
        // Granted fresh, or restarted where an earlier step of this owner left it live
        // (with or without its grant on it): the expiry the client counts from this
        // step is the server's.
        self.restart_lease(id, request.ttl()).await?;
        for _ in 0..ATTEMPTS {
            let read = self.read_permits(&base).await?;
            if let Some(mine) = read
                .grants
                .iter()
                .find(|kv| kv.key() == grant_key.as_bytes())
            {
                // A retry of a grant whose reply was lost: it is ours already, on the
                // lease just restarted.
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
                .map(|(count, ..)| u64::from(count))
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
                    self.txn_with_live_leases(&put).await?;
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
            let at = SystemTime::now();
            let mut ops = vec![
                TxnOp::put(gate, claim.limit().to_string(), None),
                TxnOp::put(
                    grant_key.clone(),
                    grant_value(claim, request.holder(), at),
                    Some(PutOptions::new().with_lease(id)),
                ),
                TxnOp::delete(place_key.clone(), None),
            ];
            if let Some(value) = claim.value() {
                let previous = read.terms.last().map_or(0, revision);
                let (previous, front) = tag_holder(&previous.to_string(), request.holder(), at);
                ops.push(TxnOp::put(
                    term_key.clone(),
                    format!("{previous}:{front}{value}"),
                    None,
                ));
                // Keep the newest terms: this one and the kept less one before it.
                let excess = (read.terms.len() + 1).saturating_sub(TERMS_KEPT);
                for old in read.terms.iter().take(excess) {
                    ops.push(TxnOp::delete(old.key().to_vec(), None));
                }
            }
            let txn = Txn::new().when([unmoved]).and_then(ops);
            let reply = self.txn_with_live_leases(&txn).await?;
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
        let check = check_txn(
            [Compare::lease(grant_key.clone(), CompareOp::Equal, id)],
            grant_key,
        );
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

    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        let base = self.permit_base(key);
        let hex = owner.to_hex();
        let (grant_key, term_key) = (format!("{base}g\0{hex}"), format!("{base}t\0{hex}"));
        let id = lease_id(owner);
        // The grant and its term read, then both written only if the grant is as read
        // and still on this owner's lease: a few times, where another write came
        // between.
        for _ in 0..ATTEMPTS {
            let read = Txn::new().and_then([
                TxnOp::get(grant_key.clone(), None),
                TxnOp::get(term_key.clone(), None),
            ]);
            let reply = self.txn(&read).await?;
            let mut found = reply.op_responses().into_iter().map(|op| match op {
                TxnOpResponse::Get(got) => got.kvs().first().cloned(),
                _ => None,
            });
            let (grant, term) = (found.next().flatten(), found.next().flatten());
            let Some(grant) = grant.filter(|g| g.lease() == id) else {
                return Ok(Renewal::NotHeld);
            };
            let Some(new_grant) = with_value(grant.value(), 2, value) else {
                return Ok(Renewal::NotHeld);
            };
            let mut ops = vec![TxnOp::put(
                grant_key.clone(),
                new_grant,
                Some(PutOptions::new().with_lease(id)),
            )];
            // The term this grant recorded: created in the grant's transaction.
            if let Some(term) = term.filter(|t| t.create_revision() == grant.create_revision()) {
                if let Some(new_term) = with_value(term.value(), 1, value) {
                    ops.push(TxnOp::put(term_key.clone(), new_term, None));
                }
            }
            let write = Txn::new()
                .when([
                    Compare::mod_revision(
                        grant_key.clone(),
                        CompareOp::Equal,
                        grant.mod_revision(),
                    ),
                    Compare::lease(grant_key.clone(), CompareOp::Equal, id),
                ])
                .and_then(ops);
            match self.txn_on_leases(&write).await? {
                Some(reply) if reply.succeeded() => return Ok(Renewal::Renewed),
                Some(_) => {}
                // The lease ran out since the read: the grant went with it.
                None => return Ok(Renewal::NotHeld),
            }
        }
        Ok(Renewal::NotHeld)
    }

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let read = self.read_permits(&self.permit_base(key)).await?;
        let mut holders = Vec::with_capacity(read.grants.len());
        for kv in &read.grants {
            let Some((count, value, holder, granted_at)) = parse_grant(kv) else {
                continue;
            };
            let remaining = self.lease_left(kv.lease()).await;
            holders.push(
                PermitHolder::new(fence(kv.create_revision())?, count, remaining, value)
                    .held_by(holder, granted_at),
            );
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
                let (previous, rest) = text.split_once(':')?;
                let (previous, holder, granted_at, value) = untag_holder(previous, rest)?;
                let previous = previous.parse().ok()?;
                Some(fence(kv.create_revision()).map(|fence| {
                    Term::new(fence, previous, value.to_owned()).held_by(holder, granted_at)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proclaimed_value_keeps_the_count_the_holder_and_the_grant_time() {
        let holder = Holder::new("api:1")
            .and_then(|h| h.with_payload("a:b"))
            .expect("holder");
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_500);
        let claim = Claim::new(1, 1)
            .and_then(|c| c.with_value("old:80"))
            .expect("claim");
        let grant = grant_value(&claim, &holder, at);
        let proclaimed = with_value(grant.as_bytes(), 2, "new:81").expect("a record");
        let (_, rest) = proclaimed.split_once(':').expect("count");
        let (flag, rest) = rest.split_once(':').expect("flag");
        assert_eq!(
            untag_holder(flag, rest),
            Some(("1", Some(holder.clone()), Some(at), "new:81"))
        );
        // A term, and a grant of an earlier version (no holder, no value).
        let (previous, front) = tag_holder("7", &holder, at);
        let term = format!("{previous}:{front}old:80");
        let proclaimed = with_value(term.as_bytes(), 1, "new:81").expect("a record");
        assert_eq!(proclaimed, format!("{previous}:{front}new:81"));
        assert_eq!(with_value(b"1:0:", 2, "v").as_deref(), Some("1:1:v"));
        assert_eq!(with_value(b"no record", 2, "v"), None);
    }
}
