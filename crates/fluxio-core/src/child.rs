//! Child runs (contract rule 29): the pipeline element `child!("billing")`
//! of `pipeline!` builds ([`Child`], or by hand
//! [`Node::Child`](crate::compile::Node::Child)).
//!
//! A child step starts a run of another named pipeline, registered on the
//! parent's builder with
//! [`PipelineBuilder::child`](crate::PipelineBuilder::child), and waits for
//! it as a wait waits for a signal: the parent parks (it lists as
//! waiting, no process holds it), a worker of the child's pipeline runs the
//! child, and the child's end makes the parent due, so that a worker of the
//! parent's pipeline continues it with the child's result in its context.
//!
//! - **The child's id** is derived from the parent's run and the step's
//!   position: `{parent key}#{position}`, e.g. `orders/42#3`, stored under
//!   the key `billing/orders/42#3` ([`child_run_id`]). A parent that is
//!   resumed, retried or started again by a client finds the child it
//!   started and attaches to it; it never starts a second one.
//! - **Its input** is the parent's context, or only the keys named by
//!   [`Child::input`]; **its result** is the child's final context, merged
//!   into the parent's (or only the keys named by [`Child::output`]).
//! - **A failure** (the child failed, was cancelled, or recovery gave up on
//!   it) fails the parent at the child step with
//!   [`Error::ChildFailed`], unless the step
//!   names a key for it ([`Child::failure_into`]): the parent then goes on
//!   with a [`ChildFailure`] under that key. A parent retried after such a
//!   failure retries the child from where it failed (its finished stages do
//!   not run again).
//! - **Its deadline** is the earlier of the parent's and the step's own
//!   ([`Child::deadline`]) (rule 30).
//! - **Waking.** The child's end (completed or failed) makes its parent due
//!   at once when both are in one store; otherwise the parent looks at its
//!   child every [`poll`](Child::poll) (default 60 s), which also covers a
//!   worker killed between the child's end and that wake.
//! - **Cancelling** a parent cancels its open children
//!   ([`Pipeline::cancel`](crate::Pipeline::cancel), `fluxio runs cancel`),
//!   and a listing finds a parent's children with
//!   [`RunFilter::children_of`](crate::store::RunFilter::children_of).
//!
//! The child's pipeline needs a worker, as any due run does
//! ([`RecoveryWorker`](crate::recovery::RecoveryWorker)); so does the
//! parent's, to continue it after the child.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::context::{Context, Snapshot};
use crate::error::{Error, Result};
use crate::store::{Checkpoint, Pending, RunStatus, WaitName};

/// How often a parent looks at its child when nothing wakes it, by
/// default.
pub const DEFAULT_CHILD_POLL: Duration = Duration::from_secs(60);

/// The shortest [`Child::poll`] accepted.
pub const MIN_CHILD_POLL: Duration = Duration::from_millis(10);

/// The most children one fan-out step ([`Child::each`]) starts: a longer
/// list fails the parent at the step, naming its key.
pub const MAX_FAN_OUT: usize = 10_000;

pub use crate::store::CHILD_WAIT_PREFIX;

/// A child step (contract rule 29): `child!("billing", input = ["order_id"],
/// output = ["invoice_id"])`. See the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use fluxio_core::child::Child;
///
/// let child = Child::of("billing")
///     .input(["order_id", "amount"])
///     .output(["invoice_id"])
///     .failure_into("billing_error")
///     .poll(Duration::from_secs(5));
/// assert_eq!(child.pipeline(), "billing");
/// assert_eq!(child.step_name(), "child(billing)");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pipeline: String,
    pub(crate) input: Option<Vec<String>>,
    pub(crate) output: Option<Vec<String>>,
    pub(crate) failure: Option<String>,
    pub(crate) deadline: Option<Duration>,
    pub(crate) poll: Duration,
    /// A fan-out: the list key, the key each child's item goes to, and
    /// the key the results go to.
    pub(crate) each: Option<FanOut>,
}

/// What makes a child step a fan-out ([`Child::each`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FanOut {
    pub(crate) list: String,
    pub(crate) item: String,
    pub(crate) into: String,
}

impl Child {
    /// A run of the pipeline named `pipeline`, on the parent's whole
    /// context, merging the child's whole final context back.
    #[must_use]
    pub fn of(pipeline: impl Into<String>) -> Child {
        Child {
            pipeline: pipeline.into(),
            input: None,
            output: None,
            failure: None,
            deadline: None,
            poll: DEFAULT_CHILD_POLL,
            each: None,
        }
    }

