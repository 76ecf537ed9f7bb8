//! A test kit: run one stage alone, through middleware, and check what it did.
//! (Runnable versions of this example are in the repository's
//! `tests/tests/it/testing_kit.rs`; `#[stage]` is not available inside this crate.)
//!
//! ```text
//! use fluxio::testing::StageTest;
//! use fluxio::{ctx, stage, Context, StageResult};
//!
//! #[stage]
//! async fn greet(ctx: Context) -> StageResult {
//!     let name: String = ctx.get("name")?;
//!     Ok(ctx.set("greeting", format!("hello, {name}"))?)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> fluxio::Result<()> {
//! let run = StageTest::of::<greet>().run(ctx! { "name" => "Ada" }?).await?;
//! run.assert_wrote(&["greeting"]);
//! assert_eq!(run.context.get::<String>("greeting")?, "hello, Ada");
//! # Ok(()) }
//! ```
//!
//! (`pipeline.run_step(name, ctx)` runs one stage of a built pipeline, with
//! the pipeline's middleware, the same way.)

use std::borrow::Cow;
use std::sync::Arc;

use crate::context::Context;
use crate::error::Result;
use crate::middleware::{Middleware, Next};
use crate::stage::{Output, Resources, Stage, StageDef};
use crate::stream::result_key;
use crate::value::Value;

/// One stage under test, with the middleware to run it through.
#[derive(Debug, Clone)]
pub struct StageTest {
    stage: Stage,
    middleware: Vec<Arc<dyn Middleware>>,
    resources: Resources,
}

/// What one call of a stage did.
#[derive(Debug, Clone)]
pub struct StageRun {
    /// The context the stage returned (for a router: the input with its patch applied).
    pub context: Context,
    /// The route a router chose.
    pub route: Option<String>,
    /// The chunks a stream stage emitted, in order.
    pub chunks: Vec<Value>,
    /// The keys the stage wrote (set, updated or removed), in order; for a
    /// stream stage this includes `<stage>_stream_result`.
    pub written: Vec<String>,
}

impl StageTest {
    /// The stage `S` (a function marked `#[stage]`): `StageTest::of::<greet>()`.
    #[must_use]
    pub fn of<S: StageDef>() -> Self {
        Self::new(S::stage())
    }

    /// A stage in its runtime form.
    #[must_use]
    pub fn new(stage: Stage) -> Self {
        StageTest {
            stage,
            middleware: Vec::new(),
            resources: Resources::default(),
        }
    }

    /// Supplies `value` as the resource of type `T` for a stage taking a
    /// [`Resource<T>`](crate::Resource) (a mock pool, a fake client).
    #[must_use]
    pub fn resource<T: std::marker::Send + Sync + 'static>(mut self, value: T) -> Self {
        self.resources.insert(value);
        self
    }

    /// Adds middleware; the first added is the outermost.
    #[must_use]
    pub fn middleware(mut self, middleware: impl Middleware) -> Self {
        self.middleware.push(Arc::new(middleware));
        self
    }

    /// Calls the stage once on `ctx` through the middleware.
    ///
    /// # Errors
    /// The stage's failure (or a middleware's), as a pipeline would return
    /// it; [`Error::Build`](crate::Error::Build) naming the stage and the
    /// type when the stage takes a resource not supplied with
    /// [`resource`](Self::resource); a middleware's
    /// [`check`](Middleware::check) error.
    pub async fn run(&self, ctx: Context) -> Result<StageRun> {
        for m in &self.middleware {
            m.check()?;
        }
        if let Some(req) = self.stage.missing_resource(&self.resources) {
            return Err(self
                .stage
                .missing_resource_error(&req, "supply it with `StageTest::resource(value)`"));
        }
        let stage = self
            .stage
            .clone()
            .with_resources(Arc::new(self.resources.clone()));
        let input = ctx.clear_written();
        let (context, route) = match Next::new(&stage, &self.middleware)
            .run(input.clone())
            .await?
        {
            Output::Context(c) => (c, None),
            Output::Route(send) => {
                let route = send.route.clone();
                let c = send
                    .patch
                    .into_iter()
                    .fold(input, |c, (k, v)| c.set_value(k, v));
                (c, Some(route))
            }
        };
        let chunks = match context
            .value(&result_key(stage.name()))
            .map(Cow::into_owned)
        {
            Some(Value::Seq(items)) => items,
            _ => Vec::new(),
        };
        let written = context.written().map(str::to_owned).collect();
        Ok(StageRun {
            context,
            route,
            chunks,
            written,
        })
    }
}

impl StageTest {
    /// Calls the stage once on `ctx` as [`run`](Self::run) does, in a task
    /// of its own, and hands a stream stage's chunks to the test one by one
    /// as it emits them ([`StageStream::next`]): the stage waits at each
    /// `emit` until the test has read the chunk before (a buffer of one),
    /// as a slow consumer of [`Pipeline::stream`](crate::Pipeline::stream)
    /// makes it. Needs a tokio runtime.
    #[must_use]
    pub fn stream(&self, ctx: Context) -> StageStream {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let test = self.clone();
        let task =
            tokio::spawn(crate::stream::STREAM_TX.scope(tx, async move { test.run(ctx).await }));
        StageStream { rx, task }
    }
}

