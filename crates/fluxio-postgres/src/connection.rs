//! Connecting to PostgreSQL and running one store call: the pool, the
//! first connection that reports a refused server at once, the call's
//! timeout, its repeat on a checked connection after a pooled one died, and
//! the redaction of sqlx's errors that quote the URL's password.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use fluxio_core::store::RedactedUrl;
use fluxio_core::{Error, Result};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection as _, Postgres};

use crate::error::{BACKEND, PostgresStoreError, is_connection_error, own_error, sql_kind};
use crate::migrate::MigrateError;
use crate::store::PostgresStore;

/// A pooled connection idle for this long is pinged before it is handed out
/// (a busy pool skips the extra round trip; a pool that sat through a server
/// restart still drops its dead connections). A connection that died less
/// than this after its last use fails its next statement, which
/// [`Retry`] covers.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// How a call survives a pooled connection that died (terminated by an
/// administrator, a server restart, a reset) since its last use.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// For statements that may run twice (idempotent, or checking the
    /// lease's token): on a pooled connection, as fast as it comes; after a
    /// [connection failure](is_connection_error) once more, on a
    /// [checked](PostgresStore::checked_connection) connection.
    Once,
    /// For statements whose repeat would answer differently (acquire: the
    /// second attempt would find the first one's lease; purge: its count):
    /// only on a [checked](PostgresStore::checked_connection) connection, so
    /// a dead one is found before the statement is sent, and never twice.
    Never,
}

/// `e` as the source of an [`Error::Store`] of `e`'s kind, or, when its
/// message quotes the password of `url` (a server quoting a database name
/// that is really a misplaced user info), a
/// [`PostgresStoreError::Scrubbed`] in its place.
pub(crate) fn scrubbed_sql_error(url: Option<&RedactedUrl>, e: sqlx::Error) -> Error {
    Error::store_with_kind(BACKEND, sql_kind(&e), scrubbed(url, e))
}

fn scrubbed(url: Option<&RedactedUrl>, e: sqlx::Error) -> Box<dyn std::error::Error + Send + Sync> {
    match url {
        Some(url) if url.leaks(&format!("{e} {e:?}")) => Box::new(PostgresStoreError::Scrubbed {
            message: url.scrub(&e.to_string()),
        }),
        _ => Box::new(e),
    }
}

/// A pool on `url`, connecting lazily: at most `max_connections`, waiting
/// at most `timeout` for a connection, with the server's `statement_timeout`
/// at `timeout` too, and a connection idle for [`PING_IF_IDLE_FOR`] pinged
/// before it is handed out. Returned with the URL, redacted.
///
/// # Errors
/// [`Error::NoRuntime`] outside a tokio runtime; [`Error::Store`] for a URL
/// sqlx rejects.
pub(crate) fn url_pool(
    url: &str,
    max_connections: u32,
    timeout: Duration,
) -> Result<(PgPool, RedactedUrl)> {
    // sqlx's pool starts a task: without a runtime it would panic.
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::NoRuntime {
            operation: "PostgresStoreBuilder::connect_lazy".to_owned(),
        });
    }
    let redacted = RedactedUrl::new(url);
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| scrubbed_sql_error(Some(&redacted), e))?
        // The server gives up on a statement when the client does.
        .options([("statement_timeout", timeout.as_millis().max(1))]);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(timeout)
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE_FOR {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options);
    Ok((pool, redacted))
}

impl PostgresStore {
    /// Opens one connection outside the pool and closes it: a server that
    /// refuses or cannot be reached is reported at once, with its I/O error,
    /// rather than as the pool's timeout after retrying for the whole
    /// [timeout](PostgresStoreBuilder::timeout). Only for stores built from
    /// a URL.
    pub(crate) async fn first_connection(&self) -> Result<()> {
        let inner = &self.inner;
        let Some(url) = &inner.url else {
            return Ok(());
        };
        let options = inner.pool.connect_options();
        match tokio::time::timeout(inner.timeout, PgConnection::connect_with(&options)).await {
            Ok(Ok(conn)) => {
                if let Err(e) = conn.close().await {
                    tracing::debug!(error = %e, "closing the first connection failed");
                }
                Ok(())
            }
            Ok(Err(e)) => Err(own_error(PostgresStoreError::Connect {
                url: url.url.clone(),
                source: scrubbed(Some(url), e),
            })),
            Err(_elapsed) => Err(own_error(PostgresStoreError::Timeout {
                operation: "connect",
                timeout: inner.timeout,
            })),
        }
    }

