//! A run's journal in SQL (contract rules 18 and 20), and the listing of
//! runs (rule 21). The order of the statements of one write, and the
//! listing's statement, are `fluxio-sql`'s, shared with the Postgres
//! store; what is SQLite's is here (how a parameter is named and a time
//! bound) and in
//! [`Sql`](crate::statements::Sql) (the statements' text). The store runs the
//! writes inside a `BEGIN IMMEDIATE` transaction, which holds SQLite's
//! write lock: the writes of all processes take turns, so nothing more is
//! locked.

use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::{Checkpoint, Lease, RunStatus, missing_predecessor};
use fluxio_sql::{Dialect, Params};
pub(crate) use fluxio_sql::{Retention, Step, latest};
use sqlx::Arguments as _;
use sqlx::sqlite::{SqliteArguments, SqliteConnection};

use crate::connection::Failure;

/// SQLite's side of the journal: sqlx's SQLite driver, times as INTEGER
/// milliseconds (the SQL adds a retention to SQLite's clock).
#[derive(Debug)]
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    const BACKEND: &'static str = crate::error::BACKEND;
    type Db = sqlx::Sqlite;
    type Time = i64;
    const PARAMS: Params = Params::Numbered;
    const BOOKKEEPING: [&str; 5] = ["TEXT", "INTEGER", "BLOB", "INTEGER NOT NULL", "STRICT"];
    const ROW_LOCK: &'static str = "";

    fn span(d: Duration) -> i64 {
        crate::store::millis(d)
    }

    const WHOLE: &'static str = "whole = 1";
}

/// The journal's writes on this store's connections.
pub(crate) type Journal = fluxio_sql::Journal<Sqlite>;

/// What a fenced append found before it wrote (the [`GATE`](crate::statements::GATE)
/// row): whether the run is cancelled (`1`) or paused (`2`), the lease
/// current, and the predecessor stored (or not needed).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct Gate {
    cancelled: i64,
    held: bool,
    predecessor: bool,
    /// The lease's token (a [`batch_append`](crate::statements::Sql::batch_append)'s
    /// gate: the token drawn for a run that begins, when it is free).
    #[sqlx(default)]
    token: Option<i64>,
}

impl Gate {
    /// The refusal of a fenced write of `checkpoint` under `lease`, in the
    /// order the other stores check: a cancelled or paused run, a lost
    /// lease, a missing predecessor. `None`: it was written.
    pub(crate) fn refusal(&self, checkpoint: &Checkpoint, lease: &Lease) -> Option<Error> {
        let key = lease.run_id();
        if self.cancelled == 1 {
            Some(Error::Cancelled {
                run_id: key.to_owned(),
            })
        } else if self.cancelled != 0 {
            Some(Error::Paused {
                run_id: key.to_owned(),
            })
        } else if !self.held {
            Some(Error::LeaseLost {
                run_id: key.to_owned(),
                token: lease.token(),
            })
        } else if !self.predecessor {
            Some(missing_predecessor(key, checkpoint.seq))
        } else {
            None
        }
    }
}

/// Runs `sql`, the store's [`fenced_append`](crate::statements::Sql::fenced_append)
/// or [`finish_append`](crate::statements::Sql::finish_append), for
/// `checkpoint` (encoded as `step`) of run `key` under the lease `token`:
/// one command to the driver's thread for the decision and the writes,
/// rather than one per statement. Returns the decision; nothing was written
/// when it refuses (but the lease given up, for `finish_append`). The
/// journal's cut and the trim of completed runs are left to
/// [`Journal::trim`], after.
///
/// # Errors
/// The driver's: what the statements before the failing one wrote is
/// unknown (the group commit gives the transaction up).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fenced_append(
    conn: &mut SqliteConnection,
    sql: &str,
    key: &str,
    token: i64,
    checkpoint: &Checkpoint,
    step: &Step,
    retention: Retention,
    release: bool,
) -> Result<Gate, Failure> {
    let mut args = SqliteArguments::default();
    fenced_arguments(&mut args, key, token, checkpoint, step, retention)?;
    if release {
        add(&mut args, key)?;
        add(&mut args, token)?;
    }
    // `fetch_all` runs every statement (a row limit would stop at the
    // first row); the gate's is the only one.
    let mut rows: Vec<Gate> = sqlx::query_as_with(sql, args).fetch_all(conn).await?;
    rows.pop()
        .ok_or_else(|| Failure::Sql(sqlx::Error::RowNotFound))
}

