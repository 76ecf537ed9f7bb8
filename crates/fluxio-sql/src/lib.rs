//! Internal to `fluxio-sqlite` and `fluxio-postgres`; no stable API (every
//! item is `#[doc(hidden)]`, and may change in any release). Depend on the
//! stores, not on this crate.
//!
//! A run's journal in SQL (contract rules 18 and 20): the order of the
//! statements of one write, once, generic over the sqlx driver. Each store
//! runs it inside a transaction of its own kind (SQLite: `BEGIN IMMEDIATE`,
//! which holds the file's write lock; Postgres: the run's row and lease
//! locked `FOR UPDATE`, or the row written first), and keeps its own SQL
//! text: a [`Statements`] built from its validated table names, and a
//! [`Dialect`] saying how a time is bound.
//!
//! The decisions (which checkpoint a delta needs, where the journal may be
//! cut, how the entries fold into a context) are fluxio-core's:
//! [`missing_predecessor`](fluxio_core::store::missing_predecessor),
//! [`cut_point`](fluxio_core::store::cut_point), [`Checkpoint::from_entries`].
//! What is left here is the order of the statements: [`Journal`]
//! (`journal.rs`).
//!
//! Listing runs (contract rule 21) is here too, in `list.rs`: the
//! statement a filter asks for, over the run rows and the lease table.
//! So is checking, without writing, that the migrations a store finds
//! applied are ones this build reads (`schema.rs`), and what runs that
//! wait keep (contract rules 25-27, `waits.rs` for their statements): the
//! due time on the run's row, the mailbox, the due runs, the wake-ups.

mod error;
mod journal;
mod list;
mod schema;
pub mod server;
mod settings;
mod waits;

pub use error::ServerStoreError;
pub use journal::Journal;
pub use list::{Listing, Statement, count, count_statement, list, statement};
pub use schema::{Bookkeeping, Unreadable, apply, pending, readable, rendered};
pub use server::{Failure, Server, ServerSql, ServerStore};
pub use settings::{
    DEFAULT_COMPLETED_RETENTION, DEFAULT_TABLE, DEFAULT_TIMEOUT, Settings, Source, pool_options,
};
pub use waits::{
    LeaseFree, Notify, WaitNames, WaitStatements, claim_statement, due_statement, event_of,
    parse_event,
};

#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
}

use std::time::Duration;

use fluxio_core::store::{Checkpoint, Lease, RunStatus};
use fluxio_core::{Error, Result};
use sqlx::{Database, Encode, Type};

/// The longest identifier the SQL stores accept (PostgreSQL's `NAMEDATALEN - 1`).
#[doc(hidden)]
pub const MAX_IDENTIFIER: usize = 63;

/// Checks a schema, database or table name against
/// `^[a-z_][a-z0-9_]{0,62}$`, so it can be quoted into SQL safely; the error
/// says what is wrong with it.
///
/// # Errors
/// The reason the name is refused.
#[doc(hidden)]
pub fn check_identifier(value: &str) -> std::result::Result<(), &'static str> {
    let mut chars = value.chars();
    match chars.next() {
        None => return Err("it is empty"),
        Some(c) if !(c.is_ascii_lowercase() || c == '_') => {
            return Err(
                "it must match ^[a-z_][a-z0-9_]{0,62}$ (start with a lowercase ASCII letter or `_`)",
            );
        }
        Some(_) => {}
    }
    if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(
            "it must match ^[a-z_][a-z0-9_]{0,62}$ (lowercase ASCII letters, digits and `_` only)",
        );
    }
    if value.len() > MAX_IDENTIFIER {
        return Err("it must match ^[a-z_][a-z0-9_]{0,62}$ (at most 63 characters)");
    }
    Ok(())
}

