//! Listing runs (contract rule 21) from the run rows, in one statement,
//! the same for both SQL stores: the query a [`RunFilter`] asks for, with
//! every value a bind parameter, and the page built from its rows. No
//! journal is read: the run's row mirrors its latest checkpoint's header
//! (status, step, attempt, version, error, times), and the lease table says
//! whether a running run is held or abandoned.
//!
//! Each store gives the text that names its tables and reads its clock
//! ([`Listing`]); its [`Dialect`] says how a parameter is written and how a
//! time is bound. The indexes that make each filter one range in key order
//! are the stores' (schema version 4).

use fluxio_core::Context;
use fluxio_core::Error;
use fluxio_core::store::{
    Checkpoint, RunCount, RunFilter, RunPage, RunState, RunStatus, RunSummary, tally,
};
use sqlx::{Arguments as _, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::{
    CANCELLED, COMPLETED, Dialect, FAILED, NEEDS_ATTENTION, PAUSED, RUNNING, SLEEPING, WAITING,
};

/// One store's listing text, built once from its validated, quoted names.
#[doc(hidden)]
#[derive(Debug)]
pub struct Listing {
    /// `SELECT` of the run rows `c`, left-joined with their lease `l` where
    /// it is held (unexpired, by the store's clock), with no `WHERE`. The
    /// columns, in order: the key, version, status, step, attempt, error
    /// message, created and updated (milliseconds since the Unix epoch,
    /// integers), and the held lease's expiry (milliseconds; NULL when not
    /// held). Its last ` FROM ` starts its FROM clause, which counting
    /// reuses.
    pub select: String,
    /// The condition that `c` is visible (not a completed run past its
    /// retention).
    pub visible: String,
    /// The key of `c` as it sorts in key order (byte order: SQLite's
    /// `BINARY`, Postgres's `COLLATE "C"`), for `ORDER BY` and the cursor.
    pub key: String,
    /// Whether `l` is a held lease: `NOT NULL` means held (a column of
    /// `l` that the join leaves NULL when the lease is not held).
    pub held: String,
    /// The run id of `c`'s key (what follows the first `/`, or the whole
    /// key), as it sorts in key order: a filter on its prefix.
    pub id: String,
    /// `c`'s pipeline as text (MySQL keeps it as bytes), for counting.
    pub pipeline: String,
}

/// One row of the listing statement.
type Row = (
    String,
    String,
    String,
    String,
    i64,
    Option<String>,
    i64,
    i64,
    Option<i64>,
);

/// A value the statement binds, in order.
pub(crate) enum Arg<T> {
    Text(String),
    Time(T),
    Count(i64),
}

/// The listing statement of one filter (and the due runs' statement of
/// one, `waits.rs`): its text and its values, in bind order
/// ([`Statement::into_parts`]).
#[doc(hidden)]
pub struct Statement<T> {
    /// The SQL, every value a parameter.
    pub text: String,
    pub(crate) args: Vec<Arg<T>>,
}

impl<T> std::fmt::Debug for Statement<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Statement")
            .field("text", &self.text)
            .field("args", &self.args.len())
            .finish()
    }
}

impl<T> Statement<T> {
    /// The text, and the values as the driver binds them.
    ///
    /// # Errors
    /// The driver's encoding error (`sqlx::Error::Encode`).
    pub fn into_parts<'q, DB>(self) -> sqlx::Result<(String, DB::Arguments<'q>)>
    where
        DB: Database,
        T: Encode<'q, DB> + Type<DB> + 'q,
        String: Encode<'q, DB> + Type<DB>,
        i64: Encode<'q, DB> + Type<DB>,
    {
        let mut arguments = DB::Arguments::default();
        let added = self.args.into_iter().try_for_each(|arg| match arg {
            Arg::Text(s) => arguments.add(s),
            Arg::Time(t) => arguments.add(t),
            Arg::Count(n) => arguments.add(n),
        });
        added.map_err(sqlx::Error::Encode)?;
        Ok((self.text, arguments))
    }
}

