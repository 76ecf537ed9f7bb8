//! The [`SqlHarness`] of the SQL stores on a server (PostgreSQL, MySQL):
//! a namespace of the server per test (a schema, a database), dropped when
//! the check passes (left to look at when it fails), and SQL on a small
//! pool of its own. A store's tests say only what its dialect writes
//! differently, in a [`Dialect`].

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row as _, Type};

use super::{DropNamespace, OnServer, Options, Refusal, SqlHarness};

/// What a server's dialect writes its own way, and how the harness
/// reaches the server: [`postgres::Postgres`](crate::postgres::Postgres),
/// [`mysql::MySql`](crate::mysql::MySql).
#[async_trait::async_trait]
pub trait Dialect: Send + Sync + 'static {
    /// The driver's database.
    type Db: Database;

    /// How many migrations the store applies ([`SqlHarness::MIGRATIONS`]).
    const MIGRATIONS: i64 = super::MIGRATIONS;

    /// Drops a test's namespace.
    const DROP: DropNamespace;

    /// The SQL of the names of the tables of the namespace (bound once),
    /// sorted.
    const TABLES: &'static str;

    /// The SQL of the objects of the namespace (the namespace bound
    /// [`OBJECTS_BINDS`](Self::OBJECTS_BINDS) times), each as two texts,
    /// sorted ([`SqlHarness::schema_objects`]).
    const OBJECTS: &'static str;

    /// How often [`OBJECTS`](Self::OBJECTS) binds the namespace.
    const OBJECTS_BINDS: usize = 1;

    /// The SQL of [`SqlHarness::insert_old_row`], binding the run id, the
    /// payload, the version and the status, in this order.
    const OLD_ROW: &'static str;

    /// The SQL (`{s}.` for the namespace) that answers how many write
    /// transactions committed, once [`count_commits`](Self::count_commits)
    /// ran; `None` where they are not counted.
    const COMMITS: Option<&'static str> = None;

    /// The server's URL; `None` after a loud skip (a panic under `CI`).
    async fn server() -> Option<String>;

    /// What qualifies a table of the namespace `name` ([`SqlHarness::prefix`]).
    fn prefix(name: &str) -> String;

    /// The literal of the bytes written as `hex` ([`SqlHarness::blob`]).
    fn blob(hex: &str) -> String;

    /// `sql`, a query of one integer, as a query of an `i64`.
    fn int8(sql: &str) -> String;

    /// The SQL (`{s}.` for the namespace) that takes the tables back to
    /// before migration `version` ([`SqlHarness::undo_migration`]), its
    /// bookkeeping row aside.
    fn undo(version: i64) -> String;

    /// The SQL (`{s}.` for the namespace) that starts counting the commits
    /// to the store's tables, named after `table`
    /// ([`SqlHarness::count_commits`]); `None` where nothing needs setting up.
    fn count_commits(table: &str) -> Option<String> {
        let _ = table;
        None
    }
}

/// A namespace of one test on the server of dialect `D`, for the store
/// `S`, and a pool of two connections to the server, past any store.
pub struct Server<D: Dialect, S: OnServer> {
    url: String,
    name: String,
    pool: Pool<D::Db>,
    store: std::marker::PhantomData<S>,
}

impl<D: Dialect, S: OnServer> std::fmt::Debug for Server<D, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("backend", &S::BACKEND)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect, S: OnServer> Server<D, S> {
    /// The test's namespace (a schema, a database).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The harness's own pool (not a store's).
    pub fn pool(&self) -> &Pool<D::Db> {
        &self.pool
    }
}