/// A fenced save queued for the group commit (see
/// [`Writer::save_fenced`](crate::writer::Writer::save_fenced)): the
/// fenced saves queued next to each other run in one command, the store's
/// [`fenced_append`](crate::statements::Sql::fenced_append) once for each.
/// Only a save with nothing for [`Journal::trim`] to do goes this way (a
/// run's last one, that gives its lease up, too, unless the run is deleted).
#[derive(Debug)]
pub(crate) struct FencedSave {
    /// The lease it is fenced by (its run id is the checkpoint's key).
    pub(crate) lease: Lease,
    /// The lease's token, as the lease table holds it.
    pub(crate) token: i64,
    pub(crate) checkpoint: Checkpoint,
    pub(crate) step: Step,
    pub(crate) retention: Retention,
    /// Whether it gives the lease up, written or refused: the last
    /// checkpoint of a run ([`finish_append`](crate::statements::Sql::finish_append)).
    pub(crate) release: bool,
    /// The lease's time to live in milliseconds when this is the first
    /// checkpoint of a run that takes its lease with it (its `lease` and
    /// `token` are then placeholders): a
    /// [`begin_run`](fluxio_core::store::CheckpointStore::begin_run) that
    /// replaces the stored run, in a
    /// [`batch_append`](crate::statements::Sql::batch_append) only.
    pub(crate) ttl: Option<i64>,
}

impl FencedSave {
    /// Adds the arguments of its `fenced_append` (`finish_append` when it
    /// gives the lease up) to `args`.
    pub(crate) fn arguments<'q>(&'q self, args: &mut SqliteArguments<'q>) -> sqlx::Result<()> {
        let key = self.lease.run_id();
        let (checkpoint, step) = (&self.checkpoint, &self.step);
        fenced_arguments(args, key, self.token, checkpoint, step, self.retention)?;
        if self.release {
            add(args, key)?;
            add(args, self.token)?;
        }
        Ok(())
    }

    /// Adds the arguments of its part of a
    /// [`batch_append`](crate::statements::Sql::batch_append) to `args`
    /// ([`BATCH_PARAMS`](crate::statements::BATCH_PARAMS) of them): key, token,
    /// seq, whole, payload, then the run's row as [`append_arguments`]
    /// binds it after the key, then whether it gives the lease up and the
    /// lease's time to live (NULL: the lease is held already, and `token`
    /// is bound; else NULL is).
    pub(crate) fn batch_arguments<'q>(
        &'q self,
        args: &mut SqliteArguments<'q>,
    ) -> sqlx::Result<()> {
        let FencedSave {
            lease,
            token,
            checkpoint,
            step,
            retention,
            release,
            ttl,
        } = self;
        add(args, lease.run_id())?;
        add(args, ttl.is_none().then_some(*token))?;
        add(args, step.seq())?;
        add(args, step.whole())?;
        add(args, step.payload())?;
        row_arguments(args, checkpoint, *retention)?;
        add(args, *release)?;
        add(args, *ttl)
    }

    /// What `gate` (its row) says: `None` when it was written, else its
    /// refusal (nothing of it was written). A run that begins is refused
    /// only when its lease is held by another
    /// ([`RunIdInUse`](Error::RunIdInUse)).
    pub(crate) fn refusal(&self, gate: &Gate) -> Option<Error> {
        match self.ttl {
            None => gate.refusal(&self.checkpoint, &self.lease),
            Some(_) if gate.held => None,
            Some(_) => Some(Error::RunIdInUse {
                run_id: self.lease.run_id().to_owned(),
            }),
        }
    }

    /// The lease's token after `gate`: the one drawn for a run that began,
    /// else the one it was fenced by.
    pub(crate) fn token(&self, gate: &Gate) -> i64 {
        gate.token.unwrap_or(self.token)
    }
}

