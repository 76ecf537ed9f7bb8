//! Checkpoint stores: where durable runs keep their state.
//!
//! A store implements exactly four required methods: [`save`](CheckpointStore::save),
//! [`load`](CheckpointStore::load), [`delete`](CheckpointStore::delete) and
//! [`exists`](CheckpointStore::exists). Run ownership (who may execute a run
//! id right now) is a set of *provided* methods with an in-process default, so
//! a four-method store works unchanged; a shared store (Redis, Postgres)
//! overrides them to make ownership hold across processes.
//!
//! # Implementing a custom store
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use fluxio_core::store::{Checkpoint, CheckpointStore};
//! use fluxio_core::Result;
//!
//! #[derive(Debug, Default)]
//! struct MyStore(Mutex<HashMap<String, Vec<u8>>>);
//!
//! #[async_trait::async_trait]
//! impl CheckpointStore for MyStore {
//!     async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
//!         let bytes = checkpoint.to_bytes()?;
//!         self.0.lock().unwrap().insert(checkpoint.run_id.clone(), bytes);
//!         Ok(())
//!     }
//!     async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
//!         let bytes = self.0.lock().unwrap().get(run_id).cloned();
//!         bytes.map(|b| Checkpoint::from_bytes(run_id, &b)).transpose()
//!     }
//!     async fn delete(&self, run_id: &str) -> Result<()> {
//!         self.0.lock().unwrap().remove(run_id);
//!         Ok(())
//!     }
//!     async fn exists(&self, run_id: &str) -> Result<bool> {
//!         Ok(self.0.lock().unwrap().contains_key(run_id))
//!     }
//! }
//! ```

mod checkpoint;
mod lease;
mod memory;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use checkpoint::now_ms;
pub use checkpoint::{Checkpoint, FORMAT_VERSION, MAGIC, MAX_PAYLOAD, RunStatus};
pub use lease::Lease;
pub use memory::InMemoryStore;

use crate::error::Result;

/// Where checkpoints live. Dyn-compatible: pipelines hold an
/// `Arc<dyn CheckpointStore>`.
///
/// Errors of the backend are returned as [`Error::Store`](crate::Error::Store)
/// (keeping the backend's error as the source); undecodable bytes as
/// [`Error::CorruptCheckpoint`](crate::Error::CorruptCheckpoint).
///
/// # Cancel safety
/// The interpreter may drop a call's future (when the caller drops the run).
/// Each required method must leave the store either before or after the
/// operation, never half-way: a single write or delete per call does that.
#[async_trait::async_trait]
pub trait CheckpointStore: Debug + Send + Sync + 'static {
    /// Stores `checkpoint` under `checkpoint.run_id`, replacing any previous
    /// one. Atomic: a concurrent `load` sees the old or the new checkpoint.
    async fn save(&self, checkpoint: Checkpoint) -> Result<()>;

    /// The checkpoint stored for `run_id`, or `None`.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>>;

    /// Removes the checkpoint of `run_id`. Deleting a missing id is not an error.
    async fn delete(&self, run_id: &str) -> Result<()>;

    /// Whether a checkpoint is stored for `run_id`.
    async fn exists(&self, run_id: &str) -> Result<bool>;

    /// Takes ownership of `run_id` for a run, for at most `ttl` unless renewed.
    ///
    /// The default is an in-process lock table keyed by this store's address
    /// and the run id: race-free between tasks and threads of one process,
    /// but not across processes. A store shared between processes overrides
    /// this (and the two methods below) with a lease kept in the store.
    ///
    /// # Errors
    /// [`Error::RunIdInUse`](crate::Error::RunIdInUse) when another run holds it.
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        let _ = ttl;
        lease::acquire_local(self as *const Self as *const () as usize, run_id)
    }

    /// Extends `lease` by `ttl`. The in-process default never expires, so it
    /// does nothing.
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        let _ = (lease, ttl);
        Ok(())
    }

    /// Gives `lease` up, so the run id can be taken at once.
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        drop(lease);
        Ok(())
    }
}

#[async_trait::async_trait]
impl<S: CheckpointStore + ?Sized> CheckpointStore for Arc<S> {
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        (**self).save(checkpoint).await
    }
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        (**self).load(run_id).await
    }
    async fn delete(&self, run_id: &str) -> Result<()> {
        (**self).delete(run_id).await
    }
    async fn exists(&self, run_id: &str) -> Result<bool> {
        (**self).exists(run_id).await
    }
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        (**self).acquire_lease(run_id, ttl).await
    }
    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        (**self).renew_lease(lease, ttl).await
    }
    async fn release_lease(&self, lease: Lease) -> Result<()> {
        (**self).release_lease(lease).await
    }
}
