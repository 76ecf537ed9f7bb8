//! [`Journal`]: the order of the statements of a run's writes, in the
//! caller's transaction, generic over the sqlx driver: a save, a fenced
//! append, a run's first and last writes, a cancel, and what runs that
//! wait keep (contract rules 25-27: the due time on the run's row, the
//! mailbox, a signal sent and a wait decided; their statements and the
//! values they bind are `waits.rs`'s).

use std::marker::PhantomData;
use std::time::Duration;

use fluxio_core::store::{
    Begin, Begun, Checkpoint, Claimed, Decision, Delivery, DueFilter, DueRun, Lease, MAX_UNTIL_MS,
    Mark, RunEventKind, RunStatus, Signal, Take, cut_point, decide, deliver, fenced_refusal,
    marked_checkpoint, missing_predecessor,
};
use fluxio_core::{Error, Result};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::waits::{
    self, Entry, WaitStatements, claim_statement, due_run, due_statement, due_value, entry,
    event_payload, int, restated, signal_of,
};
use crate::{
    CANCELLED, Dialect, Failure, PAUSED, Retention, RunStatements, Statements, Step, event_of,
    latest, lease_lost, status_name, token_of,
};

/// The journal's writes for dialect `D`, on a connection of its driver (in
/// practice a transaction), failing with the dialect's failure type.
#[doc(hidden)]
#[derive(Debug)]
pub struct Journal<D>(PhantomData<D>);

