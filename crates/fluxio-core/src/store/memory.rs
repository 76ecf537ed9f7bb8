//! The in-memory store.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{Checkpoint, CheckpointStore};
use crate::error::Result;

/// A process-local checkpoint store: the default.
///
/// Checkpoints are kept as values, not bytes: a save is O(1) whatever the
/// context's size, because the context snapshot shares structure with the
/// live context. Nothing survives the process; use it for tests and
/// single-process services.
///
/// The map sits behind a mutex that is never held across an `.await`, so
/// every method is atomic and cancel safe.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fluxio_core::Result<()> {
/// use fluxio_core::store::{CheckpointStore, InMemoryStore};
/// let store = InMemoryStore::new();
/// assert!(!store.exists("run-1").await?);
/// assert!(store.load("run-1").await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct InMemoryStore {
    map: Mutex<HashMap<String, Checkpoint>>,
}

impl InMemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of stored checkpoints.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no checkpoint is stored.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Checkpoint>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl CheckpointStore for InMemoryStore {
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        self.lock().insert(checkpoint.run_id.clone(), checkpoint);
        Ok(())
    }

    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        Ok(self.lock().get(run_id).cloned())
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        self.lock().remove(run_id);
        Ok(())
    }

    async fn exists(&self, run_id: &str) -> Result<bool> {
        Ok(self.lock().contains_key(run_id))
    }
}
