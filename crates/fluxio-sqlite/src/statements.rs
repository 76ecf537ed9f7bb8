//! Validation of the settings that reach SQL or the file system, quoting,
//! and the SQL of the store.

use std::path::Path;

use fluxio_sql::{
    COMPLETED, Dialect as _, Listing, ROW_COLUMNS, RunStatements, Statements, WaitNames,
    WaitStatements,
};

use crate::journal::Sqlite;

use crate::error::SqliteStoreError;

/// The bookkeeping table of the migrations, shared by all stores of a file.
pub(crate) const MIGRATIONS_TABLE: &str = "_fluxio_migrations";

/// Checks `value` against `^[a-z_][a-z0-9_]{0,62}$` (see
/// [`fluxio_sql::check_identifier`]).
pub(crate) fn validate_identifier(
    setting: &'static str,
    value: &str,
) -> Result<(), SqliteStoreError> {
    fluxio_sql::check_identifier(value).map_err(|reason| SqliteStoreError::InvalidSetting {
        setting,
        value: value.to_owned(),
        reason: reason.to_owned(),
    })
}

/// Checks that `path` names a file: UTF-8 (sqlx passes it to SQLite as a C
/// string), not empty, not an in-memory database (each pooled connection
/// would get its own, empty one) and not a `file:` URI (SQLite would read
/// its query parameters as options).
pub(crate) fn validate_path(path: &Path) -> Result<(), SqliteStoreError> {
    let invalid = |reason: &str| SqliteStoreError::InvalidSetting {
        setting: "path",
        value: path.display().to_string(),
        reason: reason.to_owned(),
    };
    let Some(s) = path.to_str() else {
        return Err(invalid("it must be valid UTF-8"));
    };
    if s.is_empty() {
        return Err(invalid("it is empty"));
    }
    if s == ":memory:" || s.starts_with("file:") {
        return Err(invalid(
            "it must be the path of a file (not `:memory:` nor a `file:` URI): \
             the store's connections and other processes share it",
        ));
    }
    if s.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    Ok(())
}

/// The validated name of one store's checkpoint table, and the names made
/// from it.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) table: String,
}

impl Names {
    /// Validates the table name.
    pub(crate) fn new(table: &str) -> Result<Self, SqliteStoreError> {
        validate_identifier("table", table)?;
        if table.starts_with("sqlite_") || table == MIGRATIONS_TABLE {
            return Err(SqliteStoreError::InvalidSetting {
                setting: "table",
                value: table.to_owned(),
                reason: format!(
                    "names starting with `sqlite_` are SQLite's, and `{MIGRATIONS_TABLE}` is the store's own"
                ),
            });
        }
        Ok(Names {
            table: table.to_owned(),
        })
    }

    /// `"<table>"`.
    pub(crate) fn checkpoints(&self) -> String {
        quote(&self.table)
    }

    /// `"<table>_leases"`.
    pub(crate) fn leases(&self) -> String {
        quote(&format!("{}_leases", self.table))
    }

    /// The index on the checkpoints' `expires_at`.
    pub(crate) fn checkpoints_expires_at(&self) -> String {
        quote(&format!("{}_expires_at", self.table))
    }

    /// The index of schema version 3 on the checkpoints' `(pipeline,
    /// status, updated_at)`.
    pub(crate) fn checkpoints_pipeline(&self) -> String {
        quote(&format!("{}_pipeline", self.table))
    }

    /// The index of schema version 4 on the checkpoints' `(status,
    /// run_id)`: the runs in one state, in key order.
    pub(crate) fn checkpoints_state(&self) -> String {
        quote(&format!("{}_state", self.table))
    }

    /// The index of schema version 4 on the checkpoints' `(pipeline,
    /// status, run_id)`: a pipeline's runs in one state, in key order.
    pub(crate) fn checkpoints_pipeline_state(&self) -> String {
        quote(&format!("{}_pipeline_state", self.table))
    }

