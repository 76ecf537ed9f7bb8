//! Group commit: every write of a store goes through one task, which runs
//! the writes waiting for it in one `BEGIN IMMEDIATE` transaction and
//! commits them together.
//!
//! SQLite commits one transaction at a time per file, and in WAL mode with
//! `synchronous = FULL` every commit syncs the log to disk: one write per
//! commit makes a store's throughput one `fsync` per checkpoint, however
//! many runs write. Here the writes that queue while a transaction commits
//! share the next one: a run's write is answered only once the commit that
//! holds it returned (so it is as durable as a commit is), and the next
//! group forms while the previous one syncs.
//!
//! Each write decides alone: one that is refused (a lost lease, a
//! cancelled run, a missing predecessor) fails only its own caller, and the
//! others still commit. The store's writes decide before they write
//! anything, so a refusal has nothing to undo; the one write that may be
//! refused after writing (a run's beginning) runs in a savepoint of its
//! own, rolled back when it is refused. A driver error in the middle of a
//! write (a full disk, an I/O error; SQLite then often rolls the whole
//! transaction back itself) gives the transaction up: its caller gets the
//! error, the writes that ran before it in the transaction fail with
//! [`SqliteStoreError::GroupCommit`], and the writes not run yet go into
//! the next transaction. When the transaction fails as a whole (it cannot
//! begin, or its commit fails) every write of it gets that error
//! ([`SqliteStoreError::GroupCommit`], or SQLite's error itself for a
//! transaction of one write). A write reads what the writes
//! before it in the same transaction wrote, as if they had committed one by
//! one in that order; nothing else sees any of them before the commit.
//!
//! The task runs on the tokio runtime of the first write (and again on the
//! current one if that runtime shut down); it ends when the store is
//! dropped. A write whose caller stopped waiting (a dropped future, a
//! timeout) before it began is skipped; one that began is committed or
//! rolled back whole, as the others of its transaction.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use futures::TryStreamExt as _;
use sqlx::sqlite::SqliteArguments;

use crate::connection::Failure;
use crate::error::{SqliteStoreError, own_error};
use crate::journal::{FencedSave, Gate};
use crate::statements::Sql;
use fluxio_core::Error;

/// The most writes one transaction holds.
const MAX_GROUP: usize = 256;

/// The most fenced saves one command to the driver's thread holds: the
/// connection keeps the statements of each number of saves prepared, so
/// this bounds how many it keeps.
const MAX_BATCH: usize = 16;

/// The most turns of the runtime the task gives the runs it answered to
/// make their next writes, before it takes the next group.
const YIELDS: usize = 4;

/// A boxed future borrowing the writing connection.
pub(crate) type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// What a write tells the task: whether it is kept (released savepoint) or
/// undone (rolled back to its savepoint), and how to answer its caller once
/// the transaction ended (with the transaction's error, if it failed).
type Ran = (Outcome, Answer);
type Answer = Box<dyn FnOnce(Option<Failure>) + Send>;
type Run = Box<dyn for<'c> FnOnce(Slot<'c>) -> BoxFuture<'c, Ran> + Send>;

/// A queued write.
enum Work {
    /// Any write, one after the other.
    Run {
        /// Whether it runs in a savepoint of its own: a write that may be
        /// refused after it wrote something. Any other write is refused (a
        /// [`Failure::Fluxio`]) before it writes anything, so nothing of it
        /// is to undo; when it fails otherwise (a driver error) after others
        /// ran, the transaction is given up (see [`commit_group`]).
        savepoint: bool,
        run: Run,
    },
    /// A fenced save (or a run's beginning or end, see
    /// [`FencedSave`]): it runs with the fenced saves of other runs queued
    /// next to it, in one command (see [`run_batch`]). Refused before it
    /// writes anything (but an end gives its lease up either way).
    Save(Box<Save>),
}

