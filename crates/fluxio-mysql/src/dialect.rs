//! MySQL's side of the shared SQL store: the driver, anonymous
//! parameters, times as BIGINT milliseconds, which errors are connection
//! failures or timeouts, and the lease's acquisition, which draws its token
//! from a table of its own (MySQL has no sequences, and its upserts return
//! nothing).

use std::time::Duration;

use fluxio_core::store::RedactedUrl;
use fluxio_sql::server::Applied;
use fluxio_sql::{Params, ServerSql, Settings, Upsert};
use sqlx::error::DatabaseError;
use sqlx::migrate::Migrator;
use std::str::FromStr as _;

use sqlx::Executor as _;
use sqlx::mysql::{
    MySqlConnectOptions, MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlQueryResult,
};

use crate::MySqlStoreError;
use crate::builder::MAX_TIMEOUT;
use crate::statements::Names;

/// MySQL's and MariaDB's dialect.
#[derive(Debug)]
pub(crate) struct MySql;

impl fluxio_sql::Dialect for MySql {
    const BACKEND: &'static str = crate::error::BACKEND;
    type Db = sqlx::MySql;
    type Time = i64;
    const PARAMS: Params = Params::Anonymous;
    const UPSERT: Upsert = Upsert::OnDuplicateKey;
    const BOOKKEEPING: [&str; 5] = [
        "VARCHAR(64) CHARACTER SET ascii",
        "BIGINT",
        "VARBINARY(64)",
        "BIGINT NOT NULL",
        "ENGINE = InnoDB",
    ];

    /// Keys are bytes (`VARBINARY`): read as text.
    fn key_text(column: &str) -> String {
        format!("CONVERT({column} USING utf8mb4)")
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

    type Names = Names;
    const LONGEST_TIMEOUT: (Duration, &'static str) = (MAX_TIMEOUT, "a year");

    fn names(settings: &Settings) -> Result<Names, MySqlStoreError> {
        Names::new(settings.namespace.as_deref(), &settings.table)
    }

    fn statements(names: &Names) -> ServerSql {
        crate::statements::statements(names)
    }

    /// A pool on `url`, connecting lazily, whose sessions read committed rows
    /// (as Postgres's do: each statement of a transaction sees what committed
    /// before it, which the trims and the fenced writes rely on), wait for a
    /// row lock at most the timeout, and are read-only when the store is.
    fn url_pool(url: &str, settings: &Settings) -> fluxio_core::Result<(MySqlPool, RedactedUrl)> {
        let options =
            fluxio_sql::pool_options::<sqlx::MySql>(settings, "MySqlStoreBuilder::connect_lazy")?;
        let redacted = RedactedUrl::new(url);
        let connect = MySqlConnectOptions::from_str(url)
            .map_err(|e| fluxio_sql::server::url_error::<MySql>(&redacted, e))?;
        let lock_wait = settings.timeout.as_secs().max(1);
        let access = if settings.read_only {
            "READ ONLY"
        } else {
            "READ WRITE"
        };
        let session = format!(
            "SET SESSION innodb_lock_wait_timeout = {lock_wait}; \
             SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED, {access}"
        );
        let pool = options
            .after_connect(move |conn: &mut sqlx::MySqlConnection, _| {
                let session = session.clone();
                Box::pin(async move {
                    conn.execute(sqlx::raw_sql(&session)).await?;
                    Ok(())
                })
            })
            .connect_lazy_with(connect);
        Ok((pool, redacted))
    }

    const MIGRATOR: &'static Migrator = &crate::migrate::MIGRATOR;

    async fn applied(conn: &mut MySqlConnection, names: &Names) -> sqlx::Result<Option<Applied>> {
        if !crate::migrate::table_exists(conn, names, "_fluxio_migrations").await?
            || !crate::migrate::table_exists(conn, names, &names.table).await?
        {
            return Ok(None);
        }
        let applied = sqlx::query_as(&format!(
            "SELECT version, checksum FROM {} WHERE table_name = ?",
            names.migrations()
        ))
        .bind(&names.table)
        .fetch_all(&mut *conn)
        .await?;
        Ok(Some(applied))
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
