//! [`SqliteStore`]: its file, retention, and the trait implementation,
//! one statement or one transaction per method.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fluxio_core::store::{
    Begin, Begun, Checkpoint, CheckpointStore, Claimed, Decision, Delivery, DueFilter, DueRun,
    Lease, RunCount, RunEvent, RunEventKind, RunEvents, RunFilter, RunPage, RunStatus, Signal,
    Take, check_lease_ttl,
};
use fluxio_core::{Error, Result};
use fluxio_sql::{lease_lost, token_of};
use sqlx::sqlite::{SqliteConnection, SqlitePool};

use crate::builder::SqliteStoreBuilder;
use crate::connection::{Failure, timed};
use crate::error::BACKEND;
use crate::journal::{self, FencedSave, Journal, Retention, Sqlite, Step};
use crate::statements::{Names, Sql};
use crate::writer::{BoxFuture, Writer};

/// Durations in SQL are capped here (about 100 years, in milliseconds), so
/// that `now + duration` stays an INTEGER.
const MAX_MILLIS: i64 = 100 * 366 * 24 * 60 * 60 * 1000;

/// A [`CheckpointStore`] in an SQLite file, on sqlx's SQLite driver.
///
/// Cloning is cheap (one `Arc`) and the clones share the connections. See
/// the [crate documentation](crate) for the schema, the lease protocol, the
/// clock, retention and the guarantees.
#[derive(Clone)]
pub struct SqliteStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// One connection: every write of this store goes through it (in
    /// `writes`' transactions), so the store's own writes never contend
    /// for SQLite's write lock.
    pub(crate) writer: SqlitePool,
    /// The other connections, `query_only`; the writer itself when
    /// `max_connections` is 1.
    pub(crate) reader: SqlitePool,
    pub(crate) names: Names,
    pub(crate) sql: Sql,
    /// The store's timeout (of its settings), read on every call.
    pub(crate) timeout: Duration,
    /// The builder that opened the store: its path and settings.
    pub(crate) config: SqliteStoreBuilder,
    /// Commits of the writing connection since the store opened.
    pub(crate) commits: Arc<AtomicU64>,
    /// The queue of the store's writes, committed in groups.
    pub(crate) writes: Writer,
    /// The store's wake-ups, made when first watched (`waits.rs`).
    pub(crate) events: std::sync::OnceLock<tokio::sync::broadcast::Sender<RunEvent>>,
}

impl Inner {
    /// What the store keeps of its completed runs.
    pub(crate) fn retention(&self) -> Retention {
        self.config.settings.retention
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("SqliteStore")
            .field("config", &inner.config)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the store in the SQLite file at `path` with the default
    /// settings, creating the file and the tables if needed. Named
    /// `connect`, like the Redis and Postgres stores' constructors.
    ///
    /// # Errors
    /// [`Error::Store`] when the path is invalid, the file cannot be opened
    /// or created (a missing directory, no permission:
    /// [`SqliteStoreError::Open`](crate::SqliteStoreError::Open)) or written
    /// ([`SqliteStoreError::NotWritable`](crate::SqliteStoreError::NotWritable)),
    /// or preparing it fails within the
    /// [timeout](SqliteStoreBuilder::timeout). The errors name the file.
    pub async fn connect(path: impl AsRef<Path>) -> Result<SqliteStore> {
        Self::builder(path.as_ref()).connect().await
    }

    /// A builder for the store in the SQLite file at `path`.
    pub fn builder(path: impl Into<PathBuf>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(path.into())
    }

    /// The path of the database file (as given).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.inner.config.path
    }

    /// The checkpoint table (the lease table is `<table>_leases`).
    #[must_use]
    pub fn table(&self) -> &str {
        &self.inner.names.table
    }

    /// The pool of the store's writing connection (a pool of one). Run your
    /// own writes to the same file through it and they queue with the
    /// store's, rather than contending for SQLite's write lock; reads can use
    /// it too, or connections of your own.
    #[must_use]
    pub fn pool(&self) -> &SqlitePool {
        &self.inner.writer
    }

