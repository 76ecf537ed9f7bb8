//! The store body of a SQL database server reached over a pool (Postgres,
//! MySQL): every [`CheckpointStore`](fluxio_core::store::CheckpointStore)
//! call as one statement or one transaction on a pooled connection, the
//! call's timeout, its repeat on a checked connection after a pooled one
//! died, and the redaction of driver errors that quote the URL's password.
//!
//! A store crate keeps what differs: its [`Server`] (the driver, how a
//! time and a parameter are written, which driver errors are connection
//! failures or timeouts, its own error type), the text of its statements
//! ([`ServerSql`], built from its validated names), its connection options
//! and its migrations. Its store type wraps a [`ServerStore`] and
//! implements the trait with [`server_store!`](crate::server_store)
//! (`server/macros.rs`); the server's wake-ups, shared by the store's
//! watchers, are in `server/waits.rs`.

mod macros;
mod waits;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fluxio_core::store::{
    Begin, Begun, Checkpoint, Claimed, Decision, Delivery, DueFilter, DueRun, Lease, RedactedUrl,
    RunCount, RunEvent, RunEvents, RunFilter, RunPage, Signal, StoreErrorKind, Take,
    check_lease_ttl, check_run_id,
};
use fluxio_core::{Error, Result};
use sqlx::error::DatabaseError;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use sqlx::{
    ColumnIndex, Connection as _, Database, Decode, Encode, Executor, IntoArguments, Pool, Type,
};

use crate::error::ServerStoreError;
use crate::settings::{Settings, Source};
use crate::{
    Dialect, Journal, Listing, Retention, RunStatements, Statements, Step, latest, lease_lost,
    token_of,
};

/// What the body of a server store's call fails with: the driver's error
/// (mapped by the [`Server`] when the call ends) or fluxio's.
#[doc(hidden)]
#[derive(Debug)]
pub enum Failure {
    /// The driver's.
    Sql(sqlx::Error),
    /// fluxio's (a refusal, the store's own error).
    Fluxio(Error),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Sql(e)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Fluxio(e)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Sql(e) => e.fmt(f),
            Failure::Fluxio(e) => e.fmt(f),
        }
    }
}

/// What a server store's dialect adds to [`Dialect`]: how its driver's
/// errors are told apart, and its own errors.
#[doc(hidden)]
pub trait Server: Dialect + Send + Sync + 'static {
    /// Whether the server's error `db` says it ended the session (a
    /// shutdown, a killed connection).
    fn session_ended(db: &dyn DatabaseError) -> bool;
    /// Whether the server's error `db` is a limit of time the store set
    /// (a statement timeout, a lock wait timeout).
    fn timed_out(db: &dyn DatabaseError) -> bool;

    /// What kind of failure an error of the driver is: waiting for a
    /// pooled connection, an I/O timeout or the server's
    /// [time limit](Server::timed_out) is a timeout; a
    /// [failed connection](Server::is_connection_error) or TLS handshake a
    /// connection failure.
    fn kind(e: &sqlx::Error) -> StoreErrorKind {
        match e {
            sqlx::Error::PoolTimedOut => StoreErrorKind::Timeout,
            sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                StoreErrorKind::Timeout
            }
            sqlx::Error::Tls(_) => StoreErrorKind::Connection,
            e if Self::is_connection_error(e) => StoreErrorKind::Connection,
            sqlx::Error::Database(db) if Self::timed_out(db.as_ref()) => StoreErrorKind::Timeout,
            _ => StoreErrorKind::Other,
        }
    }

    /// Whether `e` says the connection failed rather than the statement:
    /// an I/O error, or the server [ending the session](Server::session_ended).
    /// The statement may still have run when the failure came after it
    /// was sent.
    fn is_connection_error(e: &sqlx::Error) -> bool {
        match e {
            sqlx::Error::Io(_) => true,
            sqlx::Error::Database(db) => Self::session_ended(db.as_ref()),
            _ => false,
        }
    }
    /// How many rows a statement affected (matched, for an `UPDATE`).
    fn rows_affected(done: &<Self::Db as Database>::QueryResult) -> u64;

    /// The validated names of one store's tables.
    type Names: Tables;
    /// The longest timeout the server takes, and the words that say what
    /// bounds it (in the refusal of a longer one).
    const LONGEST_TIMEOUT: (Duration, &'static str);

    /// The names of the tables `settings` asks for, checked.
    ///
    /// # Errors
    /// [`ServerStoreError::InvalidSetting`] naming the setting.
    fn names(settings: &Settings) -> std::result::Result<Self::Names, ServerStoreError>;
    /// The statements of a store on `names`.
    fn statements(names: &Self::Names) -> ServerSql;
    /// A pool of the store's own on `url` (connecting lazily, with the
    /// session settings `settings` call for), and the URL, redacted.
    ///
    /// # Errors
    /// [`Error::NoRuntime`] outside a tokio runtime; [`Error::Store`] for a
    /// URL the driver refuses.
    fn url_pool(url: &str, settings: &Settings) -> Result<(Pool<Self::Db>, RedactedUrl)>;

    /// The store's migrations, embedded at compile time.
    const MIGRATOR: &'static Migrator;
    /// The migrations applied to the store's tables (version and
    /// checksum), read without writing or locking; `None` when the tables
    /// or their bookkeeping do not exist.
    fn applied<'c>(
        conn: &'c mut <Self::Db as Database>::Connection,
        names: &'c Self::Names,
    ) -> impl Future<Output = sqlx::Result<Option<Applied>>> + Send + 'c;

    /// A subscription to the wake-ups of the store's tables on `pool`
    /// ([`CheckpointStore::watch`](fluxio_core::store::CheckpointStore::watch));
    /// `None` (the default) where the server tells none: the workers poll.
    fn watch<'c>(
        pool: &'c Pool<Self::Db>,
        names: &'c Self::Names,
    ) -> impl Future<Output = sqlx::Result<Option<RunEvents>>> + Send + 'c {
        let _ = (pool, names);
        async { Ok(None) }
    }
}

