//! No error message, `Display` or `Debug`, shows the password of the URL,
//! whatever is wrong with the URL.

use std::error::Error as _;
use std::time::Duration;

use fluxio_core::store::conformance::urls_with_password;
use fluxio_redis::RedisStore;
use futures::StreamExt as _;

/// Passwords as written in the URL, with what must never be shown of each
/// (as written and percent-decoded).
const PASSWORDS: &[(&str, &[&str])] = &[
    ("hunter2", &["hunter2"]),
    ("hunt%65r2", &["hunt%65r2", "hunter2"]),
    ("s3cr%40t%2Fpw", &["s3cr%40t%2Fpw", "s3cr@t/pw"]),
    ("pässwörd🔑", &["pässwörd🔑", "p%C3%A4ssw%C3%B6rd"]),
];

/// Every text an error shows: `Display`, `Debug`, `{:#?}`, and the same of
/// each source.
fn texts(e: &fluxio_core::Error) -> Vec<String> {
    let mut out = vec![e.to_string(), format!("{e:?}"), format!("{e:#?}")];
    let mut source = e.source();
    while let Some(s) = source {
        out.extend([s.to_string(), format!("{s:?}")]);
        source = s.source();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_url_shows_its_password() {
    let mut cases = Vec::new();
    for (password, forbidden) in PASSWORDS {
        for url in urls_with_password("redis", "127.0.0.1:6379", "/0", password) {
            cases.push((url, *forbidden));
        }
        for url in urls_with_password("rediss", "127.0.0.1:1", "", password) {
            cases.push((url, *forbidden));
        }
    }
    assert!(cases.len() > 500, "{} urls", cases.len());
    let outcomes = futures::stream::iter(cases)
        .map(|(url, forbidden)| async move {
            let connected = RedisStore::builder(url.as_str())
                .command_timeout(Duration::from_secs(1))
                .connect()
                .await;
            let shown = match &connected {
                Ok(store) => vec![format!("{store:?}"), format!("{store:#?}")],
                Err(e) => texts(e),
            };
            let leaks: Vec<String> = shown
                .into_iter()
                .filter(|text| forbidden.iter().any(|f| text.contains(f)))
                .collect();
            (url, leaks)
        })
        .buffer_unordered(128)
        .collect::<Vec<_>>()
        .await;
    let leaked: Vec<String> = outcomes
        .into_iter()
        .filter(|(_, leaks)| !leaks.is_empty())
        .map(|(url, leaks)| format!("{url:?} -> {}", leaks[0]))
        .collect();
    assert!(
        leaked.is_empty(),
        "{} urls leak their password, e.g.:\n{}",
        leaked.len(),
        leaked
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn builder_debug_does_not_show_the_password() {
    for url in urls_with_password("redis", "127.0.0.1:6379", "/0", "hunter2") {
        let builder = RedisStore::builder(url.as_str());
        for text in [format!("{builder:?}"), format!("{builder:#?}")] {
            assert!(!text.contains("hunter2"), "{url:?} -> {text}");
        }
    }
}
