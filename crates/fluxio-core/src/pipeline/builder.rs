//! Building a pipeline: [`PipelineBuilder`], its settings and their checks, and `build`.

use std::sync::Arc;
use std::time::Duration;

use super::{Inner, MAX_STREAM_BUFFER, Pipeline, RunSettings};
use crate::callback::Callback;
use crate::compile::{Node, Program};
use crate::durability::Durability;
use crate::error::{Error, Result};
use crate::interpret::ownership::LeaseTracker;
use crate::middleware::Middleware;
use crate::stage::Resources;
use crate::store::{CheckpointStore, InMemoryStore};
use crate::stream::DEFAULT_STREAM_BUFFER;
use crate::version::short_hex;

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
    settings: RunSettings,
    middleware: Vec<Arc<dyn Middleware>>,
    stage_middleware: Vec<(String, Arc<dyn Middleware>)>,
    callbacks: Vec<Arc<dyn Callback>>,
    resources: Resources,
    clock: crate::clock::Clock,
    children: Vec<Pipeline>,
    queue: Option<crate::queue::Queue>,
    max_parallel: Option<usize>,
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
            settings: RunSettings {
                lease_ttl: Duration::from_secs(30),
                durability: Durability::Sync,
                async_flush: crate::durability::DEFAULT_ASYNC_FLUSH,
                delete_completed: false,
                history_depth: None,
                stream_buffer: DEFAULT_STREAM_BUFFER,
            },
            middleware: Vec::new(),
            stage_middleware: Vec::new(),
            callbacks: Vec::new(),
            children: Vec::new(),
            queue: None,
            max_parallel: None,
            resources: Resources::default(),
            clock: crate::clock::Clock::store(),
        }
    }

    /// The clock the pipeline's sleeps and waits read their wake times and
    /// deadlines from (contract rule 28; default [`Clock::store`](crate::clock::Clock::store):
    /// the store's clock where it has one). Tests give a manual one (the
    /// testing kit's [`TestClock`](crate::testing::TestClock)) and give the
    /// same to their worker.
    pub fn clock(mut self, clock: crate::clock::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Names the pipeline (contract rule 10): stores keep its runs under
    /// `name/run_id` ([`run_key`](crate::store::run_key)), so pipelines with
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

    /// Registers `pipeline` as the one the child steps named after it run
    /// (contract rule 29: `child!("billing")` runs the pipeline named
    /// `billing`). Its store may be this pipeline's or another; `build`
    /// refuses a child step whose pipeline is not registered, and a child
    /// pipeline without a store or one that deletes completed runs (its
    /// parent reads the result from the child's completed run).
    ///
    /// The `fluxio` crate's documentation has a whole example; `build`
    /// refuses a child step whose pipeline is missing:
    ///
    /// ```
    /// use fluxio_core::InMemoryStore;
    /// use fluxio_core::child::Child;
    /// use fluxio_core::compile::Node;
    /// # use fluxio_core::__private::pipeline_builder;
    /// # // `fluxio::pipeline![..., child!("billing")]` builds this node
    /// let orders = pipeline_builder(vec![Node::Child(Child::of("billing"))], [1; 32], [1; 32])
    ///     .name("orders")
    ///     .store(InMemoryStore::new())
    ///     .build();
    /// let err = orders.expect_err("billing is not registered").to_string();
    /// assert!(err.contains("child(billing) names a pipeline that is not registered"), "{err}");
    /// ```
    pub fn child(mut self, pipeline: Pipeline) -> Self {
        self.children.push(pipeline);
        self
    }

    /// Declares the pipeline's queue (contract rule 31): runs handed to the
    /// workers with [`Pipeline::enqueue`] start only when they fit its
    /// limits, and so does every run of the pipeline a worker continues.
    /// `build` refuses a limit out of range, naming the queue and the value,
    /// and a queue on a pipeline without a store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fluxio_core::InMemoryStore;
    /// use fluxio_core::compile::Node;
    /// use fluxio_core::queue::Queue;
    /// use fluxio_core::waiting::Sleep;
    /// # use fluxio_core::__private::pipeline_builder;
    /// # let nodes = vec![Node::Sleep(Sleep::after(Duration::from_secs(1)))];
    /// let err = pipeline_builder(nodes, [1; 32], [1; 32])
    ///     .name("emails")
    ///     .store(InMemoryStore::new())
    ///     .queue(Queue::new("emails").concurrency(0))
    ///     .build()
    ///     .expect_err("no run could ever start")
    ///     .to_string();
    /// assert!(err.contains("queue `emails`: concurrency 0 is out of range"), "{err}");
    /// ```
    pub fn queue(mut self, queue: crate::queue::Queue) -> Self {
        self.queue = Some(queue);
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
        self.settings.durability = mode;
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
        self.settings.async_flush = wait;
        self
    }

    /// How long a run's ownership of its run id lasts without renewal, for
    /// stores whose leases expire (the in-process default never expires).
    /// From [`MIN_LEASE_TTL`](crate::store::MIN_LEASE_TTL) (3 ms, the
    /// shortest a run can renew, every third of it) to
    /// [`MAX_LEASE_TTL`](crate::store::MAX_LEASE_TTL) (365 days): `build`
    /// refuses anything else with [`Error::InvalidSetting`].
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.settings.lease_ttl = ttl;
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
        self.settings.delete_completed = on;
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
        self.settings.history_depth = checkpoints.map(|n| n.max(1));
        self
    }

    /// At most `branches` branches of one parallel block run at once (the
    /// reference runtime's `max_workers`); the others wait for one to end,
    /// in order. Unbounded by default; 0 counts as 1. Each block counts its
    /// own (so nested blocks never wait on each other); fire-and-forget
    /// branches are not bounded. Not part of the version.
    ///
    /// ```
    /// # fn demo(p: fluxio_core::PipelineBuilder) -> fluxio_core::Result<fluxio_core::Pipeline> {
    /// p.max_parallel(4).build()
    /// # }
    /// ```
    pub fn max_parallel(mut self, branches: usize) -> Self {
        self.max_parallel = Some(branches.max(1));
        self
    }

    /// How many chunks [`Pipeline::stream`] buffers before a stream stage's
    /// [`Emitter::emit`](crate::Emitter::emit) waits for the consumer
    /// (default [`DEFAULT_STREAM_BUFFER`]; 0 counts as 1; `build` refuses
    /// more than [`MAX_STREAM_BUFFER`] with [`Error::InvalidSetting`]).
    pub fn stream_buffer(mut self, chunks: usize) -> Self {
        self.settings.stream_buffer = chunks.max(1);
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
        crate::store::check_lease_ttl(self.settings.lease_ttl)?;
        let stage_middleware = self.stage_middleware.iter().map(|(_, m)| m);
        for m in self.middleware.iter().chain(stage_middleware) {
            m.check()?;
        }
        if self.settings.async_flush > crate::durability::MAX_ASYNC_FLUSH {
            return Err(Error::InvalidSetting {
                setting: "async_flush",
                message: format!(
                    "{:?} is longer than the longest wait, {:?}",
                    self.settings.async_flush,
                    crate::durability::MAX_ASYNC_FLUSH
                ),
            });
        }
        let name = self.name.clone().unwrap_or_default();
        if self.name.is_some() {
            crate::store::check_pipeline_name(&name)?;
        } else if self.durable {
            return Err(Error::InvalidSetting {
                setting: "name",
                message: "a durable pipeline needs a name, which scopes its run ids in the store \
                          (contract rule 10): add `.name(\"orders\")` before `.build()`"
                    .to_owned(),
            });
        }
        if self.settings.stream_buffer > MAX_STREAM_BUFFER {
            return Err(Error::InvalidSetting {
                setting: "stream_buffer",
                message: format!(
                    "{} chunks is more than the most a stream buffers, {MAX_STREAM_BUFFER}",
                    self.settings.stream_buffer
                ),
            });
        }
        let mut program = Program::compile(&self.root, self.auto_parallel)?;
        if !self.durable {
            if let Some(step) = (program.sleeps.iter().map(crate::waiting::Sleep::step_name))
                .chain(program.waits.iter().map(crate::waiting::Wait::step_name))
                .chain(program.children.iter().map(crate::child::Child::step_name))
                .next()
            {
                return Err(Error::build(format!(
                    "{step} needs a durable pipeline: a sleeping or waiting run lives in the \
                     store, not in a process; give the pipeline a store with `.store(...)`"
                )));
            }
        }
        program.child_runs = child_runs(&program, &self.children)?;
        if let Some(queue) = &self.queue {
            queue.check()?;
            if !self.durable {
                return Err(Error::build(format!(
                    "queue `{}` needs a durable pipeline: a queued run waits in the store; give \
                     the pipeline a store with `.store(...)`",
                    queue.name()
                )));
            }
        }
        program.callbacks = self.callbacks.into();
        program.max_parallel = self.max_parallel;
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
        program.compensators = compensators(&program, &resources, self.durable, &self.settings)?;
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
                settings: self.settings,
                leases: LeaseTracker::default(),
                clock: self.clock,
                queue: self.queue.map(Arc::new),
                nodes: Arc::new(self.root),
            }),
        })
    }
}