/// A stage called by [`StageTest::stream`]: its chunks as it emits them,
/// then what the call did.
#[derive(Debug)]
pub struct StageStream {
    rx: tokio::sync::mpsc::Receiver<Result<crate::stream::StreamEvent>>,
    task: tokio::task::JoinHandle<Result<StageRun>>,
}

impl StageStream {
    /// The next chunk the stage emits, as soon as it emits it; `None` once
    /// the stage returned.
    pub async fn next(&mut self) -> Option<Value> {
        while let Some(event) = self.rx.recv().await {
            if let Ok(crate::stream::StreamEvent::Chunk(chunk)) = event {
                return Some(chunk.value);
            }
        }
        None
    }

    /// Reads what is left of the stream and returns what the call did (its
    /// [`chunks`](StageRun::chunks) are all of them, read or not).
    ///
    /// # Errors
    /// As [`StageTest::run`]; [`Error::Internal`](crate::Error::Internal)
    /// when the stage panicked.
    pub async fn finish(mut self) -> Result<StageRun> {
        while self.next().await.is_some() {}
        self.task.await.map_err(|e| crate::Error::Internal {
            message: format!("the stage under test panicked: {e}"),
        })?
    }
}

impl StageRun {
    /// Asserts that the stage wrote exactly `keys` (in any order).
    ///
    /// # Panics
    /// When it wrote other keys, or not all of them; the message lists both.
    #[track_caller]
    pub fn assert_wrote(&self, keys: &[&str]) {
        let mut expected: Vec<&str> = keys.to_vec();
        expected.sort_unstable();
        expected.dedup();
        let actual: Vec<&str> = self.written.iter().map(String::as_str).collect();
        assert!(
            actual == expected,
            "the stage wrote {actual:?}, expected exactly {expected:?}"
        );
    }
}

/// A duration for [`TestClock::advance`]: a [`Duration`](std::time::Duration),
/// or text such as `"72h"` or `"1h 30m"` ([`parse_duration`](crate::clock::parse_duration)).
pub trait IntoDuration {
    /// The duration.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) naming
    /// `duration` for text that is not one.
    fn into_duration(self) -> Result<std::time::Duration>;
}

impl IntoDuration for std::time::Duration {
    fn into_duration(self) -> Result<std::time::Duration> {
        Ok(self)
    }
}

impl IntoDuration for &str {
    fn into_duration(self) -> Result<std::time::Duration> {
        crate::clock::parse_duration(self)
    }
}

/// A clock that tests move (contract rule 28): give its
/// [`clock`](TestClock::clock) to the pipeline
/// ([`PipelineBuilder::clock`](crate::PipelineBuilder::clock)) and to the
/// worker's pipelines, then [`advance`](TestClock::advance) it: sleeps end,
/// deadlines pass and recovery backoffs elapse when the test says so, and
/// a worker's [`run_once`](crate::recovery::RecoveryWorker::run_once)
/// continues exactly what became due.
///
/// ```
/// use fluxio_core::testing::TestClock;
/// let clock = TestClock::new();
/// let start = clock.now_ms();
/// assert_eq!(clock.advance("72h")?, start + 72 * 3_600_000);
/// # Ok::<(), fluxio_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct TestClock {
    clock: crate::clock::Clock,
}

impl Default for TestClock {
    fn default() -> Self {
        TestClock::new()
    }
}

impl TestClock {
    /// A clock that reads the wall clock's time now, until advanced.
    #[must_use]
    pub fn new() -> Self {
        TestClock::at(crate::store::now_ms())
    }

    /// A clock that reads `ms` (milliseconds since the Unix epoch) until
    /// advanced.
    #[must_use]
    pub fn at(ms: u64) -> Self {
        TestClock {
            clock: crate::clock::Clock::manual(ms),
        }
    }

    /// The clock to give pipelines: it moves with this one.
    #[must_use]
    pub fn clock(&self) -> crate::clock::Clock {
        self.clock.clone()
    }

    /// The time it reads, in milliseconds since the Unix epoch.
    #[must_use]
    pub fn now_ms(&self) -> u64 {
        self.clock.manual_now().unwrap_or_default()
    }

    /// Moves the clock `by` forward (`"72h"`, or a `Duration`) and returns
    /// the new time.
    ///
    /// # Errors
    /// [`Error::InvalidSetting`](crate::Error::InvalidSetting) for text
    /// that is not a duration, or an advance past the clock's range.
    pub fn advance(&self, by: impl IntoDuration) -> Result<u64> {
        self.clock.advance(by.into_duration()?)
    }
}
