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
//! .name("greetings")
//! .store(InMemoryStore::new())
//! .build()?;
//!
//! let out = pipeline.invoke("req-1", ctx! { "user_id" => 142u64 }?).await?.completed()?;
//! assert_eq!(out.get::<String>("greeting")?, "hello, user-142");
//! assert_eq!(out.get::<f64>("discount")?, 0.2);
//! assert_eq!(out.get::<String>("tier")?, "premium");
//!
//! // a finished run keeps its completed checkpoint: resuming it runs nothing
//! assert_eq!(pipeline.resume("req-1").await?.completed()?, out);
//! # Ok(()) }
//! ```
//!
//! ## Stages
//!
//! [`#[stage]`](macro@stage) marks an `async fn` (run on the async runtime),
//! a plain `fn` (run on tokio's blocking pool), a router (returning a
//! [`Route`]) or a stream stage (taking an [`Emitter`]); its documentation
//! lists the signatures, the error types a stage may return and the options
//! (`name`, `reads`, `writes`, `timeout`, `input`, `output`, `crate`).
//!
//! After the context, a stage takes any number of **resources**, shared
//! values such as a database pool, as [`Resource<T>`](Resource) arguments,
//! registered once with [`PipelineBuilder::resource`]
//! ([`testing::StageTest::resource`] for a stage under test):
//!
//! ```
//! use fluxio::{ctx, pipeline, stage, Context, Resource, StageResult};
//!
//! struct Prices { vat: f64 }
//!
//! #[stage]
//! async fn total(ctx: Context, prices: Resource<Prices>) -> StageResult {
//!     let net: f64 = ctx.get("net")?;
//!     Ok(ctx.set("total", net * (1.0 + prices.vat))?)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fluxio::Result<()> {
//! let pipeline = pipeline![total].resource(Prices { vat: 0.25 }).build()?;
//! let out = pipeline.invoke("order-1", ctx! { "net" => 100.0 }?).await?.completed()?;
//! assert_eq!(out.get::<f64>("total")?, 125.0);
//!
//! // forgetting `.resource(...)` is a build error naming the stage and the type
//! let err = pipeline![total].build().expect_err("`Prices` is not registered");
//! assert!(err.to_string().contains("stage `total` takes a `Resource<"));
//! # Ok(()) }
//! ```
//!
//! ## Pipelines
//!
//! [`pipeline!`] composes stages in sequence, in `parallel![...]` and
//! `fire_and_forget![...]` blocks, and in routing blocks after a router
//! (`router => { "x" => [a, b], "y" => c }`), as in the example above; its
//! documentation has the syntax. It returns a [`PipelineBuilder`], which
//! [`build`](PipelineBuilder::build)s the [`Pipeline`].
//!
//! ## Durable execution
//!
//! See [`Pipeline::invoke`], [`Pipeline::resume`], [`Pipeline::replay`] and
//! [`Pipeline::diff`]: a checkpoint before every stage, a failure checkpoint
//! at the failing stage, fresh runs by default, explicit resume, version
//! checks, one run per run id at a time, and a completed checkpoint at the end.
//!
//! ### Stopping a worker
//!
//! A run holds a lease on its run id while it runs. Only a crashed process
//! makes other workers wait for its leases to lapse: to stop on purpose, drop
//! the runs (abort their tasks), then await [`Pipeline::shutdown`], which
//! refuses new runs and returns once every lease of the pipeline's runs is
//! back in the store. Another process can resume the runs at once.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use fluxio::{pipeline, stage, Context, Error, InMemoryStore, StageInfo, StageResult};
//!
//! #[stage]
//! async fn export(ctx: Context) -> StageResult {
//!     // the first attempt takes an hour: long enough to be stopped
//!     if StageInfo::current().map_or(1, |info| info.attempt) == 1 {
//!         tokio::time::sleep(Duration::from_secs(3600)).await;
//!     }
//!     Ok(ctx.set("exported", true)?)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fluxio::Result<()> {
//! let store = Arc::new(InMemoryStore::new());
//! let worker = pipeline![export].name("export").store_arc(store.clone()).build()?;
//!
//! // the worker is told to stop while the run is inside `export`
//! let stopped = tokio::time::timeout(
//!     Duration::from_millis(100),
//!     worker.invoke("job-1", Context::new()),
//! )
//! .await;
//! assert!(stopped.is_err(), "the run was dropped");
//! worker.shutdown(Duration::from_secs(10)).await?;
//! let refused = worker.invoke("job-2", Context::new()).await;
//! assert!(matches!(refused, Err(Error::ShutDown { .. })));
//!
//! // another worker resumes the run at once: the lease is back
//! let next = pipeline![export].name("export").store_arc(store).build()?;
//! assert!(next.resume("job-1").await?.completed()?.get::<bool>("exported")?);
//! # Ok(()) }
//! ```
//!
//! A blocking stage (a plain `fn`) cannot be stopped once it started: its run
//! keeps the lease, and a [`Retry`](middleware::Retry) keeps its next
//! attempt, until the body returns, so no second copy of it ever runs beside
//! it.
//!
//! ## Custom middleware
//!
//! A [`Middleware`](middleware::Middleware) is an async trait: implement it
//! under [`#[async_trait]`](async_trait), re-exported here, so it needs no
//! dependency of your own.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use fluxio::middleware::{Middleware, Next};
//! use fluxio::stage::Output;
//! use fluxio::{async_trait, pipeline, stage, Context, Stage, StageResult};
//!
//! /// Counts stage calls.
//! #[derive(Debug, Default)]
//! struct Count(AtomicUsize);
//!
//! #[async_trait]
//! impl Middleware for Count {
//!     async fn call(&self, stage: &Stage, ctx: Context, next: Next<'_>) -> fluxio::Result<Output> {
//!         self.0.fetch_add(1, Ordering::Relaxed);
//!         next.run(ctx).await
//!     }
//! }
//!
//! #[stage]
//! async fn greet(ctx: Context) -> StageResult {
//!     Ok(ctx.set("greeting", "hello")?)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fluxio::Result<()> {
//! let p = pipeline![greet].middleware(Count::default()).build()?;
//! let out = p.invoke("run-1", Context::new()).await?.completed()?;
//! assert_eq!(out.get::<String>("greeting")?, "hello");
//! # Ok(()) }
//! ```

