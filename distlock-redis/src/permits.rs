//! Semaphores, read-write locks and elections on Redis: [`PermitBackend`] for
//! [`RedisBackend`], one Lua script per step.
//!
//! A name's permits are four keys in one cluster slot (hash-tagged by the name): its
//! grants (a sorted set of owners by when they run out, by the server's clock), a hash
//! with the limit, the fence counter and each grant's and place's details, the places
//! (a sorted set, as the grants) and the recorded terms (a sorted set by fence). Every
//! step keeps them alive at least twice the longest TTL it was given, or the place.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, ChangeStream, Claim, ExtendRequest, Grant, OwnerToken, PermitBackend,
    PermitHolder, ReleaseOutcome, Renewal, Term, TERMS_KEPT,
};
use distlock_core::{ErrorKind, FencingToken, LockKey, Result};

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

/// A grant's record: `<fence>:<count>:<0|1>:<value>`.
fn parse_grant(record: &str) -> Result<(FencingToken, u32, Option<String>)> {
    let mut parts = record.splitn(4, ':');
    let (Some(fence), Some(count), Some(flag), Some(value)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(unexpected("a grant of permits that is not a record"));
    };
    let count = u32::try_from(parse_u64(count, "a count that is not a number")?)
        .map_err(|_| unexpected("a count out of range"))?;
    let value = (flag == "1").then(|| value.to_owned());
    Ok((parse_fence(fence)?, count, value))
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
                let (fence, count, value) = parse_grant(&pair[0])?;
                let remaining = pair[1].parse::<u64>().unwrap_or(0);
                Ok(PermitHolder {
                    fence,
                    count,
                    remaining: Duration::from_millis(remaining),
                    value,
                })
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
                let (Some(fence), Some(previous), Some(value)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    return Err(unexpected("a term that is not a record"));
                };
                Ok(Term {
                    fence: parse_fence(fence)?,
                    previous: parse_u64(previous, "a fence that is not a number")?,
                    value: value.to_owned(),
                })
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
            Some((FencingToken::new(12), 1, Some("10.0.0.1:80".to_owned())))
        );
        assert_eq!(
            parse_grant("12:3:0:").ok(),
            Some((FencingToken::new(12), 3, None))
        );
        assert!(parse_grant("0:3:0:").is_err());
        assert!(parse_grant("12:x:0:").is_err());
        assert!(parse_grant("12").is_err());
    }
}