    /// The unique index on the leases' `token`.
    pub(crate) fn leases_token(&self) -> String {
        quote(&format!("{}_leases_token", self.table))
    }

    /// `"<table>_steps"`: the runs' journals, a row per checkpoint.
    pub(crate) fn steps(&self) -> String {
        quote(&format!("{}_steps", self.table))
    }

    /// The partial index on the steps that hold a whole context.
    pub(crate) fn steps_whole(&self) -> String {
        quote(&format!("{}_steps_whole", self.table))
    }

    /// The trigger that deletes a run's steps with its row.
    pub(crate) fn steps_cascade(&self) -> String {
        quote(&format!("{}_steps_cascade", self.table))
    }

    /// `"<table>_signals"`: the runs' mailboxes (rule 26).
    pub(crate) fn signals(&self) -> String {
        quote(&format!("{}_signals", self.table))
    }

    /// The trigger that deletes a run's mailbox with its row.
    pub(crate) fn signals_cascade(&self) -> String {
        quote(&format!("{}_signals_cascade", self.table))
    }

    /// The partial index of schema version 5 on the checkpoints' `(due_at,
    /// run_id)`: the due runs, earliest first.
    pub(crate) fn checkpoints_due(&self) -> String {
        quote(&format!("{}_due", self.table))
    }
}

/// A double-quoted SQL identifier. The names are validated before they get
/// here; doubling quotes keeps this safe on its own too.
pub(crate) fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// The gate's `cancelled` of a run's row: `1` cancelled (rule 14), `2`
/// paused (rule 30), `0` neither; each refuses a fenced write
/// ([`Gate::refusal`](crate::journal::Gate::refusal)).
const STOPPED: &str = "CASE status WHEN 'cancelled' THEN 1 WHEN 'paused' THEN 2 ELSE 0 END";

/// The writing connection's own table (in its `temp` schema, which no
/// other connection sees) holding one row: what the first statement of a
/// fenced append decided, for the statements after it in the same command.
/// A statement cannot hand a value to the next one otherwise, and deciding
/// again in each would read SQLite's clock again (a lease could expire in
/// between).
pub(crate) const GATE: &str = "temp.fluxio_gate";

/// The writing connection's own table (in its `temp` schema) holding the
/// fenced saves of one [`batch_append`](Sql::batch_append) command, one row
/// each (`i`: its place in the batch): what it writes, and what its gate
/// decided. Untyped columns: the values reach the store's tables as they
/// were bound.
pub(crate) const BATCH: &str = "temp.fluxio_batch";

/// Creates [`GATE`] and [`BATCH`] on a new writing connection.
pub(crate) const CREATE_TEMP: &str = "CREATE TEMP TABLE IF NOT EXISTS fluxio_gate \
     (id INTEGER PRIMARY KEY CHECK (id = 1), cancelled INTEGER NOT NULL, \
     held INTEGER NOT NULL, predecessor INTEGER NOT NULL); \
     CREATE TEMP TABLE IF NOT EXISTS fluxio_batch \
     (i INTEGER PRIMARY KEY, run_id, token, seq, whole, payload, version, ip, step, status, \
     error_message, created_at, expires, attempt, release, ttl, \
     cancelled, held, predecessor)";

/// How many parameters one save of a [`batch_append`](Sql::batch_append)
/// binds (see `journal::batch_arguments`).
pub(crate) const BATCH_PARAMS: usize = 15;

/// SQLite's clock in milliseconds since the Unix epoch, read once per
/// statement execution, after the statement has its locks (see "Clock" in
/// the crate documentation). `'subsec'` needs SQLite 3.42 (as `STRICT`
/// tables need 3.37 and `RETURNING` 3.35); sqlx's `sqlite` feature compiles
/// in its bundled copy, 3.46, whatever the system has.
const NOW: &str = "CAST(round(unixepoch('now', 'subsec') * 1000) AS INTEGER)";