/// A queued fenced save and its caller.
struct Save {
    save: FencedSave,
    /// `Ok` once the transaction committed: the lease's token when it was
    /// written, else its refusal.
    tx: oneshot::Sender<Result<Result<i64, Error>, Failure>>,
    /// Run with the store's `fenced_append` (see [`run_saves`]) rather than
    /// in a [`batch_append`](crate::statements::Sql::batch_append): it was in a
    /// batch whose command failed, and is tried again so that the error
    /// fails only the save it belongs to.
    one_by_one: bool,
}

/// How a write ended.
enum Outcome {
    /// It wrote what it had to: kept.
    Kept,
    /// Refused before it wrote anything (unless in a savepoint).
    Refused,
    /// A driver error, after writing who knows what: its message.
    Failed(String),
}

/// Where a write runs: on the connection, in the group's transaction; or
/// nowhere, when the transaction could not begin (the write then answers
/// with that error).
enum Slot<'c> {
    Run(&'c mut SqliteConnection),
    Fail(Failure),
}

/// The queue of a store's writes, and the task that commits them.
pub(crate) struct Writer {
    pool: SqlitePool,
    /// The store's [`fenced_append`](crate::statements::Sql::fenced_append) and
    /// [`finish_append`](crate::statements::Sql::finish_append).
    fenced_append: [Arc<str>; 2],
    /// `batch_appends[n - 1]`: the store's
    /// [`batch_append`](crate::statements::Sql::batch_append) of `n` saves, for
    /// `n` from 1 to [`MAX_BATCH`].
    batch_appends: Arc<[String]>,
    queue: Mutex<Option<mpsc::UnboundedSender<Work>>>,
}

impl Writer {
    /// Writes through the connections of `pool` (the store's writing pool,
    /// of one connection), one transaction at a time; fenced saves with the
    /// statements of `sql`.
    pub(crate) fn new(pool: SqlitePool, sql: &Sql) -> Self {
        Writer {
            pool,
            fenced_append: [
                Arc::from(sql.fenced_append.as_str()),
                Arc::from(sql.finish_append.as_str()),
            ],
            batch_appends: (1..=MAX_BATCH).map(|n| sql.batch_append(n)).collect(),
            queue: Mutex::new(None),
        }
    }

    /// Runs `save` as [`write`](Self::write) runs a write, but in one
    /// command with the fenced saves queued next to it: each hand-over to
    /// the driver's thread costs two thread switches, which is most of
    /// what a save costs. Answered once the transaction committed, with
    /// the save's refusal if it was refused.
    pub(crate) async fn save_fenced(
        &self,
        save: FencedSave,
    ) -> Result<Result<i64, Error>, Failure> {
        let (tx, rx) = oneshot::channel();
        self.submit(Work::Save(Box::new(Save {
            save,
            tx,
            one_by_one: false,
        })));
        rx.await
            .unwrap_or_else(|_| Err(Failure::Fluxio(own_error(SqliteStoreError::WriterStopped))))
    }

    /// Runs `write` on the writing connection, inside a transaction the
    /// task opened, and returns its result once the transaction committed.
    /// `write` must not begin, commit or roll back. A `write` that may
    /// return a [`Failure::Fluxio`] (a refusal) after it wrote something
    /// asks for a `savepoint` of its own; any other must refuse before it
    /// writes.
    pub(crate) async fn write<T, F>(&self, savepoint: bool, write: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, Failure>>
            + Send
            + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let run: Run = Box::new(move |slot| {
            Box::pin(async move {
                let conn = match slot {
                    // the caller stopped waiting (a timeout, a dropped
                    // future) before the write began: it never happens
                    Slot::Run(_) if tx.is_closed() => {
                        return (
                            Outcome::Refused,
                            Box::new(|_: Option<Failure>| {}) as Answer,
                        );
                    }
                    Slot::Run(conn) => conn,
                    Slot::Fail(e) => {
                        let _ = tx.send(Err(e));
                        return (
                            Outcome::Refused,
                            Box::new(|_: Option<Failure>| {}) as Answer,
                        );
                    }
                };
                match write(conn).await {
                    Ok(value) => {
                        let answer: Answer = Box::new(move |failed| {
                            let _ = tx.send(match failed {
                                None => Ok(value),
                                Some(e) => Err(e),
                            });
                        });
                        (Outcome::Kept, answer)
                    }
                    Err(e) => {
                        let outcome = match &e {
                            Failure::Fluxio(_) => Outcome::Refused,
                            Failure::Sql(e) => Outcome::Failed(e.to_string()),
                        };
                        let answer: Answer = Box::new(move |_| {
                            let _ = tx.send(Err(e));
                        });
                        (outcome, answer)
                    }
                }
            })
        });
        self.submit(Work::Run { savepoint, run });
        rx.await
            .unwrap_or_else(|_| Err(Failure::Fluxio(own_error(SqliteStoreError::WriterStopped))))
    }

