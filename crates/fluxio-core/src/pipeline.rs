//! Built pipelines: invoke, stream, resume, replay, diff, run_step, explain.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::callback::Callback;
use crate::compile::{Node, Program};
use crate::context::{Context, Lineage, Snapshot};
use crate::durability::{Durability, Writer};
use crate::error::{Error, Result};
use crate::interpret::tail::Tail;
use crate::interpret::{self, Durable};
use crate::middleware::Middleware;
use crate::stage::bodies::RunBodies;
use crate::stage::{Output, Resources};
use crate::store::{
    Begin, Checkpoint, CheckpointStore, InMemoryStore, LeaseTracker, Ownership, RunStatus, now_ms,
};
use crate::stream::{DEFAULT_STREAM_BUFFER, RunStream, STREAM_TX, StreamEvent};
use crate::structure::{Changes, Structure};
use crate::value::Value;
use crate::version::short_hex;

/// The longest run id accepted, in bytes.
pub const MAX_RUN_ID_LEN: usize = crate::store::MAX_RUN_ID_LEN;

/// The most chunks [`PipelineBuilder::stream_buffer`] accepts (1,048,576).
pub const MAX_STREAM_BUFFER: usize = 1 << 20;

/// What `pipeline!` returns: set the options, then [`build`](PipelineBuilder::build).
///
/// Defaults: not durable, auto-parallelism on, lease time-to-live 30 s.
#[derive(Debug)]
#[must_use = "a builder does nothing until `.build()`"]
pub struct PipelineBuilder {
    root: Vec<Node>,
    name: Option<String>,
    digest_plain: [u8; 32],
    digest_auto: [u8; 32],
    store: Option<Arc<dyn CheckpointStore>>,
    durable: bool,
    auto_parallel: bool,
    lease_ttl: Duration,
    durability: Durability,
    async_flush: Duration,
    delete_completed: bool,
    history_depth: Option<u32>,
    stream_buffer: usize,
    middleware: Vec<Arc<dyn Middleware>>,
    stage_middleware: Vec<(String, Arc<dyn Middleware>)>,
    callbacks: Vec<Arc<dyn Callback>>,
    resources: Resources,
}

impl PipelineBuilder {
    /// Used by `pipeline!` (through `__private::pipeline_builder`).
    pub(crate) fn new(root: Vec<Node>, digest_plain: [u8; 32], digest_auto: [u8; 32]) -> Self {
        PipelineBuilder {
            root,
            name: None,
            digest_plain,
            digest_auto,
            store: None,
            durable: false,
            auto_parallel: true,
            lease_ttl: Duration::from_secs(30),
            durability: Durability::Sync,
            async_flush: crate::durability::DEFAULT_ASYNC_FLUSH,
            delete_completed: false,
            history_depth: None,
            stream_buffer: DEFAULT_STREAM_BUFFER,
            middleware: Vec::new(),
            stage_middleware: Vec::new(),
            callbacks: Vec::new(),
            resources: Resources::default(),
        }
    }

    /// Names the pipeline (contract rule 10): stores keep its runs under
    /// `name/run_id` ([`run_key`]), so pipelines with
    /// different names never see, overwrite, delete or lease each other's
    /// runs, whatever their run ids. The name appears in the run's span, its
    /// callbacks, its errors and its stages' idempotency keys.
    ///
    /// A name is 1 to 64 ASCII letters, digits, `_`, `-` or `.`; `build`
    /// refuses anything else, naming the setting.
    ///
    /// ```
    /// # fn demo(p: fluxio_core::PipelineBuilder) -> fluxio_core::Result<fluxio_core::Pipeline> {
    /// p.name("orders").durable(true).build()
    /// # }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Registers `value` as the shared resource of type `T`, for the stages
    /// that take a [`Resource<T>`](crate::Resource) argument (registering a
    /// type again replaces the value). Every stage and every run share the
    /// one value; resources are part of neither the version nor the
    /// checkpoints. `build` fails when a stage takes a type not registered.
    ///
    /// ```
    /// # fn demo(p: fluxio_core::PipelineBuilder) -> fluxio_core::Result<fluxio_core::Pipeline> {
    /// struct Config { currency: &'static str }
    /// p.resource(Config { currency: "EUR" }).build()
    /// # }
    /// ```
    pub fn resource<T: std::marker::Send + Sync + 'static>(mut self, value: T) -> Self {
        self.resources.insert(value);
        self
    }

    /// Makes the pipeline durable, keeping checkpoints in `store`.
    pub fn store(self, store: impl CheckpointStore) -> Self {
        self.store_arc(Arc::new(store))
    }

    /// Like [`store`](Self::store), for a store that is already shared.
    pub fn store_arc(mut self, store: Arc<dyn CheckpointStore>) -> Self {
        self.store = Some(store);
        self.durable = true;
        self
    }

    /// Switches durable execution on or off. On without a store uses a new
    /// [`InMemoryStore`].
    pub fn durable(mut self, on: bool) -> Self {
        self.durable = on;
        self
    }

    /// Switches auto-parallelism on or off: folding consecutive stages whose
    /// declared `reads`/`writes` are disjoint into one parallel block. The
    /// version differs between the two modes, since the program differs.
    pub fn auto_parallel(mut self, on: bool) -> Self {
        self.auto_parallel = on;
        self
    }

    /// When a durable run's checkpoints are written (contract rule 24):
    /// [`Durability::Sync`] (the default: each one is durable before its
    /// stage starts), [`Durability::Async`] (sent in the background, all
    /// acknowledged before the run ends) or [`Durability::Exit`] (only the
    /// run's end is written). See [`crate::durability`] for what a crash
    /// costs in each.
    ///
    /// ```
    /// # fn demo(p: fluxio_core::PipelineBuilder) -> fluxio_core::Result<fluxio_core::Pipeline> {
    /// use fluxio_core::Durability;
    /// let pipeline = p.durability(Durability::Async).build()?;
    /// # Ok(pipeline) }
    /// ```
    pub fn durability(mut self, mode: Durability) -> Self {
        self.durability = mode;
        self
    }

    /// How long a checkpoint of an [`Async`](Durability::Async) run waits
    /// before it is sent (default
    /// [`DEFAULT_ASYNC_FLUSH`](crate::durability::DEFAULT_ASYNC_FLUSH), 2
    /// ms): a newer checkpoint made meanwhile replaces it, so quick stages
    /// cost no write. Zero sends each one as soon as the write before it is
    /// acknowledged. A crash may re-run the stages of about this long
    /// (plus a write's time) before it.
    ///
    /// # Errors
    /// [`build`](Self::build) refuses more than
    /// [`MAX_ASYNC_FLUSH`](crate::durability::MAX_ASYNC_FLUSH) (one hour)
    /// with [`Error::InvalidSetting`] naming `async_flush`.
    pub fn async_flush(mut self, wait: Duration) -> Self {
        self.async_flush = wait;
        self
    }

    /// How long a run's ownership of its run id lasts without renewal, for
    /// stores whose leases expire (the in-process default never expires).
    /// From [`MIN_LEASE_TTL`](crate::store::MIN_LEASE_TTL) (3 ms, the
    /// shortest a run can renew, every third of it) to
    /// [`MAX_LEASE_TTL`](crate::store::MAX_LEASE_TTL) (365 days): `build`
    /// refuses anything else with [`Error::InvalidSetting`].
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Deletes a durable run from the store as soon as it completed (a
    /// retention policy, contract rule 20; default off: a completed run is
    /// kept until the store's own retention drops it). The completed
    /// checkpoint is still written first, fenced, so a run cancelled in its
    /// last stage ends cancelled and is kept; then the run is deleted under
    /// its lease. Failed, cancelled and abandoned runs are always kept.
    ///
    /// A deleted run is gone: [`Pipeline::start`] of its run id runs it
    /// again, and [`Pipeline::resume`] finds nothing. Use it for runs whose
    /// result lives elsewhere once they complete.
    pub fn delete_completed(mut self, on: bool) -> Self {
        self.delete_completed = on;
        self
    }

    /// Bounds the history a durable run keeps (contract rule 20; default:
    /// every checkpoint until the run is removed). With `Some(n)`, the
    /// store drops the run's checkpoints before the last whole one at least
    /// `n` checkpoints back, so a run keeps between `n` and `n +`
    /// [`COMPACT_EVERY`](crate::store::COMPACT_EVERY) checkpoints of
    /// history, whatever its length and however often it is resumed or
    /// replayed. `Some(0)` counts as 1.
    pub fn history_depth(mut self, checkpoints: Option<u32>) -> Self {
        self.history_depth = checkpoints.map(|n| n.max(1));
        self
    }

    /// How many chunks [`Pipeline::stream`] buffers before a stream stage's
    /// [`Emitter::emit`](crate::Emitter::emit) waits for the consumer
    /// (default [`DEFAULT_STREAM_BUFFER`]; 0 counts as 1; `build` refuses
    /// more than [`MAX_STREAM_BUFFER`] with [`Error::InvalidSetting`]).
    pub fn stream_buffer(mut self, chunks: usize) -> Self {
        self.stream_buffer = chunks.max(1);
        self
    }

    /// Wraps every stage call in `middleware`. Several calls nest: the first
    /// one added is the outermost.
    ///
    /// ```
    /// # fn demo(p: fluxio_core::PipelineBuilder) -> fluxio_core::Result<fluxio_core::Pipeline> {
    /// use std::time::Duration;
    /// use fluxio_core::middleware::{Retry, Timeout};
    /// p.middleware(Retry::new(3)).middleware(Timeout(Duration::from_secs(5))).build()
    /// # }
    /// ```
    pub fn middleware(mut self, middleware: impl Middleware) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// Wraps the calls of the stage named `stage` in `middleware`, inside the
    /// pipeline-wide middleware. `build` fails when no stage has that name.
    pub fn stage_middleware(
        mut self,
        stage: impl Into<String>,
        middleware: impl Middleware,
    ) -> Self {
        self.stage_middleware
            .push((stage.into(), Arc::new(middleware)));
        self
    }

    /// Adds a callback that observes every run (see [`Callback`]).
    pub fn callback(mut self, callback: impl Callback) -> Self {
        self.callbacks.push(Arc::new(callback));
        self
    }

    /// Compiles the pipeline.
    ///
    /// # Errors
    /// [`Error::Build`] when the shape is invalid (see [`Program::compile`]),
    /// stage middleware names a stage the pipeline does not have, or a stage
    /// takes a resource type that is not registered (naming the stage and
    /// the type); [`Error::InvalidSetting`] for a lease time-to-live or
    /// stream buffer out of range, or a middleware whose
    /// [`check`](crate::middleware::Middleware::check) refuses its settings.
    pub fn build(self) -> Result<Pipeline> {
        crate::store::check_lease_ttl(self.lease_ttl)?;
        let stage_middleware = self.stage_middleware.iter().map(|(_, m)| m);
        for m in self.middleware.iter().chain(stage_middleware) {
            m.check()?;
        }
        if self.async_flush > crate::durability::MAX_ASYNC_FLUSH {
            return Err(Error::InvalidSetting {
                setting: "async_flush",
                message: format!(
                    "{:?} is longer than the longest wait, {:?}",
                    self.async_flush,
                    crate::durability::MAX_ASYNC_FLUSH
                ),
            });
        }
        let name = self.name.clone().unwrap_or_default();
        if self.name.is_some() {
            check_pipeline_name(&name)?;
        } else if self.durable {
            return Err(Error::InvalidSetting {
                setting: "name",
                message: "a durable pipeline needs a name, which scopes its run ids in the store \
                          (contract rule 10): add `.name(\"orders\")` before `.build()`"
                    .to_owned(),
            });
        }
        if self.stream_buffer > MAX_STREAM_BUFFER {
            return Err(Error::InvalidSetting {
                setting: "stream_buffer",
                message: format!(
                    "{} chunks is more than the most a stream buffers, {MAX_STREAM_BUFFER}",
                    self.stream_buffer
                ),
            });
        }
        let mut program = Program::compile(&self.root, self.auto_parallel)?;
        program.callbacks = self.callbacks.into();
        let resources = Arc::new(self.resources);
        for stage in &mut program.stages {
            if let Some(req) = stage.missing_resource(&resources) {
                return Err(stage.missing_resource_error(
                    &req,
                    &format!(
                        "register one with `.resource(value)` before `.build()` (registered: {})",
                        resources.describe()
                    ),
                ));
            }
            *stage = stage.clone().with_resources(Arc::clone(&resources));
        }
        for (name, _) in &self.stage_middleware {
            if program.stage(name).is_none() {
                return Err(Error::build(format!(
                    "middleware for unknown stage `{name}`; stages: {}",
                    program.stage_names().join(", ")
                )));
            }
        }
        if !self.middleware.is_empty() || !self.stage_middleware.is_empty() {
            program.middleware = program
                .stages
                .iter()
                .map(|stage| {
                    let own = self
                        .stage_middleware
                        .iter()
                        .filter(|(n, _)| n == stage.name())
                        .map(|(_, m)| Arc::clone(m));
                    self.middleware
                        .iter()
                        .cloned()
                        .chain(own)
                        .collect::<Vec<_>>()
                        .into()
                })
                .collect();
        }
        let digest = if self.auto_parallel {
            self.digest_auto
        } else {
            self.digest_plain
        };
        let store = match (self.durable, self.store) {
            (false, _) => None,
            (true, Some(s)) => Some(s),
            (true, None) => Some(Arc::new(InMemoryStore::new()) as Arc<dyn CheckpointStore>),
        };
        program.version = Arc::from(short_hex(&digest));
        let structure = Arc::new(crate::compile::structure_of(&self.root, self.auto_parallel));
        Ok(Pipeline {
            inner: Arc::new(Inner {
                program: Arc::new(program),
                name,
                structure,
                held: Vec::new(),
                version: short_hex(&digest),
                auto_parallel: self.auto_parallel,
                store,
                lease_ttl: self.lease_ttl,
                durability: self.durability,
                async_flush: self.async_flush,
                delete_completed: self.delete_completed,
                history_depth: self.history_depth,
                stream_buffer: self.stream_buffer,
                leases: LeaseTracker::default(),
            }),
        })
    }
}