/// The listing statement for `filter` in dialect `D`.
///
/// # Errors
/// `Unsupported` for a state this build does not know; `InvalidSetting`
/// naming `limit` for a limit out of range.
#[doc(hidden)]
pub fn statement<D: Dialect>(
    sql: &Listing,
    filter: &RunFilter,
) -> Result<Statement<D::Time>, Error> {
    let Statement { mut text, mut args } = filtered::<D>(sql, &sql.select, filter, true)?;
    // One run more than the page: whether there is a next page.
    let limit = filter.page_size()? + 1;
    text.push_str(&format!(
        " ORDER BY {} LIMIT {}",
        sql.key,
        D::param(args.len() + 1)
    ));
    args.push(Arg::Count(i64::try_from(limit).unwrap_or(i64::MAX)));
    Ok(Statement { text, args })
}

/// The counting statement for `filter` in dialect `D`: the runs a listing
/// would return (its page aside), counted per pipeline and row status,
/// with how many of them hold a lease (`COUNT` of the lease's column, NULL
/// when not held). Columns: pipeline, status, runs, held.
///
/// # Errors
/// As [`statement`].
#[doc(hidden)]
pub fn count_statement<D: Dialect>(
    sql: &Listing,
    filter: &RunFilter,
) -> Result<Statement<D::Time>, Error> {
    // the last ` FROM ` of the listing's select starts its FROM clause (a
    // column may hold one: Postgres's `EXTRACT(EPOCH FROM ...)`)
    let from = sql
        .select
        .rsplit_once(" FROM ")
        .map_or("", |(_, from)| from);
    let select = format!(
        "SELECT {}, c.status, COUNT(*), COUNT({}) FROM {from}",
        sql.pipeline, sql.held
    );
    let Statement { mut text, args } = filtered::<D>(sql, &select, filter, false)?;
    text.push_str(" GROUP BY c.pipeline, c.status");
    Ok(Statement { text, args })
}

/// `select` with the conditions `filter` asks for (and its cursor, when
/// `cursor`), every value a parameter.
fn filtered<D: Dialect>(
    sql: &Listing,
    select: &str,
    filter: &RunFilter,
    cursor: bool,
) -> Result<Statement<D::Time>, Error> {
    let mut text = format!("{select} WHERE {}", sql.visible);
    let mut args: Vec<Arg<D::Time>> = Vec::new();
    // Appends ` AND <left> <op> <the next parameter>`.
    let and = |text: &mut String, args: &mut Vec<Arg<D::Time>>, left: &str, op: &str, arg| {
        let n = args.len() + 1;
        let param = match arg {
            Arg::Time(_) => D::time_param(n),
            Arg::Text(_) | Arg::Count(_) => D::param(n),
        };
        text.push_str(&format!(" AND {left} {op} {param}"));
        args.push(arg);
    };
    if let Some(pipeline) = &filter.pipeline {
        if filter.state.is_none() && !pipeline.is_empty() && !pipeline.contains('/') {
            // Without a state, a named pipeline's runs are one range of keys
            // in key order (`<pipeline>/` up to, not including,
            // `<pipeline>0`: `0` follows `/`, and a pipeline's name holds no
            // `/`), which the key's index reads; the range alone is the
            // filter, so no other index looks cheaper to the planner.
            and(
                &mut text,
                &mut args,
                &sql.key,
                ">=",
                Arg::Text(format!("{pipeline}/")),
            );
            and(
                &mut text,
                &mut args,
                &sql.key,
                "<",
                Arg::Text(format!("{pipeline}0")),
            );
        } else {
            // With a state, the (pipeline, status, key) index reads them.
            and(
                &mut text,
                &mut args,
                "c.pipeline",
                "=",
                Arg::Text(pipeline.clone()),
            );
        }
    }
    if let Some(state) = filter.state {
        let (status, held) = status_of(state)?;
        and(
            &mut text,
            &mut args,
            "c.status",
            "=",
            Arg::Text(status.to_owned()),
        );
        match held {
            Some(true) => text.push_str(&format!(" AND {} IS NOT NULL", sql.held)),
            Some(false) => text.push_str(&format!(" AND {} IS NULL", sql.held)),
            None => {}
        }
    }
    if let Some(version) = &filter.version {
        and(
            &mut text,
            &mut args,
            "c.version",
            "=",
            Arg::Text(version.clone()),
        );
    }
    if let Some(ms) = filter.created_after_ms {
        and(
            &mut text,
            &mut args,
            "c.created_at",
            ">=",
            Arg::Time(D::bound(ms)),
        );
    }
    if let Some(ms) = filter.updated_before_ms {
        and(
            &mut text,
            &mut args,
            "c.updated_at",
            "<",
            Arg::Time(D::bound(ms)),
        );
    }
    if let Some(prefix) = filter.id_prefix.as_deref().filter(|p| !p.is_empty()) {
        and(
            &mut text,
            &mut args,
            &sql.id,
            ">=",
            Arg::Text(prefix.to_owned()),
        );
        if let Some(end) = fluxio_core::store::prefix_end(prefix) {
            and(&mut text, &mut args, &sql.id, "<", Arg::Text(end));
        }
    }
    if let Some(after) = filter.after.as_ref().filter(|_| cursor) {
        and(
            &mut text,
            &mut args,
            &sql.key,
            ">",
            Arg::Text(after.clone()),
        );
    }
    Ok(Statement { text, args })
}

