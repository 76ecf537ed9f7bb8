//! # fluxio: streamable, durable pipelines
//!
//! Write plain functions, mark them `#[stage]`, compose them with
//! `pipeline![...]`, and get a pipeline that survives a crash: before every
//! stage fluxio checkpoints the context and the position in the program, and
//! [`Pipeline::resume`] continues a crashed or failed run from its last
//! checkpoint.
//!
//! ```
//! use fluxio::{ctx, pipeline, stage, Context, InMemoryStore, StageResult};
//!
//! #[stage]
//! async fn fetch_user(ctx: Context) -> StageResult {
//!     let id: u64 = ctx.get("user_id")?;
//!     Ok(ctx.set("name", format!("user-{id}"))?)
//! }
//!
//! #[stage(reads = ["name"], writes = ["greeting"])]
//! fn greet(ctx: Context) -> StageResult {
//!     // a plain `fn` runs on tokio's blocking pool
//!     let name: String = ctx.get("name")?;
//!     Ok(ctx.set("greeting", format!("hello, {name}"))?)
//! }
//!
//! #[stage]
//! async fn tier(ctx: Context) -> StageResult<fluxio::Route> {
//!     let id: u64 = ctx.get("user_id")?;
//!     let route = if id > 100 { "premium" } else { "standard" };
//!     Ok(fluxio::Route::to(route).with("tier", route)?)
//! }
//!
//! #[stage]
//! async fn discount(ctx: Context) -> StageResult {
//!     Ok(ctx.set("discount", 0.2)?)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fluxio::Result<()> {
//! let pipeline = pipeline![
//!     fetch_user,
//!     greet,
//!     tier => { "premium" => [discount], "standard" => greet },
//! ]
//! .store(InMemoryStore::new())
//! .build()?;
//!
//! let out = pipeline.invoke("req-1", ctx! { "user_id" => 142u64 }?).await?;
//! assert_eq!(out.get::<String>("greeting")?, "hello, user-142");
//! assert_eq!(out.get::<f64>("discount")?, 0.2);
//! assert_eq!(out.get::<String>("tier")?, "premium");
//!
//! // a finished run keeps its completed checkpoint: resuming it runs nothing
//! assert_eq!(pipeline.resume("req-1").await?, out);
//! # Ok(()) }
//! ```
//!
//! ## `#[stage]`
//!
//! On `async fn name(ctx: Context) -> Result<Context, E>` (runs on the async
//! runtime), on a plain `fn` with the same signature (runs on tokio's blocking
//! pool), returning `Result<fluxio::Route, E>` (a router), or on
//! `async fn name(ctx: Context, out: fluxio::Emitter) -> Result<Context, E>`
//! (a stream stage: see [`stream`] and [`Pipeline::stream`]). `E` is any
//! `std::error::Error + Send + Sync + 'static`; [`StageResult`] is
//! `Result<Context, BoxError>`. Options:
//!
//! | option | meaning |
//! |---|---|
//! | `name = "x"` | the stage's name in checkpoints, errors and `replay` (default: the function's name) |
//! | `reads = ["a", "b"]` | keys it reads; with `writes`, lets auto-parallelism fold it |
//! | `writes = ["c"]` | keys it writes; two parallel branches may not declare the same write |
//! | `timeout = "5s"` | fail with [`Error::StageTimeout`] after `ms`, `s`, `m` or `h` |
//! | `crate = "path"` | where the `fluxio` crate is, when renamed |
//!
//! The function stays callable as it was; `#[stage]` adds a hidden type of the
//! same name that `pipeline!` refers to, and hashes the function's tokens
//! (signature, attributes, body; not comments, doc comments or formatting)
//! into the pipeline's version.
//!
//! ## `pipeline!`
//!
//! A comma-separated sequence of: a stage; `parallel![a, [b, c]]` (branches
//! run concurrently from forks of the context and are merged; a merge
//! conflict is an error); `fire_and_forget![a, b]` (branches run in the
//! background, their errors are logged, nothing is merged); a router followed
//! by its routing block, `router => { "x" => [a, b], "y" => c }` (a body is a
//! stage, a list, or a nested `pipeline![...]`). It returns a
//! [`PipelineBuilder`]; `.store(...)` makes the pipeline durable,
//! `.auto_parallel(false)` switches folding off, `.build()` compiles it.
//!
//! ## Durable execution
//!
//! See [`Pipeline::invoke`], [`Pipeline::resume`], [`Pipeline::replay`] and
//! [`Pipeline::diff`]: a checkpoint before every stage, a failure checkpoint
//! at the failing stage, fresh runs by default, explicit resume, version
//! checks, one run per run id at a time, and a completed checkpoint at the end.

pub use fluxio_core::{
    BoxError, Checkpoint, CheckpointStore, Chunk, Context, Diff, DiffEntry, EmitError, Emitter,
    Error, InMemoryStore, Pipeline, PipelineBuilder, Result, RunStatus, RunStream, Route, Snapshot,
    Stage, StageInfo, StageKind, StageMeta, StageResult, StreamEvent, Value, callback, compile,
    context, ctx, error, middleware, stage, store, stream, testing, value, version,
};
pub use fluxio_macros::{pipeline, stage};

// The store crates: every public type at the root, inlined, so each has a
// page here and `fluxio::X` names it (the stores, their builders, their
// error types, their settings). Their constants (`DEFAULT_*`, `BACKEND`)
// stay in the store crates: the names are the same in each.
#[cfg(feature = "redis")]
#[doc(inline)]
pub use fluxio_redis::{RedisStore, RedisStoreBuilder, RedisStoreError};

#[cfg(feature = "postgres")]
#[doc(inline)]
pub use fluxio_postgres::{PostgresStore, PostgresStoreBuilder, PostgresStoreError};

#[cfg(feature = "sqlite")]
#[doc(inline)]
pub use fluxio_sqlite::{SqliteStore, SqliteStoreBuilder, SqliteStoreError, Synchronous};

#[doc(hidden)]
pub use fluxio_core::__private;
