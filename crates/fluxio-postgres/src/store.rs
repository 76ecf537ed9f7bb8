//! [`PostgresStore`]: its tables, migrations and retention, and the trait
//! implementation, one statement or one transaction per method.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fluxio_core::store::{
    Begin, Begun, Checkpoint, CheckpointStore, Lease, RedactedUrl, RunFilter, RunPage,
    check_lease_ttl,
};
use fluxio_core::{Error, Result};
use sqlx::Connection as _;
use sqlx::postgres::PgPool;

use crate::builder::{PostgresStoreBuilder, Source};
use crate::connection::{Failure, Retry};
use crate::error::BACKEND;
use crate::journal::{self, Journal, Postgres, Retention, Step};
use crate::migrate;
use crate::names::{Names, Sql};

/// A [`CheckpointStore`] in PostgreSQL, on a sqlx [`PgPool`].
///
/// Cloning is cheap (one `Arc`) and the clones share the pool. See the
/// [crate documentation](crate) for the schema, the lease protocol, retention
/// and the guarantees.
#[derive(Clone)]
pub struct PostgresStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) names: Names,
    pub(crate) sql: Sql,
    pub(crate) timeout: Duration,
    pub(crate) completed_retention: Option<Duration>,
    pub(crate) keep_completed: Option<usize>,
    /// The URL with its password replaced by `***`; `None` for a given pool.
    pub(crate) url: Option<RedactedUrl>,
}

impl Inner {
    /// The URL as messages show it.
    pub(crate) fn shown_url(&self) -> &str {
        self.url.as_ref().map_or("<given pool>", |u| u.url.as_str())
    }
}

impl Inner {
    /// What the store keeps of its completed runs.
    pub(crate) fn retention(&self) -> Retention {
        Retention {
            expire_after: self.completed_retention,
            keep_completed: self.keep_completed,
        }
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("PostgresStore")
            .field("url", &inner.shown_url())
            .field("schema", &inner.names.schema)
            .field("table", &inner.names.table)
            .field("timeout", &inner.timeout)
            .field("completed_retention", &inner.completed_retention)
            .field("keep_completed", &inner.keep_completed)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://user:password@host:port/database`) with
    /// the default settings and applies the pending migrations.
    ///
    /// # Errors
    /// [`Error::Store`] when the URL is invalid, the server cannot be
    /// reached within the [timeout](PostgresStoreBuilder::timeout), or a
    /// migration fails.
    pub async fn connect(url: &str) -> Result<PostgresStore> {
        Self::builder(url).connect().await
    }

    /// A builder connecting to `url`.
    pub fn builder(url: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Url(url.into()))
    }

    /// A builder on an existing pool: the pool's own size and connect
    /// options are kept ([`max_connections`](PostgresStoreBuilder::max_connections)
    /// is ignored and no server-side `statement_timeout` is set; the
    /// client-side [timeout](PostgresStoreBuilder::timeout) still bounds
    /// every call). Finish it with [`connect`](PostgresStoreBuilder::connect)
    /// (which migrates) or [`connect_lazy`](PostgresStoreBuilder::connect_lazy).
    pub fn from_pool(pool: PgPool) -> PostgresStoreBuilder {
        PostgresStoreBuilder::new(Source::Pool(pool))
    }

