//! Semaphores, read-write locks and elections on Redis: [`PermitBackend`] for
//! [`RedisBackend`], one Lua script per step.
//!
//! A name's permits are four keys in one cluster slot (hash-tagged by the name): its
//! grants (a sorted set of owners by when they run out, by the server's clock), a hash
//! with the limit, the fence counter and each grant's and place's details, the places
//! (a sorted set, as the grants) and the recorded terms (a sorted set by fence). Every
//! step keeps them alive at least twice the longest TTL it was given, or the place.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use distlock_core::backend::untag_holder;
use distlock_core::backend::{
    AcquireRequest, ChangeStream, Claim, ExtendRequest, Grant, OwnerToken, PermitBackend,
    PermitHolder, ReleaseOutcome, Renewal, Term, TERMS_KEPT,
};
use distlock_core::{ErrorKind, FencingToken, Holder, LockKey, Result};

use crate::backend::{millis, parse_fence, parse_u64, RedisBackend};
use crate::error::unexpected;

/// The keys of a name's permits.
struct Keys {
    grants: String,
    info: String,
    places: String,
    terms: String,
}

impl RedisBackend {
    fn permit_keys(&self, key: &LockKey) -> Keys {
        let base = format!("{}permits{{{}}}", self.config().prefix, key);
        Keys {
            grants: format!("{base}:grants"),
            info: format!("{base}:info"),
            places: format!("{base}:places"),
            terms: format!("{base}:terms"),
        }
    }

    fn permit_channel(&self, key: &LockKey) -> String {
        format!("{}permits:released:{{{}}}", self.config().prefix, key)
    }
}

/// How long a name's record outlives a grant of `ttl`: terms are kept a TTL past the
/// end of the last grant.
fn kept_for(ttl: Duration) -> String {
    millis(ttl + ttl)
}

/// A grant's record: `<fence>:<count>:<0|1>:<value>`, where a holder is stored
/// `<fence>:<count>:<0|1>/<ms>/<length>:<holder><value>` (permits_acquire.lua).
type Granted = (
    FencingToken,
    u32,
    Option<String>,
    Option<Holder>,
    Option<SystemTime>,
);

fn parse_grant(record: &str) -> Result<Granted> {
    let mut parts = record.splitn(4, ':');
    let (Some(fence), Some(count), Some(flag), Some(rest)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(unexpected("a grant of permits that is not a record"));
    };
    let count = u32::try_from(parse_u64(count, "a count that is not a number")?)
        .map_err(|_| unexpected("a count out of range"))?;
    let (flag, holder, granted_at, value) = split_holder(flag, rest)?;
    let value = (flag == "1").then(|| value.to_owned());
    Ok((parse_fence(fence)?, count, value, holder, granted_at))
}

/// [`untag_holder`], with a tag that is not well formed as an error.
fn split_holder<'a>(
    field: &'a str,
    rest: &'a str,
) -> Result<(&'a str, Option<Holder>, Option<SystemTime>, &'a str)> {
    untag_holder(field, rest).ok_or_else(|| unexpected("a holder's tag that is not well formed"))
}