impl<D: Dialect, S: OnServer> Server<D, S>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'q> <D::Db as Database>::Arguments<'q>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
    String: Type<D::Db> + for<'r> Decode<'r, D::Db>,
    for<'q> &'q str: Type<D::Db> + Encode<'q, D::Db>,
{
    /// The rows `sql` answers, the namespace bound `binds` times.
    async fn rows(&self, sql: &str, binds: usize) -> Vec<<D::Db as Database>::Row> {
        let mut query = sqlx::query::<D::Db>(sql);
        for _ in 0..binds {
            query = query.bind(self.name.as_str());
        }
        self.pool
            .fetch_all(query)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The texts of the rows `sql` answers, the namespace bound `binds`
    /// times, each row's first `columns`, as a tuple shows them.
    async fn texts(&self, sql: &str, binds: usize, columns: usize) -> Vec<String> {
        let text = |row: &<D::Db as Database>::Row, i: usize| -> String {
            row.try_get(i).unwrap_or_else(|e| panic!("{sql}: {e}"))
        };
        self.rows(sql, binds)
            .await
            .iter()
            .map(|row| match columns {
                1 => text(row, 0),
                _ => format!("{:?}", (text(row, 0), text(row, 1))),
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl<D: Dialect, S: OnServer> SqlHarness for Server<D, S>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'q> <D::Db as Database>::Arguments<'q>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
    String: Type<D::Db> + for<'r> Decode<'r, D::Db>,
    i64: Type<D::Db> + for<'r> Decode<'r, D::Db>,
    for<'q> &'q str: Type<D::Db> + Encode<'q, D::Db>,
    for<'q> &'q [u8]: Type<D::Db> + Encode<'q, D::Db>,
{
    type Store = S::Store;

    const BACKEND: &'static str = S::BACKEND;
    const MIGRATIONS: i64 = D::MIGRATIONS;

    async fn new(test: &str) -> Option<Self> {
        let url = D::server().await?;
        let pool = sqlx::pool::PoolOptions::<D::Db>::new()
            .max_connections(2)
            .connect_lazy(&url)
            .expect("a valid URL");
        Some(Server {
            url,
            name: crate::namespace(test),
            pool,
            store: std::marker::PhantomData,
        })
    }

    async fn open(&self, options: &Options) -> fluxio_core::Result<Self::Store> {
        let builder = S::on(&self.url, &self.name);
        S::connect(super::configure::<S>(builder, options, Some(2))).await
    }

    async fn finish(&self) {
        self.pool.close().await;
        (D::DROP)(&self.url, &self.name).await;
    }

    fn prefix(&self) -> String {
        D::prefix(&self.name)
    }

    fn blob(&self, bytes: &[u8]) -> String {
        D::blob(&super::hex(bytes))
    }

    async fn execute_sql(&self, sql: &str) {
        self.pool
            .execute(sqlx::raw_sql(sql))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn scalar_sql(&self, sql: &str) -> i64 {
        let sql = D::int8(sql);
        let row = self
            .pool
            .fetch_one(sqlx::query::<D::Db>(&sql))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.try_get(0).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    async fn tables(&self) -> Vec<String> {
        self.texts(D::TABLES, 1, 1).await
    }

    async fn schema_objects(&self) -> Vec<String> {
        self.texts(D::OBJECTS, D::OBJECTS_BINDS, 2).await
    }

    async fn insert_old_row(&self, run_id: &str, version: &str, status: &str, payload: &[u8]) {
        let sql = self.sql(D::OLD_ROW);
        let query = sqlx::query::<D::Db>(&sql)
            .bind(run_id)
            .bind(payload)
            .bind(version)
            .bind(status);
        self.pool
            .execute(query)
            .await
            .expect("a row as an older build writes it");
    }

    async fn undo_migration(&self, version: i64) {
        self.execute(&format!(
            "{}; DELETE FROM {{s}}._fluxio_migrations WHERE version = {version}",
            D::undo(version)
        ))
        .await;
    }

    async fn count_commits(&self, store: &Self::Store) {
        if let Some(sql) = D::count_commits(&S::store_table(store)) {
            self.execute(&sql).await;
        }
    }

    async fn commits(&self, _store: &Self::Store) -> i64 {
        let sql = D::COMMITS.unwrap_or_else(|| panic!("{}'s commits are not counted", S::BACKEND));
        self.scalar(sql).await
    }

    fn refusal(err: &fluxio_core::Error) -> Refusal {
        super::refusal::<S>(err)
    }
}