impl<D, DB> Journal<D>
where
    D: Dialect<Db = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> Option<D::Time>: Encode<'q, DB>,
    for<'q> D::Time: Encode<'q, DB>,
    str: Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB>,
    [u8]: Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Encode<'r, DB> + Decode<'r, DB> + Type<DB>,
    for<'r> Vec<u8>: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// Appends the cancel, pause or unpause of run `key` (contract rules
    /// 14 and 30): reads its steps with `load` (the dialect's load
    /// statement, from the last whole step on), and appends
    /// [`marked_checkpoint`] of its latest checkpoint (the row's status,
    /// which fenced writes check, and its due time follow it). Run it in the
    /// transaction that locked the run.
    ///
    /// # Errors
    /// The driver's; `CheckpointNotFound`, `RunFinished` and `NotPaused`
    /// as [`marked_checkpoint`] says.
    pub async fn mark(
        conn: &mut DB::Connection,
        (sql, load): (&Statements, &str),
        key: &str,
        mark: Mark,
    ) -> std::result::Result<(), Failure> {
        let next = marked_checkpoint(key, Self::load(conn, load, key).await?, mark)?;
        let step = Step::of(&next)?;
        Self::append(conn, sql, key, &next, &step, Retention::NONE).await
    }

    /// The run's row: the refusal of a fenced write of a cancelled or
    /// paused run ([`fenced_refusal`]); `None` for any other status, or no
    /// row. Locks the row where the dialect locks it.
    ///
    /// # Errors
    /// The driver's.
    pub async fn refusal(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
    ) -> std::result::Result<Option<Error>, Failure> {
        let status = Self::status(conn, sql, key).await?;
        Ok(refusal_of(key, status.as_deref()))
    }

    /// The `status` of the run's row (`None`: no row), locking the row
    /// where the dialect locks it.
    async fn status(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
    ) -> sqlx::Result<Option<String>> {
        sqlx::query_scalar(&sql.status)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
    }

    /// Whether the lease (key, `token`) is current and unexpired, its row
    /// locked where the dialect locks it.
    ///
    /// # Errors
    /// The driver's.
    pub async fn held(
        conn: &mut DB::Connection,
        run: &RunStatements,
        key: &str,
        token: i64,
    ) -> sqlx::Result<bool> {
        sqlx::query_scalar(&run.held)
            .bind(key)
            .bind(token)
            .fetch_one(&mut *conn)
            .await
    }

    /// The latest checkpoint of run `key`, read with `load` (the dialect's
    /// load statement, from the last whole step on); `None` when none is
    /// stored.
    async fn load(
        conn: &mut DB::Connection,
        load: &str,
        key: &str,
    ) -> std::result::Result<Option<Checkpoint>, Failure> {
        let parts: Vec<Vec<u8>> = sqlx::query_scalar(load)
            .bind(key)
            .fetch_all(&mut *conn)
            .await?;
        Ok(latest(key, parts)?)
    }

    /// Appends `checkpoint` (encoded as `step`) of run `key` in the
    /// caller's transaction as `CheckpointStore::save_fenced` does: the
    /// lease (key, `token`) read, locking its row where the dialect locks
    /// it; the run's row read (locked likewise): a cancelled run is refused
    /// with [`Error::Cancelled`], then a lease that is not current with
    /// [`Error::LeaseLost`] (`lost`); then [`append`](Self::append). Every
    /// refusal comes before anything is written.
    ///
    /// # Errors
    /// The refusals above; [`append`](Self::append)'s.
    #[allow(clippy::too_many_arguments)]
    pub async fn fenced(
        conn: &mut DB::Connection,
        sql: &Statements,
        run: &RunStatements,
        (key, token): (&str, i64),
        checkpoint: &Checkpoint,
        step: &Step,
        retention: Retention,
        lost: impl FnOnce() -> Error,
    ) -> std::result::Result<(), Failure> {
        Self::gate(conn, sql, run, (key, token), lost).await?;
        Self::append(conn, sql, key, checkpoint, step, retention).await
    }

    /// The checks of a fenced write of run `key` under the lease `token`,
    /// in the order of [`fenced`](Self::fenced): the lease row read (and
    /// locked), then the run's row (locked): `Cancelled`, then `lost()` for
    /// a lease that is not current. Returns the run row's status (`None`:
    /// no row).
    ///
    /// # Errors
    /// Those refusals; the driver's.
    pub async fn gate(
        conn: &mut DB::Connection,
        sql: &Statements,
        run: &RunStatements,
        (key, token): (&str, i64),
        lost: impl FnOnce() -> Error,
    ) -> std::result::Result<Option<String>, Failure> {
        let held = Self::held(conn, run, key, token).await?;
        let status = Self::status(conn, sql, key).await?;
        if let Some(refused) = refusal_of(key, status.as_deref()) {
            return Err(refused.into());
        }
        if !held {
            return Err(lost().into());
        }
        Ok(status)
    }

    /// [`gate`](Self::gate) of a write under `lease` of a run that must be
    /// stored: its status, or `CheckpointNotFound`.
    ///
    /// # Errors
    /// `gate`'s refusals; `CheckpointNotFound`.
    async fn gate_stored(
        conn: &mut DB::Connection,
        (sql, run): (&Statements, &RunStatements),
        lease: &Lease,
    ) -> std::result::Result<String, Failure> {
        let key = lease.run_id();
        let token = token_of(lease, key)?;
        let status = Self::gate(conn, sql, run, (key, token), || lease_lost(lease)).await?;
        status.ok_or_else(|| {
            Error::CheckpointNotFound {
                run_id: key.to_owned(),
            }
            .into()
        })
    }

    /// Takes the lease of `key` for `ttl` when no unexpired lease holds it,
    /// in the caller's transaction: the new fencing token, or `None` when
    /// another lease holds it. A store whose
    /// [`acquire`](RunStatements::acquire) returns the token runs that one
    /// statement; one that draws its tokens apart
    /// ([`DrawnTokens`](crate::DrawnTokens), MySQL) draws one, offers it to
    /// the lease row, and reads back which token the row holds: the new
    /// one, or the lease is held.
    ///
    /// # Errors
    /// The driver's.
    pub async fn acquire(
        conn: &mut DB::Connection,
        run: &RunStatements,
        key: &str,
        ttl: Duration,
    ) -> sqlx::Result<Option<i64>> {
        let Some(drawn) = &run.drawn else {
            // `fetch_all` steps the statement to its end (the driver may
            // otherwise reset it after the first row).
            let tokens: Vec<i64> = sqlx::query_scalar(&run.acquire)
                .bind(key)
                .bind(D::span(ttl))
                .fetch_all(&mut *conn)
                .await?;
            return Ok(tokens.first().copied());
        };
        sqlx::query(&drawn.draw).execute(&mut *conn).await?;
        let token: i64 = sqlx::query_scalar(&drawn.drawn)
            .fetch_one(&mut *conn)
            .await?;
        sqlx::query(&run.acquire)
            .bind(key)
            .bind(token)
            .bind(D::span(ttl))
            .execute(&mut *conn)
            .await?;
        let held: i64 = sqlx::query_scalar(&drawn.held)
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
        Ok((held == token).then_some(token))
    }

    /// The lease of `key` an [`acquire`](Self::acquire) took (`token`).
    ///
    /// # Errors
    /// [`Error::RunIdInUse`] when another lease holds it (no token).
    pub fn leased(key: &str, token: Option<i64>) -> Result<Lease> {
        match token.map(u64::try_from) {
            Some(Ok(token)) => Ok(Lease::new(key, token)),
            Some(Err(e)) => Err(Error::store(D::BACKEND, e)),
            None => Err(Error::RunIdInUse {
                run_id: key.to_owned(),
            }),
        }
    }

    /// Starts run `first.key()` (`key`) in the caller's transaction, as
    /// `CheckpointStore::begin_run` does: takes the lease for `ttl` (none
    /// held: [`Error::RunIdInUse`]), then [`Begin::Replace`] deletes the
    /// stored run, or [`Begin::IfAbsent`] stops there (`started` false)
    /// when a run is stored; then appends `first` (encoded as `step`).
    /// The caller commits on `Ok` and rolls back on `Err`, so that an error
    /// leaves no lease taken and nothing written.
    ///
    /// # Errors
    /// The driver's; `RunIdInUse`; [`append`](Self::append)'s.
    #[allow(clippy::too_many_arguments)]
    pub async fn begin(
        conn: &mut DB::Connection,
        sql: &Statements,
        run: &RunStatements,
        first: &Checkpoint,
        step: &Step,
        ttl: Duration,
        begin: Begin,
        retention: Retention,
    ) -> std::result::Result<Begun, Failure> {
        let key = first.key();
        let lease = Self::leased(&key, Self::acquire(conn, run, &key, ttl).await?)?;
        match begin {
            Begin::Replace => {
                sqlx::query(&run.delete)
                    .bind(key.as_str())
                    .execute(&mut *conn)
                    .await?;
            }
            Begin::IfAbsent => {
                let stored: bool = sqlx::query_scalar(&run.exists)
                    .bind(key.as_str())
                    .fetch_one(&mut *conn)
                    .await?;
                if stored {
                    return Ok(Begun::new(lease, false));
                }
            }
            _ => {
                return Err(Error::Unsupported {
                    operation: "this way of beginning a run",
                    store: D::BACKEND,
                }
                .into());
            }
        }
        if !Self::predecessor_stored(conn, sql, &key, step).await? {
            return Err(missing_predecessor(&key, first.seq).into());
        }
        // a run just deleted left no steps and no mailbox behind
        let stored = begin != Begin::Replace;
        Self::append_checked(conn, sql, &key, first, step, retention, stored).await?;
        Ok(Begun::new(lease, true))
    }

    /// Ends run `last.key()` (`key`) in the caller's transaction, as
    /// `CheckpointStore::finish_run` does: decides as a fenced save would
    /// (a cancelled run refused with [`Error::Cancelled`], a lease that is
    /// not current with [`Error::LeaseLost`], a delta without its
    /// predecessor as [`missing_predecessor`] says) before writing
    /// anything; unless refused, appends `last` (encoded as `step`) and,
    /// when `delete`, deletes the run; and releases the lease either way.
    /// Returns the refusal inside `Ok`: the caller commits on `Ok` (the
    /// release, and the writes when not refused) and rolls back on `Err`
    /// (a driver failure), after which it releases the lease on its own.
    ///
    /// # Errors
    /// The driver's.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish(
        conn: &mut DB::Connection,
        sql: &Statements,
        run: &RunStatements,
        last: &Checkpoint,
        step: &Step,
        lease: &Lease,
        delete: bool,
        retention: Retention,
    ) -> std::result::Result<Result<()>, Failure> {
        let key = last.key();
        let token = match token_of(lease, &key) {
            Ok(token) => token,
            Err(lost) => return Ok(Err(lost)),
        };
        // The lease first, then the run's row: the order of a fenced save.
        let held = Self::held(conn, run, &key, token).await?;
        let refusal = if let Some(refused) = Self::refusal(conn, sql, &key).await? {
            Some(refused)
        } else if !held {
            Some(lease_lost(lease))
        } else if !Self::predecessor_stored(conn, sql, &key, step).await? {
            Some(missing_predecessor(&key, last.seq))
        } else {
            None
        };
        if refusal.is_none() {
            Self::append_checked(conn, sql, &key, last, step, retention, true).await?;
            if delete {
                sqlx::query(&run.delete)
                    .bind(key.as_str())
                    .execute(&mut *conn)
                    .await?;
            }
        }
        sqlx::query(&run.release)
            .bind(key.as_str())
            .bind(token)
            .execute(&mut *conn)
            .await?;
        Ok(refusal.map_or(Ok(()), Err))
    }

    /// Whether the checkpoint before `step` is stored, when `step` is a
    /// delta (a whole step needs none).
    async fn predecessor_stored(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        step: &Step,
    ) -> sqlx::Result<bool> {
        if step.whole {
            return Ok(true);
        }
        sqlx::query_scalar(&sql.steps.exists)
            .bind(key)
            .bind(step.seq - 1)
            .fetch_one(&mut *conn)
            .await
    }

    /// Appends `checkpoint` (encoded as `step`) to the journal of run
    /// `key`, as [`fluxio_core::store::append`] does to a list: refuses a
    /// delta whose predecessor is not stored (before writing anything),
    /// drops the steps numbered `seq` or later (and for a run's first
    /// checkpoint, a fresh run, the key's mailbox), writes the run's row
    /// (when it is due: [`due_at`](Self::due_at)) and the step, cuts the
    /// journal at [`cut_point`], and trims the pipeline's completed runs
    /// (see [`Retention`]). Reads no payload.
    ///
    /// # Errors
    /// The driver's, or `CorruptCheckpoint` for a delta without its
    /// predecessor.
    pub async fn append(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        checkpoint: &Checkpoint,
        step: &Step,
        retention: Retention,
    ) -> std::result::Result<(), Failure> {
        if !Self::predecessor_stored(conn, sql, key, step).await? {
            return Err(missing_predecessor(key, checkpoint.seq).into());
        }
        Self::append_checked(conn, sql, key, checkpoint, step, retention, true).await
    }

    /// [`append`](Self::append) once the caller found the predecessor
    /// stored (or `step` whole), and whether steps numbered `step`'s seq or
    /// later, or for a run's first step a mailbox, may be stored (`later`:
    /// they are dropped first). For a store that reads all it decides with
    /// in one statement.
    ///
    /// # Errors
    /// The driver's.
    pub async fn append_checked(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        checkpoint: &Checkpoint,
        step: &Step,
        retention: Retention,
        later: bool,
    ) -> std::result::Result<(), Failure> {
        if later {
            Self::delete_steps_from(conn, sql, key, step.seq).await?;
            if step.seq == 0 {
                // a fresh run under the key: none of the old run's signals
                Self::clear_mailbox(conn, sql, key).await?;
            }
        }
        let due = Self::due_at(conn, sql, key, checkpoint).await?;
        Self::write_run(conn, sql, key, checkpoint, retention.expire_after, due).await?;
        Self::insert(conn, sql, key, step).await?;
        Self::trim(conn, sql, key, checkpoint, retention).await
    }

    /// What follows the append of `checkpoint` as the latest of run `key`
    /// (its step and row written): the journal cut at [`cut_point`], and
    /// the pipeline's completed runs trimmed (see [`Retention`]). For a
    /// store that writes the step and the row its own way; reads no
    /// payload.
    ///
    /// # Errors
    /// The driver's.
    pub async fn trim(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        checkpoint: &Checkpoint,
        retention: Retention,
    ) -> std::result::Result<(), Failure> {
        if checkpoint.keep_from > 0 {
            let whole: Vec<i64> = sqlx::query_scalar(&sql.steps.whole)
                .bind(key)
                .fetch_all(&mut *conn)
                .await?;
            let whole = whole.into_iter().filter_map(|s| u32::try_from(s).ok());
            if let Some(cut) = cut_point(checkpoint, whole) {
                sqlx::query(&sql.steps.delete_below)
                    .bind(key)
                    .bind(i64::from(cut))
                    .execute(&mut *conn)
                    .await?;
            }
        }
        Self::keep_completed(conn, sql, key, checkpoint, retention.keep_completed).await?;
        Ok(())
    }

    /// Replaces the whole journal of run `key` with `steps` (oldest first),
    /// its row describing `latest`, its mailbox with `latest`'s
    /// [`signals`](Checkpoint::signals), and trims the pipeline's completed
    /// runs (see [`Retention`]). The row is written first: concurrent plain
    /// saves of one run take turns on it.
    ///
    /// # Errors
    /// The driver's.
    pub async fn replace(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        latest: &Checkpoint,
        steps: &[Step],
        retention: Retention,
    ) -> std::result::Result<(), Failure> {
        let due = waits::due_value(latest, &latest.signals);
        Self::write_run(conn, sql, key, latest, retention.expire_after, due).await?;
        Self::delete_steps_from(conn, sql, key, 0).await?;
        for step in steps {
            Self::insert(conn, sql, key, step).await?;
        }
        Self::replace_mailbox(conn, sql, key, &latest.signals).await?;
        Self::keep_completed(conn, sql, key, latest, retention.keep_completed).await?;
        Ok(())
    }

    async fn delete_steps_from(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        seq: i64,
    ) -> sqlx::Result<()> {
        sqlx::query(&sql.steps.delete_from)
            .bind(key)
            .bind(seq)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    async fn insert(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        step: &Step,
    ) -> sqlx::Result<()> {
        sqlx::query(&sql.steps.insert)
            .bind(key)
            .bind(step.seq)
            .bind(step.whole)
            .bind(step.payload.as_slice())
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Upserts the run's row with the fields of its latest checkpoint, due
    /// at `due` (see [`due_at`](Self::due_at)); a completed run expires
    /// `retention` from now. Tells the store's watchers (where it has
    /// wake-ups) when the run parked or ended.
    async fn write_run(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        checkpoint: &Checkpoint,
        retention: Option<Duration>,
        due: Option<i64>,
    ) -> std::result::Result<(), Failure> {
        let retention = match checkpoint.status {
            RunStatus::Completed => retention.map(D::span),
            _ => None,
        };
        sqlx::query(&sql.save)
            .bind(key)
            .bind(checkpoint.version.as_str())
            .bind(i64::from(checkpoint.ip))
            .bind(checkpoint.step.as_str())
            .bind(status_name(checkpoint.status)?)
            .bind(checkpoint.error_message.as_deref())
            .bind(D::instant(checkpoint.created_at_ms))
            .bind(retention)
            .bind(i64::from(checkpoint.attempt))
            .bind(due)
            .execute(&mut *conn)
            .await?;
        if let Some(kind) = event_of(checkpoint.status) {
            Self::notify(conn, sql, key, kind).await?;
        }
        Ok(())
    }

    /// After `checkpoint` was written as the latest of run `key`: when it
    /// completes the run and the store keeps `keep` completed runs per
    /// pipeline, deletes the completed runs of the run's pipeline (the part
    /// of `key` before its first `/`) but the `keep` newest, each whole
    /// (its row, and its steps with it). In the completing write's
    /// transaction.
    async fn keep_completed(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        checkpoint: &Checkpoint,
        keep: Option<usize>,
    ) -> sqlx::Result<()> {
        let Some(keep) = keep else { return Ok(()) };
        if checkpoint.status != RunStatus::Completed {
            return Ok(());
        }
        let pipeline = key.split_once('/').map_or("", |(pipeline, _)| pipeline);
        if let Some(lock) = &sql.keep_lock {
            sqlx::query(lock).bind(pipeline).execute(&mut *conn).await?;
        }
        sqlx::query(&sql.keep_completed)
            .bind(pipeline)
            .bind(i64::try_from(keep).unwrap_or(i64::MAX))
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// The run row's `due_at` for `checkpoint`, written as the latest of
    /// run `key` (see [`due_value`]): for a waiting run, with the names its
    /// mailbox holds an entry for, read in the caller's transaction.
    ///
    /// # Errors
    /// The driver's.
    pub(crate) async fn due_at(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        checkpoint: &Checkpoint,
    ) -> sqlx::Result<Option<i64>> {
        let waits = checkpoint
            .pending
            .as_ref()
            .is_some_and(|p| !p.waits.is_empty());
        if checkpoint.status != RunStatus::Waiting || !waits {
            return Ok(due_value(checkpoint, &[]));
        }
        let names: Vec<String> = sqlx::query_scalar(&sql.waits.named)
            .bind(key)
            .fetch_all(&mut *conn)
            .await?;
        let mailbox: Vec<Signal> = names.iter().map(|name| entry(name)).collect();
        Ok(due_value(checkpoint, &mailbox))
    }

    /// Empties the mailbox of run `key`.
    pub(crate) async fn clear_mailbox(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
    ) -> sqlx::Result<()> {
        sqlx::query(&sql.waits.clear)
            .bind(key)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Makes the mailbox of run `key` hold `signals` and nothing else.
    pub(crate) async fn replace_mailbox(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        signals: &[Signal],
    ) -> sqlx::Result<()> {
        Self::clear_mailbox(conn, sql, key).await?;
        for signal in signals {
            Self::insert_signal(conn, sql, key, signal).await?;
        }
        Ok(())
    }

    async fn insert_signal(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        signal: &Signal,
    ) -> sqlx::Result<()> {
        sqlx::query(&sql.waits.insert)
            .bind(key)
            .bind(signal.name.as_str())
            .bind(signal.payload.bytes())
            .bind(int(signal.sent_at_ms))
            .bind(signal.sender.as_str())
            .bind(signal.state.as_str())
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Tells the store's watchers, when it tells them in its transactions,
    /// that `kind` happened to run `key` (sent when the caller commits).
    pub(crate) async fn notify(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        kind: RunEventKind,
    ) -> sqlx::Result<()> {
        if let Some(notify) = &sql.waits.notify {
            sqlx::query(&notify.sql)
                .bind(notify.channel.as_str())
                .bind(event_payload(key, kind).as_str())
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    /// The mailbox of run `key`, in the order it came (sent, then name).
    ///
    /// # Errors
    /// The driver's; `CorruptCheckpoint` for a row this build cannot read.
    pub async fn signals(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
    ) -> std::result::Result<Vec<Signal>, Failure> {
        let rows: Vec<Entry> = sqlx::query_as(&sql.waits.mailbox)
            .bind(key)
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| signal_of(key, row))
            .collect::<Result<_>>()?)
    }

    /// The entries of run `key`'s mailbox for `names` (each once), sent
    /// first first.
    async fn entries(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        names: &[&str],
    ) -> std::result::Result<Vec<Signal>, Failure> {
        let mut mailbox = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                continue;
            }
            let row: Option<Entry> = sqlx::query_as(&sql.waits.entry)
                .bind(key)
                .bind(*name)
                .fetch_optional(&mut *conn)
                .await?;
            if let Some(row) = row {
                mailbox.push(signal_of(key, row)?);
            }
        }
        mailbox.sort_by(|a, b| (a.sent_at_ms, &a.name).cmp(&(b.sent_at_ms, &b.name)));
        Ok(mailbox)
    }

    /// The runs due as `filter` says (rule 27), on `conn`, in one
    /// statement ([`due_statement`]): earliest first, then in key order.
    ///
    /// # Errors
    /// The driver's; `InvalidSetting` for a limit out of range.
    pub async fn due_runs(
        conn: &mut DB::Connection,
        sql: &WaitStatements,
        filter: &DueFilter,
    ) -> std::result::Result<Vec<DueRun>, Failure> {
        Self::due_rows(conn, due_statement::<D>(sql, filter)?).await
    }

    /// The due runs `statement` reads (key, version, due time).
    async fn due_rows(
        conn: &mut DB::Connection,
        statement: crate::Statement<D::Time>,
    ) -> std::result::Result<Vec<DueRun>, Failure> {
        let (text, arguments) = statement.into_parts::<DB>()?;
        let rows: Vec<(String, String, i64)> = sqlx::query_as_with(&text, arguments)
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows.into_iter().map(due_run).collect())
    }

    /// Claims the runs due as `filter` says in the caller's transaction,
    /// as `CheckpointStore::claim_due` does ([`claim_statement`]): the
    /// due runs whose lease is not held read with their lease rows locked,
    /// skipping the rows another transaction holds (another claim, or a
    /// write of the run's owner); then, to fill the limit, those without a
    /// lease row; then each one's lease taken for `ttl`
    /// ([`acquire`](Self::acquire)), which waits for no row this claim
    /// does not hold (but a new lease row another claim inserts), so a
    /// claim cannot deadlock with the runs' owners. The caller commits.
    ///
    /// # Errors
    /// The driver's; `InvalidSetting` for a limit out of range.
    pub async fn claim_due(
        conn: &mut DB::Connection,
        (waits, run): (&WaitStatements, &RunStatements),
        filter: &DueFilter,
        ttl: Duration,
    ) -> std::result::Result<Vec<Claimed>, Failure> {
        let mut due = Self::due_rows(conn, claim_statement::<D>(waits, filter, true)?).await?;
        if due.len() < filter.limit {
            let rest = filter.clone().limit(filter.limit - due.len());
            let unleased = claim_statement::<D>(waits, &rest, false)?;
            due.extend(Self::due_rows(conn, unleased).await?);
        }
        let mut claimed = Vec::with_capacity(due.len());
        for due in due {
            if let Some(token) = Self::acquire(conn, run, &due.key, ttl).await? {
                let lease = Self::leased(&due.key, Some(token))?;
                claimed.push(Claimed::new(due, lease));
            }
        }
        Ok(claimed)
    }

    /// Stores `signal` in the mailbox of run `key` in the caller's
    /// transaction, as `CheckpointStore::send_signal` does: the run's row
    /// read first, locked as its fenced writes and cancels lock it, so that
    /// the senders, the waits deciding and the writes of one run take
    /// turns; the run loaded with `load` (the store's load statement) and
    /// the entry of the name read; [`deliver`] decides; a new entry is
    /// stored, and a waiting run that waits for its name is due at once
    /// (and its watchers told).
    ///
    /// # Errors
    /// [`deliver`]'s refusals; the driver's; a corrupt run or entry.
    pub async fn send_signal(
        conn: &mut DB::Connection,
        sql: &Statements,
        load: &str,
        key: &str,
        signal: &Signal,
    ) -> std::result::Result<Delivery, Failure> {
        let stored = match Self::status(conn, sql, key).await? {
            None => None,
            Some(_) => Self::load(conn, load, key).await?,
        };
        let mailbox = Self::entries(conn, sql, key, &[signal.name.as_str()]).await?;
        if let Some(answer) = deliver(key, stored.as_ref(), &mailbox, signal)? {
            return Ok(answer);
        }
        Self::insert_signal(conn, sql, key, signal).await?;
        let due = stored.is_some_and(|cp| cp.waits_for(&signal.name));
        if due {
            sqlx::query(&sql.waits.due_now)
                .bind(key)
                .execute(&mut *conn)
                .await?;
            Self::notify(conn, sql, key, RunEventKind::Due).await?;
        }
        Ok(Delivery::Delivered)
    }

    /// Decides the wait `take` of run `key` at `now_ms` in the caller's
    /// transaction, as `CheckpointStore::take_signal` does: refused as a
    /// fenced write is ([`gate`](Self::gate): `Cancelled`, `LeaseLost`;
    /// then `CheckpointNotFound`), before anything is written; then the
    /// entries of the wait's names read, [`decide`]d, and what changed
    /// written back. The run's `due_at` is left as it is: a worker that
    /// crashes after taking a signal leaves the run due, and the next one
    /// takes the same signal (the next checkpoint writes it anew).
    ///
    /// # Errors
    /// The refusals above; the driver's; a corrupt entry.
    pub async fn take_signal(
        conn: &mut DB::Connection,
        sql: &Statements,
        run: &RunStatements,
        (key, take): (&str, &Take),
        lease: &Lease,
    ) -> std::result::Result<Decision, Failure> {
        // the lease must be the run's own: it fences the writes of `key`
        token_of(lease, key)?;
        Self::gate_stored(conn, (sql, run), lease).await?;
        let mut names: Vec<&str> = take.waits.iter().map(String::as_str).collect();
        names.extend(take.refuse.as_deref());
        let before = Self::entries(conn, sql, key, &names).await?;
        let mut after = before.clone();
        let decision = decide(&mut after, take);
        Self::write_back(conn, sql, key, &before, &after).await?;
        Ok(decision)
    }

    /// Sets when run `key` is due for recovery in the caller's
    /// transaction, as `CheckpointStore::set_due` does: refused as a fenced
    /// write is ([`gate`](Self::gate): `Cancelled`, `LeaseLost`; then
    /// `CheckpointNotFound`); then the row's `due_at` set to `due` (`None`:
    /// cleared) when the run is running or failed, and left as it is
    /// otherwise (its checkpoint says when it is due). The row's next
    /// write sets `due_at` from its checkpoint again.
    ///
    /// # Errors
    /// The refusals above; the driver's.
    pub async fn set_due(
        conn: &mut DB::Connection,
        (sql, run): (&Statements, &RunStatements),
        lease: &Lease,
        due: Option<u64>,
    ) -> std::result::Result<(), Failure> {
        let key = lease.run_id();
        let status = Self::gate_stored(conn, (sql, run), lease).await?;
        if status == crate::RUNNING || status == crate::FAILED {
            sqlx::query(&sql.waits.set_due)
                .bind(due.map(|at| int(at.min(MAX_UNTIL_MS))))
                .bind(key)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    /// Writes what changed from `before` to `after` (entries of run
    /// `key`'s mailbox, by name): an entry gone is deleted, one whose
    /// state alone changed is marked (its payload is not sent again), any
    /// other change is deleted and stored anew, a new entry stored.
    async fn write_back(
        conn: &mut DB::Connection,
        sql: &Statements,
        key: &str,
        before: &[Signal],
        after: &[Signal],
    ) -> sqlx::Result<()> {
        for old in before {
            let new = after.iter().find(|s| s.name == old.name);
            let (statement, state) = match new {
                Some(new) if new == old => continue,
                Some(new) if restated(old, new) => (&sql.waits.mark, Some(new.state)),
                _ => (&sql.waits.delete, None),
            };
            let mut query = sqlx::query(statement);
            if let Some(state) = state {
                query = query.bind(state.as_str());
            }
            query
                .bind(key)
                .bind(old.name.as_str())
                .execute(&mut *conn)
                .await?;
        }
        for new in after {
            if !before.iter().any(|old| old == new || restated(old, new)) {
                Self::insert_signal(conn, sql, key, new).await?;
            }
        }
        Ok(())
    }
}

/// The refusal of a fenced write of run `key` whose row's status is
/// `status` (`None`: no row): cancelled or paused ([`fenced_refusal`]).
pub(crate) fn refusal_of(key: &str, status: Option<&str>) -> Option<Error> {
    match status? {
        CANCELLED => fenced_refusal(key, RunStatus::Cancelled),
        PAUSED => fenced_refusal(key, RunStatus::Paused),
        _ => None,
    }
}
