//! Connecting to PostgreSQL: the pool, its connections' options and their
//! check after idling. (The call's timeout, its repeat on a checked
//! connection after a pooled one died, and the redaction of errors that
//! quote the password are `fluxio_sql::ServerStore`'s.)

use std::str::FromStr;
use std::time::Duration;

use fluxio_core::store::RedactedUrl;
use fluxio_core::{Error, Result};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

/// A pooled connection idle for this long is pinged before it is handed out
/// (a busy pool skips the extra round trip; a pool that sat through a server
/// restart still drops its dead connections). A connection that died less
/// than this after its last use fails its next statement, which
/// `fluxio_sql::server::Retry` covers.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

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
        .map_err(|e| fluxio_sql::server::url_error::<crate::dialect::Postgres>(&redacted, e))?
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

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::fmt;

    use crate::error::is_connection_error;

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
    }
}
