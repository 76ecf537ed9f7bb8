//! The checks every SQL store runs (feature `sql`): its journal, its run
//! rows as a listing reads them, its migrations from older schemas, its
//! schema objects, its commits, its read-only opening. Written once, past
//! the store's API where the rule is about its tables, and run against
//! each SQL store as the conformance suite runs against every store.
//!
//! A store's tests say how to reach it with a [`SqlHarness`]: how to open a
//! store on a fresh, isolated database (a file, a schema, a database), how
//! to run SQL on that database as another program would, and the few
//! places where its dialect or its migrations differ. [`sql_tests!`](crate::sql_tests) then
//! expands to one `#[tokio::test]` per check, under the name the store's
//! tests give it:
//!
//! ```ignore
//! // crates/fluxio-mysql/tests/it/journal.rs
//! fluxio_test_support::sql_tests! { crate::sql::Mysql;
//!     rule18_a_row_of_an_earlier_build_is_migrated_and_resumes,
//!     rule20_a_load_reads_only_from_the_last_whole_checkpoint,
//! }
//! ```
//!
//! The checks are plain `async fn check<H: SqlHarness>(h: &H)`, re-exported
//! here, so a test can also call one itself (with a runtime of another
//! flavor, or in a loop).

mod conformance;
mod journal;
mod list;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod plan;
mod read_only;
mod runs;
mod schema;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod server;
mod store;
mod waits;

pub use conformance::*;
pub use journal::*;
pub use list::*;
pub use read_only::*;
pub use runs::*;
pub use schema::*;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use server::*;
pub use store::*;
pub use waits::*;

use fluxio_core::Error;
use fluxio_core::store::CheckpointStore;

/// How many migrations this build applies to a store's tables: the tables
/// and leases (1), the run journal (2), the pipeline column (3), listing
/// (4), runs that wait (5).
pub const MIGRATIONS: i64 = 5;

/// The table a store uses when not told otherwise.
pub const TABLE: &str = "fluxio_checkpoints";

/// How a check wants a store opened; [`Options::default`] is the store's
/// defaults, with a small pool.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The store's table, instead of [`TABLE`].
    pub table: Option<String>,
    /// The size of the store's pool, instead of the harness's default.
    pub max_connections: Option<u32>,
    /// Open read-only: create and migrate nothing, refuse every write.
    pub read_only: bool,
}

impl Options {
    /// A store on `table` instead of [`TABLE`].
    #[must_use]
    pub fn table(table: &str) -> Self {
        Options {
            table: Some(table.to_owned()),
            ..Options::default()
        }
    }

    /// A store opened read-only.
    #[must_use]
    pub fn read_only() -> Self {
        Options {
            read_only: true,
            ..Options::default()
        }
    }
}

/// Why a store refused to open, as the checks compare it: the store's own
/// error type, reduced to what every SQL store reports alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// An applied migration's checksum differs from this build's.
    MigrationChanged {
        /// The migration's number.
        version: i64,
        /// The store's table.
        table: String,
    },
    /// A migration this build reads is not applied (a read-only open).
    SchemaOutdated {
        /// The first migration missing.
        version: i64,
        /// The store's table.
        table: String,
    },
    /// There are no tables of the store where it was opened read-only.
    NoTables {
        /// The store's table.
        table: String,
    },
    /// Any other error, as the store shows it (`{:?}`).
    Other(String),
}