    /// A fan-out: one child per item of the list under context key
    /// `list` (at most [`MAX_FAN_OUT`]), each with its item under the key
    /// `item` of its input (which holds the parent's context, or its
    /// [`input`](Self::input) keys, without the list), all started at once; the parent goes on when
    /// every child has ended, with the list of their results under `into`
    /// (for each item, in order, a map of the child's output keys, or of
    /// its whole final context). A failed child fails the parent, unless
    /// the step names a failure key: then `into` holds `()` for it and the
    /// failure key the list of [`ChildFailure`]s. Child `i` has the id
    /// `{parent key}#{position}.{i}`.
    #[must_use]
    pub fn each(
        mut self,
        list: impl Into<String>,
        item: impl Into<String>,
        into: impl Into<String>,
    ) -> Child {
        self.each = Some(FanOut {
            list: list.into(),
            item: item.into(),
            into: into.into(),
        });
        self
    }

    /// The child's input is only these keys of the parent's context (each
    /// must be there: a missing one fails the step naming it).
    #[must_use]
    pub fn input<I, K>(mut self, keys: I) -> Child
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.input = Some(keys.into_iter().map(Into::into).collect());
        self
    }

    /// Only these keys of the child's final context go into the parent's
    /// (each must be there: a missing one fails the step naming it).
    #[must_use]
    pub fn output<I, K>(mut self, keys: I) -> Child
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.output = Some(keys.into_iter().map(Into::into).collect());
        self
    }

    /// A child that fails puts a [`ChildFailure`] under `key` and the parent
    /// goes on, instead of failing at the step.
    #[must_use]
    pub fn failure_into(mut self, key: impl Into<String>) -> Child {
        self.failure = Some(key.into());
        self
    }

    /// The child's own deadline, this long after the parent starts it; the
    /// child gets the earlier of it and the parent's (rule 30).
    #[must_use]
    pub fn deadline(mut self, within: Duration) -> Child {
        self.deadline = Some(within);
        self
    }

    /// How often the parent looks at its child when nothing wakes it
    /// (default [`DEFAULT_CHILD_POLL`], at least [`MIN_CHILD_POLL`]).
    #[must_use]
    pub fn poll(mut self, every: Duration) -> Child {
        self.poll = every;
        self
    }

    /// The name of the child's pipeline.
    #[must_use]
    pub fn pipeline(&self) -> &str {
        &self.pipeline
    }

    /// Its step name, as checkpoints and history show it: `child(billing)`,
    /// or for a fan-out `child(billing, each orders)`.
    #[must_use]
    pub fn step_name(&self) -> String {
        match &self.each {
            None => format!("child({})", self.pipeline),
            Some(fan) => format!("child({}, each {})", self.pipeline, fan.list),
        }
    }

    /// The recorded shape's text of it (rule 13).
    pub(crate) fn describe(&self) -> String {
        let keys =
            |k: &Option<Vec<String>>| k.as_ref().map_or("all".to_owned(), |k| format!("{k:?}"));
        let each = self
            .each
            .as_ref()
            .map(|f| format!("; each {:?} as {:?} into {:?}", f.list, f.item, f.into));
        format!(
            "child({:?}; input {}; output {}; failure {:?}; deadline {:?}{})",
            self.pipeline,
            keys(&self.input),
            keys(&self.output),
            self.failure,
            self.deadline.map(|d| d.as_millis()),
            each.unwrap_or_default()
        )
    }

    /// Feeds the step to a pipeline's version, as `pipeline!` does for
    /// `child!(...)` (see [`VersionHasher::child`](crate::version::VersionHasher::child));
    /// its poll is not part of it.
    #[must_use]
    pub fn hash_into(&self, h: crate::version::VersionHasher) -> crate::version::VersionHasher {
        fn keys(k: &Option<Vec<String>>) -> Option<Vec<&str>> {
            k.as_ref().map(|k| k.iter().map(String::as_str).collect())
        }
        let (input, output) = (keys(&self.input), keys(&self.output));
        let ms = self
            .deadline
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let h = h
            .child(&self.pipeline)
            .child_keys(input.as_deref())
            .child_keys(output.as_deref());
        let h = match &self.each {
            Some(fan) => h.child_each(&fan.list, &fan.item, &fan.into),
            None => h,
        };
        h.child_end(self.failure.as_deref(), ms)
    }

    /// Checks the step as a pipeline element.
    pub(crate) fn check(&self) -> Result<()> {
        let step = self.step_name();
        crate::store::check_pipeline_name(&self.pipeline)
            .map_err(|e| Error::build(format!("{step}: {e}")))?;
        if self.poll < MIN_CHILD_POLL {
            return Err(Error::build(format!(
                "{step}: a poll of {:?} is shorter than {MIN_CHILD_POLL:?}",
                self.poll
            )));
        }
        let lists = [("input", &self.input), ("output", &self.output)];
        for (what, keys) in lists {
            let Some(keys) = keys else { continue };
            if let Some(bad) = keys.iter().find(|k| k.is_empty()) {
                return Err(Error::build(format!("{step}: an empty {what} key {bad:?}")));
            }
            if let Some((_, k)) = keys
                .iter()
                .enumerate()
                .find(|(i, k)| keys[..*i].contains(k))
            {
                return Err(Error::build(format!("{step} names {what} key `{k}` twice")));
            }
        }
        if self.failure.as_deref() == Some("") {
            return Err(Error::build(format!("{step}: an empty failure key")));
        }
        if let Some(fan) = &self.each {
            for (what, key) in [
                ("list", &fan.list),
                ("item", &fan.item),
                ("into", &fan.into),
            ] {
                if key.is_empty() {
                    return Err(Error::build(format!("{step}: an empty {what} key")));
                }
            }
        }
        Ok(())
    }

    /// The child's input: the parent's context `ctx`, or only its `input`
    /// keys.
    pub(crate) fn input_of(&self, ctx: &Context) -> Result<Snapshot> {
        let Some(keys) = &self.input else {
            return Ok(ctx.snapshot());
        };
        let mut input = Context::new();
        for key in keys {
            let Some(value) = ctx.encoded(key) else {
                return Err(missing(
                    key,
                    "a value in the parent's context, the input of a child step",
                ));
            };
            input = input.set_encoded(key.clone(), value.clone());
        }
        Ok(input.snapshot())
    }

    /// The parent's context `ctx` with the child's result, its final
    /// context `done`, merged in (all of it, or its `output` keys).
    pub(crate) fn merge(&self, mut ctx: Context, done: &Snapshot) -> Result<Context> {
        match &self.output {
            None => {
                for (key, value) in done.entries() {
                    ctx = ctx.set_encoded(key.to_owned(), value.clone());
                }
            }
            Some(keys) => {
                for key in keys {
                    let Some(value) = done.encoded(key) else {
                        return Err(missing(
                            key,
                            "a value in the child's result, an output of a child step",
                        ));
                    };
                    ctx = ctx.set_encoded(key.clone(), value.clone());
                }
            }
        }
        Ok(ctx)
    }
}

