//! The SQL, built once per backend from a table name that [`check_table`]
//! (crate::config) has already limited to `[a-z_][a-z0-9_]*`.
//!
//! Time is the server's, in UTC (`UTC_TIMESTAMP(6)`, microseconds), never a client's
//! and never the session's time zone. MySQL reads the clock once per statement, so a
//! statement that waited on a row lock judges leases as of its start: a lease then
//! looks alive a little longer than it is (a grant is refused, never given early),
//! and a grant's lease ends a little sooner than asked (the client counts its
//! validity from before it sent the request, so it never trusts a lease longer than
//! the server keeps it). A release therefore ends a lease by setting its expiry to a
//! fixed past, never to its own clock, which a statement that waited for the row
//! could still judge to be in the future.
//!
//! # Fences
//!
//! Each row keeps its name's last fence, and a grant raises it by one under the row's
//! lock. A name's first row starts above `top` in `<table>_floor`, the highest fence
//! of any row the purge has deleted, so a name purged and taken again never gets a
//! fence below one it had. Every grant reads `top` with a shared lock, and the purge
//! raises it and deletes rows in one transaction that holds it exclusively: a grant
//! and a purge never overlap, so no grant can read a `top` the purge is about to make
//! stale. The delete itself takes only rows whose fence is at most the raised `top`,
//! judged on each row's latest version under its lock, so a row the purge's reading
//! missed is kept, never deleted above the floor.
//!
//! # Answers in the OK packet
//!
//! The acquire statement tells its outcome in the insert id of its OK packet: it calls
//! `LAST_INSERT_ID(expr)` with the granted fence (below 2⁶³, being a `BIGINT`), or
//! when refused with [`REFUSED`] (2⁶³) plus the holder's remaining TTL in
//! microseconds, and the server reports the last such value of the statement. So an
//! acquisition is one statement and one round trip whether granted or not, with no
//! `RETURNING` (which MySQL lacks) and no affected-rows count (which the driver's
//! `CLIENT_FOUND_ROWS` makes ambiguous).

/// The statements of one lock table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) migrate: Vec<String>,
    /// The tables the migration creates, unquoted.
    pub(crate) tables: Vec<String>,
    /// Counts the migration's tables that are there, the floor's row, and the lock
    /// table's holder column.
    pub(crate) check: String,
    pub(crate) acquire: String,
    /// The lock table and the floor, quoted: for [`Statements::acquire_all`].
    table: (String, String),
    pub(crate) fair: FairSql,
    pub(crate) release: String,
    pub(crate) extend: String,
    pub(crate) inspect: String,
    /// The holder's remaining TTL in microseconds, while the key is held.
    pub(crate) inspect_remaining: String,
    pub(crate) list: String,
    pub(crate) force_release: String,
    pub(crate) lock_floor: String,
    pub(crate) raise_floor: String,
    pub(crate) purge: String,
    pub(crate) purge_places: String,
}

/// The statements of the fair step and of leaving the queue: the waiters of a key in
/// `<table>_queue`, one row per waiter, in the order of an `AUTO_INCREMENT` `seq`.
///
/// The fair step is one short transaction at `READ COMMITTED`, in the order below. Its
/// first statement takes the key's row in the lock table exclusively (creating it,
/// ended, with no fence minted, if the name is new), so the fair steps and plain
/// acquisitions of one key run one at a time, and the queue of a key changes only
/// under that lock: no gap locks are needed, and two waiters' steps never deadlock.
#[derive(Debug, Clone)]
pub(crate) struct FairSql {
    /// Locks the key's row; a new name's row is created ended, its fence the floor's.
    pub(crate) lock_key: String,
    /// Whether the key is held now by this owner (a retry of a granted step).
    pub(crate) mine: String,
    /// Drops the places of other waiters that ran out.
    pub(crate) drop_run_out: String,
    /// Queues this owner, or renews its place (keeping its `seq`).
    pub(crate) queue: String,
    /// The owner at the head of the queue.
    pub(crate) head: String,
    /// Takes this owner out of the queue (granted, or giving up).
    pub(crate) leave: String,
}
/// One request of a set: the key's bytes, the owner token's and the TTL in
/// microseconds.
pub(crate) type SetRequest<'a> = (&'a [u8], &'a [u8], i64);