/// The `status` of a running run's row (held or abandoned: its lease says).
#[doc(hidden)]
pub const RUNNING: &str = "running";
/// The `status` of a failed run's row.
#[doc(hidden)]
pub const FAILED: &str = "failed";
/// The `status` of a cancelled run's row (rule 14): what fenced saves check.
#[doc(hidden)]
pub const CANCELLED: &str = "cancelled";
/// The `status` of a paused run's row (rule 30): fenced saves check it too.
#[doc(hidden)]
pub const PAUSED: &str = "paused";
/// The `status` of a run recovery gave up on (rule 22).
#[doc(hidden)]
pub const NEEDS_ATTENTION: &str = "needs_attention";
/// The `status` of a completed run's row: what `keep_completed` trims.
#[doc(hidden)]
pub const COMPLETED: &str = "completed";
/// The `status` of a sleeping run's row (rule 25).
#[doc(hidden)]
pub const SLEEPING: &str = "sleeping";
/// The `status` of a waiting run's row (rule 26).
#[doc(hidden)]
pub const WAITING: &str = "waiting";

/// What differs between the drivers in the journal's writes and the
/// listing's reads: the driver, how a statement names its parameters, and
/// how the run's row binds a time (SQLite: INTEGER milliseconds; Postgres:
/// seconds, as a float the SQL turns into a timestamp).
#[doc(hidden)]
pub trait Dialect {
    /// The store's name in its errors (`Error::Store`'s backend).
    const BACKEND: &'static str;
    /// The sqlx driver.
    type Db: Database;
    /// A time or a duration as the row's statement binds it.
    type Time: SqlTime + for<'q> Encode<'q, Self::Db> + Type<Self::Db> + Send + 'static;
    /// How the statements name their parameters.
    const PARAMS: Params;
    /// How this database writes the columns of a store's migration
    /// bookkeeping ([`Bookkeeping`]): `table_name` (an identifier),
    /// `version` (a 64-bit integer), `checksum` (bytes), `installed_on`
    /// (with its default when it has one; else the time a migration is
    /// recorded at is bound, in milliseconds since the Unix epoch), then
    /// what follows the column list (`STRICT`).
    const BOOKKEEPING: [&'static str; 5];
    /// How this database upserts the run's row.
    const UPSERT: Upsert = Upsert::OnConflict;
    /// What follows a read of the run's status that must lock its row
    /// for the rest of the transaction (`FOR UPDATE`); empty where a
    /// transaction holds the whole database already (SQLite).
    const ROW_LOCK: &'static str = " FOR UPDATE";
    /// The run's start, `ms` milliseconds since the Unix epoch.
    fn instant(ms: u64) -> Self::Time {
        Self::Time::from_ms(ms)
    }
    /// A completed run's retention.
    fn span(d: Duration) -> Self::Time {
        Self::Time::from_span(d)
    }
    /// A time a listing compares the rows' times with, `ms` milliseconds
    /// since the Unix epoch: as [`instant`](Dialect::instant), but any
    /// `u64` is accepted (past what the database holds, it is later than
    /// every row).
    fn bound(ms: u64) -> Self::Time {
        Self::instant(ms)
    }
    /// The condition that a step row holds the whole context.
    const WHOLE: &'static str = "whole";
    /// Bind parameter `n` (from 1) in the statement's text.
    fn param(n: usize) -> String {
        match Self::PARAMS {
            Params::Dollar => format!("${n}"),
            Params::Numbered => format!("?{n}"),
            Params::Anonymous => "?".to_owned(),
        }
    }
    /// Bind parameter `n` holding a [`Time`](Dialect::Time), as an
    /// expression of the type of the rows' time columns (the parameter
    /// itself, where the columns hold what is bound).
    fn time_param(n: usize) -> String {
        Self::param(n)
    }
    /// A run key column (`c.run_id`) as a text the driver reads into a
    /// `String` (the column itself, where keys are text).
    fn key_text(column: &str) -> String {
        column.to_owned()
    }
}

/// How a dialect's statements name their parameters.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Params {
    /// `$1`, `$2`… (Postgres).
    Dollar,
    /// `?1`, `?2`… (SQLite).
    Numbered,
    /// `?` each, bound in the order they stand (MySQL).
    Anonymous,
}

/// A time or a duration as a dialect binds it.
#[doc(hidden)]
pub trait SqlTime {
    /// `ms` milliseconds (since the Unix epoch, for an instant).
    fn from_ms(ms: u64) -> Self;
    /// The duration `d`.
    fn from_span(d: Duration) -> Self;
}

