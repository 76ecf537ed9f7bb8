//! Stages: the user functions a pipeline calls.
//!
//! `#[stage]` turns a function into a stage. The function itself stays as it
//! was (a test can call it directly); beside it the macro defines a hidden
//! type of the same name that implements [`StageDef`], which is what
//! `pipeline!` refers to.

pub(crate) mod bodies;

mod info;

pub use info::StageInfo;

pub(crate) use info::WithInfo;

pub(crate) use info::span_if_wanted;

pub(crate) use info::with_info;

use std::any::{Any, TypeId};

use std::collections::HashMap;

use std::fmt;

use std::future::Future;

use std::ops::Deref;

use std::panic::AssertUnwindSafe;

use std::pin::Pin;

use std::sync::Arc;

use std::task::{Context as Context_, Poll};

use std::time::Duration;

use serde::Serialize;

use crate::context::Context;

use crate::error::{BoxError, Error, Result};

use crate::value::Value;

/// How a stage runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StageKind {
    /// An `async fn`: runs on the async runtime.
    Async,
    /// A plain `fn`: runs on tokio's blocking pool, never on an async worker thread.
    Blocking,
    /// An `async fn` that also takes an [`Emitter`](crate::stream::Emitter)
    /// and emits chunks while it runs (see [`crate::stream`]). Retry and the
    /// cache never apply to it.
    Stream,
}

/// What `#[stage]` knows about a stage at compile time.
///
/// `#[non_exhaustive]`: only `#[stage]` builds one (through a hidden
/// constructor, setting the fields it knows), so a field added later breaks
/// neither generated code nor users, who read it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct StageMeta {
    /// The stage's name (the function name unless `#[stage(name = "...")]`).
    pub name: &'static str,
    /// sha256 over the stage's normalized tokens (see `fluxio-macros`).
    pub hash: [u8; 32],
    /// How it runs.
    pub kind: StageKind,
    /// Whether it returns a routing decision ([`Route`]) instead of a context.
    pub router: bool,
    /// Keys it declares it reads (`reads = [...]`), `None` when undeclared.
    pub reads: Option<&'static [&'static str]>,
    /// Keys it declares it writes (`writes = [...]`), `None` when undeclared.
    pub writes: Option<&'static [&'static str]>,
    /// Its timeout (`timeout = "5s"`).
    pub timeout: Option<Duration>,
    /// Checks the context before the call (`input = T`): `Err` names the
    /// missing or mistyped field.
    pub input: Option<Validator>,
    /// Checks the context after the call (`output = U`).
    pub output: Option<Validator>,
    /// The resources it takes (its [`Resource<T>`] arguments), in argument
    /// order: `build()` refuses a pipeline that does not register them.
    pub resources: &'static [fn() -> ResourceReq],
    /// Its compensating stage (`compensate = refund`, contract rule 35):
    /// run, with the context this stage produced, when a run that
    /// completed this stage fails for good.
    pub compensate: Option<fn() -> Stage>,
    /// Whether it is a pivot (`pivot`, rule 35): once it completes, the
    /// stages before it (and itself) are never compensated.
    pub pivot: bool,
}

/// Checks that a context holds the fields of a type; the error names the
/// first missing or mistyped field.
pub type Validator = fn(&Context) -> std::result::Result<(), String>;

/// Whether `ctx` has the fields of `T` (extra keys are ignored): `T` is
/// deserialized from the context as if it were a map of its keys. The error
/// names the missing or mistyped field.
///
/// ```
/// #[derive(serde::Deserialize)]
/// struct Needs { user_id: u64 }
///
/// # fn main() -> fluxio_core::Result<()> {
/// let ok = fluxio_core::ctx! { "user_id" => 7u64, "extra" => true }?;
/// assert!(fluxio_core::stage::validate::<Needs>(&ok).is_ok());
/// let wrong = fluxio_core::ctx! { "user_id" => "seven" }?;
/// let err = fluxio_core::stage::validate::<Needs>(&wrong).unwrap_err();
/// assert!(err.starts_with("user_id: invalid type"), "{err}");
/// let missing = fluxio_core::stage::validate::<Needs>(&fluxio_core::Context::new()).unwrap_err();
/// assert_eq!(missing, "missing field `user_id`");
/// # Ok(()) }
/// ```
///
/// # Errors
/// The first missing or mistyped field, with its path.
pub fn validate<T: serde::de::DeserializeOwned>(ctx: &Context) -> std::result::Result<(), String> {
    let map = serde::de::value::MapDeserializer::<_, crate::value::ValueError>::new(
        ctx.entries()
            .map(|(k, v)| (k, crate::value::Encoded(v.bytes()))),
    );
    match serde_path_to_error::deserialize::<_, T>(map) {
        Ok(_) => Ok(()),
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner().to_string();
            Err(if path == "." {
                inner
            } else {
                format!("{path}: {inner}")
            })
        }
    }
}

