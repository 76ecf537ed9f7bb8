//! History and time travel: `history`, `fork`, `diff`, `context_at`, `checkpoint`
//! (rules 18 and 20).

use std::fmt;

use tracing::Instrument as _;

use super::resume::{Continue, ResumeOptions};
use super::{Pipeline, check_runtime};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::outcome::Outcome;
use crate::store::{Checkpoint, CheckpointStore};
use crate::value::Value;

/// How two runs' stored contexts differ: [`Pipeline::diff`].
///
/// ```
/// use fluxio_core::{ctx, Diff};
/// # fn main() -> fluxio_core::Result<()> {
/// let a = ctx! { "n" => 1, "same" => true }?;
/// let b = ctx! { "n" => 2, "same" => true, "new" => "x" }?;
/// let d = Diff::between("a", &a, "b", &b);
/// assert_eq!(d.entries.len(), 2);
/// assert_eq!(d.to_string(), "n: 1 | 2\nnew: <absent> | \"x\"\n");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Diff {
    /// The first run id.
    pub run_a: String,
    /// The second run id.
    pub run_b: String,
    /// One entry per differing key, in key order.
    pub entries: Vec<DiffEntry>,
}

/// One differing key of a [`Diff`].
#[derive(Clone, Debug, PartialEq)]
pub struct DiffEntry {
    /// The key.
    pub key: String,
    /// Its value in the first run, `None` when absent there.
    pub a: Option<Value>,
    /// Its value in the second run, `None` when absent there.
    pub b: Option<Value>,
}

impl Diff {
    /// The differences between two contexts.
    #[must_use]
    pub fn between(run_a: &str, a: &Context, run_b: &str, b: &Context) -> Diff {
        let mut keys: Vec<&str> = a.keys().chain(b.keys()).collect();
        keys.sort_unstable();
        keys.dedup();
        let entries = keys
            .into_iter()
            .filter_map(|k| {
                // equal encodings are equal values: decode only what differs
                let (va, vb) = (a.encoded(k), b.encoded(k));
                (va != vb).then(|| DiffEntry {
                    key: k.to_owned(),
                    a: va.map(crate::value::EncodedValue::decode),
                    b: vb.map(crate::value::EncodedValue::decode),
                })
            })
            .collect();
        Diff {
            run_a: run_a.to_owned(),
            run_b: run_b.to_owned(),
            entries,
        }
    }

    /// Whether the two contexts are equal.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for Diff {
    /// One line per key: `key: <value in a> | <value in b>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &Option<Value>| {
            v.as_ref()
                .map_or_else(|| "<absent>".to_owned(), ToString::to_string)
        };
        for e in &self.entries {
            writeln!(f, "{}: {} | {}", e.key, show(&e.a), show(&e.b))?;
        }
        Ok(())
    }
}

impl Pipeline {
    /// The history of the run `run_id` (contract rule 20): every step it
    /// took that its store still keeps, with its attempt, status, times,
    /// the keys it wrote and its error. It prints as a table.
    ///
    /// ```
    /// # use fluxio_core::{Context, InMemoryStore, StepStatus};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// pipeline.invoke("order-1", Context::new()).await?;
    /// let history = pipeline.history("order-1").await?;
    /// assert!(history.steps.iter().all(|s| s.status == StepStatus::Completed));
    /// println!("{history}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// [`Error::InvalidRunId`], [`Error::Store`] and
    /// [`Error::CorruptCheckpoint`] as for [`checkpoint`](Self::checkpoint).
    pub async fn history(&self, run_id: &str) -> Result<crate::History> {
        let key = self.key(run_id)?;
        let store = self.require_store("history")?;
        let journal = store.history(&key).await?;
        if journal.is_empty() {
            return Err(Error::CheckpointNotFound {
                run_id: key.to_string(),
            });
        }
        let mut history = crate::History::of(&key, &journal);
        history.signals = store.signals(&key).await?;
        Ok(history)
    }

    /// Starts a new run, `new_run_id`, from `from_step` of the run `run_id`
    /// (a stage name or a step number, as for [`replay`](Self::replay)),
    /// with the context `run_id` had before that step (contract rule 20).
    /// The original run is read, never written: its checkpoints, status and
    /// lease stay as they are. The new run is an ordinary durable run from
    /// there on (its history starts at the fork and records it:
    /// [`History::forked_from`](crate::History::forked_from)), and this
    /// returns its result, like [`invoke`](Self::invoke).
    ///
    /// # Errors
    /// [`Error::InvalidRunId`] when `new_run_id` is malformed, is `run_id`,
    /// or names a run that is already stored; [`Error::RunIdInUse`] when
    /// another run holds it; [`Error::UnknownStep`],
    /// [`Error::StepNotInHistory`] and [`Error::CheckpointNotFound`] as for
    /// [`replay`](Self::replay); [`Error::CheckpointVersion`] when the step
    /// was written by another version of the pipeline; the errors of
    /// [`invoke`](Self::invoke).
    pub async fn fork(&self, run_id: &str, from_step: &str, new_run_id: &str) -> Result<Outcome> {
        self.fork_with(run_id, from_step, new_run_id, Ok).await
    }

