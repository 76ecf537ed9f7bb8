//! The types of a SQL store, as the shared helpers reach them: its store,
//! its builder and its own error, behind one trait ([`SqlStore`]), so that
//! the helpers that open stores ([`configure`], [`Conformance`](super::Conformance))
//! and read their refusals ([`refusal`]) are written once for all of them.
//!
//! The stores share these methods and variant names but no trait, and
//! this crate cannot depend on them; the orphan rule lets a store's tests
//! implement [`SqlStore`] only for a type of their own, so
//! [`sql_store!`](crate::sql_store) declares that type and writes the
//! delegation, the same for every store.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use fluxio_core::Error;
use fluxio_core::store::CheckpointStore;

use super::{Options, Refusal};

/// A future of a store's call, boxed.
pub type Call<T> = Pin<Box<dyn Future<Output = fluxio_core::Result<T>> + Send>>;

/// A SQL store's types and the builder settings the helpers use, for a
/// marker type of its tests; declared with [`sql_store!`](crate::sql_store).
pub trait SqlStore: Send + Sync + 'static {
    /// The store.
    type Store: CheckpointStore + Clone;
    /// Its builder.
    type Builder: Send + 'static;
    /// Its own error, the source of some of its `Error::Store`s.
    type Error: StdError + 'static;

    /// The store's backend, as its `Error::Store` names it.
    const BACKEND: &'static str;

    /// The store's `table`.
    fn store_table(store: &Self::Store) -> String;
    /// The builder's `table`.
    fn table(builder: Self::Builder, table: &str) -> Self::Builder;
    /// The builder's `max_connections`.
    fn max_connections(builder: Self::Builder, n: u32) -> Self::Builder;
    /// The builder's `read_only`.
    fn read_only(builder: Self::Builder, read_only: bool) -> Self::Builder;
    /// The builder's `completed_retention`.
    fn completed_retention(builder: Self::Builder, retention: Option<Duration>) -> Self::Builder;
    /// The builder's `keep_completed`.
    fn keep_completed(builder: Self::Builder, n: Option<usize>) -> Self::Builder;
    /// The builder's `connect`.
    fn connect(builder: Self::Builder) -> Call<Self::Store>;
    /// The store's `purge_expired`.
    fn purge_expired(store: &Self::Store) -> Call<u64>;
    /// The store's own error as the checks compare it, for the variants
    /// they compare (`MigrationChanged`, `SchemaOutdated`, `NoTables`).
    fn own_refusal(own: &Self::Error) -> Option<Refusal>;
    /// The setting and the value an `InvalidSetting` of the store's own
    /// names, if `own` is one.
    fn own_invalid_setting(own: &Self::Error) -> Option<(&'static str, String)>;
}

/// A SQL store on a server: its builder on a namespace of the server;
/// declared with [`sql_store!`](crate::sql_store) too.
pub trait OnServer: SqlStore {
    /// A builder of a store on the namespace `name` (a schema, a
    /// database) of the server at `url`.
    fn on(url: &str, name: &str) -> Self::Builder;
}

/// `builder` with the settings of `options`; a pool of `max_connections`
/// unless `options` say otherwise (`None`: the store's default).
pub fn configure<S: SqlStore>(
    builder: S::Builder,
    options: &Options,
    max_connections: Option<u32>,
) -> S::Builder {
    let mut builder = S::read_only(builder, options.read_only);
    if let Some(n) = options.max_connections.or(max_connections) {
        builder = S::max_connections(builder, n);
    }
    match &options.table {
        Some(table) => S::table(builder, table),
        None => builder,
    }
}

/// The store's own error behind `err`, if `err` is one of the store's
/// `Error::Store`s and its source is the store's own.
pub fn own_error<S: SqlStore>(err: &Error) -> Option<&S::Error> {
    match err {
        Error::Store {
            backend, source, ..
        } if *backend == S::BACKEND => source.downcast_ref::<S::Error>(),
        _ => None,
    }
}

/// The setting and the value that `err`, the store's `InvalidSetting`,
/// names.
///
/// # Panics
/// When `err` is no `InvalidSetting` of the store's.
pub fn invalid_setting<S: SqlStore>(err: &Error) -> (&'static str, String) {
    own_error::<S>(err)
        .and_then(S::own_invalid_setting)
        .unwrap_or_else(|| panic!("expected InvalidSetting, got {err:?}"))
}