    /// Deletes the checkpoints of completed runs whose retention has passed
    /// (see [`completed_retention`](SqliteStoreBuilder::completed_retention))
    /// and returns how many it deleted. It also deletes lease rows that are
    /// released or expired (not counted), except the one holding the greatest
    /// token, so a run id acquired again still gets a greater token.
    ///
    /// Expired checkpoints are already invisible to `load` and `exists`;
    /// purging only reclaims the space (SQLite reuses the freed pages; the
    /// file does not shrink). One transaction, which holds the write lock
    /// while it deletes: call it periodically (say hourly) from one process;
    /// concurrent calls are harmless.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn purge_expired(&self) -> Result<u64> {
        self.write("purge_expired", false, |conn, inner| {
            Box::pin(async move {
                sqlx::query(&inner.sql.purge_leases)
                    .execute(&mut *conn)
                    .await?;
                let done = sqlx::query(&inner.sql.purge_checkpoints)
                    .execute(conn)
                    .await?;
                Ok(done.rows_affected())
            })
        })
        .await
    }

    /// Runs `write` as one write of the store's group commit (see
    /// [`Writer`]), within the store's timeout.
    ///
    /// `savepoint`: whether the write may be refused after it wrote
    /// something (see [`Writer::write`]).
    pub(crate) async fn write<T, F>(
        &self,
        operation: &'static str,
        savepoint: bool,
        write: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(
                &'c mut SqliteConnection,
                &'c Inner,
            ) -> BoxFuture<'c, std::result::Result<T, Failure>>
            + Send
            + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let queued = self.inner.writes.write(savepoint, move |conn| {
            Box::pin(async move { write(conn, &inner).await })
        });
        timed(self.inner.timeout, operation, queued).await
    }

    /// [`save_fenced`](CheckpointStore::save_fenced)'s write (see there).
    async fn fenced_write(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let key = checkpoint.key();
        let token = token_of(lease, &key)?;
        let step = Step::of(&checkpoint)?;
        let lease = Lease::new(key, lease.token());
        let retention = self.inner.retention();
        if !plain(&checkpoint, false) {
            return self
                .write("save_fenced", false, move |conn, inner| {
                    Box::pin(async move {
                        let (key, sql) = (lease.run_id(), &inner.sql);
                        let at = (key, token);
                        let lost = || lease_lost(&lease);
                        let journal = &sql.journal;
                        Journal::fenced(
                            conn,
                            journal,
                            &sql.run,
                            at,
                            &checkpoint,
                            &step,
                            retention,
                            lost,
                        )
                        .await
                    })
                })
                .await;
        }
        if !trims(&checkpoint, retention) {
            let save = FencedSave {
                lease,
                token,
                checkpoint,
                step,
                retention,
                release: false,
                ttl: None,
            };
            let saved = self.inner.writes.save_fenced(save);
            return timed(self.inner.timeout, "save_fenced", saved)
                .await?
                .map(drop);
        }
        self.write("save_fenced", false, move |conn, inner| {
            Box::pin(async move {
                let gate = journal::fenced_append(
                    conn,
                    &inner.sql.fenced_append,
                    lease.run_id(),
                    token,
                    &checkpoint,
                    &step,
                    retention,
                    false,
                )
                .await?;
                if let Some(refused) = gate.refusal(&checkpoint, &lease) {
                    return Err(Failure::Fluxio(refused));
                }
                Journal::trim(
                    conn,
                    &inner.sql.journal,
                    lease.run_id(),
                    &checkpoint,
                    retention,
                )
                .await
            })
        })
        .await
    }

    /// How many transactions this store's writing connection committed
    /// since the store opened (its migrations and write check included),
    /// counted by SQLite's commit hook: what a test of how many commits a
    /// run makes reads. Not a stable API.
    #[doc(hidden)]
    #[must_use]
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// Runs `fut` within the store's timeout.
    pub(crate) async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = std::result::Result<T, Failure>>,
    ) -> Result<T> {
        timed(self.inner.timeout, operation, fut).await
    }

    /// The payloads `statement` reads of run `run_id` on a reading
    /// connection, in the call `operation`.
    async fn payloads(
        &self,
        operation: &'static str,
        statement: &str,
        run_id: &str,
    ) -> Result<Vec<Vec<u8>>> {
        fluxio_core::store::check_run_id(run_id)?;
        self.timed(operation, async {
            let parts = sqlx::query_scalar(statement)
                .bind(run_id)
                .fetch_all(&self.inner.reader)
                .await?;
            Ok::<_, Failure>(parts)
        })
        .await
    }
}