/// What a stage's call function returns: the stage's future, boxed, or
/// the result of a stage that finished while it was called.
///
/// `#[stage]` calls an `async fn` whose body has no `.await` (and no macro
/// or attribute that could add one) at once, polling its future in place:
/// such a future cannot wait, and a call then allocates nothing.
///
/// ```
/// use fluxio_core::Context;
/// use fluxio_core::stage::{Output, StageFuture};
///
/// let boxed = StageFuture::new(async { Ok(Output::Context(Context::new())) });
/// let ready = StageFuture::ready(Ok(Output::Context(Context::new())));
/// assert!(!boxed.is_ready() && ready.is_ready());
/// ```
#[must_use = "a stage's future does nothing unless awaited"]
pub struct StageFuture(Repr);

/// How a call started (see [`StageFuture`]).
enum Repr {
    Running(BoxedStage),
    Done(Result<Output, BoxError>),
}

/// A stage's future, boxed.
type BoxedStage = Pin<Box<dyn Future<Output = Result<Output, BoxError>> + std::marker::Send>>;

impl StageFuture {
    /// `fut`, boxed.
    pub fn new<F>(fut: F) -> Self
    where
        F: Future<Output = Result<Output, BoxError>> + std::marker::Send + 'static,
    {
        StageFuture(Repr::Running(Box::pin(fut)))
    }

    /// A stage that has finished with `result`.
    pub fn ready(result: Result<Output, BoxError>) -> Self {
        StageFuture(Repr::Done(result))
    }

    /// Whether the stage has finished (its result is inside).
    #[must_use]
    pub fn is_ready(&self) -> bool {
        matches!(self.0, Repr::Done(_))
    }
}

impl fmt::Debug for StageFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_ready() {
            "StageFuture(ready)"
        } else {
            "StageFuture(running)"
        })
    }
}

/// What a stage returned.
#[derive(Debug)]
pub enum Output {
    /// The new context.
    Context(Context),
    /// A routing decision.
    Route(Route),
}

/// A router's decision: which route of the routing block to take, and a patch
/// of keys to set on the context first.
///
/// (The reference runtime calls this `Send`; fluxio names it `Route` so that
/// `use fluxio::*` never shadows the `Send` marker trait.)
///
/// ```
/// # fn main() -> fluxio_core::Result<()> {
/// let decision = fluxio_core::Route::to("premium").with("discount", 0.2)?;
/// assert_eq!(decision.route, "premium");
/// assert_eq!(decision.patch.len(), 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// The route to take.
    pub route: String,
    /// Keys to set on the context before the route's body runs.
    pub patch: Vec<(String, Value)>,
}

impl Route {
    /// A decision for `route` with an empty patch.
    #[must_use]
    pub fn to(route: impl Into<String>) -> Self {
        Route {
            route: route.into(),
            patch: Vec::new(),
        }
    }

    /// Adds `key = value` to the patch.
    ///
    /// # Errors
    /// [`Error::Serialize`] when the value cannot be converted;
    /// [`Error::ValueTooDeep`] / [`Error::ValueTooLarge`] for a value no
    /// checkpoint could hold, as for [`Context::set`].
    pub fn with<T: Serialize>(mut self, key: impl Into<String>, value: T) -> Result<Self> {
        let key = key.into();
        let v = crate::value::to_context_value(&key, &value)?;
        self.patch.push((key, v));
        Ok(self)
    }

    pub(crate) fn apply(self, ctx: Context) -> (String, Context) {
        let ctx = self
            .patch
            .into_iter()
            .fold(ctx, |c, (k, v)| c.set_value(k, v));
        (self.route, ctx)
    }
}

/// A stage as the runtime holds it: its metadata and a function pointer that
/// starts a call.
#[derive(Clone)]
pub struct Stage {
    meta: Arc<StageMeta>,
    call: CallFn,
    resources: Arc<Resources>,
    /// Its call function always returns a finished [`StageFuture`]:
    /// `#[stage]` runs the stage in place (see [`StageFuture`]).
    in_place: bool,
}

