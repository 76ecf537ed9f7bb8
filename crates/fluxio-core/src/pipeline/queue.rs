//! A pipeline's queue (contract rule 31): [`Pipeline::enqueue`], and what
//! a worker asks of the pipeline when it starts one of the queue's runs.

use std::sync::Arc;

use super::Pipeline;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::interpret::renew::Renewal;
use crate::interpret::tail::Tail;
use crate::queue::{Enqueue, Enqueued, Queue};
use crate::store::{
    Begin, Checkpoint, CheckpointStore, Lease, Pending, QueueEntry, RunStatus, successor,
};

impl Pipeline {
    /// Stores the run `run_id` on `input` as queued in the pipeline's
    /// [queue](crate::PipelineBuilder::queue) and returns at once (contract
    /// rule 31): a [`RecoveryWorker`](crate::recovery::RecoveryWorker) of the pipeline
    /// starts it when it fits the queue's limits, by
    /// [priority](Enqueue::priority), then roughly in the order enqueued.
    /// A run of that id stored already (queued, running or ended), or held
    /// by another caller (an enqueue or a start in flight), is left as it
    /// is: [`Enqueued::Exists`] (de-duplication by id), so a client that
    /// retries its enqueue starts one run. An enqueue dropped between its
    /// two writes leaves the run stored, not queued: once its lease lapses
    /// a worker recovers it into the queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fluxio_core::compile::Node;
    /// use fluxio_core::queue::{Enqueue, Enqueued, Queue};
    /// use fluxio_core::waiting::Sleep;
    /// use fluxio_core::{Context, InMemoryStore, RunStatus};
    /// # use fluxio_core::__private::pipeline_builder;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> fluxio_core::Result<()> {
    /// # // `fluxio::pipeline![send_email]` in the facade; a sleep stands in here
    /// # let nodes = vec![Node::Sleep(Sleep::after(Duration::from_secs(1)))];
    /// let emails = pipeline_builder(nodes, [1; 32], [1; 32])
    ///     .name("emails")
    ///     .store(InMemoryStore::new())
    ///     .queue(Queue::new("emails").concurrency(2).per_key(1))
    ///     .build()?;
    /// let input = Context::new().set("to", "ada@example.com")?;
    /// let queued = emails
    ///     .enqueue("welcome-ada", input.clone(), Enqueue::new().key("tenant-1"))
    ///     .await?;
    /// assert_eq!(queued, Enqueued::Queued);
    /// // the client's retry stores nothing more
    /// let again = emails.enqueue("welcome-ada", input, Enqueue::new()).await?;
    /// assert_eq!(again, Enqueued::Exists);
    /// let stored = emails.checkpoint("welcome-ada").await?.expect("stored");
    /// assert_eq!(stored.status, RunStatus::Sleeping);
    /// assert_eq!(stored.queue.and_then(|q| q.key).as_deref(), Some("tenant-1"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidSetting`] for a pipeline without a queue, or a bad
    /// [key](Enqueue::key) (naming it); [`Error::InvalidRunId`]; the
    /// store's.
    pub async fn enqueue(
        &self,
        run_id: &str,
        input: Context,
        options: Enqueue,
    ) -> Result<Enqueued> {
        let Some(queue) = &self.inner.queue else {
            return Err(Error::InvalidSetting {
                setting: "queue",
                message: format!(
                    "pipeline `{}` has no queue to enqueue run `{run_id}` in: declare one with \
                     `.queue(Queue::new(..))`",
                    self.inner.name
                ),
            });
        };
        options.check(queue.name())?;
        let (key, store, span) = self.durable_run("enqueue", run_id, false)?;
        let enqueue = async {
            let deadline_ms = options
                .start
                .deadline_ms(&self.inner.clock, Some(store.as_ref()))
                .await?;
            let mut tail = Tail::fresh(self.inner.settings.history_depth);
            let meta = [
                self.inner.name.as_str(),
                run_id,
                self.inner.version.as_str(),
            ];
            let mut first = crate::interpret::first_checkpoint(
                (&self.inner.program, 0),
                meta,
                &self.inner.structure,
                (crate::store::now_ms(), deadline_ms),
                &input.snapshot(),
                &mut tail,
            )
            .ok_or_else(|| Error::InvalidSetting {
                setting: "queue",
                message: format!("pipeline `{}` has no stage to queue", self.inner.name),
            })?;
            first.queue = Some(Box::new(QueueEntry::new(
                queue.name(),
                options.key.clone(),
                options.priority,
            )));
            let ttl = self.inner.settings.lease_ttl;
            let begun = match store.begin_run(first.clone(), ttl, Begin::IfAbsent).await {
                Ok(begun) => begun,
                // stored and held: running, or an enqueue in flight
                Err(Error::RunIdInUse { .. }) => return Ok(Enqueued::Exists),
                Err(e) => return Err(e),
            };
            if !begun.started {
                store.release_lease(begun.lease).await?;
                return Ok(Enqueued::Exists);
            }
            let now = self.inner.clock.now_ms(Some(store.as_ref())).await?;
            let due = crate::queue::due_at(now, options.priority);
            let mut queued = successor(first).parked(Pending::sleep(due));
            queued.updated_at_ms = crate::store::now_ms();
            store.finish_run(queued, begun.lease, false).await?;
            tracing::debug!(run = %key, queue = queue.name(), "enqueued a run");
            Ok(Enqueued::Queued)
        };
        tracing::Instrument::instrument(enqueue, span).await
    }

