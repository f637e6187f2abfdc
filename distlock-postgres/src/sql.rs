//! The SQL, built once per backend from identifiers that [`check_identifier`]
//! (crate::config) has already limited to `[a-z_][a-z0-9_]*`.
//!
//! Every statement judges time by `clock_timestamp()` (the server's clock now), not
//! `now()` (the start of the transaction).

/// The statements of one lock table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate: Vec<String>,
    pub(crate) acquire: String,
    pub(crate) release: String,
    pub(crate) extend: String,
    pub(crate) inspect: String,
    pub(crate) force_release: String,
    pub(crate) mark_waited: String,
    pub(crate) purge: String,
    pub(crate) channel: String,
}

/// A 64-bit FNV-1a hash, for a short channel name that fits PostgreSQL's 63 bytes.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Statements {
    pub(crate) fn new(schema: &str, table: &str, unlogged: bool) -> Self {
        let t = format!("\"{schema}\".\"{table}\"");
        let seq = format!("\"{schema}\".\"{table}_fence\"");
        let channel = format!("distlock_{:016x}", fnv1a(&format!("{schema}.{table}")));
        let ms = "($3::float8 * interval '1 millisecond')";
        let remaining_ms = "(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint";
        // One row per lease ended; a notification only where the name has had a waiter.
        let notify_waiters = format!(
            "SELECT true FROM ended \
             LEFT JOIN LATERAL (SELECT pg_notify('{channel}', $1) WHERE ended.waited) n ON true"
        );
        Statements {
            migrate: vec![
                // One migrating process at a time; the others find everything in place.
                "SELECT pg_advisory_xact_lock(7346010365046528)".into(),
                format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""),
                format!(
                    "CREATE {}TABLE IF NOT EXISTS {t} (\
                       key text PRIMARY KEY, \
                       owner bytea NOT NULL, \
                       fence bigint NOT NULL, \
                       expires_at timestamptz NOT NULL, \
                       waited boolean NOT NULL DEFAULT false)",
                    if unlogged { "UNLOGGED " } else { "" }
                ),
                // Tables made before the column existed.
                format!("ALTER TABLE {t} ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false"),
                // A logged sequence: fences survive crashes and row clean-up alike.
                format!("CREATE SEQUENCE IF NOT EXISTS {seq} AS bigint"),
            ],
            // Insert, or take over an expired row, or confirm a live retry of this very
            // request; otherwise report the holder's remaining TTL. One statement.
            //
            // The fence is minted in the UPDATE branch, under the row lock: a value
            // taken in VALUES is drawn before the statement waits on a conflicting
            // row, and could be smaller than the fence of a holder that came and went
            // meanwhile. Rows are therefore never deleted on release, so every
            // acquisition but a key's first goes through the UPDATE branch; the first
            // one has no earlier fence to be below (see `purge`).
            acquire: format!(
                "WITH granted AS ( \
                   INSERT INTO {t} AS l (key, owner, fence, expires_at) \
                   VALUES ($1, $2, nextval('{seq}'), clock_timestamp() + {ms}) \
                   ON CONFLICT (key) DO UPDATE SET \
                     owner = EXCLUDED.owner, \
                     fence = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() \
                                  THEN l.fence ELSE nextval('{seq}') END, \
                     expires_at = EXCLUDED.expires_at \
                   WHERE l.expires_at <= clock_timestamp() \
                      OR (l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()) \
                   RETURNING fence) \
                 SELECT true, fence, NULL::bigint FROM granted \
                 UNION ALL \
                 SELECT false, fence, {remaining_ms} FROM {t} \
                   WHERE key = $1 AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM granted)"
            ),
            // Ends this owner's live lease (the row stays, expired as of now). The
            // notification, which goes out on commit, is sent only for a name that
            // has had a waiter (`waited`, read on the row's latest version under its
            // lock): NOTIFY serializes the commits of every notifying transaction in
            // the database, so releases nobody waits for must not send one.
            release: format!(
                "WITH ended AS ( \
                   UPDATE {t} SET expires_at = clock_timestamp() \
                   WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() \
                   RETURNING key, waited) \
                 {notify_waiters}"
            ),
            // Only a live lease of this owner; never revives an expired one.
            extend: format!(
                "UPDATE {t} SET expires_at = clock_timestamp() + {ms} \
                 WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() \
                 RETURNING fence"
            ),
            inspect: format!("SELECT fence, {remaining_ms} FROM {t} WHERE key = $1 AND expires_at > clock_timestamp()"),
            force_release: format!(
                "WITH ended AS ( \
                   UPDATE {t} SET expires_at = clock_timestamp() \
                   WHERE key = $1 AND expires_at > clock_timestamp() \
                   RETURNING key, waited) \
                 {notify_waiters}"
            ),
            // A waiter marks the name before its first attempt (after LISTEN), so that
            // every later release of it notifies. A free name gets a row of its own,
            // already ended, whose fence (0) is below any the sequence mints. The mark
            // stays until the row is purged.
            mark_waited: format!(
                "INSERT INTO {t} AS l (key, owner, fence, expires_at, waited) \
                   VALUES ($1, ''::bytea, 0, clock_timestamp(), true) \
                 ON CONFLICT (key) DO UPDATE SET waited = true WHERE NOT l.waited"
            ),
            // Deleting a row makes the key's next acquisition an INSERT whose fence
            // was drawn before any wait; only rows that ended longer ago than any
            // statement may run (statement_timeout) are deleted, so no such draw can
            // predate the fence of the row it replaces.
            purge: format!(
                "WITH deleted AS (DELETE FROM {t} \
                   WHERE expires_at < clock_timestamp() - ($1::float8 * interval '1 millisecond') \
                   RETURNING 1) \
                 SELECT count(*) FROM deleted"
            ),
            channel,
        }
    }
}

