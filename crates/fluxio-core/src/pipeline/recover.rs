//! Recovery's claim of a run (rule 22) and a worker's wake-up of a due
//! one (rule 27): the run's lease taken (or adopted from a claim), its
//! latest checkpoint decided on while nobody can change it, and resumed.

use std::sync::Arc;

use tracing::Instrument as _;

use super::Pipeline;
use super::resume::Resuming;
use crate::error::Result;
use crate::interpret::ownership::Ownership;
use crate::outcome::Outcome;
use crate::queue::Slots;
use crate::store::{Checkpoint, CheckpointStore};

/// What a recovery worker does with a run it claimed: [`Pipeline::recover`].
pub(crate) enum Claim {
    Resume,
    /// Give up on it: mark it needs-attention, or pause it (rule 30).
    GiveUp {
        pause: bool,
    },
    Leave,
    /// Leave it, due for recovery at this time on the pipeline's clock
    /// (`None`: not due): [`CheckpointStore::set_due`].
    Defer(Option<u64>),
}

/// What became of a claimed run.
pub(crate) enum Recovered {
    /// It was resumed; how the resume ended.
    Resumed(Result<Outcome>),
    /// It was marked as needing attention, or paused: its new latest
    /// checkpoint.
    GaveUp(Box<Checkpoint>),
    /// It was left as it was.
    Left,
    /// It was left, due for recovery at this time in the store's
    /// due-index.
    Deferred(u64),
}

impl Pipeline {
    /// Recovery (rule 22): takes the lease of this pipeline's run `run_id`
    /// and, holding it, asks `decide` what to do with the run's latest
    /// checkpoint, which nobody can change meanwhile: resume it, give up on
    /// it (it is marked [`RunStatus::NeedsAttention`]), or leave it (it was
    /// finished, or retried, by someone else since it was listed). When a
    /// resume leaves the run failed, `retry` (if any: `None` when failed
    /// runs are not retried) says, from its failed checkpoint and the
    /// pipeline's clock, when it is due again: that time goes into the
    /// store's due-index under the run's lease, taken again
    /// ([`CheckpointStore::set_due`]).
    pub(crate) async fn recover(
        &self,
        (run_id, slots): (&str, Option<&mut Slots>),
        decide: impl FnOnce(&Checkpoint) -> Claim,
        retry: Option<impl FnOnce(&Checkpoint, u64) -> Option<u64>>,
    ) -> Result<Recovered> {
        let (key, store, span) = self.durable_run("recover", run_id, true)?;
        async {
            let owner = self.take_lease(store, &key).await?;
            self.recover_owned(store, owner, (run_id, None, slots), (decide, retry))
                .await
        }
        .instrument(span)
        .await
    }

    /// [`recover`](Self::recover) of a run whose lease `lease` the caller
    /// claimed already ([`CheckpointStore::claim_due`]) as due at `now` on
    /// the run's clock (which a woken sleep or wait then reads instead of
    /// the clock); the lease is given back when recovery ends, or at once
    /// when the pipeline is shut down.
    pub(crate) async fn recover_claimed(
        &self,
        (run_id, lease, now): (&str, crate::store::Lease, u64),
        slots: Option<&mut Slots>,
        decide: impl FnOnce(&Checkpoint) -> Claim,
        retry: Option<impl FnOnce(&Checkpoint, u64) -> Option<u64>>,
    ) -> Result<Recovered> {
        let (_, store, span) = self.durable_run("recover", run_id, true)?;
        async {
            let owner = self.adopt_lease(store, lease).await?;
            self.recover_owned(store, owner, (run_id, Some(now), slots), (decide, retry))
                .await
        }
        .instrument(span)
        .await
    }