    /// The pool this store runs on.
    #[must_use]
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The schema of the tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.inner.names.schema
    }

    /// The checkpoint table (the lease table is `<table>_leases`).
    #[must_use]
    pub fn table(&self) -> &str {
        &self.inner.names.table
    }

    /// Creates the schema if needed and applies the pending migrations.
    /// [`connect`](PostgresStoreBuilder::connect) does this already;
    /// stores made with [`connect_lazy`](PostgresStoreBuilder::connect_lazy)
    /// call it themselves. Idempotent and safe to run from many processes at
    /// once (they queue on an advisory lock per schema).
    ///
    /// # Errors
    /// [`Error::Store`] with the sqlx error, a
    /// [`PostgresStoreError::MigrationChanged`](crate::PostgresStoreError::MigrationChanged)
    /// or a timeout.
    pub async fn migrate(&self) -> Result<()> {
        let inner = &self.inner;
        // One transaction, which a retry repeats only if it did not commit, or
        // finds done.
        let applied = self
            .call("migrate", Retry::Once, |mut conn| async move {
                Ok::<_, Failure>(migrate::run(&mut conn, &inner.names).await?)
            })
            .await?;
        tracing::debug!(
            url = inner.shown_url(),
            schema = %inner.names.schema,
            table = %inner.names.table,
            applied,
            "checkpoint tables are up to date"
        );
        Ok(())
    }

    /// Checks, writing and locking nothing, that the schema holds the
    /// store's tables at a schema version this build reads: what a
    /// [read-only](PostgresStoreBuilder::read_only) `connect` does instead
    /// of [`migrate`](Self::migrate).
    ///
    /// # Errors
    /// [`Error::Store`]: a
    /// [`PostgresStoreError::NoTables`](crate::PostgresStoreError::NoTables),
    /// [`SchemaOutdated`](crate::PostgresStoreError::SchemaOutdated) or
    /// [`MigrationChanged`](crate::PostgresStoreError::MigrationChanged),
    /// the sqlx error, or a timeout.
    pub(crate) async fn check_readable(&self) -> Result<()> {
        let inner = &self.inner;
        let applied = self
            .call("open", Retry::Once, |mut conn| async move {
                Ok::<_, Failure>(migrate::applied(&mut conn, &inner.names).await?)
            })
            .await?;
        let Some(applied) = applied else {
            return Err(crate::error::own_error(
                crate::PostgresStoreError::NoTables {
                    schema: inner.names.schema.clone(),
                    table: inner.names.table.clone(),
                },
            ));
        };
        migrate::readable(&inner.names, &applied).map_err(crate::error::own_error)
    }

    /// Deletes the checkpoints of completed runs whose retention has passed
    /// (see [`completed_retention`](PostgresStoreBuilder::completed_retention))
    /// and returns how many it deleted. It also deletes lease rows that are
    /// released or expired (not counted): fencing tokens come from a
    /// sequence, so a run id acquired again still gets a greater token.
    ///
    /// Expired checkpoints are already invisible to `load` and `exists`;
    /// purging only reclaims the space. Call it periodically (say hourly)
    /// from one worker; concurrent calls are harmless.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn purge_expired(&self) -> Result<u64> {
        let inner = &self.inner;
        // Never twice: a repeat would count only what the first one left.
        self.call("purge_expired", Retry::Never, |mut conn| async move {
            let done = sqlx::query(&inner.sql.purge).execute(&mut *conn).await?;
            Ok::<_, Failure>(done.rows_affected())
        })
        .await
    }
}

fn lease_lost(lease: &Lease) -> Error {
    Error::LeaseLost {
        run_id: lease.run_id().to_owned(),
        token: lease.token(),
    }
}

/// A time-to-live in seconds, as the database's intervals take it.
fn ttl_secs(ttl: Duration) -> f64 {
    ttl.as_secs_f64()
}

