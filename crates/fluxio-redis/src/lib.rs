//! # fluxio-redis: a Redis checkpoint store for fluxio
//!
//! [`RedisStore`] keeps the checkpoints of durable pipelines in Redis, so a
//! run that failed or whose process died is resumed by any process that
//! connects to the same server, and two processes never execute the same run
//! id at once (leases with fencing tokens, kept in Redis).
//!
//! ```no_run
//! use fluxio::{Context, StageResult, ctx, pipeline, stage};
//! use fluxio_redis::RedisStore;
//!
//! #[stage]
//! async fn charge(ctx: Context) -> StageResult {
//!     let cents: u64 = ctx.get("cents")?;
//!     Ok(ctx.set("charged", cents)?)
//! }
//!
//! #[stage]
//! async fn receipt(ctx: Context) -> StageResult {
//!     Ok(ctx.set("receipt", "sent")?)
//! }
//!
//! # #[tokio::main]
//! # async fn main() -> fluxio::Result<()> {
//! let pipeline = pipeline![charge, receipt]
//!     .name("payments")
//!     .store(RedisStore::connect("redis://127.0.0.1:6379").await?)
//!     .build()?;
//!
//! match pipeline.invoke("order-42", ctx! { "cents" => 1999u64 }?).await {
//!     Ok(out) => println!("{}", out.get::<String>("receipt")?),
//!     // later, in this process or another one: continue from the failed stage
//!     Err(_) => {
//!         pipeline.resume("order-42").await?;
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! [`RedisStore::builder`] sets the checkpoint time-to-live (default one
//! day), the key prefix (default `fluxio:checkpoint`), the per-call timeout
//! (default 10 s) and, for `rediss://` URLs, a private CA.
//!
//! ## Key layout
//!
//! For a run id `R` and the key prefix `P`:
//!
//! | key | type | content | expiry |
//! |---|---|---|---|
//! | `P:R` | string | exactly [`Checkpoint::to_bytes`](fluxio_core::store::Checkpoint::to_bytes) | a completed run's: the store's `completed_retention`, set by the save that completed it; every other run's: none |
//! | `P.lease:R` | string | the fencing token of the current lease, in decimal | the lease's time-to-live, reset by every renewal |
//! | `P.epoch:R` | integer | the last token handed out for `R` | none while `P:R` has none; otherwise the longest of a day, `completed_retention` and the lease's, reset by every acquire, renewal and save |
//! | `P.nonce:R` | string | the nonce of the `acquire_lease` call in progress that took the lease | the lease's time-to-live; deleted when that call returns |
//! | `P.cancelled:R` | string | `1` while the checkpoint `P:R` is cancelled (contract rule 14) | none, like the cancelled checkpoint: deleted with it |
//!
//! The lease, epoch, nonce and cancel keys have `.` after the prefix where a
//! checkpoint key has `:`, so no run id's checkpoint can collide with them.
//! The nonce key exists only while an `acquire_lease` call is under way (or,
//! if that call was cut off, until it expires with the lease).
//!
//! ## What each call does
//!
//! Every call is one network round trip (`acquire_lease`: two; `cancel`:
//! two or more): a single
//! command, or a Lua script run with `EVALSHA` (loaded at connect time; a
//! server that lost the scripts, after a restart say, is sent them again
//! once). A call whose connection dropped is sent once more; see
//! [Reconnecting](#reconnecting).
//!
//! - `save`: `SET P:R <bytes>` (with `PX <completed_retention>` when the
//!   run completed), and `P.cancelled:R` set when the checkpoint is
//!   cancelled, deleted otherwise, and the epoch's expiry adjusted (one
//!   script); `load`: `GET`; `delete`: `DEL P:R P.cancelled:R` and an
//!   expiry for the epoch (one script); `exists`: `EXISTS`.
//! - `acquire_lease`: if `P.lease:R` exists, [`Error::RunIdInUse`](fluxio_core::Error::RunIdInUse);
//!   else `INCR P.epoch:R`, `SET P.lease:R <token> PX <lease ttl>` and
//!   `SET P.nonce:R <nonce> PX <lease ttl>` (a random nonce per call), and
//!   the lease carries that token. Tokens grow with every acquisition. A
//!   lease whose `P.nonce:R` is this call's was taken by this call's first
//!   attempt (see [Reconnecting](#reconnecting)): its token is returned and
//!   its expiry reset. A second round trip then deletes `P.nonce:R` if it is
//!   still this call's.
//! - `renew_lease`: `PEXPIRE P.lease:R` if it still holds the token, else
//!   [`Error::LeaseLost`](fluxio_core::Error::LeaseLost).
//! - `release_lease`: `DEL P.lease:R` if it still holds the token (else nothing).
//! - `save_fenced` / `delete_fenced`: the `SET` / `DEL` of `P:R` if
//!   `P.lease:R` still holds the token, else `LeaseLost` and the checkpoint
//!   untouched. Check and write are one script, so a worker whose lease
//!   expired (paused, cut off) cannot overwrite the new owner's checkpoint.
//!   `save_fenced` first refuses a run whose `P.cancelled:R` exists, with
//!   [`Error::Cancelled`](fluxio_core::Error::Cancelled), writing nothing.
//! - `cancel` (rule 14): `GET P:R`, decoded and decided here (a Lua script
//!   cannot read the status inside the payload), then one script that, only
//!   if `P:R` still holds the bytes read, writes the cancelled checkpoint and
//!   `P.cancelled:R`, with no expiry (a compare-and-set). If the
//!   owner's next checkpoint landed in between, the cancel reads again,
//!   within its one command timeout; once the script has run, every fenced
//!   save of the run, from any process, is refused.
//!
//! ## Reconnecting
//!
//! Clones of a store share one connection (redis-rs's `ConnectionManager`),
//! which learns that the connection died (the server restarted, the
//! connection was reset or killed) only when a call fails on it; it then
//! opens a new one for the next call. So a call that fails on the
//! connection, rather than with an error reply of the server, is sent once
//! more, on the new connection and within the same command timeout: it
//! succeeds if the server is back. That is safe for every call:
//!
//! - `save`, `load`, `delete`, `exists` and `release_lease` are idempotent;
//! - `renew_lease`, `save_fenced` and `delete_fenced` check the lease's token
//!   first, so a repeat after a first attempt that was applied does the same
//!   again (or reports `LeaseLost` only if the lease really was lost);
//! - `acquire_lease` stores its call's nonce next to the lease it takes, so
//!   a repeat recognizes a lease taken by its own first attempt and returns
//!   that lease instead of `RunIdInUse`;
//! - `cancel`'s script finds the cancelled bytes it wrote itself (they carry
//!   the time of the cancel) and answers done, not `RunFinished`.
//!
//! A call that times out is not sent again (the time is used up): it fails,
//! and the store replaces the connection for the next call.
//!
//! ## Guarantees, and their limits
//!
//! - Each call is atomic on the server; see [`RedisStore`]'s `# Cancel safety`.
//! - Each call ends within the command timeout, with a result or an
//!   [`Error::Store`](fluxio_core::Error::Store). After a timeout the store
//!   replaces its connection (redis-rs keeps a connection that never
//!   reported an error, so a half-open one would stay stuck), and it
//!   reconnects on its own after the server restarts or the network heals:
//!   the first call after that succeeds (see [Reconnecting](#reconnecting)).
//! - Leases and fencing are exactly as safe as **one Redis instance**. With
//!   replicas and failover (Sentinel, managed services), a promoted replica
//!   may lack writes the old primary acknowledged: a lease (two owners at
//!   once) or a checkpoint (a resume from an older stage). Checkpoints
//!   survive a restart only with persistence on; for no loss of
//!   acknowledged saves, use `appendonly yes` with `appendfsync always`.
//! - Lease expiry is measured on the Redis server's clock.
//! - **Redis Cluster is not supported**: the scripts touch several keys
//!   (lease, epoch and nonce, or lease, checkpoint and cancel mark), and this store does
//!   not speak the cluster protocol. A prefix that is a hash tag (`{fx}`:
//!   keys `{fx}:R`, `{fx}.lease:R`) would put all of a prefix's keys in one
//!   slot, were a cluster client ever added.
//! - Retention: a completed run's checkpoint expires
//!   [`completed_retention`](RedisStoreBuilder::completed_retention) after it
//!   completed (default one day; `None` keeps it). Every other run (running,
//!   failed, abandoned, cancelled) has no expiry: it stays until deleted, so
//!   it can always be resumed or inspected. A run's fencing epoch has no
//!   expiry either while its checkpoint has none; it expires a day (or the
//!   completed retention, if longer) after the checkpoint expires or is
//!   deleted.
//!
//! ## TLS
//!
//! `rediss://` URLs use rustls with the `ring` crypto provider (installed as
//! rustls's process default when the application has not installed one)
//! and Mozilla's root certificates, or the CA given to
//! [`RedisStoreBuilder::tls_root_certificates`].
//!
//! ## Errors
//!
//! Every failure of Redis or of the connection is
//! [`Error::Store`](fluxio_core::Error::Store) with backend `"redis"` and a
//! [`RedisStoreError`] as source, naming the operation, the key and the URL
//! with its password replaced by `***`. No `Debug`, `Display` or log line of
//! this crate contains the password.

mod builder;
mod connection;
mod error;
mod scripts;
mod store;

pub use builder::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_COMPLETED_RETENTION, DEFAULT_KEY_PREFIX, RedisStoreBuilder,
};
pub use error::{BACKEND, RedisStoreError};
pub use store::RedisStore;
