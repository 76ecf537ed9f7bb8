//! Runs that wait (contract rules 25-27): `signal`, `signal_value`, `wake` and `wait_for`.

use std::time::Duration;

use serde::Serialize;
use tracing::Instrument as _;

use super::Pipeline;
use super::resume::Resuming;
use crate::error::{Error, Result};
use crate::outcome::Outcome;
use crate::store::{Checkpoint, Delivery, Payload, RunEventKind, RunStatus, Signal};
use crate::value::Value;
use crate::waiting::Slot;

/// How long [`Pipeline::wait_for`] waits between two reads of the run
/// when its store tells no wake-ups (or one was missed): from 20 ms,
/// doubling to this.
const WAIT_FOR_POLL: Duration = Duration::from_millis(500);

impl Pipeline {
    /// Signals the wait `wait` of the run `run_id` with `payload` (contract
    /// rule 26), from this process or any other sharing the store: the
    /// signal is stored with the run, atomically with its writes. A run
    /// waiting for `wait` is due at once and continues on a worker (or on
    /// [`resume`](Self::resume)); a run that has not reached the wait yet
    /// takes the signal when it does.
    ///
    /// The payload is checked against the wait's type before it is stored.
    /// The same payload sent again is accepted once ([`Delivery::Duplicate`]).
    /// The run's history names the sender as `process <pid>`
    /// ([`signal_value`](Self::signal_value) takes a name).
    ///
    /// # Errors
    /// [`Error::UnknownWait`] when the pipeline (and the versions it holds)
    /// has no wait named `wait`; [`Error::SignalRefused`] when `payload` is
    /// not the wait's type (nothing is stored); [`Error::ValueTooLarge`] or
    /// [`Error::ValueTooDeep`] naming `signal payload` past
    /// [`MAX_SIGNAL_PAYLOAD`](crate::store::MAX_SIGNAL_PAYLOAD) or the
    /// depth limit; [`Error::CheckpointNotFound`] for no such run;
    /// [`Error::RunFinished`] for a completed or cancelled run;
    /// [`Error::SignalConflict`] when the wait was signalled before with
    /// another payload; [`Error::WaitClosed`] when it timed out, or another
    /// name of it was signalled first; the store's errors.
    pub async fn signal<T: Serialize + ?Sized>(
        &self,
        run_id: &str,
        wait: &str,
        payload: &T,
    ) -> Result<Delivery> {
        let payload = Payload::new(payload)?;
        let sender = format!("process {}", std::process::id());
        self.send(run_id, wait, payload, &sender).await
    }

    /// [`signal`](Self::signal) with a payload given without its type (what
    /// an operator's JSON reads as): checked against the wait's type all
    /// the same. `sender` says who sends it, for the run's history (any
    /// label; empty for none).
    ///
    /// # Errors
    /// As [`signal`](Self::signal).
    pub async fn signal_value(
        &self,
        run_id: &str,
        wait: &str,
        payload: &Value,
        sender: &str,
    ) -> Result<Delivery> {
        let payload = Payload::from_value(payload)?;
        self.send(run_id, wait, payload, sender).await
    }

    async fn send(
        &self,
        run_id: &str,
        wait: &str,
        payload: Payload,
        sender: &str,
    ) -> Result<Delivery> {
        let key = self.key(run_id)?;
        let store = self.require_store("signal")?;
        let slot = self.wait_slot(&key, wait)?;
        if let Some(reason) = slot.payload.refusal(&payload) {
            return Err(Error::SignalRefused {
                run_id: key.to_string(),
                wait: wait.to_owned(),
                reason,
            });
        }
        let signal = Signal::new(wait, payload, sender)?;
        let delivered = store.send_signal(&key, signal).await?;
        tracing::info!(run = %key, wait, ?delivered, "signal");
        Ok(delivered)
    }