/// The migrations applied to a store's tables: (version, checksum) each.
pub type Applied = Vec<(i64, Vec<u8>)>;

/// What a store's [`Server::Names`] tell of where its tables are, for its
/// `Debug` and its getters.
#[doc(hidden)]
pub trait Tables: fmt::Debug + Send + Sync + 'static {
    /// The setting that says where the tables are (`"schema"`,
    /// `"database"`).
    const NAMESPACE: &'static str;
    /// Its value; `None`: the connection's.
    fn namespace(&self) -> Option<&str>;
    /// The checkpoint table.
    fn table(&self) -> &str;
    /// Where the tables are, as messages name it.
    fn shown_namespace(&self) -> &str {
        self.namespace().unwrap_or("<the URL's>")
    }
}

/// The statements of one server store, built once from its validated,
/// quoted names; values are bind parameters, each bound once, in the order
/// the fields' docs give (a dialect with anonymous parameters writes them
/// in that order).
#[doc(hidden)]
#[derive(Debug)]
pub struct ServerSql {
    /// The journal's writes.
    pub journal: Statements,
    /// The lease and the run's row.
    pub run: RunStatements,
    /// Listing runs.
    pub list: Listing,
    /// The payloads of run (key) from its last whole step on, oldest
    /// first; none when the run is not visible.
    pub load: String,
    /// Every payload of run (key), oldest first; none when the run is not
    /// visible.
    pub history: String,
    /// Extends the lease (key, token) by (ttl, [`Dialect::span`]) when it
    /// is current: one row affected, or none.
    pub renew: String,
    /// Run in order by `purge_expired`, without parameters: the last one
    /// deletes the expired runs (its rows are the count), the ones before
    /// it what else is dead (released or expired leases).
    pub purge: Vec<String>,
}

/// The body of a server store: its pool, statements and settings, and the
/// store's calls.
#[doc(hidden)]
pub struct ServerStore<S: Server> {
    pool: Pool<S::Db>,
    names: S::Names,
    sql: ServerSql,
    timeout: Duration,
    retention: Retention,
    url: Option<RedactedUrl>,
    /// The largest step payload one statement may carry (the server's
    /// packet limit, when the store read it); `u64::MAX`: none known.
    max_step: AtomicU64,
    /// The wake-ups of the server's listener, shared by every watcher of
    /// this store (`server/waits.rs`); gone when the listener ended.
    events: tokio::sync::Mutex<Option<tokio::sync::broadcast::WeakSender<RunEvent>>>,
    dialect: PhantomData<S>,
}

