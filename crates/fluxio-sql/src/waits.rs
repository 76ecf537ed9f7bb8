//! Runs that wait (contract rules 25-27) in SQL, the same for every SQL
//! store: when a run is due (the run row's `due_at`, written with every
//! write of the row), its mailbox (the `<table>_signals` rows), the due
//! runs (one statement over the run rows and the leases), and what the
//! store tells its watchers.
//!
//! The decisions are fluxio-core's ([`deliver`](fluxio_core::store::deliver),
//! [`decide`](fluxio_core::store::decide), [`Pending::due_ms`]), so that
//! every store answers alike; the order of the statements, in the caller's
//! transaction, which locks the run as its fenced writes do, is
//! [`Journal`](crate::Journal)'s (`journal.rs`). What is here are the
//! statements and the values they read and bind: each store gives the text
//! that names its tables, reads its clock and tells its watchers
//! ([`WaitNames`]).

use fluxio_core::Context;
use fluxio_core::store::{
    Checkpoint, DueFilter, DueRun, MAX_UNTIL_MS, Payload, RunEvent, RunEventKind, RunFilter,
    RunStatus, Signal, SignalState,
};
use fluxio_core::{Error, Result};

use crate::list::Arg;
use crate::{Dialect, Statement};

/// What one store's statements of runs that wait are made of: its
/// validated, quoted names and a few pieces of its SQL.
#[doc(hidden)]
#[derive(Debug)]
pub struct WaitNames<'a> {
    /// The checkpoint table (a row per run).
    pub checkpoints: &'a str,
    /// The lease table.
    pub leases: &'a str,
    /// The mailbox table, `<table>_signals`.
    pub signals: &'a str,
    /// The key of the run rows `c` as it sorts in key order (byte order).
    pub key_order: &'a str,
    /// The store's clock as the lease rows' `expires_at` hold a time: the
    /// lease row `l` is held while it expires later.
    pub lease_now: &'a str,
    /// The store's clock, in milliseconds since the Unix epoch: an
    /// integer expression.
    pub now_ms: &'a str,
    /// How the due runs' statement leaves out the runs whose lease is
    /// held, so that the database's planner reads each candidate's lease
    /// by its key.
    pub lease_free: LeaseFree,
    /// What follows `AS c` in the due runs' statement: empty, or a hint
    /// that makes the planner read the due index (SQLite's `INDEXED BY`:
    /// without statistics, it prefers the pipeline's index, whose range is
    /// every run of the pipeline).
    pub due_hint: &'a str,
    /// What ends a claim's read of the due runs and their lease rows, so
    /// that workers claiming at once take different runs, never wait for
    /// a row another transaction holds, and read each run's row as it is
    /// once locked (not a run another worker finished meanwhile):
    /// Postgres' `FOR UPDATE OF c, l SKIP LOCKED`, MySQL's
    /// `FOR UPDATE SKIP LOCKED`; empty where one writer at a time claims
    /// (SQLite).
    pub claim_lock: &'a str,
    /// How the store tells its watchers inside a transaction; `None` where
    /// it does not (its watchers poll, or are told in process).
    pub notify: Option<Notify>,
}

impl<'a> WaitNames<'a> {
    /// The names of a store on `tables` (checkpoints, leases, mailbox)
    /// whose rows keep every time in milliseconds since the Unix epoch, read
    /// from its clock `now_ms` (SQLite, MySQL), and whose keys sort in key
    /// order as they are: its due runs' statement leaves the held runs out
    /// with `NOT EXISTS`, without a hint, and it tells no watcher in its
    /// transactions.
    #[must_use]
    pub fn millis(
        (checkpoints, leases, signals): (&'a str, &'a str, &'a str),
        now_ms: &'a str,
    ) -> Self {
        WaitNames {
            checkpoints,
            leases,
            signals,
            key_order: "c.run_id",
            lease_now: now_ms,
            now_ms,
            lease_free: LeaseFree::NotExists,
            due_hint: "",
            claim_lock: "",
            notify: None,
        }
    }
}

/// How the due runs' statement leaves out the runs a worker holds: the
/// form the store's planner turns into a lookup of each candidate's lease
/// by its key, never a scan of the lease table (which holds a row for
/// every run).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseFree {
    /// `NOT EXISTS (SELECT 1 FROM leases ...)`: SQLite searches the key.
    NotExists,
    /// The same with `OFFSET 0` in the subquery, which Postgres never
    /// turns into a join: it stays a subplan on the lease's key. Without
    /// it, the claim's read of the runs with no lease row became a hash
    /// anti-join of both tables in full, sorted, on every claim.
    SubPlan,
    /// `LEFT JOIN leases ... WHERE l.run_id IS NULL`: MariaDB reads it by
    /// the key (`Not exists`), where it materializes a `NOT EXISTS` from a
    /// scan of the lease table.
    AntiJoin,
}