fn missing(key: &str, expected: &'static str) -> Error {
    Error::MissingKey {
        key: key.to_owned(),
        expected,
    }
}

/// What a child step puts under its failure key
/// ([`Child::failure_into`]) when the child fails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChildFailure {
    /// The child's store key (`billing/orders/42#3`).
    pub run: String,
    /// How it ended: `failed`, `cancelled` or `needs-attention`.
    pub state: String,
    /// Its error message, when it has one.
    pub error: Option<String>,
}

/// The run id of the child that the step at `position` of the run stored
/// under `parent_key` starts: `{parent_key}#{position}`.
///
/// ```
/// use fluxio_core::child::{child_run_id, parent_of};
/// assert_eq!(child_run_id("orders/42", 3), "orders/42#3");
/// assert_eq!(parent_of("orders/42#3"), Some("orders/42"));
/// assert_eq!(parent_of("order-42"), None);
/// ```
#[must_use]
pub fn child_run_id(parent_key: &str, position: u32) -> String {
    format!("{parent_key}#{position}")
}

pub use crate::store::parent_of;

/// The items of the fan-out `child`'s list in `ctx`.
pub(crate) fn items(ctx: &Context, child: &Child) -> Result<Vec<crate::value::Value>> {
    use crate::value::{Packed, Value};
    let list = child.each.as_ref().map_or("", |f| f.list.as_str());
    let Some(value) = ctx.value(list) else {
        return Err(missing(list, "a list: the items of a fan-out child step"));
    };
    let items: Vec<Value> = match value.into_owned() {
        Value::Seq(items) => items,
        Value::Packed(packed) => match packed {
            Packed::U8(v) => v.into_iter().map(|x| Value::U64(x.into())).collect(),
            Packed::I8(v) => v.into_iter().map(|x| Value::I64(x.into())).collect(),
            Packed::U16(v) => v.into_iter().map(|x| Value::U64(x.into())).collect(),
            Packed::I16(v) => v.into_iter().map(|x| Value::I64(x.into())).collect(),
            Packed::U32(v) => v.into_iter().map(|x| Value::U64(x.into())).collect(),
            Packed::I32(v) => v.into_iter().map(|x| Value::I64(x.into())).collect(),
            Packed::U64(v) => v.into_iter().map(Value::U64).collect(),
            Packed::I64(v) => v.into_iter().map(Value::I64).collect(),
            Packed::F32(v) => v.into_iter().map(|x| Value::F64(x.into())).collect(),
            Packed::F64(v) => v.into_iter().map(Value::F64).collect(),
            Packed::Bool(v) => v.into_iter().map(Value::Bool).collect(),
        },
        other => {
            return Err(Error::Validation {
                stage: child.step_name(),
                message: format!("context key `{list}` holds {}, not a list", other.kind()),
            });
        }
    };
    if items.len() > MAX_FAN_OUT {
        return Err(Error::Validation {
            stage: child.step_name(),
            message: format!(
                "context key `{list}` holds {} items: a fan-out starts at most {MAX_FAN_OUT} \
                 children",
                items.len()
            ),
        });
    }
    Ok(items)
}

