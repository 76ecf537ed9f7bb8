//! The PostgreSQL server of the tests.

/// The environment variable that names the server.
pub const URL_VAR: &str = "FLUXIO_POSTGRES_URL";

/// The server when [`URL_VAR`] is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// [`URL_VAR`], or [`DEFAULT_URL`].
#[must_use]
pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// `Some(url)` when the server answers within 5 s; otherwise `None` after a
/// loud skip (a panic instead when `CI` is set).
#[cfg(feature = "postgres")]
pub async fn server() -> Option<String> {
    use sqlx::Connection as _;

    let url = url();
    let reached = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        sqlx::PgConnection::connect(&url),
    )
    .await;
    match reached {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Some(url)
        }
        Ok(Err(e)) => crate::skip_unless_ci("postgres", &e),
        Err(_) => crate::skip_unless_ci("postgres", &"connect timed out"),
    }
}

/// Drops `schema` and everything in it.
///
/// # Panics
/// When the server refuses.
#[cfg(feature = "postgres")]
pub async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection as _;

    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to drop");
    // `Executor::execute`, not `RawSql::execute`: the future stays `Send`
    // (a harness's `async_trait` method awaits it)
    let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    sqlx::Executor::execute(&mut conn, sqlx::raw_sql(&drop))
        .await
        .expect("drop schema");
    let _ = conn.close().await;
}

/// Runs `test` with the test server's URL and a schema of its own
/// ([`namespace`](crate::namespace)`(test_name)`), then drops the schema
/// (left to look at when the test fails); nothing after a loud skip
/// ([`server`]).
#[cfg(feature = "postgres")]
pub async fn in_schema<F, Fut>(test_name: &str, test: F)
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let drop = async |url: String, ns: String| drop_schema(&url, &ns).await;
    crate::in_namespace(server().await, test_name, test, drop).await;
}

/// [`drop_schema`], boxed, to be kept and called later (when a harness
/// is dropped).
#[cfg(feature = "postgres")]
pub fn drop_schema_later<'a>(
    url: &'a str,
    schema: &'a str,
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
    Box::pin(drop_schema(url, schema))
}

/// The indexes of `schema.table`: each one's name and definition.
///
/// Filter the definitions here, not in the query: a filter on
/// `pg_get_indexdef` in SQL may run on any index of the server first, and
/// fails on one that a concurrent test is dropping ("could not open
/// relation with OID ...").
///
/// # Panics
/// When the server refuses.
#[cfg(feature = "postgres")]
pub async fn indexes(pool: &sqlx::PgPool, schema: &str, table: &str) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT i.relname::text, pg_get_indexdef(i.oid) \
         FROM pg_index x \
         JOIN pg_class c ON c.oid = x.indrelid \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = $1 AND c.relname = $2 \
         ORDER BY 1",
    )
    .bind(schema)
    .bind(table)
    .fetch_all(pool)
    .await
    .expect("the table's indexes")
}

/// For a bench: `Some(url)` when the server answers within 5 s; otherwise
/// `None` after saying on stderr that the benches are skipped.
#[cfg(feature = "postgres")]
pub fn bench_server(rt: &tokio::runtime::Runtime) -> Option<String> {
    use sqlx::Connection as _;

    let url = url();
    let reachable = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            sqlx::PgConnection::connect(&url),
        )
        .await
    });
    match reachable {
        Ok(Ok(conn)) => {
            drop(rt.block_on(conn.close()));
            Some(url)
        }
        Ok(Err(e)) => {
            eprintln!("SKIPPED: postgres is unreachable ({e}); start it to run these benchmarks");
            None
        }
        Err(_) => {
            eprintln!(
                "SKIPPED: postgres did not answer within 5 s; start it to run these benchmarks"
            );
            None
        }
    }
}

/// PostgreSQL's SQL, for the SQL stores' shared checks
/// ([`sql::Server`](crate::sql::Server)): a test's namespace is a schema.
#[cfg(feature = "postgres")]
#[derive(Debug)]
pub struct Postgres;

#[cfg(feature = "postgres")]
#[async_trait::async_trait]
impl crate::sql::Dialect for Postgres {
    type Db = sqlx::Postgres;

    const DROP: crate::sql::DropNamespace = drop_schema_later;

    const TABLES: &'static str =
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY tablename";

    /// Every relation of the schema (tables, indexes, sequences) with its
    /// kind.
    const OBJECTS: &'static str = "SELECT c.relname::text, c.relkind::text FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1";

    const OLD_ROW: &'static str = "INSERT INTO {s}.fluxio_checkpoints \
           (run_id, payload, version, ip, step, status, created_at) \
         VALUES ($1, $2, $3, 0, '', $4, now())";

    const COMMITS: Option<&'static str> = Some("SELECT count(*) FROM {s}._commits");

    async fn server() -> Option<String> {
        server().await
    }

    fn prefix(schema: &str) -> String {
        format!("\"{schema}\".")
    }

    fn blob(hex: &str) -> String {
        format!("'\\x{hex}'::bytea")
    }

    fn int8(sql: &str) -> String {
        format!("SELECT ({sql})::int8")
    }

    fn undo(version: i64) -> String {
        match version {
            2 => "DROP TABLE {s}.fluxio_checkpoints_steps",
            // dropping the column drops the indexes on it
            4 => {
                "ALTER TABLE {s}.fluxio_checkpoints DROP COLUMN attempt; \
                 DROP INDEX {s}.fluxio_checkpoints_run_id_idx"
            }
            _ => panic!("no undoing migration {version}"),
        }
        .to_owned()
    }

    /// Commits are counted by the server: a statement trigger on each of
    /// the store's tables records the id of every transaction that writes
    /// to them (`pg_current_xact_id()`, once per transaction) in a table of
    /// the test's schema. A transaction that rolls back takes its record
    /// with it, so the records are the write transactions that committed:
    /// what makes the server flush its log. Other tests write to other
    /// schemas, so the count is this test's alone.
    fn count_commits(t: &str) -> Option<String> {
        let mut sql = "CREATE TABLE {s}._commits (xid xid8 PRIMARY KEY);
             CREATE FUNCTION {s}._count_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO {s}._commits VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
               RETURN NULL;
             END $$;"
            .to_owned();
        for table in [t.to_owned(), format!("{t}_leases"), format!("{t}_steps")] {
            sql.push_str(&format!(
                "CREATE TRIGGER _count_commit AFTER INSERT OR UPDATE OR DELETE ON {{s}}.\"{table}\"
                 FOR EACH STATEMENT EXECUTE FUNCTION {{s}}._count_commit();"
            ));
        }
        Some(sql)
    }
}