/// What `#[stage]` emits to start a call: the context and the resources the
/// pipeline registered.
pub type CallFn = fn(Context, &Resources) -> StageFuture;

impl fmt::Debug for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stage")
            .field("name", &self.meta.name)
            .field("kind", &self.meta.kind)
            .finish()
    }
}

impl Stage {
    /// A stage from its metadata and call function (what `#[stage]` emits),
    /// with no resources attached yet (the pipeline builder and
    /// [`StageTest`](crate::testing::StageTest) attach theirs).
    #[must_use]
    pub fn new(meta: StageMeta, call: CallFn) -> Self {
        Stage {
            meta: Arc::new(meta),
            call,
            resources: Arc::default(),
            in_place: false,
        }
    }

    /// A stage whose call function always returns a finished
    /// [`StageFuture`] (what `#[stage]` emits for an `async fn` that
    /// never waits): the interpreter calls it without making a future.
    pub(crate) fn new_in_place(meta: StageMeta, call: CallFn) -> Self {
        Stage {
            in_place: true,
            ..Stage::new(meta, call)
        }
    }

    /// Whether the stage is run in place (see [`Stage::new_in_place`]).
    pub(crate) fn in_place(&self) -> bool {
        self.in_place
    }

    /// The stage with `resources` attached: its calls get them.
    pub(crate) fn with_resources(mut self, resources: Arc<Resources>) -> Self {
        self.resources = resources;
        self
    }

    /// The first resource the stage takes that `resources` lacks.
    #[must_use]
    pub fn missing_resource(&self, resources: &Resources) -> Option<ResourceReq> {
        self.meta
            .resources
            .iter()
            .map(|req| req())
            .find(|req| !resources.contains(req.type_id))
    }

    /// [`Error::Build`] naming the stage, the missing type and `fix` (how to supply it).
    pub(crate) fn missing_resource_error(&self, req: &ResourceReq, fix: &str) -> Error {
        Error::build(format!(
            "stage `{}` takes a `Resource<{}>` that is not registered: {fix}",
            self.meta.name, req.type_name
        ))
    }

    /// The stage's name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.meta.name
    }

    /// Everything known about the stage.
    #[must_use]
    pub fn meta(&self) -> &StageMeta {
        &self.meta
    }

    /// Calls the stage once: applies its timeout, turns a panic into
    /// [`Error::StagePanic`], a timeout into [`Error::StageTimeout`] and the
    /// stage's own error into [`Error::Stage`].
    ///
    /// # Errors
    /// As above.
    pub fn call(&self, ctx: Context) -> StageCall<'_> {
        StageCall {
            stage: self,
            state: CallState::Start(ctx),
        }
    }

    /// Starts a call: checks the stage's resources and calls its function,
    /// catching a panic. The call running, or (`Err`) its result when it
    /// has ended already: it could not start, or the stage never waits.
    /// Its error is boxed: this result is moved through every layer of a
    /// call, and an `Error` is twice a context.
    #[inline(always)]
    fn begin(&self, ctx: Context) -> std::result::Result<CallState, Ended> {
        // (most stages take no resource: nothing to look up)
        let missing = if self.meta.resources.is_empty() {
            None
        } else {
            self.missing_resource(&self.resources)
        };
        if let Some(req) = missing {
            return Err(Err(Box::new(self.missing_resource_error(
                &req,
                "register it with `.resource(value)` on the pipeline builder",
            ))));
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| (self.call)(ctx, &self.resources))) {
            Ok(StageFuture(Repr::Running(fut))) => Ok(CallState::Running {
                fut,
                // boxed: a timer is large, and a stage without a timeout
                // should not carry its room in every call's future
                timer: self.meta.timeout.map(|t| Box::pin(tokio::time::sleep(t))),
            }),
            // a stage that never waits, already run: nothing to box
            Ok(StageFuture(Repr::Done(returned))) => Err(self.outcome(returned).map_err(Box::new)),
            Err(panic) => Err(Err(Box::new(self.panicked(&*panic)))),
        }
    }

    /// [`call`](Stage::call) started at once: its result when the stage
    /// has ended already (it never waits), so that the caller makes no
    /// future of it; else the call, running.
    #[inline(always)]
    pub(crate) fn start(&self, ctx: Context) -> Started<'_> {
        match self.begin(ctx) {
            Ok(state) => Started::Running(StageCall { stage: self, state }),
            Err(done) => Started::Done(done),
        }
    }

    /// What the stage's future returned, as a fluxio result.
    #[inline]
    fn outcome(&self, returned: Result<Output, BoxError>) -> Result<Output> {
        returned.map_err(|source| match source.downcast::<Error>() {
            // A panic inside a blocking stage arrives as our own error.
            Ok(own) => match *own {
                Error::StagePanic { message, .. } => Error::StagePanic {
                    stage: self.meta.name.to_owned(),
                    message,
                },
                other => Error::Stage {
                    stage: self.meta.name.to_owned(),
                    source: Box::new(other),
                },
            },
            Err(source) => Error::Stage {
                stage: self.meta.name.to_owned(),
                source,
            },
        })
    }

    fn panicked(&self, panic: &(dyn Any + std::marker::Send)) -> Error {
        Error::StagePanic {
            stage: self.meta.name.to_owned(),
            message: panic_message(panic),
        }
    }
}