/// [`SqliteStore::begin_run`]'s write of a whole `first` checkpoint
/// (encoded as `step`): [`Journal::begin`]'s, in three commands to the
/// driver's thread at most. Refused (`RunIdInUse`) only before it wrote.
async fn begin_whole(
    conn: &mut SqliteConnection,
    inner: &Inner,
    first: &Checkpoint,
    step: &Step,
    ttl: Duration,
    replace: bool,
) -> std::result::Result<Begun, Failure> {
    let key = first.key();
    // `fetch_all` steps the statement to its end (the driver may otherwise
    // reset it after the first row).
    let tokens: Vec<i64> = sqlx::query_scalar(&inner.sql.run.acquire)
        .bind(&key)
        .bind(millis(ttl))
        .fetch_all(&mut *conn)
        .await?;
    let token = match tokens.first().copied().map(u64::try_from) {
        Some(Ok(token)) => token,
        // written, so not a refusal: the transaction is given up
        Some(Err(e)) => return Err(Failure::Sql(sqlx::Error::Decode(Box::new(e)))),
        None => return Err(Failure::Fluxio(Error::RunIdInUse { run_id: key })),
    };
    let lease = Lease::new(&key, token);
    if !replace {
        let stored: bool = sqlx::query_scalar(&inner.sql.run.exists)
            .bind(&key)
            .fetch_one(&mut *conn)
            .await?;
        if stored {
            return Ok(Begun::new(lease, false));
        }
    }
    let (sql, retention) = (&inner.sql, inner.retention());
    let append = if replace {
        &sql.first_replace
    } else {
        &sql.first_append
    };
    journal::first_append(conn, append, &key, first, step, retention).await?;
    Journal::trim(conn, &sql.journal, &key, first, retention).await?;
    Ok(Begun::new(lease, true))
}

/// [`SqliteStore::finish_run`]'s write under `lease` (whose `token` the
/// caller took), as [`Journal::finish`] decides and writes it (the refusal
/// returned inside `Ok`, the lease given up either way), with the decision, the append and the release in one
/// command to the driver's thread ([`journal::fenced_append`]); the cut,
/// the trim and the delete of the run, when there are any, after.
async fn finish(
    conn: &mut SqliteConnection,
    inner: &Inner,
    (last, step): (&Checkpoint, &Step),
    (lease, token): (&Lease, i64),
    delete: bool,
) -> std::result::Result<Result<()>, Failure> {
    let key = last.key();
    let retention = inner.retention();
    let gate = journal::fenced_append(
        conn,
        &inner.sql.finish_append,
        &key,
        token,
        last,
        step,
        retention,
        true,
    )
    .await?;
    if let Some(refused) = gate.refusal(last, lease) {
        return Ok(Err(refused));
    }
    Journal::trim(conn, &inner.sql.journal, &key, last, retention).await?;
    if delete {
        sqlx::query(&inner.sql.run.delete)
            .bind(&key)
            .execute(&mut *conn)
            .await?;
    }
    Ok(Ok(()))
}

/// Whether `checkpoint` may take the store's one-command writes
/// (`journal::fenced_append`, a batch): a run that goes on (a sleeping or
/// waiting run's due time reads its mailbox, which `fluxio-sql`'s
/// [`Journal`] does), not a run's first checkpoint (which empties the
/// mailbox of the key), unless `first` (a beginning, which does).
fn plain(checkpoint: &Checkpoint, first: bool) -> bool {
    !checkpoint.status.is_pending() && (first || checkpoint.seq > 0)
}

/// Whether [`Journal::trim`] has anything to do after `checkpoint`: it
/// allows cutting the journal, or it completes a run of a store that keeps
/// only the newest completed runs.
fn trims(checkpoint: &Checkpoint, retention: Retention) -> bool {
    checkpoint.keep_from > 0
        || (retention.keep_completed.is_some() && checkpoint.status == RunStatus::Completed)
}

/// A duration in whole milliseconds, as the SQL adds it to SQLite's clock.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).map_or(MAX_MILLIS, |ms| ms.min(MAX_MILLIS))
}