    /// [`fork`](Self::fork) with the context changed first: `patch` gets the
    /// context the run had before `from_step` and returns the one the new
    /// run starts from. An operator fixes a wrong input (a card number, an
    /// address) and runs the rest again under a new run id; the keys set
    /// and removed are recorded in the new run's history
    /// ([`ForkOrigin`](crate::store::ForkOrigin)).
    ///
    /// ```
    /// # use fluxio_core::{Context, InMemoryStore};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fluxio_core::Result<()> {
    /// # let pipeline = fluxio_core::__private::pipeline_builder(Vec::new(), [0; 32], [0; 32])
    /// #     .name("orders")
    /// #     .store(InMemoryStore::new())
    /// #     .build()?;
    /// # let _ = async {
    /// pipeline
    ///     .fork_with("order-7", "charge", "order-7-fixed", |ctx| ctx.set("card", "4242"))
    ///     .await?;
    /// let history = pipeline.history("order-7-fixed").await?;
    /// println!("{}", history.forked_from.expect("recorded")); // forked from orders/order-7 at charge, set card
    /// # Ok::<(), fluxio_core::Error>(()) };
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`fork`](Self::fork); an error `patch` returns, before anything
    /// is written.
    pub async fn fork_with(
        &self,
        run_id: &str,
        from_step: &str,
        new_run_id: &str,
        patch: impl FnOnce(Context) -> Result<Context>,
    ) -> Result<Outcome> {
        let new_key = self.key(new_run_id)?;
        let store = self.require_store("fork")?;
        check_runtime("fork", &new_key)?;
        if new_run_id == run_id {
            return Err(Error::InvalidRunId {
                run_id: new_run_id.to_owned(),
                reason: "a fork needs a new run id, not the id of the run it forks",
            });
        }
        let key = self.key(run_id)?;
        let at = self.before_step("fork", run_id, from_step).await?;
        let how = Continue::Replay { from: Some(&at) };
        let runner = self.version_for(&key, &at, how, ResumeOptions::new())?;
        // the new run numbers its checkpoints by position, whatever the
        // forked one did
        let (ip, _) = runner.resume_point(&key, &at)?;
        let before = at.context.to_context();
        let after = patch(before.clone())?;
        let mut origin = crate::store::ForkOrigin::new(key.to_string(), from_step);
        for entry in Diff::between(run_id, &before, new_run_id, &after).entries {
            match entry.b {
                Some(_) => origin.set.push(entry.key),
                None => origin.removed.push(entry.key),
            }
        }
        let span = self.span(&new_key, true);
        async {
            let begun = runner
                .begin_fork(
                    store,
                    (new_run_id, &new_key),
                    (ip, &after.snapshot()),
                    Box::new(origin),
                )
                .await?;
            match begun {
                super::run::Fresh::Ran(result) => result,
                super::run::Fresh::Stored(owner) => {
                    owner.release().await;
                    Err(Error::InvalidRunId {
                        run_id: new_run_id.to_owned(),
                        reason: "a run with this id is stored: fork into a new run id",
                    })
                }
            }
        }
        .instrument(span)
        .await
    }

    /// A fork's run (rule 20): `begin` from the
    /// `CHECKPOINT` at `ip` with `origin` on its first checkpoint, which
    /// it writes with the lease in one call if nothing is stored under
    /// `key` (`Fresh::Stored` otherwise, the lease held). A function of
    /// its own so that `invoke`'s future does not carry a fork's arguments
    /// (rule 24).
    pub(super) async fn begin_fork(
        &self,
        store: &std::sync::Arc<dyn CheckpointStore>,
        (run_id, key): (&str, &str),
        (ip, input): (usize, &crate::context::Snapshot),
        origin: Box<crate::store::ForkOrigin>,
    ) -> Result<super::run::Fresh> {
        let created = crate::store::now_ms();
        let mut tail = crate::interpret::tail::Tail::fresh(self.inner.settings.history_depth);
        let meta = [
            self.inner.name.as_str(),
            run_id,
            self.inner.version.as_str(),
        ];
        let program = &self.inner.program;
        let structure = &self.inner.structure;
        let mut first = crate::interpret::first_checkpoint(
            (program, ip),
            meta,
            structure,
            (created, None),
            input,
            &mut tail,
        )
        .ok_or_else(|| crate::Error::Internal {
            message: format!("a fork of `{key}` starts at {ip}, which is not a step"),
        })?;
        first.forked_from = Some(origin);
        let (seq, context) = (first.seq, first.context.clone());
        let started = std::time::Instant::now();
        let (ttl, leases) = (self.inner.settings.lease_ttl, &self.inner.leases);
        let (owner, begun) = Box::pin(crate::interpret::ownership::Ownership::begin(
            store,
            first,
            ttl,
            leases,
            crate::store::Begin::IfAbsent,
        ))
        .await?;
        if !begun {
            return Ok(super::run::Fresh::Stored(owner));
        }
        tail.advance(
            seq,
            context,
            true,
            0,
            &self.inner.version,
            crate::context::Lineage::NONE,
        );
        let durable = self.durable(store, &owner, (run_id, key), (created, None), None, tail);
        *durable
            .prewritten
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(started.elapsed());
        let result = self.interpret_from(&owner, &durable, ip, input).await;
        drop(durable);
        owner.release().await;
        Ok(super::run::Fresh::Ran(result))
    }

    /// Compares two points of runs key by key (contract rule 20). A point
    /// is a run id (its latest checkpoint), or `run@step`: the context the
    /// run had before `step`, a stage name or a step number from
    /// [`history`](Self::history) (see [`context_at`](Self::context_at)).
    /// Two points of one run show what the steps between them changed.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::CheckpointNotFound`] naming the run that has no checkpoint;
    /// [`Error::StepNotInHistory`] naming a step its history does not hold;
    /// [`Error::InvalidRunId`] naming a malformed run id.
    pub async fn diff(&self, a: &str, b: &str) -> Result<Diff> {
        // both run ids are checked before either run is read
        let (point_a, point_b) = (self.point(a)?, self.point(b)?);
        let context_a = self.context_at_point(point_a).await?;
        let context_b = self.context_at_point(point_b).await?;
        Ok(Diff::between(a, &context_a, b, &context_b))
    }

    /// The context of a run at `point`: `run_id` alone is its latest
    /// checkpoint's; `run_id@step` is the context it had before `step` (a
    /// stage name of this pipeline, or a step number from
    /// [`history`](Self::history)), read from its history. A run id that
    /// itself contains `@` followed by neither is taken whole.
    ///
    /// # Errors
    /// As [`diff`](Self::diff).
    pub async fn context_at(&self, point: &str) -> Result<Context> {
        let point = self.point(point)?;
        self.context_at_point(point).await
    }

    /// `point` split into its run id, checked, and its step, if any.
    pub(super) fn point<'p>(&self, point: &'p str) -> Result<(&'p str, Option<&'p str>)> {
        let (run_id, step) = match point.rsplit_once('@') {
            Some((run, step))
                if !run.is_empty()
                    && (crate::history::is_step_number(step)
                        || self.inner.program.steps.contains_key(step)) =>
            {
                (run, Some(step))
            }
            _ => (point, None),
        };
        self.key(run_id)?;
        Ok((run_id, step))
    }

    pub(super) async fn context_at_point(
        &self,
        (run_id, step): (&str, Option<&str>),
    ) -> Result<Context> {
        if let Some(step) = step {
            return Ok(self
                .before_step("diff", run_id, step)
                .await?
                .context
                .to_context());
        }
        let key = self.key(run_id)?;
        let store = self.require_store("diff")?;
        match store.load(&key).await? {
            Some(cp) => Ok(cp.context.to_context()),
            None => Err(Error::CheckpointNotFound {
                run_id: key.to_string(),
            }),
        }
    }

    /// The stored checkpoint of `run_id`, if any: the pipeline's own, or a
    /// run of one of its versions stored before pipelines had names, which
    /// [`resume`](Self::resume) adopts.
    ///
    /// # Errors
    /// [`Error::NotDurable`] when the pipeline has no store;
    /// [`Error::Store`] and [`Error::CorruptCheckpoint`] from the store;
    /// [`Error::InvalidRunId`] for a malformed run id.
    pub async fn checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let key = self.key(run_id)?;
        let store = self.require_store("checkpoint")?;
        match store.load(&key).await? {
            Some(cp) => Ok(Some(cp)),
            // a run of this pipeline from before names, which `resume` adopts
            None if !self.inner.name.is_empty() => Ok(store.load(run_id).await?.filter(|cp| {
                cp.pipeline.is_empty()
                    && (cp.version == self.inner.version
                        || self
                            .inner
                            .held
                            .iter()
                            .any(|p| p.inner.version == cp.version))
            })),
            None => Ok(None),
        }
    }
}
