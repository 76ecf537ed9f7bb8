//! Run ownership.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::error::{Error, Result};

/// Ownership of a run id, held by the run that executes it.
///
/// `token` is a fencing token: it grows with every acquisition of the same
/// run id, so a store can refuse writes from an owner that lost its lease.
pub struct Lease {
    run_id: String,
    token: u64,
    _local: Option<LocalLease>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("run_id", &self.run_id)
            .field("token", &self.token)
            .finish()
    }
}

impl Lease {
    /// A lease on `run_id` with fencing `token`, for stores that keep leases
    /// themselves.
    #[must_use]
    pub fn new(run_id: impl Into<String>, token: u64) -> Self {
        Lease {
            run_id: run_id.into(),
            token,
            _local: None,
        }
    }

    /// The run id this lease owns.
    #[must_use]
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The fencing token.
    #[must_use]
    pub fn token(&self) -> u64 {
        self.token
    }
}

type Key = (usize, String);

fn table() -> &'static Mutex<HashSet<Key>> {
    static TABLE: OnceLock<Mutex<HashSet<Key>>> = OnceLock::new();
    TABLE.get_or_init(Mutex::default)
}

/// Removes its entry from the in-process table when dropped, so a run whose
/// future is dropped mid-way (cancelled) frees its run id.
struct LocalLease(Key);

impl Drop for LocalLease {
    fn drop(&mut self) {
        table()
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.0);
    }
}

pub(crate) fn acquire_local(store: usize, run_id: &str) -> Result<Lease> {
    static TOKENS: AtomicU64 = AtomicU64::new(1);
    let key = (store, run_id.to_owned());
    let inserted = table()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key.clone());
    if !inserted {
        return Err(Error::RunIdInUse {
            run_id: run_id.to_owned(),
        });
    }
    Ok(Lease {
        run_id: run_id.to_owned(),
        token: TOKENS.fetch_add(1, Ordering::Relaxed),
        _local: Some(LocalLease(key)),
    })
}