/// Whole milliseconds, saturating at `i64::MAX`.
impl SqlTime for i64 {
    fn from_ms(ms: u64) -> i64 {
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    fn from_span(d: Duration) -> i64 {
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}

/// Seconds (milliseconds up to 2^53 are exact in an f64).
impl SqlTime for f64 {
    #[allow(clippy::cast_precision_loss)]
    fn from_ms(ms: u64) -> f64 {
        ms as f64 / 1000.0
    }

    fn from_span(d: Duration) -> f64 {
        d.as_secs_f64()
    }
}

/// The statements of a store whose fencing tokens come from a table of
/// their own (MySQL), rather than from its
/// [`acquire`](RunStatements::acquire) statement.
#[doc(hidden)]
#[derive(Debug)]
pub struct DrawnTokens {
    /// Draws a new token (no parameter).
    pub draw: String,
    /// The token just drawn on this connection: one integer.
    pub drawn: String,
    /// The token the lease row of (key) holds: one integer.
    pub held: String,
}

/// The journal's statements of one store, built by the store from its
/// validated, quoted names; values are bind parameters, in the order the
/// fields' docs give (`?1` / `$1` first).
#[doc(hidden)]
#[derive(Debug)]
pub struct Statements {
    /// Upserts the run's row: key, version, ip, step, status, error message,
    /// start ([`Dialect::instant`]), retention ([`Dialect::span`], NULL:
    /// never expires), attempt, due time (milliseconds, NULL: not due).
    pub save: String,
    /// The run's `status` (key), locking the row if the store needs it.
    pub status: String,
    /// The statements on the run's steps.
    pub steps: StepStatements,
    /// Taken before trimming pipeline (pipeline), if the store's
    /// transactions do not already run one at a time.
    pub keep_lock: Option<String>,
    /// Deletes the completed runs of (pipeline) but the (n) newest.
    pub keep_completed: String,
    /// The mailbox, the due time and the wake-ups (rules 25-27).
    pub waits: WaitStatements,
}

impl Statements {
    /// The journal's statements of dialect `D` on checkpoint table `cp`
    /// and steps table `steps`: the run's row saved (its [`ROW_COLUMNS`]
    /// with `values`, their SQL in bind order, upserted as `D` upserts),
    /// its status read (locking the row where `D` needs it), its steps',
    /// the trim's (`keep_completed` after `keep_lock`), and those of runs
    /// that wait.
    #[must_use]
    pub fn new<D: Dialect>(
        (cp, steps): (&str, &str),
        values: &str,
        (keep_completed, keep_lock): (String, Option<String>),
        waits: WaitStatements,
    ) -> Self {
        Statements {
            save: format!(
                "INSERT INTO {cp} ({ROW_COLUMNS}) VALUES ({values}) {}",
                D::UPSERT.row()
            ),
            status: format!(
                "SELECT status FROM {cp} WHERE run_id = {}{}",
                D::param(1),
                D::ROW_LOCK
            ),
            steps: StepStatements::new::<D>(steps),
            keep_lock,
            keep_completed,
            waits,
        }
    }
}

/// The columns of the run's row a save writes, in the order [`Journal`]
/// binds them: the key, the payload (empty: the checkpoints are rows of
/// the steps table), version, ip, step, status, error message, start,
/// the write's time, expiry, attempt, and when the run is due (a sleeping
/// or waiting run, in milliseconds since the Unix epoch; NULL otherwise).
pub const ROW_COLUMNS: &str = "run_id, payload, version, ip, step, status, error_message, \
     created_at, updated_at, expires_at, attempt, due_at";

/// How a database upserts a row.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    /// `ON CONFLICT (run_id) DO UPDATE SET c = excluded.c, ...` (Postgres,
    /// SQLite).
    OnConflict,
    /// `ON DUPLICATE KEY UPDATE c = VALUES(c), ...` (MySQL, MariaDB).
    OnDuplicateKey,
}

impl Upsert {
    /// The clause that makes an insert of the run's row ([`ROW_COLUMNS`])
    /// update the row of a run that exists: every column but the key and
    /// the payload, from the new row.
    #[must_use]
    pub fn row(self) -> String {
        const UPDATED: [&str; 10] = [
            "version",
            "ip",
            "step",
            "status",
            "error_message",
            "created_at",
            "updated_at",
            "expires_at",
            "attempt",
            "due_at",
        ];
        let (head, set): (&str, fn(&str) -> String) = match self {
            Upsert::OnConflict => ("ON CONFLICT (run_id) DO UPDATE SET", |c| {
                format!("{c} = excluded.{c}")
            }),
            Upsert::OnDuplicateKey => ("ON DUPLICATE KEY UPDATE", |c| format!("{c} = VALUES({c})")),
        };
        format!("{head} {}", UPDATED.map(set).join(", "))
    }
}

/// The journal's statements on a run's steps, the same text for every
/// dialect but for its parameters; values are bind parameters, in the
/// order the fields' docs give.
#[doc(hidden)]
#[derive(Debug)]
pub struct StepStatements {
    /// Whether step (key, seq) is stored: one boolean.
    pub exists: String,
    /// Inserts a step: key, seq, whole, payload.
    pub insert: String,
    /// Deletes the steps (key, seq or later).
    pub delete_from: String,
    /// Deletes the steps (key, below seq).
    pub delete_below: String,
    /// The `seq` of the run's whole steps (key).
    pub whole: String,
}

impl StepStatements {
    /// The statements on the steps table `steps` (validated and quoted).
    #[must_use]
    pub fn new<D: Dialect>(steps: &str) -> StepStatements {
        let (key, seq) = (D::param(1), D::param(2));
        let (whole, payload) = (D::param(3), D::param(4));
        let of_run = format!("FROM {steps} WHERE run_id = {key}");
        StepStatements {
            exists: format!("SELECT EXISTS (SELECT 1 {of_run} AND seq = {seq})"),
            insert: format!(
                "INSERT INTO {steps} (run_id, seq, whole, payload) \
                 VALUES ({key}, {seq}, {whole}, {payload})"
            ),
            delete_from: format!("DELETE {of_run} AND seq >= {seq}"),
            delete_below: format!("DELETE {of_run} AND seq < {seq}"),
            whole: format!("SELECT seq {of_run} AND {}", D::WHOLE),
        }
    }
}

/// The statements of a run's lease and row that starting and ending a run
/// in one transaction use ([`Journal::begin`], [`Journal::finish`]); values
/// are bind parameters, in the order the fields' docs give.
#[doc(hidden)]
#[derive(Debug)]
pub struct RunStatements {
    /// Takes the lease of (key) for (ttl, [`Dialect::span`]) when no
    /// unexpired lease holds it: returns the new token, a row of one
    /// integer; no row when another lease holds it. With
    /// [`drawn`](RunStatements::drawn) tokens, it binds (key, token, ttl)
    /// and returns nothing: the lease row keeps an unexpired lease's
    /// token, the drawn one otherwise.
    pub acquire: String,
    /// The statements of tokens drawn apart (MySQL); `None` where the
    /// acquire statement draws them.
    pub drawn: Option<DrawnTokens>,
    /// Whether the lease (key, token) is current and unexpired: one
    /// boolean. Locks the lease row if the store needs it.
    pub held: String,
    /// Whether a visible run is stored under (key): one boolean.
    pub exists: String,
    /// Deletes the run (key), its steps with it.
    pub delete: String,
    /// Gives up the lease (key, token); changes nothing when it is not
    /// current.
    pub release: String,
}

/// One checkpoint as a row of `<table>_steps`: its number, whether it holds
/// the whole context, and [`Checkpoint::entry_bytes`]. Encoded before the
/// transaction starts, so no encoding happens under a lock.
#[doc(hidden)]
#[derive(Debug)]
pub struct Step {
    seq: i64,
    whole: bool,
    payload: Vec<u8>,
}

impl Step {
    /// The checkpoint's number, as the steps table keeps it.
    #[must_use]
    pub fn seq(&self) -> i64 {
        self.seq
    }

