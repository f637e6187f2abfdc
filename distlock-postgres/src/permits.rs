//! Semaphores, read-write locks and elections on PostgreSQL: [`PermitBackend`] for
//! [`PostgresBackend`], one statement per step.
//!
//! Four tables beside the lock table: `<table>_names` (one row per name: its limit
//! and its last term), `<table>_permits` (the grants), `<table>_places` and
//! `<table>_terms`. The grant step is a function, `<table>_grant_permits`: it first
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
use sqlx::Row;

use crate::backend::{fence, ttl_ms, PostgresBackend};
use crate::sql::Arg;

/// The statements of one lock table's permits.
#[derive(Debug, Clone)]
pub(crate) struct PermitSql {
    pub(crate) migrate: Vec<String>,
    grant: String,
    release: String,
    extend: String,
    leave: String,
    holders: String,
    terms: String,
}

/// The notification payload of a name's permits: apart from its lock's, which is the
/// bare key.
pub(crate) fn payload(key: &LockKey) -> String {
    format!("permits/{key}")
}

impl PermitSql {
    pub(crate) fn new(schema: &str, table: &str, channel: &str) -> Self {
        let name = |suffix: &str| format!("\"{schema}\".\"{table}_{suffix}\"");
        let (names, grants, places, terms) = (
            name("names"),
            name("permits"),
            name("places"),
            name("terms"),
        );
        let seq = name("fence");
        let function = name("grant_permits");
        let remaining_ms = "(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint";
        let notify = format!("pg_notify('{channel}', 'permits/' || $1)");
        PermitSql {
            migrate: vec![
                format!(
                    "CREATE TABLE IF NOT EXISTS {names} (name text PRIMARY KEY, \
                       lim bigint NOT NULL, term bigint NOT NULL DEFAULT 0)"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {grants} (name text NOT NULL, owner bytea NOT NULL, \
                       count bigint NOT NULL, fence bigint NOT NULL, \
                       expires_at timestamptz NOT NULL, value text, PRIMARY KEY (name, owner))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {places} (name text NOT NULL, owner bytea NOT NULL, \
                       count bigint NOT NULL, until timestamptz NOT NULL, PRIMARY KEY (name, owner))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {terms} (name text NOT NULL, fence bigint NOT NULL, \
                       previous bigint NOT NULL, value text NOT NULL, PRIMARY KEY (name, fence))"
                ),
                // The grant step (point 1 to 5 of the permit contract). The name's row
                // is locked first; every later statement sees what committed before.
                format!(
                    "CREATE OR REPLACE FUNCTION {function}(p_name text, p_owner bytea, \
                       p_ttl float8, p_count bigint, p_limit bigint, p_place float8, \
                       p_valued boolean, p_value text, p_kept bigint) \
                     RETURNS TABLE (outcome int, answer bigint) LANGUAGE plpgsql VOLATILE AS $grant$ \
                     DECLARE held_limit bigint; used bigint; mine bigint; f bigint; prev bigint; \
                     BEGIN \
                       INSERT INTO {names} AS n (name, lim) VALUES (p_name, p_limit) \
                         ON CONFLICT (name) DO UPDATE SET name = n.name RETURNING n.lim, n.term INTO held_limit, prev; \
                       DELETE FROM {grants} g WHERE g.name = p_name AND g.expires_at <= clock_timestamp(); \
                       DELETE FROM {places} w WHERE w.name = p_name AND w.until <= clock_timestamp(); \
                       SELECT g.fence INTO mine FROM {grants} g WHERE g.name = p_name AND g.owner = p_owner; \
                       IF FOUND THEN \
                         UPDATE {grants} g SET expires_at = clock_timestamp() + p_ttl * interval '1 millisecond' \
                           WHERE g.name = p_name AND g.owner = p_owner; \
                         RETURN QUERY SELECT 1, mine; RETURN; \
                       END IF; \
                       SELECT coalesce(sum(g.count), 0) INTO used FROM {grants} g WHERE g.name = p_name; \
                       IF used > 0 AND held_limit <> p_limit THEN \
                         RETURN QUERY SELECT -1, held_limit; RETURN; \
                       END IF; \
                       IF used + p_count > p_limit OR EXISTS (SELECT 1 FROM {places} w \
                           WHERE w.name = p_name AND w.owner <> p_owner AND w.count > p_count) THEN \
                         IF p_place > 0 THEN \
                           INSERT INTO {places} AS w (name, owner, count, until) \
                             VALUES (p_name, p_owner, p_count, clock_timestamp() + p_place * interval '1 millisecond') \
                             ON CONFLICT (name, owner) DO UPDATE SET count = EXCLUDED.count, until = EXCLUDED.until; \
                         END IF; \
                         RETURN QUERY SELECT 0, (SELECT (extract(epoch FROM min(g.expires_at) - clock_timestamp()) * 1000)::bigint \
                           FROM {grants} g WHERE g.name = p_name); \
                         RETURN; \
                       END IF; \
                       f := nextval('{seq}'); \
                       UPDATE {names} n SET lim = p_limit WHERE n.name = p_name; \
                       DELETE FROM {places} w WHERE w.name = p_name AND w.owner = p_owner; \
                       INSERT INTO {grants} (name, owner, count, fence, expires_at, value) \
                         VALUES (p_name, p_owner, p_count, f, clock_timestamp() + p_ttl * interval '1 millisecond', \
                           CASE WHEN p_valued THEN p_value END); \
                       IF p_valued THEN \
                         INSERT INTO {terms} (name, fence, previous, value) VALUES (p_name, f, prev, p_value); \
                         UPDATE {names} n SET term = f WHERE n.name = p_name; \
                         DELETE FROM {terms} t WHERE t.name = p_name AND t.fence <= ( \
                           SELECT k.fence FROM {terms} k WHERE k.name = p_name \
                           ORDER BY k.fence DESC OFFSET p_kept LIMIT 1); \
                         PERFORM pg_notify('{channel}', 'permits/' || p_name); \
                       END IF; \
                       RETURN QUERY SELECT 1, f; \
                     END $grant$"
                ),
            ],
            grant: format!("SELECT outcome, answer FROM {function}($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
            release: format!(
                "WITH gone AS (DELETE FROM {grants} WHERE name = $1 AND owner = $2 \
                   AND expires_at > clock_timestamp() RETURNING 1) \
                 SELECT {notify} FROM gone"
            ),
            extend: format!(
                "UPDATE {grants} SET expires_at = clock_timestamp() + ($3::float8 * interval '1 millisecond') \
                 WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp() RETURNING 1"
            ),
            leave: format!(
                "WITH gone AS (DELETE FROM {places} WHERE name = $1 AND owner = $2 RETURNING 1) \
                 SELECT {notify} FROM gone"
            ),
            holders: format!(
                "SELECT fence, count, {remaining_ms}, value FROM {grants} \
                 WHERE name = $1 AND expires_at > clock_timestamp() ORDER BY fence"
            ),
            terms: format!(
                "SELECT fence, previous, value FROM {terms} WHERE name = $1 AND fence > $2 ORDER BY fence"
            ),
        }
    }

    /// Every statement, for the check that no name was left unwritten.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Vec<&String> {
        let mut all: Vec<&String> = self.migrate.iter().collect();
        all.extend([
            &self.grant,
            &self.release,
            &self.extend,
            &self.leave,
            &self.holders,
            &self.terms,
        ]);
        all
    }
}

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

    async fn holders(&self, key: &LockKey) -> Result<Vec<PermitHolder>> {
        let args = [Arg::Text(key.as_str())];
        let rows = self.statement(&self.sql().permits.holders, &args).await?;
        rows.iter()
            .map(|row| {
                let (raw, count, ms, value) = decode(self, || {
                    Ok((
                        row.try_get::<i64, _>(0)?,
                        row.try_get::<i64, _>(1)?,
                        row.try_get::<Option<i64>, _>(2)?,
                        row.try_get(3)?,
                    ))
                })?;
                Ok(PermitHolder {
                    fence: fence(raw)?,
                    count: u32::try_from(count).unwrap_or(u32::MAX),
                    remaining: Duration::from_millis(
                        ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
                    ),
                    value,
                })
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
                let (raw, previous, value) = decode(self, || {
                    Ok((
                        row.try_get::<i64, _>(0)?,
                        row.try_get::<i64, _>(1)?,
                        row.try_get(2)?,
                    ))
                })?;
                Ok(Term {
                    fence: fence(raw)?,
                    previous: u64::try_from(previous).unwrap_or(0),
                    value,
                })
            })
            .collect()
    }

    async fn watch_permits(&self, key: &LockKey) -> Result<Option<ChangeStream>> {
        self.listen(&payload(key)).await
    }
}