/// The row `status` and lease a listing of runs in `state` asks for: held
/// (`Some(true)`), not held (`Some(false)`) or either.
fn status_of(state: RunState) -> Result<(&'static str, Option<bool>), Error> {
    Ok(match state {
        RunState::Running => (RUNNING, Some(true)),
        RunState::Abandoned => (RUNNING, Some(false)),
        RunState::Failed => (FAILED, None),
        RunState::Completed => (COMPLETED, None),
        RunState::Cancelled => (CANCELLED, None),
        RunState::NeedsAttention => (NEEDS_ATTENTION, None),
        RunState::Sleeping => (SLEEPING, None),
        RunState::Waiting => (WAITING, None),
        RunState::Paused => (PAUSED, None),
        _ => {
            return Err(Error::Unsupported {
                operation: "list runs in a state this build of fluxio-sql does not know",
                store: "sql",
            });
        }
    })
}

/// The checkpoint status a row's `status` names.
fn status_named(key: &str, status: &str) -> Result<RunStatus, Error> {
    Ok(match status {
        RUNNING => RunStatus::Running,
        FAILED => RunStatus::Failed,
        COMPLETED => RunStatus::Completed,
        CANCELLED => RunStatus::Cancelled,
        NEEDS_ATTENTION => RunStatus::NeedsAttention,
        SLEEPING => RunStatus::Sleeping,
        WAITING => RunStatus::Waiting,
        PAUSED => RunStatus::Paused,
        other => {
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!("its row's status `{other}` is not one this build knows"),
                source: None,
            });
        }
    })
}

/// The summary of one row: its fields as the header of a checkpoint, which
/// [`RunSummary::of`] reads, so a row's state is decided as every store
/// decides it.
fn summary(row: Row) -> Result<RunSummary, Error> {
    let (key, version, status, step, attempt, error_message, created, updated, lease) = row;
    let (pipeline, run_id) = key.split_once('/').unwrap_or(("", key.as_str()));
    let mut cp =
        Checkpoint::new(run_id, version, 0, step, Context::new().snapshot()).in_pipeline(pipeline);
    cp.status = status_named(&key, &status)?;
    cp.error_message = error_message;
    // The store wrote these from a u32 and from u64 milliseconds (at most
    // i64::MAX); anything else saturates rather than failing the page.
    cp.attempt = u32::try_from(attempt.max(0)).unwrap_or(u32::MAX);
    cp.created_at_ms = u64::try_from(created).unwrap_or(0);
    cp.updated_at_ms = u64::try_from(updated).unwrap_or(0);
    let lease = lease.map(|ms| u64::try_from(ms).unwrap_or(0));
    Ok(RunSummary::of(&key, &cp, lease))
}

