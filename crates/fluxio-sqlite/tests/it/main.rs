//! The integration tests of fluxio-sqlite, in one binary (every test binary
//! links sqlx, SQLite, tokio and the rest once more).
//!
//! Each test works in a scratch directory of its own
//! (`fluxio_test_support::TempDir`). The tests of several processes run
//! one test of this binary again in a child process
//! (`fluxio_test_support::child`). The SQL stores' shared checks reach
//! SQLite through `sql::Sqlite`.

mod conformance;
mod error_kind;
mod fencing;
mod group;
mod journal;
mod list;
mod open;
mod read_only;
mod resume;
mod runs;
mod schema;
mod settings;
mod sql;
