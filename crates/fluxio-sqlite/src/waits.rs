//! Runs that wait (contract rules 25-28) in the SQLite store: the mailbox
//! written and decided by `fluxio-sql`'s [`Journal`] in writes of the
//! group commit, the due runs and the mailbox read on a reading
//! connection, SQLite's clock, and the store's wake-ups, told in process.

use std::time::Duration;

use fluxio_core::store::{
    Claimed, Decision, Delivery, DueFilter, DueRun, Lease, RunEvent, RunEventKind, RunEvents,
    RunStatus, Signal, Take, check_run_id,
};
use fluxio_core::{Error, Result};

use crate::connection::Failure;
use crate::error::BACKEND;
use crate::journal::Journal;
use crate::store::SqliteStore;

/// How many wake-ups a watcher may fall behind before it is told to look
/// at everything.
const EVENTS: usize = 1024;

impl SqliteStore {
    /// [`send_signal`](fluxio_core::store::CheckpointStore::send_signal):
    /// one write of a group commit, under the file's write lock, so the
    /// senders, the waits deciding and the fenced writes of a run take
    /// turns. Tells the watchers when the run is due now.
    pub(crate) async fn signal(&self, key: &str, signal: Signal) -> Result<Delivery> {
        check_run_id(key)?;
        let (run, told) = (key.to_owned(), key.to_owned());
        let sent = self
            .write("send_signal", false, move |conn, inner| {
                Box::pin(async move {
                    let sql = &inner.sql;
                    Journal::send_signal(conn, &sql.journal, &sql.load, &run, &signal).await
                })
            })
            .await?;
        if sent == Delivery::Delivered {
            // the run is due only when it waits for the name: a watcher
            // that looks finds out
            self.tell(&told, RunEventKind::Due);
        }
        Ok(sent)
    }

    /// [`take_signal`](fluxio_core::store::CheckpointStore::take_signal):
    /// one write of a group commit, refused (`Cancelled`, `LeaseLost`,
    /// `CheckpointNotFound`) before it writes anything.
    pub(crate) async fn take(&self, key: &str, take: &Take, lease: &Lease) -> Result<Decision> {
        check_run_id(key)?;
        let (key, take) = (key.to_owned(), take.clone());
        let lease = Lease::new(lease.run_id(), lease.token());
        self.write("take_signal", false, move |conn, inner| {
            Box::pin(async move {
                let (journal, run) = (&inner.sql.journal, &inner.sql.run);
                Journal::take_signal(conn, journal, run, (&key, &take), &lease).await
            })
        })
        .await
    }

    /// [`set_due`](fluxio_core::store::CheckpointStore::set_due): one
    /// write of a group commit, refused (`Cancelled`, `LeaseLost`,
    /// `CheckpointNotFound`) before it writes anything.
    pub(crate) async fn schedule(&self, lease: &Lease, due_ms: Option<u64>) -> Result<()> {
        check_run_id(lease.run_id())?;
        let lease = Lease::new(lease.run_id(), lease.token());
        self.write("set_due", false, move |conn, inner| {
            Box::pin(async move {
                let sql = (&inner.sql.journal, &inner.sql.run);
                Journal::set_due(conn, sql, &lease, due_ms).await
            })
        })
        .await
    }

    /// The run's mailbox, on a reading connection.
    pub(crate) async fn mailbox(&self, key: &str) -> Result<Vec<Signal>> {
        check_run_id(key)?;
        let inner = &self.inner;
        self.timed("signals", async {
            let mut conn = inner.reader.acquire().await?;
            Journal::signals(&mut conn, &inner.sql.journal, key).await
        })
        .await
    }

    /// The due runs, on a reading connection (one snapshot of the rows and
    /// the leases).
    pub(crate) async fn due(&self, filter: &DueFilter) -> Result<Vec<DueRun>> {
        let inner = &self.inner;
        self.timed("due_runs", async {
            let mut conn = inner.reader.acquire().await?;
            Journal::due_runs(&mut conn, &inner.sql.journal.waits, filter).await
        })
        .await
    }

