//! Streaming stages: stages that emit chunks while they run.
//!
//! A stream stage takes a second argument, an [`Emitter`]:
//!
//! ```text
//! #[fluxio::stage]
//! async fn tokens(ctx: Context, out: fluxio::Emitter) -> StageResult {
//!     for word in ["hello", "world"] {
//!         out.emit(word).await?;
//!     }
//!     Ok(ctx)
//! }
//! ```
//!
//! [`Pipeline::stream`](crate::Pipeline::stream) yields every chunk as it is
//! emitted, through a bounded buffer: [`Emitter::emit`] waits for room, so a
//! slow consumer slows the stage down. With [`Pipeline::invoke`](crate::Pipeline::invoke)
//! the chunks are only collected. Either way, when the stage returns, the
//! list of its chunks is stored in the context under `<stage>_stream_result`.
//!
//! A stream stage is [`StageKind::Stream`](crate::StageKind::Stream):
//! [`Retry`](crate::middleware::Retry) and the cache never apply to it (no
//! duplicated or frozen chunks). A crash during a stream stage resumes by
//! re-running the stage, so a consumer that streams across a crash may see
//! the chunks emitted before the crash again.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::context::Context;
use crate::error::{BoxError, Result};
use crate::stage::{Output, StageFuture};
use crate::value::{Value, to_value};

/// The buffer of a stream, in chunks, unless
/// [`PipelineBuilder::stream_buffer`](crate::PipelineBuilder::stream_buffer) says otherwise.
pub const DEFAULT_STREAM_BUFFER: usize = 16;

/// One chunk a stream stage emitted.
#[derive(Clone, Debug, PartialEq)]
pub struct Chunk {
    /// The stage that emitted it.
    pub stage: &'static str,
    /// The emitted value.
    pub value: Value,
}

/// What [`Pipeline::stream`](crate::Pipeline::stream) yields: chunks, then
/// the final context. A failed run yields an `Err` instead of `Done`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// A chunk, in the order its stage emitted it.
    Chunk(Chunk),
    /// The run completed with this context; always the last item.
    Done(Context),
    /// The run reached a sleep or a wait (contract rules 25-26) and gave
    /// its lease back: what it waits for; always the last item.
    Parked(crate::outcome::Outcome),
}

pub(crate) type Sender = mpsc::Sender<Result<StreamEvent>>;

tokio::task_local! {
    /// The consumer of the run this task belongs to, when it is streamed.
    pub(crate) static STREAM_TX: Sender;
}

/// Why [`Emitter::emit`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmitError {
    /// The value could not be converted to a [`Value`].
    Serialize(String),
    /// The consumer of the stream is gone (the stream was dropped): the run
    /// is being cancelled, so the stage should stop.
    Closed,
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmitError::Serialize(m) => write!(f, "could not serialize a stream chunk: {m}"),
            EmitError::Closed => f.write_str("the stream's consumer is gone"),
        }
    }
}

impl std::error::Error for EmitError {}

/// The handle a stream stage emits its chunks through.
pub struct Emitter {
    stage: &'static str,
    tx: Option<Sender>,
    sink: Option<crate::callback::ChunkSink>,
    collected: Arc<Mutex<Vec<Value>>>,
}

impl fmt::Debug for Emitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emitter")
            .field("stage", &self.stage)
            .field("streaming", &self.tx.is_some())
            .finish_non_exhaustive()
    }
}

impl Emitter {
    /// An emitter for `stage` that only collects (no consumer); what a test
    /// calling a stream stage directly can pass. [`Emitter::chunks`] returns
    /// what was emitted.
    #[must_use]
    pub fn collecting(stage: &'static str) -> Self {
        Emitter {
            stage,
            tx: None,
            sink: None,
            collected: Arc::default(),
        }
    }

    /// An emitter bound to the streamed run of the current task, if any.
    fn current(stage: &'static str) -> Self {
        Emitter {
            tx: STREAM_TX.try_with(Clone::clone).ok(),
            sink: crate::callback::CHUNK_SINK.try_with(Clone::clone).ok(),
            ..Emitter::collecting(stage)
        }
    }

