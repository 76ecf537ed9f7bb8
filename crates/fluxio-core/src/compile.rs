//! The instruction set and the compiler from a pipeline's shape to a flat program.
//!
//! A pipeline is compiled once, when it is built. The interpreter
//! (`interpret.rs`) then runs the program with an instruction pointer.
//!
//! A stage in the top-level sequence (or in a routing body of it) compiles to
//!
//! ```text
//! CHECKPOINT -> EMIT step_start -> [VALIDATE input] -> CALL -> [VALIDATE output] -> EMIT step_end
//! ```
//!
//! so a resume at the `CHECKPOINT` replays the whole stage, events included.
//! A parallel block compiles to `CHECKPOINT -> FORK`, each branch's code ending
//! in `END_BRANCH`, then `JOIN`. Stages inside a branch have no `CHECKPOINT` of
//! their own: the block is one durable step; a resume runs the branches that
//! had not finished (finished ones are recorded, contract rule 19).
//! A router compiles like a stage and is followed by
//! `ROUTE`, the bodies (each ending in a `JUMP` past the block).
//!
//! # Positions
//!
//! An instruction's *position* is its index with the `VALIDATE`
//! instructions left out ([`Program::position`]). The schemas a stage
//! declares add `VALIDATE` instructions and nothing else, so positions
//! depend on the pipeline's compiled shape only: a stage gaining or losing
//! `input`/`output` (or a timeout, or middleware, which add no instruction)
//! keeps every position. Checkpoints record positions, and a stage's
//! idempotency key is the position of its `CALL` (contract rule 12): both
//! stay the same across any code change that
//! [`allow_code_changes`](crate::ResumeOptions::allow_code_changes) accepts.
//! A program without schemas has each position equal to its ip.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::child::Child;
use crate::error::{Error, Result};
use crate::stage::Stage;
use crate::structure::{StageCode, Structure};
use crate::waiting::{Sleep, Wait};

/// A pipeline's shape, as `pipeline!` builds it.
#[derive(Clone, Debug)]
pub enum Node {
    /// One stage.
    Stage(Stage),
    /// A parallel block: each branch is a sequence.
    Parallel {
        /// The branches.
        branches: Vec<Vec<Node>>,
        /// Fire-and-forget: errors are logged, nothing is merged.
        detached: bool,
    },
    /// A routing block; must directly follow a router stage, or a wait
    /// (which routes by the name signalled, or `"timeout"`).
    Route {
        /// Route keys and their bodies.
        routes: Vec<(String, Vec<Node>)>,
    },
    /// A durable sleep (contract rule 25): a step of its own, in the
    /// top-level sequence or a routing body of it, never inside a
    /// parallel block.
    Sleep(Sleep),
    /// A durable wait for a signal (contract rule 26), placed as a sleep.
    Wait(Wait),
    /// A child run (contract rule 29), placed as a sleep.
    Child(Child),
}

/// Events the `EMIT` instruction raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A stage is about to be called.
    StepStart,
    /// A stage returned successfully.
    StepEnd,
}

/// One instruction of a compiled program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instr {
    /// Save a checkpoint (durable runs); `step` names what runs next.
    Checkpoint {
        /// The stage or block about to run.
        step: Arc<str>,
    },
    /// Raise an event for a stage.
    Emit {
        /// Which event.
        event: Event,
        /// The stage (an index into the program's stages).
        stage: usize,
        /// The ip of the stage's `CALL`: events name the call they belong to.
        call: usize,
    },
    /// Check the context against a stage's declared input or output type.
    Validate {
        /// The stage (an index into the program's stages).
        stage: usize,
        /// `false`: its `input` (before the call); `true`: its `output` (after).
        output: bool,
    },
    /// Call a stage.
    Call {
        /// The stage (an index into the program's stages).
        stage: usize,
    },
    /// Start a parallel block.
    Fork {
        /// The first instruction of each branch.
        branches: Vec<usize>,
        /// A name per branch, for merge-conflict errors.
        names: Vec<Arc<str>>,
        /// The `JOIN` instruction of this block.
        join: usize,
        /// Fire-and-forget.
        detached: bool,
    },
    /// The end of a branch.
    EndBranch,
    /// The end of a parallel block.
    Join,
    /// Pick a routing body by the route the router (or wait) just chose.
    Route {
        /// The router stage's name, or the wait's step name.
        by: Arc<str>,
        /// Route keys and the first instruction of their body, in declaration order.
        routes: Vec<(Arc<str>, usize)>,
    },
    /// Sleep (rule 25): park the run until its wake time, unless it passed.
    Sleep {
        /// The sleep (an index into the program's sleeps).
        sleep: usize,
    },
    /// Wait (rule 26): take a signal, or the timeout, or park the run.
    Wait {
        /// The wait (an index into the program's waits).
        wait: usize,
        /// A routing block follows: the outcome picks its route.
        routed: bool,
    },
    /// Child (rule 29): start or attach to a child run, take its result,
    /// or park the run until it ends.
    Child {
        /// The child step (an index into the program's children).
        child: usize,
    },
    /// Continue at `to`.
    Jump {
        /// The target.
        to: usize,
    },
}

