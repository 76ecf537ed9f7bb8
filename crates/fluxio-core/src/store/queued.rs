//! A run's place in a queue (contract rule 31), which every checkpoint of
//! an enqueued run carries: [`QueueEntry`].

use serde::{Deserialize, Serialize};

/// Where an enqueued run belongs (contract rule 31): its queue, its key
/// within the queue, and its priority. Written by
/// [`Pipeline::enqueue`](crate::Pipeline::enqueue) and carried by every
/// checkpoint of the run after, so a worker that continues the run after a
/// sleep, a wait or a crash takes its slots again. Written in checkpoint
/// format 7 (a run without one is written as before, which earlier builds
/// read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueEntry {
    /// The queue's name ([`Queue::new`](crate::queue::Queue::new)).
    pub queue: String,
    /// The key whose own concurrency limit the run counts against
    /// ([`Enqueue::key`](crate::queue::Enqueue::key)); `None`: only the
    /// queue's limits.
    pub key: Option<String>,
    /// Higher starts first among the runs queued at once
    /// ([`Enqueue::priority`](crate::queue::Enqueue::priority)).
    pub priority: u8,
    /// The run has not started yet: it is queued, before its first stage.
    /// `false` from the first checkpoint a worker writes for it.
    pub queued: bool,
}

impl QueueEntry {
    /// A queued run of `queue` under `key`, at `priority`.
    #[must_use]
    pub fn new(queue: impl Into<String>, key: Option<String>, priority: u8) -> Self {
        QueueEntry {
            queue: queue.into(),
            key,
            priority,
            queued: true,
        }
    }

    /// The same entry, of a run that started.
    #[must_use]
    pub fn started(mut self) -> Self {
        self.queued = false;
        self
    }
}
