//! The integration tests of fluxio-postgres, in one binary (every test
//! binary links sqlx, tokio and the rest once more).
//!
//! The tests that need the server take it from `FLUXIO_POSTGRES_URL` (see
//! `fluxio_test_support::postgres`), each in a schema of its own; without a
//! server they are skipped loudly, or fail when `CI` is set. The SQL
//! stores' shared checks reach the server through `sql::Postgres`.

mod conformance;
mod connect;
mod error_kind;
mod journal;
mod list;
mod read_only;
mod runs;
mod schema;
mod secrets;
mod settings;
mod sql;
