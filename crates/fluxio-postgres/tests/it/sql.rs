//! How the SQL stores' shared checks (`fluxio_test_support::sql`) reach
//! PostgreSQL: a schema per test (`FLUXIO_POSTGRES_URL`), dropped when the
//! check passes (left to look at when it fails), and SQL on a small pool of
//! its own (`support::sql::Server`, in `support::postgres::Postgres`'s SQL).

use fluxio_test_support as support;

fluxio_test_support::sql_store!(Types: fluxio_postgres::PostgresStore,
    fluxio_postgres::PostgresStoreBuilder, fluxio_postgres::PostgresStoreError,
    "postgres", on = schema);

/// A schema of one test on the test server.
pub(crate) type Postgres = support::sql::Server<support::postgres::Postgres, Types>;