/// A compiled pipeline. Cheap to clone; share one between tasks.
///
/// Built by `fluxio::pipeline![...]` and [`PipelineBuilder::build`]; the
/// `fluxio` crate's documentation has a runnable tour.
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    program: Arc<Program>,
    /// Empty when unnamed.
    name: String,
    structure: Arc<Structure>,
    /// Older versions of this pipeline, for the runs they wrote (rule 13).
    held: Vec<Pipeline>,
    version: String,
    auto_parallel: bool,
    store: Option<Arc<dyn CheckpointStore>>,
    lease_ttl: Duration,
    durability: Durability,
    async_flush: Duration,
    delete_completed: bool,
    history_depth: Option<u32>,
    stream_buffer: usize,
    /// The leases of this pipeline's runs, for `shutdown`.
    leases: LeaseTracker,
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("name", &self.inner.name)
            .field("version", &self.inner.version)
            .field("stages", &self.inner.program.stage_names())
            .field("durable", &self.inner.store.is_some())
            .finish()
    }
}

use crate::store::{check_run_id, run_key};

/// The longest pipeline name [`PipelineBuilder::name`] accepts, in bytes.
pub const MAX_PIPELINE_NAME_LEN: usize = 64;

/// A pipeline name: 1 to [`MAX_PIPELINE_NAME_LEN`] ASCII letters, digits,
/// `_`, `-` or `.` (no `/`, so `name/run_id` keys cannot collide).
fn check_pipeline_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        "it is empty".to_owned()
    } else if name.len() > MAX_PIPELINE_NAME_LEN {
        format!("it is longer than {MAX_PIPELINE_NAME_LEN} bytes")
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        format!("{c:?} is not an ASCII letter, digit, `_`, `-` or `.`")
    } else {
        return Ok(());
    };
    let shown: String = name.chars().take(MAX_PIPELINE_NAME_LEN).collect();
    Err(Error::InvalidSetting {
        setting: "name",
        message: format!("pipeline name {shown:?}: {problem}"),
    })
}

/// How [`Pipeline::resume_with`] may continue a run.
///
/// ```
/// use fluxio_core::ResumeOptions;
/// let opts = ResumeOptions::new().allow_code_changes(true);
/// assert!(opts.allows_code_changes());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResumeOptions {
    allow_code_changes: bool,
}

impl ResumeOptions {
    /// The defaults: a checkpoint resumes only on the version that wrote it
    /// (or a held older version, see [`Pipeline::hold`]).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets a checkpoint written by other code resume on this pipeline's
    /// code when only stage bodies changed: same stages, same shape (rule
    /// 13). The fix-a-bug-then-resume case: the run continues at its step
    /// with the new code. A checkpoint of another shape, or one that does
    /// not record its structure (format 1), is still refused.
    #[must_use]
    pub fn allow_code_changes(mut self, on: bool) -> Self {
        self.allow_code_changes = on;
        self
    }

    /// Whether [`allow_code_changes`](Self::allow_code_changes) is on.
    #[must_use]
    pub fn allows_code_changes(&self) -> bool {
        self.allow_code_changes
    }
}

