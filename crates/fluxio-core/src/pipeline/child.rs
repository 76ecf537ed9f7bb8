//! A pipeline as the child of another's child step (contract rule 29):
//! what the parent's interpreter asks of it, and the cancel that reaches a
//! parent's open child.

use super::Pipeline;
use crate::child::ChildRuns;
use crate::context::Snapshot;
use crate::error::{Error, Result};
use crate::interpret::tail::Tail;
use crate::store::{
    Begin, Checkpoint, CheckpointStore, MAX_LIST_LIMIT, Mark, Pending, RunFilter, RunSummary,
    open_child, successor,
};

#[async_trait::async_trait]
impl ChildRuns for Pipeline {
    async fn submit(
        &self,
        run_id: &str,
        input: Snapshot,
        deadline_ms: Option<u64>,
    ) -> Result<(String, Checkpoint)> {
        let key = self.key(run_id)?;
        let store = self.require_store("start a child run")?;
        if let Some(cp) = store.load(&key).await? {
            return Ok((key.to_string(), cp));
        }
        let mut tail = Tail::fresh(self.inner.settings.history_depth);
        let meta = [
            self.inner.name.as_str(),
            run_id,
            self.inner.version.as_str(),
        ];
        let first = crate::interpret::first_checkpoint(
            (&self.inner.program, 0),
            meta,
            &self.inner.structure,
            (crate::store::now_ms(), deadline_ms),
            &input,
            &mut tail,
        )
        .ok_or_else(|| Error::Internal {
            message: format!("child pipeline `{}` has no stage", self.inner.name),
        })?;
        let ttl = self.inner.settings.lease_ttl;
        let begun = store.begin_run(first.clone(), ttl, Begin::IfAbsent).await?;
        if !begun.started {
            // a concurrent submit stored it first: attach to it
            store.release_lease(begun.lease).await?;
            let cp = store
                .load(&key)
                .await?
                .ok_or_else(|| Error::CheckpointNotFound {
                    run_id: key.to_string(),
                })?;
            return Ok((key.to_string(), cp));
        }
        // due at once, at its first stage, for whichever worker asks first
        let now = self.inner.clock.now_ms(Some(store.as_ref())).await?;
        let mut due = successor(first).parked(Pending::sleep(now));
        due.updated_at_ms = crate::store::now_ms();
        store.finish_run(due.clone(), begun.lease, false).await?;
        tracing::info!(run = %key, "stored a child run, due at once");
        Ok((key.to_string(), due))
    }

    async fn latest(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        let key = self.key(run_id)?;
        self.require_store("look at a child run")?.load(&key).await
    }

    async fn retry(&self, run_id: &str) -> Result<()> {
        let key = self.key(run_id)?;
        let store = self.require_store("retry a child run")?;
        let now = self.inner.clock.now_ms(Some(store.as_ref())).await?;
        match crate::store::requeue_run(store.as_ref(), &key, now).await {
            // held by a worker, or ended meanwhile: the parent looks again
            Ok(_) | Err(Error::RunIdInUse { .. } | Error::RunFinished { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn cancel_key(&self, key: &str) -> Result<()> {
        let store = self.require_store("cancel a child run")?;
        self.cancel_stored(store, key, Mark::CancelWithParent).await
    }

    async fn listed(&self, id_prefix: &str) -> Result<Option<Vec<RunSummary>>> {
        let store = self.require_store("list child runs")?;
        listed(store.as_ref(), &self.inner.name, id_prefix).await
    }
}

/// Every run of `pipeline` in `store` whose id starts with `id_prefix`,
/// all pages; `None` when the store does not list runs.
async fn listed(
    store: &dyn CheckpointStore,
    pipeline: &str,
    id_prefix: &str,
) -> Result<Option<Vec<RunSummary>>> {
    let mut filter = RunFilter::new()
        .pipeline(pipeline)
        .id_prefix(id_prefix)
        .limit(MAX_LIST_LIMIT);
    let mut runs = Vec::new();
    loop {
        let page = match store.list_runs(&filter).await {
            Ok(page) => page,
            Err(Error::Unsupported { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        runs.extend(page.runs);
        match page.next {
            Some(next) => filter = filter.after(next),
            None => return Ok(Some(runs)),
        }
    }
}

impl Pipeline {
    /// Cancels the run stored under `key` in `store`, then the child run it
    /// waits for (rule 29), through the child's pipeline when this one
    /// registered it (its store may be another), else in `store`.
    pub(super) async fn cancel_stored(
        &self,
        store: &std::sync::Arc<dyn crate::store::CheckpointStore>,
        key: &str,
        mark: Mark,
    ) -> Result<()> {
        if let Some(pattern) = key.strip_suffix('*') {
            // a fan-out's children: every run of the pattern's pipeline
            // whose id starts with it
            let (pipeline, prefix) = pattern.split_once('/').unwrap_or(("", pattern));
            for run in listed(store.as_ref(), pipeline, prefix)
                .await?
                .unwrap_or_default()
            {
                match Box::pin(self.cancel_stored(store, &run.key, mark)).await {
                    Ok(()) | Err(Error::RunFinished { .. } | Error::CheckpointNotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(());
        }
        let child = store.load(key).await?.as_ref().and_then(open_child);
        match mark {
            // `cancel`, as ever: a store that overrides only it still works
            Mark::Cancel => store.cancel(key).await?,
            mark => store.mark(key, mark).await?,
        }
        if let Some(child) = child {
            self.cancel_child(&child).await;
        }
        Ok(())
    }

    /// Cancels the open child run stored under `child` (and its own),
    /// logging what could not be cancelled.
    pub(crate) async fn cancel_child(&self, child: &str) {
        let pipeline = child.split_once('/').map_or("", |(p, _)| p);
        let program = &self.inner.program;
        let cancelled = match program
            .children
            .iter()
            .position(|c| c.pipeline() == pipeline)
        {
            Some(i) if i < program.child_runs.len() => {
                Box::pin(program.child_runs[i].cancel_key(child)).await
            }
            _ => match &self.inner.store {
                Some(store) => {
                    crate::store::cancel_tree(store.as_ref(), child, Mark::CancelWithParent)
                        .await
                        .map(drop)
                }
                None => Ok(()),
            },
        };
        match cancelled {
            Ok(()) => tracing::info!(child, "cancelled with its parent"),
            Err(Error::RunFinished { .. } | Error::CheckpointNotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(child, error = %e, "could not cancel the child run of a cancelled run")
            }
        }
    }
}
