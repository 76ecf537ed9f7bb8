//! The wake-ups of a server store (contract rule 27): the server's
//! listener ([`Server::watch`]), shared by the store's watchers; and the
//! check of a signal's payload against what one statement carries. The
//! calls of runs that wait are `server.rs`'s, each one statement or one
//! transaction of [`Journal`](crate::Journal)'s.

use std::sync::atomic::Ordering;

use fluxio_core::store::{RunEvents, Signal};
use fluxio_core::{Error, Result};
use tokio::sync::broadcast::{self, WeakSender};

use super::{Server, ServerStore};

/// How many wake-ups a watcher may fall behind before it is told to look
/// at everything.
const EVENTS: usize = 1024;

impl<S: Server> ServerStore<S> {
    /// Refuses `signal` when its payload is longer than one statement of
    /// the server carries (see [`limit_step`](Self::limit_step)).
    ///
    /// # Errors
    /// `ValueTooLarge` naming `signal payload`.
    pub(crate) fn check_payload(&self, signal: &Signal) -> Result<()> {
        let size = u64::try_from(signal.payload.bytes().len()).unwrap_or(u64::MAX);
        let limit = self.max_step.load(Ordering::Relaxed);
        if size > limit {
            return Err(Error::ValueTooLarge {
                key: "signal payload".to_owned(),
                size,
                limit,
            });
        }
        Ok(())
    }

    /// The server's wake-ups of the store's tables ([`Server::watch`]):
    /// one listener for every watcher of this store (a subscription costs
    /// no connection of its own), started by the first, within the store's
    /// timeout, and ended when its connection drops (its watchers' events
    /// end; the next watcher starts a new one) or when no watcher is left.
    ///
    /// # Errors
    /// The driver's, or the timeout, while the listener starts.
    pub async fn watch(&self) -> Result<Option<RunEvents>> {
        let mut shared = self.events.lock().await;
        if let Some(events) = shared.as_ref().and_then(WeakSender::upgrade) {
            return Ok(Some(fluxio_core::store::RunEvents::broadcast(
                events.subscribe(),
            )));
        }
        let listened = tokio::time::timeout(self.timeout, S::watch(&self.pool, &self.names));
        let mut listener = match listened.await {
            Ok(Ok(Some(listener))) => listener,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(e)) => return Err(self.sql_error(e)),
            Err(_elapsed) => return Err(self.timed_out("watch")),
        };
        let (events, first) = broadcast::channel(EVENTS);
        *shared = Some(events.downgrade());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    told = listener.next() => match told {
                        // no watcher left: nobody to tell
                        Some(event) => if events.send(event).is_err() { return },
                        None => return,
                    },
                    () = events.closed() => return,
                }
            }
        });
        Ok(Some(fluxio_core::store::RunEvents::broadcast(first)))
    }
}