/// A statement's argument: bound, or (in PgBouncer mode) written into the statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
    Float(f64),
    Int(i64),
}

impl Arg<'_> {
    /// The argument as an SQL literal. Text is an escape string (`E'...'`) with its
    /// backslashes and quotes escaped, so it reads the same whatever
    /// `standard_conforming_strings` says; bytes are hex digits only.
    fn literal(self) -> String {
        match self {
            Arg::Text(text) => format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
            Arg::Bytes(bytes) => {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                format!("decode('{hex}', 'hex')")
            }
            Arg::Float(value) => format!("{value:?}::float8"),
            Arg::Int(value) => format!("{value}::bigint"),
        }
    }
}

/// `statement` with each `$n` written as the literal of `args[n - 1]`, in one pass over
/// the statement, so that a literal that holds `$2` is never read as a placeholder.
pub(crate) fn inline(statement: &str, args: &[Arg<'_>]) -> String {
    let mut out = String::with_capacity(statement.len() + 64);
    let mut rest = statement;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        match after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|n| args.get(n.checked_sub(1)?))
        {
            Some(arg) => out.push_str(&arg.literal()),
            None => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_arguments_are_literals_that_cannot_end_early() {
        let sql = inline(
            "SELECT $1, $2, $3::float8 WHERE k = $1",
            &[
                Arg::Text("it's $2 \\' ok"),
                Arg::Bytes(&[0, 0xab, 0xff]),
                Arg::Float(1500.0),
            ],
        );
        assert_eq!(
            sql,
            "SELECT E'it\\'s $2 \\\\\\' ok', decode('00abff', 'hex'), 1500.0::float8::float8 \
             WHERE k = E'it\\'s $2 \\\\\\' ok'"
        );
    }

    #[test]
    fn a_placeholder_without_an_argument_is_left_as_it_is() {
        assert_eq!(inline("SELECT $4, $", &[Arg::Float(1.0)]), "SELECT $4, $");
    }
}
