//! A run's journal in SQL (contract rules 18 and 20): the steps of one
//! write, run inside a transaction that holds SQLite's write lock.
//!
//! The decisions (which checkpoint a delta needs, where the journal may be
//! cut, how the entries fold into a context) are fluxio-core's:
//! [`missing_predecessor`], [`cut_point`], [`Checkpoint::from_entries`].
//! What is left here is the order of the statements.

use std::time::Duration;

use fluxio_core::Result;
use fluxio_core::store::{Checkpoint, RunStatus, cut_point, missing_predecessor};
use sqlx::SqliteConnection;

use crate::connection::Failure;
use crate::names::{CANCELLED, COMPLETED, Sql};

/// One checkpoint as a row of `<table>_steps`: its number, whether it holds
/// the whole context, and [`Checkpoint::entry_bytes`]. Encoded before the
/// transaction starts, so no encoding happens under the write lock.
pub(crate) struct Step {
    seq: i64,
    whole: bool,
    payload: Vec<u8>,
}

impl Step {
    pub(crate) fn of(checkpoint: &Checkpoint) -> Result<Step> {
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
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention {
    pub(crate) expire_after: Option<Duration>,
    pub(crate) keep_completed: Option<usize>,
}

impl Retention {
    /// Nothing expires and nothing is trimmed: for writes that never
    /// complete a run (a cancel).
    pub(crate) const NONE: Retention = Retention {
        expire_after: None,
        keep_completed: None,
    };
}

/// The run's row: whether it is cancelled (`None`: no row).
pub(crate) async fn cancelled(
    conn: &mut SqliteConnection,
    sql: &Sql,
    key: &str,
) -> std::result::Result<bool, Failure> {
    let status: Option<String> = sqlx::query_scalar(&sql.status)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(status.as_deref() == Some(CANCELLED))
}

/// Appends `checkpoint` (encoded as `step`) to the journal of run `key`,
/// as [`fluxio_core::store::append`] does to a list: refuses a delta whose
/// predecessor is not stored (before writing anything), drops the steps
/// numbered `seq` or later, writes the run's row and the step, and cuts
/// the journal at [`cut_point`]. Reads no payload.
pub(crate) async fn append(
    conn: &mut SqliteConnection,
    sql: &Sql,
    key: &str,
    checkpoint: &Checkpoint,
    step: &Step,
    retention: Retention,
) -> std::result::Result<(), Failure> {
    if !step.whole {
        let before: bool = sqlx::query_scalar(&sql.step_exists)
            .bind(key)
            .bind(step.seq - 1)
            .fetch_one(&mut *conn)
            .await?;
        if !before {
            return Err(missing_predecessor(key, checkpoint.seq).into());
        }
    }
    sqlx::query(&sql.delete_steps_from)
        .bind(key)
        .bind(step.seq)
        .execute(&mut *conn)
        .await?;
    write_run(conn, sql, key, checkpoint, retention.expire_after).await?;
    insert(conn, sql, key, step).await?;
    if checkpoint.keep_from > 0 {
        let whole: Vec<i64> = sqlx::query_scalar(&sql.whole_steps)
            .bind(key)
            .fetch_all(&mut *conn)
            .await?;
        let whole = whole.into_iter().filter_map(|s| u32::try_from(s).ok());
        if let Some(cut) = cut_point(checkpoint, whole) {
            sqlx::query(&sql.delete_steps_below)
                .bind(key)
                .bind(i64::from(cut))
                .execute(&mut *conn)
                .await?;
        }
    }
    keep_completed(conn, sql, key, checkpoint, retention.keep_completed).await
}

/// Replaces the whole journal of run `key` with `steps` (oldest first),
/// its row describing `latest`. The row is written first: concurrent plain
/// saves of one run take turns on it.
pub(crate) async fn replace(
    conn: &mut SqliteConnection,
    sql: &Sql,
    key: &str,
    latest: &Checkpoint,
    steps: &[Step],
    retention: Retention,
) -> std::result::Result<(), Failure> {
    write_run(conn, sql, key, latest, retention.expire_after).await?;
    sqlx::query(&sql.delete_steps_from)
        .bind(key)
        .bind(0_i64)
        .execute(&mut *conn)
        .await?;
    for step in steps {
        insert(conn, sql, key, step).await?;
    }
    keep_completed(conn, sql, key, latest, retention.keep_completed).await
}

/// After `checkpoint` was written as the latest of run `key`: when it
/// completes the run and the store keeps `keep` completed runs per
/// pipeline, deletes the completed runs of the run's pipeline (the part of
/// `key` before its first `/`) but the `keep` newest, each whole (its row,
/// and its steps with it). In the completing write's transaction.
async fn keep_completed(
    conn: &mut SqliteConnection,
    sql: &Sql,
    key: &str,
    checkpoint: &Checkpoint,
    keep: Option<usize>,
) -> std::result::Result<(), Failure> {
    let Some(keep) = keep else { return Ok(()) };
    if checkpoint.status != RunStatus::Completed {
        return Ok(());
    }
    let pipeline = key.split_once('/').map_or("", |(pipeline, _)| pipeline);
    sqlx::query(&sql.keep_completed)
        .bind(pipeline)
        .bind(i64::try_from(keep).unwrap_or(i64::MAX))
        .execute(&mut *conn)
        .await?;
    Ok(())
}

async fn insert(
    conn: &mut SqliteConnection,
    sql: &Sql,
    key: &str,
    step: &Step,
) -> std::result::Result<(), Failure> {
    sqlx::query(&sql.insert_step)
        .bind(key)
        .bind(step.seq)
        .bind(step.whole)
        .bind(step.payload.as_slice())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Upserts the run's row with the fields of its latest checkpoint; a
/// completed run expires `retention` from now.
async fn write_run(
    conn: &mut SqliteConnection,
    sql: &Sql,
    key: &str,
    checkpoint: &Checkpoint,
    retention: Option<Duration>,
) -> std::result::Result<(), Failure> {
    let retention = match checkpoint.status {
        RunStatus::Completed => retention.map(crate::store::millis),
        _ => None,
    };
    sqlx::query(&sql.save)
        .bind(key)
        .bind(checkpoint.version.as_str())
        .bind(i64::from(checkpoint.ip))
        .bind(checkpoint.step.as_str())
        .bind(status_name(checkpoint.status))
        .bind(checkpoint.error_message.as_deref())
        .bind(i64::try_from(checkpoint.created_at_ms).unwrap_or(i64::MAX))
        .bind(retention)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

fn status_name(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Running => "running",
        RunStatus::Failed => "failed",
        RunStatus::Completed => COMPLETED,
        RunStatus::Cancelled => CANCELLED,
        _ => "other",
    }
}

/// The latest checkpoint of run `key` from the payloads `load` selected
/// (from its last whole checkpoint on); `None` when there are none.
pub(crate) fn latest(key: &str, parts: Vec<Vec<u8>>) -> Result<Option<Checkpoint>> {
    if parts.is_empty() {
        return Ok(None);
    }
    Checkpoint::from_entries(key, parts).map(Some)
}