/// A SQL store under test, and a fresh database of its own for one test: a
/// scratch file, a schema, a database, removed when the harness is dropped
/// or [`finish`](Self::finish)ed.
///
/// SQL given to [`execute`](Self::execute) and [`scalar`](Self::scalar)
/// names the store's tables as `{s}.fluxio_checkpoints`: [`sql`](Self::sql)
/// replaces `{s}.` by what qualifies a table of this database (nothing, for
/// a file; `"schema".` for PostgreSQL). Everything else in it is the SQL
/// every store's dialect shares (`count(*)`, `length(payload)`, ...); what
/// is not shared is a method here.
#[async_trait::async_trait]
pub trait SqlHarness: Sized + Send + Sync + 'static {
    /// The store under test.
    type Store: CheckpointStore + Clone;

    /// The store's backend, as its `Error::Store` names it.
    const BACKEND: &'static str;

    /// How many migrations this build applies to the store's tables (a
    /// store younger than the others has fewer: MySQL's first is its
    /// whole schema).
    const MIGRATIONS: i64 = MIGRATIONS;

    /// A fresh database for the test `test`; `None` after a loud skip when
    /// the server is missing (a panic instead under `CI`).
    async fn new(test: &str) -> Option<Self>;

    /// Called when the check passed, with every store of it dropped: removes
    /// the database if dropping the harness does not (nothing, by default).
    async fn finish(&self) {}

    /// A store on this database, as `options` say (migrating it unless
    /// read-only). Two calls give two handles on the same tables, as two
    /// processes would have.
    async fn open(&self, options: &Options) -> fluxio_core::Result<Self::Store>;

    /// What qualifies a table of this database in SQL: `""`, `"\"schema\"."`.
    fn prefix(&self) -> String;

    /// `bytes` as a literal of the dialect (`X'00'`, `'\x00'`).
    fn blob(&self, bytes: &[u8]) -> String;

    /// Runs `sql` (statements separated by `;`, no parameters) on the
    /// database, past any store, as another program would.
    ///
    /// # Panics
    /// When the database refuses.
    async fn execute_sql(&self, sql: &str);

    /// The one integer the query `sql` answers, whatever integer type the
    /// dialect gives it.
    ///
    /// # Panics
    /// When the database refuses, or the answer is no integer.
    async fn scalar_sql(&self, sql: &str) -> i64;

    /// The names of the tables of this database, sorted.
    async fn tables(&self) -> Vec<String>;

    /// Every object of this database (tables, indexes, triggers,
    /// sequences), each as the dialect's catalog describes it, sorted: what
    /// a read-only store must leave as it was.
    async fn schema_objects(&self) -> Vec<String>;

    /// Writes the run row of `run_id` of [`TABLE`] as builds before schema
    /// version 3 wrote it (naming neither the pipeline nor the attempt,
    /// with the payload in the row): `version`, `ip` 0, `step` empty,
    /// `status`, created at the epoch or now.
    async fn insert_old_row(&self, run_id: &str, version: &str, status: &str, payload: &[u8]);

    /// Takes the tables of [`TABLE`] back to before migration `version`: what
    /// it created goes, and so does its row of bookkeeping. The checks call
    /// it for 2 (the run journal: its steps table) and 4 (listing: the
    /// attempt column and the listing's indexes).
    async fn undo_migration(&self, version: i64);

    /// Starts counting the commits of `store` on this database, if counting
    /// needs setting up (a trigger); [`commits`](Self::commits) counts from
    /// here on, or from earlier.
    async fn count_commits(&self, store: &Self::Store) {
        let _ = store;
    }

    /// How many write transactions of `store` committed, so far.
    async fn commits(&self, store: &Self::Store) -> i64;

    /// `err` as the checks compare it.
    fn refusal(err: &Error) -> Refusal;

    /// `template` with `{s}.` replaced by [`prefix`](Self::prefix).
    fn sql(&self, template: &str) -> String {
        template.replace("{s}.", &self.prefix())
    }

    /// [`execute_sql`](Self::execute_sql) of [`sql(template)`](Self::sql).
    async fn execute(&self, template: &str) {
        self.execute_sql(&self.sql(template)).await;
    }

    /// [`scalar_sql`](Self::scalar_sql) of [`sql(template)`](Self::sql).
    async fn scalar(&self, template: &str) -> i64 {
        self.scalar_sql(&self.sql(template)).await
    }
}

