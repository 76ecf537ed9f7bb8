//! A run's journal in SQL (contract rules 18 and 20), and the listing of
//! runs (rule 21). The order of the statements of one write, and the
//! listing's statement, are `fluxio-sql`'s, shared with the SQLite store;
//! what is PostgreSQL's is here (how a parameter is named and a time
//! bound) and in
//! [`Sql`](crate::statements::Sql) (the statements' text, and the advisory lock
//! that makes the completions of one pipeline trim in turn). The store
//! runs the writes inside a transaction that locks the run's row
//! (`FOR UPDATE`, or by writing it first).

use std::time::Duration;

use fluxio_core::store::{RedactedUrl, RunEvents};
use fluxio_sql::server::Applied;
use fluxio_sql::{Params, ServerSql, Settings};
use sqlx::PgConnection;
use sqlx::error::DatabaseError;
use sqlx::migrate::Migrator;
use std::str::FromStr as _;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgQueryResult};

use crate::PostgresStoreError;
use crate::builder::{DEFAULT_SCHEMA, MAX_TIMEOUT};
use crate::statements::Names;

/// PostgreSQL's side of the journal: sqlx's Postgres driver, times as
/// seconds in a float8 (the SQL makes a timestamp or an interval of it).
#[derive(Debug)]
pub(crate) struct Postgres;

impl fluxio_sql::Dialect for Postgres {
    const BACKEND: &'static str = crate::error::BACKEND;
    type Db = sqlx::Postgres;
    type Time = f64;
    const PARAMS: Params = Params::Dollar;
    const BOOKKEEPING: [&str; 5] = [
        "TEXT",
        "BIGINT",
        "BYTEA",
        "TIMESTAMPTZ NOT NULL DEFAULT now()",
        "",
    ];

    /// Past the last instant a `timestamptz` holds (294276 AD), infinity:
    /// `to_timestamp` refuses a larger number, and infinity is later than
    /// every row.
    fn bound(ms: u64) -> f64 {
        if ms > LAST_MS {
            f64::INFINITY
        } else {
            Self::instant(ms)
        }
    }

    fn time_param(n: usize) -> String {
        format!("to_timestamp(${n}::float8)")
    }
}

impl fluxio_sql::Server for Postgres {
    /// `57P01` admin shutdown (e.g. `pg_terminate_backend`), `57P02` crash
    /// shutdown, `57P03` cannot connect now, or a connection exception
    /// (class `08`).
    fn session_ended(db: &dyn DatabaseError) -> bool {
        db.code()
            .is_some_and(|c| matches!(&*c, "57P01" | "57P02" | "57P03") || c.starts_with("08"))
    }

    /// `57014`, the server's `statement_timeout` (the only cancel this
    /// store causes).
    fn timed_out(db: &dyn DatabaseError) -> bool {
        db.code().is_some_and(|c| c == "57014")
    }

    fn rows_affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    type Names = Names;
    const LONGEST_TIMEOUT: (Duration, &'static str) = (
        MAX_TIMEOUT,
        "i32::MAX milliseconds (about 24 days: the server's statement_timeout)",
    );

    fn names(settings: &Settings) -> Result<Names, PostgresStoreError> {
        let schema = settings.namespace.as_deref().unwrap_or(DEFAULT_SCHEMA);
        Names::new(schema, &settings.table)
    }

    fn statements(names: &Names) -> ServerSql {
        crate::statements::statements(names)
    }

    /// A pool with the options every SQL store's pool has
    /// ([`fluxio_sql::pool_options`]) and the server's `statement_timeout`
    /// at the store's timeout, in read-only sessions when the store reads
    /// only.
    fn url_pool(url: &str, settings: &Settings) -> fluxio_core::Result<(PgPool, RedactedUrl)> {
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

    const MIGRATOR: &'static Migrator = &crate::migrate::MIGRATOR;

    async fn applied(conn: &mut PgConnection, names: &Names) -> sqlx::Result<Option<Applied>> {
        let bookkeeping = names.migrations_qualified();
        // `to_regclass` answers NULL for a missing schema or table, and needs
        // no privilege
        let found: bool = sqlx::query_scalar(
            "SELECT to_regclass($1) IS NOT NULL AND to_regclass($2) IS NOT NULL",
        )
        .bind(&bookkeeping)
        .bind(names.checkpoints_qualified())
        .fetch_one(&mut *conn)
        .await?;
        if !found {
            return Ok(None);
        }
        let applied = sqlx::query_as(&format!(
            "SELECT version, checksum FROM {bookkeeping} WHERE table_name = $1"
        ))
        .bind(&names.table)
        .fetch_all(&mut *conn)
        .await?;
        Ok(Some(applied))
    }

    /// `LISTEN` on the channel of the store's tables ([`Names::channel`]),
    /// on a connection of its own (not one of the store's pool): the
    /// transactions that make a run due or end it `NOTIFY` it. When that
    /// connection drops, the events end (the worker polls, and subscribes
    /// again).
    async fn watch(pool: &PgPool, names: &Names) -> sqlx::Result<Option<RunEvents>> {
        let own = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .connect_lazy_with((*pool.connect_options()).clone());
        let mut listener = PgListener::connect_with(&own).await?;
        // a lost connection ends the events (`try_recv` answers `None`)
        listener.eager_reconnect(false);
        listener.listen(&names.channel()).await?;
        let events = futures::stream::unfold(listener, |mut listener| async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(told)) => {
                        if let Some(event) = fluxio_sql::parse_event(told.payload()) {
                            return Some((event, listener));
                        }
                    }
                    Ok(None) | Err(_) => return None,
                }
            }
        });
        Ok(Some(RunEvents::new(events)))
    }
}

/// The last millisecond a listing binds as it is: `to_timestamp` refuses
/// 9,224,318,016,000 seconds and more; a second less, so that the float's
/// rounding stays below that.
const LAST_MS: u64 = 9_224_318_015_000_000;

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::fmt;

    use fluxio_sql::Server as _;

    use super::Postgres;

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
