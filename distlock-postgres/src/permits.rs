//! Semaphores, read-write locks and elections on PostgreSQL: [`PermitBackend`] for
//! [`PostgresBackend`], one statement per step.
//!
//! Four tables beside the lock table: `<table>_names` (one row per name: its limit
//! and its last term), `<table>_permits` (the grants), `<table>_places` and
//! `<table>_terms`. The grant step is a function, `<table>_take_permits`: it first
//! locks the name's row, and each statement after that reads a fresh snapshot
//! (`READ COMMITTED` in a volatile function), so two grants on one name never count
//! the same free permits. Fences come from the lock table's logged sequence, drawn
//! under the name's row lock. Every other step is one statement on one name.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{
    AcquireRequest, ChangeStream, Claim, ExtendRequest, Grant, OwnerToken, PermitBackend,
    PermitHolder, ReleaseOutcome, Renewal, Term, TERMS_KEPT,
};
use distlock_core::{LockKey, Result};
use distlock_sql::stored_holder;
use sqlx::Row;

use crate::backend::{fence, ttl_ms, PostgresBackend};
use crate::sql::{payload, Arg};

fn decode<T>(backend: &PostgresBackend, f: impl FnOnce() -> Result<T, sqlx::Error>) -> Result<T> {
    f().map_err(|e| backend.driver_error(e))
}

#[async_trait]
impl PermitBackend for PostgresBackend {
    async fn try_grant_permits(&self, request: &AcquireRequest, claim: &Claim) -> Result<Grant> {
        let place = request.place();
        let sql = &self.sql().permits;
        let args = [
            Arg::Text(request.key().as_str()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
            Arg::Float(ttl_ms(request.ttl())),
            Arg::Int(i64::from(claim.count())),
            Arg::Int(i64::from(claim.limit())),
            Arg::Float(place.map_or(0.0, ttl_ms)),
            Arg::Bool(claim.value().is_some()),
            Arg::Text(claim.value().unwrap_or_default()),
            Arg::Int(i64::try_from(TERMS_KEPT).unwrap_or(i64::MAX)),
            Arg::Text(request.holder().encoded()),
        ];
        let rows = self.statement(&sql.grant, &args).await?;
        let Some(row) = rows.first() else {
            return Ok(Grant::Held { remaining: None });
        };
        let (outcome, answer) = decode(self, || {
            Ok((row.try_get::<i32, _>(0)?, row.try_get::<Option<i64>, _>(1)?))
        })?;
        match (outcome, answer) {
            (1, Some(raw)) => Ok(Grant::Granted(fence(raw)?)),
            (0, ms) => Ok(Grant::Held {
                remaining: ms
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(Duration::from_millis),
            }),
            (_, held) => Err(claim.limit_conflict(
                request.key(),
                held.and_then(|h| u64::try_from(h).ok()).unwrap_or_default(),
                "postgres",
            )),
        }
    }

    async fn release_permits(&self, key: &LockKey, owner: &OwnerToken) -> Result<ReleaseOutcome> {
        let args = [Arg::Text(key.as_str()), Arg::Bytes(&owner.as_bytes()[..])];
        let rows = self.statement(&self.sql().permits.release, &args).await?;
        Ok(if rows.is_empty() {
            ReleaseOutcome::NotHeld
        } else {
            ReleaseOutcome::Released
        })
    }

    async fn renew_permits(&self, request: &ExtendRequest) -> Result<Renewal> {
        let args = [
            Arg::Text(request.key().as_str()),
            Arg::Bytes(&request.owner().as_bytes()[..]),
            Arg::Float(ttl_ms(request.ttl())),
        ];
        let rows = self.statement(&self.sql().permits.extend, &args).await?;
        Ok(if rows.is_empty() {
            Renewal::NotHeld
        } else {
            Renewal::Renewed
        })
    }

    async fn leave_queue(&self, key: &LockKey, owner: &OwnerToken) -> Result<()> {
        let args = [Arg::Text(key.as_str()), Arg::Bytes(&owner.as_bytes()[..])];
        self.statement(&self.sql().permits.leave, &args)
            .await
            .map(drop)
    }

    async fn proclaim(&self, key: &LockKey, owner: &OwnerToken, value: &str) -> Result<Renewal> {
        let args = [
            Arg::Text(key.as_str()),
            Arg::Bytes(&owner.as_bytes()[..]),
            Arg::Text(value),
        ];
        let rows = self.statement(&self.sql().permits.proclaim, &args).await?;
        Ok(if rows.is_empty() {
            Renewal::NotHeld
        } else {
            Renewal::Renewed
        })
    }

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let args = [Arg::Text(key.as_str())];
        let rows = self.statement(&self.sql().permits.holders, &args).await?;
        rows.iter()
            .map(|row| {
                let (raw, count, ms, value, holder, granted) = decode(self, || {
                    Ok((
                        row.try_get::<i64, _>(0)?,
                        row.try_get::<i64, _>(1)?,
                        row.try_get::<Option<i64>, _>(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                        row.try_get(5)?,
                    ))
                })?;
                let count = u32::try_from(count).unwrap_or(u32::MAX);
                let remaining =
                    Duration::from_millis(ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0));
                let (holder, granted_at) = stored_holder(holder, granted);
                Ok(PermitHolder::new(fence(raw)?, count, remaining, value)
                    .held_by(holder, granted_at))
            })
            .collect()
    }

    async fn terms(&self, key: &LockKey, after: u64) -> Result<Vec<Term>> {
        let args = [
            Arg::Text(key.as_str()),
            Arg::Int(i64::try_from(after).unwrap_or(i64::MAX)),
        ];
        let rows = self.statement(&self.sql().permits.terms, &args).await?;
        rows.iter()
            .map(|row| {
                let (raw, previous, value, holder, granted) = decode(self, || {
                    Ok((
                        row.try_get::<i64, _>(0)?,
                        row.try_get::<i64, _>(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                        row.try_get(4)?,
                    ))
                })?;
                let (holder, granted_at) = stored_holder(holder, granted);
                let previous = u64::try_from(previous).unwrap_or(0);
                Ok(Term::new(fence(raw)?, previous, value).held_by(holder, granted_at))
            })
            .collect()
    }

    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.listen(&payload(key)).await
    }
}