/// Names every SQL store refuses for its tables (and schemas): a space, a
/// `;`, 64 characters (past the 63 PostgreSQL keeps), empty, a leading
/// digit, a quote; then `more`, the store's own.
#[must_use]
pub fn bad_identifiers(more: &[&str]) -> Vec<String> {
    let mut bad: Vec<String> = ["drop table", "a;b", "", "1abc", "x\"y"]
        .map(String::from)
        .into();
    bad.push("a".repeat(64));
    bad.extend(more.iter().map(|name| (*name).to_owned()));
    bad
}

/// `bytes` in hexadecimal, two digits a byte, for a dialect's literal.
#[must_use]
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A store on `h`'s database with its defaults.
///
/// # Panics
/// When the store cannot be opened.
pub async fn open<H: SqlHarness>(h: &H) -> H::Store {
    h.open(&Options::default())
        .await
        .unwrap_or_else(|e| panic!("{}: open: {e:?}", H::BACKEND))
}

/// Runs `check` on a fresh harness for `test`, then
/// [`finish`](SqlHarness::finish)es it, as [`sql_tests!`](crate::sql_tests) does (nothing
/// after a loud skip).
pub async fn run<H, F, Fut>(test: &str, check: F)
where
    H: SqlHarness,
    F: FnOnce(std::sync::Arc<H>) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(h) = H::new(test).await {
        let h = std::sync::Arc::new(h);
        check(h.clone()).await;
        h.finish().await;
    }
}

/// One `#[tokio::test]` per check of [`sql`](crate::sql), each on a fresh
/// database of harness `$harness`. `name` runs the check `name`;
/// `name = check` runs the check `check` under the store's own name for it.
///
/// ```ignore
/// fluxio_test_support::sql_tests! { crate::sql::Sqlite;
///     rule21_a_listing_reads_the_run_rows_not_the_journals,
///     rule21_a_file_of_schema_version_3_gains_the_attempt_and_lists
///         = rule21_tables_of_schema_version_3_gain_the_attempt_and_list,
/// }
/// ```
#[macro_export]
macro_rules! sql_tests {
    ($harness:ty; $($name:ident $(= $check:ident)?),+ $(,)?) => {
        $($crate::sql_tests!(@test $harness, $name $(, $check)?);)+
    };
    (@test $harness:ty, $name:ident) => {
        $crate::sql_tests!(@test $harness, $name, $name);
    };
    (@test $harness:ty, $name:ident, $check:ident) => {
        #[tokio::test]
        async fn $name() {
            $crate::sql::run::<$harness, _, _>(stringify!($name), |h| async move {
                $crate::sql::$check(&*h).await;
            })
            .await;
        }
    };
}

#[fluxio::stage]
async fn stamp(ctx: fluxio::Context) -> fluxio::StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?.set(format!("stage-{n}"), n)?)
}

#[fluxio::stage]
async fn count(ctx: fluxio::Context) -> fluxio::StageResult {
    let n: u64 = ctx.get_opt("n").unwrap_or(0);
    Ok(ctx.set("n", n + 1)?)
}

#[fluxio::stage]
async fn noop(ctx: fluxio::Context) -> fluxio::StageResult {
    Ok(ctx)
}

/// A pipeline of 10 stages, each counting `n` up by one and setting the
/// key `stage-<n>`, not named yet.
pub fn ten_stamps() -> fluxio::PipelineBuilder {
    fluxio::pipeline![
        stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp, stamp
    ]
}

/// A pipeline of 10 stages, each counting `n` up by one, not named yet.
pub fn ten_counts() -> fluxio::PipelineBuilder {
    fluxio::pipeline![
        count, count, count, count, count, count, count, count, count, count
    ]
}

/// A pipeline of 10 stages that change nothing, not named yet.
pub fn ten_noops() -> fluxio::PipelineBuilder {
    fluxio::pipeline![noop, noop, noop, noop, noop, noop, noop, noop, noop, noop]
}