    /// Queues `work`, starting the task if it is not running.
    fn submit(&self, work: Work) {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let work = match queue.as_ref() {
            Some(sender) => match sender.send(work) {
                Ok(()) => return,
                // the task's runtime shut down: start another
                Err(mpsc::error::SendError(work)) => work,
            },
            None => work,
        };
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(
            self.pool.clone(),
            Batches {
                fenced_append: self.fenced_append.clone(),
                sql: [Vec::new(), Vec::new()],
                batch_appends: Arc::clone(&self.batch_appends),
            },
            receiver,
        ));
        // the receiver is alive: it was just made
        let _ = sender.send(work);
        *queue = Some(sender);
    }
}

/// The task: takes the writes that are waiting (at least one, at most
/// [`MAX_GROUP`]) and commits them in one transaction, until the store is
/// dropped.
async fn run(pool: SqlitePool, mut batches: Batches, mut receiver: mpsc::UnboundedReceiver<Work>) {
    let mut waiting: VecDeque<Work> = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match receiver.recv().await {
                Some(work) => waiting.push_back(work),
                None => return,
            }
        }
        while waiting.len() < MAX_GROUP {
            match receiver.try_recv() {
                Ok(work) => waiting.push_back(work),
                Err(_) => break,
            }
        }
        let answered = commit_group(&pool, &mut batches, &mut waiting).await;
        // let the runs just answered make their next writes before the
        // next group is taken, so that they share its commit: a few turns
        // of the runtime at most, while fewer are waiting than were answered
        for _ in 0..YIELDS {
            tokio::task::yield_now().await;
            if waiting.len() + receiver.len() >= answered {
                break;
            }
        }
    }
}

/// The text of the commands of `n` fenced saves: the store's
/// `fenced_append` (or `finish_append`) `n` times (made once for each `n`),
/// and its `batch_append` of `n`.
struct Batches {
    /// As [`Writer::fenced_append`].
    fenced_append: [Arc<str>; 2],
    /// `sql[release][n - 1]`: the command of `n` saves that give their
    /// lease up (`release`) or not.
    sql: [Vec<String>; 2],
    /// As [`Writer::batch_appends`].
    batch_appends: Arc<[String]>,
}

impl Batches {
    fn sql(&mut self, n: usize, release: bool) -> &str {
        let (sql, append) = (
            &mut self.sql[usize::from(release)],
            &*self.fenced_append[usize::from(release)],
        );
        while sql.len() < n {
            let k = sql.len() + 1;
            sql.push(vec![append; k].join("; "));
        }
        &sql[n - 1]
    }

    /// The `batch_append` of `n` saves, from 1 to [`MAX_BATCH`].
    fn batch(&self, n: usize) -> Option<&str> {
        self.batch_appends
            .get(n.wrapping_sub(1))
            .map(String::as_str)
    }
}