/// The pipeline each child step of `program` runs, found among `children`
/// by name (rule 29).
fn child_runs(
    program: &crate::compile::Program,
    children: &[Pipeline],
) -> Result<Vec<Arc<dyn crate::child::ChildRuns>>> {
    let mut runs: Vec<Arc<dyn crate::child::ChildRuns>> = Vec::new();
    for child in &program.children {
        let step = child.step_name();
        let Some(pipeline) = children.iter().find(|p| p.name() == child.pipeline()) else {
            let registered: Vec<&str> = children.iter().map(Pipeline::name).collect();
            return Err(Error::build(format!(
                "{step} names a pipeline that is not registered: add it with \
                 `.child(pipeline)` before `.build()` (registered: {registered:?})"
            )));
        };
        if pipeline.store().is_none() {
            return Err(Error::build(format!(
                "{step}: pipeline `{}` has no store; a child run lives in one",
                pipeline.name()
            )));
        }
        if pipeline.inner.settings.delete_completed {
            return Err(Error::build(format!(
                "{step}: pipeline `{}` deletes its completed runs, so its parent could not \
                 read the result; build it without `delete_completed`",
                pipeline.name()
            )));
        }
        if !matches!(
            pipeline.inner.program.instrs.first(),
            Some(crate::compile::Instr::Checkpoint { .. })
        ) {
            return Err(Error::build(format!(
                "{step}: pipeline `{}` has no stage to run",
                pipeline.name()
            )));
        }
        runs.push(Arc::new(pipeline.clone()));
    }
    Ok(runs)
}

