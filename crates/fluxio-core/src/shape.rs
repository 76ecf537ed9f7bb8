//! Pipelines built from data (contract rule 33): a [`Shape`] read from
//! configuration (JSON, TOML, YAML: any serde format) and the stages it
//! names, looked up in a [`StageRegistry`], make the same
//! [`PipelineBuilder`] as `pipeline![...]` of that shape: the same
//! compiler, program, semantics, errors and version.
//!
//! # The schema (version 1)
//!
//! A shape is `{ "version": 1, "name": "orders", "steps": [STEP, ...] }`
//! (`name` optional: the pipeline's name). A step is one of:
//!
//! | step | as `pipeline!` writes it |
//! |---|---|
//! | `{ "stage": "validate" }` | `validate` |
//! | `{ "parallel": [[STEP, ...], [STEP, ...]] }` | `parallel![[..], [..]]` |
//! | `{ "fire_and_forget": [[STEP, ...], ...] }` | `fire_and_forget![..]` |
//! | `{ "route": { "router": "pick", "routes": [{ "name": "x", "steps": [STEP, ...] }] } }` | `pick => { "x" => [..] }` |
//! | `{ "sleep": "24h" }` | `sleep!("24h")` |
//! | `{ "child": { "pipeline": "billing", "input": ["a"], "output": ["b"], "failure": "f", "deadline": "1h", "poll": "5s", "each": "items", "item": "item", "into": "out" } }` (all but `pipeline` optional) | `child!("billing", ...)` |
//! | `{ "pipeline": "billing" }` | a registered [`Pipeline`](crate::Pipeline)'s steps, in place |
//!
//! A `pipeline` step runs a built pipeline's steps as if written there (a
//! route body or a parallel branch may be one); the version counts it by
//! that pipeline's version. Its stages take their resources, and its child
//! steps their pipelines, from the builder the shape makes. A `child` step
//! runs a registered pipeline as a child run (rule 29); the builder
//! registers it.
//!
//! In TOML, a step is an inline table: `steps = [{ stage = "validate" },
//! { parallel = [[{ stage = "price" }], [{ stage = "stock" }]] }]`.
//!
//! # Limits and errors
//!
//! [`StageRegistry::builder`] refuses, with [`Error::Build`] naming the
//! place (`steps[2].parallel[1][0]`): a stage not registered (naming the
//! registered ones), a router where a stage goes or a stage where a router
//! goes, an empty block, a route named twice, a sleep that does not parse,
//! more than [`MAX_SHAPE_STEPS`] steps or more than [`MAX_SHAPE_DEPTH`]
//! levels of nesting, and a schema version other than [`SHAPE_VERSION`]. A
//! stage registered twice under one name is refused when registered
//! ([`StageRegistry::stage`] returns the error at `builder`).
//!
//! ```
//! use fluxio_core::shape::{Shape, Step, StageRegistry};
//! use fluxio_core::{InMemoryStore, Stage};
//! # fn stages() -> Vec<Stage> { fluxio_core::__private::doc_stages(&["validate", "charge"]) }
//!
//! let shape = Shape::new(vec![Step::stage("validate"), Step::stage("chrage")]).named("checkout");
//! let registry = stages().into_iter().fold(StageRegistry::new(), StageRegistry::stage);
//! let err = registry.builder(&shape).expect_err("a typo").to_string();
//! assert!(err.contains("steps[1]: stage `chrage` is not registered"), "{err}");
//!
//! let fixed = Shape::new(vec![Step::stage("validate"), Step::stage("charge")]).named("checkout");
//! let pipeline = registry.builder(&fixed)?.store(InMemoryStore::new()).build()?;
//! assert_eq!(pipeline.name(), "checkout");
//! # Ok::<(), fluxio_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::compile::Node;
use crate::error::{Error, Result};
use crate::pipeline::PipelineBuilder;
use crate::stage::Stage;
use crate::version::VersionHasher;
use crate::waiting::Sleep;

/// The schema version this build reads and writes.
pub const SHAPE_VERSION: u32 = 1;

