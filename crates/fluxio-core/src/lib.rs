//! The core of [fluxio](https://docs.rs/fluxio): context, compiler,
//! interpreter, checkpoint stores and errors.
//!
//! Users depend on the `fluxio` facade, which re-exports this crate together
//! with the `#[stage]` and `pipeline!` macros; see its documentation for a
//! tour. This crate is what backend crates (`fluxio-redis`, ...) build on.

pub mod callback;
pub mod child;
pub mod clock;
pub mod compile;
pub mod context;
pub mod durability;
pub mod error;
pub mod history;
mod interpret;
pub mod metrics;
pub mod middleware;
mod outcome;
pub mod pipeline;
pub mod queue;
pub mod recovery;
pub mod schedule;
pub mod shape;
pub mod stage;
pub mod store;
pub mod stream;
pub mod structure;
pub mod testing;
pub mod value;
pub mod version;
pub mod waiting;

pub use context::{Context, Key, KeyName, Snapshot};
pub use durability::Durability;
pub use error::{BoxError, Error, Result, TerminalError};
pub use history::{History, Step, StepStatus};
pub use outcome::Outcome;
pub use pipeline::{
    Diff, DiffEntry, Pipeline, PipelineBuilder, Plan, PlannedStep, ResumeOptions, StartOptions,
};
pub use stage::{Resource, Route, Stage, StageInfo, StageKind, StageMeta};
pub use store::{Checkpoint, CheckpointStore, InMemoryStore, RunStatus};
pub use stream::{Chunk, EmitError, Emitter, RunStream, StreamEvent};
pub use structure::{Changes, StageCode, Structure};
pub use value::Value;

/// The attribute that implements fluxio's async traits
/// ([`Middleware`](middleware::Middleware),
/// [`CheckpointStore`] and
/// [`CacheStore`](middleware::CacheStore)): the
/// [`async-trait`](https://docs.rs/async-trait) crate's, re-exported so that
/// implementing one needs no dependency of its own (`fluxio::async_trait`
/// in the facade).
pub use async_trait::async_trait;

/// What a stage returns: `Result<Context, BoxError>` by default, or
/// `StageResult<fluxio::Route>` for a router.
pub type StageResult<T = Context> = std::result::Result<T, BoxError>;

/// Support for the code `#[stage]` and `pipeline!` generate. Not a stable API:
/// it changes without notice between any two versions.
#[doc(hidden)]
pub mod __private {
    pub use crate::child::Child;
    pub use crate::compile::Node;
    pub use crate::context::typed_key_of as key_of;
    pub use crate::pipeline::PipelineBuilder;
    pub use crate::stage::error_kind::{BoxKind, ErrorKindOf, IntoKind, OpaqueKind, StdKind};
    pub use crate::stage::used_as;
    pub use crate::stage::{
        FromResources, HelperDef, Output, ResourceReq, Resources, Stage, StageDef, StageFuture,
        StageKind, StageMeta, StageOutput, StageReturn, validate,
    };
    pub use crate::version::{VersionHasher, with_helpers, with_keys};
    pub use crate::waiting::{OnTimeout, Sleep, Until, Wait, timeout_value};
    pub use crate::{BoxError, Context};
    pub use std::boxed::Box;
    pub use std::option::Option;
    pub use std::result::Result;
    pub use std::string::String;
    pub use std::time::Duration;
    pub use std::vec;
    pub use std::vec::Vec;

    /// The builder `pipeline!` returns: its nodes and the two compile-time
    /// digests (auto-parallelism off and on).
    pub fn pipeline_builder(
        root: Vec<Node>,
        digest_plain: [u8; 32],
        digest_auto: [u8; 32],
    ) -> PipelineBuilder {
        PipelineBuilder::new(root, digest_plain, digest_auto)
    }