/// A compiled pipeline.
#[derive(Debug)]
pub struct Program {
    /// The instructions.
    pub instrs: Vec<Instr>,
    /// The stages `CALL` refers to, in order of appearance.
    pub stages: Vec<Stage>,
    /// The sleeps `SLEEP` refers to, in order of appearance.
    pub sleeps: Vec<Sleep>,
    /// The waits `WAIT` refers to, in order of appearance.
    pub waits: Vec<Wait>,
    /// The child steps `CHILD` refers to, in order of appearance.
    pub children: Vec<Child>,
    /// The pipeline each child step runs, by index, once
    /// `PipelineBuilder::build` found it.
    pub(crate) child_runs: Vec<Arc<dyn crate::child::ChildRuns>>,
    /// For each stage name, the top-level `CHECKPOINT` a replay from it starts at
    /// (the stage's own, or its parallel block's).
    pub steps: BTreeMap<&'static str, usize>,
    /// The middleware chain of each stage (by index), outermost first; empty
    /// when no middleware is configured.
    pub(crate) middleware: Vec<crate::middleware::Chain>,
    /// The callbacks, in the order they were added.
    pub(crate) callbacks: std::sync::Arc<[std::sync::Arc<dyn crate::callback::Callback>]>,
    /// The pipeline's version (set by `PipelineBuilder::build`), for callbacks.
    pub(crate) version: Arc<str>,
    /// Whether a stage is blocking: only then does a plain run need the
    /// run's `RunBodies` (counted once here, not at every run).
    pub(crate) blocking: bool,
    /// At most this many branches of one parallel block run at once
    /// ([`PipelineBuilder::max_parallel`](crate::PipelineBuilder::max_parallel)).
    pub(crate) max_parallel: Option<usize>,
    /// Each stage's compensator (by index, rule 35), with the pipeline's
    /// resources; empty when no stage has one.
    pub(crate) compensators: Vec<Option<Stage>>,
    /// The position of every instruction, and of the end (see the module
    /// docs): one more entry than `instrs`, never decreasing.
    positions: Vec<u32>,
}

impl Program {
    /// Compiles `root`, folding independent stages into parallel blocks when
    /// `auto_parallel` is on.
    ///
    /// # Errors
    /// [`Error::Build`] for a routing block without a router before it, a
    /// router without a routing block after it, an empty or duplicate route,
    /// an empty parallel block, two parallel branches declaring the same
    /// write, or two different stages with the same name (the same stage may
    /// appear several times); a sleep or wait inside a parallel block, two
    /// waits on one name, or a wait whose timeout or routes do not fit it.
    pub fn compile(root: &[Node], auto_parallel: bool) -> Result<Program> {
        let mut c = Compiler {
            instrs: Vec::new(),
            stages: Vec::new(),
            sleeps: Vec::new(),
            waits: Vec::new(),
            children: Vec::new(),
            steps: BTreeMap::new(),
            auto_parallel,
        };
        c.seq(root, None)?;
        check_unique_names(&c.stages)?;
        check_unique_waits(&c.waits)?;
        let blocking =
            (c.stages.iter()).any(|s| s.meta().kind == crate::stage::StageKind::Blocking);
        let mut position = 0u32;
        let mut positions = Vec::with_capacity(c.instrs.len() + 1);
        for instr in &c.instrs {
            positions.push(position);
            if !matches!(instr, Instr::Validate { .. }) {
                position = position.saturating_add(1);
            }
        }
        positions.push(position);
        Ok(Program {
            blocking,
            max_parallel: None,
            compensators: Vec::new(),
            positions,
            instrs: c.instrs,
            stages: c.stages,
            sleeps: c.sleeps,
            waits: c.waits,
            children: c.children,
            child_runs: Vec::new(),
            steps: c.steps,
            middleware: Vec::new(),
            callbacks: std::sync::Arc::from(Vec::new()),
            version: Arc::from(""),
        })
    }

