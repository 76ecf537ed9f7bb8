//! The integration tests of fluxio-redis, in one binary (every test binary
//! links redis-rs, tokio and the rest once more).
//!
//! The tests that need the server take it from `FLUXIO_REDIS_URL` (see
//! `fluxio_test_support::redis`), each under a key prefix of its own;
//! without a server they are skipped loudly, or fail when `CI` is set.

mod cluster;
mod conformance;
mod error_kind;
mod journal;
mod keep;
mod list;
mod secrets;
mod store;
mod timeout;
mod tls;
mod trips;