/// The statements of one store, built once from its validated, quoted names.
/// Values are always bind parameters.
#[derive(Debug)]
pub(crate) struct Sql {
    /// The journal's writes (`fluxio-sql` runs them).
    pub(crate) journal: Statements,
    /// Listing runs (`fluxio-sql` builds the statement).
    pub(crate) list: Listing,
    /// The lease and the run's row: `acquire`, `held` (the lease is
    /// current), `exists`, `delete` and `release`, for the store's calls of
    /// those names and for starting and ending a run in one transaction.
    pub(crate) run: RunStatements,
    pub(crate) load: String,
    pub(crate) history: String,
    pub(crate) delete_fenced: String,
    /// A fenced append of one checkpoint as one command to the driver
    /// (several statements; anonymous parameters, bound in the order of
    /// [`journal::fenced_append`](crate::journal::fenced_append)): what
    /// the write decides with (the run is cancelled, the lease is current,
    /// the predecessor is stored or not needed) kept in the connection's
    /// [`GATE`] row, then the steps numbered `seq` or later dropped, the
    /// step inserted and the run's row upserted, each only when the gate
    /// allows it; then the gate read back.
    pub(crate) fenced_append: String,
    /// [`fenced_append`](Sql::fenced_append) that also gives up the lease
    /// (key, token), refused or not: the end of a run.
    pub(crate) finish_append: String,
    /// The parts of [`batch_append`](Sql::batch_append).
    pub(crate) batch: BatchSql,
    /// The append of a run's first checkpoint (a whole one, not sleeping
    /// nor waiting) once its lease is taken, as one command: the mailbox
    /// of the key emptied (key), then the steps numbered `seq` or later
    /// dropped, the step inserted, the run's row upserted (anonymous
    /// parameters, in the order of [`fenced_append`](Sql::fenced_append)'s
    /// after the gate's).
    pub(crate) first_append: String,
    /// [`first_append`](Sql::first_append), but deleting the stored run
    /// (key), its mailbox with it, rather than only its mailbox:
    /// [`Begin::Replace`](fluxio_core::store::Begin::Replace).
    pub(crate) first_replace: String,
    pub(crate) renew: String,
    pub(crate) purge_leases: String,
    pub(crate) purge_checkpoints: String,
}

/// The pieces of [`Sql::batch_append`]: the store's quoted table names,
/// and the statements after the batch's rows.
#[derive(Debug)]
pub(crate) struct BatchSql {
    cp: String,
    leases: String,
    steps: String,
    tail: String,
}