/// How a run continues from its stored checkpoint.
#[derive(Clone, Copy, Debug)]
enum Continue<'a> {
    /// From the checkpoint; a completed run returns its final context.
    Resume,
    /// From the step's checkpoint `from` (runs again even when the run
    /// completed) with the context the run had there (rule 20), or,
    /// without a step, like `Resume`.
    Replay { from: Option<&'a Checkpoint> },
}

/// A durable run needs a tokio runtime (its lease is renewed by a timer
/// task): say so with a typed error instead of panicking inside the lease code.
fn check_runtime(what: &str, run_id: &str) -> Result<()> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Ok(()),
        Err(_) => Err(Error::NoRuntime {
            operation: format!("{what} of run `{run_id}`"),
        }),
    }
}

impl Pipeline {
    /// The version: 12 hex characters of a sha256 digest computed at compile
    /// time from the pipeline's shape and its stages' code.
    #[must_use]
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// Whether runs are checkpointed.
    #[must_use]
    pub fn is_durable(&self) -> bool {
        self.inner.store.is_some()
    }

    /// The checkpoint store of a durable pipeline.
    #[must_use]
    pub fn store(&self) -> Option<&Arc<dyn CheckpointStore>> {
        self.inner.store.as_ref()
    }

    /// The compiled program.
    #[must_use]
    pub fn program(&self) -> &Program {
        &self.inner.program
    }

