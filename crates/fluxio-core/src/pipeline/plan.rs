//! A dry run: what a resume or a replay from a step would run, without
//! running a stage body (contract rule 20).

use std::fmt;

use super::Pipeline;
use super::resume::{Continue, ResumeOptions};
use crate::compile::{Instr, Program};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::history::{History, StepStatus};

/// What [`Pipeline::plan`] found: where a resume or replay would start,
/// on which version, from which context, and the steps after it in program
/// order. Nothing ran and nothing was written to find it.
///
/// Which route of a routing block a run takes is decided by its router at
/// run time, so a step inside a routing block is listed with the route it
/// belongs to ([`PlannedStep::when`]); every route's steps are listed.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Plan {
    /// The run's store key (`pipeline/run_id`).
    pub run: String,
    /// The version that would run it: this pipeline's, or a held one.
    pub version: String,
    /// The context the first step would start from.
    pub context: Context,
    /// The steps, from the one it would start at to the end.
    pub steps: Vec<PlannedStep>,
}

/// One step of a [`Plan`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlannedStep {
    /// The step's name, as [`History`] shows it (a stage, a parallel
    /// block, a sleep, a wait, a child step).
    pub step: String,
    /// The routes it is inside, outermost first: `(router, route)`; empty
    /// for a step every run reaches.
    pub when: Vec<(String, String)>,
    /// The run's kept history has this step completed: running it again
    /// runs its body again (a replay), unless it is only listed for a route
    /// the run did not take.
    pub completed_before: bool,
}

impl fmt::Display for Plan {
    /// `run orders/o-7 would run on version v from N keys:` then one line
    /// per step, `  charge`, `  express   (if shipping -> express)`, and
    /// `(ran before)` for a step the run completed already.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.steps.is_empty() {
            return writeln!(f, "run {}: nothing would run (it is at its end)", self.run);
        }
        writeln!(
            f,
            "run {} would run on version {}, from a context of {} keys:",
            self.run,
            self.version,
            self.context.len()
        )?;
        for s in &self.steps {
            let mut line = format!("  {}", s.step);
            if !s.when.is_empty() {
                let when: Vec<String> = s.when.iter().map(|(r, k)| format!("{r} -> {k}")).collect();
                line.push_str(&format!("  (if {})", when.join(", ")));
            }
            if s.completed_before {
                line.push_str("  (ran before)");
            }
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// A routing block the walk is inside: its router, the first instruction
/// of each route, the end once known (the target of its bodies' jumps), and
/// the route being walked.
struct Block<'p> {
    router: &'p str,
    starts: &'p [(std::sync::Arc<str>, usize)],
    end: Option<usize>,
    route: Option<&'p str>,
}

/// The steps of `program` from the `CHECKPOINT` at `ip` to the end, in
/// program order, each with the routes it is inside.
fn walk(program: &Program, ip: usize, history: &History) -> Vec<PlannedStep> {
    let mut steps = Vec::new();
    let mut blocks: Vec<Block<'_>> = Vec::new();
    for (at, instr) in program.instrs.iter().enumerate().skip(ip) {
        while blocks.last().is_some_and(|b| b.end == Some(at)) {
            blocks.pop();
        }
        if let Some(block) = blocks.last_mut() {
            if let Some((key, _)) = block.starts.iter().find(|(_, start)| *start == at) {
                block.route = Some(key);
            }
        }
        match instr {
            Instr::Checkpoint { step } => steps.push(PlannedStep {
                step: step.to_string(),
                when: blocks
                    .iter()
                    .filter_map(|b| b.route.map(|r| (b.router.to_owned(), r.to_owned())))
                    .collect(),
                completed_before: history
                    .steps
                    .iter()
                    .any(|s| s.stage == **step && s.status == StepStatus::Completed),
            }),
            Instr::Route { by, routes } => blocks.push(Block {
                router: by,
                starts: routes,
                end: None,
                route: None,
            }),
            Instr::Jump { to } => {
                if let Some(block) = blocks.last_mut() {
                    block.end.get_or_insert(*to);
                }
            }
            _ => {}
        }
    }
    steps
}

impl Pipeline {
    /// A dry run (contract rule 20): what [`resume`](Self::resume) of
    /// `run_id` (with `from_step` `None`) or a [`replay`](Self::replay) or
    /// [`fork`](Self::fork) from `from_step` would run, on which version and
    /// from which context, without running a stage body, taking a lease or
    /// writing anything. The same checks come first, so a resume that would
    /// be refused is refused here with the same error.
    ///
    /// ```
    /// # use fluxio_core::{Context, InMemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// pipeline.invoke("order-7", Context::new()).await?;
    /// let plan = pipeline.plan("order-7", None).await?;
    /// assert!(plan.steps.is_empty(), "a completed run has nothing left to run");
    /// print!("{plan}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`resume`](Self::resume) for `None` ([`Error::CheckpointNotFound`],
    /// [`Error::Cancelled`], [`Error::FailedForGood`],
    /// [`Error::CheckpointVersion`], ...) and [`replay`](Self::replay) for a
    /// step ([`Error::UnknownStep`], [`Error::StepNotInHistory`]).
    pub async fn plan(&self, run_id: &str, from_step: Option<&str>) -> Result<Plan> {
        let key = self.key(run_id)?;
        let store = self.require_store("plan")?;
        let cp = match from_step {
            Some(step) => self.before_step("plan", run_id, step).await?,
            None => {
                let cp = store
                    .load(&key)
                    .await?
                    .ok_or_else(|| Error::CheckpointNotFound {
                        run_id: key.to_string(),
                    })?;
                if let Some(refused) = crate::store::fenced_refusal(&key, cp.status) {
                    return Err(refused);
                }
                if cp.is_failed_for_good() {
                    return Err(cp.failed_for_good_error());
                }
                cp
            }
        };
        let how = match from_step {
            Some(_) => Continue::Replay { from: Some(&cp) },
            None => Continue::Resume,
        };
        let runner = self.version_for(&key, &cp, how, ResumeOptions::new())?;
        let journal = store.history(&key).await?;
        let history = History::of(&key, &journal);
        let completed = cp.status == crate::store::RunStatus::Completed && from_step.is_none();
        let steps = if completed {
            Vec::new()
        } else {
            let (ip, _) = runner.resume_point(&key, &cp)?;
            walk(&runner.inner.program, ip, &history)
        };
        Ok(Plan {
            run: key.to_string(),
            version: runner.inner.version.to_string(),
            context: cp.context.to_context(),
            steps,
        })
    }
}