/// Lists the runs `filter` asks for, on `conn`, in one statement (one
/// snapshot of the rows and the leases): the runs in key order after the
/// cursor, at most [`RunFilter::limit`] (clamped to 1..=10,000) of them, and
/// the cursor of the next page (the last key of this one) when more runs
/// match.
///
/// # Errors
/// The driver's; `CorruptCheckpoint` for a row whose status this build
/// does not know; `Unsupported` for a state it does not know.
#[doc(hidden)]
pub async fn list<D, DB>(
    conn: &mut DB::Connection,
    sql: &Listing,
    filter: &RunFilter,
) -> Result<RunPage, crate::Failure>
where
    D: Dialect<Db = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> D::Time: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let (text, arguments) = statement::<D>(sql, filter)?.into_parts::<DB>()?;
    let rows: Vec<Row> = sqlx::query_as_with(&text, arguments)
        .fetch_all(&mut *conn)
        .await?;
    let limit = filter.page_size()?;
    let more = rows.len() > limit;
    let mut page = RunPage::default();
    page.runs = rows
        .into_iter()
        .take(limit)
        .map(summary)
        .collect::<Result<_, _>>()?;
    if more {
        page.next = page.runs.last().map(|r| r.key.clone());
    }
    Ok(page)
}

/// Counts the runs `filter` asks for (its page aside), on `conn`, per
/// pipeline and state, in one statement ([`count_statement`]): what
/// [`CheckpointStore::count_runs`](fluxio_core::store::CheckpointStore::count_runs)
/// answers.
///
/// # Errors
/// The driver's; `CorruptCheckpoint` for a row whose status this build
/// does not know; `Unsupported` for a state it does not know.
#[doc(hidden)]
pub async fn count<D, DB>(
    conn: &mut DB::Connection,
    sql: &Listing,
    filter: &RunFilter,
) -> Result<Vec<RunCount>, crate::Failure>
where
    D: Dialect<Db = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> D::Time: Encode<'q, DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let (text, arguments) = count_statement::<D>(sql, filter)?.into_parts::<DB>()?;
    let rows: Vec<(String, String, i64, i64)> = sqlx::query_as_with(&text, arguments)
        .fetch_all(&mut *conn)
        .await?;
    let mut counts = Vec::with_capacity(rows.len() + 1);
    for (pipeline, status, runs, held) in rows {
        let runs = u64::try_from(runs).unwrap_or(0);
        let held = u64::try_from(held).unwrap_or(0).min(runs);
        let status = status_named(&format!("{pipeline}/…"), &status)?;
        if status == RunStatus::Running {
            counts.push(RunCount::new(pipeline.clone(), RunState::Running, held));
            counts.push(RunCount::new(pipeline, RunState::Abandoned, runs - held));
        } else {
            counts.push(RunCount::new(pipeline, RunState::of(status, false), runs));
        }
    }
    Ok(tally(counts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Plain;

    fn listing() -> Listing {
        Listing {
            select: "SELECT * FROM t AS c LEFT JOIN l".into(),
            visible: "V".into(),
            key: "K".into(),
            held: "l.x".into(),
            id: "I".into(),
            pipeline: "c.pipeline".into(),
        }
    }

    fn render(filter: &RunFilter) -> (String, usize) {
        let st = statement::<Plain>(&listing(), filter).expect("a statement");
        (st.text, st.args.len())
    }

    #[test]
    fn a_count_groups_the_listing_s_rows_without_its_page() {
        let mut listing = listing();
        listing.select = "SELECT a, EXTRACT(EPOCH FROM b) FROM t AS c LEFT JOIN l".into();
        let filter = RunFilter::new()
            .pipeline("p")
            .state(RunState::Failed)
            .after("p/x");
        let st = count_statement::<Plain>(&listing, &filter).expect("a statement");
        assert_eq!(
            st.text,
            "SELECT c.pipeline, c.status, COUNT(*), COUNT(l.x) FROM t AS c LEFT JOIN l \
             WHERE V AND c.pipeline = ?1 AND c.status = ?2 GROUP BY c.pipeline, c.status"
        );
        assert_eq!(st.args.len(), 2);
    }

    #[test]
    fn every_value_is_a_parameter_in_bind_order() {
        let mut filter = RunFilter::new()
            .pipeline("o'rders")
            .state(RunState::Abandoned)
            .version("v1")
            .after("o'rders/9");
        filter.created_after_ms = Some(5);
        filter.updated_before_ms = Some(u64::MAX);
        let (text, n) = render(&filter);
        assert_eq!(
            text,
            "SELECT * FROM t AS c LEFT JOIN l WHERE V AND c.pipeline = ?1 \
             AND c.status = ?2 AND l.x IS NULL AND c.version = ?3 \
             AND c.created_at >= T(?4) AND c.updated_at < T(?5) AND K > ?6 \
             ORDER BY K LIMIT ?7"
        );
        assert_eq!(n, 7);
        assert!(!text.contains("rders"), "no value is pasted: {text}");
    }

    #[test]
    fn a_pipeline_without_a_state_is_a_range_of_keys() {
        let (text, n) = render(&RunFilter::new().pipeline("orders"));
        assert_eq!(
            text,
            "SELECT * FROM t AS c LEFT JOIN l WHERE V AND K >= ?1 AND K < ?2 \
             ORDER BY K LIMIT ?3"
        );
        assert_eq!(n, 3);
        // the unnamed pipeline's keys are no range, nor are those of a
        // name no pipeline has
        for pipeline in ["", "a/b"] {
            let (text, _) = render(&RunFilter::new().pipeline(pipeline));
            assert!(
                text.contains("c.pipeline = ?1") && !text.contains("K >="),
                "{text}"
            );
        }
    }

    #[test]
    fn the_page_asks_one_row_more_than_its_limit_and_refuses_one_out_of_range() {
        for (limit, rows) in [(1, 2), (100, 101), (10_000, 10_001)] {
            let filter = RunFilter::new().limit(limit);
            let st = statement::<Plain>(&listing(), &filter).expect("a statement");
            match st.args.last() {
                Some(Arg::Count(n)) => assert_eq!(*n, rows, "limit {limit}"),
                _ => panic!("the limit is the last argument"),
            }
        }
        for limit in [0, 10_001, usize::MAX] {
            let filter = RunFilter::new().limit(limit);
            assert!(
                matches!(
                    statement::<Plain>(&listing(), &filter),
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
    fn every_state_is_a_status_and_every_status_a_state() {
        for (state, status, held) in [
            (RunState::Running, RUNNING, Some(true)),
            (RunState::Abandoned, RUNNING, Some(false)),
            (RunState::Failed, FAILED, None),
            (RunState::Completed, COMPLETED, None),
            (RunState::Cancelled, CANCELLED, None),
            (RunState::NeedsAttention, NEEDS_ATTENTION, None),
            (RunState::Sleeping, SLEEPING, None),
            (RunState::Waiting, WAITING, None),
            (RunState::Paused, PAUSED, None),
        ] {
            assert_eq!(status_of(state).expect("known"), (status, held));
        }
        for state in RunState::ALL {
            assert!(status_of(state).is_ok(), "{state:?} lists");
        }
        let statuses = [
            RUNNING,
            FAILED,
            COMPLETED,
            CANCELLED,
            NEEDS_ATTENTION,
            SLEEPING,
            WAITING,
            PAUSED,
        ];
        for status in statuses {
            let known = status_named("p/r", status).expect("known");
            assert_eq!(crate::status_name(known).expect("a name"), status);
        }
        let err = status_named("p/r", "resting").expect_err("unknown");
        assert!(err.to_string().contains("`resting`"), "{err}");
    }

    #[test]
    fn a_row_is_summarized_as_its_checkpoint_would_be() {
        let row = |status: &str, lease: Option<i64>| -> Row {
            (
                "orders/42".into(),
                "v1".into(),
                status.into(),
                "charge".into(),
                3,
                Some("declined".into()),
                10,
                20,
                lease,
            )
        };
        let s = summary(row(RUNNING, Some(99))).expect("a summary");
        assert_eq!(
            (s.pipeline.as_str(), s.run_id.as_str(), s.key.as_str()),
            ("orders", "42", "orders/42")
        );
        assert_eq!(
            (s.state, s.attempt, s.lease_expires_at_ms),
            (RunState::Running, 3, Some(99))
        );
        assert_eq!((s.created_at_ms, s.updated_at_ms), (10, 20));
        assert_eq!(s.error_message.as_deref(), Some("declined"));
        let s = summary(row(RUNNING, None)).expect("a summary");
        assert_eq!(s.state, RunState::Abandoned);
        let s = summary(row(NEEDS_ATTENTION, None)).expect("a summary");
        assert_eq!(s.state, RunState::NeedsAttention);
    }
}