#[async_trait::async_trait]
impl CheckpointStore for PostgresStore {
    /// One transaction: the run's row, then its steps replaced by the
    /// checkpoint's journal ([`earlier`](Checkpoint::earlier), then itself).
    async fn save(&self, checkpoint: Checkpoint) -> Result<()> {
        let key = checkpoint.key();
        fluxio_core::store::check_run_id(&key)?;
        checkpoint.check()?;
        let steps = checkpoint
            .earlier
            .iter()
            .chain([&checkpoint])
            .map(Step::of)
            .collect::<Result<Vec<_>>>()?;
        let (inner, key, checkpoint, steps) = (&self.inner, &key, &checkpoint, &steps);
        self.call("save", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let retention = inner.retention();
            Journal::replace(
                &mut tx,
                &inner.sql.journal,
                key,
                checkpoint,
                steps,
                retention,
            )
            .await?;
            tx.commit().await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// One statement: the steps from the run's last whole checkpoint on
    /// (at most [`COMPACT_EVERY`](fluxio_core::store::COMPACT_EVERY) or
    /// so), folded by [`Checkpoint::from_entries`]. Expired runs (completed
    /// runs past their retention) read as absent.
    async fn load(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("load", Retry::Once, |mut conn| async move {
            let parts: Vec<Vec<u8>> = sqlx::query_scalar(&inner.sql.load)
                .bind(run_id)
                .fetch_all(&mut *conn)
                .await?;
            Ok::<_, Failure>(journal::latest(run_id, parts)?)
        })
        .await
    }

    /// One statement: every stored step of the run, oldest first.
    async fn history(&self, run_id: &str) -> Result<Vec<Checkpoint>> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("history", Retry::Once, |mut conn| async move {
            let parts: Vec<Vec<u8>> = sqlx::query_scalar(&inner.sql.history)
                .bind(run_id)
                .fetch_all(&mut *conn)
                .await?;
            Ok::<_, Failure>(Checkpoint::journal_from_entries(run_id, parts)?)
        })
        .await
    }

    /// One statement (one snapshot of the run rows and the leases), built
    /// by `fluxio-sql` from the filter: no journal is read. Each filter is
    /// one range of an index in key order (byte order, `COLLATE "C"`;
    /// schema version 4), so a page costs about the rows it shows, however
    /// many runs the table holds; a filter the indexes do not cover (a
    /// version or a time alone) reads the rows in key order until the page
    /// is full. Expired runs are not listed. Read-only, so sent again after
    /// a dead connection. See the crate docs, "Listing".
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage> {
        let inner = &self.inner;
        self.call("list_runs", Retry::Once, |mut conn| async move {
            fluxio_sql::list::<Postgres, _>(&mut conn, &inner.sql.list, filter).await
        })
        .await
    }

    async fn delete(&self, run_id: &str) -> Result<()> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("delete", Retry::Once, |mut conn| async move {
            sqlx::query(&inner.sql.run.delete)
                .bind(run_id)
                .execute(&mut *conn)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// Expired rows read as absent.
    async fn exists(&self, run_id: &str) -> Result<bool> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("exists", Retry::Once, |mut conn| async move {
            let exists: bool = sqlx::query_scalar(&inner.sql.run.exists)
                .bind(run_id)
                .fetch_one(&mut *conn)
                .await?;
            Ok::<_, Failure>(exists)
        })
        .await
    }

    /// One conditional upsert of the lease row (database clock), on a
    /// connection pinged first, and never sent twice: a second attempt after
    /// a first that committed would find that lease and report `RunIdInUse`.
    async fn acquire_lease(&self, run_id: &str, ttl: Duration) -> Result<Lease> {
        fluxio_core::store::check_run_id(run_id)?;
        check_lease_ttl(ttl)?;
        let inner = &self.inner;
        self.call("acquire_lease", Retry::Never, |mut conn| async move {
            let token: Option<i64> = sqlx::query_scalar(&inner.sql.run.acquire)
                .bind(run_id)
                .bind(ttl_secs(ttl))
                .fetch_optional(&mut *conn)
                .await?;
            match token.map(u64::try_from) {
                Some(Ok(token)) => Ok(Lease::new(run_id, token)),
                Some(Err(e)) => Err(Failure::Fluxio(Error::store(BACKEND, e))),
                None => Err(Failure::Fluxio(Error::RunIdInUse {
                    run_id: run_id.to_owned(),
                })),
            }
        })
        .await
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<()> {
        check_lease_ttl(ttl)?;
        let Ok(token) = i64::try_from(lease.token()) else {
            return Err(lease_lost(lease));
        };
        let inner = &self.inner;
        self.call("renew_lease", Retry::Once, |mut conn| async move {
            let done = sqlx::query(&inner.sql.renew)
                .bind(lease.run_id())
                .bind(token)
                .bind(ttl_secs(ttl))
                .execute(&mut *conn)
                .await?;
            if done.rows_affected() == 1 {
                Ok(())
            } else {
                Err(Failure::Fluxio(lease_lost(lease)))
            }
        })
        .await
    }

    async fn release_lease(&self, lease: Lease) -> Result<()> {
        let Ok(token) = i64::try_from(lease.token()) else {
            return Ok(());
        };
        let inner = &self.inner;
        let lease = &lease;
        self.call("release_lease", Retry::Once, |mut conn| async move {
            sqlx::query(&inner.sql.run.release)
                .bind(lease.run_id())
                .bind(token)
                .execute(&mut *conn)
                .await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// One transaction: the lease row read `FOR UPDATE`, the run's row read
    /// `FOR UPDATE` (a cancelled run is refused with `Cancelled`), the lease
    /// checked (`LeaseLost`), and the checkpoint appended to the journal: only its
    /// [`entry_bytes`](Checkpoint::entry_bytes), the keys that changed. Sent
    /// again after a connection failure: appending checkpoint `seq` again
    /// replaces what the first attempt may have written.
    async fn save_fenced(&self, checkpoint: Checkpoint, lease: &Lease) -> Result<()> {
        let key = checkpoint.key();
        let token = match i64::try_from(lease.token()) {
            Ok(token) if lease.run_id() == key => token,
            _ => return Err(lease_lost(lease)),
        };
        let step = Step::of(&checkpoint)?;
        let (inner, key, checkpoint, step) = (&self.inner, &key, &checkpoint, &step);
        self.call("save_fenced", Retry::Once, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let held: Option<Option<bool>> = sqlx::query_scalar(&inner.sql.lease_lock)
                .bind(key)
                .bind(token)
                .fetch_optional(&mut *tx)
                .await?;
            if Journal::cancelled(&mut tx, &inner.sql.journal, key).await? {
                return Err(Failure::Fluxio(Error::Cancelled {
                    run_id: key.clone(),
                }));
            }
            if held != Some(Some(true)) {
                return Err(Failure::Fluxio(lease_lost(lease)));
            }
            let retention = inner.retention();
            Journal::append(
                &mut tx,
                &inner.sql.journal,
                key,
                checkpoint,
                step,
                retention,
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    /// One transaction, so one commit: the lease taken as
    /// [`acquire_lease`](Self::acquire_lease) takes it (the lease row stays
    /// locked until the commit), the stored run deleted
    /// ([`Begin::Replace`]) or looked for ([`Begin::IfAbsent`]: when there
    /// is one, the commit holds only the lease), and `first` appended as
    /// [`save_fenced`](Self::save_fenced) appends it. On an error nothing
    /// is committed: no lease is taken. Never sent twice (like
    /// `acquire_lease`): a repeat after a commit whose reply was lost would
    /// find the lease taken; the lease then expires after `ttl`.
    async fn begin_run(&self, first: Checkpoint, ttl: Duration, begin: Begin) -> Result<Begun> {
        fluxio_core::store::check_run_id(&first.key())?;
        check_lease_ttl(ttl)?;
        let step = Step::of(&first)?;
        let (inner, first, step) = (&self.inner, &first, &step);
        self.call("begin_run", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            let begun = Journal::begin(
                &mut tx,
                &inner.sql.journal,
                &inner.sql.run,
                first,
                step,
                ttl,
                begin,
                inner.retention(),
            )
            .await?;
            tx.commit().await?;
            Ok(begun)
        })
        .await
    }

    /// One transaction, so one commit: the lease row and then the run's row
    /// locked, the checks of [`save_fenced`](Self::save_fenced)
    /// (`Cancelled`, `LeaseLost`, a missing predecessor), then, unless one
    /// refuses, `last` appended and the run deleted when `delete`; and the
    /// lease released either way. Never sent twice: a repeat after a commit
    /// whose reply was lost would find the lease released. When the
    /// transaction fails, the lease is released apart.
    async fn finish_run(&self, last: Checkpoint, lease: Lease, delete: bool) -> Result<()> {
        let inner = &self.inner;
        let written = match Step::of(&last) {
            Err(e) => Err(e),
            Ok(step) => {
                let (last, step, lease) = (&last, &step, &lease);
                self.call("finish_run", Retry::Never, |mut conn| async move {
                    let mut tx = conn.begin().await?;
                    let decided = Journal::finish(
                        &mut tx,
                        &inner.sql.journal,
                        &inner.sql.run,
                        last,
                        step,
                        lease,
                        delete,
                        inner.retention(),
                    )
                    .await?;
                    tx.commit().await?;
                    Ok::<_, Failure>(decided)
                })
                .await
            }
        };
        match written {
            Ok(decided) => decided,
            Err(e) => {
                let key = last.key();
                if let Err(release) = self.release_lease(lease).await {
                    tracing::warn!(run_id = %key, error = %release, "could not release the run's lease; it will expire");
                }
                Err(e)
            }
        }
    }

    /// One transaction: the run's row locked `FOR UPDATE`, the run loaded,
    /// the decision of [`cancelled_checkpoint`](fluxio_core::store::cancelled_checkpoint), and that checkpoint (the
    /// next one, an empty delta) appended with `status = 'cancelled'`. A
    /// fenced save waits for the row lock and then finds the row cancelled.
    /// Never sent twice (like `acquire_lease`): a repeat after a commit
    /// whose reply was lost would report the run as already cancelled.
    async fn cancel(&self, run_id: &str) -> Result<()> {
        fluxio_core::store::check_run_id(run_id)?;
        let inner = &self.inner;
        self.call("cancel", Retry::Never, |mut conn| async move {
            let mut tx = conn.begin().await?;
            Journal::cancelled(&mut tx, &inner.sql.journal, run_id).await?;
            Journal::cancel(&mut tx, &inner.sql.journal, &inner.sql.load, run_id).await?;
            tx.commit().await?;
            Ok::<_, Failure>(())
        })
        .await
    }

    /// One statement, as [`save_fenced`](Self::save_fenced).
    async fn delete_fenced(&self, run_id: &str, lease: &Lease) -> Result<()> {
        let token = match i64::try_from(lease.token()) {
            Ok(token) if lease.run_id() == run_id => token,
            _ => return Err(lease_lost(lease)),
        };
        let inner = &self.inner;
        self.call("delete_fenced", Retry::Once, |mut conn| async move {
            let held: bool = sqlx::query_scalar(&inner.sql.delete_fenced)
                .bind(run_id)
                .bind(token)
                .fetch_one(&mut *conn)
                .await?;
            if held {
                Ok(())
            } else {
                Err(Failure::Fluxio(lease_lost(lease)))
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use fluxio_core::store::RunState;
    use fluxio_test_support as support;

    use super::*;

    /// The query plan of the listing statement for `filter`, one line per
    /// row of `EXPLAIN`.
    async fn list_plan(store: &PostgresStore, filter: &RunFilter) -> Vec<String> {
        let statement =
            fluxio_sql::statement::<Postgres>(&store.inner.sql.list, filter).expect("statement");
        let (text, arguments) = statement.into_parts::<sqlx::Postgres>().expect("arguments");
        sqlx::query_scalar_with(&format!("EXPLAIN {text}"), arguments)
            .fetch_all(store.pool())
            .await
            .expect("plan")
    }

    /// The name of the index of the checkpoint table whose columns are
    /// `columns`, as `pg_indexes` spells them.
    async fn index(store: &PostgresStore, columns: &str) -> String {
        let indexes = support::postgres::indexes(store.pool(), store.schema(), store.table()).await;
        let wanted = format!("({columns})");
        let mut found = indexes
            .into_iter()
            .filter(|(_, def)| def.ends_with(&wanted));
        match (found.next(), found.next()) {
            (Some((name, _)), None) => name,
            other => panic!("one index on ({columns}), found {other:?}"),
        }
    }

    /// Rule 21: on a table of 20,000 runs, a listing reads one range of an
    /// index in key order for each filter the indexes of schema version 4
    /// cover (no sort, no sequential scan), and finds the lease of each run
    /// by its key.
    #[tokio::test]
    async fn rule21_listing_reads_one_index_range_in_key_order() {
        let Some(url) = support::postgres::server().await else {
            return;
        };
        let schema = support::namespace("list_plan");
        let store = PostgresStore::builder(url.as_str())
            .schema(&schema)
            .max_connections(2)
            .connect()
            .await
            .expect("connect");
        let seed = support::checkpoint("seed", 3).in_pipeline("orders");
        store.save(seed.clone()).await.expect("save");
        let table = store.inner.names.checkpoints_qualified();
        // The seed's row, cloned under new keys: 10,000 runs of `orders`,
        // one in ten failed, and 10,000 of `other`, one in two failed (so
        // that the pipeline's own index is the one that reads least).
        sqlx::query(&format!(
            "INSERT INTO {table} (run_id, payload, version, ip, step, status, error_message, \
               created_at, updated_at, expires_at, attempt) \
             SELECT (CASE WHEN i % 2 = 0 THEN 'other/' ELSE 'orders/' END) || lpad(i::text, 6, '0'), \
               payload, version, ip, step, \
               CASE WHEN i % 20 = 1 OR i % 4 = 0 THEN 'failed' ELSE status END, error_message, \
               created_at, updated_at, expires_at, attempt \
             FROM {table}, generate_series(1, 20000) AS i WHERE run_id = $1"
        ))
        .bind(seed.key())
        .execute(store.pool())
        .await
        .expect("clone the seed's row");
        // Every run had a lease once; they are released (as a worker leaves
        // them), so the running runs are abandoned.
        let leases = store.inner.names.leases_qualified();
        sqlx::query(&format!(
            "INSERT INTO {leases} (run_id, expires_at) SELECT run_id, NULL FROM {table}"
        ))
        .execute(store.pool())
        .await
        .expect("the leases");
        sqlx::query(&format!("ANALYZE {table}, {leases}"))
            .execute(store.pool())
            .await
            .expect("analyze");

        let key = index(&store, "run_id COLLATE \"C\"").await;
        let state = index(&store, "status, run_id COLLATE \"C\"").await;
        let pipeline_state = index(&store, "pipeline, status, run_id COLLATE \"C\"").await;
        let failed = RunFilter::new().state(RunState::Failed);
        let cases = [
            (failed.clone().pipeline("orders"), &pipeline_state),
            (
                failed.clone().pipeline("orders").after("orders/000500"),
                &pipeline_state,
            ),
            (failed.clone(), &state),
            (
                RunFilter::new()
                    .state(RunState::Abandoned)
                    .after("orders/9"),
                &state,
            ),
            (RunFilter::new().pipeline("orders"), &key),
            (RunFilter::new(), &key),
        ];
        for (filter, index) in cases {
            let plan = list_plan(&store, &filter).await;
            let lines = plan.join("\n");
            let table_reads: Vec<&String> = plan
                .iter()
                .filter(|line| line.contains(&format!(" on {} c", store.table())))
                .collect();
            assert_eq!(table_reads.len(), 1, "{filter:?}:\n{lines}");
            assert!(
                table_reads[0].contains(&format!("Index Scan using {index} on")),
                "{filter:?} reads {index}:\n{lines}"
            );
            assert!(
                plan.iter()
                    .any(|line| line.contains("Index Scan using fluxio_checkpoints_leases_pkey")),
                "{filter:?} finds the lease by its key:\n{lines}"
            );
            assert!(
                !lines.contains("Sort") && !lines.contains("Seq Scan"),
                "{filter:?}: no sort, no sequential scan:\n{lines}"
            );
        }
        drop(store);
        support::postgres::drop_schema(&url, &schema).await;
    }
}