    /// Whether `ip` is a place a run can continue from: a `CHECKPOINT`, or the end.
    #[must_use]
    pub fn is_resume_point(&self, ip: usize) -> bool {
        ip == self.instrs.len() || matches!(self.instrs.get(ip), Some(Instr::Checkpoint { .. }))
    }

    /// The position of the instruction at `ip` (or of the end, at
    /// `instrs.len()`): its ip with the `VALIDATE` instructions before it
    /// left out, so that it depends on the pipeline's shape only (see the
    /// module docs). What checkpoints record, and what a stage's idempotency
    /// key is made of.
    ///
    /// ```
    /// use fluxio_core::compile::Program;
    /// let empty = Program::compile(&[], true)?;
    /// assert_eq!(empty.position(0), 0);
    /// # Ok::<(), fluxio_core::Error>(())
    /// ```
    #[must_use]
    pub fn position(&self, ip: usize) -> u32 {
        let end = self.positions.len().saturating_sub(1);
        self.positions.get(ip.min(end)).copied().unwrap_or_default()
    }

    /// The resume point (see [`is_resume_point`](Self::is_resume_point))
    /// at `position`: the ip of the `CHECKPOINT` there, or of the end.
    /// `None` when no resume point of this program has that position.
    #[must_use]
    pub fn resume_point_at(&self, position: u32) -> Option<usize> {
        // positions never decrease, and only a `VALIDATE` shares its
        // position, with the instruction after it (a `CALL` or an `EMIT`,
        // never a `CHECKPOINT`): the first ip of a position is the only
        // candidate
        let ip = self.positions.partition_point(|p| *p < position);
        (self.positions.get(ip) == Some(&position) && self.is_resume_point(ip)).then_some(ip)
    }

    /// The step the `CHECKPOINT` at `ip` names (`""` at the end), or
    /// `None` when `ip` is not a resume point.
    #[must_use]
    pub fn step_at(&self, ip: usize) -> Option<&str> {
        match self.instrs.get(ip) {
            Some(Instr::Checkpoint { step }) => Some(step),
            None if ip == self.instrs.len() => Some(""),
            _ => None,
        }
    }

    /// The stage called `name`, if the pipeline has one.
    #[must_use]
    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.name() == name)
    }

    /// Every stage name, in order of first appearance.
    #[must_use]
    pub fn stage_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for s in &self.stages {
            if !names.iter().any(|n| n == s.name()) {
                names.push(s.name().to_owned());
            }
        }
        names
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |i: &usize| self.stages.get(*i).map_or("?", Stage::name);
        for (ip, instr) in self.instrs.iter().enumerate() {
            write!(f, "{ip:>4}  ")?;
            match instr {
                Instr::Checkpoint { step } => writeln!(f, "CHECKPOINT  {step}")?,
                Instr::Emit {
                    event: Event::StepStart,
                    stage,
                    ..
                } => writeln!(f, "EMIT        step_start {}", name(stage))?,
                Instr::Emit {
                    event: Event::StepEnd,
                    stage,
                    ..
                } => writeln!(f, "EMIT        step_end {}", name(stage))?,
                Instr::Call { stage } => {
                    let s = &self.stages[*stage];
                    let kind = if s.meta().router { "router" } else { "" };
                    writeln!(f, "CALL        {} {kind}", s.name())?;
                }
                Instr::Fork {
                    branches,
                    join,
                    detached,
                    ..
                } => {
                    let mode = if *detached { "fire-and-forget " } else { "" };
                    let starts: Vec<String> = branches.iter().map(ToString::to_string).collect();
                    writeln!(
                        f,
                        "FORK        {mode}branches at [{}], join at {join}",
                        starts.join(", ")
                    )?;
                }
                Instr::EndBranch => writeln!(f, "END_BRANCH")?,
                Instr::Join => writeln!(f, "JOIN")?,
                Instr::Route { by, routes } => {
                    let table: Vec<String> = routes
                        .iter()
                        .map(|(k, ip)| format!("{k:?} -> {ip}"))
                        .collect();
                    writeln!(f, "ROUTE       by {by}: {}", table.join(", "))?;
                }
                Instr::Sleep { sleep } => {
                    let step = self.sleeps.get(*sleep).map(Sleep::step_name);
                    writeln!(f, "SLEEP       {}", step.unwrap_or_default())?;
                }
                Instr::Wait { wait, routed } => {
                    let step = self.waits.get(*wait).map(Wait::step_name);
                    let routed = if *routed { " (routed)" } else { "" };
                    writeln!(f, "WAIT        {}{routed}", step.unwrap_or_default())?;
                }
                Instr::Child { child } => {
                    let step = self.children.get(*child).map(Child::step_name);
                    writeln!(f, "CHILD       {}", step.unwrap_or_default())?;
                }
                Instr::Jump { to } => writeln!(f, "JUMP        {to}")?,
                Instr::Validate { stage, output } => {
                    let which = if *output { "output" } else { "input" };
                    writeln!(f, "VALIDATE    {which} {}", name(stage))?;
                }
            }
        }
        Ok(())
    }
}