/// The future of one [`Stage::call`]: starts the stage's own future at its
/// first poll, then polls it (and its timer, for a stage with a timeout)
/// until it is done, catching a panic at every poll.
///
/// One hand-written future, not layers of combinators: it is what every
/// stage call of every run goes through, and small (the stage's future is
/// boxed, its timer too), so a parked run carries little of it.
#[must_use = "a stage call does nothing unless awaited"]
pub struct StageCall<'a> {
    stage: &'a Stage,
    state: CallState,
}

/// The result of a call that has ended, its error boxed (see
/// [`Stage::begin`]).
pub(crate) type Ended = std::result::Result<Output, Box<Error>>;

/// A call [started](Stage::start) at once.
pub(crate) enum Started<'a> {
    /// The stage's result: it ended while it was called.
    Done(Ended),
    /// It runs on.
    Running(StageCall<'a>),
}

enum CallState {
    /// Not polled yet.
    Start(Context),
    /// The stage's future, and when it times out.
    Running {
        fut: BoxedStage,
        timer: Option<Pin<Box<tokio::time::Sleep>>>,
    },
    /// Returned its result.
    Done,
}

impl fmt::Debug for StageCall<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            CallState::Start(_) => "start",
            CallState::Running { .. } => "running",
            CallState::Done => "done",
        };
        f.debug_struct("StageCall")
            .field("stage", &self.stage.name())
            .field("state", &state)
            .finish()
    }
}

impl Future for StageCall<'_> {
    type Output = Result<Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context_<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let stage = this.stage;
        if let CallState::Start(_) = this.state {
            let CallState::Start(ctx) = std::mem::replace(&mut this.state, CallState::Done) else {
                return Poll::Ready(Err(Error::Internal {
                    message: "a stage call lost its context".to_owned(),
                }));
            };
            match stage.begin(ctx) {
                Ok(running) => this.state = running,
                Err(done) => return Poll::Ready(done.map_err(|e| *e)),
            }
        }
        let CallState::Running { fut, timer } = &mut this.state else {
            return Poll::Ready(Err(Error::Internal {
                message: format!("stage `{}` was polled after it returned", stage.name()),
            }));
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)));
        let done = match polled {
            Ok(Poll::Ready(returned)) => stage.outcome(returned),
            Err(panic) => Err(stage.panicked(&*panic)),
            Ok(Poll::Pending) => {
                let expired = timer
                    .as_mut()
                    .is_some_and(|t| t.as_mut().poll(cx).is_ready());
                match stage.meta.timeout {
                    Some(timeout) if expired => Err(Error::StageTimeout {
                        stage: stage.meta.name.to_owned(),
                        timeout,
                    }),
                    _ => return Poll::Pending,
                }
            }
        };
        this.state = CallState::Done;
        Poll::Ready(done)
    }
}

pub(crate) fn panic_message(payload: &(dyn std::any::Any + std::marker::Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Implemented by the hidden type `#[helper]` (and `#[stage]`) defines next
/// to a function, so that `uses = [...]` can count the function's code in a
/// stage's hash (rule 34).
///
/// Not meant to be implemented by hand.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fluxio helper",
    label = "not marked `#[fluxio::helper]`",
    note = "mark the function with `#[fluxio::helper]` so that its code counts in the version of the stages that use it"
)]
pub trait HelperDef {
    /// The function's name.
    const NAME: &'static str;
    /// sha256 of the function's normalized tokens, combined with its own
    /// helpers' hashes (`version::with_helpers`).
    const HASH: [u8; 32];
}

