//! The SQL, built once per backend from identifiers that [`check_identifier`]
//! (crate::config) has already limited to `[a-z_][a-z0-9_]*`.
//!
//! Every statement judges time by `clock_timestamp()` (the server's clock now), not
//! `now()` (the start of the transaction).

use distlock_core::LockKey;

/// The statements of one lock table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate: Vec<String>,
    /// The tables and sequences the migration creates, as quoted names.
    pub(crate) relations: Vec<String>,
    /// The functions the migration creates, as quoted names.
    pub(crate) functions: Vec<String>,
    pub(crate) acquire: String,
    /// The set step, around its rows of requests: see [`Statements::acquire_all`].
    acquire_all: (String, String),
    pub(crate) acquire_in_turn: String,
    pub(crate) leave_queue: String,
    pub(crate) release: String,
    pub(crate) extend: String,
    pub(crate) inspect: String,
    pub(crate) list: String,
    pub(crate) force_release: String,
    pub(crate) mark_waited: String,
    pub(crate) purge: String,
    pub(crate) channel: String,
    pub(crate) permits: PermitSql,
}

/// Adds `column` to `table` (a quoted name) where it is missing. Only then does it
/// lock the table: `ALTER TABLE … ADD COLUMN IF NOT EXISTS` takes the table's
/// exclusive lock even when the column is there, and a migration that holds it on one
/// table while it waits for another deadlocks with the fair step, which writes both
/// (every process migrates on connect, while others use the tables).
fn add_column(table: &str, column: &str, declaration: &str) -> String {
    format!(
        "DO $m$ BEGIN \
           IF NOT EXISTS (SELECT 1 FROM pg_attribute \
             WHERE attrelid = '{table}'::regclass AND attname = '{column}' AND NOT attisdropped) THEN \
             ALTER TABLE {table} ADD COLUMN {column} {declaration}; \
           END IF; \
         END $m$"
    )
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
        let q = format!("\"{schema}\".\"{table}_queue\"");
        let seq = format!("\"{schema}\".\"{table}_fence\"");
        let channel = format!("distlock_{:016x}", fnv1a(&format!("{schema}.{table}")));
        let ms = "($3::float8 * interval '1 millisecond')";
        let remaining_ms = "(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint";
        let granted_ms = GRANTED_MS;
        // The step that follows a lease ended where the name has had a waiter: the
        // function `hand_over` (below), which grants the key to the first fair waiter
        // whose place is live, or wakes the waiters.
        let hand_over_fn = format!("\"{schema}\".\"{table}_hand_over\"");
        let leave_fn = format!("\"{schema}\".\"{table}_leave_queue\"");
        let notify_waiters = format!(
            "SELECT true FROM ended \
             LEFT JOIN LATERAL (SELECT {hand_over_fn}($1) WHERE ended.waited) n ON true"
        );
        // Inserts the row `source` gives, or takes over an expired row, or confirms a
        // live retry of this very owner: the fence, when granted.
        let take = |source: &str| {
            format!(
                "INSERT INTO {t} AS l (key, owner, fence, expires_at, holder, granted_at) {source} \
                 ON CONFLICT (key) DO UPDATE SET \
                   owner = EXCLUDED.owner, \
                   fence = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() \
                                THEN l.fence ELSE nextval('{seq}') END, \
                   holder = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() \
                                 THEN l.holder ELSE EXCLUDED.holder END, \
                   granted_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp() \
                                     THEN l.granted_at ELSE EXCLUDED.granted_at END, \
                   expires_at = EXCLUDED.expires_at \
                 WHERE l.expires_at <= clock_timestamp() \
                    OR (l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()) \
                 RETURNING l.key, l.fence"
            )
        };
        // The fence when granted, or the holder's fence and remaining TTL.
        let answer = format!(
            "SELECT true, fence, NULL::bigint FROM granted \
             UNION ALL \
             SELECT false, fence, {remaining_ms} FROM {t} \
               WHERE key = $1 AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM granted)"
        );
        // The fair step's answer: as `answer`, and, when not granted, the fence
        // sequence's value read after the waiter's place was written (`queued`, which
        // waits for a release that has locked the place to hand it the key): every
        // fence minted before is at most that, so a grant handed over with a higher
        // fence was minted after the step was sent, from a place this step wrote or a
        // later one (`HandoffBook::turned_down`). Read before the place was written, a
        // release could hand over the place as the previous step left it, and the
        // validity counted from this step would outrun the lease.
        let answer_in_turn = format!(
            "SELECT true, fence, NULL::bigint, NULL::bigint FROM granted \
             UNION ALL \
             SELECT false, h.fence, h.remaining, \
               (SELECT last_value FROM {seq} WHERE (SELECT count(*) FROM queued) >= 0) \
               FROM (SELECT 1) AS one LEFT JOIN LATERAL ( \
                 SELECT fence, {remaining_ms} AS remaining FROM {t} \
                 WHERE key = $1 AND expires_at > clock_timestamp()) h ON true \
               WHERE NOT EXISTS (SELECT 1 FROM granted)"
        );
        let permits = PermitSql::new(schema, table, &channel);
        let mut migrate = vec![
            // One migrating process at a time; the others find everything in place.
            "SELECT pg_advisory_xact_lock(7346010365046528)".into(),
            format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""),
            format!(
                "CREATE {}TABLE IF NOT EXISTS {t} (\
                       key text PRIMARY KEY, \
                       owner bytea NOT NULL, \
                       fence bigint NOT NULL, \
                       expires_at timestamptz NOT NULL, \
                       waited boolean NOT NULL DEFAULT false, \
                       holder text, \
                       granted_at timestamptz)",
                if unlogged { "UNLOGGED " } else { "" }
            ),
            // Tables made before the columns existed. A lease granted before the
            // holder was kept has none (`NULL`), and is read as such.
            add_column(&t, "waited", "boolean NOT NULL DEFAULT false"),
            add_column(&t, "holder", "text"),
            add_column(&t, "granted_at", "timestamptz"),
            // A logged sequence: fences survive crashes and row clean-up alike.
            format!("CREATE SEQUENCE IF NOT EXISTS {seq} AS bigint"),
            // Fair waiters: one row per waiter, in the order of `seq`, each kept
            // until `until` unless the waiter calls again.
            format!(
                "CREATE {}TABLE IF NOT EXISTS {q} (\
                       key text NOT NULL, \
                       owner bytea NOT NULL, \
                       seq bigint GENERATED BY DEFAULT AS IDENTITY, \
                       until timestamptz NOT NULL, \
                       ttl_ms float8, \
                       holder text, \
                       PRIMARY KEY (key, owner))",
                if unlogged { "UNLOGGED " } else { "" }
            ),
            format!(
                "DO $m$ BEGIN \
                   IF to_regclass('\"{schema}\".\"{table}_queue_order\"') IS NULL THEN \
                     CREATE INDEX \"{table}_queue_order\" ON {q} (key, seq); \
                   END IF; \
                 END $m$"
            ),
            // The TTL each waiter asked for in its last fair step: the lease a release
            // hands it. Places queued before the column existed have none, and are
            // woken to ask instead.
            add_column(&q, "ttl_ms", "float8"),
            // The holder each waiter's last fair step carried, which a release that
            // hands it the key stores.
            add_column(&q, "holder", "text"),
            // The handoff (contract point 10), run by a release, a forced release, or
            // a waiter that gives up a lease handed to it, after the lease ended and
            // with the key's row locked by that statement. The first waiter whose place
            // is live is locked in turn (so one that gives up meanwhile is either
            // handed the key and sees it, or gone), granted the key with the next
            // fence for its TTL or until its place runs out if that is sooner, taken
            // out of the queue and told "<key>\n<owner>:<fence>". With no such waiter
            // every waiter of the key is woken ("<key>"); a waiter queued without a
            // TTL is woken to ask ("<key>\n<owner>").
            format!(
                "CREATE OR REPLACE FUNCTION {hand_over_fn}(p_key text) RETURNS void \
                 LANGUAGE plpgsql VOLATILE AS $hand$ \
                 DECLARE head record; f bigint; \
                 BEGIN \
                   SELECT w.owner, w.ttl_ms, w.until, w.holder INTO head FROM {q} w \
                     WHERE w.key = p_key AND w.until > clock_timestamp() \
                     ORDER BY w.seq LIMIT 1 FOR UPDATE; \
                   IF NOT FOUND THEN \
                     PERFORM pg_notify('{channel}', p_key); \
                     RETURN; \
                   END IF; \
                   IF head.ttl_ms IS NULL THEN \
                     PERFORM pg_notify('{channel}', p_key || E'\\n' || encode(head.owner, 'hex')); \
                     RETURN; \
                   END IF; \
                   UPDATE {t} SET owner = head.owner, fence = nextval('{seq}'), \
                     expires_at = least(clock_timestamp() + head.ttl_ms * interval '1 millisecond', head.until), \
                     holder = head.holder, granted_at = clock_timestamp() \
                     WHERE key = p_key RETURNING fence INTO f; \
                   DELETE FROM {q} w WHERE w.key = p_key AND w.owner = head.owner; \
                   PERFORM pg_notify('{channel}', p_key || E'\\n' || encode(head.owner, 'hex') || ':' || f); \
                 END $hand$"
            ),
            // A fair waiter that gives up. The key's row is locked first, as a release
            // locks it before the queue, so a release that handed this waiter the key
            // meanwhile is seen whole: the lease it handed over is ended and passed on.
            // Otherwise, when the waiter was queued, the others are told, since one of
            // them may now be first.
            format!(
                "CREATE OR REPLACE FUNCTION {leave_fn}(p_key text, p_owner bytea) RETURNS void \
                 LANGUAGE plpgsql VOLATILE AS $leave$ \
                 DECLARE queued boolean; \
                 BEGIN \
                   PERFORM 1 FROM {t} WHERE key = p_key FOR UPDATE; \
                   DELETE FROM {q} WHERE key = p_key AND owner = p_owner; \
                   queued := FOUND; \
                   UPDATE {t} SET expires_at = clock_timestamp() \
                     WHERE key = p_key AND owner = p_owner AND expires_at > clock_timestamp(); \
                   IF FOUND THEN \
                     PERFORM {hand_over_fn}(p_key); \
                   ELSIF queued THEN \
                     PERFORM pg_notify('{channel}', p_key); \
                   END IF; \
                 END $leave$"
            ),
        ];
        migrate.extend(permits.migrate.iter().cloned());
        let relation = |suffix: &str| format!("\"{schema}\".\"{table}{suffix}\"");
        Statements {
            migrate,
            relations: ["", "_queue", "_fence", "_names", "_permits", "_places", "_terms"]
                .map(relation)
                .to_vec(),
            functions: vec![
                relation("_take_permits"),
                hand_over_fn.clone(),
                leave_fn.clone(),
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
                "WITH granted AS ({}) {answer}",
                take(&format!(
                    "VALUES ($1, $2, nextval('{seq}'), clock_timestamp() + {ms}, $4, clock_timestamp())"
                ))
            ),
            // The set step: every request taken as by `acquire`, in the requests'
            // order (the keys sorted, so two sets meet at their first common key and
            // never deadlock), or none. A set granted in part aborts itself, so that
            // the statement's writes are undone whole: the last branch casts a text
            // naming the first refused request to an integer, which fails (see
            // `set_refused_at`). A set refused whole wrote nothing and answers the
            // first refused request's position, with its holder's remaining TTL when
            // the statement's snapshot sees that holder.
            acquire_all: (
                "WITH req (key, owner, ms, i, holder) AS (VALUES ".to_owned(),
                format!(
                    "), granted AS ({}), \
                     verdict AS ( \
                       SELECT count(g.key) AS taken, min(r.i) FILTER (WHERE g.key IS NULL) AS refused \
                       FROM req r LEFT JOIN granted g ON g.key = r.key) \
                     SELECT r.i, g.fence, NULL::bigint FROM req r JOIN granted g ON g.key = r.key \
                       CROSS JOIN verdict v WHERE v.refused IS NULL \
                     UNION ALL \
                     SELECT v.refused, NULL::bigint, \
                       (SELECT {remaining_ms} FROM {t} h JOIN req r ON r.key = h.key \
                         WHERE r.i = v.refused AND h.expires_at > clock_timestamp()) \
                     FROM verdict v \
                     WHERE CASE WHEN v.refused IS NULL THEN false \
                                WHEN v.taken = 0 THEN true \
                                ELSE ('{SET_REFUSED}' || v.refused)::int IS NULL END \
                     ORDER BY 1",
                    take(&format!(
                        "SELECT key, owner, nextval('{seq}'), \
                           clock_timestamp() + (ms * interval '1 millisecond'), holder, clock_timestamp() \
                         FROM req ORDER BY i"
                    ))
                ),
            ),
            // The fair step, in one statement: this owner is first when no other
            // waiter with a live place is ahead of it (or it holds the key already: a
            // retry); then the key is taken as by `acquire` and the owner leaves the
            // queue. Otherwise the owner is queued, or its place renewed, and the places
            // that ran out are dropped. Every CTE reads the statement's one snapshot: a
            // waiter queued meanwhile is behind this one anyway, and two waiters that
            // both think themselves first still meet at the lock row, where only one
            // is granted.
            acquire_in_turn: format!(
                "WITH mine AS (SELECT seq FROM {q} WHERE key = $1 AND owner = $2), \
                 first AS ( \
                   SELECT NOT EXISTS ( \
                     SELECT 1 FROM {q} w WHERE w.key = $1 AND w.owner <> $2 \
                       AND w.until > clock_timestamp() \
                       AND (NOT EXISTS (SELECT 1 FROM mine) OR w.seq < (SELECT seq FROM mine))) \
                   OR EXISTS (SELECT 1 FROM {t} WHERE key = $1 AND owner = $2 \
                       AND expires_at > clock_timestamp()) AS first), \
                 granted AS ({}), \
                 dequeued AS (DELETE FROM {q} WHERE key = $1 AND owner = $2 \
                   AND EXISTS (SELECT 1 FROM granted) RETURNING 1), \
                 queued AS ( \
                   INSERT INTO {q} AS w (key, owner, until, ttl_ms, holder) \
                   SELECT $1, $2, clock_timestamp() + ($4::float8 * interval '1 millisecond'), $3::float8, $5 \
                   WHERE NOT EXISTS (SELECT 1 FROM granted) \
                   ON CONFLICT (key, owner) DO UPDATE SET until = EXCLUDED.until, ttl_ms = EXCLUDED.ttl_ms, \
                     holder = EXCLUDED.holder \
                   RETURNING 1), \
                 dropped AS (DELETE FROM {q} WHERE key = $1 AND owner <> $2 \
                   AND until <= clock_timestamp() RETURNING 1) \
                 {answer_in_turn}",
                take(&format!(
                    "SELECT $1, $2, nextval('{seq}'), clock_timestamp() + {ms}, $5, clock_timestamp() \
                     FROM first WHERE first.first"
                ))
            ),
            // A waiter that gives up: the function `leave_queue` (above).
            leave_queue: format!("SELECT {leave_fn}($1, $2)"),
            // Ends this owner's live lease (the row stays, expired as of now). Only for
            // a name that has had a waiter (`waited`, read on the row's latest version
            // under its lock) does the handoff follow, with its notification (sent on
            // commit): NOTIFY serializes the commits of every notifying transaction in
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
            inspect: format!(
                "SELECT fence, {remaining_ms}, holder, {granted_ms} FROM {t} \
                 WHERE key = $1 AND expires_at > clock_timestamp()"
            ),
            list: format!(
                "SELECT key, fence, {remaining_ms}, holder, {granted_ms} FROM {t} \
                 WHERE left(key, char_length($1)) = $1 AND expires_at > clock_timestamp()"
            ),
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
                   RETURNING 1), \
                 vanished AS (DELETE FROM {q} \
                   WHERE until < clock_timestamp() - ($1::float8 * interval '1 millisecond')) \
                 SELECT count(*) FROM deleted"
            ),
            channel,
            permits,
        }
    }
}

