//! A run's journal in SQL (contract rules 18 and 20). The order of the
//! statements of one write is `fluxio-sql`'s, shared with the SQLite
//! store; what is PostgreSQL's is here (how a time is bound) and in
//! [`Sql`](crate::names::Sql) (the statements' text, and the advisory lock
//! that makes the completions of one pipeline trim in turn). The store
//! runs the writes inside a transaction that locks the run's row
//! (`FOR UPDATE`, or by writing it first).

use std::time::Duration;

pub(crate) use fluxio_sql::{Retention, Step, latest};

use crate::connection::Failure;

/// PostgreSQL's side of the journal: sqlx's Postgres driver, times as
/// seconds in a float8 (the SQL makes a timestamp or an interval of it).
#[derive(Debug)]
pub(crate) struct Postgres;

impl fluxio_sql::Dialect for Postgres {
    type Db = sqlx::Postgres;
    type Failure = Failure;
    type Time = f64;

    fn instant(ms: u64) -> f64 {
        // milliseconds up to 2^53 are exact in an f64
        ms as f64 / 1000.0
    }

    fn span(d: Duration) -> f64 {
        d.as_secs_f64()
    }
}

/// The journal's writes on this store's connections.
pub(crate) type Journal = fluxio_sql::Journal<Postgres>;
