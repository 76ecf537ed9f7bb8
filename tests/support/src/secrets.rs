//! What the stores' tests of URL passwords share: no error message,
//! `Display` or `Debug`, shows the password of the URL, whatever is wrong
//! with the URL.

use std::error::Error as _;

use fluxio_core::store::conformance::urls_with_password;
use futures::StreamExt as _;

/// Passwords as written in the URL, with what must never be shown of each
/// (as written and percent-decoded).
pub const PASSWORDS: &[(&str, &[&str])] = &[
    ("hunter2", &["hunter2"]),
    ("hunt%65r2", &["hunt%65r2", "hunter2"]),
    ("s3cr%40t%2Fpw", &["s3cr%40t%2Fpw", "s3cr@t/pw"]),
    ("pässwörd🔑", &["pässwörd🔑", "p%C3%A4ssw%C3%B6rd"]),
];

/// Every text an error shows: `Display`, `Debug`, `{:#?}`, and the same of
/// each source.
#[must_use]
pub fn texts(e: &fluxio_core::Error) -> Vec<String> {
    let mut out = vec![e.to_string(), format!("{e:?}"), format!("{e:#?}")];
    let mut source = e.source();
    while let Some(s) = source {
        out.extend([s.to_string(), format!("{s:?}")]);
        source = s.source();
    }
    out
}

/// Checks that none of the texts `shown(url)` gives (a store's `Debug`, or
/// its errors' [`texts`]) holds a password of the URL, for every URL with
/// each of [`PASSWORDS`] that `urls_with_password` writes for each
/// `(scheme, host, path)` of `servers`: more than 500 in all, `concurrency`
/// at a time.
///
/// # Panics
/// When one leaks, naming up to 15 of the URLs that do.
pub async fn assert_no_url_shows_its_password<F, Fut>(
    servers: &[(&str, &str, &str)],
    concurrency: usize,
    shown: F,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Vec<String>>,
{
    let mut cases = Vec::new();
    for (password, forbidden) in PASSWORDS {
        for (scheme, host, path) in servers {
            for url in urls_with_password(scheme, host, path, password) {
                cases.push((url, *forbidden));
            }
        }
    }
    assert!(cases.len() > 500, "{} urls", cases.len());
    let shown = &shown;
    let outcomes = futures::stream::iter(cases)
        .map(|(url, forbidden)| async move {
            let leaks: Vec<String> = shown(url.clone())
                .await
                .into_iter()
                .filter(|text| forbidden.iter().any(|f| text.contains(f)))
                .collect();
            (url, leaks)
        })
        .buffer_unordered(concurrency)
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

/// Checks that `debug(url)` (a builder's `{:?}` and `{:#?}`) never shows
/// `hunter2`, for every URL `urls_with_password` writes with it.
///
/// # Panics
/// When one does.
pub fn assert_debug_hides_the_password(
    (scheme, host, path): (&str, &str, &str),
    debug: impl Fn(&str) -> [String; 2],
) {
    for url in urls_with_password(scheme, host, path, "hunter2") {
        for text in debug(&url) {
            assert!(!text.contains("hunter2"), "{url:?} -> {text}");
        }
    }
}