    /// Whether it holds the whole context (no predecessor needed).
    #[must_use]
    pub fn whole(&self) -> bool {
        self.whole
    }

    /// The encoded [`Checkpoint::entry_bytes`], as the row stores them.
    #[must_use]
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Encodes `checkpoint`.
    ///
    /// # Errors
    /// [`Checkpoint::entry_bytes`]'s.
    pub fn of(checkpoint: &Checkpoint) -> Result<Step> {
        Ok(Step {
            seq: i64::from(checkpoint.seq),
            whole: checkpoint.change.is_full(),
            payload: checkpoint.entry_bytes()?,
        })
    }
}

/// What a store keeps of its completed runs (contract rule 20): how long
/// each stays visible (`None`: until deleted), and how many of the newest
/// of each pipeline (`None`: all).
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// How long a completed run stays visible.
    pub expire_after: Option<Duration>,
    /// How many completed runs of each pipeline are kept.
    pub keep_completed: Option<usize>,
}

impl Retention {
    /// Nothing expires and nothing is trimmed: for writes that never
    /// complete a run (a cancel).
    pub const NONE: Retention = Retention {
        expire_after: None,
        keep_completed: None,
    };
}

/// The latest checkpoint of run `key` from the payloads a load selected
/// (from its last whole checkpoint on); `None` when there are none.
///
/// # Errors
/// [`Checkpoint::from_entries`]'s.
#[doc(hidden)]
pub fn latest(key: &str, parts: Vec<Vec<u8>>) -> Result<Option<Checkpoint>> {
    if parts.is_empty() {
        return Ok(None);
    }
    Checkpoint::from_entries(key, parts).map(Some)
}