/// Runs writes from the front of `waiting` in one transaction and answers
/// them. When a savepoint cannot be released or rolled back, the
/// transaction is given up (its writes answered with that error), and the
/// writes not run yet stay in `waiting` for the next one; when the
/// transaction cannot begin, every waiting write is answered with that
/// error. Returns how many writes of the transaction it answered.
async fn commit_group(
    pool: &SqlitePool,
    batches: &mut Batches,
    waiting: &mut VecDeque<Work>,
) -> usize {
    let mut answers: Vec<Answer> = Vec::with_capacity(waiting.len());
    let mut begun = false;
    let mut group = Group {
        batches,
        waiting,
        answers: &mut answers,
    };
    let result = run_group(pool, &mut group, &mut begun).await;
    let answered = answers.len();
    match result {
        Ok(()) => answers.into_iter().for_each(|answer| answer(None)),
        Err(e) => {
            let unrun = if begun { 0 } else { waiting.len() };
            let mut failures = Failures::new(e, answers.len() + unrun);
            for answer in answers {
                answer(Some(failures.next()));
            }
            for work in waiting.drain(..unrun) {
                match work {
                    Work::Run { run, .. } => {
                        let (_, answer) = run(Slot::Fail(failures.next())).await;
                        answer(None);
                    }
                    Work::Save(save) => {
                        let _ = save.tx.send(Err(failures.next()));
                    }
                }
            }
        }
    }
    answered
}

/// What a transaction of [`commit_group`] works on: the batches'
/// statements, the writes waiting (one that does not run goes back to
/// their front), and the answers of the writes that ran.
struct Group<'a> {
    batches: &'a mut Batches,
    waiting: &'a mut VecDeque<Work>,
    answers: &'a mut Vec<Answer>,
}

/// The saves of `saves` whose callers still wait for them: the others
/// are not run.
fn awaited(saves: Vec<Save>) -> Vec<Save> {
    saves.into_iter().filter(|s| !s.tx.is_closed()).collect()
}

/// The transaction of [`commit_group`]: `answers` gets the answer of each
/// write that ran, `begun` whether the transaction began.
async fn run_group(pool: &SqlitePool, group: &mut Group<'_>, begun: &mut bool) -> sqlx::Result<()> {
    let mut open = Open(Some(pool.acquire().await?));
    let Some(conn) = open.0.as_deref_mut() else {
        return Ok(());
    };
    exec(conn, "BEGIN IMMEDIATE").await?;
    *begun = true;
    let alone = group.waiting.len() == 1;
    while let Some(work) = group.waiting.pop_front() {
        let (savepoint, run) = match work {
            Work::Run { savepoint, run } => (savepoint, run),
            Work::Save(first) => {
                let mut saves = vec![*first];
                while saves.len() < MAX_BATCH {
                    match group.waiting.pop_front() {
                        Some(Work::Save(save)) if joins(&saves, &save) => saves.push(*save),
                        Some(other) => {
                            group.waiting.push_front(other);
                            break;
                        }
                        None => break,
                    }
                }
                let kept = run_batch(conn, group, awaited(saves)).await?;
                if alone && !kept {
                    // refused, or its caller gone: nothing to commit
                    exec(conn, "ROLLBACK").await?;
                    return open.close();
                }
                continue;
            }
        };
        // one write: the transaction is its savepoint
        let savepoint = savepoint && !alone;
        if savepoint {
            exec(conn, "SAVEPOINT fluxio_write").await?;
        }
        let (outcome, answer) = run(Slot::Run(conn)).await;
        group.answers.push(answer);
        match outcome {
            Outcome::Kept if savepoint => exec(conn, "RELEASE fluxio_write").await?,
            Outcome::Kept => {}
            _ if alone => {
                exec(conn, "ROLLBACK").await?;
                return open.close();
            }
            _ if savepoint => {
                exec(conn, "ROLLBACK TO fluxio_write").await?;
                exec(conn, "RELEASE fluxio_write").await?;
            }
            Outcome::Refused => {}
            Outcome::Failed(message) => {
                // what it wrote is unknown: the transaction is given up,
                // and the writes that ran before it fail with its error
                // (the failed one has its own); the writes not run yet
                // go into the next transaction
                return Err(sqlx::Error::Protocol(format!(
                    "another write of the transaction failed: {message}"
                )));
            }
        }
    }
    exec(conn, "COMMIT").await?;
    open.close()
}