impl Sql {
    /// The fenced appends of `n` checkpoints of `n` distinct runs, as one
    /// command of ten statements whatever `n` (rather than
    /// [`fenced_append`](Sql::fenced_append) `n` times, five statements
    /// each, each a message from the driver's thread): the gate of each
    /// save decided, in one statement, into a [`BATCH`] row with what it
    /// writes; the runs that begin take their lease (tokens drawn in the
    /// batch's order, as one acquisition after the other would draw them)
    /// and lose their stored run; then the steps from each allowed save's
    /// `seq` on dropped, the allowed steps inserted and their runs' rows
    /// upserted, one statement each, and the leases of the saves that end
    /// their run given up (allowed or not); then the gates read back, in
    /// the saves' order, with each lease's token. Each save binds
    /// [`BATCH_PARAMS`] parameters, in the order of
    /// `journal::batch_arguments`.
    ///
    /// A save with a lease time to live (`?15` not NULL) begins its run,
    /// as [`run.acquire`](RunStatements::acquire) then
    /// [`first_replace`](Sql::first_replace): its gate is whether the lease
    /// is free (neither cancelled nor a predecessor is looked for).
    ///
    /// The runs must be distinct: each gate is decided before any save of
    /// the batch writes, which is what deciding them one after the other
    /// would find only when no save writes what another one reads (a run
    /// reads and writes only its own rows, and the tokens are drawn apart).
    pub(crate) fn batch_append(&self, n: usize) -> String {
        use std::fmt::Write as _;
        let BatchSql {
            cp, leases, steps, ..
        } = &self.batch;
        let mut text = format!(
            "DELETE FROM {BATCH}; \
             INSERT INTO {BATCH} (i, run_id, token, seq, whole, payload, version, ip, \
             step, status, error_message, created_at, expires, attempt, release, ttl, \
             cancelled, held, predecessor) VALUES "
        );
        for k in 0..n {
            let p = k * BATCH_PARAMS;
            if k > 0 {
                text.push_str(", ");
            }
            // key ?1, token ?2, seq ?3, whole ?4, payload ?5, then the
            // run's row: version ?6 .. attempt ?13; release ?14, ttl ?15
            let [key, token, seq, whole] = [p + 1, p + 2, p + 3, p + 4];
            let ttl = p + 15;
            let _ = write!(text, "({k}");
            for q in 1..=15 {
                let _ = write!(text, ", ?{}", p + q);
            }
            let _ = write!(
                text,
                ", CASE WHEN ?{ttl} IS NULL THEN coalesce((SELECT {STOPPED} \
                 FROM {cp} WHERE run_id = ?{key}), 0) ELSE 0 END, \
                 CASE WHEN ?{ttl} IS NULL THEN EXISTS (SELECT 1 FROM {leases} \
                 WHERE run_id = ?{key} AND token = ?{token} AND expires_at > {NOW}) \
                 ELSE NOT EXISTS (SELECT 1 FROM {leases} \
                 WHERE run_id = ?{key} AND expires_at > {NOW}) END, \
                 ?{whole} OR EXISTS (SELECT 1 FROM {steps} \
                 WHERE run_id = ?{key} AND seq = ?{seq} - 1))"
            );
        }
        text.push_str(&self.batch.tail);
        text
    }
}