/// Bytes as a hexadecimal literal: digits only, so nothing in them can end it.
fn hex_literal(bytes: &[u8]) -> String {
    let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("X'{digits}'")
}

impl Statements {
    /// The set step for `requests`: one batch of statements in one round trip, its
    /// values written in as literals (hexadecimal bytes and integers).
    ///
    /// One short transaction at `READ COMMITTED` takes the key of every request as
    /// [`acquire`](Self::acquire) takes one, in the requests' order (the keys sorted,
    /// so two sets meet at their first common key and never deadlock); counts the
    /// keys its owners now hold; and, when that is fewer than all, ends those
    /// leases again before it commits, so a set is held whole or not at all. The
    /// count goes through the session's user variable `@distlock_set`. After the
    /// commit, one row per key that has a row: its name, owner, fence and remaining
    /// TTL in microseconds, from which the caller reads the answer.
    pub(crate) fn acquire_all(&self, requests: &[SetRequest<'_>], holder: &[u8]) -> String {
        let (t, floor) = &self.table;
        let rows = requests
            .iter()
            .enumerate()
            .map(|(i, (name, owner, us))| {
                let (name, owner) = (hex_literal(name), hex_literal(owner));
                if i == 0 {
                    format!("SELECT {name} AS name, {owner} AS owner, {us} AS us, {i} AS i")
                } else {
                    format!("SELECT {name}, {owner}, {us}, {i}")
                }
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        let pairs = requests
            .iter()
            .map(|(name, owner, _)| format!("({}, {})", hex_literal(name), hex_literal(owner)))
            .collect::<Vec<_>>()
            .join(", ");
        let names = requests
            .iter()
            .map(|(name, _, _)| hex_literal(name))
            .collect::<Vec<_>>()
            .join(", ");
        let n = requests.len();
        let holder = hex_literal(holder);
        let take = take_holder(t);
        format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; \
             START TRANSACTION; \
             INSERT INTO {t} (name, owner, fence, expires_at, holder, granted_at) \
               SELECT r.name, r.owner, f.top + 1, UTC_TIMESTAMP(6) + INTERVAL r.us MICROSECOND, \
                 {holder}, UTC_TIMESTAMP(6) \
               FROM ({rows}) r JOIN {floor} f ON f.id = 1 \
               ORDER BY r.i LOCK IN SHARE MODE \
             ON DUPLICATE KEY UPDATE \
               fence = IF({t}.expires_at <= UTC_TIMESTAMP(6), {t}.fence + 1, {t}.fence), \
               {take} \
               owner = IF({t}.expires_at <= UTC_TIMESTAMP(6), VALUES(owner), {t}.owner), \
               expires_at = IF({t}.owner = VALUES(owner), VALUES(expires_at), {t}.expires_at); \
             SET @distlock_set = (SELECT COUNT(*) FROM {t} \
               WHERE (name, owner) IN ({pairs}) AND expires_at > UTC_TIMESTAMP(6)); \
             UPDATE {t} SET expires_at = '{ENDED}' \
               WHERE (name, owner) IN ({pairs}) AND @distlock_set < {n}; \
             COMMIT; \
             SELECT name, owner, fence, {REMAINING_US} FROM {t} WHERE name IN ({names})"
        )
    }
}

/// The expiry of a released lease: before any clock a statement reads.
const ENDED: &str = "1970-01-01 00:00:00";

/// Added to the holder's remaining TTL in a refusal's insert id: no fence reaches it.
pub(crate) const REFUSED: u64 = 1 << 63;

/// The holder and grant time, taken with a lease that ended (an `ON DUPLICATE KEY
/// UPDATE`'s assignments, before the owner's and the expiry's).
fn take_holder(t: &str) -> String {
    format!(
        "holder = IF({t}.expires_at <= UTC_TIMESTAMP(6), VALUES(holder), {t}.holder), \
         granted_at = IF({t}.expires_at <= UTC_TIMESTAMP(6), VALUES(granted_at), {t}.granted_at),"
    )
}

/// The grant time in microseconds since the Unix epoch (stored in UTC).
const GRANTED_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', granted_at)";

/// Adds the holder's columns to a lock table made before they existed: one batch,
/// run on one connection, that alters the table only when the column is missing
/// (MySQL has no `ADD COLUMN IF NOT EXISTS`). A lease granted before has no holder
/// (`NULL`), and is read as such.
fn add_holder_columns(table: &str) -> String {
    format!(
        "SET @distlock_ddl = (SELECT IF(COUNT(*) = 0, \
           'ALTER TABLE `{table}` ADD COLUMN holder VARBINARY(1300) NULL, ADD COLUMN granted_at DATETIME(6) NULL', \
           'DO 0') FROM information_schema.columns \
           WHERE table_schema = DATABASE() AND table_name = '{table}' AND column_name = 'holder'); \
         PREPARE distlock_ddl FROM @distlock_ddl; \
         EXECUTE distlock_ddl; \
         DEALLOCATE PREPARE distlock_ddl"
    )
}

/// Microseconds until `expires_at`, by the server's clock.
const REMAINING_US: &str = "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)";

impl Statements {
    pub(crate) fn new(table: &str) -> Self {
        let t = format!("`{table}`");
        let floor = format!("`{table}_floor`");
        let q = format!("`{table}_queue`");
        let take = take_holder(&t);
        Statements {
            migrate: vec![
                // `name` holds a lock key's UTF-8 bytes (at most 256), compared byte
                // for byte; `owner` the owner token's 16 bytes.
                format!(
                    "CREATE TABLE IF NOT EXISTS {t} (\
                       name VARBINARY(256) NOT NULL, \
                       owner VARBINARY(64) NOT NULL, \
                       fence BIGINT NOT NULL, \
                       expires_at DATETIME(6) NOT NULL, \
                       holder VARBINARY(1300) NULL, \
                       granted_at DATETIME(6) NULL, \
                       PRIMARY KEY (name)) ENGINE=InnoDB"
                ),
                add_holder_columns(table),
                format!(
                    "CREATE TABLE IF NOT EXISTS {floor} (\
                       id TINYINT NOT NULL, \
                       top BIGINT NOT NULL, \
                       PRIMARY KEY (id)) ENGINE=InnoDB"
                ),
                format!("INSERT IGNORE INTO {floor} (id, top) VALUES (1, 0)"),
                // Fair waiters: one row per waiter, in the order of `seq`, each kept
                // until `until` unless the waiter calls again.
                format!(
                    "CREATE TABLE IF NOT EXISTS {q} (\
                       name VARBINARY(256) NOT NULL, \
                       owner VARBINARY(64) NOT NULL, \
                       seq BIGINT NOT NULL AUTO_INCREMENT, \
                       until DATETIME(6) NOT NULL, \
                       PRIMARY KEY (name, owner), \
                       KEY arrival (seq), \
                       KEY turn (name, seq)) ENGINE=InnoDB"
                ),
            ],
            tables: vec![
                table.to_owned(),
                format!("{table}_floor"),
                format!("{table}_queue"),
            ],
            check: format!(
                "SELECT \
                   (SELECT COUNT(*) FROM information_schema.tables \
                      WHERE table_schema = DATABASE() \
                        AND table_name IN ('{table}', '{table}_floor', '{table}_queue')), \
                   (SELECT COUNT(*) FROM {floor} WHERE id = 1), \
                   (SELECT COUNT(*) FROM information_schema.columns \
                      WHERE table_schema = DATABASE() AND table_name = '{table}' \
                        AND column_name = 'holder')"
            ),
            // Inserts the name's first row (its fence above the floor), or takes over
            // a row whose lease ended, or confirms a live retry of this very owner
            // (same fence, lease renewed). The assignments run left to right, each
            // seeing the ones before: the fence first, from the row as it was; then
            // the owner, from the old expiry; then the expiry, from the new owner.
            acquire: format!(
                "INSERT INTO {t} (name, owner, fence, expires_at, holder, granted_at) \
                 SELECT ?, ?, LAST_INSERT_ID(f.top + 1), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, \
                   ?, UTC_TIMESTAMP(6) \
                   FROM {floor} f WHERE f.id = 1 LOCK IN SHARE MODE \
                 ON DUPLICATE KEY UPDATE \
                   fence = IF({t}.expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID({t}.fence + 1), \
                            IF({t}.owner = VALUES(owner), LAST_INSERT_ID({t}.fence), \
                               {t}.fence + 0 * LAST_INSERT_ID({REFUSED} + {REMAINING_US}))), \
                   {take} \
                   owner = IF({t}.expires_at <= UTC_TIMESTAMP(6), VALUES(owner), {t}.owner), \
                   expires_at = IF({t}.owner = VALUES(owner), VALUES(expires_at), {t}.expires_at)"
            ),
            table: (t.clone(), floor.clone()),
            fair: FairSql {
                lock_key: format!(
                    "INSERT INTO {t} (name, owner, fence, expires_at) \
                     SELECT ?, '', f.top, '{ENDED}' FROM {floor} f WHERE f.id = 1 LOCK IN SHARE MODE \
                     ON DUPLICATE KEY UPDATE name = VALUES(name)"
                ),
                mine: format!(
                    "SELECT COUNT(*) FROM {t} \
                     WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"
                ),
                drop_run_out: format!(
                    "DELETE FROM {q} WHERE name = ? AND owner <> ? AND until <= UTC_TIMESTAMP(6)"
                ),
                queue: format!(
                    "INSERT INTO {q} (name, owner, until) \
                     VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) \
                     ON DUPLICATE KEY UPDATE until = VALUES(until)"
                ),
                head: format!("SELECT owner FROM {q} WHERE name = ? ORDER BY seq LIMIT 1"),
                leave: format!("DELETE FROM {q} WHERE name = ? AND owner = ?"),
            },
            // Ends this owner's live lease; the row stays, with its fence. The row's
            // expiry goes to a fixed past ([`ENDED`]), not to this statement's clock: a
            // statement that read the clock earlier and waited for this row (an
            // extend racing the release) would otherwise still see the lease as live
            // and revive it.
            release: format!(
                "UPDATE {t} SET expires_at = '{ENDED}' \
                 WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            // Only a live lease of this owner; never revives an ended one.
            extend: format!(
                "UPDATE {t} SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE name = ? AND owner = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            inspect: format!(
                "SELECT fence, {REMAINING_US}, holder, {GRANTED_US} FROM {t} \
                 WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            inspect_remaining: format!(
                "SELECT {REMAINING_US} FROM {t} \
                 WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            list: format!(
                "SELECT name, fence, {REMAINING_US}, holder, {GRANTED_US} FROM {t} \
                 WHERE LEFT(name, LENGTH(?)) = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            force_release: format!(
                "UPDATE {t} SET expires_at = '{ENDED}' \
                 WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
            ),
            // The purge's transaction: the floor first, exclusively (every grant waits
            // for it, and it for every grant under way), then the floor raised over
            // the rows about to go, then those rows deleted.
            lock_floor: format!("SELECT top FROM {floor} WHERE id = 1 FOR UPDATE"),
            raise_floor: format!(
                "UPDATE {floor} SET top = GREATEST(top, COALESCE( \
                   (SELECT MAX(fence) FROM {t} \
                      WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND), 0)) \
                 WHERE id = 1"
            ),
            purge: format!(
                "DELETE FROM {t} \
                 WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND \
                   AND fence <= (SELECT top FROM {floor} WHERE id = 1)"
            ),
            // Places of waiters that vanished from keys nobody asks for again.
            purge_places: format!(
                "DELETE FROM {q} WHERE until < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_s_values_are_written_in_as_hexadecimal_and_integers_only() {
        let sql = Statements::new("locks");
        let batch = sql.acquire_all(
            &[(b"a'; DROP", &[0xab, 0x01], 5_000), (b"b", &[0xff], 7)],
            b"host:1'; DROP",
        );
        assert!(!batch.contains('{'), "a name left unwritten: {batch}");
        assert!(!batch.contains("DROP"), "a key written as text: {batch}");
        assert!(batch.contains("X'61273b2044524f50'"), "{batch}");
        assert!(batch.contains("(X'62', X'ff')"), "{batch}");
        assert!(batch.contains("X'686f73743a31273b2044524f50'"), "{batch}");
        assert!(batch.contains("@distlock_set < 2"), "{batch}");
        assert!(batch.contains("INSERT INTO `locks` "), "{batch}");
    }
}