/// Each stage's compensator (rule 35) with the pipeline's `resources`, or
/// an empty list when no stage has one.
///
/// # Errors
/// [`Error::Build`] when a stage has one in a pipeline that cannot
/// compensate (no store, or [`Durability::Async`] or [`Durability::Exit`],
/// whose journals leave steps out), or a compensator's resource is not
/// registered.
fn compensators(
    program: &Program,
    resources: &Arc<Resources>,
    durable: bool,
    settings: &RunSettings,
) -> Result<Vec<Option<crate::stage::Stage>>> {
    let Some(first) = program
        .stages
        .iter()
        .find(|s| s.meta().compensate.is_some())
    else {
        return Ok(Vec::new());
    };
    if let Some(depth) = settings.history_depth {
        return Err(Error::build(format!(
            "stage `{}` has a compensator, which reads the run's whole journal to know what \
             completed: a history depth of {depth} checkpoints would cut it; remove \
             `.history_depth(...)`",
            first.name()
        )));
    }
    if !durable || settings.durability != Durability::Sync {
        return Err(Error::build(format!(
            "stage `{}` has a compensator, which needs a durable pipeline whose journal records \
             every step before the next one starts: give the pipeline a store with \
             `.store(...)`, with `Durability::Sync` (`Async` and `Exit` leave steps out)",
            first.name()
        )));
    }
    program
        .stages
        .iter()
        .map(|stage| {
            let Some(make) = stage.meta().compensate else {
                return Ok(None);
            };
            let c = make();
            if let Some(req) = c.missing_resource(resources) {
                return Err(c.missing_resource_error(
                    &req,
                    &format!(
                        "it compensates `{}`; register one with `.resource(value)` before \
                         `.build()` (registered: {})",
                        stage.name(),
                        resources.describe()
                    ),
                ));
            }
            Ok(Some(c.with_resources(Arc::clone(resources))))
        })
        .collect()
}
