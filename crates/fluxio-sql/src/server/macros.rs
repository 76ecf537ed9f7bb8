//! [`server_store!`](crate::server_store): the types of a server store and
//! its `CheckpointStore` calls, each the body's.

/// A server store's types and what they share: the store type (a cheap
/// clone of one `Arc` of its [`ServerStore`]) with its `Debug`, `connect`,
/// `builder`, `from_pool`, `pool` and `table`, and the
/// [`CheckpointStore`](fluxio_core::store::CheckpointStore) calls, each
/// the body's; its builder (where its connections come from and its
/// [`Settings`], set by [`settings_setters!`](crate::settings_setters))
/// with `connect` and `connect_lazy`. The store crate writes the docs of
/// both types, the builder's other setters and the store's other calls
/// (`migrate` and `check_readable` among them).
///
/// The one-argument form implements only the trait, for a store type
/// whose `server()` method returns its [`ServerStore`].
#[doc(hidden)]
#[macro_export]
macro_rules! server_store {
    (
        $(#[$store_meta:meta])*
        pub struct $store:ident;
        $(#[$builder_meta:meta])*
        pub struct $builder:ident;
        dialect $dialect:ty;
        pool $pool:ty;
        max_connections $max:expr;
    ) => {
        $(#[$store_meta])*
        #[derive(Clone)]
        pub struct $store {
            inner: ::std::sync::Arc<$crate::ServerStore<$dialect>>,
        }

        impl ::std::fmt::Debug for $store {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.inner.fmt_as(stringify!($store), f)
            }
        }

        $(#[$builder_meta])*
        #[derive(Clone, Debug)]
        pub struct $builder {
            source: $crate::Source<<$dialect as $crate::Dialect>::Db>,
            pub(crate) settings: $crate::Settings,
        }

        $crate::server_store!($store);

        impl $store {
            /// Connects to `url` with the default settings and applies the
            /// pending migrations.
            ///
            /// # Errors
            #[doc = concat!(
                "[`Error::Store`](fluxio_core::Error::Store) when the URL is invalid, the ",
                "server cannot be reached within the [timeout](", stringify!($builder),
                "::timeout), or a migration fails."
            )]
            pub async fn connect(url: &str) -> ::fluxio_core::Result<$store> {
                Self::builder(url).connect().await
            }

            /// A builder connecting to `url`.
            pub fn builder(url: impl Into<String>) -> $builder {
                $builder::new($crate::Source::Url(url.into()))
            }

            #[doc = concat!(
                "A builder on an existing pool: the pool's own size and connect options are ",
                "kept ([`max_connections`](", stringify!($builder), "::max_connections) is ",
                "ignored, and so are the session settings the store's own connections get); ",
                "the client-side [timeout](", stringify!($builder), "::timeout) still bounds ",
                "every call. Finish it with [`connect`](", stringify!($builder), "::connect) ",
                "(which migrates) or [`connect_lazy`](", stringify!($builder), "::connect_lazy)."
            )]
            pub fn from_pool(pool: $pool) -> $builder {
                $builder::new($crate::Source::Pool(pool))
            }

            /// The pool this store runs on.
            #[must_use]
            pub fn pool(&self) -> &$pool {
                self.server().pool()
            }

            /// The checkpoint table.
            #[must_use]
            pub fn table(&self) -> &str {
                $crate::server::Tables::table(self.server().names())
            }

            /// The store's body, shared with the other server stores.
            pub(crate) fn server(&self) -> &$crate::ServerStore<$dialect> {
                &self.inner
            }
        }

        impl $builder {
            fn new(source: $crate::Source<<$dialect as $crate::Dialect>::Db>) -> Self {
                $builder {
                    source,
                    settings: $crate::Settings::new($max),
                }
            }

            /// Builds the store and applies the pending migrations (creating
            /// what is missing on first use);
            /// [read-only](Self::read_only), it checks the tables instead.
            ///
            /// # Errors
            /// [`Error::Store`](fluxio_core::Error::Store): an invalid setting
            /// ([`InvalidSetting`]($crate::ServerStoreError::InvalidSetting),
            /// naming the setting and the value), an invalid URL, a server
            /// that refuses or cannot be reached
            /// ([`Connect`]($crate::ServerStoreError::Connect), at once, with
            /// the I/O error as its source) or does not answer within the
            /// timeout, a failed migration; read-only, tables that are missing
            /// or older than this build reads. No message shows the URL's
            /// password.
            pub async fn connect(self) -> ::fluxio_core::Result<$store> {
                let read_only = self.settings.read_only;
                let store = self.connect_lazy()?;
                store.server().first_connection().await?;
                if read_only {
                    store.check_readable().await?;
                } else {
                    store.migrate().await?;
                }
                Ok(store)
            }

            #[doc = concat!(
                "Builds the store without connecting or migrating: the first call connects. ",
                "For services that start before their database; call [`", stringify!($store),
                "::migrate`] before the first run unless the tables exist already."
            )]
            ///
            /// # Errors
            /// [`Error::Store`](fluxio_core::Error::Store) for an invalid
            /// setting or URL; [`Error::NoRuntime`](fluxio_core::Error::NoRuntime)
            /// outside a tokio runtime (for a store built from a URL: its
            /// pool needs one).
            pub fn connect_lazy(self) -> ::fluxio_core::Result<$store> {
                let server = $crate::ServerStore::build(self.source, self.settings)?;
                Ok($store {
                    inner: ::std::sync::Arc::new(server),
                })
            }
        }
    };
    ($store:ty) => {
        #[$crate::__private::async_trait]
        impl ::fluxio_core::store::CheckpointStore for $store {
            async fn save(
                &self,
                checkpoint: ::fluxio_core::store::Checkpoint,
            ) -> ::fluxio_core::Result<()> {
                self.server().save(checkpoint).await
            }
            async fn load(
                &self,
                key: &str,
            ) -> ::fluxio_core::Result<Option<::fluxio_core::store::Checkpoint>> {
                self.server().load(key).await
            }
            async fn history(
                &self,
                key: &str,
            ) -> ::fluxio_core::Result<Vec<::fluxio_core::store::Checkpoint>> {
                self.server().history(key).await
            }
            async fn list_runs(
                &self,
                filter: &::fluxio_core::store::RunFilter,
            ) -> ::fluxio_core::Result<::fluxio_core::store::RunPage> {
                self.server().list_runs(filter).await
            }
            async fn count_runs(
                &self,
                filter: &::fluxio_core::store::RunFilter,
            ) -> ::fluxio_core::Result<::std::vec::Vec<::fluxio_core::store::RunCount>> {
                self.server().count_runs(filter).await
            }
            async fn delete(&self, key: &str) -> ::fluxio_core::Result<()> {
                self.server().delete(key).await
            }
            async fn exists(&self, key: &str) -> ::fluxio_core::Result<bool> {
                self.server().exists(key).await
            }
            async fn acquire_lease(
                &self,
                key: &str,
                ttl: ::std::time::Duration,
            ) -> ::fluxio_core::Result<::fluxio_core::store::Lease> {
                self.server().acquire_lease(key, ttl).await
            }
            async fn renew_lease(
                &self,
                lease: &::fluxio_core::store::Lease,
                ttl: ::std::time::Duration,
            ) -> ::fluxio_core::Result<()> {
                self.server().renew_lease(lease, ttl).await
            }
            async fn release_lease(
                &self,
                lease: ::fluxio_core::store::Lease,
            ) -> ::fluxio_core::Result<()> {
                self.server().release_lease(lease).await
            }
            async fn save_fenced(
                &self,
                checkpoint: ::fluxio_core::store::Checkpoint,
                lease: &::fluxio_core::store::Lease,
            ) -> ::fluxio_core::Result<()> {
                self.server().save_fenced(checkpoint, lease).await
            }
            async fn delete_fenced(
                &self,
                key: &str,
                lease: &::fluxio_core::store::Lease,
            ) -> ::fluxio_core::Result<()> {
                self.server().delete_fenced(key, lease).await
            }
            async fn begin_run(
                &self,
                first: ::fluxio_core::store::Checkpoint,
                ttl: ::std::time::Duration,
                begin: ::fluxio_core::store::Begin,
            ) -> ::fluxio_core::Result<::fluxio_core::store::Begun> {
                self.server().begin_run(first, ttl, begin).await
            }
            async fn finish_run(
                &self,
                last: ::fluxio_core::store::Checkpoint,
                lease: ::fluxio_core::store::Lease,
                delete: bool,
            ) -> ::fluxio_core::Result<()> {
                self.server().finish_run(last, lease, delete).await
            }
            async fn mark(
                &self,
                key: &str,
                mark: ::fluxio_core::store::Mark,
            ) -> ::fluxio_core::Result<()> {
                self.server().mark(key, mark).await
            }
            async fn send_signal(
                &self,
                key: &str,
                signal: ::fluxio_core::store::Signal,
            ) -> ::fluxio_core::Result<::fluxio_core::store::Delivery> {
                self.server().send_signal(key, signal).await
            }
            async fn take_signal(
                &self,
                key: &str,
                take: &::fluxio_core::store::Take,
                lease: &::fluxio_core::store::Lease,
            ) -> ::fluxio_core::Result<::fluxio_core::store::Decision> {
                self.server().take_signal(key, take, lease).await
            }
            async fn signals(
                &self,
                key: &str,
            ) -> ::fluxio_core::Result<Vec<::fluxio_core::store::Signal>> {
                self.server().signals(key).await
            }
            async fn due_runs(
                &self,
                filter: &::fluxio_core::store::DueFilter,
            ) -> ::fluxio_core::Result<Vec<::fluxio_core::store::DueRun>> {
                self.server().due_runs(filter).await
            }
            async fn claim_due(
                &self,
                filter: &::fluxio_core::store::DueFilter,
                ttl: ::std::time::Duration,
            ) -> ::fluxio_core::Result<Vec<::fluxio_core::store::Claimed>> {
                self.server().claim_due(filter, ttl).await
            }
            async fn set_due(
                &self,
                lease: &::fluxio_core::store::Lease,
                due_ms: Option<u64>,
            ) -> ::fluxio_core::Result<()> {
                self.server().set_due(lease, due_ms).await
            }
            async fn clock_ms(&self) -> ::fluxio_core::Result<Option<u64>> {
                self.server().clock_ms().await
            }
            async fn watch(
                &self,
            ) -> ::fluxio_core::Result<Option<::fluxio_core::store::RunEvents>> {
                self.server().watch().await
            }
        }
    };
}