impl Sql {
    pub(crate) fn new(names: &Names) -> Self {
        let cp = names.checkpoints();
        let leases = names.leases();
        let steps = names.steps();
        // the run's row: `?7` its start in milliseconds, `?8` the
        // retention in milliseconds (NULL: never expires), `?9` the attempt
        // and `?10` when it is due, in milliseconds (NULL: not due)
        let values = format!("?1, X'', ?2, ?3, ?4, ?5, ?6, ?7, {NOW}, {NOW} + ?8, ?9, ?10");
        let upsert = &Sqlite::UPSERT.row();
        let visible = format!("(expires_at IS NULL OR expires_at > {NOW})");
        let visible_run = format!("EXISTS (SELECT 1 FROM {cp} WHERE run_id = ?1 AND {visible})");
        // The fenced append, one command: the gate decided once (key; key,
        // token; whole, key, seq), then each write only when it allows.
        let gate_ok = format!("(SELECT NOT cancelled AND held AND predecessor FROM {GATE})");
        let append = format!(
            "DELETE FROM {steps} WHERE run_id = ? AND seq >= ?; \
             INSERT INTO {steps} (run_id, seq, whole, payload) VALUES (?, ?, ?, ?); \
             INSERT INTO {cp} ({ROW_COLUMNS}) \
             VALUES (?, X'', ?, ?, ?, ?, ?, ?, {NOW}, {NOW} + ?, ?, NULL) {upsert}"
        );
        let fenced_writes = format!(
            "INSERT OR REPLACE INTO {GATE} (id, cancelled, held, predecessor) VALUES (1, \
             coalesce((SELECT {STOPPED} FROM {cp} WHERE run_id = ?), 0), \
             EXISTS (SELECT 1 FROM {leases} WHERE run_id = ? AND token = ? \
             AND expires_at > {NOW}), \
             ? OR EXISTS (SELECT 1 FROM {steps} WHERE run_id = ? AND seq = ? - 1)); \
             DELETE FROM {steps} WHERE run_id = ? AND seq >= ? AND {gate_ok}; \
             INSERT INTO {steps} (run_id, seq, whole, payload) \
             SELECT ?, ?, ?, ? WHERE {gate_ok}; \
             INSERT INTO {cp} ({ROW_COLUMNS}) \
             SELECT ?, X'', ?, ?, ?, ?, ?, ?, {NOW}, {NOW} + ?, ?, NULL WHERE {gate_ok} {upsert};"
        );
        let read_gate = format!("SELECT cancelled, held, predecessor FROM {GATE}");
        // Why a fenced write cannot land after a takeover: SQLite lets one
        // connection of all processes write to the file at a time (the WAL
        // write lock). A fenced save is a `BEGIN IMMEDIATE` transaction,
        // which takes that lock before its first read, and the guarded
        // deletes are one statement each, which takes it before it reads
        // anything, from the newest committed state. So each checks the
        // lease and writes as one indivisible step: a takeover (the acquire
        // statement, which changes the token) commits either entirely
        // before it, and the check sees the new token and writes nothing,
        // or entirely after it.
        let keep_completed = keep_completed(&cp, &visible);
        Sql {
            // one write at a time already (the write lock): no keep lock
            journal: Statements::new::<Sqlite>(
                (&cp, &steps),
                &values,
                (keep_completed, None),
                wait_statements(names),
            ),
            // The run rows with their lease where it is held (SQLite's
            // clock), in key order (BINARY: bytes); schema version 4's
            // indexes make each filter one range of keys.
            list: Listing {
                select: format!(
                    "SELECT c.run_id, c.version, c.status, c.step, c.attempt, \
                     c.error_message, c.created_at, c.updated_at, l.expires_at \
                     FROM {cp} AS c LEFT JOIN {leases} AS l \
                     ON l.run_id = c.run_id AND l.expires_at > {NOW}"
                ),
                visible: format!("(c.expires_at IS NULL OR c.expires_at > {NOW})"),
                key: "c.run_id".to_owned(),
                held: "l.expires_at".to_owned(),
                id: "substr(c.run_id, instr(c.run_id, '/') + 1)".to_owned(),
                pipeline: "c.pipeline".to_owned(),
            },
            // From the last whole checkpoint on (the partial index finds
            // it), in one statement: one read snapshot.
            load: format!(
                "SELECT payload FROM {steps} WHERE run_id = ?1 AND seq >= \
                 (SELECT coalesce(max(seq), 0) FROM {steps} WHERE run_id = ?1 AND whole = 1) \
                 AND {visible_run} ORDER BY seq"
            ),
            history: format!(
                "SELECT payload FROM {steps} WHERE run_id = ?1 AND {visible_run} ORDER BY seq"
            ),
            delete_fenced: format!(
                "DELETE FROM {cp} WHERE run_id = ?1 AND EXISTS ({})",
                current_lease(&leases, "?2")
            ),
            run: run_statements(&cp, &leases, &visible),
            fenced_append: format!("{fenced_writes} {read_gate}"),
            finish_append: format!(
                "{fenced_writes} \
                 UPDATE {leases} SET expires_at = NULL WHERE run_id = ? AND token = ?; \
                 {read_gate}"
            ),
            batch: BatchSql {
                tail: batch_tail(&cp, &leases, &steps, upsert),
                cp: cp.clone(),
                leases: leases.clone(),
                steps: steps.clone(),
            },
            // the run's row, and its mailbox with it (the trigger of
            // schema version 5)
            first_replace: format!("DELETE FROM {cp} WHERE run_id = ?; {append}"),
            // a fresh run under the key: none of an old (expired) run's
            // signals
            first_append: format!("DELETE FROM {} WHERE run_id = ?; {append}", names.signals()),
            renew: format!(
                "UPDATE {leases} SET expires_at = {NOW} + ?3 \
                 WHERE run_id = ?1 AND token = ?2 AND expires_at > {NOW}"
            ),
            // Released and expired lease rows go, except the one holding the
            // greatest token: it keeps max(token), and so every later token,
            // above every earlier one.
            purge_leases: format!(
                "DELETE FROM {leases} WHERE (expires_at IS NULL OR expires_at <= {NOW}) \
                 AND token < (SELECT max(token) FROM {leases})"
            ),
            purge_checkpoints: format!("DELETE FROM {cp} WHERE expires_at <= {NOW}"),
        }
    }
}