    /// Recovery's body, holding the run's lease as `owner`: the latest
    /// checkpoint loaded and `decide`d. A run woken at `woken_at` reads
    /// that time at its sleep or wait only if it is parked (a run claimed
    /// for recovery reaches its next sleep later). A run of the pipeline's
    /// queue resumes only once `slots` admits it (rule 31): else it is due
    /// again a little later.
    async fn recover_owned(
        &self,
        store: &Arc<dyn CheckpointStore>,
        owner: Ownership,
        (run_id, woken_at, slots): (&str, Option<u64>, Option<&mut Slots>),
        (decide, retry): (
            impl FnOnce(&Checkpoint) -> Claim,
            Option<impl FnOnce(&Checkpoint, u64) -> Option<u64>>,
        ),
    ) -> Result<Recovered> {
        let key = owner.lease().run_id().to_owned();
        let result = async {
            let Some(cp) = store.load(&key).await? else {
                return Ok(Recovered::Left);
            };
            let woken_at = woken_at.filter(|_| cp.status.is_pending());
            match decide(&cp) {
                Claim::Leave => Ok(Recovered::Left),
                Claim::Defer(due) => {
                    store.set_due(owner.lease(), due).await?;
                    Ok(due.map_or(Recovered::Left, Recovered::Deferred))
                }
                // rule 35: recovery giving up on a run whose stages have
                // compensators is a final failure: it undoes what it did
                Claim::GiveUp { pause: false }
                    if !self.inner.program.compensators.is_empty() && cp.compensation.is_none() =>
                {
                    let reason = format!(
                        "recovery gave up on it after {} attempts at step `{}`",
                        cp.attempt, cp.step
                    );
                    let runner = self.version_for(
                        &key,
                        &cp,
                        super::resume::Continue::Resume,
                        Default::default(),
                    )?;
                    // boxed: this future is part of every recovered run's
                    let undo = runner.compensate_stored(store, &owner, run_id, cp, Some(reason));
                    match Box::pin(undo).await {
                        Ok(_) | Err(crate::Error::CompensationFailed { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    let last = store.load(&key).await?.ok_or_else(|| {
                        crate::Error::CheckpointNotFound {
                            run_id: key.clone(),
                        }
                    })?;
                    Ok(Recovered::GaveUp(Box::new(last)))
                }
                Claim::GiveUp { pause } => {
                    let marked = if pause {
                        let paused = crate::store::successor(cp).paused();
                        store.save_fenced(paused.clone(), owner.lease()).await?;
                        paused
                    } else {
                        crate::store::mark_needs_attention(store.as_ref(), cp, owner.lease())
                            .await?
                    };
                    Ok(Recovered::GaveUp(Box::new(marked)))
                }
                Claim::Resume => {
                    if let Some(slots) = slots {
                        let renew = |slot: &crate::store::Lease| self.renew_slot(store, slot);
                        if !slots.admit(cp.queue.as_deref(), &renew).await? {
                            let due = self.retry_queued(store, owner.lease(), cp).await?;
                            return Ok(Recovered::Deferred(due));
                        }
                        slots.start();
                    }
                    let r = Resuming {
                        woken_at,
                        ..Resuming::of(store, &owner, run_id)
                    };
                    let result = self.resume_stored(r, cp).await;
                    Ok(Recovered::Resumed(result))
                }
            }
        }
        .await;
        owner.release().await;
        if let (Ok(Recovered::Resumed(Err(_))), Some(retry)) = (&result, retry) {
            self.retry_later(store, &key, retry).await;
        }
        result
    }

    /// After a resume of run `key` that failed (its last write gave the
    /// lease back): holding the lease again, a run stored failed is due
    /// again when `retry` says (in the store's due-index), so that its next
    /// attempt does not wait for a worker to list it. Best effort: a run
    /// someone holds meanwhile, a store without a due-index, or one that
    /// fails, leaves the run to be listed.
    async fn retry_later(
        &self,
        store: &Arc<dyn CheckpointStore>,
        key: &str,
        retry: impl FnOnce(&Checkpoint, u64) -> Option<u64>,
    ) {
        let due = async {
            let lease = store.acquire_lease(key, self.lease_ttl()).await?;
            let set = async {
                let Some(cp) = store.load(key).await? else {
                    return Ok(None);
                };
                if cp.status != crate::store::RunStatus::Failed {
                    return Ok(None);
                }
                let now = self.clock().now_ms(Some(store.as_ref())).await?;
                match retry(&cp, now) {
                    Some(at) => store.set_due(&lease, Some(at)).await.map(|()| Some(at)),
                    None => Ok(None),
                }
            }
            .await;
            store.release_lease(lease).await?;
            set
        };
        match due.await {
            Ok(Some(at)) => tracing::debug!(run = %key, due_ms = at, "a failed run is due again"),
            Ok(None) | Err(crate::Error::Unsupported { .. } | crate::Error::RunIdInUse { .. }) => {}
            Err(e) => {
                tracing::warn!(run = %key, error = %e, "writing when a failed run is due failed");
            }
        }
    }

    /// The versions whose runs this pipeline continues: its own, then the
    /// ones it holds.
    pub(crate) fn versions(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.inner.version.as_str())
            .chain(self.inner.held.iter().map(|p| p.inner.version.as_str()))
    }
}
