//! Whether the tables a store finds were made by migrations this build can
//! read, checked without writing (a store opened read-only).

use sqlx::migrate::{Migration, Migrator};
use sqlx::{Database, Decode, Encode, Executor, IntoArguments, Type};

/// Why a read-only open cannot read the tables it found: a migration this
/// build knows is missing or changed.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// Whether the migration was never applied (the first one missing: the
    /// tables are older than this build reads, and a store opened for
    /// writing migrates them), rather than recorded as applied but
    /// different from this build's.
    pub missing: bool,
    /// The migration's version.
    pub version: i64,
    /// Its description.
    pub description: String,
}

/// The migrations of `migrator` that are not `applied` to table `table`
/// (version and checksum, as the bookkeeping table records them), in
/// order: what a runner applies. Versions applied but unknown to this
/// build were applied by a newer one: migrations only ever add (columns,
/// tables, indexes), so they stop this build neither from reading nor from
/// writing (a rolling upgrade runs old and new workers side by side); they
/// are logged.
///
/// # Errors
/// [`Unreadable`] (changed) for the first known migration applied with
/// another checksum.
#[doc(hidden)]
pub fn pending<'m>(
    migrator: &'m Migrator,
    applied: &[(i64, Vec<u8>)],
    table: &str,
) -> Result<Vec<&'m Migration>, Unreadable> {
    let mut pending = Vec::new();
    for migration in migrator.iter() {
        if migration.migration_type.is_down_migration() {
            continue;
        }
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, checksum)) if checksum.as_slice() == &*migration.checksum => {}
            Some(_) => {
                return Err(Unreadable {
                    missing: false,
                    version: migration.version,
                    description: migration.description.to_string(),
                });
            }
            None => pending.push(migration),
        }
    }
    for (version, _) in applied {
        if !migrator.iter().any(|m| m.version == *version) {
            tracing::debug!(
                table,
                version,
                "the tables have a migration newer than this build"
            );
        }
    }
    Ok(pending)
}

/// Checks the migrations `applied` to table `table` against `migrator`'s:
/// every one this build knows must be applied, unchanged (see
/// [`pending`]).
///
/// # Errors
/// The first known migration that is missing or changed.
#[doc(hidden)]
pub fn readable(
    migrator: &Migrator,
    applied: &[(i64, Vec<u8>)],
    table: &str,
) -> Result<(), Unreadable> {
    match pending(migrator, applied, table)?.first() {
        None => Ok(()),
        Some(missing) => Err(Unreadable {
            missing: true,
            version: missing.version,
            description: missing.description.to_string(),
        }),
    }
}

/// The statements of a store's migrations' bookkeeping table, keyed by
/// table name and version; values are bind parameters in the order given.
#[doc(hidden)]
#[derive(Debug)]
pub struct Bookkeeping {
    /// Creates the table if it is missing.
    pub create: String,
    /// The (version, checksum) applied to (table).
    pub applied: String,
    /// Records (table, version, description, checksum) as applied.
    pub record: String,
}

impl Bookkeeping {
    /// The bookkeeping table `table` (validated and quoted) with the
    /// columns `D` writes ([`Dialect::BOOKKEEPING`](crate::Dialect::BOOKKEEPING)):
    /// its creation, reads and writes, in `D`'s parameters; `now`, when
    /// `installed_on` has no default, is the SQL of the time a migration is
    /// recorded at.
    #[must_use]
    pub fn new<D: crate::Dialect>(table: &str, now: Option<&str>) -> Self {
        let [name, integer, bytes, installed_on, options] = D::BOOKKEEPING;
        let params: Vec<String> = (1..=4).map(D::param).collect();
        let (column, now) = now.map_or((String::new(), String::new()), |now| {
            (", installed_on".to_owned(), format!(", {now}"))
        });
        Bookkeeping {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {table} (\
                 table_name {name} NOT NULL, version {integer} NOT NULL, \
                 description TEXT NOT NULL, checksum {bytes} NOT NULL, \
                 installed_on {installed_on}, PRIMARY KEY (table_name, version)) {options}"
            ),
            applied: format!(
                "SELECT version, checksum FROM {table} WHERE table_name = {}",
                params[0]
            ),
            record: format!(
                "INSERT INTO {table} (table_name, version, description, checksum{column}) \
                 VALUES ({}{now})",
                params.join(", ")
            ),
        }
    }
}

