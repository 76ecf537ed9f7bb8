//! The calls of runs that wait (contract rules 25-28) on a server store:
//! each one statement or one transaction of `fluxio-sql`'s
//! [`Journal`](crate::Journal) (`waits.rs`), with the store's timeout and
//! retries.

use std::sync::atomic::Ordering;

use fluxio_core::store::{
    Decision, Delivery, DueFilter, DueRun, Lease, RunEvents, Signal, Take, check_run_id,
};
use fluxio_core::{Error, Result};
use sqlx::{ColumnIndex, Connection as _, Database, Decode, Encode, Executor, IntoArguments, Type};
use tokio::sync::broadcast::{self, WeakSender};

use super::{Failure, Retry, Server, ServerStore};
use crate::Journal;

/// How many wake-ups a watcher may fall behind before it is told to look
/// at everything.
const EVENTS: usize = 1024;

impl<S, DB> ServerStore<S>
where
    S: Server<Db = DB>,
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> Option<S::Time>: Encode<'q, DB>,
    for<'q> S::Time: Encode<'q, DB>,
    str: Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB>,
    [u8]: Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Encode<'r, DB> + Decode<'r, DB> + Type<DB>,
    for<'r> Vec<u8>: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// One transaction: [`Journal::send_signal`] (the run's row locked as
    /// its fenced writes lock it). A payload longer than one statement of
    /// the server carries (MySQL's `max_allowed_packet`) is refused before
    /// anything is sent. Sent again after a connection failure: a signal
    /// stored by the first attempt is then a duplicate.
    ///
    /// # Errors
    /// A bad run id; `ValueTooLarge` naming `signal payload`; the
    /// refusals of [`deliver`](fluxio_core::store::deliver); the driver's.
    pub async fn send_signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        check_run_id(key)?;
        self.check_payload(&signal)?;
        let signal = &signal;
        self.call("send_signal", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let sql = &self.sql;
            let sent =
                Journal::<S>::send_signal(&mut tx, &sql.journal, &sql.load, key, signal).await?;
            tx.commit().await?;
            Ok(sent)
        })
        .await
    }

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

    /// One transaction: [`Journal::take_signal`], fenced by `lease` as a
    /// fenced save is. Sent again after a connection failure: a wait is
    /// decided once, and the repeat finds the same decision.
    ///
    /// # Errors
    /// `Cancelled`, `LeaseLost`, `CheckpointNotFound`; the driver's.
    pub async fn take_signal(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        check_run_id(key)?;
        self.call("take_signal", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let (journal, run) = (&self.sql.journal, &self.sql.run);
            let decided =
                Journal::<S>::take_signal(&mut tx, journal, run, (key, take), lease).await?;
            tx.commit().await?;
            Ok(decided)
        })
        .await
    }

    /// One statement: the run's mailbox, in the order it came.
    ///
    /// # Errors
    /// A bad run id; the driver's; a corrupt entry.
    pub async fn signals(&self, key: &str) -> Result<Vec<Signal>> {
        check_run_id(key)?;
        self.call("signals", Retry::Once, |mut conn| async move {
            Journal::<S>::signals(&mut conn, &self.sql.journal, key).await
        })
        .await
    }

    /// One statement over the run rows and the leases
    /// ([`due_runs`](crate::due_runs)), one range of the due index.
    ///
    /// # Errors
    /// A limit out of range; the driver's.
    pub async fn due_runs(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        self.call("due_runs", Retry::Once, |mut conn| async move {
            crate::due_runs::<S, DB>(&mut conn, &self.sql.journal.waits, filter).await
        })
        .await
    }

    /// One statement: the server's clock, in milliseconds since the Unix
    /// epoch (rule 28: every worker on the database reads the same one).
    ///
    /// # Errors
    /// The driver's; a clock before 1970.
    pub async fn clock_ms(&self) -> Result<Option<u64>> {
        let ms = self
            .call("clock_ms", Retry::Once, |mut conn| async move {
                let ms: i64 = sqlx::query_scalar(&self.sql.journal.waits.clock)
                    .fetch_one(&mut *conn)
                    .await?;
                Ok::<_, Failure>(ms)
            })
            .await?;
        u64::try_from(ms)
            .map(Some)
            .map_err(|e| Error::store(S::BACKEND, e))
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
