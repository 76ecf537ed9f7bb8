//! The handle of a spawned worker, and the stores' wake-ups it waits on.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::Outcome;
use crate::error::{Error, Result};
use crate::store::RunEventKind;

/// The merged wake-ups of a worker's stores.
pub(super) struct Wakeups(
    pub(super)  Option<
        futures::stream::SelectAll<
            std::pin::Pin<Box<dyn futures::Stream<Item = crate::store::RunEvent> + Send>>,
        >,
    >,
);

impl Wakeups {
    /// Resolves at the next event that may make a run due; never when the
    /// stores tell none (or stopped telling).
    pub(super) async fn next_due(&mut self) {
        let Some(events) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            match futures::StreamExt::next(events).await {
                Some(event) if event.kind == RunEventKind::Due => return,
                Some(_) => {}
                None => {
                    self.0 = None;
                    return std::future::pending().await;
                }
            }
        }
    }
}

/// A spawned [`RecoveryWorker`](super::RecoveryWorker): [`shutdown`](Self::shutdown) stops it.
#[derive(Debug)]
pub struct WorkerHandle {
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: tokio::task::JoinHandle<JoinSet<Outcome>>,
}

impl WorkerHandle {
    /// Stops the worker: it takes no more runs, waits at most `grace` for
    /// the runs it is recovering, then drops the rest (a later resume
    /// repeats the stage each was in). Every run it resumed gives its lease
    /// back: at once when it ended, from a background task when it was
    /// dropped (call [`Pipeline::shutdown`](crate::Pipeline::shutdown) to wait for those before the
    /// process exits, or they lapse after their time-to-live).
    ///
    /// # Errors
    /// [`Error::Internal`] if the worker's task panicked.
    pub async fn shutdown(self, grace: Duration) -> Result<()> {
        let _ = self.stop.send(true);
        let mut tasks = self.task.await.map_err(|e| Error::Internal {
            message: format!("the recovery worker's task failed: {e}"),
        })?;
        let drained =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(
                runs = tasks.len(),
                "recovery worker shutdown: dropping the runs still in flight"
            );
            tasks.shutdown().await;
        }
        Ok(())
    }
}
