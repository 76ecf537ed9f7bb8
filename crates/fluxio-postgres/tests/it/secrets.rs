//! No error message, `Display` or `Debug`, shows the password of the URL,
//! whatever is wrong with the URL (the cases and the check:
//! `fluxio_test_support::secrets`, shared with the other stores).

use std::time::Duration;

use fluxio_core::store::CheckpointStore as _;
use fluxio_postgres::PostgresStore;
use fluxio_test_support::secrets;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_url_shows_its_password() {
    let servers = [
        ("postgres", "127.0.0.1:5432", "/test"),
        ("postgresql", "127.0.0.1:1", ""),
    ];
    secrets::assert_no_url_shows_its_password(&servers, 64, |url| async move {
        // Lazily, on a schema that does not exist: URLs that reach the
        // server (it trusts every password) fail at the first call,
        // without creating anything.
        let built = PostgresStore::builder(url.as_str())
            .schema("fx_secrets_no_such_schema")
            .timeout(Duration::from_secs(1))
            .connect_lazy();
        match built {
            Ok(store) => {
                let mut shown = vec![format!("{store:?}"), format!("{store:#?}")];
                match store.load("r").await {
                    Ok(_) => panic!("{url:?}: a load from a missing schema succeeded"),
                    Err(e) => shown.extend(secrets::texts(&e)),
                }
                shown
            }
            Err(e) => secrets::texts(&e),
        }
    })
    .await;
}

#[test]
fn builder_debug_does_not_show_the_password() {
    secrets::assert_debug_hides_the_password(("postgres", "127.0.0.1:5432", "/test"), |url| {
        let builder = PostgresStore::builder(url);
        [format!("{builder:?}"), format!("{builder:#?}")]
    });
}