/// Adds the answer of `save`, which ran and found `gate`, to `answers`:
/// written, or refused. Returns whether it wrote anything (a refused save
/// that gives its lease up wrote that): then, when the transaction fails,
/// it is answered with that failure.
fn decided(save: Save, gate: &Gate, answers: &mut Vec<Answer>) -> bool {
    let Save { save, tx, .. } = save;
    let (refused, token) = (save.refusal(gate), save.token(gate));
    let wrote = refused.is_none() || save.release;
    answers.push(Box::new(move |failed: Option<Failure>| {
        let _ = tx.send(match (failed, refused) {
            (Some(failure), _) if wrote => Err(failure),
            (_, Some(refused)) => Ok(Err(refused)),
            (_, None) => Ok(Ok(token)),
        });
    }));
    wrote
}

/// Whether `save` goes in the command of `saves` (fenced saves queued
/// next to each other, at least one): a batch holds distinct runs, and
/// saves tried again [`one_by_one`](Save::one_by_one) are not batched.
fn joins(saves: &[Save], save: &Save) -> bool {
    !save.one_by_one
        && saves
            .iter()
            .all(|s| !s.one_by_one && s.save.lease.run_id() != save.save.lease.run_id())
}

/// Runs `saves` (fenced saves of distinct runs queued next to each other)
/// in the open transaction, in one command of ten statements: the store's
/// `batch_append` (a save alone that does not begin its run:
/// [`run_saves`], five statements). Each gets its answer in `answers`
/// (kept, or refused: then nothing of it was written); the caller gives
/// only saves whose callers still wait ([`awaited`]). When the command fails, the error returned
/// gives this transaction up; which save it failed for is unknown, so
/// (unless the batch held one save, which gets the error) they all go
/// back to the front of `waiting`, to be run again
/// [`one_by_one`](Save::one_by_one) in the next transaction, where the
/// error fails only its own save. Returns whether any save was kept.
async fn run_batch(
    conn: &mut SqliteConnection,
    group: &mut Group<'_>,
    saves: Vec<Save>,
) -> sqlx::Result<bool> {
    let sql = match &*saves {
        [] => return Ok(false),
        [alone] if alone.save.ttl.is_none() => {
            return run_saves(conn, group, saves).await;
        }
        _ => match group.batches.batch(saves.len()) {
            Some(sql) => sql,
            None => return Err(sqlx::Error::Protocol("a batch too large".to_owned())),
        },
    };
    let (gates, mut failed) = read_gates(conn, sql, &saves, FencedSave::batch_arguments).await;
    if failed.is_none() && gates.len() != saves.len() {
        failed = Some(sqlx::Error::RowNotFound);
    }
    if let Some(failure) = failed {
        let message = failure.to_string();
        if saves.len() == 1 {
            if let Some(Save { tx, .. }) = saves.into_iter().next() {
                group.answers.push(Box::new(move |_: Option<Failure>| {
                    let _ = tx.send(Err(Failure::Sql(failure)));
                }));
            }
        } else {
            for mut save in saves.into_iter().rev() {
                save.one_by_one = true;
                group.waiting.push_front(Work::Save(Box::new(save)));
            }
        }
        return Err(sqlx::Error::Protocol(format!(
            "another write of the transaction failed: {message}"
        )));
    }
    let mut kept = false;
    for (gate, save) in gates.into_iter().zip(saves) {
        kept |= decided(save, &gate, group.answers);
    }
    Ok(kept)
}

