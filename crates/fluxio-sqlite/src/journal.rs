//! A run's journal in SQL (contract rules 18 and 20), and the listing of
//! runs (rule 21). The order of the statements of one write, and the
//! listing's statement, are `fluxio-sql`'s, shared with the Postgres
//! store; what is SQLite's is here (how a parameter is named and a time
//! bound) and in
//! [`Sql`](crate::names::Sql) (the statements' text). The store runs the
//! writes inside a `BEGIN IMMEDIATE` transaction, which holds SQLite's
//! write lock: the writes of all processes take turns, so nothing more is
//! locked.

use std::time::Duration;

pub(crate) use fluxio_sql::{Retention, Step, latest};

use crate::connection::Failure;

/// SQLite's side of the journal: sqlx's SQLite driver, times as INTEGER
/// milliseconds (the SQL adds a retention to SQLite's clock).
#[derive(Debug)]
pub(crate) struct Sqlite;

impl fluxio_sql::Dialect for Sqlite {
    const BACKEND: &'static str = crate::error::BACKEND;
    type Db = sqlx::Sqlite;
    type Failure = Failure;
    type Time = i64;

    fn instant(ms: u64) -> i64 {
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    fn span(d: Duration) -> i64 {
        crate::store::millis(d)
    }

    fn param(n: usize) -> String {
        format!("?{n}")
    }

    /// Times are INTEGER milliseconds, bound as they are.
    fn time_param(n: usize) -> String {
        format!("?{n}")
    }
}

/// The journal's writes on this store's connections.
pub(crate) type Journal = fluxio_sql::Journal<Sqlite>;
