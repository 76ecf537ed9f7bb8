//! [`MySqlStore`]: its tables, migrations and retention. The trait's calls
//! are `fluxio_sql::ServerStore`'s, one statement or one transaction each,
//! on this store's statements (`statements.rs`).

use std::fmt;
use std::sync::Arc;

use fluxio_core::Result;
use fluxio_sql::server::Retry;
use fluxio_sql::{Failure, ServerStore};
use sqlx::mysql::MySqlPool;

use crate::builder::MySqlStoreBuilder;
use crate::dialect::MySql;
use crate::error::{MySqlStoreError, own_error};
use crate::migrate;
use crate::statements::Names;

/// What a statement that writes a journal entry carries besides it (the
/// key, the other values, the protocol's framing), with room to spare.
const STATEMENT_MARGIN: u64 = 16 * 1024;

/// A [`CheckpointStore`](fluxio_core::store::CheckpointStore) in MySQL 8
/// or MariaDB 10.11+, on a sqlx [`MySqlPool`].
///
/// Cloning is cheap (one `Arc`) and the clones share the pool. See the
/// [crate documentation](crate) for the tables, the lease protocol and the
/// guarantees.
#[derive(Clone)]
pub struct MySqlStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) server: ServerStore<MySql>,
    pub(crate) names: Names,
}

impl fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = self.server();
        f.debug_struct("MySqlStore")
            .field("url", &server.shown_url())
            .field("database", &self.inner.names.database)
            .field("table", &self.inner.names.table)
            .field("timeout", &server.timeout())
            .field("retention", &server.retention())
            .finish_non_exhaustive()
    }
}

impl MySqlStore {
    /// The database of the tables, when one was set (otherwise the
    /// connection's).
    #[must_use]
    pub fn database(&self) -> Option<&str> {
        self.inner.names.database.as_deref()
    }

    /// The checkpoint table.
    #[must_use]
    pub fn table(&self) -> &str {
        &self.inner.names.table
    }

    /// The store's body, shared with the other server stores.
    pub(crate) fn server(&self) -> &ServerStore<MySql> {
        &self.inner.server
    }

    /// Creates the database if needed and applies the pending migrations.
    /// [`connect`](MySqlStoreBuilder::connect) does this already; stores
    /// made with [`connect_lazy`](MySqlStoreBuilder::connect_lazy) call it
    /// themselves. Idempotent, and safe to run from many processes at once
    /// (they queue on a named lock per database).
    ///
    /// # Errors
    /// [`Error::Store`](fluxio_core::Error::Store) with the sqlx error, a
    /// [`MySqlStoreError::MigrationChanged`] or a timeout.
    pub async fn migrate(&self) -> Result<()> {
        let names = &self.inner.names;
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
        let names = &self.inner.names;
        let applied = self
            .server()
            .call("open", Retry::Once, |mut conn| async move {
                Ok::<_, Failure>(migrate::applied(&mut conn, names).await?)
            })
            .await?;
        let Some(applied) = applied else {
            return Err(own_error(MySqlStoreError::NoTables {
                schema: names.shown_database().to_owned(),
                table: names.table.clone(),
            }));
        };
        migrate::readable(names, &applied)?;
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

fluxio_sql::server_store!(MySqlStore, MySqlStoreBuilder, MySqlPool);
