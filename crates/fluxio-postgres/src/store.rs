//! [`PostgresStore`]: its tables, migrations and retention. The trait's
//! calls are `fluxio_sql::ServerStore`'s, one statement or one transaction
//! each, on this store's statements (`statements.rs`).

use fluxio_core::Result;
use fluxio_sql::server::Retry;
use sqlx::postgres::PgPool;

use crate::dialect::Postgres;
use crate::migrate;

fluxio_sql::server_store! {
    /// A [`CheckpointStore`](fluxio_core::store::CheckpointStore) in PostgreSQL, on a sqlx [`PgPool`].
    ///
    /// Cloning is cheap (one `Arc`) and the clones share the pool. See the
    /// [crate documentation](crate) for the schema, the lease protocol, retention
    /// and the guarantees.
    pub struct PostgresStore;
    /// Settings of a [`PostgresStore`]; made by [`PostgresStore::builder`] or
    /// [`PostgresStore::from_pool`].
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use std::time::Duration;
    /// use fluxio_postgres::PostgresStore;
    ///
    /// let store = PostgresStore::builder("postgres://app:secret@db.internal/app")
    ///     .schema("orders")
    ///     .table("checkpoints")
    ///     .max_connections(20)
    ///     .completed_retention(Some(Duration::from_secs(24 * 60 * 60)))
    ///     .timeout(Duration::from_secs(5))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub struct PostgresStoreBuilder;
    dialect Postgres;
    pool PgPool;
    max_connections crate::builder::DEFAULT_MAX_CONNECTIONS;
}

impl PostgresStore {
    /// The schema of the tables.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.server().names().schema
    }

    /// Creates the schema if needed and applies the pending migrations.
    /// [`connect`](PostgresStoreBuilder::connect) does this already;
    /// stores made with [`connect_lazy`](PostgresStoreBuilder::connect_lazy)
    /// call it themselves. Idempotent and safe to run from many processes at
    /// once (they queue on an advisory lock per schema).
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store) with the sqlx error, a
    /// [`PostgresStoreError::MigrationChanged`](crate::PostgresStoreError::MigrationChanged)
    /// or a timeout.
    pub async fn migrate(&self) -> Result<()> {
        let names = self.server().names();
        // One transaction, which a retry repeats only if it did not commit, or
        // finds done.
        let applied = self
            .server()
            .call("migrate", Retry::Once, |mut conn| async move {
                migrate::run(&mut conn, names).await
            })
            .await?;
        tracing::debug!(
            url = self.server().shown_url(),
            schema = %names.schema,
            table = %names.table,
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
    /// [`Error::Store`](fluxio_core::Error::Store): a
    /// [`PostgresStoreError::NoTables`](crate::PostgresStoreError::NoTables),
    /// [`SchemaOutdated`](crate::PostgresStoreError::SchemaOutdated) or
    /// [`MigrationChanged`](crate::PostgresStoreError::MigrationChanged),
    /// the sqlx error, or a timeout.
    pub(crate) async fn check_readable(&self) -> Result<()> {
        self.server().check_tables().await
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
    /// [`Error::Store`](fluxio_core::Error::Store).
    pub async fn purge_expired(&self) -> Result<u64> {
        self.server().purge_expired().await
    }
}

#[cfg(test)]
mod tests {
    use fluxio_core::CheckpointStore as _;
    use fluxio_core::store::{RunFilter, RunState};
    use fluxio_test_support as support;

    use super::*;

    /// The query plan of the listing statement for `filter`, one line per
    /// row of `EXPLAIN`.
    async fn list_plan(store: &PostgresStore, filter: &RunFilter) -> Vec<String> {
        let statement = fluxio_sql::statement::<Postgres>(&store.server().sql().list, filter)
            .expect("statement");
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
        let table = store.server().names().checkpoints_qualified();
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
        let leases = store.server().names().leases_qualified();
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
