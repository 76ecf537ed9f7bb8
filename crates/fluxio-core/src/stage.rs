//! Stages: the user functions a pipeline calls.
//!
//! `#[stage]` turns a function into a stage. The function itself stays as it
//! was (a test can call it directly); beside it the macro defines a hidden
//! type of the same name that implements [`StageDef`], which is what
//! `pipeline!` refers to.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use serde::Serialize;

use crate::context::Context;
use crate::error::{BoxError, Error, Result};
use crate::value::{Value, to_value};

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
#[derive(Clone, Copy, Debug)]
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
    let map = serde::de::value::MapDeserializer::<_, crate::value::ValueError>::new(ctx.iter());
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

/// A boxed stage future.
pub type StageFuture =
    Pin<Box<dyn Future<Output = Result<Output, BoxError>> + std::marker::Send + 'static>>;

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
    call: fn(Context) -> StageFuture,
}

impl fmt::Debug for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stage")
            .field("name", &self.meta.name)
            .field("kind", &self.meta.kind)
            .finish()
    }
}

impl Stage {
    /// A stage from its metadata and call function (what `#[stage]` emits).
    #[must_use]
    pub fn new(meta: StageMeta, call: fn(Context) -> StageFuture) -> Self {
        Stage {
            meta: Arc::new(meta),
            call,
        }
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
    pub async fn call(&self, ctx: Context) -> Result<Output> {
        let fut = AssertUnwindSafe((self.call)(ctx)).catch_unwind();
        let outcome = match self.meta.timeout {
            None => fut.await,
            Some(t) => match tokio::time::timeout(t, fut).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Error::StageTimeout {
                        stage: self.meta.name.to_owned(),
                        timeout: t,
                    });
                }
            },
        };
        match outcome {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(source)) => Err(match source.downcast::<Error>() {
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
            }),
            Err(panic) => Err(Error::StagePanic {
                stage: self.meta.name.to_owned(),
                message: panic_message(&*panic),
            }),
        }
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

/// Implemented by the hidden type `#[stage]` defines next to the function.
///
/// Not meant to be implemented by hand.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a fluxio stage",
    label = "not a stage",
    note = "mark the function with `#[fluxio::stage]`; `pipeline!` takes stage functions, `parallel![...]` and routing blocks"
)]
pub trait StageDef {
    /// sha256 of the stage's normalized tokens.
    const HASH: [u8; 32];
    /// Whether the stage returns a [`Route`].
    const ROUTER: bool;
    /// The runtime form of the stage.
    fn stage() -> Stage;
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
}

impl<T, E> StageReturn for std::result::Result<T, E> {
    type Ok = T;
}

/// What a running stage can learn about its call: the run, its position in
/// the program, and which attempt this is.
///
/// [`StageInfo::current`] returns it inside a stage called by a pipeline
/// (async or blocking), and `None` elsewhere, e.g. when a test calls the
/// function directly.
///
/// Use [`idempotency_key`](StageInfo::idempotency_key) to make side effects
/// idempotent: a stage's body runs at least once (a crash after a side effect
/// but before the next checkpoint re-runs the stage on resume), and the key
/// tells the outside world which run, stage and attempt a call belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageInfo {
    /// The run id.
    pub run_id: Arc<str>,
    /// The stage's name.
    pub stage: &'static str,
    /// The stage's position: the ip of its `CALL` instruction, stable for a
    /// given pipeline version.
    pub position: u32,
    /// 1 on the first run of the stage, one more on every resume that
    /// retries it (after a failure or a crash). Stages in a parallel block
    /// share the block's attempt.
    pub attempt: u32,
}

tokio::task_local! {
    pub(crate) static STAGE_INFO: StageInfo;
}

thread_local! {
    static BLOCKING_INFO: std::cell::RefCell<Option<StageInfo>> = const { std::cell::RefCell::new(None) };
}

impl StageInfo {
    /// The info of the stage running on this task or blocking thread.
    ///
    /// ```
    /// assert!(fluxio_core::StageInfo::current().is_none());
    /// ```
    #[must_use]
    pub fn current() -> Option<StageInfo> {
        STAGE_INFO
            .try_with(Clone::clone)
            .ok()
            .or_else(|| BLOCKING_INFO.with(|b| b.borrow().clone()))
    }

    /// `"{run_id}/{position}/{attempt}"`: the same for the same attempt of the
    /// same stage of the same run, different otherwise.
    #[must_use]
    pub fn idempotency_key(&self) -> String {
        format!("{}/{}/{}", self.run_id, self.position, self.attempt)
    }
}

/// Runs a blocking stage body on tokio's blocking pool.
pub(crate) fn run_blocking<F>(f: F) -> StageFuture
where
    F: FnOnce() -> Result<Output, BoxError> + std::marker::Send + 'static,
{
    /// Clears the thread's `StageInfo` when the body ends, by returning or
    /// by panicking: pool threads are reused, and a stale `StageInfo` would
    /// be reported to whatever runs on the thread next.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BLOCKING_INFO.with(|b| *b.borrow_mut() = None);
        }
    }
    let info = StageInfo::current();
    let f = move || {
        BLOCKING_INFO.with(|b| *b.borrow_mut() = info);
        let _reset = Reset;
        f()
    };
    Box::pin(async move {
        match tokio::task::spawn_blocking(f).await {
            Ok(r) => r,
            Err(join) => {
                let message = if join.is_panic() {
                    panic_message(&*join.into_panic())
                } else {
                    "blocking task was cancelled".to_owned()
                };
                Err(Box::new(Error::StagePanic {
                    stage: String::new(),
                    message,
                }) as BoxError)
            }
        }
    })
}