/// Implemented by the hidden type `#[stage]` defines next to the function.
///
/// Not meant to be implemented by hand.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fluxio stage",
    label = "not a stage",
    note = "mark the function with `#[fluxio::stage]`; `pipeline!` takes stage functions, `parallel![...]`, `fire_and_forget![...]` and routing blocks"
)]
pub trait StageDef {
    /// `ReturnsRoute<ROUTER>` (hidden, in `__private::used_as`): whether the
    /// stage is a router, as a type, so that `pipeline!` can check with a
    /// trait bound that routers, and only routers, come before a routing
    /// block.
    type ReturnsRoute;
    /// sha256 of the stage's normalized tokens.
    const HASH: [u8; 32];
    /// Whether the stage returns a [`Route`].
    const ROUTER: bool;
    /// The runtime form of the stage.
    fn stage() -> Stage;
}

/// What `pipeline!` checks at each place a stage is named, on the stage's
/// [`StageDef::ReturnsRoute`]: a router before a routing block
/// ([`Router`](used_as::Router)), any other stage elsewhere
/// ([`SequenceStage`](used_as::SequenceStage)).
///
/// Trait bounds, so that a misuse is a type error at the user's token with
/// the message of `#[diagnostic::on_unimplemented]`; `S` is the stage (its
/// hidden type, named after the function), so that the message can name it.
/// Not a stable API: reached through `__private`.
#[doc(hidden)]
pub mod used_as {
    /// The [`StageDef::ReturnsRoute`](super::StageDef::ReturnsRoute) of a
    /// stage: `ROUTER` is whether it returns a [`Route`](super::Route).
    ///
    /// A const parameter rather than the `Ok` type itself, so that a stage
    /// whose return type is wrong (already an error at the `#[stage]`) has
    /// an erroneous `ReturnsRoute`, which rustc does not check again at each
    /// `pipeline!` that names the stage.
    #[derive(Debug)]
    pub struct ReturnsRoute<const ROUTER: bool>;

    /// The `ReturnsRoute` of `pipeline!`'s stand-in for a name that is not
    /// a stage (a function without `#[stage]`). It fits every place, so the
    /// only error is the "not a stage" check `pipeline!` generates: a trait
    /// of its own per name, implemented for every [`IsStage`], whose message
    /// quotes the path as the user wrote it.
    #[derive(Debug)]
    pub struct NotAStage;

    /// The `ReturnsRoute` of a stage whose `#[stage]` failed (a bad option or
    /// signature; the error is reported there). It is a stage and fits every
    /// place, so a `pipeline!` naming it adds no error.
    #[derive(Debug)]
    pub struct Refused;

    /// What a stage's `ReturnsRoute` is: [`ReturnsRoute`] or [`Refused`],
    /// never [`NotAStage`].
    pub trait IsStage {}

    impl<const ROUTER: bool> IsStage for ReturnsRoute<ROUTER> {}
    impl IsStage for Refused {}

    /// Implemented for a router, the stage before a routing block.
    #[diagnostic::on_unimplemented(
        message = "stage `{S}` is used as a router but returns `Context`: a router returns `fluxio::Route`",
        label = "not a router"
    )]
    pub trait Router<S> {
        /// Named by the check.
        const OK: () = ();
    }

    #[diagnostic::do_not_recommend]
    impl<S, T: Fits<true>> Router<S> for T {}

    /// Implemented for any other stage, the ones in a sequence.
    #[diagnostic::on_unimplemented(
        message = "stage `{S}` returns `fluxio::Route`: follow it with a routing block `{S} => {{ \"route\" => [...] }}`",
        label = "a router needs a routing block"
    )]
    pub trait SequenceStage<S> {
        /// Named by the check.
        const OK: () = ();
    }

    #[diagnostic::do_not_recommend]
    impl<S, T: Fits<false>> SequenceStage<S> for T {}

    /// Implemented for a stage that can compensate another
    /// (`#[stage(compensate = ...)]`): any stage but a router.
    #[diagnostic::on_unimplemented(
        message = "stage `{S}` returns `fluxio::Route`: a compensator returns a `Context`",
        label = "a router cannot compensate"
    )]
    pub trait Compensator<S> {
        /// Named by the check.
        const OK: () = ();
    }

    #[diagnostic::do_not_recommend]
    impl<S, T: Fits<false>> Compensator<S> for T {}

    /// Fits before a routing block (`true`) or in a sequence (`false`):
    /// what [`Router`] and [`SequenceStage`] hold for. A trait of its own,
    /// behind their `do_not_recommend` blanket impls, so an error names the
    /// place the stage was used in, never this trait or its impls.
    pub trait Fits<const ROUTER: bool> {}

    impl<const ROUTER: bool> Fits<ROUTER> for ReturnsRoute<ROUTER> {}
    impl<const ROUTER: bool> Fits<ROUTER> for NotAStage {}
    impl<const ROUTER: bool> Fits<ROUTER> for Refused {}
}