pub use fluxio_core::{
    BoxError, Changes, Checkpoint, CheckpointStore, Chunk, Context, Diff, DiffEntry, Durability,
    EmitError, Emitter, Error, History, InMemoryStore, Key, KeyName, Outcome, Pipeline,
    PipelineBuilder, Plan, PlannedStep, Resource, Result, ResumeOptions, Route, RunStatus,
    RunStream, Snapshot, Stage, StageCode, StageInfo, StageKind, StageMeta, StageResult,
    StartOptions, Step, StepStatus, StreamEvent, Structure, TerminalError, Value, async_trait,
    callback, child, context, ctx, durability, error, history, middleware, queue, recovery,
    schedule, shape, stage, stream, structure, testing, value,
};

/// Checkpoint stores: the [`CheckpointStore`] trait, the checkpoint it
/// keeps, the built-in [`InMemoryStore`], listing runs, and the limits
/// every store enforces. The store crates' types are at the crate root
/// (features `sqlite`, `postgres`, `mysql`, `redis`).
///
/// What only a store's author needs (the journal's helpers, the encoding's
/// magic and versions, how a run begins and ends in one call, the
/// conformance suite) is in [`backend`](store::backend).
pub mod store {
    pub use fluxio_core::store::{
        BranchRecord, Change, Checkpoint, CheckpointStore, Claimed, Compensation, CompensationStep,
        Delivery, DueFilter, DueRun, InMemoryStore, Lease, MAX_LEASE_TTL, MAX_LIST_LIMIT,
        MAX_PAYLOAD, MAX_RUN_ID_LEN, MAX_SIGNAL_PAYLOAD, MAX_UNTIL_MS, MAX_WAIT_NAME_LEN,
        MIN_LEASE_TTL, Mark, Payload, Pending, QueueEntry, RunFilter, RunPage, RunState, RunStatus,
        RunSummary, Signal, SignalState, StoreErrorKind, WaitName, cancel_with_children,
        open_child, retry_run, run_key, wake_run,
    };

    pub mod backend {
        //! For those who write a [`CheckpointStore`](super::CheckpointStore):
        //! the journal's decisions ([`append`], [`cut_point`],
        //! [`missing_predecessor`]), the encoding's [`MAGIC`] and format
        //! versions, a run's first and last writes in one call ([`Begin`],
        //! [`Begun`], and the call-by-call defaults), the checks every store
        //! applies to its input, URL redaction, and how a store decides a
        //! signal and a wait ([`deliver`], [`decide`]), a cancel, pause or
        //! unpause ([`marked_checkpoint`], [`fenced_refusal`]), and tells its
        //! watchers ([`RunEvents`]). The conformance suite
        //! every store passes is `fluxio_core::store::conformance`
        //! (fluxio-core's feature `test-util`).

        pub use fluxio_core::store::{
            Begin, Begun, COMPACT_EVERY, Decision, FORMAT_VERSION, MAGIC, OLDEST_FORMAT_VERSION,
            RedactedUrl, RunEvent, RunEventKind, RunEvents, Take, append, appended,
            begin_run_stepwise, cancelled_checkpoint, check_lease_ttl, check_run_id,
            check_wait_name, cut_point, decide, deliver, fenced_refusal, finish_run_stepwise,
            marked_checkpoint, missing_predecessor,
        };
    }
}
pub use fluxio_macros::{helper, pipeline, stage};

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

#[cfg(feature = "mysql")]
#[doc(inline)]
pub use fluxio_mysql::{MySqlStore, MySqlStoreBuilder, MySqlStoreError};

/// The limits a pipeline checks its input against (a run id's and a
/// pipeline name's length, a stream's buffer); a value's are
/// [`value::MAX_PAYLOAD`] and its neighbours, a store's in [`store`].
pub mod limits {
    pub use fluxio_core::pipeline::{MAX_PIPELINE_NAME_LEN, MAX_RUN_ID_LEN, MAX_STREAM_BUFFER};
}

/// The compiled form of a pipeline, as [`Pipeline::program`] and
/// [`Pipeline::explain`] show it. (The version encoding and the nodes
/// `pipeline!` builds are not part of the facade: generated code reaches them
/// through a hidden path.)
pub mod compile {
    pub use fluxio_core::compile::{Event, Instr, Program};
}

#[doc(hidden)]
pub use fluxio_core::__private;

/// The README's examples, compiled and run as doctests, so the README stays true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The operating guide's examples (`docs/operating.md`), run as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/operating.md")]
pub struct OperatingGuideDoctests;