    /// Runs the pipeline on `input` as a fresh run.
    ///
    /// Durable pipelines take ownership of `run_id` for the whole run, delete
    /// any checkpoint stored for it (a fresh run never continues old state),
    /// save a checkpoint before every stage, a failure checkpoint pointing at
    /// a failing stage, and a completed checkpoint at the end. Pipelines that
    /// are not durable use `run_id` only in logs.
    ///
    /// # Errors
    /// The failing stage's error ([`Error::Stage`] with the stage's own error
    /// as source, [`Error::StagePanic`], [`Error::StageTimeout`]);
    /// [`Error::Cancelled`] when the run was [cancelled](Self::cancel) while
    /// it ran (it stopped before its next stage);
    /// [`Error::RunIdInUse`] when another run holds `run_id`;
    /// [`Error::ShutDown`] once the pipeline is [shut down](Self::shutdown);
    /// [`Error::MergeConflict`], [`Error::UnknownRoute`], [`Error::Store`],
    /// [`Error::InvalidRunId`].
    ///
    /// # Cancel safety
    /// Dropping the future stops the run at its next `.await`; the last saved
    /// checkpoint stays, so the run can be resumed, and the lease on the run
    /// id is released by a background task, which
    /// [`shutdown`](Self::shutdown) waits for (if the task cannot run or the
    /// store fails, the lease expires). A blocking stage body that is running
    /// cannot be stopped: it finishes on the blocking pool and the run keeps
    /// its lease until it returns, so no other run of the id starts beside it.
    pub async fn invoke(&self, run_id: &str, input: Context) -> Result<Context> {
        let key = self.key(run_id)?;
        let span = self.span(&key, false);
        async move {
            // stage timeouts, blocking stages and fire-and-forget branches
            // need tokio's timer and pools, durable runs its lease renewal
            check_runtime("invoke", &key)?;
            let Some(store) = &self.inner.store else {
                self.inner.leases.check_open(&key)?;
                let program = &self.inner.program;
                let run = interpret::run(program, &key, 0, input.clear_written(), None);
                // only blocking bodies read the run's `RunBodies`
                if !program.blocking {
                    return run.await;
                }
                return RunBodies::scope(None, run).await;
            };
            // rule 24: `Exit` writes no first checkpoint, so it only takes
            // the lease, and clears what is stored (a cancel mark too)
            if self.inner.durability == Durability::Exit {
                return Box::pin(self.invoke_owned(store, run_id, &key, input)).await;
            }
            match self
                .begin(store, (run_id, &key), &input.snapshot(), Begin::Replace)
                .await?
            {
                Fresh::Ran(result) => result,
                // `Replace` always begins; a program with no stage took
                // the lease only
                Fresh::Stored(owner) => {
                    Box::pin(self.run_owned(store, owner, run_id, &key, input)).await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// `invoke` of an `Exit` pipeline: the lease only, then the run (boxed
    /// by the caller: not the common case, and large).
    async fn invoke_owned(
        &self,
        store: &Arc<dyn CheckpointStore>,
        run_id: &str,
        key: &str,
        input: Context,
    ) -> Result<Context> {
        let owner = self.own(store, key).await?;
        self.run_owned(store, owner, run_id, key, input).await
    }

    /// `invoke` holding the run's lease with nothing written yet: the
    /// stored run goes, then the run runs from its first stage, and the
    /// lease is given back.
    async fn run_owned(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: Ownership,
        run_id: &str,
        key: &str,
        input: Context,
    ) -> Result<Context> {
        let result = async {
            store.delete_fenced(key, owner.lease()).await?;
            self.run_fresh(store, &owner, run_id, key, input).await
        }
        .await;
        owner.release().await;
        result
    }

    /// Starts the run `run_id` on `input`, or, when the run was started
    /// before, carries it to its end once (contract rule 11): a client may
    /// call it any number of times for one run id and the run's stages run
    /// as if it had been called once. What is stored decides:
    ///
    /// - nothing: the run starts fresh on `input`, like
    ///   [`invoke`](Self::invoke);
    /// - a completed run: its stored final context is returned and no stage
    ///   runs, whatever version of the pipeline completed it (a result does
    ///   not depend on the code that reads it back: a client retrying
    ///   yesterday's request after a redeploy gets yesterday's result);
    /// - a failed run, or a running one whose owner's lease has lapsed (a
    ///   crashed worker): it is resumed, like [`resume`](Self::resume);
    ///   `input` is not used. A run of other code is resumed only on a
    ///   [held](Self::hold) version that wrote it: `start` never opts in to
    ///   code changes, so a run of code this pipeline does not hold is
    ///   [`Error::CheckpointVersion`], with nothing run and nothing written
    ///   (the caller may then [`resume_with`](Self::resume_with) it);
    /// - a running run whose owner holds its lease: [`Error::RunIdInUse`];
    /// - a [cancelled](Self::cancel) run: [`Error::Cancelled`], running
    ///   nothing.
    ///
    /// The decision is taken while holding the run's lease, so it holds
    /// across processes: of any number of concurrent calls, one runs the
    /// stages and the others get [`Error::RunIdInUse`] or, once it has
    /// completed, its result. A completed run's result is read without
    /// taking the lease, so concurrent starts of a finished run all get it.
    /// Like `resume`, it adopts a run stored before
    /// pipelines had names and continues a run of a [held](Self::hold)
    /// version on that version.
    ///
    /// ```
    /// # use fluxio_core::{Context, InMemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![...]` builds real ones; this one is empty
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// let input = Context::new().set("cents", 1999u64)?;
    /// let first = pipeline.start("order-42", input.clone()).await?;
    /// // a client retrying the request gets the same result; nothing runs again
    /// let again = pipeline.start("order-42", input).await?;
    /// assert_eq!(first, again);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store (nothing could
    /// tell a repeated call from the first); [`Error::RunIdInUse`] as above;
    /// [`Error::CheckpointVersion`] when the stored run, not completed, was
    /// written by code this pipeline does not run; the errors of [`invoke`](Self::invoke) and
    /// [`resume`](Self::resume).
    ///
    /// # Cancel safety
    /// As [`invoke`](Self::invoke).
    pub async fn start(&self, run_id: &str, input: Context) -> Result<Context> {
        let key = self.key(run_id)?;
        let store = self.require_store("start")?;
        check_runtime("start", &key)?;
        let span = self.span(&key, false);
        async {
            // a completed run is final: its result needs no lease, so
            // repeated starts of it never contend for one, and it does not
            // depend on code, so it is returned whatever version wrote it
            if let Some(cp) = store.load(&key).await? {
                if cp.status == RunStatus::Completed {
                    return Ok(cp.context.to_context());
                }
            } else {
                // nothing stored under the key (and, for a named pipeline,
                // no run of before names under the bare id to adopt): the
                // lease and the first checkpoint in one call, which leaves a
                // run stored meanwhile by a concurrent start alone
                // (`Exit` writes no first checkpoint: the lease alone, below)
                let exit = self.inner.durability == Durability::Exit;
                let unnamed = self.inner.name.is_empty();
                if !exit && (unnamed || !store.exists(run_id).await?) {
                    match self
                        .begin(store, (run_id, &key), &input.snapshot(), Begin::IfAbsent)
                        .await?
                    {
                        Fresh::Ran(result) => return result,
                        Fresh::Stored(owner) => {
                            let result = self.start_owned(store, &owner, run_id, &key, input).await;
                            owner.release().await;
                            return result;
                        }
                    }
                }
            }
            self.owning(store, &key, async |owner| {
                self.start_owned(store, owner, run_id, &key, input).await
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// `start` holding the run's lease: the stored run decides (see
    /// [`start`](Self::start)); with none, the run starts on `input`.
    async fn start_owned(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        key: &str,
        input: Context,
    ) -> Result<Context> {
        let options = ResumeOptions::new();
        match self
            .load_or_adopt(store, owner, run_id, Continue::Resume, options)
            .await?
        {
            None => self.run_fresh(store, owner, run_id, key, input).await,
            // completed since `start` looked (or adopted): final on any code
            Some(cp) if cp.status == RunStatus::Completed => Ok(cp.context.to_context()),
            Some(cp) => {
                self.continue_stored(store, owner, run_id, cp, Continue::Resume, options)
                    .await
            }
        }
    }

    /// A fresh run of `key` on `input` that takes its lease and writes its
    /// first checkpoint in one call ([`CheckpointStore::begin_run`], rule
    /// 24), then runs to its end and gives the lease back with its last
    /// checkpoint. [`Fresh::Stored`] when it did not begin: `begin` is
    /// [`Begin::IfAbsent`] and a run is stored, or the program has no stage
    /// (nothing to write before one); the caller then holds the lease.
    async fn begin(
        &self,
        store: &Arc<dyn CheckpointStore>,
        (run_id, key): (&str, &str),
        input: &Snapshot,
        begin: Begin,
    ) -> Result<Fresh> {
        // the first write in an `async fn` of its own: its checkpoint and
        // journal are gone before the run starts, instead of staying in
        // this future's state for as long as the run goes on (rule 24)
        let (owner, (tail, created, took)) =
            match self.write_first(store, (run_id, key), input, begin).await? {
                (owner, Some(first)) => (owner, first),
                (owner, None) => return Ok(Fresh::Stored(owner)),
            };
        let durable = self.durable(store, &owner, (run_id, key), created, None, tail);
        *durable
            .prewritten
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(took);
        let result = self.run_at(&owner, &durable, 0, input).await;
        drop(durable);
        owner.release().await;
        Ok(Fresh::Ran(result))
    }

    /// [`begin`](Self::begin)'s first write: the lease, and the first
    /// checkpoint with it. Returns the lease, and, when the checkpoint was
    /// written, the run's journal after it, its creation time and how long
    /// the write took; `None` when it was not (a run is stored and `begin`
    /// is [`Begin::IfAbsent`], or the program has no stage).
    async fn write_first(
        &self,
        store: &Arc<dyn CheckpointStore>,
        (run_id, key): (&str, &str),
        input: &Snapshot,
        begin: Begin,
    ) -> Result<(Ownership, Option<(Tail, u64, Duration)>)> {
        let created = now_ms();
        let mut tail = Tail::fresh(self.inner.history_depth);
        let meta = [
            self.inner.name.as_str(),
            run_id,
            self.inner.version.as_str(),
        ];
        let first = interpret::first_checkpoint(
            &self.inner.program,
            meta,
            &self.inner.structure,
            created,
            input,
            &mut tail,
        );
        let (ttl, leases) = (self.inner.lease_ttl, &self.inner.leases);
        let Some(first) = first else {
            return Ok((Ownership::acquire(store, key, ttl, leases).await?, None));
        };
        let (seq, context) = (first.seq, first.context.clone());
        let started = Instant::now();
        let (owner, begun) = Box::pin(Ownership::begin(store, first, ttl, leases, begin)).await?;
        if !begun {
            return Ok((owner, None));
        }
        // the run's context takes its epoch at its first `CHECKPOINT`,
        // which finds this one written (`Durable::prewritten`)
        tail.advance(seq, context, true, 0, &self.inner.version, Lineage::NONE);
        Ok((owner, Some((tail, created, started.elapsed()))))
    }

    /// Runs the pipeline from its first stage on `input`, under `owner`'s
    /// lease on `key`, with nothing stored for `key`.
    async fn run_fresh(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        key: &str,
        input: Context,
    ) -> Result<Context> {
        self.run_from(store, owner, (run_id, key), 0, &input.snapshot())
            .await
    }

    /// Runs the pipeline on `input` as a fresh run, like
    /// [`invoke`](Self::invoke), on a task of its own, and streams the chunks
    /// of its stream stages (see [`crate::stream`]) as they are emitted.
    ///
    /// The stream yields [`StreamEvent::Chunk`]s in emission order, then
    /// [`StreamEvent::Done`] with the final context, or one `Err` (any error
    /// of `invoke`) when the run fails, then ends. Chunks pass through a
    /// bounded buffer ([`PipelineBuilder::stream_buffer`]): a stage emitting
    /// into a full buffer waits, so a slow consumer slows the stage.
    ///
    /// A durable run owns `run_id` for the whole stream. Dropping the stream
    /// cancels the run (its task is aborted; the last checkpoint stays and
    /// the lease is released in the background, as for a dropped `invoke`,
    /// which [`shutdown`](Self::shutdown) waits for).
    /// A resume re-runs an interrupted stream stage from its start: chunks
    /// emitted before a crash or failure are emitted again.
    ///
    /// The run is spawned on the current tokio runtime; called outside one,
    /// the stream yields one `Err(`[`Error::NoRuntime`]`)`.
    pub fn stream(&self, run_id: &str, input: Context) -> RunStream {
        let pipeline = self.clone();
        let id = run_id.to_owned();
        RunStream::spawn(self.inner.stream_buffer, run_id, move |tx| async move {
            let result = STREAM_TX
                .scope(tx.clone(), pipeline.invoke(&id, input))
                .await;
            // the receiver may be gone: nothing left to tell
            let _ = tx.send(result.map(StreamEvent::Done)).await;
        })
    }

    /// Continues the run `run_id` from its stored checkpoint, with the stored
    /// context. A completed run returns its final context without running
    /// anything.
    ///
    /// A run stored before pipelines had names (checkpoint format 1, kept
    /// under the bare run id) is adopted: when nothing is stored under this
    /// pipeline's name and the bare run id holds an unnamed checkpoint of a
    /// version this pipeline runs (its own or a [held](Self::hold) one), the
    /// checkpoint moves to the pipeline's name, under the leases of both
    /// keys, and the run continues. [`checkpoint`](Self::checkpoint) shows
    /// such a run before it is adopted.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::Cancelled`] when the run was [cancelled](Self::cancel) (nothing
    /// runs, the checkpoint is untouched);
    /// [`Error::CheckpointVersion`] when the checkpoint was written by another
    /// version (nothing runs, the checkpoint is untouched); the errors of
    /// [`invoke`](Self::invoke).
    pub async fn resume(&self, run_id: &str) -> Result<Context> {
        self.continue_run(run_id, Continue::Resume, ResumeOptions::new())
            .await
    }

    /// [`resume`](Self::resume) with options: see [`ResumeOptions`].
    ///
    /// # Errors
    /// As [`resume`](Self::resume); with
    /// [`allow_code_changes`](ResumeOptions::allow_code_changes), a
    /// checkpoint of other code whose shape is the same is no longer an
    /// error.
    pub async fn resume_with(&self, run_id: &str, options: ResumeOptions) -> Result<Context> {
        self.continue_run(run_id, Continue::Resume, options).await
    }

    /// Re-runs `run_id` from its stored checkpoint, or from `from_step`
    /// with the context the run had *before* that step (contract rule 20),
    /// read from the run's history. `from_step` is a stage name (its latest
    /// run; a stage inside a parallel block replays its whole block) or a
    /// step number from [`history`](Self::history). The replay continues the
    /// same run: its journal records the replay as further checkpoints, so
    /// the history keeps both passes. Works on failed and completed runs,
    /// not on cancelled ones ([`Error::Cancelled`]).
    ///
    /// # Errors
    /// [`Error::UnknownStep`] for a stage name the pipeline does not have;
    /// [`Error::StepNotInHistory`] for a step the kept history does not
    /// hold; the errors of [`resume`](Self::resume).
    pub async fn replay(&self, run_id: &str, from_step: Option<&str>) -> Result<Context> {
        let Some(step) = from_step else {
            return self
                .continue_run(
                    run_id,
                    Continue::Replay { from: None },
                    ResumeOptions::new(),
                )
                .await;
        };
        let at = self.before_step("replay", run_id, step).await?;
        let from = Some(&at);
        self.continue_run(run_id, Continue::Replay { from }, ResumeOptions::new())
            .await
    }

    /// The checkpoint `run_id` stood at before `step` (a stage name or a
    /// step number), from its history.
    async fn before_step(
        &self,
        operation: &'static str,
        run_id: &str,
        step: &str,
    ) -> Result<Checkpoint> {
        let key = self.key(run_id)?;
        let program = &self.inner.program;
        let ip = if crate::history::is_step_number(step) {
            None
        } else {
            match program.steps.get(step) {
                Some(ip) => Some(*ip),
                None => {
                    return Err(Error::UnknownStep {
                        step: step.to_owned(),
                        available: program.stage_names(),
                    });
                }
            }
        };
        let journal = self.require_store(operation)?.history(&key).await?;
        // a cancelled run never runs again under its id (rule 14)
        if operation == "replay" && journal.last().is_some_and(Checkpoint::is_cancelled) {
            return Err(Error::Cancelled {
                run_id: key.to_string(),
            });
        }
        // the journal records positions; a run checkpointed before
        // positions recorded ips (they differ only with schemas)
        let position = ip.map(|ip| program.position(ip) as usize);
        match crate::history::point_in(&journal, &key, step, position) {
            Err(Error::StepNotInHistory { .. }) if ip != position => {
                crate::history::point_in(&journal, &key, step, ip).cloned()
            }
            found => found.cloned(),
        }
    }

    /// The history of the run `run_id` (contract rule 20): every step it
    /// took that its store still keeps, with its attempt, status, times,
    /// the keys it wrote and its error. It prints as a table.
    ///
    /// ```
    /// # use fluxio_core::{Context, InMemoryStore, StepStatus};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// pipeline.invoke("order-1", Context::new()).await?;
    /// let history = pipeline.history("order-1").await?;
    /// assert!(history.steps.iter().all(|s| s.status == StepStatus::Completed));
    /// println!("{history}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::InvalidRunId`], [`Error::Store`] and
    /// [`Error::CorruptCheckpoint`] as for [`checkpoint`](Self::checkpoint).
    pub async fn history(&self, run_id: &str) -> Result<crate::History> {
        let key = self.key(run_id)?;
        let journal = self.require_store("history")?.history(&key).await?;
        if journal.is_empty() {
            return Err(Error::CheckpointNotFound {
                run_id: key.to_string(),
            });
        }
        Ok(crate::History::of(&key, &journal))
    }

    /// Starts a new run, `new_run_id`, from `from_step` of the run `run_id`
    /// (a stage name or a step number, as for [`replay`](Self::replay)),
    /// with the context `run_id` had before that step (contract rule 20).
    /// The original run is read, never written: its checkpoints, status and
    /// lease stay as they are. The new run is an ordinary durable run from
    /// there on (its history starts at the fork), and this returns its
    /// result, like [`invoke`](Self::invoke).
    ///
    /// # Errors
    /// [`Error::InvalidRunId`] when `new_run_id` is malformed, is `run_id`,
    /// or names a run that is already stored; [`Error::RunIdInUse`] when
    /// another run holds it; [`Error::UnknownStep`],
    /// [`Error::StepNotInHistory`] and [`Error::CheckpointNotFound`] as for
    /// [`replay`](Self::replay); [`Error::CheckpointVersion`] when the step
    /// was written by another version of the pipeline; the errors of
    /// [`invoke`](Self::invoke).
    pub async fn fork(&self, run_id: &str, from_step: &str, new_run_id: &str) -> Result<Context> {
        let new_key = self.key(new_run_id)?;
        let store = self.require_store("fork")?;
        check_runtime("fork", &new_key)?;
        if new_run_id == run_id {
            return Err(Error::InvalidRunId {
                run_id: new_run_id.to_owned(),
                reason: "a fork needs a new run id, not the id of the run it forks",
            });
        }
        let at = self.before_step("fork", run_id, from_step).await?;
        let how = Continue::Replay { from: Some(&at) };
        let runner = self.version_for(&self.key(run_id)?, &at, how, ResumeOptions::new())?;
        // the new run numbers its checkpoints by position, whatever the
        // forked one did
        let (ip, _) = runner.resume_point(&self.key(run_id)?, &at)?;
        let span = self.span(&new_key, true);
        async {
            self.owning(store, &new_key, async |owner| {
                if store.exists(&new_key).await? {
                    return Err(Error::InvalidRunId {
                        run_id: new_run_id.to_owned(),
                        reason: "a run with this id is stored: fork into a new run id",
                    });
                }
                runner
                    .run_from(store, owner, (new_run_id, &new_key), ip, &at.context)
                    .await
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// Runs a fresh durable run `key` under `owner` from the top-level
    /// checkpoint `ip` with `context` (a fork).
    async fn run_from(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        (run_id, key): (&str, &str),
        ip: usize,
        context: &Snapshot,
    ) -> Result<Context> {
        let durable = self.durable(
            store,
            owner,
            (run_id, key),
            now_ms(),
            None,
            Tail::fresh(self.inner.history_depth),
        );
        self.run_at(owner, &durable, ip, context).await
    }

    async fn continue_run(
        &self,
        run_id: &str,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<Context> {
        let key = self.key(run_id)?;
        let what = match how {
            Continue::Resume => "resume",
            Continue::Replay { .. } => "replay",
        };
        let store = self.require_store(what)?;
        check_runtime(what, &key)?;
        let span = self.span(&key, true);
        async {
            self.owning(store, &key, async |owner| {
                let cp = self
                    .load_or_adopt(store, owner, run_id, how, options)
                    .await?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        run_id: key.to_string(),
                    })?;
                self.continue_stored(store, owner, run_id, cp, how, options)
                    .await
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// Continues the stored run `cp` under `owner`'s lease, on the version
    /// that runs it: refused when it was cancelled (before the version
    /// check: a cancelled run is cancelled on any code).
    async fn continue_stored(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        cp: Checkpoint,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<Context> {
        let key = owner.lease().run_id();
        if cp.is_cancelled() {
            return Err(Error::Cancelled {
                run_id: key.to_owned(),
            });
        }
        let runner = self.version_for(key, &cp, how, options)?;
        runner.continue_locked(store, owner, run_id, cp, how).await
    }

    /// The checkpoint stored for `run_id` under this pipeline's key, or one
    /// [adopted](Self::adopt_unnamed) from before pipelines had names.
    async fn load_or_adopt(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<Option<Checkpoint>> {
        match store.load(owner.lease().run_id()).await? {
            Some(cp) => Ok(Some(cp)),
            None => self.adopt_unnamed(store, owner, run_id, how, options).await,
        }
    }

    /// A run of this pipeline stored before pipelines had names: a format 1
    /// checkpoint (or one of an unnamed pipeline) kept under the bare
    /// `run_id`, with no pipeline name. When it was written by a version this
    /// pipeline continues ([`version_for`](Self::version_for)), it is moved
    /// to this pipeline's key under both the old key's lease and `owner`'s,
    /// and returned; `None` when there is no such run. A crash between the
    /// move's save and delete leaves a copy under the bare id, which is
    /// never read again once the named one exists.
    async fn adopt_unnamed(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<Option<Checkpoint>> {
        if self.inner.name.is_empty() {
            return Ok(None);
        }
        self.owning(store, run_id, async |old| {
            let Some(mut cp) = store.load(run_id).await? else {
                return Ok(None);
            };
            if !cp.pipeline.is_empty() {
                return Ok(None);
            }
            let key = self.key(run_id)?;
            self.version_for(&key, &cp, how, options)?;
            cp.pipeline.clone_from(&self.inner.name);
            // the run moves as its latest checkpoint, whole
            cp.change = crate::store::Change::Full;
            cp.earlier.clear();
            store.save_fenced(cp.clone(), owner.lease()).await?;
            store.delete_fenced(run_id, old.lease()).await?;
            tracing::info!(
                run = %key,
                "adopted a run stored before pipelines had names (under its bare run id)"
            );
            Ok(Some(cp))
        })
        .await
    }

    /// Recovery (rule 22): takes the lease of this pipeline's run `run_id`
    /// and, holding it, asks `decide` what to do with the run's latest
    /// checkpoint, which nobody can change meanwhile: resume it, give up on
    /// it (it is marked [`RunStatus::NeedsAttention`]), or leave it (it was
    /// finished, or retried, by someone else since it was listed).
    pub(crate) async fn recover(
        &self,
        run_id: &str,
        decide: impl FnOnce(&Checkpoint) -> Claim,
    ) -> Result<Recovered> {
        let key = self.key(run_id)?;
        let store = self.require_store("recover")?;
        check_runtime("recover", &key)?;
        let span = self.span(&key, true);
        async {
            self.owning(store, &key, async |owner| {
                let Some(cp) = store.load(&key).await? else {
                    return Ok(Recovered::Left);
                };
                match decide(&cp) {
                    Claim::Leave => Ok(Recovered::Left),
                    Claim::GiveUp => {
                        let marked =
                            crate::store::mark_needs_attention(store.as_ref(), cp, owner.lease())
                                .await?;
                        Ok(Recovered::GaveUp(marked))
                    }
                    Claim::Resume => {
                        let how = Continue::Resume;
                        let result = self
                            .continue_stored(store, owner, run_id, cp, how, ResumeOptions::new())
                            .await;
                        Ok(Recovered::Resumed(result))
                    }
                }
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// Whether this pipeline (or a version it holds) continues runs that
    /// `version` wrote.
    pub(crate) fn runs_version(&self, version: &str) -> bool {
        self.inner.version == version || self.inner.held.iter().any(|p| p.inner.version == version)
    }

    /// The pipeline that continues `cp`: this one, or the held version that
    /// wrote it, or this one on changed code when `options` allow it and
    /// only stage bodies changed. Replaying from a step needs the step's
    /// version to be this one (the step was looked up in this program).
    fn version_for(
        &self,
        key: &str,
        cp: &Checkpoint,
        how: Continue<'_>,
        options: ResumeOptions,
    ) -> Result<&Pipeline> {
        if cp.version == self.inner.version {
            return Ok(self);
        }
        let replay_from_step = matches!(how, Continue::Replay { from: Some(_) });
        if !replay_from_step {
            if let Some(held) = self
                .inner
                .held
                .iter()
                .find(|p| p.inner.version == cp.version)
            {
                return Ok(held);
            }
        }
        let changes = cp
            .structure
            .as_ref()
            .map(|old| old.changes_to(&self.inner.structure));
        if options.allows_code_changes() && changes.as_ref().is_some_and(Changes::same_shape) {
            tracing::info!(
                run = key,
                from = %cp.version,
                to = %self.inner.version,
                "resuming on changed code (the shape is the same)"
            );
            return Ok(self);
        }
        Err(Error::CheckpointVersion {
            run_id: key.to_owned(),
            checkpoint_version: cp.version.clone(),
            pipeline_version: self.inner.version.clone(),
            changes: changes.map(Box::new),
        })
    }

    /// Runs `cp` on this pipeline's program, under `lease`.
    async fn continue_locked(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: &Ownership,
        run_id: &str,
        cp: Checkpoint,
        how: Continue<'_>,
    ) -> Result<Context> {
        let key = cp.key();
        let from = match how {
            Continue::Replay { from: Some(step) } => step,
            Continue::Resume | Continue::Replay { from: None }
                if cp.status == RunStatus::Completed =>
            {
                return Ok(cp.context.to_context());
            }
            Continue::Resume | Continue::Replay { from: None } => &cp,
        };
        let (ip, by_ip) = self.resume_point(&key, from)?;
        let start = from.context.clone();
        // a retry of the stage the checkpoint points at is its next attempt
        let stopped = match cp.status {
            RunStatus::Completed => None,
            _ => Some(self.resume_point(&key, &cp)?.0),
        };
        let resumed = stopped.map(|at| (at, cp.attempt));
        let mut durable = self.durable(
            store,
            owner,
            (run_id, &key),
            cp.created_at_ms,
            resumed,
            Tail::after(&cp, self.inner.history_depth),
        );
        // a run checkpointed by ip goes on by ip, so that its stages keep
        // their keys (rule 12)
        durable.by_ip = by_ip;
        // the finished branches of the block the run stopped in (rule
        // 19); a replay from a named step runs that step whole
        if stopped == Some(ip) && !matches!(how, Continue::Replay { from: Some(_) }) {
            durable.resumed_branches = cp.branches;
        }
        self.run_at(owner, &durable, ip, &start).await
    }

    /// Where the stored checkpoint `cp` (of `key`) continues in this
    /// pipeline's program: the ip of the resume point at its position (see
    /// [`Program::position`]), and whether the run numbers its checkpoints
    /// by ip instead (it was checkpointed by a fluxio that recorded ips;
    /// they differ from positions only in a program with schemas).
    ///
    /// The step name the checkpoint records tells the two apart: a
    /// position is taken when its step is the checkpoint's, an ip when
    /// only its step is, and a position whose step has another name when
    /// nothing else fits (a checkpoint whose step names no stage).
    ///
    /// # Errors
    /// [`Error::CorruptCheckpoint`] when the checkpoint's version is this
    /// pipeline's and neither is a resume point of it (the same code always
    /// places its own checkpoints); [`Error::CheckpointVersion`] naming the
    /// step when another version wrote it (its position is not a step of
    /// this code: the shape changed in a way the structure did not show).
    fn resume_point(&self, key: &str, cp: &Checkpoint) -> Result<(usize, bool)> {
        let program = &self.inner.program;
        let by_position = program.resume_point_at(cp.ip);
        let named = |ip: usize| program.step_at(ip) == Some(cp.step.as_str());
        if let Some(ip) = by_position.filter(|ip| named(*ip)) {
            return Ok((ip, false));
        }
        let ip = cp.ip as usize;
        if named(ip) {
            return Ok((ip, true));
        }
        if cp.version == self.inner.version {
            if let Some(ip) = by_position {
                return Ok((ip, false));
            }
            return Err(Error::CorruptCheckpoint {
                run_id: key.to_owned(),
                reason: format!(
                    "position {} (step `{}`) is not a checkpoint of pipeline version {}",
                    cp.ip, cp.step, self.inner.version
                ),
                source: None,
            });
        }
        let mut changes = cp
            .structure
            .as_ref()
            .map(|old| old.changes_to(&self.inner.structure))
            .unwrap_or_default();
        changes.moved.push(cp.step.clone());
        Err(Error::CheckpointVersion {
            run_id: key.to_owned(),
            checkpoint_version: cp.version.clone(),
            pipeline_version: self.inner.version.clone(),
            changes: Some(Box::new(changes)),
        })
    }

    /// Runs `durable`'s run from the top-level checkpoint `ip` (a resume
    /// point of this program) with `context`, under `owner`'s lease.
    async fn run_at(
        &self,
        owner: &Ownership,
        durable: &Durable<'_>,
        ip: usize,
        context: &Snapshot,
    ) -> Result<Context> {
        debug_assert!(self.inner.program.is_resume_point(ip));
        // built in place: a future held in a local and then moved into
        // another is stored twice in this one (a parked run's size)
        RunBodies::scope(
            Some(owner.keep()),
            interpret::run(
                &self.inner.program,
                &Arc::from(durable.key),
                ip,
                context.to_context(),
                Some(durable),
            ),
        )
        .await
    }

    /// Compares two points of runs key by key (contract rule 20). A point
    /// is a run id (its latest checkpoint), or `run@step`: the context the
    /// run had before `step`, a stage name or a step number from
    /// [`history`](Self::history) (see [`context_at`](Self::context_at)).
    /// Two points of one run show what the steps between them changed.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] naming the run that has no checkpoint;
    /// [`Error::StepNotInHistory`] naming a step its history does not hold;
    /// [`Error::InvalidRunId`] naming a malformed run id.
    pub async fn diff(&self, a: &str, b: &str) -> Result<Diff> {
        // both run ids are checked before either run is read
        let (point_a, point_b) = (self.point(a)?, self.point(b)?);
        let context_a = self.context_at_point(point_a).await?;
        let context_b = self.context_at_point(point_b).await?;
        Ok(Diff::between(a, &context_a, b, &context_b))
    }

    /// The context of a run at `point`: `run_id` alone is its latest
    /// checkpoint's; `run_id@step` is the context it had before `step` (a
    /// stage name of this pipeline, or a step number from
    /// [`history`](Self::history)), read from its history. A run id that
    /// itself contains `@` followed by neither is taken whole.
    ///
    /// # Errors
    /// As [`diff`](Self::diff).
    pub async fn context_at(&self, point: &str) -> Result<Context> {
        let point = self.point(point)?;
        self.context_at_point(point).await
    }

    /// `point` split into its run id, checked, and its step, if any.
    fn point<'p>(&self, point: &'p str) -> Result<(&'p str, Option<&'p str>)> {
        let (run_id, step) = match point.rsplit_once('@') {
            Some((run, step))
                if !run.is_empty()
                    && (crate::history::is_step_number(step)
                        || self.inner.program.steps.contains_key(step)) =>
            {
                (run, Some(step))
            }
            _ => (point, None),
        };
        self.key(run_id)?;
        Ok((run_id, step))
    }

    async fn context_at_point(&self, (run_id, step): (&str, Option<&str>)) -> Result<Context> {
        if let Some(step) = step {
            return Ok(self
                .before_step("diff", run_id, step)
                .await?
                .context
                .to_context());
        }
        let key = self.key(run_id)?;
        let store = self.require_store("diff")?;
        match store.load(&key).await? {
            Some(cp) => Ok(cp.context.to_context()),
            None => Err(Error::CheckpointNotFound {
                run_id: key.to_string(),
            }),
        }
    }

    /// The stored checkpoint of `run_id`, if any: the pipeline's own, or a
    /// run of one of its versions stored before pipelines had names, which
    /// [`resume`](Self::resume) adopts.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::Store`] and [`Error::CorruptCheckpoint`] from the store;
    /// [`Error::InvalidRunId`] for a malformed run id.
    pub async fn checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let key = self.key(run_id)?;
        let store = self.require_store("checkpoint")?;
        match store.load(&key).await? {
            Some(cp) => Ok(Some(cp)),
            // a run of this pipeline from before names, which `resume` adopts
            None if !self.inner.name.is_empty() => Ok(store.load(run_id).await?.filter(|cp| {
                cp.pipeline.is_empty()
                    && (cp.version == self.inner.version
                        || self
                            .inner
                            .held
                            .iter()
                            .any(|p| p.inner.version == cp.version))
            })),
            None => Ok(None),
        }
    }

    /// Cancels the run `run_id` of this pipeline (contract rule 14), from
    /// this process or any other sharing the store: the stored checkpoint
    /// says [`RunStatus::Cancelled`] from now on, and the run never runs
    /// again under this id: [`resume`](Self::resume), [`resume_with`](Self::resume_with)
    /// and [`replay`](Self::replay) fail with [`Error::Cancelled`], running
    /// nothing. Only a fresh [`invoke`](Self::invoke) of the id, which
    /// deletes the old run, starts it again.
    ///
    /// A run that is executing right now stops before its next stage: its
    /// next checkpoint write (before a stage, at a failure, or at the end)
    /// is refused by the store, so the owner learns of the cancel without
    /// any extra store call per stage. (An [`Async`](crate::Durability::Async)
    /// run does not wait for its writes: it stops before the first stage
    /// that starts once the refusal is back, see [`crate::durability`].)
    /// It returns [`Error::Cancelled`] and gives its lease back. A stage body already running is not
    /// interrupted: it finishes, and its result is dropped.
    ///
    /// A run that is running (whether its owner is alive or gone) or failed
    /// can be cancelled; a completed or already cancelled one cannot. What a
    /// cancel reaches depends on the store (see
    /// [`CheckpointStore::cancel`]): the built-in stores stop an owner in
    /// any process; a store with only the four required methods stops
    /// owners in this process only.
    ///
    /// ```
    /// # use fluxio_core::{Context, Error, InMemoryStore, RunStatus};
    /// # use fluxio_core::store::{Checkpoint, CheckpointStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![...]` builds real ones; this one is empty
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// # let store = pipeline.store().expect("durable");
    /// # let failed = Checkpoint::new("order-7", pipeline.version(), 0, "charge", Context::new().snapshot())
    /// #     .in_pipeline("orders")
    /// #     .failed("card declined");
    /// # store.save(failed).await?;
    /// // order-7 failed earlier; nobody should retry it
    /// pipeline.cancel("order-7").await?;
    /// let cp = pipeline.checkpoint("order-7").await?.expect("kept");
    /// assert_eq!(cp.status, RunStatus::Cancelled);
    /// assert!(matches!(pipeline.resume("order-7").await, Err(Error::Cancelled { .. })));
    ///
    /// // a second cancel, or one of a completed run, says so and changes nothing
    /// let again = pipeline.cancel("order-7").await;
    /// assert!(matches!(again, Err(Error::RunFinished { status: RunStatus::Cancelled, .. })));
    /// pipeline.invoke("order-8", Context::new()).await?;
    /// let done = pipeline.cancel("order-8").await;
    /// assert!(matches!(done, Err(Error::RunFinished { status: RunStatus::Completed, .. })));
    ///
    /// // a fresh invoke of the id starts the run over
    /// pipeline.invoke("order-7", Context::new()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::RunFinished`] when the run completed or was cancelled
    /// already (nothing changes); [`Error::InvalidRunId`] for a malformed
    /// run id; [`Error::Store`] from the store. The errors name the run by
    /// its store key (`name/run_id`).
    ///
    /// # Cancel safety
    /// Dropping the future leaves the run cancelled or not, never half-way.
    pub async fn cancel(&self, run_id: &str) -> Result<()> {
        let key = self.key(run_id)?;
        self.require_store("cancel")?.cancel(&key).await
    }

    /// Whether a checkpoint is stored for `run_id`.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::Store`] from the store; [`Error::InvalidRunId`] for a
    /// malformed run id.
    pub async fn exists(&self, run_id: &str) -> Result<bool> {
        let key = self.key(run_id)?;
        self.require_store("exists")?.exists(&key).await
    }

    /// The pipeline's name ([`PipelineBuilder::name`]); empty when unnamed.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The shape and stage code hashes this pipeline records in its
    /// checkpoints (rule 13).
    #[must_use]
    pub fn structure(&self) -> &Structure {
        &self.inner.structure
    }

    /// Keeps `older`, another version of this pipeline, beside this one
    /// (rule 13): a resume of a checkpoint that `older` wrote runs on
    /// `older`'s code, so in-flight runs finish on the code they started
    /// with, while new runs ([`invoke`](Self::invoke)) use this version.
    /// Versions `older` holds are held too. Both must have the same name and
    /// should use the same store.
    ///
    /// ```
    /// # fn demo(new: fluxio_core::Pipeline, old: fluxio_core::Pipeline) -> fluxio_core::Result<()> {
    /// let orders = new.hold(old)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] (setting `hold`) when the names differ or
    /// `older` is not durable.
    pub fn hold(self, older: Pipeline) -> Result<Pipeline> {
        if older.inner.name != self.inner.name || older.inner.store.is_none() {
            return Err(Error::InvalidSetting {
                setting: "hold",
                message: format!(
                    "pipeline `{}` (version {}) can hold only durable versions of itself, \
                     not `{}` (version {}{})",
                    self.inner.name,
                    self.inner.version,
                    older.inner.name,
                    older.inner.version,
                    if older.inner.store.is_none() {
                        ", not durable"
                    } else {
                        ""
                    }
                ),
            });
        }
        let mut inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => Inner::clone(&shared),
        };
        let mut versions = vec![older.clone()];
        versions.extend(older.inner.held.iter().cloned());
        for v in versions {
            let v = v.without_held();
            if v.inner.version != inner.version
                && !inner
                    .held
                    .iter()
                    .any(|h| h.inner.version == v.inner.version)
            {
                inner.held.push(v);
            }
        }
        Ok(Pipeline {
            inner: Arc::new(inner),
        })
    }

    /// The versions held beside this one ([`hold`](Self::hold)), newest
    /// first as held.
    #[must_use]
    pub fn held_versions(&self) -> Vec<&str> {
        self.inner
            .held
            .iter()
            .map(|p| p.inner.version.as_str())
            .collect()
    }

    fn without_held(&self) -> Pipeline {
        if self.inner.held.is_empty() {
            return self.clone();
        }
        let mut inner = Inner::clone(&self.inner);
        inner.held.clear();
        Pipeline {
            inner: Arc::new(inner),
        }
    }

    /// The key the store keeps `run_id` under, checking both.
    /// The run's store key (`pipeline/run_id`, or the run id of an
    /// unnamed pipeline), allocated once: a plain run's scope and every
    /// `StageInfo` of it share it.
    fn key(&self, run_id: &str) -> Result<Arc<str>> {
        check_run_id(run_id)?;
        let key: Arc<str> = if self.inner.name.is_empty() {
            Arc::from(run_id)
        } else {
            Arc::from(run_key(&self.inner.name, run_id))
        };
        // the name is ASCII letters, digits and `_-.` (checked at build):
        // only the length can be wrong
        if key.len() > crate::store::MAX_RUN_ID_LEN {
            return Err(Error::InvalidRunId {
                run_id: run_id.chars().take(64).collect(),
                reason: "with the pipeline's name it is longer than 512 bytes",
            });
        }
        Ok(key)
    }

    fn span(&self, key: &str, resume: bool) -> tracing::Span {
        tracing::info_span!(
            "fluxio.run",
            run_id = key,
            pipeline = %self.inner.name,
            version = %self.inner.version,
            resume
        )
    }

    /// Shuts the pipeline down: it starts no run any more, and every lease
    /// its runs took is given back to the store before this returns `Ok`, so
    /// that other processes can take the runs over at once (rule 15).
    ///
    /// From the call on, `invoke`, `resume`, `replay` and `stream` of this
    /// pipeline, and of every clone of it, fail with [`Error::ShutDown`]
    /// (build the pipeline again to run more). Then `shutdown` waits, at most
    /// `within`, until no lease of its runs is held or being given back:
    ///
    /// - a run that was dropped (its future, or its stream) gives its lease
    ///   back from a background task; `shutdown` waits for that task, so a
    ///   process may exit as soon as `shutdown` returns and no other process
    ///   has to wait for the lease to lapse;
    /// - a run still executing is not interrupted: `shutdown` waits for it to
    ///   end (drop it first to stop it at once; a resume repeats the step it
    ///   was in);
    /// - a blocking stage body that outlived its run (after a timeout or a
    ///   drop) keeps the run's lease until it returns, and `shutdown` waits
    ///   for it too.
    ///
    /// A pipeline that is not durable holds no leases: it returns `Ok` at once.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use fluxio_core::{Context, Error, InMemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![...]` builds real ones; this one is empty
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// // a worker told to stop: stop its runs, then give their leases back
    /// let run = tokio::spawn({
    ///     let pipeline = pipeline.clone();
    ///     async move { pipeline.invoke("order-7", Context::new()).await }
    /// });
    /// run.abort();
    /// pipeline.shutdown(Duration::from_secs(10)).await?;
    ///
    /// // every lease is back in the store; the pipeline takes no new run
    /// let refused = pipeline.invoke("order-8", Context::new()).await;
    /// assert!(matches!(refused, Err(Error::ShutDown { .. })));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::ShutdownTimeout`] when leases are still held after `within`
    /// (runs still executing, blocking bodies still running, or a store that
    /// does not answer): if the process exits anyway they lapse after their
    /// time-to-live, as if it had crashed. [`Error::NoRuntime`] outside a
    /// tokio runtime while leases are held.
    ///
    /// # Cancel safety
    /// Dropping the future stops the waiting only; the pipeline stays shut
    /// down, and calling `shutdown` again waits again.
    pub async fn shutdown(&self, within: Duration) -> Result<()> {
        let leases = &self.inner.leases;
        leases.close();
        if leases.held() == 0 {
            return Ok(());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime {
                operation: "shutdown".to_owned(),
            });
        }
        match tokio::time::timeout(within, leases.all_released()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Error::ShutdownTimeout {
                waited: within,
                held: leases.held(),
            }),
        }
    }

    /// Runs the stage called `name` alone on `ctx`, through its middleware (no
    /// checkpoints). A router returns `ctx` with its patch applied.
    ///
    /// # Errors
    /// [`Error::UnknownStep`], or the stage's failure.
    pub async fn run_step(&self, name: &str, ctx: Context) -> Result<Context> {
        let program = &self.inner.program;
        let Some(index) = program.stages.iter().position(|s| s.name() == name) else {
            return Err(Error::UnknownStep {
                step: name.to_owned(),
                available: program.stage_names(),
            });
        };
        let stage = &program.stages[index];
        let chain = program.middleware.get(index).map_or(&[][..], |c| &c[..]);
        match crate::middleware::Next::new(stage, chain)
            .run_caught(ctx.clone())
            .await?
        {
            Output::Context(c) => Ok(c),
            Output::Route(send) => Ok(send
                .patch
                .into_iter()
                .fold(ctx, |c, (k, v)| c.set_value(k, v))),
        }
    }

    /// The compiled program, one instruction per line, headed by the version.
    #[must_use]
    pub fn explain(&self) -> String {
        let mode = if self.inner.auto_parallel {
            "on"
        } else {
            "off"
        };
        let durable = if self.is_durable() {
            "durable"
        } else {
            "not durable"
        };
        format!(
            "pipeline version {} ({durable}, auto-parallel {mode}, {} instructions)\n{}",
            self.inner.version,
            self.inner.program.instrs.len(),
            self.inner.program
        )
    }

    /// Takes `run_id` for a run of this pipeline (refused once it is shut down).
    /// Runs `body` owning `key` (its lease taken, [`RunIdInUse`](Error::RunIdInUse)
    /// when another run holds it), and gives the lease back after, whatever
    /// `body` returned.
    async fn owning<T>(
        &self,
        store: &Arc<dyn CheckpointStore>,
        key: &str,
        body: impl AsyncFnOnce(&Ownership) -> Result<T>,
    ) -> Result<T> {
        let owner = self.own(store, key).await?;
        let result = body(&owner).await;
        owner.release().await;
        result
    }

    async fn own(&self, store: &Arc<dyn CheckpointStore>, run_id: &str) -> Result<Ownership> {
        Ownership::acquire(store, run_id, self.inner.lease_ttl, &self.inner.leases).await
    }

    /// The checkpoint store, or [`Error::NotDurable`] naming `operation`
    /// (the public method that needs it).
    fn require_store(&self, operation: &'static str) -> Result<&Arc<dyn CheckpointStore>> {
        self.inner
            .store
            .as_ref()
            .ok_or(Error::NotDurable { operation })
    }

    fn durable<'a>(
        &'a self,
        store: &'a Arc<dyn CheckpointStore>,
        owner: &'a Ownership,
        (run_id, key): (&'a str, &'a str),
        created_at_ms: u64,
        resumed: Option<(usize, u32)>,
        tail: Tail,
    ) -> Durable<'a> {
        let tail = Arc::new(std::sync::Mutex::new(tail));
        let mode = self.inner.durability;
        let writer = (mode == Durability::Async).then(|| {
            let lease = owner.lease();
            let handle = crate::store::Lease::new(lease.run_id(), lease.token());
            Box::new(Writer::new(
                Arc::clone(store),
                handle,
                Arc::clone(&tail),
                &self.inner.version,
                self.inner.async_flush,
                owner.keep(),
            ))
        });
        Durable {
            store: store.as_ref(),
            owner,
            mode,
            writer,
            pipeline: &self.inner.name,
            run_id,
            key,
            version: &self.inner.version,
            structure: &self.inner.structure,
            created_at_ms,
            resumed,
            resumed_branches: Vec::new(),
            by_ip: false,
            delete_completed: self.inner.delete_completed,
            tail,
            prewritten: std::sync::Mutex::new(None),
        }
    }
}

/// What [`Pipeline::begin`] did with a fresh run.
enum Fresh {
    /// It began and ran: how it ended.
    Ran(Result<Context>),
    /// It did not begin; the lease is held.
    Stored(Ownership),
}

/// What a recovery worker does with a run it claimed: [`Pipeline::recover`].
pub(crate) enum Claim {
    Resume,
    GiveUp,
    Leave,
}

/// What became of a claimed run.
pub(crate) enum Recovered {
    /// It was resumed; how the resume ended.
    Resumed(Result<Context>),
    /// It was marked as needing attention: its new latest checkpoint.
    GaveUp(Checkpoint),
    /// It was left as it was.
    Left,
}

/// How two runs' stored contexts differ: [`Pipeline::diff`].
///
/// ```
/// use fluxio_core::{ctx, Diff};
/// # fn main() -> fluxio_core::Result<()> {
/// let a = ctx! { "n" => 1, "same" => true }?;
/// let b = ctx! { "n" => 2, "same" => true, "new" => "x" }?;
/// let d = Diff::between("a", &a, "b", &b);
/// assert_eq!(d.entries.len(), 2);
/// assert_eq!(d.to_string(), "n: 1 | 2\nnew: <absent> | \"x\"\n");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// The first run id.
    pub run_a: String,
    /// The second run id.
    pub run_b: String,
    /// One entry per differing key, in key order.
    pub entries: Vec<DiffEntry>,
}

/// One differing key of a [`Diff`].
#[derive(Clone, Debug, PartialEq)]
pub struct DiffEntry {
    /// The key.
    pub key: String,
    /// Its value in the first run, `None` when absent there.
    pub a: Option<Value>,
    /// Its value in the second run, `None` when absent there.
    pub b: Option<Value>,
}

impl Diff {
    /// The differences between two contexts.
    #[must_use]
    pub fn between(run_a: &str, a: &Context, run_b: &str, b: &Context) -> Diff {
        let mut keys: Vec<&str> = a.keys().chain(b.keys()).collect();
        keys.sort_unstable();
        keys.dedup();
        let entries = keys
            .into_iter()
            .filter_map(|k| {
                // equal encodings are equal values: decode only what differs
                let (va, vb) = (a.encoded(k), b.encoded(k));
                (va != vb).then(|| DiffEntry {
                    key: k.to_owned(),
                    a: va.map(crate::value::EncodedValue::decode),
                    b: vb.map(crate::value::EncodedValue::decode),
                })
            })
            .collect();
        Diff {
            run_a: run_a.to_owned(),
            run_b: run_b.to_owned(),
            entries,
        }
    }

    /// Whether the two contexts are equal.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for Diff {
    /// One line per key: `key: <value in a> | <value in b>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<Value>| {
            v.as_ref()
                .map_or_else(|| "<absent>".to_owned(), ToString::to_string)
        };
        for e in &self.entries {
            writeln!(f, "{}: {} | {}", e.key, show(&e.a), show(&e.b))?;
        }
        Ok(())
    }
}