/// How a call survives a pooled connection that died (terminated by an
/// administrator, a server restart, a reset) since its last use.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// For statements that may run twice (idempotent, or checking the
    /// lease's token): on a pooled connection, as fast as it comes; after
    /// a connection failure once more, on a checked connection.
    Once,
    /// For statements whose repeat would answer differently (acquire: the
    /// second attempt would find the first one's lease; purge: its count):
    /// only on a checked connection, so a dead one is found before the
    /// statement is sent, and never twice.
    Never,
}

impl<S: Server> fmt::Debug for ServerStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_as("ServerStore", f)
    }
}

impl<S: Server> ServerStore<S> {
    /// The `Debug` of a store type `name` on this body: its URL (redacted),
    /// where its tables are, its timeout and retention.
    ///
    /// # Errors
    /// The formatter's.
    pub fn fmt_as(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(name)
            .field(
                "url",
                &self.url.as_ref().map_or("<given pool>", |u| u.url.as_str()),
            )
            .field(S::Names::NAMESPACE, &self.names.namespace())
            .field("table", &self.names.table())
            .field("timeout", &self.timeout)
            .field("completed_retention", &self.retention.expire_after)
            .field("keep_completed", &self.retention.keep_completed)
            .finish_non_exhaustive()
    }
}

/// The error for a URL the driver refused (`e`): its kind is neither a
/// timeout nor a connection failure, and when its message quotes the URL's
/// password, a [`ServerStoreError::Scrubbed`] stands in.
#[doc(hidden)]
pub fn url_error<S: Server>(url: &RedactedUrl, e: sqlx::Error) -> Error {
    let shown: Box<dyn std::error::Error + Send + Sync> = if url.leaks(&format!("{e} {e:?}")) {
        Box::new(ServerStoreError::Scrubbed {
            message: url.scrub(&e.to_string()),
        })
    } else {
        Box::new(e)
    };
    Error::store_with_kind(S::BACKEND, StoreErrorKind::Other, shown)
}