/// Applies the [`pending`] migrations of `migrator` to table `table` on
/// `conn`, each rendered for the store's names by `render` and recorded
/// after it ran; in the caller's transaction and under the caller's lock
/// (a runner takes both as its database allows). `place` names where the
/// tables are, for the log. Returns how many it applied.
///
/// # Errors
/// The driver's; `changed` of a migration applied with another checksum.
#[doc(hidden)]
pub async fn apply<DB, E>(
    conn: &mut DB::Connection,
    migrator: &Migrator,
    book: &Bookkeeping,
    (place, table): (&str, &str),
    render: impl Fn(&Migration) -> String,
    changed: impl FnOnce(Unreadable) -> E,
) -> Result<usize, E>
where
    DB: Database,
    E: From<sqlx::Error>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> &'q [u8]: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Vec<u8>: Decode<'q, DB> + Type<DB>,
    for<'r> (i64, Vec<u8>): sqlx::FromRow<'r, DB::Row>,
{
    conn.execute(sqlx::raw_sql(&book.create)).await?;
    let applied: Vec<(i64, Vec<u8>)> = sqlx::query_as(&book.applied)
        .bind(table)
        .fetch_all(&mut *conn)
        .await?;
    let pending = pending(migrator, &applied, table).map_err(changed)?;
    for migration in &pending {
        // Several statements, sent as one unprepared command.
        conn.execute(sqlx::raw_sql(&render(migration))).await?;
        sqlx::query(&book.record)
            .bind(table)
            .bind(migration.version)
            .bind(&*migration.description)
            .bind(&*migration.checksum)
            .execute(&mut *conn)
            .await?;
        tracing::info!(
            place,
            table,
            version = migration.version,
            description = %migration.description,
            "applied migration"
        );
    }
    Ok(pending.len())
}

/// The unit test of a SQL store's migration templates, written once for
/// every store: each migration of `migrator` (at least `at_least` of them)
/// rendered by `render` for `names` keeps no `{placeholder}`, and the SQL
/// names every one of `tables` (quoted as the dialect quotes them).
/// Invoked beside the store's `MIGRATOR`.
#[doc(hidden)]
#[macro_export]
macro_rules! migration_templates_test {
    (
        migrator: $migrator:expr,
        render: $render:expr,
        names: $names:expr,
        at_least: $at_least:expr,
        tables: [$($table:expr),+ $(,)?] $(,)?
    ) => {
        #[cfg(test)]
        #[test]
        fn templates_leave_no_placeholder() {
            let names = $names;
            let migrator: &::sqlx::migrate::Migrator = $migrator;
            assert!(migrator.iter().count() >= $at_least, "the migrations are embedded");
            let all = $crate::rendered(migrator, |m| ($render)(m, &names))
                .unwrap_or_else(|sql| panic!("a placeholder is left in {sql}"));
            for table in [$($table),+] {
                assert!(all.contains(table), "{table} in {all}");
            }
        }
    };
}

/// Every migration of `migrator` rendered by `render` and joined, in
/// order: for a store's test that its templates name its tables.
///
/// # Errors
/// The SQL of the first migration that still holds a `{placeholder}`.
#[doc(hidden)]
pub fn rendered(
    migrator: &Migrator,
    render: impl Fn(&Migration) -> String,
) -> Result<String, String> {
    let mut all = String::new();
    for migration in migrator.iter() {
        let sql = render(migration);
        if sql.contains('{') || sql.contains('}') {
            return Err(sql);
        }
        all.push_str(&sql);
    }
    Ok(all)
}
