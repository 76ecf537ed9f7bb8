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

    /// The `LISTEN`/`NOTIFY` channel of the store's tables, which
    /// [`watch`](fluxio_core::store::CheckpointStore::watch) listens to:
    /// `fluxio_` and 16 hexadecimal digits of a hash of `<schema>.<table>`,
    /// the same in every process. Each transaction that parks a run, ends
    /// it or signals it a name it waits for sends `due:<key>` or
    /// `ended:<key>` on it when it commits.
    #[must_use]
    pub fn channel(&self) -> String {
        self.server().names().channel()
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
    use fluxio_core::store::{DueFilter, RunFilter};
    use fluxio_test_support as support;
    use support::sql::plan::{Index, Planner};

    use super::*;

    /// Postgres's side of the shared plan checks: the store, and the names
    /// of the checkpoint table's indexes on (run key, state and key,
    /// pipeline, state and key, due time and key), as `pg_indexes` has
    /// them.
    struct Plan(PostgresStore, [String; 4]);

    /// The name of the index of `store`'s checkpoint table whose columns
    /// are `columns`, as `pg_indexes` spells them.
    async fn index(store: &PostgresStore, columns: &str) -> String {
        let indexes = support::postgres::indexes(store.pool(), store.schema(), store.table()).await;
        let wanted = format!("({columns})");
        let mut found = indexes
            .into_iter()
            .filter(|(_, def)| def.ends_with(&wanted) || def.contains(&format!("{wanted} WHERE")));
        match (found.next(), found.next()) {
            (Some((name, _)), None) => name,
            other => panic!("one index on ({columns}), found {other:?}"),
        }
    }

    #[async_trait::async_trait]
    impl Planner for Plan {
        type Store = PostgresStore;

        async fn open(url: String, schema: String) -> Self {
            let store = PostgresStore::builder(url).schema(schema).connect().await;
            let store = store.expect("connect");
            let key = index(&store, "run_id COLLATE \"C\"").await;
            let state = index(&store, "status, run_id COLLATE \"C\"").await;
            let pipeline_state = index(&store, "pipeline, status, run_id COLLATE \"C\"").await;
            let due = index(&store, "due_at, run_id COLLATE \"C\"").await;
            Plan(store, [key, state, pipeline_state, due])
        }

        fn store(&self) -> &PostgresStore {
            &self.0
        }

        async fn clone_seed(&self) {
            let names = self.0.server().names();
            let (table, leases) = (names.checkpoints_qualified(), names.leases_qualified());
            let clone = format!(
                "INSERT INTO {table} (run_id, payload, version, ip, step, status, error_message, \
                   created_at, updated_at, expires_at, attempt, due_at) \
                 SELECT (CASE WHEN i % 2 = 0 THEN 'other/' ELSE 'orders/' END) \
                   || lpad(i::text, 6, '0'), payload, version, ip, step, \
                   CASE WHEN i % 20 = 1 OR i % 4 = 0 THEN 'failed' ELSE status END, error_message, \
                   created_at, updated_at, expires_at, attempt, due_at \
                 FROM {table}, generate_series(1, 20000) AS i WHERE run_id = 'orders/seed'; \
                 INSERT INTO {leases} (run_id, expires_at) SELECT run_id, NULL FROM {table} \
                 ON CONFLICT (run_id) DO NOTHING; \
                 ANALYZE {table}, {leases}"
            );
            sqlx::raw_sql(&clone)
                .execute(self.0.pool())
                .await
                .expect("clone the seed's row");
        }

        async fn plan(&self, filter: &RunFilter) -> Vec<String> {
            let statement = fluxio_sql::statement::<Postgres>(&self.0.server().sql().list, filter)
                .expect("statement");
            let (text, arguments) = statement.into_parts::<sqlx::Postgres>().expect("arguments");
            sqlx::query_scalar_with(&format!("EXPLAIN {text}"), arguments)
                .fetch_all(self.0.pool())
                .await
                .expect("plan")
        }

        async fn due_plan(&self, filter: &DueFilter) -> Vec<String> {
            let waits = &self.0.server().sql().journal.waits;
            let statement =
                fluxio_sql::due_statement::<Postgres>(waits, filter).expect("statement");
            let (text, arguments) = statement.into_parts::<sqlx::Postgres>().expect("arguments");
            sqlx::query_scalar_with(&format!("EXPLAIN {text}"), arguments)
                .fetch_all(self.0.pool())
                .await
                .expect("plan")
        }

        async fn claim_plan(&self, filter: &DueFilter, leased: bool) -> Vec<String> {
            let waits = &self.0.server().sql().journal.waits;
            let statement =
                fluxio_sql::claim_statement::<Postgres>(waits, filter, leased).expect("statement");
            let (text, arguments) = statement.into_parts::<sqlx::Postgres>().expect("arguments");
            sqlx::query_scalar_with(&format!("EXPLAIN {text}"), arguments)
                .fetch_all(self.0.pool())
                .await
                .expect("plan")
        }

        fn due_index(&self) -> String {
            self.1[3].clone()
        }

        fn table_read<'a>(&self, line: &'a str) -> Option<Option<&'a str>> {
            let scan = line.split_once("Index Scan using ");
            line.contains(&format!(" on {} c", self.0.table()))
                .then(|| Some(scan?.1.split_once(" on ")?.0))
        }

        fn lease_by_key(&self, line: &str) -> bool {
            // an index scan, or an index-only one (the key is all it reads)
            line.contains("Scan using fluxio_checkpoints_leases_pkey")
        }

        fn sorts_or_scans(&self, line: &str) -> bool {
            line.contains("Sort") || line.contains("Seq Scan")
        }

        fn names(&self, index: Index, _: &RunFilter) -> Vec<String> {
            let [key, state, pipeline_state, _] = &self.1;
            let name = match index {
                Index::Key => key,
                Index::State => state,
                Index::PipelineState => pipeline_state,
            };
            vec![name.clone()]
        }
    }

    support::sql_plan_tests!(Plan, support::postgres::in_schema);
}
