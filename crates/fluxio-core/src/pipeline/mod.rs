//! Built pipelines: invoke, stream, resume, replay, diff, run_step, explain.
//!
//! [`Pipeline`] is one type, cheap to clone, whose methods live in a file per concern:
//! - `mod.rs`: the type, its shared state and the small accessors;
//! - `builder.rs`: [`PipelineBuilder`] and `build`;
//! - `run.rs`: `invoke`, `start`, `stream`, and a durable run's first write;
//! - `options.rs`: [`StartOptions`] (a run's deadline);
//! - `resume.rs`: `resume`, `resume_with`, `replay`, [`ResumeOptions`], the version a
//!   checkpoint resumes on, adopting runs of earlier builds, and the recovery claim;
//! - `history.rs`: `history`, `fork`, `diff`, `context_at`, `checkpoint`;
//! - `operate.rs`: `cancel`, `exists`, `hold`, `shutdown`, `run_step`, `explain`;
//! - `waits.rs`: `signal`, `signal_value`, `wake`, `wait_for` (runs that wait).

mod builder;
mod child;
mod compensate;
mod history;
mod ids;
mod operate;
mod options;
mod plan;
mod queue;
mod recover;
mod resume;
mod run;
mod waits;

pub use crate::store::MAX_PIPELINE_NAME_LEN;
pub use builder::PipelineBuilder;
pub use history::Diff;
pub use history::DiffEntry;
pub use options::StartOptions;
pub use plan::{Plan, PlannedStep};
pub(crate) use recover::Claim;
pub(crate) use recover::Recovered;
pub use resume::ResumeOptions;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::compile::Program;
use crate::durability::Durability;
use crate::error::{Error, Result};
use crate::interpret::ownership::LeaseTracker;
use crate::store::CheckpointStore;
use crate::store::{check_run_id, run_key};
use crate::structure::Structure;

/// The longest run id accepted, in bytes.
pub const MAX_RUN_ID_LEN: usize = crate::store::MAX_RUN_ID_LEN;

/// The most chunks [`PipelineBuilder::stream_buffer`] accepts (1,048,576).
pub const MAX_STREAM_BUFFER: usize = 1 << 20;

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
    settings: RunSettings,
    /// The leases of this pipeline's runs, for `shutdown`.
    leases: LeaseTracker,
    /// Where wake times and deadlines come from (rule 28).
    clock: crate::clock::Clock,
    /// Its queue (rule 31), when it has one.
    queue: Option<Arc<crate::queue::Queue>>,
    /// The shape it was built from, for a shape that inlines it (rule 33).
    nodes: Arc<Vec<crate::compile::Node>>,
}

/// How a pipeline runs its runs: what [`PipelineBuilder`] sets, and the
/// built pipeline keeps (see the builder's setters of the same names).
#[derive(Clone, Copy, Debug)]
struct RunSettings {
    lease_ttl: Duration,
    durability: Durability,
    async_flush: Duration,
    delete_completed: bool,
    history_depth: Option<u32>,
    stream_buffer: usize,
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

    /// The clock its sleeps and waits read (rule 28).
    #[must_use]
    pub fn clock(&self) -> &crate::clock::Clock {
        &self.inner.clock
    }

    /// The nodes it was built from (rule 33: a shape may inline them).
    pub(crate) fn nodes(&self) -> &[crate::compile::Node] {
        &self.inner.nodes
    }

    /// The compiled program.
    #[must_use]
    pub fn program(&self) -> &Program {
        &self.inner.program
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

    /// What the public method `operation` on the durable run `run_id` needs
    /// first: the run's key, the store ([`Error::NotDurable`] without one),
    /// a tokio runtime ([`Error::NoRuntime`] outside one), and the run's span
    /// to run in (`resume`: the method continues a stored run).
    fn durable_run(
        &self,
        operation: &'static str,
        run_id: &str,
        resume: bool,
    ) -> Result<(Arc<str>, &Arc<dyn CheckpointStore>, tracing::Span)> {
        let key = self.key(run_id)?;
        let store = self.require_store(operation)?;
        check_runtime(operation, &key)?;
        let span = self.span(&key, resume);
        Ok((key, store, span))
    }

    /// The checkpoint store, or [`Error::NotDurable`] naming `operation`
    /// (the public method that needs it).
    fn require_store(&self, operation: &'static str) -> Result<&Arc<dyn CheckpointStore>> {
        self.inner
            .store
            .as_ref()
            .ok_or(Error::NotDurable { operation })
    }
}