/// A row's grant time, in milliseconds since the Unix epoch by the server's clock.
const GRANTED_MS: &str = "(extract(epoch FROM granted_at) * 1000)::bigint";

/// What the set step casts to an integer to abort itself, before the position of the
/// first refused request.
const SET_REFUSED: &str = "distlock: the set was refused at request ";

impl Statements {
    /// The set step for `n` requests, whose arguments are each request's key, owner and
    /// TTL in milliseconds, in that order (`$1`, `$2`, `$3` for the first request),
    /// then the holder every grant stores (`$3n+1`).
    /// Its rows: each request's position and fence, when granted; else one row, the
    /// first refused request's position, no fence, and the holder's remaining TTL in
    /// milliseconds (or `NULL`). A set granted in part fails instead, undone, with
    /// an error that [`set_refused_at`] reads.
    pub(crate) fn acquire_all(&self, n: usize) -> String {
        let rows = (0..n)
            .map(|i| {
                format!(
                    "(${}::text, ${}::bytea, ${}::float8, {i}, ${}::text)",
                    3 * i + 1,
                    3 * i + 2,
                    3 * i + 3,
                    3 * n + 1
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!("{}{rows}{}", self.acquire_all.0, self.acquire_all.1)
    }
}

/// The position of the first refused request, when `message` is the error of a set
/// step that was granted in part and undone.
pub(crate) fn set_refused_at(message: &str) -> Option<usize> {
    let (_, after) = message.split_once(SET_REFUSED)?;
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A statement's argument: bound, or (in PgBouncer mode) written into the statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Text(&'a str),
    Bytes(&'a [u8]),
    Float(f64),
    Int(i64),
    Bool(bool),
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
            Arg::Bool(value) => format!("{value}"),
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

/// The statements of one lock table's permits.
#[derive(Debug, Clone)]
pub(crate) struct PermitSql {
    pub(crate) migrate: Vec<String>,
    pub(crate) grant: String,
    pub(crate) release: String,
    pub(crate) extend: String,
    pub(crate) leave: String,
    pub(crate) holders: String,
    pub(crate) terms: String,
    pub(crate) proclaim: String,
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
        // The grant step stores the holder: a function of its own, so that a process
        // of an earlier version, still running, keeps calling the one it knows.
        let function = name("take_permits");
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
                       expires_at timestamptz NOT NULL, value text, holder text, granted_at timestamptz, \
                       PRIMARY KEY (name, owner))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {places} (name text NOT NULL, owner bytea NOT NULL, \
                       count bigint NOT NULL, until timestamptz NOT NULL, PRIMARY KEY (name, owner))"
                ),
                format!(
                    "CREATE TABLE IF NOT EXISTS {terms} (name text NOT NULL, fence bigint NOT NULL, \
                       previous bigint NOT NULL, value text NOT NULL, holder text, granted_at timestamptz, \
                       PRIMARY KEY (name, fence))"
                ),
                add_column(&grants, "holder", "text"),
                add_column(&grants, "granted_at", "timestamptz"),
                add_column(&terms, "holder", "text"),
                add_column(&terms, "granted_at", "timestamptz"),
                // The grant step (point 1 to 5 of the permit contract). The name's row
                // is locked first; every later statement sees what committed before.
                format!(
                    "CREATE OR REPLACE FUNCTION {function}(p_name text, p_owner bytea, \
                       p_ttl float8, p_count bigint, p_limit bigint, p_place float8, \
                       p_valued boolean, p_value text, p_kept bigint, p_holder text) \
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
                       INSERT INTO {grants} (name, owner, count, fence, expires_at, value, holder, granted_at) \
                         VALUES (p_name, p_owner, p_count, f, clock_timestamp() + p_ttl * interval '1 millisecond', \
                           CASE WHEN p_valued THEN p_value END, p_holder, clock_timestamp()); \
                       IF p_valued THEN \
                         INSERT INTO {terms} (name, fence, previous, value, holder, granted_at) \
                           VALUES (p_name, f, prev, p_value, p_holder, clock_timestamp()); \
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
            grant: format!(
                "SELECT outcome, answer FROM {function}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
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
                "SELECT fence, count, {remaining_ms}, value, holder, {GRANTED_MS} FROM {grants} \
                 WHERE name = $1 AND expires_at > clock_timestamp() ORDER BY fence"
            ),
            terms: format!(
                "SELECT fence, previous, value, holder, {GRANTED_MS} FROM {terms} \
                 WHERE name = $1 AND fence > $2 ORDER BY fence"
            ),
            // Only this owner's live grant, and its term; then the name's watchers.
            proclaim: format!(
                "WITH g AS (UPDATE {grants} SET value = $3 \
                   WHERE name = $1 AND owner = $2 AND expires_at > clock_timestamp() \
                   RETURNING fence), \
                 t AS (UPDATE {terms} SET value = $3 \
                   WHERE name = $1 AND fence IN (SELECT fence FROM g) RETURNING 1) \
                 SELECT {notify} FROM g"
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
            &self.proclaim,
        ]);
        all
    }
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
    fn every_statement_has_its_names_written_in() {
        let sql = Statements::new("locks", "held", false);
        let all = [
            &sql.acquire,
            &sql.acquire_in_turn,
            &sql.leave_queue,
            &sql.release,
            &sql.extend,
            &sql.inspect,
            &sql.list,
            &sql.force_release,
            &sql.mark_waited,
            &sql.purge,
        ];
        for statement in all.into_iter().chain(&sql.migrate).chain(sql.permits.all()) {
            assert!(
                !statement.contains('{'),
                "a name left unwritten: {statement}"
            );
        }
        assert!(sql.acquire.contains("nextval('\"locks\".\"held_fence\"')"));
        let set = sql.acquire_all(3);
        assert!(!set.contains('{'), "a name left unwritten: {set}");
        assert!(
            set.contains("($7::text, $8::bytea, $9::float8, 2, $10::text)"),
            "{set}"
        );
        assert!(!set.contains("$11"), "{set}");
    }

    #[test]
    fn a_refused_position_is_read_from_the_error_only() {
        let message = format!("invalid input syntax for type integer: \"{SET_REFUSED}2\"");
        assert_eq!(set_refused_at(&message), Some(2));
        assert_eq!(
            set_refused_at("invalid input syntax for type integer: \"x\""),
            None
        );
        assert_eq!(set_refused_at(SET_REFUSED), None);
    }

    #[test]
    fn a_placeholder_without_an_argument_is_left_as_it_is() {
        assert_eq!(inline("SELECT $4, $", &[Arg::Float(1.0)]), "SELECT $4, $");
    }
}