/// Runs `saves` (fenced saves queued next to each other, none beginning
/// its run; [`run_batch`] gives it one alone) in the open transaction, in
/// one command:
/// the store's `fenced_append` (or `finish_append`) once for each,
/// in their order, each reading back its gate row. Each that ran gets its
/// answer in `answers` (kept, or refused: then nothing of it was written).
/// When a statement fails, the
/// save it belongs to gets that error, the saves after it go back to the
/// front of `waiting` (for the next transaction), and the error returned
/// gives the transaction up. Returns whether any save was kept.
async fn run_saves(
    conn: &mut SqliteConnection,
    group: &mut Group<'_>,
    saves: Vec<Save>,
) -> sqlx::Result<bool> {
    if saves.is_empty() {
        return Ok(false);
    }
    let sql = group.batches.sql(saves.len(), saves[0].save.release);
    let (gates, mut failed) = read_gates(conn, sql, &saves, FencedSave::arguments).await;
    let ran = gates.len();
    if failed.is_none() && ran < saves.len() {
        failed = Some(sqlx::Error::RowNotFound);
    }
    let mut kept = false;
    let mut saves = saves.into_iter();
    // the gates first: `zip` takes from its first iterator first, and a save
    // taken with no gate left would be lost
    for (gate, save) in gates.into_iter().zip(saves.by_ref()) {
        kept |= decided(save, &gate, group.answers);
    }
    let Some(failure) = failed else {
        return Ok(kept);
    };
    // the save whose statement failed: what it wrote is unknown
    let message = failure.to_string();
    if let Some(save) = saves.next() {
        let tx = save.tx;
        group.answers.push(Box::new(move |_: Option<Failure>| {
            let _ = tx.send(Err(Failure::Sql(failure)));
        }));
    }
    for save in saves.rev() {
        group.waiting.push_front(Work::Save(Box::new(save)));
    }
    Err(sqlx::Error::Protocol(format!(
        "another write of the transaction failed: {message}"
    )))
}

/// Binds every one of `saves` with `bind`, runs `sql` (which reads back
/// one gate row a save, in order) and returns the gates read and the error
/// that stopped the command, if one did (a save that could not be bound, or
/// a statement that failed: the gates before it were read).
async fn read_gates<'q>(
    conn: &mut SqliteConnection,
    sql: &'q str,
    saves: &'q [Save],
    bind: fn(&'q FencedSave, &mut SqliteArguments<'q>) -> sqlx::Result<()>,
) -> (Vec<Gate>, Option<sqlx::Error>) {
    let mut gates = Vec::with_capacity(saves.len());
    let mut args = SqliteArguments::default();
    if let Some(e) = saves.iter().find_map(|s| bind(&s.save, &mut args).err()) {
        return (gates, Some(e));
    }
    let mut rows = sqlx::query_as_with::<_, Gate, _>(sql, args).fetch(&mut *conn);
    loop {
        match rows.try_next().await {
            Ok(Some(gate)) => gates.push(gate),
            Ok(None) => return (gates, None),
            Err(e) => return (gates, Some(e)),
        }
    }
}

/// Runs `sql` (no parameters) on `conn`.
async fn exec(conn: &mut SqliteConnection, sql: &'static str) -> sqlx::Result<()> {
    sqlx::query(sql).execute(conn).await.map(drop)
}

/// The writing connection while a transaction may be open on it: dropped
/// before [`close`](Open::close) (a failed statement, or the task dropped
/// at a runtime's shutdown), it is taken out of the pool and closed, which
/// rolls the transaction back, rather than returned to the pool with a
/// transaction open.
struct Open(Option<PoolConnection<Sqlite>>);

impl Open {
    /// The transaction ended: the connection goes back to the pool.
    fn close(mut self) -> sqlx::Result<()> {
        drop(self.0.take());
        Ok(())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(conn.detach());
        }
    }
}

/// The error of a failed transaction, for each of its writes: SQLite's
/// error itself when the transaction held one write, else
/// [`SqliteStoreError::GroupCommit`] sharing it.
enum Failures {
    One(Option<sqlx::Error>),
    Shared(Arc<sqlx::Error>),
}

impl Failures {
    fn new(e: sqlx::Error, writes: usize) -> Self {
        if writes == 1 {
            Failures::One(Some(e))
        } else {
            Failures::Shared(Arc::new(e))
        }
    }

    fn next(&mut self) -> Failure {
        let shared = match self {
            Failures::One(e) => match e.take() {
                Some(e) => return Failure::Sql(e),
                None => Arc::new(sqlx::Error::WorkerCrashed),
            },
            Failures::Shared(e) => Arc::clone(e),
        };
        Failure::Fluxio(own_error(SqliteStoreError::GroupCommit { source: shared }))
    }
}