/// The refusal of a write under `lease`, which is not the run's current
/// lease.
#[doc(hidden)]
#[must_use]
pub fn lease_lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        run_id: lease.run_id().to_owned(),
        token: lease.token(),
    }
}

/// The lease's token as the lease rows keep it, when `lease` is of run
/// `key`.
///
/// # Errors
/// [`lease_lost`] for a lease of another run, or a token no row holds.
#[doc(hidden)]
pub fn token_of(lease: &Lease, key: &str) -> Result<i64> {
    match i64::try_from(lease.token()) {
        Ok(token) if lease.run_id() == key => Ok(token),
        _ => Err(lease_lost(lease)),
    }
}

/// The row's `status` of a checkpoint's.
///
/// # Errors
/// [`Error::Unsupported`] for a status of a later fluxio-core, which this
/// build cannot store so that it lists (`RunStatus` may grow).
#[doc(hidden)]
pub fn status_name(status: RunStatus) -> Result<&'static str> {
    Ok(match status {
        RunStatus::Running => RUNNING,
        RunStatus::Failed => FAILED,
        RunStatus::Completed => COMPLETED,
        RunStatus::Cancelled => CANCELLED,
        RunStatus::NeedsAttention => NEEDS_ATTENTION,
        RunStatus::Sleeping => SLEEPING,
        RunStatus::Waiting => WAITING,
        RunStatus::Paused => PAUSED,
        _ => {
            return Err(Error::Unsupported {
                operation: "store a run in a status this build of fluxio-sql does not know",
                store: "sql",
            });
        }
    })
}

/// A dialect with SQLite's parameters and its times bound as `T(?n)`, for
/// the unit tests that read statements.
#[cfg(test)]
pub(crate) struct Plain;

#[cfg(test)]
impl Dialect for Plain {
    const BACKEND: &'static str = "plain";
    type Db = sqlx::Sqlite;
    type Time = i64;
    const PARAMS: Params = Params::Numbered;
    const BOOKKEEPING: [&str; 5] = ["TEXT"; 5];
    fn time_param(n: usize) -> String {
        format!("T(?{n})")
    }
}

#[cfg(test)]
mod identifier_tests {
    use super::check_identifier;

    #[test]
    fn identifiers_are_lowercase_ascii_words_of_at_most_63_bytes() {
        for ok in ["fluxio_checkpoints", "_x", "a1", &"a".repeat(63)] {
            assert!(check_identifier(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "drop table",
            "A",
            "1a",
            "a-b",
            "é",
            "a\"b",
            "a`b",
            &"a".repeat(64),
        ] {
            assert!(check_identifier(bad).is_err(), "{bad}");
        }
    }
}
