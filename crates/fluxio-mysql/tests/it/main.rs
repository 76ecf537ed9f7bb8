//! The integration tests of fluxio-mysql, in one binary.
//!
//! The tests take the server from `FLUXIO_MYSQL_URL` (see
//! `fluxio_test_support::mysql`; MySQL 8 or MariaDB 10.11+), each in a
//! database of its own; without a server they are skipped loudly, or fail
//! when `CI` is set.

mod conformance;
mod limits;
mod sql;