/// How a store tells its watchers in the transaction that makes a run due
/// or ends it (Postgres: `NOTIFY`, sent when the transaction commits).
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct Notify {
    /// The statement: binds (channel, payload).
    pub sql: String,
    /// The channel of the store's tables.
    pub channel: String,
}

/// The statements of runs that wait, built once from a store's
/// [`WaitNames`]; values are bind parameters, in the order the fields'
/// docs give.
#[doc(hidden)]
#[derive(Debug)]
pub struct WaitStatements {
    /// The names run (key)'s mailbox holds an entry for: one text each.
    pub named: String,
    /// The mailbox of run (key), in the order it came: (name, payload,
    /// sent_at, sender, state) each.
    pub mailbox: String,
    /// The entry (key, name) of a mailbox, as [`mailbox`](Self::mailbox)
    /// reads it: none or one.
    pub entry: String,
    /// Stores an entry: key, name, payload, sent_at, sender, state.
    pub insert: String,
    /// Deletes the entry (key, name).
    pub delete: String,
    /// Sets the state of an entry: state, key, name.
    pub mark: String,
    /// Deletes the mailbox of run (key).
    pub clear: String,
    /// Makes run (key) due at once (`due_at = 0`).
    pub due_now: String,
    /// Sets the due time of run (key) for its recovery: due_at (or
    /// `NULL`), key.
    pub set_due: String,
    /// The store's clock in milliseconds: one integer.
    pub clock: String,
    /// The due runs' statement up to its filter: the run rows `c` (key as
    /// text, version, due time) whose lease is not held.
    pub due_select: String,
    /// The key of `c` in key order, for `ORDER BY`.
    pub key_order: String,
    /// A claim's statement up to its filter, as [`due_select`](Self::due_select):
    /// the run rows `c` joined to their lease rows `l` whose lease is not
    /// held (a claim locks these).
    pub claim_select: String,
    /// The same for the runs without a lease row yet (written by a plain
    /// `save`).
    pub unleased_select: String,
    /// What ends a claim's statement ([`WaitNames::claim_lock`]).
    pub claim_lock: String,
    /// How the store tells its watchers, if it does in its transactions.
    pub notify: Option<Notify>,
}

