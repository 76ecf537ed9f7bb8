//! The `fluxio` binary, run for real (contract rule 23) against SQLite (a
//! temporary file), Redis (a key prefix of its own) and PostgreSQL (a schema
//! of its own), with runs seeded through real pipelines. Without a server
//! its tests skip loudly, or fail when `CI` is set.

mod common;
mod errors;
mod output;
mod scenario;
mod terminal;
mod ui;
mod untouched;
mod waits;
