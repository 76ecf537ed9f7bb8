//! [`MySqlStore`]: its tables, migrations and retention. The trait's calls
//! are `fluxio_sql::ServerStore`'s, one statement or one transaction each,
//! on this store's statements (`statements.rs`).

use fluxio_core::Result;
use fluxio_sql::Failure;
use fluxio_sql::server::Retry;
use sqlx::mysql::MySqlPool;

use crate::dialect::MySql;
use crate::migrate;

/// What a statement that writes a journal entry carries besides it (the
/// key, the other values, the protocol's framing), with room to spare.
const STATEMENT_MARGIN: u64 = 16 * 1024;

fluxio_sql::server_store! {
    /// A [`CheckpointStore`](fluxio_core::store::CheckpointStore) in MySQL 8
    /// or MariaDB 10.11+, on a sqlx [`MySqlPool`].
    ///
    /// Cloning is cheap (one `Arc`) and the clones share the pool. See the
    /// [crate documentation](crate) for the tables, the lease protocol and the
    /// guarantees.
    pub struct MySqlStore;
    /// Settings of a [`MySqlStore`]; made by [`MySqlStore::builder`] or
    /// [`MySqlStore::from_pool`].
    ///
    /// ```no_run
    /// # async fn f() -> fluxio_core::Result<()> {
    /// use std::time::Duration;
    /// use fluxio_mysql::MySqlStore;
    ///
    /// let store = MySqlStore::builder("mysql://app:secret@db.internal/app")
    ///     .table("checkpoints")
    ///     .max_connections(20)
    ///     .completed_retention(Some(Duration::from_secs(24 * 60 * 60)))
    ///     .timeout(Duration::from_secs(5))
    ///     .connect()
    ///     .await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub struct MySqlStoreBuilder;
    dialect MySql;
    pool MySqlPool;
    max_connections crate::builder::DEFAULT_MAX_CONNECTIONS;
}

impl MySqlStore {
    /// The database of the tables, when one was set (otherwise the
    /// connection's).
    #[must_use]
    pub fn database(&self) -> Option<&str> {
        self.server().names().database.as_deref()
    }

    /// Creates the database if needed and applies the pending migrations.
    /// [`connect`](MySqlStoreBuilder::connect) does this already; stores
    /// made with [`connect_lazy`](MySqlStoreBuilder::connect_lazy) call it
    /// themselves. Idempotent, and safe to run from many processes at once
    /// (they queue on a named lock per database).
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store) with the sqlx error, a
    /// [`MySqlStoreError::MigrationChanged`](crate::MySqlStoreError::MigrationChanged) or a timeout.
    pub async fn migrate(&self) -> Result<()> {
        let names = self.server().names();
        let applied = self
            .server()
            .call("migrate", Retry::Once, |conn| async move {
                // Out of the pool: closing it frees the runner's lock,
                // whatever happens to this future.
                let mut conn = conn.detach();
                let applied = migrate::run(&mut conn, names).await;
                migrate::close(conn).await;
                applied
            })
            .await?;
        self.read_packet_limit().await?;
        tracing::debug!(
            url = self.server().shown_url(),
            database = names.shown_database(),
            table = %names.table,
            applied,
            "checkpoint tables are up to date"
        );
        Ok(())
    }

    /// Reads the server's `max_allowed_packet`: a checkpoint whose journal
    /// entry would not fit in one statement is refused before it is sent
    /// (the server would drop the connection), naming the run and the
    /// size. [`connect`](MySqlStoreBuilder::connect) and
    /// [`migrate`](Self::migrate) call it.
    pub(crate) async fn read_packet_limit(&self) -> Result<()> {
        let packet: u64 = self
            .server()
            .call("open", Retry::Once, |mut conn| async move {
                Ok::<_, Failure>(
                    sqlx::query_scalar("SELECT @@max_allowed_packet")
                        .fetch_one(&mut *conn)
                        .await?,
                )
            })
            .await?;
        self.server()
            .limit_step(packet.saturating_sub(STATEMENT_MARGIN));
        Ok(())
    }

    /// Checks, writing and locking nothing, that the database holds the
    /// store's tables at a schema version this build reads.
    pub(crate) async fn check_readable(&self) -> Result<()> {
        self.server().check_tables().await?;
        self.read_packet_limit().await
    }

    /// Deletes the checkpoints of completed runs whose retention has passed
    /// (see [`completed_retention`](MySqlStoreBuilder::completed_retention))
    /// and returns how many it deleted. It also deletes lease rows that are
    /// released or expired, and the fencing tokens drawn but the newest
    /// (not counted): a run id acquired again still gets a greater token.
    ///
    /// Expired checkpoints are already invisible to `load` and `exists`;
    /// purging only reclaims the space. Call it periodically from one
    /// worker; concurrent calls are harmless.
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store).
    pub async fn purge_expired(&self) -> Result<u64> {
        self.server().purge_expired().await
    }
}
