//! What the Postgres benchmarks share: a store on the bench server in a
//! schema of their own.

use fluxio_postgres::PostgresStore;
use tokio::runtime::Runtime;

/// The bench server's URL and a store on it in `schema`, with a pool of
/// `max_connections`; `None`, after a line that says the benchmarks are
/// skipped, when the server is down.
pub(crate) fn store(
    rt: &Runtime,
    schema: &str,
    max_connections: u32,
) -> Option<(String, PostgresStore)> {
    let url = fluxio_test_support::postgres::bench_server(rt)?;
    let store = rt
        .block_on(
            PostgresStore::builder(url.as_str())
                .schema(schema)
                .max_connections(max_connections)
                .connect(),
        )
        .expect("connect");
    Some((url, store))
}