    /// [`claim_due`](fluxio_core::store::CheckpointStore::claim_due): one
    /// write of a group commit (in a savepoint of its own), under the
    /// file's write lock: the due rows read and each one's lease taken, so
    /// claims of every process take turns and never take one run twice.
    pub(crate) async fn claim(&self, filter: &DueFilter, ttl: Duration) -> Result<Vec<Claimed>> {
        fluxio_core::store::check_lease_ttl(ttl)?;
        let filter = filter.clone();
        self.write("claim_due", true, move |conn, inner| {
            Box::pin(async move {
                let sql = (&inner.sql.journal.waits, &inner.sql.run);
                Journal::claim_due(conn, sql, &filter, ttl).await
            })
        })
        .await
    }

    /// SQLite's clock, the one its leases are judged by.
    pub(crate) async fn clock(&self) -> Result<u64> {
        let inner = &self.inner;
        let ms: i64 = self
            .timed("clock_ms", async {
                Ok::<_, Failure>(
                    sqlx::query_scalar(&inner.sql.journal.waits.clock)
                        .fetch_one(&inner.reader)
                        .await?,
                )
            })
            .await?;
        u64::try_from(ms).map_err(|e| Error::store(BACKEND, e))
    }

    /// A new subscription to the store's wake-ups.
    pub(crate) fn subscribe(&self) -> RunEvents {
        let events = self
            .inner
            .events
            .get_or_init(|| tokio::sync::broadcast::channel(EVENTS).0);
        fluxio_core::store::RunEvents::broadcast(events.subscribe())
    }

    /// Tells the watchers, if any, that `kind` happened to run `key`.
    pub(crate) fn tell(&self, key: &str, kind: RunEventKind) {
        if let Some(events) = self.inner.events.get() {
            // no receiver: nobody to tell
            let _ = events.send(RunEvent::new(key, kind));
        }
    }

    /// Tells the watchers what run `key`, now stored as `status`, became:
    /// due (it parked) or ended.
    pub(crate) fn tell_status(&self, key: &str, status: RunStatus) {
        if let Some(kind) = fluxio_sql::event_of(status) {
            self.tell(key, kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use fluxio_core::store::DueFilter;

    use super::*;
    use crate::journal::Sqlite;
    use crate::store::tests::plan_of;

    /// Rule 27: the due runs, of every pipeline or of some, and both reads
    /// of a claim, read one range of the `(due_at, run_id)` index of schema
    /// version 5 in its order (no sort), and each candidate's lease by its
    /// key.
    #[tokio::test]
    async fn rule27_due_runs_read_one_range_of_the_due_index() {
        let dir = fluxio_test_support::TempDir::new("due_plan");
        let store = SqliteStore::connect(dir.db("plan")).await.expect("open");
        let waits = &store.inner.sql.journal.waits;
        for filter in [
            DueFilter::new(5),
            DueFilter::new(5).pipeline("a").pipeline("b"),
        ] {
            let due = fluxio_sql::due_statement::<Sqlite>(waits, &filter).expect("statement");
            // and both reads of a claim: runs with a lease row, and without
            let claims = [true, false].map(|leased| {
                fluxio_sql::claim_statement::<Sqlite>(waits, &filter, leased).expect("statement")
            });
            for statement in std::iter::once(due).chain(claims) {
                let plan = plan_of(&store, statement).await;
                let plan: Vec<&str> = plan.iter().map(String::as_str).collect();
                assert_eq!(
                    plan[0], "SEARCH c USING INDEX fluxio_checkpoints_due (due_at<?)",
                    "{filter:?}: {plan:?}"
                );
                // by the index, or by the index alone (a covering one)
                let lease = "INDEX sqlite_autoindex_fluxio_checkpoints_leases_1 (run_id=?)";
                assert!(
                    plan.iter()
                        .any(|d| d.starts_with("SEARCH l USING") && d.ends_with(lease)),
                    "{filter:?}: {plan:?}"
                );
                assert!(
                    !plan
                        .iter()
                        .any(|d| d.contains("TEMP B-TREE") || d.starts_with("SCAN")),
                    "{filter:?}: no sort, no scan: {plan:?}"
                );
            }
        }
    }
}
