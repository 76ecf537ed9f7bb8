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

use crate::connection::Failure;
use crate::error::{SqliteStoreError, own_error};
use crate::migrate::MigrateError;

/// The most writes one transaction holds.
const MAX_GROUP: usize = 256;

/// A boxed future borrowing the writing connection.
pub(crate) type BoxFuture<'c, T> = Pin<Box<dyn Future<Output = T> + Send + 'c>>;

/// What a write tells the task: whether it is kept (released savepoint) or
/// undone (rolled back to its savepoint), and how to answer its caller once
/// the transaction ended (with the transaction's error, if it failed).
type Ran = (Outcome, Answer);
type Answer = Box<dyn FnOnce(Option<Failure>) + Send>;
type Run = Box<dyn for<'c> FnOnce(Slot<'c>) -> BoxFuture<'c, Ran> + Send>;

/// A queued write.
struct Work {
    /// Whether it runs in a savepoint of its own: a write that may be
    /// refused after it wrote something. Any other write is refused (a
    /// [`Failure::Fluxio`]) before it writes anything, so nothing of it is
    /// to undo; when it fails otherwise (a driver error) after others ran,
    /// the transaction is given up (see [`commit_group`]).
    savepoint: bool,
    run: Run,
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
    queue: Mutex<Option<mpsc::UnboundedSender<Work>>>,
}

impl Writer {
    /// Writes through the connections of `pool` (the store's writing pool,
    /// of one connection), one transaction at a time.
    pub(crate) fn new(pool: SqlitePool) -> Self {
        Writer {
            pool,
            queue: Mutex::new(None),
        }
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
                            Failure::Fluxio(_) | Failure::Migrate(MigrateError::Store(_)) => {
                                Outcome::Refused
                            }
                            Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => {
                                Outcome::Failed(e.to_string())
                            }
                        };
                        let answer: Answer = Box::new(move |_| {
                            let _ = tx.send(Err(e));
                        });
                        (outcome, answer)
                    }
                }
            })
        });
        self.submit(Work { savepoint, run });
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
        tokio::spawn(run(self.pool.clone(), receiver));
        // the receiver is alive: it was just made
        let _ = sender.send(work);
        *queue = Some(sender);
    }
}

/// The task: takes the writes that are waiting (at least one, at most
/// [`MAX_GROUP`]) and commits them in one transaction, until the store is
/// dropped.
async fn run(pool: SqlitePool, mut receiver: mpsc::UnboundedReceiver<Work>) {
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
        commit_group(&pool, &mut waiting).await;
    }
}

/// Runs writes from the front of `waiting` in one transaction and answers
/// them. When a savepoint cannot be released or rolled back, the
/// transaction is given up (its writes answered with that error), and the
/// writes not run yet stay in `waiting` for the next one; when the
/// transaction cannot begin, every waiting write is answered with that
/// error.
async fn commit_group(pool: &SqlitePool, waiting: &mut VecDeque<Work>) {
    let mut answers: Vec<Answer> = Vec::with_capacity(waiting.len());
    let mut begun = false;
    let result = run_group(pool, waiting, &mut answers, &mut begun).await;
    match result {
        Ok(()) => answers.into_iter().for_each(|answer| answer(None)),
        Err(e) => {
            let unrun = if begun { 0 } else { waiting.len() };
            let mut failures = Failures::new(e, answers.len() + unrun);
            for answer in answers {
                answer(Some(failures.next()));
            }
            for work in waiting.drain(..unrun) {
                let (_, answer) = (work.run)(Slot::Fail(failures.next())).await;
                answer(None);
            }
        }
    }
}

/// The transaction of [`commit_group`]: `answers` gets the answer of each
/// write that ran, `begun` whether the transaction began.
async fn run_group(
    pool: &SqlitePool,
    waiting: &mut VecDeque<Work>,
    answers: &mut Vec<Answer>,
    begun: &mut bool,
) -> sqlx::Result<()> {
    let mut open = Open(Some(pool.acquire().await?));
    let Some(conn) = open.0.as_deref_mut() else {
        return Ok(());
    };
    exec(conn, "BEGIN IMMEDIATE").await?;
    *begun = true;
    let alone = waiting.len() == 1;
    while let Some(work) = waiting.pop_front() {
        // one write: the transaction is its savepoint
        let savepoint = work.savepoint && !alone;
        if savepoint {
            exec(conn, "SAVEPOINT fluxio_write").await?;
        }
        let (outcome, answer) = (work.run)(Slot::Run(conn)).await;
        answers.push(answer);
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