#[async_trait::async_trait]
impl CheckpointStore for SqliteStore {
    /// One write of a group commit (see the crate docs): the run's steps
    /// replaced by the checkpoint's journal
    /// ([`earlier`](Checkpoint::earlier), then itself), and its row.
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        let key = checkpoint.checked_key()?;
        let steps = checkpoint
            .earlier
            .iter()
            .chain([&checkpoint])
            .map(Step::of)
            .collect::<Result<Vec<_>>>()?;
        let (told, status) = (key.clone(), checkpoint.status);
        self.write("save", false, move |conn, inner| {
            Box::pin(async move {
                Journal::replace(
                    conn,
                    &inner.sql.journal,
                    &key,
                    &checkpoint,
                    &steps,
                    inner.retention(),
                )
                .await
            })
        })
        .await?;
        self.tell_status(&told, status);
        Ok(())
    }

    /// One statement: the steps from the run's last whole checkpoint on
    /// (at most [`COMPACT_EVERY`](fluxio_core::store::COMPACT_EVERY) or
    /// so), folded by [`Checkpoint::from_entries`]. Expired runs (completed
    /// runs past their retention) read as absent.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let parts = self.payloads("load", &self.inner.sql.load, run_id).await?;
        journal::latest(run_id, parts)
    }

    /// One statement: every stored step of the run, oldest first.
    async fn history(&self, run_id: &str) -> Result<Vec<Checkpoint>> {
        let parts = self
            .payloads("history", &self.inner.sql.history, run_id)
            .await?;
        Checkpoint::journal_from_entries(run_id, parts)
    }

    /// One statement on a reading connection (one snapshot of the run
    /// rows and the leases), built by `fluxio-sql` from the filter: no
    /// journal is read. Each filter is one range of an index in key order
    /// (schema version 4), so a page costs about the rows it shows, however
    /// many runs the file holds; a filter the indexes do not cover (a
    /// version or a time alone) reads the rows in key order until the page
    /// is full. Expired runs are not listed. See the crate docs, "Listing".
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        let inner = &self.inner;
        self.timed("list_runs", async {
            let mut conn = inner.reader.acquire().await?;
            fluxio_sql::list::<Sqlite, _>(&mut conn, &inner.sql.list, filter).await
        })
        .await
    }

    /// One `GROUP BY` statement on a reading connection, over the run rows
    /// and the leases: the runs a listing would return, counted.
    async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<RunCount>> {
        let inner = &self.inner;
        self.timed("count_runs", async {
            let mut conn = inner.reader.acquire().await?;
            fluxio_sql::count::<Sqlite, _>(&mut conn, &inner.sql.list, filter).await
        })
        .await
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        fluxio_core::store::check_run_id(run_id)?;
        let key = run_id.to_owned();
        self.write("delete", false, move |conn, inner| {
            Box::pin(async move {
                sqlx::query(&inner.sql.run.delete)
                    .bind(&key)
                    .execute(conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    /// Expired rows read as absent.
    async fn exists(&self, run_id: &str) -> Result<bool> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.timed("exists", async {
            let exists: bool = sqlx::query_scalar(&inner.sql.run.exists)
                .bind(run_id)
                .fetch_one(&inner.reader)
                .await?;
            Ok::<_, Failure>(exists)
        })
        .await
    }

    /// One conditional upsert of the lease row (SQLite's clock), one write
    /// of a group commit.
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        fluxio_core::store::check_run_id(run_id)?;
        check_lease_ttl(ttl)?;
        let key = run_id.to_owned();
        self.write("acquire_lease", false, move |conn, inner| {
            Box::pin(async move {
                let tokens: Vec<i64> = sqlx::query_scalar(&inner.sql.run.acquire)
                    .bind(&key)
                    .bind(millis(ttl))
                    .fetch_all(conn)
                    .await?;
                match tokens.first().copied().map(u64::try_from) {
                    Some(Ok(token)) => Ok(Lease::new(key, token)),
                    Some(Err(e)) => Err(Failure::Fluxio(Error::store(BACKEND, e))),
                    None => Err(Failure::Fluxio(Error::RunIdInUse { run_id: key })),
                }
            })
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        check_lease_ttl(ttl)?;
        let Ok(token) = i64::try_from(lease.token()) else {
            return Err(lease_lost(lease));
        };
        let lost = lease_lost(lease);
        let key = lease.run_id().to_owned();
        self.write("renew_lease", false, move |conn, inner| {
            Box::pin(async move {
                let done = sqlx::query(&inner.sql.renew)
                    .bind(&key)
                    .bind(token)
                    .bind(millis(ttl))
                    .execute(conn)
                    .await?;
                if done.rows_affected() == 1 {
                    Ok(())
                } else {
                    Err(Failure::Fluxio(lost))
                }
            })
        })
        .await
    }

    async fn release_lease(&self, lease: Lease) -> Result<()> {
        let Ok(token) = i64::try_from(lease.token()) else {
            return Ok(());
        };
        let key = lease.run_id().to_owned();
        self.write("release_lease", false, move |conn, inner| {
            Box::pin(async move {
                sqlx::query(&inner.sql.run.release)
                    .bind(&key)
                    .bind(token)
                    .execute(conn)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    /// One write of a group commit, under the file's write lock: the run's
    /// row is read (a cancelled run is refused with `Cancelled`), the lease
    /// row checked (`LeaseLost`), and the checkpoint appended to the
    /// journal: only its [`entry_bytes`](Checkpoint::entry_bytes), the keys
    /// that changed. The decision and the append are one command to the
    /// driver's thread (see `journal::fenced_append`): each hand-over to
    /// that thread costs two thread switches, more than the statements.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let (key, status) = (checkpoint.key(), checkpoint.status);
        self.fenced_write(checkpoint, lease).await?;
        self.tell_status(&key, status);
        Ok(())
    }

    /// One write of a group commit, so in one commit: the lease taken as
    /// [`acquire_lease`](Self::acquire_lease) takes it, the stored run
    /// deleted ([`Begin::Replace`]) or looked for ([`Begin::IfAbsent`]:
    /// when there is one, only the lease is written), and `first` appended
    /// as [`save_fenced`](Self::save_fenced) appends it. On an error
    /// nothing is written: no lease is taken.
    ///
    /// A run's first checkpoint is whole: then the lease is one command to
    /// the driver's thread, the look for a stored run another
    /// ([`Begin::IfAbsent`]), and the delete and the append one more
    /// (`journal::first_append`); nothing can refuse once the lease is
    /// taken, so no savepoint is needed. A delta (a predecessor to find)
    /// takes `fluxio-sql`'s way, in a savepoint of its own.
    async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        fluxio_core::store::check_run_id(&first.key())?;
        check_lease_ttl(ttl)?;
        let step = Step::of(&first)?;
        let replace = match begin {
            Begin::Replace => true,
            Begin::IfAbsent => false,
            _ => {
                return Err(Error::Unsupported {
                    operation: "this way of beginning a run",
                    store: BACKEND,
                });
            }
        };
        let retention = self.inner.retention();
        let plain = plain(&first, true);
        if replace && step.whole() && plain && !trims(&first, retention) {
            // nothing to look for and nothing after the append: it goes
            // with the fenced saves queued next to it, in one command
            let key = first.key();
            let save = FencedSave {
                lease: Lease::new(&key, 0),
                token: 0,
                checkpoint: first,
                step,
                retention,
                release: false,
                ttl: Some(millis(ttl)),
            };
            let saved = self.inner.writes.save_fenced(save);
            let token = timed(self.inner.timeout, "begin_run", saved).await??;
            let token = u64::try_from(token).map_err(|e| Error::store(BACKEND, e))?;
            return Ok(Begun::new(Lease::new(key, token), true));
        }
        if step.whole() && plain {
            return self
                .write("begin_run", false, move |conn, inner| {
                    Box::pin(
                        async move { begin_whole(conn, inner, &first, &step, ttl, replace).await },
                    )
                })
                .await;
        }
        self.write("begin_run", true, move |conn, inner| {
            Box::pin(async move {
                Journal::begin(
                    conn,
                    &inner.sql.journal,
                    &inner.sql.run,
                    &first,
                    &step,
                    ttl,
                    begin,
                    inner.retention(),
                )
                .await
            })
        })
        .await
    }

    /// One write of a group commit, so in one commit: the checks of
    /// [`save_fenced`](Self::save_fenced) (`Cancelled`, `LeaseLost`, a
    /// missing predecessor), then, unless one refuses, `last` appended and
    /// the run deleted when `delete`; and the lease released either way.
    /// Only when the write itself fails is the lease released apart.
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        let key = last.key();
        let (retention, status) = (self.inner.retention(), last.status);
        let written = match Step::of(&last) {
            Err(e) => Err(e),
            // a run that parks: `fluxio-sql`'s end of a run
            Ok(step) if !plain(&last, false) => {
                let held = Lease::new(lease.run_id(), lease.token());
                self.write("finish_run", false, move |conn, inner| {
                    Box::pin(async move {
                        let (sql, held) = (&inner.sql, &held);
                        let journal = &sql.journal;
                        Journal::finish(
                            conn, journal, &sql.run, &last, &step, held, delete, retention,
                        )
                        .await
                    })
                })
                .await
            }
            Ok(step) => {
                let token = token_of(&lease, &key)?;
                let held = Lease::new(lease.run_id(), lease.token());
                if !delete && !trims(&last, retention) {
                    // nothing after the append and the release: it goes
                    // with the fenced saves queued next to it, in one command
                    let save = FencedSave {
                        lease: held,
                        token,
                        checkpoint: last,
                        step,
                        retention,
                        release: true,
                        ttl: None,
                    };
                    let saved = self.inner.writes.save_fenced(save);
                    timed(self.inner.timeout, "finish_run", saved)
                        .await
                        .map(|decided| decided.map(drop))
                } else {
                    self.write("finish_run", false, move |conn, inner| {
                        Box::pin(async move {
                            finish(conn, inner, (&last, &step), (&held, token), delete).await
                        })
                    })
                    .await
                }
            }
        };
        match written {
            Ok(decided) => {
                if decided.is_ok() {
                    self.tell_status(&key, status);
                }
                decided
            }
            Err(e) => {
                if let Err(release) = self.release_lease(lease).await {
                    tracing::warn!(run_id = %key, error = %release, "could not release the run's lease; it will expire");
                }
                Err(e)
            }
        }
    }

    /// One write of a group commit, under the file's write lock: it loads
    /// the run, decides with
    /// [`marked_checkpoint`](fluxio_core::store::marked_checkpoint), and
    /// appends that checkpoint (the next one, an empty delta) with its
    /// status (`cancelled`, `paused`, or sleeping or waiting again) and due
    /// time on the run's row. No fenced save can land in between, and
    /// every fenced save after a cancel or a pause finds the row so.
    async fn mark(&self, run_id: &str, mark: fluxio_core::store::Mark) -> Result<()> {
        fluxio_core::store::check_run_id(run_id)?;
        let key = run_id.to_owned();
        let told = key.clone();
        self.write("mark", false, move |conn, inner| {
            Box::pin(async move {
                Journal::mark(conn, (&inner.sql.journal, &inner.sql.load), &key, mark).await
            })
        })
        .await?;
        match mark {
            fluxio_core::store::Mark::Cancel | fluxio_core::store::Mark::CancelWithParent => {
                self.tell(&told, RunEventKind::Ended)
            }
            fluxio_core::store::Mark::Unpause { .. } => self.tell(&told, RunEventKind::Due),
            _ => {}
        }
        Ok(())
    }

    /// One write of a group commit: `fluxio-sql`'s
    /// [`Journal::send_signal`] (see `waits.rs`).
    async fn send_signal(&self, run_id: &str, signal: Signal) -> Result<Delivery> {
        self.signal(run_id, signal).await
    }

    /// One write of a group commit: `fluxio-sql`'s
    /// [`Journal::take_signal`], fenced as a fenced save is.
    async fn take_signal(&self, run_id: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        self.take(run_id, take, lease).await
    }

    /// One statement on a reading connection.
    async fn signals(&self, run_id: &str) -> Result<Vec<Signal>> {
        self.mailbox(run_id).await
    }

    /// One statement on a reading connection: one range of the
    /// `(due_at, run_id)` index of schema version 5.
    async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        self.due(filter).await
    }

    /// One write of a group commit: the due rows read and each one's lease
    /// taken.
    async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        self.claim(filter, ttl).await
    }

    /// One write of a group commit, fenced as a fenced save is.
    async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        self.schedule(lease, due_ms).await
    }

    /// SQLite's clock (every process on the host reads the same one).
    async fn clock_ms(&self) -> Result<Option<u64>> {
        self.clock().await.map(Some)
    }

    /// This store's own writes, told in process; other processes' writes
    /// reach a worker through its poll.
    async fn watch(&self) -> Result<Option<RunEvents>> {
        Ok(Some(self.subscribe()))
    }

    /// One guarded delete, as [`save_fenced`](Self::save_fenced). When it
    /// deletes nothing, a read in the same transaction tells a lost lease
    /// from a missing checkpoint.
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> Result<()> {
        let token = token_of(lease, run_id)?;
        let lost = lease_lost(lease);
        let key = run_id.to_owned();
        self.write("delete_fenced", false, move |conn, inner| {
            Box::pin(async move {
                let done = sqlx::query(&inner.sql.delete_fenced)
                    .bind(&key)
                    .bind(token)
                    .execute(&mut *conn)
                    .await?;
                if done.rows_affected() > 0 {
                    return Ok(());
                }
                let held: bool = sqlx::query_scalar(&inner.sql.run.held)
                    .bind(&key)
                    .bind(token)
                    .fetch_one(conn)
                    .await?;
                if held {
                    Ok(())
                } else {
                    Err(Failure::Fluxio(lost))
                }
            })
        })
        .await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use fluxio_core::store::RunState;

    use super::*;

    /// The query plan of `statement` (its details, one line per step), as
    /// SQLite plans it on `store`'s file.
    pub(crate) async fn plan_of(
        store: &SqliteStore,
        statement: fluxio_sql::Statement<i64>,
    ) -> Vec<String> {
        let (text, arguments) = statement.into_parts::<sqlx::Sqlite>().expect("arguments");
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as_with(&format!("EXPLAIN QUERY PLAN {text}"), arguments)
                .fetch_all(store.pool())
                .await
                .expect("plan");
        plan.into_iter().map(|(.., detail)| detail).collect()
    }

    /// The query plan of the listing statement for `filter`, as SQLite
    /// plans it on a fresh file.
    async fn list_plan(store: &SqliteStore, filter: &RunFilter) -> Vec<String> {
        let statement =
            fluxio_sql::statement::<Sqlite>(&store.inner.sql.list, filter).expect("statement");
        plan_of(store, statement).await
    }

    /// Rule 21: a listing reads one range of an index in key order for
    /// each filter the indexes of schema version 4 cover (no sort, no scan
    /// of other runs), and finds the lease of each run by its key.
    #[tokio::test]
    async fn rule21_listing_reads_one_index_range_in_key_order() {
        let dir = fluxio_test_support::TempDir::new("list_plan");
        let store = SqliteStore::connect(dir.db("plan")).await.expect("open");
        let failed = RunFilter::new().state(RunState::Failed);
        let cases = [
            (
                failed.clone().pipeline("orders"),
                "SEARCH c USING INDEX fluxio_checkpoints_pipeline_state (pipeline=? AND status=?)",
            ),
            (
                failed.clone().pipeline("orders").after("orders/9"),
                "SEARCH c USING INDEX fluxio_checkpoints_pipeline_state \
                 (pipeline=? AND status=? AND run_id>?)",
            ),
            (
                failed.clone(),
                "SEARCH c USING INDEX fluxio_checkpoints_state (status=?)",
            ),
            (
                RunFilter::new()
                    .state(RunState::Abandoned)
                    .after("orders/9"),
                "SEARCH c USING INDEX fluxio_checkpoints_state (status=? AND run_id>?)",
            ),
            (
                RunFilter::new().pipeline("orders"),
                "SEARCH c USING INDEX sqlite_autoindex_fluxio_checkpoints_1 (run_id>? AND run_id<?)",
            ),
            (
                RunFilter::new(),
                "SCAN c USING INDEX sqlite_autoindex_fluxio_checkpoints_1",
            ),
        ];
        for (filter, read) in cases {
            let plan = list_plan(&store, &filter).await;
            assert_eq!(plan.len(), 2, "{filter:?}: {plan:?}");
            assert_eq!(plan[0], read, "{filter:?}: {plan:?}");
            assert_eq!(
                plan[1],
                "SEARCH l USING INDEX sqlite_autoindex_fluxio_checkpoints_leases_1 (run_id=?) LEFT-JOIN",
                "{filter:?}: {plan:?}"
            );
        }
    }

    /// Trimming a pipeline's completed runs reads ranges of the
    /// `(pipeline, status, updated_at)` index of schema version 3 (the
    /// newest `n`, in `updated_at` order), and of it or the `(pipeline,
    /// status, run_id)` index of version 4 (the rows to delete), never the
    /// whole table.
    #[tokio::test]
    async fn keeping_the_newest_completed_runs_searches_the_pipeline_index() {
        let dir = fluxio_test_support::TempDir::new("keep_plan");
        let store = SqliteStore::connect(dir.db("plan")).await.expect("open");
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(&format!(
            "EXPLAIN QUERY PLAN {}",
            store.inner.sql.journal.keep_completed
        ))
        .bind("orders")
        .bind(2_i64)
        .fetch_all(store.pool())
        .await
        .expect("plan");
        let reads: Vec<&str> = plan
            .iter()
            .map(|(.., detail)| detail.as_str())
            .filter(|detail| detail.contains("fluxio_checkpoints"))
            .collect();
        assert_eq!(reads.len(), 2, "{plan:?}");
        for read in &reads {
            assert!(
                read.starts_with("SEARCH fluxio_checkpoints USING ")
                    && (read
                        .contains("INDEX fluxio_checkpoints_pipeline (pipeline=? AND status=?")
                        || read.contains(
                            "INDEX fluxio_checkpoints_pipeline_state (pipeline=? AND status=?"
                        )),
                "{plan:?}"
            );
        }
        assert!(
            reads[1].contains("INDEX fluxio_checkpoints_pipeline (pipeline=? AND status=?"),
            "the newest are found in updated_at order: {plan:?}"
        );
    }

    /// The batch command itself (not the one-by-one retry a failed batch
    /// falls back to) decides and writes, for saves and beginnings mixed:
    /// the save under its current lease is written, the one under a stale
    /// lease refused, and the runs that begin draw the next tokens in the
    /// batch's order.
    #[tokio::test]
    async fn a_batch_of_saves_and_beginnings_is_one_command() {
        let dir = fluxio_test_support::TempDir::new("batch_command");
        let store = SqliteStore::connect(dir.db("batch")).await.expect("open");
        let retention = store.inner.retention();
        let run = fluxio_test_support::runs::ten_stage_run("orders", "a");
        let lease = store
            .begin_run(run[0].clone(), Duration::from_secs(60), Begin::Replace)
            .await
            .expect("begin")
            .lease;
        let token = i64::try_from(lease.token()).expect("a token");
        let stale = fluxio_test_support::runs::ten_stage_run("orders", "stale");
        let fenced = |cp: &Checkpoint, lease: Lease, token: i64, ttl: Option<i64>| FencedSave {
            step: Step::of(cp).expect("encode"),
            lease,
            token,
            checkpoint: cp.clone(),
            retention,
            release: false,
            ttl,
        };
        let b = fluxio_test_support::runs::ten_stage_run("orders", "b");
        let c = fluxio_test_support::runs::ten_stage_run("orders", "c");
        let saves = [
            fenced(
                &run[1],
                Lease::new(lease.run_id(), lease.token()),
                token,
                None,
            ),
            fenced(&b[0], Lease::new(b[0].key(), 0), 0, Some(60_000)),
            fenced(&stale[1], Lease::new(stale[0].key(), 7), 7, None),
            fenced(&c[0], Lease::new(c[0].key(), 0), 0, Some(60_000)),
        ];
        let mut args = sqlx::sqlite::SqliteArguments::default();
        for save in &saves {
            save.batch_arguments(&mut args).expect("arguments");
        }
        let mut conn = store.pool().acquire().await.expect("connection");
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .expect("begin");
        let gates: Vec<journal::Gate> =
            sqlx::query_as_with(&store.inner.sql.batch_append(saves.len()), args)
                .fetch_all(&mut *conn)
                .await
                .expect("the batch runs as one command");
        sqlx::query("COMMIT")
            .execute(&mut *conn)
            .await
            .expect("commit");
        drop(conn);

        assert_eq!(gates.len(), saves.len());
        let refusals: Vec<_> = saves
            .iter()
            .zip(&gates)
            .map(|(s, g)| s.refusal(g))
            .collect();
        assert!(refusals[0].is_none(), "{refusals:?}");
        assert!(refusals[1].is_none(), "{refusals:?}");
        assert!(
            matches!(refusals[2], Some(Error::LeaseLost { .. })),
            "{refusals:?}"
        );
        assert!(refusals[3].is_none(), "{refusals:?}");
        let tokens: Vec<i64> = saves.iter().zip(&gates).map(|(s, g)| s.token(g)).collect();
        assert_eq!(tokens, [token, token + 1, 7, token + 2]);
        assert_eq!(
            store.load(&run[0].key()).await.expect("load"),
            Some(run[1].clone())
        );
        assert_eq!(
            store.load(&b[0].key()).await.expect("load"),
            Some(b[0].clone())
        );
        assert_eq!(
            store.load(&c[0].key()).await.expect("load"),
            Some(c[0].clone())
        );
        assert_eq!(store.load(&stale[0].key()).await.expect("load"), None);
        // the leases drawn are held
        let held = Lease::new(c[0].key(), u64::try_from(token + 2).expect("a token"));
        store
            .renew_lease(&held, Duration::from_secs(60))
            .await
            .expect("held");
    }

    /// Each statement of a batch after its rows reads the store's tables
    /// by their indexes, from the batch's rows: only the batch table is
    /// scanned, never the steps, the leases or the runs.
    #[tokio::test]
    async fn a_batch_searches_the_stores_tables_from_its_rows() {
        let dir = fluxio_test_support::TempDir::new("batch_plan");
        let store = SqliteStore::connect(dir.db("plan")).await.expect("open");
        let text = store.inner.sql.batch_append(2);
        let mut conn = store.pool().acquire().await.expect("connection");
        let statements: Vec<&str> = text
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(statements.len(), 10, "{text}");
        for statement in &statements[2..] {
            let plan: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {statement}"))
                    .fetch_all(&mut *conn)
                    .await
                    .expect("plan");
            for (.., detail) in &plan {
                assert!(
                    !detail.starts_with("SCAN")
                        || detail.starts_with("SCAN b")
                        || detail.starts_with("SCAN o")
                        || detail.starts_with("SCAN temp.fluxio_batch"),
                    "{statement}: {plan:?}"
                );
            }
        }
    }
}