/// The types a stage may return in its `Ok`: [`Context`] or [`Route`].
#[diagnostic::on_unimplemented(
    message = "a stage must return `Result<Context, E>` or `Result<fluxio::Route, E>`, not `Result<{Self}, E>`"
)]
pub trait StageOutput {
    /// Whether this output makes the stage a router.
    const ROUTER: bool;
    /// Into the runtime form.
    fn into_output(self) -> Output;
}

impl StageOutput for Context {
    const ROUTER: bool = false;
    fn into_output(self) -> Output {
        Output::Context(self)
    }
}

impl StageOutput for Route {
    const ROUTER: bool = true;
    fn into_output(self) -> Output {
        Output::Route(self)
    }
}

/// The return type of a stage function: `Result<T, E>` (or an alias of it).
#[diagnostic::on_unimplemented(
    message = "a stage must return `Result<Context, E>` or `Result<fluxio::Route, E>`, not `{Self}`"
)]
pub trait StageReturn {
    /// The `Ok` type.
    type Ok;
    /// The error type.
    type Err;
}

impl<T, E> StageReturn for std::result::Result<T, E> {
    type Ok = T;
    type Err = E;
}

/// A shared value a stage takes as an argument: a database pool, an HTTP
/// client, a configuration. Register it on the pipeline builder with
/// [`PipelineBuilder::resource`](crate::PipelineBuilder::resource) (or on a
/// [`StageTest`](crate::testing::StageTest) with its `resource`), and take it
/// in a stage as `name: Resource<T>` after the context (and after the
/// `Emitter` of a stream stage):
///
/// ```text
/// #[stage]
/// async fn charge(ctx: Context, db: Resource<PgPool>) -> StageResult { ... }
///
/// let pipeline = pipeline![charge].resource(pool).build()?;
/// ```
///
/// A `Resource<T>` is an `Arc<T>`: cloning it is cheap, every stage and
/// every run of a pipeline share the one registered value, and it
/// dereferences to `T`. Resources are neither part of the pipeline's version
/// nor of its checkpoints: a resumed run gets the resources of the pipeline
/// that resumes it. `build()` refuses a pipeline whose stages take a resource
/// type it does not register, naming the stage and the type.
pub struct Resource<T: ?Sized>(Arc<T>);

impl<T> Resource<T> {
    /// Wraps `value`.
    ///
    /// ```
    /// let r = fluxio_core::Resource::new(String::from("db"));
    /// assert_eq!(r.len(), 2);
    /// ```
    #[must_use]
    pub fn new(value: T) -> Self {
        Resource(Arc::new(value))
    }
}

impl<T: ?Sized> Resource<T> {
    /// A resource that shares an existing `Arc`.
    #[must_use]
    pub fn from_arc(value: Arc<T>) -> Self {
        Resource(value)
    }

    /// The shared value.
    #[must_use]
    pub fn as_arc(&self) -> &Arc<T> {
        &self.0
    }

    /// The shared value, owned.
    #[must_use]
    pub fn into_arc(self) -> Arc<T> {
        self.0
    }
}

impl<T: ?Sized> Clone for Resource<T> {
    fn clone(&self) -> Self {
        Resource(Arc::clone(&self.0))
    }
}

impl<T: ?Sized> Deref for Resource<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized> AsRef<T> for Resource<T> {
    fn as_ref(&self) -> &T {
        &self.0
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Resource<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Resource").field(&&*self.0).finish()
    }
}

/// A resource type a stage takes: what `build()` checks is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceReq {
    /// The type's id.
    pub type_id: TypeId,
    /// The type's name, for messages.
    pub type_name: &'static str,
}