/// The most steps a shape may hold, counted at every level.
pub const MAX_SHAPE_STEPS: usize = 10_000;

/// The most levels of blocks (parallel, fire-and-forget, routes) a shape
/// may nest.
pub const MAX_SHAPE_DEPTH: usize = 32;

/// The longest shape [`Shape::from_json`] reads, in bytes (4 MiB).
pub const MAX_SHAPE_BYTES: usize = 4 << 20;

/// A pipeline's shape, as data (contract rule 33): see the
/// [module](self) for the schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Shape {
    /// The schema version ([`SHAPE_VERSION`]).
    pub version: u32,
    /// The pipeline's name, when the shape gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The steps, in order.
    pub steps: Vec<Step>,
}

impl Shape {
    /// A shape of `steps`, in the current schema, with no name.
    #[must_use]
    pub fn new(steps: Vec<Step>) -> Self {
        Shape {
            version: SHAPE_VERSION,
            name: None,
            steps,
        }
    }

    /// The shape in the JSON document `json` (see the [module](self) for
    /// the schema), at most [`MAX_SHAPE_BYTES`] long: a longer one is
    /// refused before it is parsed, so reading a shape takes bounded memory.
    ///
    /// ```
    /// use fluxio_core::shape::{Shape, Step};
    ///
    /// let shape = Shape::from_json(br#"{"version": 1, "steps": [{"stage": "validate"}]}"#)?;
    /// assert_eq!(shape.steps, [Step::stage("validate")]);
    /// let err = Shape::from_json(br#"{"version": 1, "steps": [{"stgae": "x"}]}"#).unwrap_err();
    /// assert!(err.to_string().contains("steps[0]"), "{err}");
    /// # Ok::<(), fluxio_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Build`]: a document too long, not JSON (its line and
    /// column), or not a shape (the path to the field, `steps[0]`).
    pub fn from_json(json: &[u8]) -> Result<Shape> {
        if json.len() > MAX_SHAPE_BYTES {
            return Err(Error::build(format!(
                "the shape is {} bytes; a shape is at most {MAX_SHAPE_BYTES}",
                json.len()
            )));
        }
        let mut de = serde_json::Deserializer::from_slice(json);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| Error::build(format!("shape: {}: {}", e.path(), e.inner())))
    }

    /// The same shape, naming the pipeline `name`.
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// One step of a [`Shape`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Step {
    /// The registered stage of this name.
    Stage(String),
    /// Branches run at once from forks of the context, then merged.
    Parallel(Vec<Vec<Step>>),
    /// Branches run in the background; the run does not wait for them.
    FireAndForget(Vec<Vec<Step>>),
    /// A router stage, then the body of the route it picks.
    Route(RouteBlock),
    /// A durable sleep (rule 25) of this duration (`"24h"`, `"1h 30m"`).
    Sleep(String),
    /// A child run of a registered pipeline (rule 29).
    Child(ChildStep),
    /// A registered pipeline's steps, in place.
    Pipeline(String),
}

/// A child step ([`Step::Child`]), as `child!` takes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ChildStep {
    /// The registered pipeline the child runs.
    pub pipeline: String,
    /// Only these keys go to the child (default: the whole context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Vec<String>>,
    /// Only these keys come back (default: the child's whole context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Vec<String>>,
    /// A failed child's failure goes under this key instead of failing
    /// the parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The child's own deadline (`"1h"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// How often the parent looks at its child (`"5s"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<String>,
    /// A fan-out: one child per item of this list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<String>,
    /// The key each fan-out child gets its item under (default `item`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// Where a fan-out's results go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub into: Option<String>,
}

impl ChildStep {
    /// A child run of the registered pipeline `pipeline`, every option
    /// left out.
    #[must_use]
    pub fn of(pipeline: impl Into<String>) -> Self {
        ChildStep {
            pipeline: pipeline.into(),
            ..ChildStep::default()
        }
    }
}

impl Step {
    /// The registered stage `name`.
    #[must_use]
    pub fn stage(name: impl Into<String>) -> Self {
        Step::Stage(name.into())
    }
}

