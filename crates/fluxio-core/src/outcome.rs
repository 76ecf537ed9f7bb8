//! How a call that runs a run ended: [`Outcome`].

use crate::context::Context;
use crate::error::{Error, Result};
use crate::store::{MAX_UNTIL_MS, Pending, WaitName};

/// How a call that runs a run ended, when it did not fail: the run
/// completed, or it reached a sleep or a wait and gave its lease back
/// (contract rules 25-26). What [`Pipeline::invoke`](crate::Pipeline::invoke),
/// [`start`](crate::Pipeline::start), [`resume`](crate::Pipeline::resume)
/// and the other calls that run a run return.
///
/// A pipeline without sleeps and waits always completes:
/// [`completed`](Outcome::completed) gives its final context.
///
/// ```
/// # use fluxio_core::{Context, InMemoryStore, Outcome};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fluxio_core::Result<()> {
/// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
/// #     .name("orders")
/// #     .store(InMemoryStore::new())
/// #     .build()?;
/// match pipeline.invoke("order-42", Context::new()).await? {
///     Outcome::Completed(ctx) => println!("done: {ctx:?}"),
///     Outcome::Sleeping { until_ms, .. } => println!("asleep until {until_ms}"),
///     Outcome::Waiting { waits, .. } => println!("waiting for {waits:?}"),
///     _ => {}
/// }
/// // or, for a pipeline that never waits:
/// let done: Context = pipeline.invoke("order-43", Context::new()).await?.completed()?;
/// # let _ = done;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[must_use = "a run that sleeps or waits has no result yet: look at the outcome"]
#[non_exhaustive]
pub enum Outcome {
    /// The run finished: its final context.
    Completed(Context),
    /// The run sleeps until `until_ms` (rule 25).
    Sleeping {
        /// The run's store key (`pipeline/run_id`).
        key: String,
        /// Its wake time, in milliseconds since the Unix epoch.
        until_ms: u64,
        /// The context it will continue with.
        context: Context,
    },
    /// The run waits for a signal on one of `waits` (rule 26).
    Waiting {
        /// The run's store key (`pipeline/run_id`).
        key: String,
        /// The names it can be signalled on, with their payload types.
        waits: Vec<WaitName>,
        /// Its deadline, in milliseconds since the Unix epoch, if it has one.
        deadline_ms: Option<u64>,
        /// The context it will continue with.
        context: Context,
    },
}

impl Outcome {
    /// The outcome of a run stored under `key` as parked on `pending`
    /// with `context`.
    pub(crate) fn parked(key: &str, pending: &Pending, context: Context) -> Outcome {
        if pending.is_sleep() {
            Outcome::Sleeping {
                key: key.to_owned(),
                until_ms: pending.until_ms.unwrap_or(MAX_UNTIL_MS),
                context,
            }
        } else {
            Outcome::Waiting {
                key: key.to_owned(),
                waits: pending.waits.clone(),
                deadline_ms: pending.until_ms,
                context,
            }
        }
    }

    /// The final context of a completed run.
    ///
    /// # Errors
    /// [`Error::NotFinished`] naming the run when it sleeps or waits.
    pub fn completed(self) -> Result<Context> {
        match self {
            Outcome::Completed(ctx) => Ok(ctx),
            Outcome::Sleeping { key, .. } => Err(Error::NotFinished {
                run_id: key,
                waiting: false,
            }),
            Outcome::Waiting { key, .. } => Err(Error::NotFinished {
                run_id: key,
                waiting: true,
            }),
        }
    }

    /// Whether the run completed.
    #[must_use]
    pub fn is_completed(&self) -> bool {
        matches!(self, Outcome::Completed(_))
    }

    /// The run's context: its final one, or the one it will continue with.
    #[must_use]
    pub fn context(&self) -> &Context {
        match self {
            Outcome::Completed(context)
            | Outcome::Sleeping { context, .. }
            | Outcome::Waiting { context, .. } => context,
        }
    }

    /// [`context`](Self::context), owned.
    #[must_use]
    pub fn into_context(self) -> Context {
        match self {
            Outcome::Completed(context)
            | Outcome::Sleeping { context, .. }
            | Outcome::Waiting { context, .. } => context,
        }
    }
}