struct Compiler {
    instrs: Vec<Instr>,
    stages: Vec<Stage>,
    sleeps: Vec<Sleep>,
    waits: Vec<Wait>,
    children: Vec<Child>,
    steps: BTreeMap<&'static str, usize>,
    auto_parallel: bool,
}

/// Names identify stages in checkpoints, `replay`, `stage_middleware` and
/// errors, so two different stages (different code) may not share one. The
/// same stage may appear more than once.
fn check_unique_names(stages: &[Stage]) -> Result<()> {
    let mut first: BTreeMap<&str, (usize, [u8; 32])> = BTreeMap::new();
    for (i, s) in stages.iter().enumerate() {
        match first.get(s.name()) {
            None => {
                first.insert(s.name(), (i, s.meta().hash));
            }
            Some((j, hash)) if *hash != s.meta().hash => {
                return Err(Error::build(format!(
                    "two different stages are named `{}`: stage {} and stage {} of the pipeline \
                     (counted in order of appearance); give one of them another name with \
                     `#[stage(name = \"...\")]`",
                    s.name(),
                    j + 1,
                    i + 1
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A wait name is what a signal names, so no two waits of a pipeline may
/// share one.
fn check_unique_waits(waits: &[Wait]) -> Result<()> {
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    for wait in waits {
        for name in wait.names() {
            if let Some(first) = seen.insert(name, wait.step_name()) {
                return Err(Error::build(format!(
                    "two waits of the pipeline are named `{name}` ({first} and {}): a signal \
                     names the wait it is for, so give each wait a name of its own",
                    wait.step_name()
                )));
            }
        }
    }
    Ok(())
}

/// A stage that may be folded: not a router, and both reads and writes declared.
fn foldable(node: &Node) -> Option<&Stage> {
    match node {
        Node::Stage(s)
            if !s.meta().router && s.meta().reads.is_some() && s.meta().writes.is_some() =>
        {
            Some(s)
        }
        _ => None,
    }
}

/// The stages at the start of `nodes` that auto-parallelism folds into
/// one parallel block (the compiler compiles them as `parallel![...]` of one
/// stage per branch, and the [`Structure`](crate::Structure) shows them so):
/// two or more consecutive foldable, pairwise independent stages; fewer
/// than two when nothing folds.
pub(crate) fn folded(nodes: &[Node], auto_parallel: bool) -> Vec<&Stage> {
    let Some(first) = nodes.first().and_then(foldable).filter(|_| auto_parallel) else {
        return Vec::new();
    };
    let mut group: Vec<&Stage> = vec![first];
    while let Some(next) = nodes.get(group.len()).and_then(foldable) {
        if !group.iter().all(|g| independent(g, next)) {
            break;
        }
        group.push(next);
    }
    group
}

fn independent(x: &Stage, y: &Stage) -> bool {
    let (rx, wx) = (
        x.meta().reads.unwrap_or(&[]),
        x.meta().writes.unwrap_or(&[]),
    );
    let (ry, wy) = (
        y.meta().reads.unwrap_or(&[]),
        y.meta().writes.unwrap_or(&[]),
    );
    let meets = |a: &[&str], b: &[&str]| a.iter().any(|k| b.contains(k));
    !meets(wx, ry) && !meets(wx, wy) && !meets(wy, rx)
}

fn label(nodes: &[Node]) -> String {
    let parts: Vec<String> = nodes
        .iter()
        .map(|n| match n {
            Node::Stage(s) => s.name().to_owned(),
            Node::Parallel { branches, .. } => {
                let b: Vec<String> = branches.iter().map(|b| label(b)).collect();
                format!("parallel({})", b.join(", "))
            }
            Node::Route { .. } => "route".to_owned(),
            Node::Sleep(sleep) => sleep.step_name(),
            Node::Wait(wait) => wait.step_name(),
            Node::Child(child) => child.step_name(),
        })
        .collect();
    parts.join(" -> ")
}

/// Declared writes of every stage in a branch, with the stage that declares each.
/// The first stage in `nodes` (nested blocks and routing bodies too) that
/// has a compensator (rule 35), when `routed_only` only one inside a
/// routing body.
fn compensated(nodes: &[Node], routed_only: bool) -> Option<&'static str> {
    nodes.iter().find_map(|n| match n {
        Node::Stage(s) if !routed_only && s.meta().compensate.is_some() => Some(s.name()),
        Node::Stage(_) | Node::Sleep(_) | Node::Wait(_) | Node::Child(_) => None,
        Node::Parallel { branches, .. } => {
            branches.iter().find_map(|b| compensated(b, routed_only))
        }
        Node::Route { routes } => routes.iter().find_map(|(_, b)| compensated(b, false)),
    })
}

fn declared_writes(nodes: &[Node], out: &mut Vec<(&'static str, &'static str)>) {
    for n in nodes {
        match n {
            Node::Stage(s) => {
                for w in s.meta().writes.unwrap_or(&[]) {
                    out.push((w, s.name()));
                }
            }
            Node::Parallel { branches, .. } => {
                branches.iter().for_each(|b| declared_writes(b, out))
            }
            Node::Route { routes } => routes.iter().for_each(|(_, b)| declared_writes(b, out)),
            Node::Sleep(_) | Node::Wait(_) | Node::Child(_) => {}
        }
    }
}

impl Compiler {
    fn push(&mut self, i: Instr) -> usize {
        self.instrs.push(i);
        self.instrs.len() - 1
    }

    /// `block`: the top-level checkpoint covering this sequence, or `None`
    /// when this sequence is itself top level (and gets checkpoints).
    fn seq(&mut self, nodes: &[Node], block: Option<usize>) -> Result<()> {
        let mut i = 0;
        while i < nodes.len() {
            match &nodes[i] {
                Node::Route { .. } => {
                    return Err(Error::build(
                        "a routing block must directly follow a router stage (one returning `Route`) or a wait",
                    ));
                }
                Node::Sleep(sleep) => {
                    let step = sleep.step_name();
                    self.timed(&step, block)?;
                    let at = self.sleeps.len();
                    self.sleeps.push(sleep.clone());
                    self.push(Instr::Sleep { sleep: at });
                    i += 1;
                }
                Node::Child(child) => {
                    let step = child.step_name();
                    child.check()?;
                    self.timed(&step, block)?;
                    let at = self.children.len();
                    self.children.push(child.clone());
                    self.push(Instr::Child { child: at });
                    i += 1;
                }
                Node::Wait(wait) => {
                    let step = wait.step_name();
                    let routes = match nodes.get(i + 1) {
                        Some(Node::Route { routes }) => Some(routes),
                        _ => None,
                    };
                    let keys: Option<Vec<&str>> =
                        routes.map(|r| r.iter().map(|(k, _)| k.as_str()).collect());
                    let mut wait = wait.clone();
                    wait.check(keys.as_deref())?;
                    self.timed(&step, block)?;
                    let at = self.waits.len();
                    self.waits.push(wait);
                    self.push(Instr::Wait {
                        wait: at,
                        routed: routes.is_some(),
                    });
                    match routes {
                        Some(routes) => {
                            self.route(&step, routes, block)?;
                            i += 2;
                        }
                        None => i += 1,
                    }
                }
                Node::Stage(s) if s.meta().router => {
                    let Some(Node::Route { routes }) = nodes.get(i + 1) else {
                        return Err(Error::build(format!(
                            "router `{}` returns `Route` but no routing block follows it",
                            s.name()
                        )));
                    };
                    self.stage(s, block);
                    self.route(s.name(), routes, block)?;
                    i += 2;
                }
                Node::Stage(s) => {
                    let group = folded(&nodes[i..], self.auto_parallel);
                    if group.len() > 1 {
                        let branches: Vec<Vec<Node>> = group
                            .iter()
                            .map(|s| vec![Node::Stage((*s).clone())])
                            .collect();
                        self.parallel(&branches, false, block)?;
                        i += group.len();
                    } else {
                        self.stage(s, block);
                        i += 1;
                    }
                }
                Node::Parallel { branches, detached } => {
                    self.parallel(branches, *detached, block)?;
                    i += 1;
                }
            }
        }
        Ok(())
    }

    /// The checkpoint of a sleep or wait named `step`: a top-level step of
    /// its own, refused inside a parallel block (`block`), whose branches
    /// share their block's checkpoint and could not park alone.
    fn timed(&mut self, step: &str, block: Option<usize>) -> Result<()> {
        if block.is_some() {
            return Err(Error::build(format!(
                "{step} is inside a parallel block: a sleep, wait or child run is a step of its own, in \
                 the pipeline's sequence or a routing body of it; put it before or after the block"
            )));
        }
        self.checkpoint(step.to_owned(), None);
        Ok(())
    }

    fn checkpoint(&mut self, step: String, block: Option<usize>) -> usize {
        match block {
            Some(ip) => ip,
            None => self.push(Instr::Checkpoint { step: step.into() }),
        }
    }

    fn stage(&mut self, s: &Stage, block: Option<usize>) -> usize {
        let cp = self.checkpoint(s.name().to_owned(), block);
        self.steps.entry(s.name()).or_insert(cp);
        let idx = self.stages.len();
        self.stages.push(s.clone());
        // EMIT, [VALIDATE], CALL: the call's ip is known before it is pushed
        let call = self.instrs.len() + 1 + usize::from(s.meta().input.is_some());
        self.push(Instr::Emit {
            event: Event::StepStart,
            stage: idx,
            call,
        });
        if s.meta().input.is_some() {
            self.push(Instr::Validate {
                stage: idx,
                output: false,
            });
        }
        let at = self.push(Instr::Call { stage: idx });
        debug_assert_eq!(at, call);
        if s.meta().output.is_some() {
            self.push(Instr::Validate {
                stage: idx,
                output: true,
            });
        }
        self.push(Instr::Emit {
            event: Event::StepEnd,
            stage: idx,
            call,
        });
        idx
    }

    fn parallel(
        &mut self,
        branches: &[Vec<Node>],
        detached: bool,
        block: Option<usize>,
    ) -> Result<()> {
        if branches.is_empty() || branches.iter().any(Vec::is_empty) {
            return Err(Error::build(
                "a parallel block needs at least one branch, and no branch may be empty",
            ));
        }
        let mut writes: Vec<(&'static str, &'static str, usize)> = Vec::new();
        for (bi, b) in branches.iter().enumerate() {
            let mut w = Vec::new();
            declared_writes(b, &mut w);
            for (key, stage) in w {
                if let Some((_, other, _)) = writes.iter().find(|(k, _, ob)| *k == key && *ob != bi)
                {
                    return Err(Error::build(format!(
                        "parallel branches both declare a write of `{key}`: stages `{other}` and `{stage}`"
                    )));
                }
                writes.push((key, stage, bi));
            }
        }
        // rule 35: a compensated stage's completion must be in the journal
        let unrecorded = branches.iter().find_map(|b| compensated(b, !detached));
        if let Some(stage) = unrecorded {
            return Err(Error::build(if detached {
                format!(
                    "stage `{stage}` has a compensator but runs fire-and-forget: nothing records \
                     that it completed, so it could not be compensated; run it in the sequence or \
                     a parallel block"
                )
            } else {
                format!(
                    "stage `{stage}` has a compensator but runs in a routing body inside a \
                     parallel block: the block records what its branches wrote, not which route \
                     ran, so it could not be compensated; route outside the block"
                )
            }));
        }
        let names: Vec<Arc<str>> = branches.iter().map(|b| Arc::from(label(b))).collect();
        let step = format!(
            "parallel({})",
            names.iter().map(|n| &**n).collect::<Vec<_>>().join(", ")
        );
        let cp = self.checkpoint(step, block);
        let fork = self.push(Instr::Fork {
            branches: Vec::new(),
            names,
            join: 0,
            detached,
        });
        let mut starts = Vec::with_capacity(branches.len());
        for b in branches {
            starts.push(self.instrs.len());
            self.seq(b, Some(cp))?;
            self.push(Instr::EndBranch);
        }
        let join = self.push(Instr::Join);
        if let Instr::Fork {
            branches, join: j, ..
        } = &mut self.instrs[fork]
        {
            *branches = starts;
            *j = join;
        }
        Ok(())
    }

    fn route(
        &mut self,
        router_name: &str,
        routes: &[(String, Vec<Node>)],
        block: Option<usize>,
    ) -> Result<()> {
        if routes.is_empty() {
            return Err(Error::build(format!(
                "the routing block after `{router_name}` has no routes"
            )));
        }
        for (i, (key, body)) in routes.iter().enumerate() {
            if body.is_empty() {
                return Err(Error::build(format!(
                    "route `{key}` after router `{router_name}` has an empty body"
                )));
            }
            if routes[..i].iter().any(|(k, _)| k == key) {
                return Err(Error::build(format!(
                    "route `{key}` appears twice after router `{router_name}`"
                )));
            }
        }
        let at = self.push(Instr::Route {
            by: Arc::from(router_name),
            routes: Vec::new(),
        });
        let mut table = Vec::with_capacity(routes.len());
        let mut jumps = Vec::with_capacity(routes.len());
        for (key, body) in routes {
            table.push((Arc::from(key.as_str()), self.instrs.len()));
            self.seq(body, block)?;
            jumps.push(self.push(Instr::Jump { to: 0 }));
        }
        let end = self.instrs.len();
        for j in jumps {
            self.instrs[j] = Instr::Jump { to: end };
        }
        if let Instr::Route { routes, .. } = &mut self.instrs[at] {
            *routes = table;
        }
        Ok(())
    }
}

/// The [`Structure`] a checkpoint records of the pipeline made of `root`:
/// its shape as the compiler lays it out (stages that auto-parallelism folds
/// show as the parallel block they become) and each stage's code hash.
pub(crate) fn structure_of(root: &[Node], auto_parallel: bool) -> Structure {
    let mut s = ShapeWriter::default();
    s.seq(root, auto_parallel);
    if auto_parallel {
        s.shape.push_str(" auto");
    }
    Structure::new(s.shape, s.stages)
}

/// Writes a shape's canonical text while it walks the node tree.
#[derive(Default)]
struct ShapeWriter {
    shape: String,
    stages: Vec<StageCode>,
}

impl ShapeWriter {
    fn stage(&mut self, stage: &Stage) {
        self.shape.push_str(stage.name());
        let meta = stage.meta();
        if !self.stages.iter().any(|s| s.name == meta.name) {
            self.stages.push(StageCode::new(meta.name, meta.hash));
        }
    }

    fn seq(&mut self, nodes: &[Node], auto: bool) {
        self.shape.push('[');
        let mut i = 0;
        while let Some(node) = nodes.get(i) {
            if i > 0 {
                self.shape.push_str(", ");
            }
            let group = folded(&nodes[i..], auto);
            if group.len() > 1 {
                // what `parallel![a, b]` shows: one stage per branch
                self.shape.push_str("parallel[");
                for (j, stage) in group.iter().enumerate() {
                    if j > 0 {
                        self.shape.push_str(", ");
                    }
                    self.shape.push('[');
                    self.stage(stage);
                    self.shape.push(']');
                }
                self.shape.push(']');
                i += group.len();
                continue;
            }
            i += 1;
            match node {
                Node::Stage(stage) => self.stage(stage),
                Node::Parallel { branches, detached } => {
                    self.shape.push_str(if *detached {
                        "fire_and_forget"
                    } else {
                        "parallel"
                    });
                    self.shape.push('[');
                    for (j, branch) in branches.iter().enumerate() {
                        if j > 0 {
                            self.shape.push_str(", ");
                        }
                        self.seq(branch, auto);
                    }
                    self.shape.push(']');
                }
                Node::Sleep(sleep) => self.shape.push_str(&sleep.step_name()),
                Node::Wait(wait) => self.shape.push_str(&wait.describe()),
                Node::Child(child) => self.shape.push_str(&child.describe()),
                Node::Route { routes } => {
                    self.shape.push_str("routes{");
                    for (j, (key, body)) in routes.iter().enumerate() {
                        if j > 0 {
                            self.shape.push_str(", ");
                        }
                        // `Debug` quotes and escapes the key, so no key can
                        // imitate the punctuation around it
                        let _ = write!(self.shape, "{key:?}: ");
                        self.seq(body, auto);
                    }
                    self.shape.push('}');
                }
            }
        }
        self.shape.push(']');
    }
}