/// The completed runs of pipeline `?1` but the `?2` newest `visible` ones
/// (expired ones go too: they are purgeable). Both scans are one range of
/// the `(pipeline, status, updated_at)` index of schema version 3; the
/// steps and the mailboxes go with the rows (the triggers of versions 2
/// and 5).
fn keep_completed(cp: &str, visible: &str) -> String {
    format!(
        "DELETE FROM {cp} WHERE pipeline = ?1 AND status = '{COMPLETED}' \
         AND run_id NOT IN (SELECT run_id FROM {cp} \
         WHERE pipeline = ?1 AND status = '{COMPLETED}' AND {visible} \
         ORDER BY updated_at DESC, run_id DESC LIMIT ?2)"
    )
}

/// The statements of runs that wait (rules 25-27) on the store's tables.
fn wait_statements(names: &Names) -> WaitStatements {
    let (cp, leases, signals) = (names.checkpoints(), names.leases(), names.signals());
    // its watchers are told in process, after the commit (`SqliteStore::tell`)
    WaitStatements::new::<Sqlite>(WaitNames {
        due_hint: &format!(" INDEXED BY {}", names.checkpoints_due()),
        ..WaitNames::millis((&cp, &leases, &signals), NOW)
    })
}

/// The current, unexpired lease of run `?1` with token `tok`.
fn current_lease(leases: &str, tok: &str) -> String {
    format!(
        "SELECT 1 FROM {leases} AS l \
         WHERE l.run_id = ?1 AND l.token = {tok} AND l.expires_at > {NOW}"
    )
}

/// The statements of a run's row and lease (`?1` the key).
fn run_statements(cp: &str, leases: &str, visible: &str) -> RunStatements {
    RunStatements {
        exists: format!("SELECT EXISTS (SELECT 1 FROM {cp} WHERE run_id = ?1 AND {visible})"),
        // The steps and the mailbox go with the row (the triggers of schema
        // versions 2 and 5).
        delete: format!("DELETE FROM {cp} WHERE run_id = ?1"),
        held: format!("SELECT EXISTS ({})", current_lease(leases, "?2")),
        // Insert the first lease, or take over a released or expired
        // one, with a token one greater than any in the table (read under
        // the write lock, so no two acquisitions draw the same one). No
        // row returned: held by another.
        acquire: format!(
            "INSERT INTO {leases} AS l (run_id, token, expires_at) \
             VALUES (?1, (SELECT coalesce(max(token), 0) + 1 FROM {leases}), {NOW} + ?2) \
             ON CONFLICT (run_id) DO UPDATE \
             SET token = excluded.token, expires_at = excluded.expires_at \
             WHERE l.expires_at IS NULL OR l.expires_at <= {NOW} \
             RETURNING token"
        ),
        drawn: None,
        release: format!("UPDATE {leases} SET expires_at = NULL WHERE run_id = ?1 AND token = ?2"),
    }
}