/// A router and its routes: [`Step::Route`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteBlock {
    /// The registered router stage.
    pub router: String,
    /// The routes, in order.
    pub routes: Vec<RouteBody>,
}

impl RouteBlock {
    /// The router `router` with `routes`.
    #[must_use]
    pub fn new(router: impl Into<String>, routes: Vec<RouteBody>) -> Self {
        RouteBlock {
            router: router.into(),
            routes,
        }
    }
}

/// One route of a [`RouteBlock`]: the name a router returns, and the steps
/// run then.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteBody {
    /// The route's name.
    pub name: String,
    /// Its steps.
    pub steps: Vec<Step>,
}

impl RouteBody {
    /// The route `name` running `steps`.
    #[must_use]
    pub fn new(name: impl Into<String>, steps: Vec<Step>) -> Self {
        RouteBody {
            name: name.into(),
            steps,
        }
    }
}

/// The stages a [`Shape`] may name, by name (contract rule 33).
#[derive(Clone, Debug, Default)]
pub struct StageRegistry {
    stages: BTreeMap<&'static str, Stage>,
    pipelines: BTreeMap<String, crate::Pipeline>,
    /// Names registered twice, refused at `builder`.
    twice: Vec<&'static str>,
}

impl StageRegistry {
    /// An empty registry.
    #[must_use]
    pub fn new() -> Self {
        StageRegistry::default()
    }

    /// Registers `stage` under its name. Two different stages under one
    /// name make [`builder`](Self::builder) fail, naming it.
    #[must_use]
    pub fn stage(mut self, stage: Stage) -> Self {
        let name = stage.name();
        match self.stages.get(name) {
            Some(known) if known.meta().hash != stage.meta().hash => self.twice.push(name),
            _ => {
                self.stages.insert(name, stage);
            }
        }
        self
    }

    /// Registers the `#[stage]` `S` (`registry.with::<validate>()`).
    #[must_use]
    pub fn with<S: crate::stage::StageDef>(self) -> Self {
        self.stage(S::stage())
    }

    /// Registers the built `pipeline` under its name, for `pipeline` and
    /// `child` steps.
    #[must_use]
    pub fn pipeline(mut self, pipeline: crate::Pipeline) -> Self {
        self.pipelines.insert(pipeline.name().to_owned(), pipeline);
        self
    }

    /// The registered stages' names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.stages.keys().copied()
    }

    /// The builder of the pipeline `shape` describes: its name (when the
    /// shape gives one), its nodes and its version, as `pipeline![...]` of
    /// that shape makes them. Set the store and options on it, then
    /// `build` (which checks what the compiler checks).
    ///
    /// # Errors
    /// [`Error::Build`] naming the place: see the [module](self).
    pub fn builder(&self, shape: &Shape) -> Result<PipelineBuilder> {
        if let Some(name) = self.twice.first() {
            return Err(Error::build(format!(
                "stage `{name}` is registered twice, as two different stages"
            )));
        }
        if shape.version != SHAPE_VERSION {
            return Err(Error::build(format!(
                "the shape is in schema version {}; this build reads version {SHAPE_VERSION}",
                shape.version
            )));
        }
        let mut walk = Walk {
            registry: self,
            steps: 0,
            children: Vec::new(),
        };
        let hasher = VersionHasher::pipeline();
        let (nodes, hasher) = walk.seq(&shape.steps, "steps", 0, hasher)?;
        let mut builder = PipelineBuilder::new(nodes, hasher.finish(false), hasher.finish(true));
        for child in walk.children {
            builder = builder.child(child);
        }
        if let Some(name) = &shape.name {
            builder = builder.name(name);
        }
        Ok(builder)
    }
}

/// A walk over a shape: its nodes, and the hasher calls `pipeline!` makes
/// for the same shape (in `fluxio-macros`' `pipeline.rs`, `Emit::seq`).
struct Walk<'a> {
    registry: &'a StageRegistry,
    steps: usize,
    /// The registered pipelines the child steps run.
    children: Vec<crate::Pipeline>,
}

