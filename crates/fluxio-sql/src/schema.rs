//! Whether the tables a store finds were made by migrations this build can
//! read, checked without writing (a store opened read-only).

use sqlx::migrate::{Migration, Migrator};

/// Why a read-only open cannot read the tables it found.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A migration this build knows was never applied: the tables are
    /// older than this build reads (a store opened for writing migrates
    /// them).
    Missing {
        /// The first migration missing.
        version: i64,
        /// Its description.
        description: String,
    },
    /// A migration recorded as applied differs from this build's.
    Changed {
        /// The migration's version.
        version: i64,
        /// Its description.
        description: String,
    },
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
/// [`Unreadable::Changed`] for the first known migration applied with
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
                return Err(Unreadable::Changed {
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
        Some(missing) => Err(Unreadable::Missing {
            version: missing.version,
            description: missing.description.to_string(),
        }),
    }
}