impl ResourceReq {
    /// The requirement for a resource of type `T`.
    #[must_use]
    pub fn of<T: ?Sized + 'static>() -> Self {
        ResourceReq {
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
        }
    }
}

/// The resources registered on a pipeline (or a
/// [`StageTest`](crate::testing::StageTest)): one value per type.
#[derive(Clone, Default)]
pub struct Resources {
    map: HashMap<TypeId, (&'static str, Arc<dyn Any + std::marker::Send + Sync>)>,
}

impl Resources {
    /// Registers `value` as the resource of type `T`, replacing an earlier one.
    pub fn insert<T: std::marker::Send + Sync + 'static>(&mut self, value: T) {
        self.map.insert(
            TypeId::of::<T>(),
            (std::any::type_name::<T>(), Arc::new(value)),
        );
    }

    /// The resource of type `T`, if registered.
    ///
    /// ```
    /// let mut r = fluxio_core::stage::Resources::default();
    /// r.insert(7u32);
    /// assert_eq!(r.get::<u32>().map(|v| *v), Some(7));
    /// assert!(r.get::<u64>().is_none());
    /// ```
    #[must_use]
    pub fn get<T: std::marker::Send + Sync + 'static>(&self) -> Option<Resource<T>> {
        let (_, any) = self.map.get(&TypeId::of::<T>())?;
        Arc::clone(any).downcast::<T>().ok().map(Resource)
    }

    /// Whether a resource of the type `type_id` is registered.
    #[must_use]
    pub fn contains(&self, type_id: TypeId) -> bool {
        self.map.contains_key(&type_id)
    }

    /// Whether none is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl Resources {
    /// The registered types' names, sorted.
    fn type_names(&self) -> Vec<&'static str> {
        let mut names: Vec<&str> = self.map.values().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names
    }

    /// `"none"`, or the registered types' names quoted and comma-separated,
    /// for error messages.
    pub(crate) fn describe(&self) -> String {
        let names = self.type_names();
        if names.is_empty() {
            return "none".to_owned();
        }
        let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
        quoted.join(", ")
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.type_names()).finish()
    }
}

/// The types a stage may take after its context (and the `Emitter` of a
/// stream stage): [`Resource<T>`].
#[diagnostic::on_unimplemented(
    message = "a stage cannot take an argument of type `{Self}`",
    label = "not a stage argument",
    note = "a stage takes `ctx: Context` first, then `out: fluxio::Emitter` if it is a stream stage, then shared resources as `name: fluxio::Resource<T>` (register them with `.resource(value)` on the pipeline builder)"
)]
pub trait FromResources: Sized {
    /// The resource type it needs.
    fn requirement() -> ResourceReq;
    /// Takes it from the registered resources.
    fn from_resources(resources: &Resources) -> Option<Self>;
}

impl<T: std::marker::Send + Sync + 'static> FromResources for Resource<T> {
    fn requirement() -> ResourceReq {
        ResourceReq::of::<T>()
    }
    fn from_resources(resources: &Resources) -> Option<Self> {
        resources.get::<T>()
    }
}

/// A stage error that is not a `std::error::Error` itself but derefs to one
/// (`anyhow::Error`): kept whole, so that
/// [`Error::stage_error`](crate::Error::stage_error) returns it, displayed
/// as itself, with its chain as the `source` chain.
pub(crate) struct OpaqueStageError(Box<dyn ErasedError>);

trait ErasedError: std::marker::Send + Sync + 'static {
    fn as_any(&self) -> &dyn Any;
    fn as_error(&self) -> &(dyn std::error::Error + std::marker::Send + Sync + 'static);
    fn display(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl<E> ErasedError for E
where
    E: AsRef<dyn std::error::Error + std::marker::Send + Sync + 'static>
        + fmt::Display
        + fmt::Debug
        + std::marker::Send
        + Sync
        + 'static,
{
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_error(&self) -> &(dyn std::error::Error + std::marker::Send + Sync + 'static) {
        self.as_ref()
    }
    fn display(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
    fn debug(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Display for OpaqueStageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.display(f)
    }
}

impl fmt::Debug for OpaqueStageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.debug(f)
    }
}

impl std::error::Error for OpaqueStageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.as_error().source()
    }
}