#[async_trait]
impl PermitBackend for RedisBackend {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        let place = request.place();
        let keys = self.permit_keys(request.key());
        let args = [
            request.owner().to_hex(),
            millis(request.ttl()),
            claim.count().to_string(),
            claim.limit().to_string(),
            place.map_or_else(|| "0".to_owned(), millis),
            if claim.value().is_some() { "1" } else { "0" }.to_owned(),
            claim.value().unwrap_or_default().to_owned(),
            kept_for(request.ttl()),
            TERMS_KEPT.to_string(),
            self.permit_channel(request.key()),
            request.holder().encoded().to_owned(),
        ];
        let reply: Result<(i64, String)> = self
            .run(
                &self.inner.scripts.permits_acquire,
                &[&keys.grants, &keys.info, &keys.places, &keys.terms],
                &args,
                true,
            )
            .await;
        let (outcome, value) = match reply {
            Ok(reply) => reply,
            Err(e) if self.config().wait_replicas > 0 && e.kind() == ErrorKind::Unavailable => {
                // The primary may have granted what too few replicas saw: give it back.
                let _ = self.release_permits(request.key(), request.owner()).await;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        match outcome {
            1 => Ok(Grant::Granted(parse_fence(&value)?)),
            0 => Ok(Grant::Held {
                remaining: value.parse::<u64>().ok().map(Duration::from_millis),
            }),
            _ => {
                Err(claim.limit_conflict(request.key(), value.parse().unwrap_or_default(), "redis"))
            }
        }
    }

    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let keys = self.permit_keys(key);
        let released: i64 = self
            .run(
                &self.inner.scripts.permits_release,
                &[&keys.grants, &keys.info],
                &[&owner.to_hex(), &self.permit_channel(key)],
                false,
            )
            .await?;
        Ok(if released == 1 {
            ReleaseOutcome::Released
        } else {
            ReleaseOutcome::NotHeld
        })
    }

    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        let keys = self.permit_keys(request.key());
        let renewed: i64 = self
            .run(
                &self.inner.scripts.permits_extend,
                &[&keys.grants, &keys.info, &keys.places, &keys.terms],
                &[
                    &request.owner().to_hex(),
                    &millis(request.ttl()),
                    &kept_for(request.ttl()),
                ],
                true,
            )
            .await?;
        Ok(if renewed == 1 {
            Renewal::Renewed
        } else {
            Renewal::NotHeld
        })
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let keys = self.permit_keys(key);
        let _: i64 = self
            .run(
                &self.inner.scripts.permits_leave,
                &[&keys.places, &keys.info],
                &[&owner.to_hex(), &self.permit_channel(key)],
                false,
            )
            .await?;
        Ok(())
    }

    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        let keys = self.permit_keys(key);
        let proclaimed: i64 = self
            .run(
                &self.inner.scripts.permits_proclaim,
                &[&keys.grants, &keys.info, &keys.terms],
                &[
                    owner.to_hex().as_str(),
                    value,
                    self.permit_channel(key).as_str(),
                ],
                true,
            )
            .await?;
        Ok(if proclaimed == 1 {
            Renewal::Renewed
        } else {
            Renewal::NotHeld
        })
    }

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let keys = self.permit_keys(key);
        let flat: Vec<String> = self
            .run(
                &self.inner.scripts.permits_holders,
                &[&keys.grants, &keys.info],
                &[] as &[&str],
                false,
            )
            .await?;
        let mut holders = flat
            .chunks_exact(2)
            .map(|pair| {
                let (fence, count, value, holder, granted_at) = parse_grant(&pair[0])?;
                let remaining = Duration::from_millis(pair[1].parse::<u64>().unwrap_or(0));
                Ok(PermitHolder::new(fence, count, remaining, value).held_by(holder, granted_at))
            })
            .collect::<Result<Vec<_>>>()?;
        holders.sort_by_key(|h| h.fence);
        Ok(holders)
    }

    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        let keys = self.permit_keys(key);
        let mut conn = self.inner.conn.clone();
        let records: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&keys.terms)
            .arg(format!("({after}"))
            .arg("+inf")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(e))?;
        records
            .iter()
            .map(|record| {
                let mut parts = record.splitn(3, ':');
                let (Some(fence), Some(previous), Some(rest)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(unexpected("a term that is not a record"));
                };
                let (previous, holder, granted_at, value) = split_holder(previous, rest)?;
                let previous = parse_u64(previous, "a fence that is not a number")?;
                Ok(Term::new(parse_fence(fence)?, previous, value.to_owned())
                    .held_by(holder, granted_at))
            })
            .collect()
    }

    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.watch_channel(self.permit_channel(key), None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_records_keep_values_with_colons() {
        assert_eq!(
            parse_grant("12:1:1:10.0.0.1:80").ok(),
            Some((
                FencingToken::new(12),
                1,
                Some("10.0.0.1:80".to_owned()),
                None,
                None
            ))
        );
        assert_eq!(
            parse_grant("12:3:0:").ok(),
            Some((FencingToken::new(12), 3, None, None, None))
        );
        // With a holder of 8 bytes, granted at 1.5 s past the epoch.
        let holder = Holder::new("a:1").and_then(|h| h.with_payload("x:y!")).ok();
        assert_eq!(
            parse_grant("12:1:1/1500/8:a:1\nx:y!10.0.0.1:80").ok(),
            Some((
                FencingToken::new(12),
                1,
                Some("10.0.0.1:80".to_owned()),
                holder,
                Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1500))
            ))
        );
        assert!(parse_grant("12:1:1/1500/80:a:1").is_err());
        assert!(parse_grant("0:3:0:").is_err());
        assert!(parse_grant("12:x:0:").is_err());
        assert!(parse_grant("12").is_err());
    }
}
