//! A MySQL 8 / MariaDB 10.11+
//! [`CheckpointStore`](fluxio_core::store::CheckpointStore) for fluxio's
//! durable pipelines, on a sqlx pool.
//!
//! ```no_run
//! use fluxio::{Context, StageResult, ctx, pipeline, stage};
//! use fluxio_mysql::MySqlStore;
//!
//! #[stage]
//! async fn charge(ctx: Context) -> StageResult {
//!     Ok(ctx.set("charged", true)?)
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> fluxio::Result<()> {
//! // Creates the tables on first use (embedded migrations).
//! let store = MySqlStore::connect("mysql://app:secret@db.internal:3306/app").await?;
//! let pipeline = pipeline![charge].name("payments").store(store.clone()).build()?;
//! pipeline.invoke("order-42", ctx! { "amount" => 4200u64 }?).await?.completed()?;
//!
//! // Another worker, with its own store on the same database, can resume
//! // a crashed or failed run:
//! pipeline.resume("order-42").await?.completed()?;
//!
//! // Periodically, from one worker: reclaim completed runs past retention.
//! let purged = store.purge_expired().await?;
//! # let _ = purged;
//! # Ok(()) }
//! ```
//!
//! [`MySqlStore::builder`] sets the database (default: the URL's), the
//! table (default `fluxio_checkpoints`), the pool size, the retention of
//! completed runs (how long, and how many per pipeline) and the timeout;
//! [`MySqlStore::from_pool`] runs on a pool you already have.
//!
//! # Tables
//!
//! Six InnoDB tables in the database, named after the table (validated as
//! `^[a-z_][a-z0-9_]{0,53}$` and backquoted in SQL; values are always bind
//! parameters):
//!
//! - `<table>`: a row per run, mirroring its latest checkpoint (status:
//!   `running`, `failed`, `completed`, `cancelled`, `needs_attention`,
//!   `sleeping` or `waiting`; step, version, attempt, error, times) for
//!   fenced writes, listings and operators; the run's pipeline is a
//!   generated column; `due_at` (schema version 2), when a sleeping or
//!   waiting run is due, is the due index, with the key `(due_at, run_id)`.
//! - `<table>_steps`: the run's journal (contract rules 18 and 20), a row
//!   per checkpoint: the whole context, or the keys changed since the one
//!   before. Deleted with the run (a foreign key's cascade).
//! - `<table>_leases`: a row per run id: its fencing token and expiry.
//! - `<table>_tokens`: the fencing tokens drawn (AUTO_INCREMENT), so that a
//!   token grows per run id even across purged lease rows.
//! - `<table>_pipelines`: a row per pipeline, locked by a completion while
//!   it trims the pipeline's completed runs
//!   ([`keep_completed`](MySqlStoreBuilder::keep_completed)).
//! - `<table>_signals`: the runs' mailboxes (contract rule 26), a row per
//!   run and wait name (`VARBINARY`): the payload (`LONGBLOB`), when and by
//!   whom it was sent, and its state (`delivered`, `consumed`, `closed`).
//!   Deleted with the run (a foreign key's cascade).
//!
//! Keys are `VARBINARY`: a listing is in byte order (as Rust orders
//! strings) whatever the server's collation. Times are BIGINT milliseconds
//! on the database's clock, except a run's start (the client's). The
//! migrations' bookkeeping is `_fluxio_migrations` in the same database,
//! keyed by table name. The server commits each DDL statement on its own,
//! so a migration is written to run again after a crash half-way, and
//! concurrent runners queue on a named lock.
//!
//! # Guarantees
//!
//! As the Postgres store's, on the same shared body (`fluxio-sql`): every
//! call is one statement or one transaction at `READ COMMITTED`; a fenced
//! write locks the lease row and then the run's row (`FOR UPDATE`), so a
//! takeover or a cancel and a fenced write take turns, and a write under a
//! lease that is not current changes nothing (`LeaseLost`); a call that
//! may run twice is sent again once after a dead pooled connection, on a
//! checked one; the ones whose repeat would answer differently (acquire,
//! begin, finish, cancel, purge) never are. Leases are acquired with a
//! token drawn first and offered to the lease row by an upsert that keeps
//! an unexpired lease; the token is read back in the same transaction.
//!
//! A checkpoint's journal entry travels in one statement, which the server
//! takes up to its `max_allowed_packet` (16 MiB on MariaDB, 64 MiB on MySQL
//! 8 by default). The store reads that limit when it connects and refuses a
//! larger entry before sending it, with
//! [`Error::CheckpointTooLarge`](fluxio_core::Error::CheckpointTooLarge)
//! naming the run: the run keeps its last checkpoint. Raise the server's
//! setting for larger contexts.
//!
//! # Runs that wait
//!
//! Contract rules 25-28, as the Postgres store's (see its crate docs), on
//! the same statements of `fluxio-sql`: `due_at` written with every write
//! of the run's row, in its transaction (reading the mailbox for a waiting
//! run: 0 once a signal it waits for is delivered); the due runs in one
//! statement, one range of `(due_at, run_id)`, each lease looked up by its
//! key; `send_signal` and `take_signal` one transaction each, with the
//! run's row locked `FOR UPDATE` as its fenced writes lock it. The clock is
//! the server's (`UNIX_TIMESTAMP(SYSDATE(3))`). The server tells no
//! wake-ups: [`watch`](fluxio_core::store::CheckpointStore::watch) answers
//! `None`, and workers find due runs on their poll.
//!
//! A signal's payload travels in one statement too: past the server's
//! `max_allowed_packet` less 16 KiB it is refused before it is sent, with
//! [`Error::ValueTooLarge`](fluxio_core::Error::ValueTooLarge) naming
//! `signal payload` and the limit. On MariaDB's default (16 MiB) that is a
//! little under [`MAX_SIGNAL_PAYLOAD`](fluxio_core::store::MAX_SIGNAL_PAYLOAD)
//! (16 MiB): set `max_allowed_packet` to 17 MiB or more to take every
//! payload fluxio accepts (MySQL 8's default, 64 MiB, does). A row that
//! large could not be read back under the default either.
//!
//! Tables of schema version 1 gain the column, its key and the mailbox
//! table when a store of this build opens them (the `ALTER TABLE` runs
//! only when the column is missing, so a migration cut short runs again);
//! their runs are not due.
//!
//! # Listing
//!
//! [`list_runs`](fluxio_core::store::CheckpointStore::list_runs) reads the
//! run rows and the leases in one statement, no journal: every run, or a
//! pipeline's runs, by the primary key (a pipeline is the key range
//! `<pipeline>/` to `<pipeline>0`); the runs in one state by
//! `(status, run_id)`; a pipeline's runs in one state by
//! `(pipeline, status, run_id)`: each one range in key order, so a page
//! costs about the rows it shows.

mod builder;
mod dialect;
mod error;
mod migrate;
mod statements;
mod store;

#[cfg(test)]
mod plan;

pub use builder::{
    DEFAULT_COMPLETED_RETENTION, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE, DEFAULT_TIMEOUT,
    MAX_TIMEOUT,
};
pub use error::{BACKEND, MySqlStoreError};
pub use store::{MySqlStore, MySqlStoreBuilder};
