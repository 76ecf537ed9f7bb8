//! MySQL's side of the shared SQL store: the driver, anonymous
//! parameters, times as BIGINT milliseconds, which errors are connection
//! failures or timeouts, and the lease's acquisition, which draws its token
//! from a table of its own (MySQL has no sequences, and its upserts return
//! nothing).

use std::time::Duration;

use fluxio_sql::{BoxFuture, Failure, RunStatements};
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::mysql::{MySqlConnection, MySqlQueryResult};

/// MySQL's and MariaDB's dialect.
#[derive(Debug)]
pub(crate) struct MySql;

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl fluxio_sql::Dialect for MySql {
    const BACKEND: &'static str = crate::error::BACKEND;
    type Db = sqlx::MySql;
    type Failure = Failure;
    type Time = i64;

    fn instant(ms: u64) -> i64 {
        i64::try_from(ms).unwrap_or(i64::MAX)
    }

    fn span(d: Duration) -> i64 {
        millis(d)
    }

    fn param(_n: usize) -> String {
        "?".to_owned()
    }

    /// Times are BIGINT milliseconds, bound as they are.
    fn time_param(_n: usize) -> String {
        "?".to_owned()
    }

    /// Draws a token ([`draw_token`](RunStatements::draw_token): an
    /// AUTO_INCREMENT row), offers it to the lease row
    /// ([`acquire`](RunStatements::acquire), which keeps an unexpired
    /// lease's token), and reads back which token the row holds
    /// ([`token_of`](RunStatements::token_of)): the new one, or the lease
    /// is held. In the caller's transaction, whose upsert keeps the row
    /// locked until it ends.
    fn acquire<'c>(
        conn: &'c mut MySqlConnection,
        run: &'c RunStatements,
        key: &'c str,
        ttl: Duration,
    ) -> BoxFuture<'c, sqlx::Result<Option<i64>>> {
        Box::pin(async move {
            let (Some(draw), Some(token_of)) = (&run.draw_token, &run.token_of) else {
                return Err(sqlx::Error::Protocol(
                    "the MySQL store's statements draw their tokens".to_owned(),
                ));
            };
            let drawn = sqlx::query(draw).execute(&mut *conn).await?;
            let token = i64::try_from(drawn.last_insert_id())
                .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            sqlx::query(&run.acquire)
                .bind(key)
                .bind(token)
                .bind(millis(ttl))
                .execute(&mut *conn)
                .await?;
            let held: i64 = sqlx::query_scalar(token_of)
                .bind(key)
                .fetch_one(&mut *conn)
                .await?;
            Ok((held == token).then_some(token))
        })
    }
}

impl fluxio_sql::Server for MySql {
    fn session_ended(db: &dyn DatabaseError) -> bool {
        number(db).is_some_and(|n| SESSION_ENDED.contains(&n))
    }

    fn timed_out(db: &dyn DatabaseError) -> bool {
        number(db).is_some_and(|n| n == LOCK_WAIT_TIMEOUT || STATEMENT_TIMEOUTS.contains(&n))
    }

    fn rows_affected(done: &MySqlQueryResult) -> u64 {
        done.rows_affected()
    }
}

/// The server's error number (`ER_*`), for an error the server reported.
fn number(db: &dyn DatabaseError) -> Option<u16> {
    db.try_downcast_ref::<MySqlDatabaseError>()
        .map(MySqlDatabaseError::number)
}

/// `ER_LOCK_WAIT_TIMEOUT`: a row lock was not granted within
/// `innodb_lock_wait_timeout` (which the store sets to its timeout).
const LOCK_WAIT_TIMEOUT: u16 = 1205;
/// `ER_QUERY_TIMEOUT` (MySQL's `max_execution_time`) and
/// `ER_STATEMENT_TIMEOUT` (MariaDB's `max_statement_time`).
const STATEMENT_TIMEOUTS: [u16; 2] = [3024, 1969];
/// The server ends the session: `ER_SERVER_SHUTDOWN`, `ER_CONNECTION_KILLED`
/// (MariaDB's `KILL`), `ER_NEW_ABORTING_CONNECTION`, and MySQL's
/// `ER_CLIENT_INTERACTION_TIMEOUT`.
const SESSION_ENDED: [u16; 4] = [1053, 1927, 1184, 4031];
