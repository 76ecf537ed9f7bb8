//! Connecting to PostgreSQL: the pool, its connections' options and their
//! check after idling. (The call's timeout, its repeat on a checked
//! connection after a pooled one died, and the redaction of errors that
//! quote the password are `fluxio_sql::ServerStore`'s.)

use std::str::FromStr;

use fluxio_core::Result;
use fluxio_core::store::RedactedUrl;
use fluxio_sql::Settings;
use sqlx::postgres::{PgConnectOptions, PgPool};

/// A pool on `url`, connecting lazily, with the options every SQL store's
/// pool has ([`fluxio_sql::pool_options`]) and the server's
/// `statement_timeout` at the store's timeout, in read-only sessions when
/// the store reads only. Returned with the URL, redacted.
///
/// # Errors
/// [`Error::NoRuntime`](fluxio_core::Error::NoRuntime) outside a tokio
/// runtime; [`Error::Store`](fluxio_core::Error::Store) for a URL sqlx
/// rejects.
pub(crate) fn url_pool(url: &str, settings: &Settings) -> Result<(PgPool, RedactedUrl)> {
    let options = fluxio_sql::pool_options(settings, "PostgresStoreBuilder::connect_lazy")?;
    let redacted = RedactedUrl::new(url);
    let mut connect = PgConnectOptions::from_str(url)
        .map_err(|e| fluxio_sql::server::url_error::<crate::dialect::Postgres>(&redacted, e))?
        // The server gives up on a statement when the client does.
        .options([("statement_timeout", settings.timeout.as_millis().max(1))]);
    if settings.read_only {
        connect = connect.options([("default_transaction_read_only", "on")]);
    }
    Ok((options.connect_lazy_with(connect), redacted))
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::fmt;

    use fluxio_sql::Server as _;

    use crate::dialect::Postgres;

    fn is_connection_error(e: &sqlx::Error) -> bool {
        Postgres::is_connection_error(e)
    }

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