    /// The pipeline's queue (rule 31), when it declares one.
    #[must_use]
    pub fn queue(&self) -> Option<&Queue> {
        self.inner.queue.as_deref()
    }

    pub(crate) fn queue_arc(&self) -> Option<&Arc<Queue>> {
        self.inner.queue.as_ref()
    }

    /// Renews `slot`, a queue's lease, with the pipeline's runs' leases.
    pub(crate) fn renew_slot(&self, store: &Arc<dyn CheckpointStore>, slot: &Lease) -> Renewal {
        self.inner
            .leases
            .renew(store, slot, self.inner.settings.lease_ttl)
    }

    /// A claimed run of the queue whose key is at its limit (its latest
    /// checkpoint `cp`, held under `lease`): due again a little later, so
    /// that the runs of other keys behind it start meanwhile. A queued or
    /// sleeping run is written due then; an abandoned or failed one is set
    /// due then in the due-index; a waiting one is left (it is due again at
    /// once, and takes its turn when a slot is free). Returns when.
    pub(crate) async fn retry_queued(
        &self,
        store: &Arc<dyn CheckpointStore>,
        lease: &Lease,
        cp: Checkpoint,
    ) -> Result<u64> {
        let now = self.inner.clock.now_ms(Some(store.as_ref())).await?;
        let later = crate::clock::after(now, crate::queue::KEY_RETRY);
        let priority = cp.queue.as_ref().map_or(0, |q| q.priority);
        let due = crate::queue::due_at(later, priority);
        match cp.status {
            RunStatus::Sleeping => {
                let waits = cp.pending.as_ref().map(|p| p.waits.is_empty());
                if waits == Some(true) {
                    let mut again = successor(cp).parked(Pending::sleep(due));
                    again.updated_at_ms = crate::store::now_ms();
                    store.save_fenced(again, lease).await?;
                }
            }
            RunStatus::Running | RunStatus::Failed => match store.set_due(lease, Some(due)).await {
                Ok(()) | Err(Error::Unsupported { .. }) => {}
                Err(e) => return Err(e),
            },
            _ => {}
        }
        Ok(due)
    }

    /// Takes over the queued run `key` of another version of this
    /// pipeline, claimed under `lease` (rule 31): a run that has not
    /// started ran no code, so it starts on this version; its checkpoint is
    /// written again, whole, with this version and shape. `false`, and
    /// nothing written, for a run that started (it goes on only on its own
    /// version, rule 13).
    pub(crate) async fn adopt_queued(
        &self,
        store: &Arc<dyn CheckpointStore>,
        lease: &Lease,
        key: &str,
    ) -> Result<bool> {
        let Some(cp) = store.load(key).await? else {
            return Ok(false);
        };
        let queued = cp.queue.as_ref().is_some_and(|q| q.queued);
        if !(queued && cp.status == RunStatus::Sleeping && cp.ip == 0) {
            return Ok(false);
        }
        let from = cp.version.clone();
        let mut adopted = successor(cp);
        adopted.version.clone_from(&self.inner.version);
        adopted.structure = Some(Arc::clone(&self.inner.structure));
        adopted.change = crate::store::Change::Full;
        adopted.updated_at_ms = crate::store::now_ms();
        store.save_fenced(adopted, lease).await?;
        tracing::info!(run = %key, from = %from, to = %self.inner.version, "a queued run starts on this version");
        Ok(true)
    }
}