/// Asserts that `err` is the refusal of a read-only open that found none
/// of the store's tables ([`TABLE`](super::TABLE)), and says so.
///
/// # Panics
/// When it is not.
#[track_caller]
pub fn assert_no_tables<S: SqlStore>(err: &Error) {
    let table = super::TABLE.to_owned();
    assert_eq!(refusal::<S>(err), Refusal::NoTables { table });
    assert!(err.to_string().contains("no fluxio tables here"), "{err}");
}

/// `err` as the checks compare it ([`SqlHarness::refusal`](super::SqlHarness::refusal)).
pub fn refusal<S: SqlStore>(err: &Error) -> Refusal {
    own_error::<S>(err)
        .and_then(S::own_refusal)
        .unwrap_or_else(|| Refusal::Other(format!("{err:?}")))
}

/// Declares `$marker`, a type of the store's tests that implements
/// [`SqlStore`](crate::sql::SqlStore) for the store `$store`, its builder
/// `$builder` and its own error `$error` (a path of the store's crate, as
/// its variants are named from it), with the backend `$backend`; for a
/// store on a server, also [`OnServer`](crate::sql::OnServer), its
/// namespace set with the builder's method `$namespace`.
///
/// ```ignore
/// fluxio_test_support::sql_store!(Types: fluxio_sqlite::SqliteStore,
///     fluxio_sqlite::SqliteStoreBuilder, fluxio_sqlite::SqliteStoreError, "sqlite");
/// fluxio_test_support::sql_store!(Types: fluxio_postgres::PostgresStore,
///     fluxio_postgres::PostgresStoreBuilder, fluxio_postgres::PostgresStoreError,
///     "postgres", on = schema);
/// ```
#[macro_export]
macro_rules! sql_store {
    ($marker:ident: $store:ty, $builder:ty, $($error:ident)::+, $backend:expr, on = $namespace:ident) => {
        $crate::sql_store!($marker: $store, $builder, $($error)::+, $backend);

        impl $crate::sql::OnServer for $marker {
            fn on(url: &str, name: &str) -> $builder {
                <$store>::builder(url).$namespace(name)
            }
        }
    };
    ($marker:ident: $store:ty, $builder:ty, $($error:ident)::+, $backend:expr) => {
        /// The store's types, for the shared helpers of `fluxio_test_support::sql`.
        pub(crate) struct $marker;

        impl $crate::sql::SqlStore for $marker {
            type Store = $store;
            type Builder = $builder;
            type Error = $($error)::+;

            const BACKEND: &'static str = $backend;

            fn store_table(store: &$store) -> ::std::string::String {
                store.table().to_owned()
            }
            fn table(builder: $builder, table: &str) -> $builder {
                builder.table(table)
            }
            fn max_connections(builder: $builder, n: u32) -> $builder {
                builder.max_connections(n)
            }
            fn read_only(builder: $builder, read_only: bool) -> $builder {
                builder.read_only(read_only)
            }
            fn completed_retention(
                builder: $builder,
                retention: ::std::option::Option<::std::time::Duration>,
            ) -> $builder {
                builder.completed_retention(retention)
            }
            fn keep_completed(builder: $builder, n: ::std::option::Option<usize>) -> $builder {
                builder.keep_completed(n)
            }
            fn connect(builder: $builder) -> $crate::sql::Call<$store> {
                ::std::boxed::Box::pin(builder.connect())
            }
            fn purge_expired(store: &$store) -> $crate::sql::Call<u64> {
                let store = store.clone();
                ::std::boxed::Box::pin(async move { store.purge_expired().await })
            }
            fn own_refusal(own: &$($error)::+) -> ::std::option::Option<$crate::sql::Refusal> {
                use $crate::sql::Refusal;
                match own {
                    $($error)::+::MigrationChanged { version, table, .. } => {
                        Some(Refusal::MigrationChanged { version: *version, table: table.clone() })
                    }
                    $($error)::+::SchemaOutdated { version, table, .. } => {
                        Some(Refusal::SchemaOutdated { version: *version, table: table.clone() })
                    }
                    $($error)::+::NoTables { table, .. } => Some(Refusal::NoTables { table: table.clone() }),
                    _ => None,
                }
            }
            fn own_invalid_setting(
                own: &$($error)::+,
            ) -> ::std::option::Option<(&'static str, ::std::string::String)> {
                match own {
                    $($error)::+::InvalidSetting { setting, value, .. } => {
                        Some((*setting, value.clone()))
                    }
                    _ => None,
                }
            }
        }
    };
}