impl WaitStatements {
    /// The statements of dialect `D` on `names`.
    #[must_use]
    pub fn new<D: Dialect>(names: WaitNames<'_>) -> Self {
        let WaitNames {
            checkpoints: cp,
            leases,
            signals,
            key_order,
            lease_now,
            now_ms,
            lease_free,
            due_hint,
            claim_lock,
            notify,
        } = names;
        let [p1, p2, p3, p4, p5, p6] = [1, 2, 3, 4, 5, 6].map(D::param);
        let held = format!("l.expires_at > {lease_now}");
        let fence = if lease_free == LeaseFree::SubPlan {
            " OFFSET 0"
        } else {
            ""
        };
        // wait names are keys too: bytes where keys are
        let name = D::key_text("name");
        let read = format!("{name}, payload, sent_at, sender, state");
        WaitStatements {
            named: format!("SELECT {name} FROM {signals} WHERE run_id = {p1}"),
            mailbox: format!(
                "SELECT {read} FROM {signals} WHERE run_id = {p1} ORDER BY sent_at, name"
            ),
            entry: format!("SELECT {read} FROM {signals} WHERE run_id = {p1} AND name = {p2}"),
            insert: format!(
                "INSERT INTO {signals} (run_id, name, payload, sent_at, sender, state) \
                 VALUES ({p1}, {p2}, {p3}, {p4}, {p5}, {p6})"
            ),
            delete: format!("DELETE FROM {signals} WHERE run_id = {p1} AND name = {p2}"),
            mark: format!("UPDATE {signals} SET state = {p1} WHERE run_id = {p2} AND name = {p3}"),
            clear: format!("DELETE FROM {signals} WHERE run_id = {p1}"),
            due_now: format!("UPDATE {cp} SET due_at = 0 WHERE run_id = {p1}"),
            set_due: format!("UPDATE {cp} SET due_at = {p1} WHERE run_id = {p2}"),
            clock: format!("SELECT {now_ms}"),
            due_select: match lease_free {
                LeaseFree::NotExists | LeaseFree::SubPlan => format!(
                    "SELECT {}, c.version, c.due_at FROM {cp} AS c{due_hint} WHERE NOT EXISTS \
                     (SELECT 1 FROM {leases} AS l WHERE l.run_id = c.run_id AND {held}{fence})",
                    D::key_text("c.run_id")
                ),
                LeaseFree::AntiJoin => format!(
                    "SELECT {}, c.version, c.due_at FROM {cp} AS c{due_hint} LEFT JOIN {leases} AS l \
                     ON l.run_id = c.run_id AND {held} WHERE l.run_id IS NULL",
                    D::key_text("c.run_id")
                ),
            },
            key_order: key_order.to_owned(),
            claim_select: format!(
                "SELECT {}, c.version, c.due_at FROM {cp} AS c{due_hint} JOIN {leases} AS l \
                 ON l.run_id = c.run_id WHERE (l.expires_at IS NULL OR NOT ({held}))",
                D::key_text("c.run_id")
            ),
            unleased_select: format!(
                "SELECT {}, c.version, c.due_at FROM {cp} AS c{due_hint} WHERE NOT EXISTS \
                 (SELECT 1 FROM {leases} AS l WHERE l.run_id = c.run_id{fence})",
                D::key_text("c.run_id")
            ),
            claim_lock: claim_lock.to_owned(),
            notify,
        }
    }
}

