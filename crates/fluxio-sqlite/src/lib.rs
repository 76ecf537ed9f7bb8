//! An SQLite [`CheckpointStore`](fluxio_core::store::CheckpointStore) for
//! fluxio's durable pipelines: embedded, file-backed, no server to run.
//!
//! ```no_run
//! use fluxio::{Context, StageResult, ctx, pipeline, stage};
//! use fluxio_sqlite::SqliteStore;
//!
//! #[stage]
//! async fn charge(ctx: Context) -> StageResult {
//!     Ok(ctx.set("charged", true)?)
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> fluxio::Result<()> {
//! // Creates the file and the tables on first use (embedded migrations).
//! let store = SqliteStore::connect("fluxio.db").await?;
//! let pipeline = pipeline![charge].name("payments").store(store.clone()).build()?;
//! pipeline.invoke("order-42", ctx! { "amount" => 4200u64 }?).await?.completed()?;
//!
//! // After a crash, this process or another one on the same host, with its
//! // own store on the same file, resumes the run from its last checkpoint:
//! pipeline.resume("order-42").await?.completed()?;
//!
//! // Periodically: reclaim completed runs past retention.
//! let purged = store.purge_expired().await?;
//! # let _ = purged;
//! # Ok(()) }
//! ```
//!
//! [`SqliteStore::builder`] sets the table (default `fluxio_checkpoints`),
//! the retention of completed runs (how long, and how many per pipeline),
//! the timeout of every call, SQLite's busy timeout and `synchronous`
//! setting, and the number of connections.
//!
//! # Where it fits
//!
//! - **One process, or several processes on one host** sharing the file: yes.
//!   Leases, fencing and migrations hold across processes (SQLite's file
//!   locks), so a second process can resume a run whose process crashed.
//!   Every process needs write access to the file and to its directory
//!   (SQLite keeps `<file>-wal` and `<file>-shm` beside it).
//! - **Several hosts**: no. Not even through a shared network filesystem
//!   (NFS, SMB, most cloud file shares): their locks and `fsync` are not
//!   what SQLite needs, and write-ahead logging needs shared memory that only
//!   processes of one host have. Use `fluxio-postgres` or `fluxio-redis`.
//!
//! # Durability
//!
//! The file is in write-ahead-logging mode (WAL; switched on when the store
//! opens it, and kept in the file).
//!
//! - A crash of the process (a panic, `kill -9`, an abort): every save that
//!   returned is in the file, whatever [`Synchronous`] says.
//! - A power loss or an operating-system crash: with
//!   [`Synchronous::Full`], the default, every save that returned survives
//!   (SQLite syncs the log at every commit), provided the filesystem and the
//!   disk honour `fsync` (a local disk with a journaling filesystem does;
//!   some virtual disks with write caching do not). With
//!   [`Synchronous::Normal`] the last commits may be rolled back (the run
//!   resumes from an earlier checkpoint and re-runs stages), in exchange for
//!   one `fsync` less per save. The database is never corrupted either way.
//! - Network filesystems: not supported (see above).
//!
//! # Group commit
//!
//! Every write of a store (a checkpoint, a lease, a cancel, a delete) goes
//! to one task of the store, which runs the writes that are waiting in one
//! `BEGIN IMMEDIATE` transaction and commits them together: concurrent runs share commits, so a durable
//! run's throughput is not one `fsync` per checkpoint however many runs
//! write. A write is answered only once the commit that holds it returned,
//! so what returned is as durable as [`Synchronous`] says above. Each write
//! decides alone: one that is refused (a lost lease, a cancelled run, a
//! missing predecessor) fails only its own caller (it decides before it
//! writes, or in a savepoint); a driver error in the middle of a write (a
//! full disk) fails its caller and the writes before it in the transaction;
//! when the transaction fails as a whole (it cannot begin, or its commit
//! fails), each of its writes fails with that error
//! ([`SqliteStoreError::GroupCommit`], or SQLite's error itself for a
//! transaction of one write). A write sees what the writes before it in its
//! transaction wrote, as if they had committed one by one; nothing else
//! sees them before the commit. A run begins
//! ([`begin_run`](fluxio_core::store::CheckpointStore::begin_run): the
//! lease, the old run deleted, the first checkpoint) and finishes
//! ([`finish_run`](fluxio_core::store::CheckpointStore::finish_run): the
//! last checkpoint, the release) in one write each, so a run of `n` stages
//! writes `n + 1` times.
//!
//! The fenced saves of distinct runs that wait next to each other (and the
//! beginnings with [`Begin::Replace`](fluxio_core::store::Begin::Replace)
//! and the ends of runs, when nothing is trimmed or deleted after them) run
//! as one command of ten statements to SQLite's thread, whatever their
//! number (up to 16): every gate (cancelled, lease, predecessor; for a
//! beginning, whether the lease is free) decided into a row of a temporary
//! table of the writing connection, then one statement for each kind of
//! write, for all of them. Each still decides alone, as above. When such a
//! command fails, which write it failed for is unknown: its transaction is
//! given up (the writes before it in the transaction fail), and its writes
//! run again one by one in the next one, where the error fails only its
//! own write.
//!
//! # Schema
//!
//! Four tables (the name is validated as `^[a-z_][a-z0-9_]{0,62}$` and
//! double-quoted in SQL; values are always bind parameters). Times are
//! milliseconds since the Unix epoch; `datetime(updated_at / 1000.0,
//! 'unixepoch')` shows one.
//!
//! ```sql
//! CREATE TABLE "<table>" (                -- one row per run
//!     run_id        TEXT    NOT NULL PRIMARY KEY,
//!     payload       BLOB    NOT NULL,  -- empty since schema version 2
//!     version       TEXT    NOT NULL,  -- the rest mirror the latest checkpoint,
//!     ip            INTEGER NOT NULL,  -- for operators and listings; never
//!     step          TEXT    NOT NULL,  -- read back as a checkpoint
//!     status        TEXT    NOT NULL,  -- running | failed | completed | cancelled
//!                                      -- | needs_attention | sleeping | waiting
//!                                      -- (fenced saves check it)
//!     error_message TEXT,
//!     created_at    INTEGER NOT NULL,  -- the run's start (the writer's clock)
//!     updated_at    INTEGER NOT NULL,  -- last write (SQLite's clock)
//!     expires_at    INTEGER,           -- completed runs only
//!     pipeline      TEXT GENERATED ALWAYS AS (...) VIRTUAL,
//!                                      -- run_id before its first `/` ('' if none)
//!     attempt       INTEGER NOT NULL DEFAULT 0,  -- schema version 4
//!     due_at        INTEGER            -- schema version 5: a sleeping or waiting
//!                                      -- run's due time
//! ) STRICT;                            -- + indexes on (pipeline, status, updated_at),
//!                                      --   (status, run_id), (pipeline, status, run_id),
//!                                      --   (due_at, run_id) WHERE due_at IS NOT NULL
//! CREATE TABLE "<table>_steps" (          -- the run's journal (rules 18, 20)
//!     run_id  TEXT    NOT NULL,
//!     seq     INTEGER NOT NULL,        -- Checkpoint::seq
//!     whole   INTEGER NOT NULL,        -- 1: the whole context; 0: a delta
//!     payload BLOB    NOT NULL,        -- exactly Checkpoint::entry_bytes()
//!     PRIMARY KEY (run_id, seq)
//! ) STRICT;                            -- + a partial index on (run_id, seq) WHERE whole = 1
//! CREATE TABLE "<table>_leases" (
//!     run_id     TEXT    NOT NULL PRIMARY KEY,
//!     token      INTEGER NOT NULL,     -- fencing token, unique
//!     expires_at INTEGER               -- NULL: released
//! ) STRICT;
//! CREATE TABLE "<table>_signals" (        -- the run's mailbox (rule 26)
//!     run_id  TEXT    NOT NULL,
//!     name    TEXT    NOT NULL,        -- the wait name
//!     payload BLOB    NOT NULL,        -- fluxio's value wire format
//!     sent_at INTEGER NOT NULL,
//!     sender  TEXT    NOT NULL,
//!     state   TEXT    NOT NULL,        -- delivered | consumed | closed
//!     PRIMARY KEY (run_id, name)
//! ) STRICT;
//! ```
//!
//! # The journal
//!
//! Each checkpoint of a run is a row of `<table>_steps`
//! ([`Checkpoint::entry_bytes`](fluxio_core::store::Checkpoint::entry_bytes)):
//! the whole context at checkpoint 0 and at each compaction point, and
//! otherwise only the keys changed since the checkpoint before it.
//!
//! - `save_fenced` is one `BEGIN IMMEDIATE` transaction: the run's row
//!   (cancelled: refused), the lease, the predecessor of a delta (missing:
//!   refused, nothing written), then the steps numbered `seq` or later
//!   deleted (a write sent again, or a fresh run), the run's row upserted,
//!   the step inserted, and the steps below
//!   [`cut_point`](fluxio_core::store::cut_point) deleted. It reads no
//!   payload and writes only the new step's: a delta costs the keys that
//!   changed, whatever the context's size.
//! - `load` is one statement: the steps from the run's last whole
//!   checkpoint on (the partial index finds it), folded by
//!   [`Checkpoint::from_entries`](fluxio_core::store::Checkpoint::from_entries).
//!   `history` reads every step.
//! - `save` (plain) replaces the run's steps with the checkpoint's journal
//!   in one transaction; `cancel` appends the cancelled checkpoint.
//! - The order of these statements is written once for both SQL stores, in
//!   the internal crate `fluxio-sql` (generic over the sqlx driver); the
//!   SQL text, the transactions and their locks are this crate's.
//! - Triggers delete a run's steps and its mailbox with its row, so
//!   `delete`, `delete_fenced`, `purge_expired` and the trim of completed
//!   runs stay one statement each and remove a run in one piece.
//!
//! **Runs of earlier builds** (schema version 1: one blob per run, formats
//! 1 to 3) are migrated, not read through a fallback: migration 2 copies
//! each row's blob, as it is, into step 0 (whole) and empties the row's
//! `payload`. A format 3 blob reads as a whole checkpoint numbered 0, so such
//! a run loads, resumes (its next checkpoint is a delta after step 0) and
//! cancels as any other. Builds before this one cannot read format 4
//! anyway: stop them before the upgrade.
//!
//! The SQL lives in `migrations/` as templates over the table names, is
//! embedded with `sqlx::migrate!`, and is applied by
//! [`connect`](SqliteStoreBuilder::connect) in one `BEGIN IMMEDIATE` transaction,
//! which takes the file's write lock first: processes that open a fresh
//! file at the same time queue instead of racing. The applied versions are
//! recorded in `_fluxio_migrations` by table name, so several stores (tables)
//! can share a file without touching an application's own
//! `_sqlx_migrations`. An edited migration is refused
//! ([`SqliteStoreError::MigrationChanged`]); versions newer than the build
//! are tolerated (migrations only add).
//!
//! A tool that only looks (the `fluxio` command's `runs list`, `show`,
//! `diff`) opens the file [read-only](SqliteStoreBuilder::read_only): no
//! file is created, nothing is migrated or written, and a file without the
//! store's tables ([`SqliteStoreError::NoTables`]) or with an older schema
//! than the build reads ([`SqliteStoreError::SchemaOutdated`]) is refused
//! with a typed error; a newer schema is read.
//!
//! # Runs that wait
//!
//! Contract rules 25-28, in `fluxio-sql`'s statements shared with the other
//! SQL stores; the decisions are fluxio-core's
//! ([`deliver`](fluxio_core::store::deliver),
//! [`decide`](fluxio_core::store::decide)), so every store answers alike.
//!
//! - **The due index** is the run row's `due_at` (schema version 5),
//!   written by every write of the row, in the checkpoint's transaction: a
//!   sleeping run's wake time, a waiting run's deadline, or 0 once a signal
//!   it waits for is delivered (the write reads the mailbox); NULL for any
//!   other run, and for a wait only a signal ends. Times past
//!   [`MAX_UNTIL_MS`](fluxio_core::store::MAX_UNTIL_MS) (year 9999) are
//!   stored as it. A run's checkpoint that parks it, or that is its first
//!   (which empties the key's mailbox), is written as `fluxio-sql` writes
//!   it rather than in the one-command fenced append (see "Group commit"):
//!   once per park, not per stage.
//!   [`due_runs`](fluxio_core::store::CheckpointStore::due_runs) is one
//!   statement on a reading connection: the rows with `due_at` at or before
//!   the worker's instant, of its pipelines, whose lease no worker holds,
//!   earliest first then in key order, one range of the partial index on
//!   `(due_at, run_id)` (named with `INDEXED BY`: without statistics
//!   SQLite would read the pipeline's index, every run of it).
//! - **The mailbox** is `<table>_signals`, a row per wait name.
//!   [`send_signal`](fluxio_core::store::CheckpointStore::send_signal) and
//!   [`take_signal`](fluxio_core::store::CheckpointStore::take_signal) are
//!   each one write of the group commit, under the file's write lock, so
//!   they take turns with the run's fenced writes and cancels; a waiting
//!   run signalled a name it waits for is due at once. `take_signal` is
//!   fenced as `save_fenced` is (`Cancelled`, `LeaseLost`). A run replaced
//!   under its key (a first checkpoint) starts with an empty mailbox; a
//!   plain `save` writes the checkpoint's own.
//! - **Wake-ups** ([`watch`](fluxio_core::store::CheckpointStore::watch))
//!   are told in process, by this store (and its clones) once the write
//!   committed: a run parked, ended or signalled. Other processes on the
//!   file find their runs through the due index, on their workers' poll.
//! - **The clock** ([`clock_ms`](fluxio_core::store::CheckpointStore::clock_ms))
//!   is SQLite's, the one its leases are judged by (see "Clock").
//!
//! Runs written by earlier builds (schema version 4) are not due and have
//! empty mailboxes; migration 5 adds the column, its index, the table and
//! its trigger. A signal payload is at most
//! [`MAX_SIGNAL_PAYLOAD`](fluxio_core::store::MAX_SIGNAL_PAYLOAD) (16 MiB),
//! which a `BLOB` holds.
//!
//! # Leases and fencing
//!
//! Ownership of a run id is a row of the lease table with a fencing token and
//! an expiry, changed by single conditional statements:
//!
//! - acquire inserts the row, or takes over a released or expired one, with a
//!   token one greater than the greatest in the table, and returns the token
//!   (nothing returned: [`Error::RunIdInUse`](fluxio_core::Error::RunIdInUse));
//!   purging never deletes the row with the greatest token, so tokens of a
//!   run id grow with every acquisition, even across purges;
//! - renew and release match the run id and the token;
//! - `save_fenced` / `delete_fenced` write only while the row holds this token
//!   and is unexpired, checked in the same transaction (`save_fenced`) or
//!   statement (`delete_fenced`) that writes
//!   ([`Error::LeaseLost`](fluxio_core::Error::LeaseLost) otherwise, the
//!   checkpoint untouched).
//!
//! SQLite lets one connection, of all processes, write to a file at a time,
//! and a writing statement (or a `BEGIN IMMEDIATE` transaction) takes that
//! lock before it reads, from the newest committed state. So the check of the lease and the write are one step: a
//! takeover commits entirely before a fenced write (which then sees the new
//! token and writes nothing) or entirely after it. No write of a previous
//! owner lands after the new owner took over.
//!
//! # Cancel
//!
//! [`cancel`](fluxio_core::store::CheckpointStore::cancel) (contract rule 14)
//! loads the run, and appends its cancelled checkpoint (the next step, an
//! empty delta) with `status = 'cancelled'` on the run's row, in one
//! `BEGIN IMMEDIATE` transaction, which holds the write lock throughout. A
//! fenced save reads the row's `status` first, in its own such transaction,
//! so the owner's next fenced save after a cancel, from any process, is
//! refused with [`Error::Cancelled`](fluxio_core::Error::Cancelled) and
//! changes nothing. A delete removes the run, cancel and all; a plain save
//! replaces it.
//!
//! # Clock
//!
//! Expiry is judged by SQLite's clock, `unixepoch('now', 'subsec')`, read
//! inside each statement (once per statement, after it has the write lock);
//! clients never send a time. A time taken by the client before the call
//! could be stale by the time the statement runs (queued behind other
//! writes, waiting up to the busy timeout, or a paused process), and the
//! store would then renew or write through a lease that had already expired.
//! Every process on the host reads the same system clock, so their leases
//! compare correctly; a step of the wall clock (a manual change, NTP
//! stepping) lengthens or shortens leases held at that moment, as it does
//! for the PostgreSQL store.
//!
//! # Retention
//!
//! A completed run's row gets `expires_at = now + retention` (default
//! 7 days, [`None`] keeps it forever); running, failed and cancelled runs
//! never expire.
//! From then on `load`, `history` and `exists` treat the run as absent, and
//! [`purge_expired`](SqliteStore::purge_expired) deletes it, steps and all.
//!
//! [`keep_completed(Some(n))`](SqliteStoreBuilder::keep_completed) keeps
//! only the `n` newest completed runs of each pipeline (contract rule 20):
//! the save (fenced or plain) that writes a run's completed checkpoint also
//! deletes, in its transaction, the completed runs of the run's pipeline
//! but the `n` whose rows were written last (`updated_at`, SQLite's clock;
//! expired ones are deleted too), each whole: the row, and its steps
//! through the trigger. Running, failed and cancelled runs are never
//! touched. The pipeline of a run is the part of its key before the first
//! `/` (empty for a bare run id); schema version 3 adds it as the column
//! `pipeline`, which SQLite generates from `run_id` (no backfill, and
//! older builds, which never name it, still write it right), with an index
//! on `(pipeline, status, updated_at)`, so the trim reads one range of the
//! index, however many runs the table holds. Both limits apply: a kept run
//! still expires after its `completed_retention`.
//!
//! # Listing
//!
//! [`list_runs`](fluxio_core::store::CheckpointStore::list_runs) (contract
//! rule 21) is one statement on a reading connection, one snapshot: the run
//! rows, each joined with its lease row where the lease is held (SQLite's
//! clock), filtered and ordered by key, one row more than the page (whether
//! there is a next page). It reads no journal: the run's row mirrors its
//! latest checkpoint's status, step, attempt, version, error and times,
//! written in the same transaction as the checkpoint, so a listing never
//! disagrees with `load`, even after a crash mid-write. A running run whose
//! lease is not held is abandoned. The statement is built by `fluxio-sql`
//! from the filter, every value a bind parameter.
//!
//! Key order is `run_id`'s, `BINARY` (byte order, as Rust orders strings),
//! and each filter is one range of an index already in that order, so a
//! page reads about as many rows as it shows however many runs the file
//! holds: a pipeline and a state, `(pipeline, status, run_id)`; a state,
//! `(status, run_id)`; a pipeline, the range of keys `<pipeline>/` to
//! `<pipeline>0` of the primary key; no filter, the primary key. A version
//! or a time alone, which no index covers, reads the runs in key order
//! until the page is full (100,000 runs to find none: one full scan,
//! 37 ms). The page of the 50 failed runs of a pipeline of 100,000 takes
//! 1.1 ms, less than a `SELECT count(*)` of the table (1.6 ms; a `load`:
//! 0.08 ms); its first page of 100 runs, 1.6 ms
//! (`cargo bench -p fluxio-sqlite --bench list`, on a loaded 2-core machine).
//!
//! `updated_at` is SQLite's clock at the row's last write (the filter
//! `updated_before_ms` compares with it); `created_at` is the checkpoint's.
//! `attempt` arrived with schema version 4: rows written before it, or by
//! older builds during a rolling upgrade (which never name the column), read
//! 0 until their run's next write. A row whose status this build does not
//! know is [`Error::CorruptCheckpoint`](fluxio_core::Error::CorruptCheckpoint)
//! naming the run. Completed runs past their retention are not listed.
//!
//! # Errors
//!
//! Every failure of sqlx or SQLite is
//! [`Error::Store`](fluxio_core::Error::Store) with `backend: "sqlite"` and
//! the [`sqlx::Error`] as source (a write that waited longer than the
//! [busy timeout](SqliteStoreBuilder::busy_timeout) for another connection's
//! write is SQLite's "database is locked"); failures of the store itself (an
//! invalid setting, a timeout, a changed migration) have a
//! [`SqliteStoreError`] as source. Lost leases are
//! [`Error::LeaseLost`](fluxio_core::Error::LeaseLost), contested run ids
//! [`Error::RunIdInUse`](fluxio_core::Error::RunIdInUse), undecodable
//! payloads [`Error::CorruptCheckpoint`](fluxio_core::Error::CorruptCheckpoint)
//! (the bytes stay in place). Every call is bounded by the store's
//! [timeout](SqliteStoreBuilder::timeout) (default 10 s), waiting for a
//! connection and for the write lock included: it never hangs.
//!
//! # Cancel safety
//!
//! Each call writes once, in a transaction of the store's writing task (see "Group commit"); the migrations run in transactions
//! of their own. Dropping a call's future before its write began skips the
//! write; after, the write completes or is rolled back with its
//! transaction: the file is left before or after it, never half-way.

mod builder;
mod connection;
mod error;
mod journal;
mod migrate;
mod statements;
mod store;
mod waits;
mod writer;

pub use builder::{
    DEFAULT_BUSY_TIMEOUT, DEFAULT_COMPLETED_RETENTION, DEFAULT_MAX_CONNECTIONS, DEFAULT_TABLE,
    DEFAULT_TIMEOUT, SqliteStoreBuilder, Synchronous,
};
pub use error::{BACKEND, SqliteStoreError};
pub use store::SqliteStore;