impl Error {
    /// The stage's own error as `E`, for a stage whose error type is not a
    /// `std::error::Error` but derefs to one: `anyhow::Error`. (For error
    /// types that are, use [`stage_error`](Error::stage_error).)
    ///
    /// A stage returning `anyhow::Result<Context>` fails with an
    /// [`Error::Stage`] that keeps the `anyhow::Error` whole: it displays as
    /// the anyhow error, its [`source`](std::error::Error::source) chain
    /// continues into anyhow's chain, and this method returns it, so
    /// `err.stage_error_any::<anyhow::Error>()` gives `downcast_ref`,
    /// `root_cause` and `chain`.
    #[must_use]
    pub fn stage_error_any<E: Any>(&self) -> Option<&E> {
        match self {
            Error::Stage { source, .. } => {
                // through a final failure's wrapper (rule 35)
                let own = source
                    .downcast_ref::<crate::TerminalError>()
                    .map_or(&**source, crate::TerminalError::inner);
                own.downcast_ref::<OpaqueStageError>()
                    .and_then(|o| o.0.as_any().downcast_ref::<E>())
            }
            _ => None,
        }
    }
}

/// How `#[stage]` turns a stage's error into a [`BoxError`], chosen by the
/// error's type at compile time (autoref specialization on `ErrorKindOf`):
/// a `std::error::Error` is boxed as itself, a [`BoxError`] is kept, an
/// error that only derefs to one (`anyhow::Error`) is kept whole, anything
/// else goes through `Into<BoxError>`. Not a stable API.
#[doc(hidden)]
pub mod error_kind {
    use super::{BoxError, OpaqueStageError};
    use std::fmt;

    /// Wraps a reference to the error for method resolution.
    #[derive(Debug)]
    pub struct ErrorKindOf<'a, E>(pub &'a E);

    /// An error type: boxed as itself.
    #[derive(Debug)]
    pub struct StdTag;
    /// Already a [`BoxError`].
    #[derive(Debug)]
    pub struct BoxTag;
    /// Derefs to an error (`anyhow::Error`): kept whole.
    #[derive(Debug)]
    pub struct OpaqueTag;
    /// Anything else that converts into a [`BoxError`].
    #[derive(Debug)]
    pub struct IntoTag;

    /// Level 1.
    pub trait StdKind {
        /// The tag.
        fn fluxio_error_kind(&self) -> StdTag {
            StdTag
        }
    }
    impl<E: std::error::Error + Send + Sync + 'static> StdKind for &&ErrorKindOf<'_, E> {}

    /// Level 1.
    pub trait BoxKind {
        /// The tag.
        fn fluxio_error_kind(&self) -> BoxTag {
            BoxTag
        }
    }
    impl BoxKind for &&ErrorKindOf<'_, BoxError> {}

    /// Level 2.
    pub trait OpaqueKind {
        /// The tag.
        fn fluxio_error_kind(&self) -> OpaqueTag {
            OpaqueTag
        }
    }
    impl<E> OpaqueKind for &ErrorKindOf<'_, E> where
        E: AsRef<dyn std::error::Error + Send + Sync + 'static>
            + fmt::Display
            + fmt::Debug
            + Send
            + Sync
            + 'static
    {
    }

    /// Level 3.
    pub trait IntoKind {
        /// The tag.
        fn fluxio_error_kind(&self) -> IntoTag {
            IntoTag
        }
    }
    impl<E> IntoKind for ErrorKindOf<'_, E> {}

    impl StdTag {
        /// Boxes the error as itself.
        pub fn convert<E: std::error::Error + Send + Sync + 'static>(self, e: E) -> BoxError {
            Box::new(e)
        }
    }
    impl BoxTag {
        /// Keeps the box.
        pub fn convert(self, e: BoxError) -> BoxError {
            e
        }
    }
    impl OpaqueTag {
        /// Keeps the error whole.
        pub fn convert<E>(self, e: E) -> BoxError
        where
            E: AsRef<dyn std::error::Error + Send + Sync + 'static>
                + fmt::Display
                + fmt::Debug
                + Send
                + Sync
                + 'static,
        {
            let opaque = OpaqueStageError(Box::new(e));
            // a final failure inside (rule 35) stays visible as one
            if crate::error::is_terminal(opaque.0.as_error()) {
                Box::new(crate::TerminalError::new(opaque))
            } else {
                Box::new(opaque)
            }
        }
    }
    impl IntoTag {
        /// Converts with `Into`.
        pub fn convert<E: Into<BoxError>>(self, e: E) -> BoxError {
            e.into()
        }
    }
}