/// `ms` as the BIGINT columns keep it: saturating at `i64::MAX` (a bound
/// past every row).
pub(crate) fn int(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The due runs' statement for `filter` in dialect `D`: the runs due by
/// `filter.before_ms` of its pipelines, whose lease no worker holds,
/// earliest first (then in key order), at most `filter.limit` (one range
/// of the `(due_at, run_id)` index).
///
/// # Errors
/// `InvalidSetting` naming `limit` for a limit out of 1..=10,000.
#[doc(hidden)]
pub fn due_statement<D: Dialect>(
    sql: &WaitStatements,
    filter: &DueFilter,
) -> Result<Statement<D::Time>> {
    due_rows::<D>((&sql.due_select, &sql.key_order, ""), filter)
}

/// A claim's statement for `filter` in dialect `D`, as
/// [`due_statement`]'s: with `leased`, the runs with a lease row that is
/// not held, their lease rows locked ([`WaitStatements::claim_lock`]);
/// else those without a lease row.
///
/// # Errors
/// As [`due_statement`].
#[doc(hidden)]
pub fn claim_statement<D: Dialect>(
    sql: &WaitStatements,
    filter: &DueFilter,
    leased: bool,
) -> Result<Statement<D::Time>> {
    let parts = if leased {
        (
            sql.claim_select.as_str(),
            sql.key_order.as_str(),
            sql.claim_lock.as_str(),
        )
    } else {
        (sql.unleased_select.as_str(), sql.key_order.as_str(), "")
    };
    due_rows::<D>(parts, filter)
}

/// `select` (up to its filter) for `filter`, in `key_order`, ended by
/// `lock`.
fn due_rows<D: Dialect>(
    (select, key_order, lock): (&str, &str, &str),
    filter: &DueFilter,
) -> Result<Statement<D::Time>> {
    let limit = RunFilter::new().limit(filter.limit).page_size()?;
    let mut args = vec![Arg::Count(int(filter.before_ms))];
    let mut text = format!("{select} AND c.due_at <= {}", D::param(1));
    for (column, values) in [
        ("c.pipeline", &filter.pipelines),
        ("c.version", &filter.versions),
    ] {
        if values.is_empty() {
            continue;
        }
        let params: Vec<String> = (0..values.len())
            .map(|i| D::param(args.len() + 1 + i))
            .collect();
        text.push_str(&format!(" AND {column} IN ({})", params.join(", ")));
        args.extend(values.iter().cloned().map(Arg::Text));
    }
    text.push_str(&format!(
        " ORDER BY c.due_at, {key_order} LIMIT {}{lock}",
        D::param(args.len() + 1)
    ));
    args.push(Arg::Count(int(limit as u64)));
    Ok(Statement { text, args })
}

/// The due run of a row of the [due runs' statement](due_statement): its
/// key (as text), version and due time.
pub(crate) fn due_run((key, version, due): (String, String, i64)) -> DueRun {
    let (pipeline, run_id) = key.split_once('/').unwrap_or(("", key.as_str()));
    let cp =
        Checkpoint::new(run_id, version, 0, "", Context::new().snapshot()).in_pipeline(pipeline);
    DueRun::of(&key, &cp, u64::try_from(due).unwrap_or(0))
}

/// The run row's `due_at` when `checkpoint` is the run's latest and
/// `mailbox` its mailbox: [`Pending::due_ms`](fluxio_core::store::Pending::due_ms)
/// of a sleeping or waiting run, at most [`MAX_UNTIL_MS`]; `None` for any
/// other run, and for a wait only a signal can end.
pub(crate) fn due_value(checkpoint: &Checkpoint, mailbox: &[Signal]) -> Option<i64> {
    if !checkpoint.status.is_pending() {
        return None;
    }
    let due = checkpoint.pending.as_ref()?.due_ms(mailbox)?;
    Some(int(due.min(MAX_UNTIL_MS)))
}

/// What a run that is stored as `status` tells the store's watchers: due
/// (it parked) or ended; `None` for a running run.
#[doc(hidden)]
#[must_use]
pub fn event_of(status: RunStatus) -> Option<RunEventKind> {
    match status {
        RunStatus::Sleeping | RunStatus::Waiting => Some(RunEventKind::Due),
        RunStatus::Completed
        | RunStatus::Failed
        | RunStatus::Cancelled
        | RunStatus::NeedsAttention => Some(RunEventKind::Ended),
        _ => None,
    }
}

/// The prefixes of a wake-up's payload: `due:<key>`, `ended:<key>`.
const DUE: &str = "due:";
const ENDED: &str = "ended:";

/// The longest payload a `NOTIFY` carries whole (Postgres refuses 8,000
/// bytes and more): a longer key is told as "look at everything".
const MAX_PAYLOAD: usize = 7_999;

/// The payload of a wake-up: `due:<key>` or `ended:<key>` (without the
/// key when it would not fit).
pub(crate) fn event_payload(key: &str, kind: RunEventKind) -> String {
    let prefix = match kind {
        RunEventKind::Ended => ENDED,
        _ => DUE,
    };
    let key = if prefix.len() + key.len() > MAX_PAYLOAD {
        ""
    } else {
        key
    };
    format!("{prefix}{key}")
}

/// The wake-up a payload of [`event_payload`] tells; `None` for a payload
/// of someone else's.
#[doc(hidden)]
#[must_use]
pub fn parse_event(payload: &str) -> Option<RunEvent> {
    if let Some(key) = payload.strip_prefix(DUE) {
        Some(RunEvent::new(key, RunEventKind::Due))
    } else {
        payload
            .strip_prefix(ENDED)
            .map(|key| RunEvent::new(key, RunEventKind::Ended))
    }
}

/// A mailbox row: name, payload, sent_at, sender, state.
pub(crate) type Entry = (String, Vec<u8>, i64, String, String);

/// The signal of a mailbox row of run `key`.
pub(crate) fn signal_of(
    key: &str,
    (name, payload, sent_at, sender, state): Entry,
) -> Result<Signal> {
    let corrupt = |reason: String| Error::CorruptCheckpoint {
        run_id: key.to_owned(),
        reason,
        source: None,
    };
    let state = SignalState::parse(&state).ok_or_else(|| {
        corrupt(format!(
            "a signal's state `{state}` is not one this build knows"
        ))
    })?;
    let payload = Payload::from_stored(key, &payload)?;
    let mut signal = Signal::new(&name, payload, &sender)
        .map_err(|e| corrupt(format!("a stored signal's name is refused: {e}")))?
        .at(u64::try_from(sent_at).unwrap_or(0));
    signal.state = state;
    Ok(signal)
}

/// Whether `new` is `old` with another state, and nothing else changed.
pub(crate) fn restated(old: &Signal, new: &Signal) -> bool {
    (&old.name, &old.payload, old.sent_at_ms, &old.sender)
        == (&new.name, &new.payload, new.sent_at_ms, &new.sender)
        && old.state != new.state
}

/// A mailbox entry for `name`, as [`Pending::due_ms`](fluxio_core::store::Pending::due_ms)
/// reads a mailbox (whether it holds an entry of a name, whatever its
/// state: a signal delivered, or a wait decided by a worker that stopped
/// before its next checkpoint).
pub(crate) fn entry(name: &str) -> Signal {
    Signal::closed(name, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluxio_core::store::{Pending, WaitName};

    use crate::Plain;

    fn statements() -> WaitStatements {
        WaitStatements::new::<Plain>(WaitNames::millis(("t", "t_leases", "t_signals"), "NOW"))
    }

    #[test]
    fn the_due_runs_are_one_range_of_the_due_index_every_value_a_parameter() {
        let filter = DueFilter::new(u64::MAX)
            .pipeline("o'rders")
            .pipeline("b")
            .limit(7);
        let st = due_statement::<Plain>(&statements(), &filter).expect("a statement");
        assert_eq!(
            st.text,
            "SELECT c.run_id, c.version, c.due_at FROM t AS c WHERE NOT EXISTS \
             (SELECT 1 FROM t_leases AS l WHERE l.run_id = c.run_id AND l.expires_at > NOW) \
             AND c.due_at <= ?1 AND c.pipeline IN (?2, ?3) ORDER BY c.due_at, c.run_id LIMIT ?4"
        );
        assert_eq!(st.args.len(), 4);
        assert!(
            matches!(st.args[0], Arg::Count(i64::MAX)),
            "u64::MAX saturates"
        );
        let all = due_statement::<Plain>(&statements(), &DueFilter::new(5)).expect("a statement");
        assert!(!all.text.contains("pipeline"), "{}", all.text);
        for limit in [0, 10_001] {
            let refused = due_statement::<Plain>(&statements(), &DueFilter::new(5).limit(limit));
            assert!(
                matches!(
                    refused,
                    Err(Error::InvalidSetting {
                        setting: "limit",
                        ..
                    })
                ),
                "limit {limit}"
            );
        }
    }

    #[test]
    fn a_parked_run_is_due_at_its_time_within_the_range_or_at_once_when_signalled() {
        let base = Checkpoint::new("r", "v", 1, "s", Context::new().snapshot());
        assert_eq!(due_value(&base, &[]), None, "a running run is not due");
        let asleep = base.clone().parked(Pending::sleep(u64::MAX));
        assert_eq!(due_value(&asleep, &[]), Some(int(MAX_UNTIL_MS)), "clamped");
        let waits = vec![WaitName::new("ok", "bool")];
        let forever = base.clone().parked(Pending::wait(waits.clone(), None));
        assert_eq!(due_value(&forever, &[]), None);
        assert_eq!(due_value(&forever, &[entry("other")]), None);
        assert_eq!(due_value(&forever, &[entry("ok")]), Some(0));
        let until = base.parked(Pending::wait(waits, Some(9)));
        assert_eq!(due_value(&until, &[]), Some(9));
    }

    #[test]
    fn events_read_back_as_they_were_told() {
        for kind in [RunEventKind::Due, RunEventKind::Ended] {
            let told = event_payload("orders/ü 1", kind);
            assert_eq!(parse_event(&told), Some(RunEvent::new("orders/ü 1", kind)));
        }
        let long = "k".repeat(9_000);
        assert_eq!(
            parse_event(&event_payload(&long, RunEventKind::Due)),
            Some(RunEvent::new("", RunEventKind::Due)),
            "a key too long to tell: look at everything"
        );
        assert_eq!(parse_event("someone else's"), None);
        assert_eq!(event_of(RunStatus::Running), None);
        assert_eq!(event_of(RunStatus::Waiting), Some(RunEventKind::Due));
        assert_eq!(event_of(RunStatus::Cancelled), Some(RunEventKind::Ended));
    }
}