/// The arguments of a fenced append (see `Sql::fenced_append`): the gate
/// (key; key, token; whole, key, seq), then [`append_arguments`].
fn fenced_arguments<'q>(
    args: &mut SqliteArguments<'q>,
    key: &'q str,
    token: i64,
    checkpoint: &'q Checkpoint,
    step: &'q Step,
    retention: Retention,
) -> sqlx::Result<()> {
    add(args, key)?;
    add(args, key)?;
    add(args, token)?;
    add(args, step.whole())?;
    add(args, key)?;
    add(args, step.seq())?;
    append_arguments(args, key, checkpoint, step, retention)
}

/// Runs `sql`, the store's [`first_append`](crate::statements::Sql::first_append)
/// or [`first_replace`](crate::statements::Sql::first_replace), for a run's first
/// `checkpoint` (encoded as `step`, a whole one), once its lease is taken:
/// one command to the driver's thread. The journal's cut and the trim of
/// completed runs are left to [`Journal::trim`], after.
///
/// # Errors
/// The driver's.
pub(crate) async fn first_append(
    conn: &mut SqliteConnection,
    sql: &str,
    key: &str,
    checkpoint: &Checkpoint,
    step: &Step,
    retention: Retention,
) -> Result<(), Failure> {
    let mut args = SqliteArguments::default();
    // the run deleted, or only its mailbox
    add(&mut args, key)?;
    append_arguments(&mut args, key, checkpoint, step, retention)?;
    sqlx::query_with(sql, args).execute(conn).await?;
    Ok(())
}

/// The arguments of an append's statements, in the order of their
/// placeholders (see `Sql::fenced_append`): the steps numbered `seq` or
/// later dropped (key, seq), the step (key, seq, whole, payload), the run's
/// row (key, version, ip, step, status, error message, start, retention,
/// attempt; a completed run expires `retention` from now).
fn append_arguments<'q>(
    args: &mut SqliteArguments<'q>,
    key: &'q str,
    checkpoint: &'q Checkpoint,
    step: &'q Step,
    retention: Retention,
) -> sqlx::Result<()> {
    add(args, key)?;
    add(args, step.seq())?;
    add(args, key)?;
    add(args, step.seq())?;
    add(args, step.whole())?;
    add(args, step.payload())?;
    add(args, key)?;
    row_arguments(args, checkpoint, retention)
}

/// The arguments of the run's row after its key: version, ip, step,
/// status, error message, start, retention, attempt (a completed run
/// expires `retention` from now).
fn row_arguments<'q>(
    args: &mut SqliteArguments<'q>,
    checkpoint: &'q Checkpoint,
    retention: Retention,
) -> sqlx::Result<()> {
    let expires = match checkpoint.status {
        RunStatus::Completed => retention.expire_after.map(crate::store::millis),
        _ => None,
    };
    add(args, checkpoint.version.as_str())?;
    add(args, i64::from(checkpoint.ip))?;
    add(args, checkpoint.step.as_str())?;
    let status =
        fluxio_sql::status_name(checkpoint.status).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
    add(args, status)?;
    add(args, checkpoint.error_message.as_deref())?;
    add(args, <Sqlite as Dialect>::instant(checkpoint.created_at_ms))?;
    add(args, expires)?;
    add(args, i64::from(checkpoint.attempt))?;
    Ok(())
}

/// Adds `value` to `args` (an encoding error is sqlx's).
fn add<'q, T>(args: &mut SqliteArguments<'q>, value: T) -> sqlx::Result<()>
where
    T: sqlx::Encode<'q, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite> + 'q,
{
    args.add(value).map_err(sqlx::Error::Encode)
}