impl<S, DB> ServerStore<S>
where
    S: Server<Db = DB>,
    DB: Database,
{
    /// The body of a store with `settings` on `source` (a pool of its own,
    /// [`Server::url_pool`], or the application's), on the tables
    /// `settings` name.
    ///
    /// # Errors
    /// [`ServerStoreError::InvalidSetting`] for a setting out of range (a
    /// timeout over [`Server::LONGEST_TIMEOUT`]) or a name the server
    /// refuses; [`Server::url_pool`]'s.
    pub fn build(source: Source<DB>, settings: Settings) -> Result<Self> {
        let invalid = |e: ServerStoreError| e.into_store_error(S::BACKEND);
        if let Some((setting, value, reason)) = settings.refusal(Some(S::LONGEST_TIMEOUT)) {
            return Err(invalid(ServerStoreError::invalid(setting, value, reason)));
        }
        let names = S::names(&settings).map_err(invalid)?;
        let (pool, url) = match source {
            Source::Pool(pool) => (pool, None),
            Source::Url(url) => {
                let (pool, redacted) = S::url_pool(&url, &settings)?;
                (pool, Some(redacted))
            }
        };
        Ok(ServerStore {
            pool,
            sql: S::statements(&names),
            names,
            timeout: settings.timeout,
            retention: settings.retention,
            url,
            max_step: AtomicU64::new(u64::MAX),
            events: tokio::sync::Mutex::new(None),
            dialect: PhantomData,
        })
    }

    /// Refuses, from now on, a checkpoint whose journal entry is longer
    /// than `bytes` ([`Error::CheckpointTooLarge`], before anything is
    /// sent): for a server that would otherwise drop the connection on a
    /// statement past its packet limit (MySQL's `max_allowed_packet`).
    pub fn limit_step(&self, bytes: u64) {
        self.max_step.store(bytes, Ordering::Relaxed);
    }

    /// `step` of run `key`, refused when it is longer than the server
    /// takes.
    fn checked(&self, key: &str, step: Step) -> Result<Step> {
        let limit = self.max_step.load(Ordering::Relaxed);
        let size = u64::try_from(step.payload().len()).unwrap_or(u64::MAX);
        if size > limit {
            return Err(Error::CheckpointTooLarge {
                run_id: key.to_owned(),
                size,
                limit,
            });
        }
        Ok(step)
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The names of the store's tables.
    pub fn names(&self) -> &S::Names {
        &self.names
    }

    /// The store's statements.
    pub fn sql(&self) -> &ServerSql {
        &self.sql
    }

    /// The timeout of every call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What the store keeps of its completed runs.
    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// The URL, redacted; `None` for a pool the application gave.
    pub fn url(&self) -> Option<&RedactedUrl> {
        self.url.as_ref()
    }

    /// The URL as messages show it.
    pub fn shown_url(&self) -> &str {
        self.url.as_ref().map_or("<given pool>", |u| u.url.as_str())
    }

    /// `e` as the source of an [`Error::Store`] of `e`'s kind, or, when its
    /// message quotes the password of the URL, a
    /// [`ServerStoreError::Scrubbed`] in its place.
    pub fn sql_error(&self, e: sqlx::Error) -> Error {
        Error::store_with_kind(S::BACKEND, S::kind(&e), self.scrubbed(e))
    }

    /// The store's error for a call `operation` that did not finish within
    /// the timeout.
    fn timed_out(&self, operation: &'static str) -> Error {
        ServerStoreError::Timeout {
            operation,
            timeout: self.timeout,
        }
        .into_store_error(S::BACKEND)
    }

    fn scrubbed(&self, e: sqlx::Error) -> Box<dyn std::error::Error + Send + Sync> {
        match &self.url {
            Some(url) if url.leaks(&format!("{e} {e:?}")) => Box::new(ServerStoreError::Scrubbed {
                message: url.scrub(&e.to_string()),
            }),
            _ => Box::new(e),
        }
    }

    /// Opens one connection outside the pool and closes it: a server that
    /// refuses or cannot be reached is reported at once, with its I/O
    /// error, rather than as the pool's timeout after retrying for the
    /// whole timeout. Only for stores built from a URL.
    ///
    /// # Errors
    /// [`ServerStoreError::Connect`] and [`ServerStoreError::Timeout`].
    pub async fn first_connection(&self) -> Result<()> {
        let Some(url) = &self.url else {
            return Ok(());
        };
        let options = self.pool.connect_options();
        let connecting = <DB::Connection as sqlx::Connection>::connect_with(&options);
        match tokio::time::timeout(self.timeout, connecting).await {
            Ok(Ok(conn)) => {
                if let Err(e) = conn.close().await {
                    tracing::debug!(error = %e, "closing the first connection failed");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(ServerStoreError::Connect {
                url: url.url.clone(),
                source: self.scrubbed(e),
            }
            .into_store_error(S::BACKEND)),
            Err(_elapsed) => Err(self.timed_out("connect")),
        }
    }

    /// Runs `attempt` on a pooled connection within the store's timeout,
    /// retried as `retry` says.
    ///
    /// # Errors
    /// `attempt`'s, mapped to fluxio's; the dialect's timeout.
    pub async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        retry: Retry,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(PoolConnection<DB>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        let call = async {
            let conn = match retry {
                Retry::Once => self.pool.acquire().await?,
                Retry::Never => self.checked_connection(operation).await?,
            };
            match attempt(conn).await {
                Err(Failure::Sql(e)) if retry == Retry::Once && S::is_connection_error(&e) => {
                    tracing::debug!(
                        operation,
                        error = %e,
                        "the connection failed; running the statement again on a checked one"
                    );
                    let conn = self.checked_connection(operation).await?;
                    attempt(conn).await
                }
                result => result,
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Failure::Sql(e))) => Err(self.sql_error(e)),
            Ok(Err(Failure::Fluxio(e))) => Err(e),
            Err(_elapsed) => Err(self.timed_out(operation)),
        }
    }

    /// A pooled connection that answered a ping. One that does not is
    /// closed and the next one tried: each failure takes a dead connection
    /// out of the pool, after which the pool opens new ones; after
    /// `max_connections + 1` failures, the last error. A failure here
    /// proves that no statement was sent.
    async fn checked_connection(
        &self,
        operation: &'static str,
    ) -> std::result::Result<PoolConnection<DB>, Failure> {
        let tries = self.pool.options().get_max_connections().saturating_add(1);
        let mut failed = 0;
        loop {
            let mut conn = self.pool.acquire().await?;
            match conn.ping().await {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    // Closed at once, without a goodbye to a dead server;
                    // its pool slot is free for a new connection.
                    drop(conn.detach());
                    failed += 1;
                    if failed >= tries {
                        return Err(e.into());
                    }
                    tracing::debug!(operation, error = %e, "dropped a dead pooled connection");
                }
            }
        }
    }
}

/// The store's calls, each one statement or one transaction of
/// [`Journal`]'s on a pooled connection (see [`call`](ServerStore::call)).
impl<S, DB> ServerStore<S>
where
    S: Server<Db = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> Option<S::Time>: Encode<'q, DB>,
    for<'q> S::Time: Encode<'q, DB>,
    str: Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB>,
    [u8]: Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Encode<'r, DB> + Decode<'r, DB> + Type<DB>,
    for<'r> Vec<u8>: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// One transaction: the run's row, then its steps replaced by the
    /// checkpoint's journal ([`earlier`](Checkpoint::earlier), then
    /// itself), and its mailbox by the checkpoint's
    /// [`signals`](Checkpoint::signals).
    ///
    /// # Errors
    /// A bad run id or checkpoint; the driver's.
    pub async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        let key = checkpoint.checked_key()?;
        for signal in &checkpoint.signals {
            self.check_payload(signal)?;
        }
        let steps = checkpoint
            .earlier
            .iter()
            .chain([&checkpoint])
            .map(|c| Step::of(c).and_then(|step| self.checked(&key, step)))
            .collect::<Result<Vec<_>>>()?;
        let (key, checkpoint, steps) = (&key, &checkpoint, &steps);
        self.call("save", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            Journal::<S>::replace(
                &mut tx,
                &self.sql.journal,
                key,
                checkpoint,
                steps,
                self.retention,
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// One statement: the steps from the run's last whole checkpoint on,
    /// folded by [`Checkpoint::from_entries`]. Expired runs read as absent.
    ///
    /// # Errors
    /// A bad run id; the driver's; a corrupt payload.
    pub async fn load(&self, key: &str) -> Result<Option<Checkpoint>> {
        latest(key, self.payloads("load", &self.sql.load, key).await?)
    }

    /// One statement: every stored step of the run, oldest first.
    ///
    /// # Errors
    /// A bad run id; the driver's; a corrupt payload.
    pub async fn history(&self, key: &str) -> Result<Vec<Checkpoint>> {
        let parts = self.payloads("history", &self.sql.history, key).await?;
        Checkpoint::journal_from_entries(key, parts)
    }

    /// The payloads `statement` reads of run `key`, in the call `operation`.
    async fn payloads(
        &self,
        operation: &'static str,
        statement: &str,
        key: &str,
    ) -> Result<Vec<Vec<u8>>> {
        check_run_id(key)?;
        self.call(operation, Retry::Once, |mut conn| async move {
            let parts = sqlx::query_scalar(statement)
                .bind(key)
                .fetch_all(&mut *conn)
                .await?;
            Ok(parts)
        })
        .await
    }

    /// One statement over the run rows and the leases
    /// ([`list`](crate::list)): no journal is read. Read-only, so sent
    /// again after a dead connection.
    ///
    /// # Errors
    /// A bad filter; the driver's.
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        self.call("list_runs", Retry::Once, |mut conn| async move {
            crate::list::<S, DB>(&mut conn, &self.sql.list, filter).await
        })
        .await
    }

    /// One `GROUP BY` statement over the run rows and the leases
    /// ([`count`](crate::count)). Read-only, so sent again after a dead
    /// connection.
    ///
    /// # Errors
    /// A bad filter; the driver's.
    pub async fn count_runs(&self, filter: &RunFilter) -> Result<Vec<RunCount>> {
        self.call("count_runs", Retry::Once, |mut conn| async move {
            crate::count::<S, DB>(&mut conn, &self.sql.list, filter).await
        })
        .await
    }

    /// One statement; the steps go with the row.
    ///
    /// # Errors
    /// A bad run id; the driver's.
    pub async fn delete(&self, key: &str) -> Result<()> {
        check_run_id(key)?;
        self.call("delete", Retry::Once, |mut conn| async move {
            sqlx::query(&self.sql.run.delete)
                .bind(key)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
        .await
    }

    /// One statement; expired runs read as absent.
    ///
    /// # Errors
    /// A bad run id; the driver's.
    pub async fn exists(&self, key: &str) -> Result<bool> {
        check_run_id(key)?;
        self.call("exists", Retry::Once, |mut conn| async move {
            let exists: bool = sqlx::query_scalar(&self.sql.run.exists)
                .bind(key)
                .fetch_one(&mut *conn)
                .await?;
            Ok(exists)
        })
        .await
    }

    /// The shared [acquire](Journal::acquire) in a transaction, on a
    /// connection pinged first, and never sent twice: a second attempt
    /// after a first that committed would find that lease and report
    /// `RunIdInUse`.
    ///
    /// # Errors
    /// A bad run id or ttl; `RunIdInUse`; the driver's.
    pub async fn acquire_lease(&self, key: &str, ttl: Duration) -> Result<Lease> {
        check_run_id(key)?;
        check_lease_ttl(ttl)?;
        self.call("acquire_lease", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let token = Journal::<S>::acquire(&mut tx, &self.sql.run, key, ttl).await?;
            tx.commit().await?;
            Ok(Journal::<S>::leased(key, token)?)
        })
        .await
    }

    /// One statement, which changes the lease only when it is current.
    ///
    /// # Errors
    /// A bad ttl; `LeaseLost`; the driver's.
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        check_lease_ttl(ttl)?;
        let token = token_of(lease, lease.run_id())?;
        self.call("renew_lease", Retry::Once, |mut conn| async move {
            let done = sqlx::query(&self.sql.renew)
                .bind(lease.run_id())
                .bind(token)
                .bind(S::span(ttl))
                .execute(&mut *conn)
                .await?;
            if S::rows_affected(&done) == 1 {
                Ok(())
            } else {
                Err(lease_lost(lease).into())
            }
        })
        .await
    }

    /// One statement; a lease that is not current is left alone.
    ///
    /// # Errors
    /// The driver's.
    pub async fn release_lease(&self, lease: Lease) -> Result<()> {
        let Ok(token) = i64::try_from(lease.token()) else {
            return Ok(());
        };
        let lease = &lease;
        self.call("release_lease", Retry::Once, |mut conn| async move {
            sqlx::query(&self.sql.run.release)
                .bind(lease.run_id())
                .bind(token)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
        .await
    }

    /// One transaction: the lease row locked and checked
    /// ([`held`](RunStatements::held)), the run's row locked (a cancelled
    /// run is refused with `Cancelled`), then `LeaseLost` for a lease that
    /// is not current, and the checkpoint appended to the journal: only its
    /// [`entry_bytes`](Checkpoint::entry_bytes). Sent again after a
    /// connection failure: appending checkpoint `seq` again replaces what
    /// the first attempt may have written.
    ///
    /// # Errors
    /// `Cancelled`, `LeaseLost`, a missing predecessor; the driver's.
    pub async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let key = checkpoint.key();
        let token = token_of(lease, &key)?;
        let step = self.checked(&key, Step::of(&checkpoint)?)?;
        let (key, checkpoint, step) = (&key, &checkpoint, &step);
        self.call("save_fenced", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            Journal::<S>::fenced(
                &mut tx,
                &self.sql.journal,
                &self.sql.run,
                (key, token),
                checkpoint,
                step,
                self.retention,
                || lease_lost(lease),
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// One transaction, so one commit: [`Journal::begin`]. On an error
    /// nothing is committed: no lease is taken. Never sent twice (like
    /// `acquire_lease`).
    ///
    /// # Errors
    /// A bad run id or ttl; `RunIdInUse`; the driver's.
    pub async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        check_run_id(&first.key())?;
        check_lease_ttl(ttl)?;
        let step = self.checked(&first.key(), Step::of(&first)?)?;
        let (first, step) = (&first, &step);
        self.call("begin_run", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let begun = Journal::<S>::begin(
                &mut tx,
                &self.sql.journal,
                &self.sql.run,
                first,
                step,
                ttl,
                begin,
                self.retention,
            )
            .await?;
            tx.commit().await?;
            Ok(begun)
        })
        .await
    }

    /// One transaction, so one commit: [`Journal::finish`]. Never sent
    /// twice: a repeat after a commit whose reply was lost would find the
    /// lease released. When the transaction fails, the lease is released
    /// apart.
    ///
    /// # Errors
    /// `Cancelled`, `LeaseLost`, a missing predecessor; the driver's.
    pub async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        let written = match Step::of(&last).and_then(|step| self.checked(&last.key(), step)) {
            Err(e) => Err(e),
            Ok(step) => {
                let (last, step, lease) = (&last, &step, &lease);
                self.call("finish_run", Retry::Never, |mut conn| async move {
                    let mut tx = conn.begin().await?;
                    let decided = Journal::<S>::finish(
                        &mut tx,
                        &self.sql.journal,
                        &self.sql.run,
                        last,
                        step,
                        lease,
                        delete,
                        self.retention,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok(decided)
                })
                .await
            }
        };
        match written {
            Ok(decided) => decided,
            Err(e) => {
                let key = last.key();
                if let Err(release) = self.release_lease(lease).await {
                    tracing::warn!(run_id = %key, error = %release, "could not release the run's lease; it will expire");
                }
                Err(e)
            }
        }
    }

    /// One transaction: the run's row locked, the run loaded, and
    /// [`marked_checkpoint`](fluxio_core::store::marked_checkpoint)
    /// appended (a cancel, a pause or an unpause). A fenced save waits for
    /// the row lock and then finds the row cancelled or paused. Never sent
    /// twice: a repeat after a commit whose reply was lost would report
    /// the run as already cancelled (or not paused).
    ///
    /// # Errors
    /// A bad run id; `CheckpointNotFound`, `RunFinished`, `NotPaused`; the
    /// driver's.
    pub async fn mark(&self, key: &str, mark: fluxio_core::store::Mark) -> Result<()> {
        check_run_id(key)?;
        self.call("mark", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            // the row locked first, as a fenced write locks it
            Journal::<S>::refusal(&mut tx, &self.sql.journal, key).await?;
            Journal::<S>::mark(&mut tx, (&self.sql.journal, &self.sql.load), key, mark).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// One transaction: the lease row locked and checked, then the run
    /// deleted when the lease is current.
    ///
    /// # Errors
    /// `LeaseLost`; the driver's.
    pub async fn delete_fenced(&self, key: &str, lease: &Lease) -> Result<()> {
        let token = token_of(lease, key)?;
        self.call("delete_fenced", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            if !Journal::<S>::held(&mut tx, &self.sql.run, key, token).await? {
                return Err(lease_lost(lease).into());
            }
            sqlx::query(&self.sql.run.delete)
                .bind(key)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// Checks, writing and locking nothing, that the store's tables exist
    /// at a schema version this build reads: every migration it knows
    /// ([`Server::MIGRATOR`]) applied, unchanged (newer ones are fine:
    /// migrations only add). What a read-only store does where another
    /// migrates.
    ///
    /// # Errors
    /// [`ServerStoreError::NoTables`], [`SchemaOutdated`](ServerStoreError::SchemaOutdated)
    /// or [`MigrationChanged`](ServerStoreError::MigrationChanged), naming
    /// the tables; the driver's.
    pub async fn check_tables(&self) -> Result<()> {
        let names = &self.names;
        let applied = self
            .call("open", Retry::Once, |mut conn| async move {
                Ok::<_, Failure>(S::applied(&mut conn, names).await?)
            })
            .await?;
        let (schema, table) = (names.shown_namespace(), names.table());
        let refused = |e: ServerStoreError| e.into_store_error(S::BACKEND);
        let Some(applied) = applied else {
            return Err(refused(ServerStoreError::NoTables {
                schema: schema.to_owned(),
                table: table.to_owned(),
            }));
        };
        crate::readable(S::MIGRATOR, &applied, table)
            .map_err(|u| refused(ServerStoreError::unreadable(schema, table, u)))
    }

    /// Deletes the completed runs whose retention has passed, and the
    /// lease rows that are released or expired (not counted), in one
    /// transaction; returns how many runs it deleted. Never sent twice: a
    /// repeat would count only what the first one left.
    ///
    /// # Errors
    /// The driver's.
    pub async fn purge_expired(&self) -> Result<u64> {
        self.call("purge_expired", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let mut purged = 0;
            for statement in &self.sql.purge {
                let done = sqlx::query(statement).execute(&mut *tx).await?;
                purged = S::rows_affected(&done);
            }
            tx.commit().await?;
            Ok(purged)
        })
        .await
    }

    // Runs that wait (contract rules 25-28).

    /// One transaction: [`Journal::send_signal`] (the run's row locked as
    /// its fenced writes lock it). A payload longer than one statement of
    /// the server carries (MySQL's `max_allowed_packet`) is refused before
    /// anything is sent. Sent again after a connection failure: a signal
    /// stored by the first attempt is then a duplicate.
    ///
    /// # Errors
    /// A bad run id; `ValueTooLarge` naming `signal payload`; the
    /// refusals of [`deliver`](fluxio_core::store::deliver); the driver's.
    pub async fn send_signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        check_run_id(key)?;
        self.check_payload(&signal)?;
        let signal = &signal;
        self.call("send_signal", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let sql = &self.sql;
            let sent =
                Journal::<S>::send_signal(&mut tx, &sql.journal, &sql.load, key, signal).await?;
            tx.commit().await?;
            Ok(sent)
        })
        .await
    }

    /// One transaction: [`Journal::take_signal`], fenced by `lease` as a
    /// fenced save is. Sent again after a connection failure: a wait is
    /// decided once, and the repeat finds the same decision.
    ///
    /// # Errors
    /// `Cancelled`, `LeaseLost`, `CheckpointNotFound`; the driver's.
    pub async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        check_run_id(key)?;
        self.call("take_signal", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let (journal, run) = (&self.sql.journal, &self.sql.run);
            let decided =
                Journal::<S>::take_signal(&mut tx, journal, run, (key, take), lease).await?;
            tx.commit().await?;
            Ok(decided)
        })
        .await
    }

    /// One transaction: [`Journal::set_due`], fenced by `lease` as a
    /// fenced save is. Sent again after a connection failure: it sets the
    /// same value.
    ///
    /// # Errors
    /// `Cancelled`, `LeaseLost`, `CheckpointNotFound`; the driver's.
    pub async fn set_due(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        check_run_id(lease.run_id())?;
        self.call("set_due", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let sql = (&self.sql.journal, &self.sql.run);
            Journal::<S>::set_due(&mut tx, sql, lease, due_ms).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// One statement: the run's mailbox, in the order it came.
    ///
    /// # Errors
    /// A bad run id; the driver's; a corrupt entry.
    pub async fn signals(&self, key: &str) -> Result<Vec<Signal>> {
        check_run_id(key)?;
        self.call("signals", Retry::Once, |mut conn| async move {
            Journal::<S>::signals(&mut conn, &self.sql.journal, key).await
        })
        .await
    }

    /// One statement over the run rows and the leases
    /// ([`due_runs`](Journal::due_runs)), one range of the due index.
    ///
    /// # Errors
    /// A limit out of range; the driver's.
    pub async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        self.call("due_runs", Retry::Once, |mut conn| async move {
            Journal::<S>::due_runs(&mut conn, &self.sql.journal.waits, filter).await
        })
        .await
    }

    /// One transaction: the due rows read and locked (`SKIP LOCKED`:
    /// workers claiming at once take different runs), and each one's lease
    /// taken ([`claim_due`](Journal::claim_due)). Never sent twice: a
    /// claim whose reply was lost leaves its leases to lapse.
    ///
    /// # Errors
    /// A limit or ttl out of range; the driver's.
    pub async fn claim_due(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        check_lease_ttl(ttl)?;
        self.call("claim_due", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let sql = (&self.sql.journal.waits, &self.sql.run);
            let claimed = Journal::<S>::claim_due(&mut tx, sql, filter, ttl).await?;
            tx.commit().await?;
            Ok(claimed)
        })
        .await
    }

    /// One statement: the server's clock, in milliseconds since the Unix
    /// epoch (rule 28: every worker on the database reads the same one).
    ///
    /// # Errors
    /// The driver's; a clock before 1970.
    pub async fn clock_ms(&self) -> Result<Option<u64>> {
        let ms = self
            .call("clock_ms", Retry::Once, |mut conn| async move {
                let ms: i64 = sqlx::query_scalar(&self.sql.journal.waits.clock)
                    .fetch_one(&mut *conn)
                    .await?;
                Ok::<_, Failure>(ms)
            })
            .await?;
        u64::try_from(ms)
            .map(Some)
            .map_err(|e| Error::store(S::BACKEND, e))
    }
}
