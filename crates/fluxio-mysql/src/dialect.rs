//! MySQL's side of the shared SQL store: the driver, anonymous
//! parameters, times as BIGINT milliseconds, which errors are connection
//! failures or timeouts, and the lease's acquisition, which draws its token
//! from a table of its own (MySQL has no sequences, and its upserts return
//! nothing).

use fluxio_sql::Params;
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::mysql::MySqlQueryResult;

/// MySQL's and MariaDB's dialect.
#[derive(Debug)]
pub(crate) struct MySql;

impl fluxio_sql::Dialect for MySql {
    const BACKEND: &'static str = crate::error::BACKEND;
    type Db = sqlx::MySql;
    type Time = i64;
    const PARAMS: Params = Params::Anonymous;
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