    /// Runs `attempt` on a pooled connection within the store's timeout,
    /// retried as `retry` says.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        retry: Retry,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(PoolConnection<Postgres>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        self.timed(operation, async {
            let conn = match retry {
                Retry::Once => self.inner.pool.acquire().await?,
                Retry::Never => self.checked_connection(operation).await?,
            };
            match attempt(conn).await {
                Err(e) if retry == Retry::Once && e.is_connection_error() => {
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
        })
        .await
    }

    /// A pooled connection that answered a ping (a `Sync` message: one round
    /// trip, no statement). One that does not is closed and the next one
    /// tried: each failure takes a dead connection out of the pool, after
    /// which the pool opens new ones; after `max_connections + 1` failures,
    /// the last error. A failure here proves that no statement was sent.
    async fn checked_connection(
        &self,
        operation: &'static str,
    ) -> std::result::Result<PoolConnection<Postgres>, Failure> {
        let pool = &self.inner.pool;
        let tries = pool.options().get_max_connections().saturating_add(1);
        let mut failed = 0;
        loop {
            let mut conn = pool.acquire().await?;
            match conn.ping().await {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    // Closed at once, without a goodbye to a dead server; its
                    // pool slot is free for a new connection.
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

    /// Runs `fut` within the store's timeout.
    async fn timed<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = std::result::Result<T, Failure>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.inner.timeout, fut).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(match e {
                Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => {
                    scrubbed_sql_error(self.inner.url.as_ref(), e)
                }
                Failure::Migrate(MigrateError::Store(e)) => own_error(e),
                Failure::Fluxio(e) => e,
            }),
            Err(_elapsed) => Err(own_error(PostgresStoreError::Timeout {
                operation,
                timeout: self.inner.timeout,
            })),
        }
    }
}

/// What the body of a store call fails with; [`PostgresStore::timed`] maps
/// it to fluxio's [`Error`].
pub(crate) enum Failure {
    Sql(sqlx::Error),
    Migrate(MigrateError),
    Fluxio(Error),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Sql(e)
    }
}

impl From<MigrateError> for Failure {
    fn from(e: MigrateError) -> Self {
        Failure::Migrate(e)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Fluxio(e)
    }
}

impl Failure {
    fn is_connection_error(&self) -> bool {
        match self {
            Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => is_connection_error(e),
            Failure::Migrate(MigrateError::Store(_)) | Failure::Fluxio(_) => false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Sql(e) | Failure::Migrate(MigrateError::Sql(e)) => e.fmt(f),
            Failure::Migrate(MigrateError::Store(e)) => e.fmt(f),
            Failure::Fluxio(e) => e.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// A server error with a SQLSTATE.
    #[derive(Debug)]
    struct Sqlstate(&'static str);

    impl fmt::Display for Sqlstate {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Sqlstate {}

    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            self.0
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn db(code: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Sqlstate(code)))
    }

    #[test]
    fn connection_errors_are_told_from_statement_errors() {
        for code in ["57P01", "57P02", "57P03", "08000", "08006", "08P01"] {
            assert!(is_connection_error(&db(code)), "{code}");
        }
        // query_canceled (statement_timeout), serialization, unique violation
        for code in ["57014", "40001", "23505", "42P01"] {
            assert!(!is_connection_error(&db(code)), "{code}");
        }
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(is_connection_error(&sqlx::Error::Io(io)));
        assert!(!is_connection_error(&sqlx::Error::PoolTimedOut));
        assert!(!is_connection_error(&sqlx::Error::PoolClosed));
        assert!(!is_connection_error(&sqlx::Error::RowNotFound));
        let failure = Failure::Migrate(MigrateError::Sql(db("57P01")));
        assert!(failure.is_connection_error());
        assert!(!Failure::Fluxio(Error::RunIdInUse { run_id: "r".into() }).is_connection_error());
    }
}