/// A child's result as one value of a fan-out's list: a map of its
/// `output` keys, or of its whole final context (`done`).
pub(crate) fn result_value(child: &Child, done: &Snapshot) -> Result<crate::value::Value> {
    use crate::value::Value;
    let mut map = std::collections::BTreeMap::new();
    match &child.output {
        None => {
            for (key, value) in done.entries() {
                map.insert(Value::String(key.to_owned()), value.decode());
            }
        }
        Some(keys) => {
            for key in keys {
                let Some(value) = done.encoded(key) else {
                    return Err(missing(
                        key,
                        "a value in the child's result, an output of a child step",
                    ));
                };
                map.insert(Value::String(key.clone()), value.decode());
            }
        }
    }
    Ok(Value::Map(map))
}

/// What a parent waiting for the child stored under `child_key` waits for:
/// the name `child:{child_key}`, and a look at the child at `until_ms`.
pub(crate) fn pending(child_key: &str, pipeline: &str, until_ms: u64) -> Pending {
    let name = format!("{CHILD_WAIT_PREFIX}{child_key}");
    Pending::wait(
        vec![WaitName::new(name, format!("a run of {pipeline}"))],
        Some(until_ms),
    )
}

/// What a parent waiting for the children of a fan-out, whose ids start
/// with `id_prefix` in `pipeline`, waits for: the name
/// `child:{pipeline}/{id_prefix}*`.
pub(crate) fn fan_pending(pipeline: &str, id_prefix: &str, n: usize, until_ms: u64) -> Pending {
    let name = format!("{CHILD_WAIT_PREFIX}{pipeline}/{id_prefix}*");
    Pending::wait(
        vec![WaitName::new(name, format!("{n} runs of {pipeline}"))],
        Some(until_ms),
    )
}

/// The child's key a parent's `pending` waits for, if it waits for one
/// (a fan-out's ends with `*`).
pub(crate) fn waited_child(pending: &Pending) -> Option<&str> {
    pending
        .waits
        .iter()
        .find_map(|w| w.name.strip_prefix(CHILD_WAIT_PREFIX))
}

/// Where a child stands, for its parent.
pub(crate) enum ChildState {
    /// It has not ended: the parent waits.
    Open,
    /// It completed with this context.
    Completed(Snapshot),
    /// It failed, was cancelled, or recovery gave up on it.
    Failed(ChildFailure),
}

impl ChildState {
    /// The state of the child stored under `key` as `latest`.
    pub(crate) fn of(key: &str, latest: &Checkpoint) -> ChildState {
        let failed = |state: &str| {
            ChildState::Failed(ChildFailure {
                run: key.to_owned(),
                state: state.to_owned(),
                error: latest.error_message.clone(),
            })
        };
        match latest.status {
            RunStatus::Completed => ChildState::Completed(latest.context.clone()),
            RunStatus::Failed => failed("failed"),
            RunStatus::Cancelled => failed("cancelled"),
            RunStatus::NeedsAttention => failed("needs-attention"),
            _ => ChildState::Open,
        }
    }
}

/// The pipeline a child step runs, as the interpreter sees it: what
/// [`PipelineBuilder::child`](crate::PipelineBuilder::child) registered
/// (a [`Pipeline`](crate::Pipeline)).
#[async_trait::async_trait]
pub(crate) trait ChildRuns: Send + Sync + std::fmt::Debug {
    /// Stores the run `run_id` on `input`, due at once for a worker, with
    /// the deadline `deadline_ms`, unless a run is stored under its key;
    /// returns its key and latest checkpoint.
    async fn submit(
        &self,
        run_id: &str,
        input: Snapshot,
        deadline_ms: Option<u64>,
    ) -> Result<(String, Checkpoint)>;

    /// The latest checkpoint of the run `run_id`, if it is stored.
    async fn latest(&self, run_id: &str) -> Result<Option<Checkpoint>>;

    /// Hands the failed run `run_id` back to the workers, due at once.
    async fn retry(&self, run_id: &str) -> Result<()>;

    /// Cancels the run stored under `key` and its open children.
    async fn cancel_key(&self, key: &str) -> Result<()>;

    /// The runs of this pipeline whose id starts with `id_prefix`, all
    /// pages; `None` when its store does not list runs.
    async fn listed(&self, id_prefix: &str) -> Result<Option<Vec<crate::store::RunSummary>>>;
}