impl Walk<'_> {
    fn seq(
        &mut self,
        steps: &[Step],
        at: &str,
        depth: usize,
        mut hash: VersionHasher,
    ) -> Result<(Vec<Node>, VersionHasher)> {
        if depth > MAX_SHAPE_DEPTH {
            return Err(Error::build(format!(
                "{at}: blocks nest more than {MAX_SHAPE_DEPTH} levels deep"
            )));
        }
        let mut nodes = Vec::with_capacity(steps.len());
        hash = hash.seq_start();
        for (i, step) in steps.iter().enumerate() {
            let at = format!("{at}[{i}]");
            self.steps += 1;
            if self.steps > MAX_SHAPE_STEPS {
                return Err(Error::build(format!(
                    "{at}: the shape has more than {MAX_SHAPE_STEPS} steps"
                )));
            }
            match step {
                Step::Stage(name) => {
                    let stage = self.lookup(name, &at, false)?;
                    hash = hash.stage(&stage.meta().hash);
                    nodes.push(Node::Stage(stage));
                }
                Step::Parallel(branches) | Step::FireAndForget(branches) => {
                    let detached = matches!(step, Step::FireAndForget(_));
                    let block = if detached {
                        "fire_and_forget"
                    } else {
                        "parallel"
                    };
                    if branches.is_empty() || branches.iter().any(Vec::is_empty) {
                        return Err(Error::build(format!(
                            "{at}.{block}: a block needs branches, each with a step"
                        )));
                    }
                    let n = u32::try_from(branches.len()).unwrap_or(u32::MAX);
                    hash = if detached {
                        hash.fire_and_forget(n)
                    } else {
                        hash.parallel(n)
                    };
                    let mut built = Vec::with_capacity(branches.len());
                    for (b, branch) in branches.iter().enumerate() {
                        let (branch_nodes, h) =
                            self.seq(branch, &format!("{at}.{block}[{b}]"), depth + 1, hash)?;
                        hash = h;
                        built.push(branch_nodes);
                    }
                    nodes.push(Node::Parallel {
                        branches: built,
                        detached,
                    });
                }
                Step::Route(block) => {
                    let router = self.lookup(&block.router, &format!("{at}.route.router"), true)?;
                    hash = hash.stage(&router.meta().hash);
                    nodes.push(Node::Stage(router));
                    if block.routes.is_empty() {
                        return Err(Error::build(format!(
                            "{at}.route: a router needs at least one route"
                        )));
                    }
                    let n = u32::try_from(block.routes.len()).unwrap_or(u32::MAX);
                    hash = hash.routes(n);
                    let mut routes = Vec::with_capacity(block.routes.len());
                    for (r, route) in block.routes.iter().enumerate() {
                        if block.routes[..r].iter().any(|o| o.name == route.name) {
                            return Err(Error::build(format!(
                                "{at}.route.routes[{r}]: route {:?} is named twice",
                                route.name
                            )));
                        }
                        hash = hash.route_key(&route.name);
                        let (body, h) = self.seq(
                            &route.steps,
                            &format!("{at}.route.routes[{r}].steps"),
                            depth + 1,
                            hash,
                        )?;
                        hash = h;
                        routes.push((route.name.clone(), body));
                    }
                    nodes.push(Node::Route { routes });
                }
                Step::Sleep(text) => {
                    let d = crate::clock::parse_duration(text).map_err(|e| match e {
                        Error::InvalidSetting { message, .. } => {
                            Error::build(format!("{at}.sleep: {message}"))
                        }
                        other => other,
                    })?;
                    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                    hash = hash.sleep_for(ms);
                    nodes.push(Node::Sleep(Sleep::after(Duration::from_millis(ms))));
                }
                Step::Child(step) => {
                    let (node, h) = self.child(step, &format!("{at}.child"), hash)?;
                    hash = h;
                    nodes.push(node);
                }
                Step::Pipeline(name) => {
                    let Some(inner) = self.registry.pipelines.get(name) else {
                        return Err(self.unregistered(name, &format!("{at}.pipeline")));
                    };
                    self.steps += inner.nodes().len();
                    hash = hash
                        .part(b"pipeline")
                        .part(inner.name().as_bytes())
                        .part(inner.version().as_bytes());
                    nodes.extend(inner.nodes().iter().cloned());
                }
            }
        }
        Ok((nodes, hash.seq_end()))
    }

    /// A registered pipeline's name missing at `at`.
    fn unregistered(&self, name: &str, at: &str) -> Error {
        let known: Vec<&str> = self.registry.pipelines.keys().map(String::as_str).collect();
        Error::build(format!(
            "{at}: pipeline `{}` is not registered (registered: {})",
            name.chars().take(64).collect::<String>(),
            known.join(", ")
        ))
    }

    /// A child step's node and hasher calls, as `child!`'s.
    fn child(
        &mut self,
        step: &ChildStep,
        at: &str,
        mut hash: VersionHasher,
    ) -> Result<(Node, VersionHasher)> {
        let Some(pipeline) = self.registry.pipelines.get(&step.pipeline) else {
            return Err(self.unregistered(&step.pipeline, &format!("{at}.pipeline")));
        };
        if !self.children.iter().any(|c| c.name() == pipeline.name()) {
            self.children.push(pipeline.clone());
        }
        let ms = |text: &Option<String>, what: &str| -> Result<Option<u64>> {
            text.as_deref()
                .map(|t| match crate::clock::parse_duration(t) {
                    Ok(d) => Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    Err(Error::InvalidSetting { message, .. }) => {
                        Err(Error::build(format!("{at}.{what}: {message}")))
                    }
                    Err(e) => Err(e),
                })
                .transpose()
        };
        let (deadline, poll) = (ms(&step.deadline, "deadline")?, ms(&step.poll, "poll")?);
        let mut child = crate::child::Child::of(step.pipeline.as_str());
        hash = hash.child(&step.pipeline);
        for (keys, output) in [(&step.input, false), (&step.output, true)] {
            match keys {
                None => hash = hash.child_keys(None),
                Some(keys) => {
                    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                    hash = hash.child_keys(Some(&refs));
                    child = if output {
                        child.output(keys.iter().cloned())
                    } else {
                        child.input(keys.iter().cloned())
                    };
                }
            }
        }
        match (&step.each, &step.into) {
            (Some(each), Some(into)) => {
                let item = step.item.as_deref().unwrap_or("item");
                hash = hash.child_each(each, item, into);
                child = child.each(each.as_str(), item, into.as_str());
            }
            (None, None) if step.item.is_none() => {}
            _ => {
                return Err(Error::build(format!(
                    "{at}: a fan-out needs both `each` and `into` (and `item` only with them)"
                )));
            }
        }
        if let Some(key) = &step.failure {
            child = child.failure_into(key.as_str());
        }
        if let Some(ms) = deadline {
            child = child.deadline(Duration::from_millis(ms));
        }
        if let Some(ms) = poll {
            child = child.poll(Duration::from_millis(ms));
        }
        hash = hash.child_end(step.failure.as_deref(), deadline);
        Ok((Node::Child(child), hash))
    }

    /// The registered stage `name` at `at`, a router where one goes.
    fn lookup(&self, name: &str, at: &str, router: bool) -> Result<Stage> {
        let Some(stage) = self.registry.stages.get(name) else {
            let known: Vec<&str> = self.registry.names().collect();
            return Err(Error::build(format!(
                "{at}: stage `{}` is not registered (registered: {})",
                name.chars().take(64).collect::<String>(),
                known.join(", ")
            )));
        };
        match (stage.meta().router, router) {
            (true, false) => Err(Error::build(format!(
                "{at}: `{name}` is a router: it goes in a route step, before its routes"
            ))),
            (false, true) => Err(Error::build(format!(
                "{at}: `{name}` is not a router (it returns no `Route`)"
            ))),
            _ => Ok(stage.clone()),
        }
    }
}