    /// The slot of the wait named `wait` in this pipeline or a held version.
    fn wait_slot(&self, key: &str, wait: &str) -> Result<Slot> {
        let versions = std::iter::once(self).chain(self.inner.held.iter());
        let mut available: Vec<String> = Vec::new();
        for pipeline in versions {
            for w in &pipeline.inner.program.waits {
                if let Some(slot) = w.slot(wait) {
                    return Ok(slot.clone());
                }
                for name in w.names() {
                    if !available.iter().any(|a| a == name) {
                        available.push(name.to_owned());
                    }
                }
            }
        }
        Err(Error::UnknownWait {
            run_id: key.to_owned(),
            wait: wait.to_owned(),
            available,
        })
    }

    /// Wakes the sleeping or waiting run `run_id` now, and continues it
    /// here (an operator's "now", contract rules 25-26): a sleep ends at
    /// once; a wait takes its timeout outcome now, unless a signal came
    /// first. The run's checkpoint records the new wake time or deadline.
    ///
    /// # Errors
    /// [`Error::NotParked`] when the run is not sleeping or waiting, or
    /// waits without a deadline (only a signal wakes it); the errors of
    /// [`resume`](Self::resume).
    pub async fn wake(&self, run_id: &str) -> Result<Outcome> {
        let (key, store, span) = self.durable_run("wake", run_id, true)?;
        async {
            self.with_lease(store, &key, async |owner| {
                let Some(cp) = store.load(&key).await? else {
                    return Err(Error::CheckpointNotFound {
                        run_id: key.to_string(),
                    });
                };
                let now = self.inner.clock.now_ms(Some(store.as_ref())).await?;
                let woken = crate::store::woken(&key, cp.clone(), now)?;
                let mut cp = cp;
                cp.pending = woken.pending;
                self.resume_stored(Resuming::of(store, owner, run_id), cp)
                    .await
            })
            .await
        }
        .instrument(span)
        .await
    }

    /// Waits until the run `run_id` ends (completes, fails, is cancelled,
    /// or recovery gives up on it), from any process sharing the store,
    /// and returns its last checkpoint; `None` when `timeout` passes first
    /// (the run goes on). What a client that got
    /// [`Error::RunIdInUse`] from [`start`](Self::start) calls instead of
    /// polling. It listens to the store's wake-ups
    /// ([`CheckpointStore::watch`](crate::CheckpointStore::watch)) where it
    /// tells them, and reads the run again every half second at most
    /// otherwise.
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] when nothing is stored for `run_id`;
    /// the store's errors.
    pub async fn wait_for(&self, run_id: &str, timeout: Duration) -> Result<Option<Checkpoint>> {
        let key = self.key(run_id)?;
        let store = self.require_store("wait_for")?;
        let deadline = tokio::time::Instant::now().checked_add(timeout);
        // subscribed before the first read, so that an end between the two
        // is not missed
        let mut events = store.watch().await?;
        let mut poll = Duration::from_millis(20);
        loop {
            let Some(cp) = store.load(&key).await? else {
                return Err(Error::CheckpointNotFound {
                    run_id: key.to_string(),
                });
            };
            if matches!(
                cp.status,
                RunStatus::Completed
                    | RunStatus::Failed
                    | RunStatus::Cancelled
                    | RunStatus::NeedsAttention
            ) {
                return Ok(Some(cp));
            }
            let now = tokio::time::Instant::now();
            let until = deadline.map_or(now + poll, |d| d.min(now + poll));
            if deadline.is_some_and(|d| d <= now) {
                return Ok(None);
            }
            let ours = async {
                match events.as_mut() {
                    Some(events) => loop {
                        match events.next().await {
                            Some(e) if e.key.is_empty() || *e.key == *key => {
                                if e.kind == RunEventKind::Ended || e.key.is_empty() {
                                    return;
                                }
                            }
                            Some(_) => {}
                            None => std::future::pending::<()>().await,
                        }
                    },
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = ours => {}
                () = tokio::time::sleep_until(until) => {
                    poll = (poll * 2).min(WAIT_FOR_POLL);
                }
            }
        }
    }
}
