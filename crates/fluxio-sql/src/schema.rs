//! Whether the tables a store finds were made by migrations this build can
//! read, checked without writing (a store opened read-only).

use sqlx::migrate::Migrator;

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

/// Checks the migrations `applied` to a table (version and checksum, as the
/// bookkeeping table records them) against `migrator`'s. Every one this
/// build knows must be applied, unchanged. Versions this build does not
/// know were applied by a newer build: migrations only ever add (columns,
/// tables, indexes), so they do not stop this build from reading, as they
/// do not stop it from writing.
///
/// # Errors
/// The first known migration that is missing or changed.
#[doc(hidden)]
pub fn readable(migrator: &Migrator, applied: &[(i64, Vec<u8>)]) -> Result<(), Unreadable> {
    for migration in migrator.iter() {
        if migration.migration_type.is_down_migration() {
            continue;
        }
        let description = migration.description.to_string();
        match applied.iter().find(|(v, _)| *v == migration.version) {
            Some((_, checksum)) if checksum.as_slice() == &*migration.checksum => {}
            Some(_) => {
                return Err(Unreadable::Changed {
                    version: migration.version,
                    description,
                });
            }
            None => {
                return Err(Unreadable::Missing {
                    version: migration.version,
                    description,
                });
            }
        }
    }
    Ok(())
}
