//! A worker's side of a queue (contract rule 31): the queue's slots are
//! taken first, then as many of its due runs claimed, each continued
//! holding its slots, which go back when it parks or ends.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::{Group, Outcome, RecoveryEvent, RecoveryWorker, lock};
use crate::error::{Error, Result};
use crate::pipeline::Pipeline;
use crate::queue::Slots;
use crate::store::{DueFilter, MAX_LIST_LIMIT};

impl RecoveryWorker {
    /// Continues the due runs of `pipeline`'s queue (due at `now`) that
    /// fit: takes as many of its slots as the worker has room for, claims
    /// that many of its due runs, and gives back the slots left over.
    /// `None` once the worker stops.
    pub(super) async fn claim_queued(
        &self,
        group: &Group,
        pipeline: &Pipeline,
        now: u64,
        (tasks, stop): (&mut JoinSet<Outcome>, &watch::Receiver<bool>),
    ) -> Option<()> {
        let Some(queue) = pipeline.queue_arc() else {
            return Some(());
        };
        let store = &group.store;
        let failed = |e: Error| {
            self.emit(&RecoveryEvent::StoreFailed {
                pipeline: pipeline.name().to_owned(),
                error: std::sync::Arc::new(e),
            });
        };
        let mut filter = DueFilter::new(now).pipeline(pipeline.name());
        // the due runs of every version first: a queued run of another that
        // has not started is taken over by this one (`adopt_queued`)
        let due = match store.due_runs(&filter.clone().limit(ADOPT_LOOKS)).await {
            Ok(due) => due,
            Err(e) => {
                failed(e);
                return Some(());
            }
        };
        let mut any = false;
        for run in &due {
            if self.pipeline_for(&run.pipeline, &run.version).is_some() {
                any = true;
            } else if !lock(&self.inner.reported).contains(&run.key) {
                match self.adopt(store, pipeline, &run.key, group.ttl).await {
                    Ok(Some(true)) => any = true,
                    Ok(Some(false)) => self.not_held(&run.key, &run.version),
                    // held by someone else meanwhile: looked at again later
                    Ok(None) => {}
                    Err(e) => failed(e),
                }
            }
        }
        // nothing due: no slot is taken
        if !any {
            return Some(());
        }
        filter.versions = pipeline.versions().map(str::to_owned).collect();
        loop {
            let mut permits = self.free_slots(stop, 1).await?;
            let room = permits.num_permits().min(MAX_LIST_LIMIT);
            let renew = |slot: &crate::store::Lease| pipeline.renew_slot(store, slot);
            let mut taken = match queue.take(store, room, (group.ttl, &renew)).await {
                Ok(taken) if taken.is_empty() => return Some(()),
                Ok(taken) => taken,
                Err(e) => {
                    failed(e);
                    return Some(());
                }
            };
            let asked = taken.len();
            let claimed = match store
                .claim_due(&filter.clone().limit(asked), group.ttl)
                .await
            {
                Ok(claimed) => claimed,
                Err(e) => {
                    failed(e);
                    Vec::new()
                }
            };
            let full = claimed.len() >= asked;
            for claim in claimed {
                let (Some(permit), Some(slots)) = (permits.split(1), taken.pop()) else {
                    break;
                };
                let run = claim.run;
                let Some(held) = self.pipeline_for(&run.pipeline, &run.version).cloned() else {
                    let _ = store.release_lease(claim.lease).await;
                    slots.give_back().await;
                    continue;
                };
                lock(&self.inner.in_flight).insert(run.key.clone());
                let worker = self.clone();
                tasks.spawn(async move {
                    let mut slots = slots;
                    let outcome = worker
                        .wake(&held, &run, (claim.lease, now), Some(&mut slots))
                        .await;
                    slots.give_back().await;
                    worker.inner.freed.notify_one();
                    lock(&worker.inner.in_flight).remove(&run.key);
                    drop(permit);
                    outcome
                });
            }
            for slots in taken {
                slots.give_back().await;
            }
            if !full || *stop.borrow() {
                return Some(());
            }
        }
    }

    /// One slot of `pipeline`'s queue for a run a sweep recovers: `None`
    /// inside `Some` when the queue is full (the run is left for later),
    /// `None` for a pipeline without a queue.
    pub(super) async fn queue_slot(&self, pipeline: &Pipeline) -> Result<Option<Option<Slots>>> {
        let (Some(queue), Some(store)) = (pipeline.queue_arc(), pipeline.store()) else {
            return Ok(Some(None));
        };
        let renew = |slot: &crate::store::Lease| pipeline.renew_slot(store, slot);
        let mut taken = queue.take(store, 1, (pipeline.lease_ttl(), &renew)).await?;
        Ok(taken.pop().map(Some))
    }

    /// Takes over the due run `key` of another version of `pipeline` when
    /// it is queued and has not started (holding its lease meanwhile):
    /// `false` when it started, `None` when someone else holds it.
    async fn adopt(
        &self,
        store: &Arc<dyn crate::store::CheckpointStore>,
        pipeline: &Pipeline,
        key: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<bool>> {
        let lease = match store.acquire_lease(key, ttl).await {
            Ok(lease) => lease,
            Err(Error::RunIdInUse { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let adopted = pipeline.adopt_queued(store, &lease, key).await;
        store.release_lease(lease).await?;
        adopted.map(Some)
    }
}

/// How many due runs of a queue's pipeline a worker looks at, per poll, for
/// queued runs of other versions to take over.
const ADOPT_LOOKS: usize = 64;
