//! No error message, `Display` or `Debug`, shows the password of the URL,
//! whatever is wrong with the URL (the cases and the check:
//! `fluxio_test_support::secrets`, shared with the other stores).

use std::time::Duration;

use fluxio_redis::RedisStore;
use fluxio_test_support::secrets;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_url_shows_its_password() {
    let servers = [
        ("redis", "127.0.0.1:6379", "/0"),
        ("rediss", "127.0.0.1:1", ""),
    ];
    secrets::assert_no_url_shows_its_password(&servers, 128, |url| async move {
        let connected = crate::connect_within(&url, Duration::from_secs(1)).await;
        match &connected {
            Ok(store) => vec![format!("{store:?}"), format!("{store:#?}")],
            Err(e) => secrets::texts(e),
        }
    })
    .await;
}

#[test]
fn builder_debug_does_not_show_the_password() {
    secrets::assert_debug_hides_the_password(("redis", "127.0.0.1:6379", "/0"), |url| {
        let builder = RedisStore::builder(url);
        [format!("{builder:?}"), format!("{builder:#?}")]
    });
}