/// The statements of a batch after its rows are in [`BATCH`]: leases
/// drawn and taken for the runs it begins, then, where the gate allows,
/// each run's later steps dropped, its step and row written, its lease
/// released when asked; the gates read back in order.
fn batch_tail(cp: &str, leases: &str, steps: &str, upsert: &str) -> String {
    let ok = "NOT b.cancelled AND b.held AND b.predecessor";
    let begins = "b.ttl IS NOT NULL AND b.held";
    format!(
        "; UPDATE {BATCH} AS b SET token = \
         (SELECT coalesce(max(token), 0) FROM {leases}) + (SELECT count(*) \
         FROM {BATCH} AS o WHERE o.ttl IS NOT NULL AND o.held AND o.i <= b.i) \
         WHERE {begins}; \
         INSERT INTO {leases} AS l (run_id, token, expires_at) \
         SELECT b.run_id, b.token, {NOW} + b.ttl FROM {BATCH} AS b \
         WHERE {begins} ORDER BY b.i \
         ON CONFLICT (run_id) DO UPDATE \
         SET token = excluded.token, expires_at = excluded.expires_at \
         WHERE l.expires_at IS NULL OR l.expires_at <= {NOW}; \
         DELETE FROM {cp} WHERE run_id IN \
         (SELECT b.run_id FROM {BATCH} AS b WHERE {begins}); \
         DELETE FROM {steps} WHERE rowid IN (SELECT s.rowid \
         FROM {BATCH} AS b JOIN {steps} AS s \
         ON s.run_id = b.run_id AND s.seq >= b.seq WHERE {ok}); \
         INSERT INTO {steps} (run_id, seq, whole, payload) \
         SELECT b.run_id, b.seq, b.whole, b.payload FROM {BATCH} AS b \
         WHERE {ok} ORDER BY b.i; \
         INSERT INTO {cp} ({ROW_COLUMNS}) \
         SELECT b.run_id, X'', b.version, b.ip, b.step, b.status, \
         b.error_message, b.created_at, {NOW}, {NOW} + b.expires, b.attempt, NULL \
         FROM {BATCH} AS b WHERE {ok} ORDER BY b.i {upsert}; \
         UPDATE {leases} SET expires_at = NULL WHERE rowid IN (SELECT l.rowid \
         FROM {BATCH} AS b JOIN {leases} AS l \
         ON l.run_id = b.run_id AND l.token = b.token WHERE b.release); \
         SELECT cancelled, held, predecessor, token FROM {BATCH} ORDER BY i"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_names_the_statuses_fenced_writes_refuse() {
        let cancelled = format!("'{}' THEN 1", fluxio_sql::CANCELLED);
        let paused = format!("'{}' THEN 2", fluxio_sql::PAUSED);
        assert!(
            STOPPED.contains(&cancelled) && STOPPED.contains(&paused),
            "{STOPPED}"
        );
    }

    /// The grammar is `fluxio_sql::check_identifier`'s, tested there: here,
    /// that the table goes through it, and SQLite's own reserved names.
    #[test]
    fn identifiers() {
        for ok in ["fluxio_checkpoints", "_x", &"a".repeat(63)] {
            assert!(Names::new(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(64);
        for bad in ["", "a;b", "A", &long, "sqlite_master", "_fluxio_migrations"] {
            let err = Names::new(bad).expect_err(bad).to_string();
            assert!(err.starts_with("invalid table "), "{err}");
        }
    }

    #[test]
    fn paths() {
        for ok in ["fluxio.db", "/tmp/x/y.sqlite", "./file:x.db", "a b.db"] {
            assert!(validate_path(Path::new(ok)).is_ok(), "{ok}");
        }
        for bad in ["", ":memory:", "file:x.db?mode=memory", "a\0b"] {
            let err = validate_path(Path::new(bad)).expect_err(bad).to_string();
            assert!(err.starts_with("invalid path "), "{err}");
        }
    }

    #[test]
    fn statements_quote_the_names() {
        let sql = Sql::new(&Names::new("t1").expect("valid"));
        assert!(sql.journal.save.starts_with("INSERT INTO \"t1\" ("));
        assert!(
            sql.run
                .acquire
                .starts_with("INSERT INTO \"t1_leases\" AS l")
        );
        assert!(sql.purge_leases.contains("\"t1_leases\""));
    }
}