    /// Emits one chunk: converts `value`, hands it to the stream's consumer
    /// (waiting for room in the buffer: backpressure) and records it for
    /// `<stage>_stream_result`.
    ///
    /// # Errors
    /// [`EmitError::Serialize`] when the value cannot be converted;
    /// [`EmitError::Closed`] when the consumer dropped the stream. Return it
    /// (`?`) to end the stage.
    pub async fn emit<T: Serialize>(&self, value: T) -> std::result::Result<(), EmitError> {
        let value = to_value(&value).map_err(|e| EmitError::Serialize(e.to_string()))?;
        if let Some(sink) = &self.sink {
            crate::callback::emit(&sink.callbacks, "stream_chunk", |c| {
                c.on_stream_chunk(&sink.run_id, self.stage, &value)
            });
        }
        if let Some(tx) = &self.tx {
            let chunk = Chunk {
                stage: self.stage,
                value: value.clone(),
            };
            tx.send(Ok(StreamEvent::Chunk(chunk)))
                .await
                .map_err(|_| EmitError::Closed)?;
        }
        self.collected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(value);
        Ok(())
    }

    /// The chunks emitted so far.
    #[must_use]
    pub fn chunks(&self) -> Vec<Value> {
        self.collected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The context key a stream stage's chunks are stored under.
#[must_use]
pub fn result_key(stage: &str) -> String {
    format!("{stage}_stream_result")
}

/// Runs a stream stage's body with an emitter, then stores its chunks.
pub(crate) fn run_stream<F, Fut, E>(stage: &'static str, ctx: Context, f: F) -> StageFuture
where
    F: FnOnce(Context, Emitter) -> Fut,
    Fut: Future<Output = std::result::Result<Context, E>> + std::marker::Send + 'static,
    E: Into<BoxError>,
{
    let emitter = Emitter::current(stage);
    let collected = Arc::clone(&emitter.collected);
    let fut = f(ctx, emitter);
    StageFuture::new(async move {
        let ctx = fut.await.map_err(Into::into)?;
        let chunks = std::mem::take(
            &mut *collected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        // each chunk was checked when emitted; the list around them adds a
        // level and sums their sizes, so check the whole value once more
        let key = result_key(stage);
        Ok(Output::Context(ctx.set(key, Value::Seq(chunks))?))
    })
}

/// The stream of a run: [`Pipeline::stream`](crate::Pipeline::stream).
///
/// Yields [`StreamEvent::Chunk`]s, then [`StreamEvent::Done`] with the final
/// context (or an `Err` when the run fails), then ends. Dropping it cancels
/// the run: its task is aborted at the next `.await` (a stage waiting in
/// [`Emitter::emit`] included), and a durable run's lease on its run id is
/// released in the background, as when an [`invoke`](crate::Pipeline::invoke)
/// future is dropped.
#[must_use = "a stream does nothing unless polled, and dropping it cancels the run"]
pub struct RunStream {
    rx: mpsc::Receiver<Result<StreamEvent>>,
    /// `None` when there was no runtime to spawn on (the stream then holds
    /// one `Err(Error::NoRuntime)`).
    task: Option<tokio::task::JoinHandle<()>>,
}

impl fmt::Debug for RunStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunStream")
            .field(
                "finished",
                &self.task.as_ref().is_none_or(|t| t.is_finished()),
            )
            .finish_non_exhaustive()
    }
}

impl RunStream {
    /// Spawns `run` (a whole run) bound to a new stream with `buffer` slots.
    /// Outside a tokio runtime the stream yields one
    /// `Err(Error::NoRuntime)` naming `run_id` instead.
    pub(crate) fn spawn<F>(buffer: usize, run_id: &str, run: impl FnOnce(Sender) -> F) -> Self
    where
        F: Future<Output = ()> + std::marker::Send + 'static,
    {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        let task = match tokio::runtime::Handle::try_current() {
            Ok(rt) => Some(rt.spawn(run(tx))),
            Err(_) => {
                // a fresh channel has room for one item
                let _ = tx.try_send(Err(crate::Error::NoRuntime {
                    operation: format!("stream of run `{run_id}`"),
                }));
                None
            }
        };
        RunStream { rx, task }
    }

    /// The next item, `None` after the last one: the same as
    /// `futures::StreamExt::next`, without the import.
    pub async fn recv(&mut self) -> Option<Result<StreamEvent>> {
        self.rx.recv().await
    }
}

impl futures::Stream for RunStream {
    type Item = Result<StreamEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for RunStream {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