    /// Stages named `names` that pass their context on, each with a code
    /// hash of its own: for documentation examples, where `#[stage]` is
    /// the facade's.
    #[must_use]
    pub fn doc_stages(names: &[&'static str]) -> Vec<Stage> {
        fn pass(ctx: Context, _: &Resources) -> StageFuture {
            StageFuture::ready(Ok(Output::Context(ctx)))
        }
        names
            .iter()
            .map(|name| {
                let hash = crate::version::VersionHasher::new()
                    .part(name.as_bytes())
                    .finalize();
                Stage::new(crate::__private::stage_meta(name, hash), pass)
            })
            .collect()
    }

    /// Wraps an async stage's future; `err` converts its error.
    pub fn async_stage<T, E, F>(fut: F, err: fn(E) -> BoxError) -> StageFuture
    where
        F: std::future::Future<Output = Result<T, E>> + std::marker::Send + 'static,
        T: StageOutput,
        E: 'static,
    {
        // a combinator, not an `async` block: the block would keep `fut`
        // twice (captured, and moved into its `.await`), and a parked
        // stage holds its box for as long as it waits (rule 24)
        StageFuture::new(futures::FutureExt::map(fut, move |out| {
            out.map(StageOutput::into_output).map_err(err)
        }))
    }

    /// Runs an async stage whose body never waits (`#[stage]` found no
    /// `.await` in it, nor a macro or attribute that could add one) to
    /// its end at once, in place: its future is polled once, never boxed.
    /// `err` converts its error.
    ///
    /// Its bounds are `async_stage`'s, so that whether a stage compiles
    /// does not depend on whether it awaits.
    #[inline]
    pub fn ready_stage<T, E, F>(stage: &'static str, fut: F, err: fn(E) -> BoxError) -> StageFuture
    where
        F: std::future::Future<Output = Result<T, E>> + std::marker::Send + 'static,
        T: StageOutput,
        E: 'static,
    {
        let fut = std::pin::pin!(fut);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        StageFuture::ready(match fut.poll(&mut cx) {
            std::task::Poll::Ready(out) => out.map(StageOutput::into_output).map_err(err),
            // cannot happen without an `.await`; if a macro hid one, say so
            // rather than drop the stage silently
            std::task::Poll::Pending => Err(crate::Error::Internal {
                message: format!(
                    "stage `{stage}` waited, though `#[stage]` found no `.await` in its body: a macro in it must await; please report this"
                ),
            }
            .into()),
        })
    }

    /// Runs a blocking stage's body on tokio's blocking pool; `err` converts
    /// its error.
    pub fn blocking_stage<T, E, F>(f: F, err: fn(E) -> BoxError) -> StageFuture
    where
        F: FnOnce() -> Result<T, E> + std::marker::Send + 'static,
        T: StageOutput,
        E: 'static,
    {
        crate::stage::bodies::run_blocking(move || f().map(StageOutput::into_output).map_err(err))
    }

    /// Runs a stream stage's body with the current run's emitter, then
    /// stores its chunks under `<stage>_stream_result`; `err` converts its
    /// error.
    pub fn stream_stage<F, Fut, E>(
        stage: &'static str,
        ctx: Context,
        f: F,
        err: fn(E) -> BoxError,
    ) -> StageFuture
    where
        F: FnOnce(Context, crate::stream::Emitter) -> Fut,
        Fut: std::future::Future<Output = Result<Context, E>> + std::marker::Send + 'static,
        E: 'static,
    {
        crate::stream::run_stream(stage, ctx, move |ctx, out| {
            let fut = f(ctx, out);
            async move { fut.await.map_err(err) }
        })
    }

    /// A call whose resource is missing (`Stage::call` checks first, so
    /// this is only reached by a stage called with other resources).
    pub fn missing_resource(stage: &'static str, req: ResourceReq) -> StageFuture {
        let err = crate::Error::build(format!(
            "stage `{stage}` takes a `Resource<{}>` that is not registered: register it with `.resource(value)` on the pipeline builder",
            req.type_name
        ));
        StageFuture::ready(Err(Box::new(err)))
    }

    /// The metadata `#[stage]` starts from: a stage called `name` with hash
    /// `hash`, async, not a router, with nothing declared, no timeout, no
    /// checks and no resources. Generated code sets the fields it knows one
    /// by one, so a field added to `StageMeta` (with its default here) needs
    /// no change to it.
    #[must_use]
    pub const fn stage_meta(name: &'static str, hash: [u8; 32]) -> StageMeta {
        StageMeta {
            name,
            hash,
            kind: StageKind::Async,
            router: false,
            reads: None,
            writes: None,
            timeout: None,
            input: None,
            output: None,
            resources: &[],
            compensate: None,
            pivot: false,
        }
    }

    /// The compensating stage `S` of `#[stage(compensate = S)]` (rule 35):
    /// the bounds are the compile-time check that `S` is a stage and not a
    /// router.
    pub fn compensator<S: crate::stage::StageDef>() -> Stage
    where
        S::ReturnsRoute: used_as::Compensator<S>,
    {
        S::stage()
    }

    /// The stage `#[stage]` emits for an `async fn` that never waits,
    /// whose call function is made of [`ready_stage`]: always finished.
    pub fn in_place_stage(meta: StageMeta, call: crate::stage::CallFn) -> Stage {
        Stage::new_in_place(meta, call)
    }

    /// The stage of a stand-in: `pipeline!`'s for a name that is not a
    /// stage, `#[stage]`'s for a function it refused. Never called, since
    /// such a program fails to compile.
    pub fn stand_in_stage() -> Stage {
        Stage::new(stage_meta("<stand-in>", [0; 32]), |_, _| {
            let err = crate::Error::build("a stand-in for a stage that did not compile was called");
            StageFuture::ready(Err(Box::new(err)))
        })
    }
}

/// Sizes ARCHITECTURE.md states, pinned so that the map stays true.
#[cfg(test)]
mod sizes {
    /// A context is moved through every layer of every stage call: two
    /// words a map (data and written set), the epoch marks and the branch
    /// name behind a thin pointer.
    #[test]
    fn a_context_is_48_bytes() {
        assert_eq!(std::mem::size_of::<crate::Context>(), 48);
    }

    /// The error is 104 bytes; the stage call path carries it boxed (an
    /// ended call is `Result<Output, Box<Error>>`), and it must not grow.
    #[test]
    fn the_error_is_at_most_104_bytes() {
        let size = std::mem::size_of::<crate::Error>();
        assert!(size <= 104, "fluxio_core::Error is {size} bytes");
    }
}
