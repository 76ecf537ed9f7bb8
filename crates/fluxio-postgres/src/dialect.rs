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

use fluxio_core::store::RedactedUrl;
use fluxio_sql::{Params, ServerSql, Settings};
use sqlx::PgConnection;
use sqlx::error::DatabaseError;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgQueryResult};

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

    fn url_pool(url: &str, settings: &Settings) -> fluxio_core::Result<(PgPool, RedactedUrl)> {
        crate::connection::url_pool(url, settings)
    }

    const MIGRATOR: &'static Migrator = &crate::migrate::MIGRATOR;

    fn applied<'c>(
        conn: &'c mut PgConnection,
        names: &'c Names,
    ) -> impl Future<Output = sqlx::Result<Option<Vec<(i64, Vec<u8>)>>>> + Send + 'c {
        crate::migrate::applied(conn, names)
    }
}

/// The last millisecond a listing binds as it is: `to_timestamp` refuses
/// 9,224,318,016,000 seconds and more; a second less, so that the float's
/// rounding stays below that.
const LAST_MS: u64 = 9_224_318_015_000_000;
