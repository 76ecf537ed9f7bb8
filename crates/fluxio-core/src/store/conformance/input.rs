//! Bad input on every store: corrupt payloads, lease ttls out of range, malformed run ids, and URLs whose passwords must never show.

use super::CheckpointStore;
use crate::error::Error;
use std::time::Duration;

use super::*;

/// A corrupt, truncated or foreign payload, one in another format version,
/// and one with a valid header (right checksum) over garbage or over a claim
/// of a 1 GiB string, is a typed error naming the run id (and, for another
/// format, both version numbers), and the bytes stay in place.
pub async fn corrupt_payload_is_a_typed_error<H: Harness>(h: &H) {
    let ns = namespace("corrupt");
    let store = h.store(&ns).await;
    let good = checkpoint_with("bad:run", 1, &every_value_type())
        .to_bytes()
        .expect("encode");
    let mut flipped = good.clone();
    if let Some(last) = flipped.last_mut() {
        *last ^= 0x40;
    }
    // A correct header (magic, version, CRC, length) over `payload`.
    let framed = |format: u16, payload: &[u8]| {
        let mut bytes = good[..4].to_vec();
        bytes.extend_from_slice(&format.to_le_bytes());
        bytes.extend_from_slice(&crate::store::checkpoint::checksum(format, payload).to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(payload);
        bytes
    };
    let other_format = |format: u16| {
        let mut bytes = good.clone();
        bytes[4..6].copy_from_slice(&format.to_le_bytes());
        bytes
    };
    // The run id's length prefix claims 1 GiB - 1 bytes (bincode varint: 0xfc + u32).
    let mut huge = vec![0xfc];
    huge.extend_from_slice(&((1u32 << 30) - 1).to_le_bytes());
    huge.extend_from_slice(b"bad:run");
    let current = crate::store::FORMAT_VERSION;
    let oldest = crate::store::OLDEST_FORMAT_VERSION;
    let cases: Vec<(String, Vec<u8>, Option<u16>)> = vec![
        (
            "garbage".into(),
            b"{\"not\": \"a checkpoint\"}".to_vec(),
            None,
        ),
        ("truncated".into(), good[..good.len() / 2].to_vec(), None),
        ("bit flip".into(), flipped, None),
        ("empty".into(), Vec::new(), None),
        (
            format!("older format {}", oldest.wrapping_sub(1)),
            other_format(oldest.wrapping_sub(1)),
            Some(oldest.wrapping_sub(1)),
        ),
        (
            format!("newer format {}", current + 1),
            other_format(current + 1),
            Some(current + 1),
        ),
        (
            "newer format u16::MAX".into(),
            other_format(u16::MAX),
            Some(u16::MAX),
        ),
        (
            "valid header, garbage payload".into(),
            framed(current, b"\xff\xfe\xfd garbage with a correct CRC \x00\x80"),
            None,
        ),
        (
            "valid header, 1 GiB string claimed".into(),
            framed(current, &huge),
            None,
        ),
    ];
    for (what, bytes, format) in cases {
        if !h.write_raw(&ns, "bad:run", &bytes).await {
            return; // a store of values, not bytes
        }
        for _ in 0..2 {
            match store.load("bad:run").await {
                Err(Error::CorruptCheckpoint { run_id, reason, .. }) => {
                    assert_eq!(run_id, "bad:run", "{what}");
                    if let Some(format) = format {
                        for version in [format, current] {
                            assert!(
                                reason.contains(&format!("format {version}")),
                                "{what}: the reason should name format {version}: {reason}"
                            );
                        }
                    }
                }
                other => panic!("{what}: expected CorruptCheckpoint, got {other:?}"),
            }
        }
        assert!(
            store.exists("bad:run").await.expect("exists"),
            "{what}: the bytes are left in place"
        );
    }
}

/// A lease time-to-live outside [`MIN_LEASE_TTL`](crate::store::MIN_LEASE_TTL)..=
/// [`MAX_LEASE_TTL`](crate::store::MAX_LEASE_TTL) (zero, `Duration::MAX`,
/// `u64::MAX` seconds) is `InvalidSetting` naming `lease_ttl`, on acquire and
/// on renew, and never panics; both ends of the range are accepted.
pub async fn lease_ttl_out_of_range_is_invalid_setting<H: Harness>(h: &H) {
    use crate::store::{MAX_LEASE_TTL, MIN_LEASE_TTL};
    let ns = namespace("lease_ttl");
    let store = h.store(&ns).await;
    let bad = [
        ("zero", Duration::ZERO),
        ("Duration::MAX", Duration::MAX),
        ("u64::MAX seconds", Duration::from_secs(u64::MAX)),
        (
            "one day over the maximum",
            MAX_LEASE_TTL + Duration::from_secs(86_400),
        ),
    ];
    let invalid = |r: crate::Result<()>, what: &str| match r {
        Err(Error::InvalidSetting { setting, .. }) => {
            assert_eq!(setting, "lease_ttl", "{what}");
        }
        other => {
            panic!("{what}: expected InvalidSetting {{ setting: \"lease_ttl\" }}, got {other:?}")
        }
    };
    for (what, ttl) in bad {
        invalid(
            store.acquire_lease("bad-ttl", ttl).await.map(drop),
            &format!("acquire with {what}"),
        );
    }
    // Nothing was taken by the refused acquires.
    let short = store
        .acquire_lease("bad-ttl", MIN_LEASE_TTL)
        .await
        .expect("MIN_LEASE_TTL is accepted");
    drop(short);
    let long = store
        .acquire_lease("max-ttl", MAX_LEASE_TTL)
        .await
        .expect("MAX_LEASE_TTL is accepted");
    for (what, ttl) in bad {
        invalid(
            store.renew_lease(&long, ttl).await,
            &format!("renew with {what}"),
        );
    }
    store
        .renew_lease(&long, MAX_LEASE_TTL)
        .await
        .expect("renew with MAX_LEASE_TTL");
    let other = h.store(&ns).await;
    let what = "a lease of MAX_LEASE_TTL is held";
    assert_lease_held(&other, "max-ttl", MAX_LEASE_TTL, what).await;
    store
        .save_fenced(checkpoint("max-ttl", 1), &long)
        .await
        .expect("fenced save under a MAX_LEASE_TTL lease");
    store.release_lease(long).await.expect("release");
}

/// A malformed run id (a NUL byte, empty, over 512 bytes) is
/// `InvalidRunId` from every method that takes one, before the store is
/// reached: never a backend error (Postgres text cannot hold a NUL), never
/// stored.
pub async fn malformed_run_ids_are_invalid_run_id<H: Harness>(h: &H) {
    let ns = namespace("bad_ids");
    let store = h.store(&ns).await;
    let long = "x".repeat(crate::store::MAX_RUN_ID_LEN + 1);
    for bad in ["nul\0byte", "", long.as_str()] {
        let what = format!("{:?}", bad.chars().take(12).collect::<String>());
        let results = [
            ("save", store.save(checkpoint(bad, 1)).await),
            ("load", store.load(bad).await.map(drop)),
            ("exists", store.exists(bad).await.map(drop)),
            ("delete", store.delete(bad).await),
            (
                "acquire_lease",
                store
                    .acquire_lease(bad, Duration::from_secs(30))
                    .await
                    .map(drop),
            ),
        ];
        for (method, result) in results {
            assert!(
                matches!(result, Err(Error::InvalidRunId { .. })),
                "{method} of {what}: expected InvalidRunId, got {result:?}"
            );
        }
    }
}

/// Malformed (and some well-formed) URLs of a store's server, every one of
/// them holding `password`, for checking that no error message, `Debug` or
/// `Display` shows it: missing and extra slashes, bad schemes and ports, `@`
/// in odd places, percent escapes, unicode, whitespace, the truncations of a
/// valid URL, and one-character deletions and insertions into it. A user
/// name is not a secret, so no URL here holds the password as its user name
/// alone (`scheme://user{password}@host`).
///
/// `scheme` is e.g. `"redis"`, `host_port` e.g. `"127.0.0.1:6379"` and `path`
/// e.g. `"/0"`. The first URL returned is the valid one.
///
/// ```
/// let urls = fluxio_core::store::conformance::urls_with_password(
///     "redis", "127.0.0.1:6379", "/0", "hunter2",
/// );
/// assert_eq!(urls[0], "redis://user:hunter2@127.0.0.1:6379/0");
/// assert!(urls.iter().all(|u| u.contains("hunter2")));
/// assert!(urls.contains(&"redis//:hunter2@127.0.0.1:6379/0".to_owned()));
/// ```
#[must_use]
pub fn urls_with_password(
    scheme: &str,
    host_port: &str,
    path: &str,
    password: &str,
) -> Vec<String> {
    let pw = password;
    let valid = format!("{scheme}://user:{pw}@{host_port}{path}");
    let mut urls = vec![valid.clone()];
    for sep in [
        "", ":", ":/", "//", "/", ":///", "::", "::/", ":////", ":\\\\", " :// ", "://\t", ":/\\/",
        ":/ /", "://:", "://@",
    ] {
        for userinfo in [format!(":{pw}"), format!("user:{pw}")] {
            urls.push(format!("{scheme}{sep}{userinfo}@{host_port}{path}"));
        }
    }
    let upper = scheme.to_ascii_uppercase();
    for bad_scheme in [
        String::new(),
        "http".to_owned(),
        "HTTP".to_owned(),
        "file".to_owned(),
        format!("{scheme}s"),
        upper,
        format!("{scheme} "),
        format!(" {scheme}"),
        format!("1{scheme}"),
        format!("{scheme}+tcp"),
        format!("{scheme}:"),
        format!("{scheme}🦀"),
        format!("ü{scheme}"),
        format!("{scheme}%3A"),
    ] {
        urls.push(format!("{bad_scheme}://user:{pw}@{host_port}{path}"));
        urls.push(format!("{bad_scheme}:user:{pw}@{host_port}{path}"));
    }
    for userinfo in [
        format!(":{pw}@@"),
        format!(":{pw}@user@"),
        format!("@:{pw}@"),
        format!("user@:{pw}@"),
        format!(":{pw}"),
        format!(":{pw}:"),
        format!("user:{pw}:extra@"),
        format!(":{pw}%40"),
        format!(":{pw}%@"),
        format!(":{pw}%4@"),
        format!(":{pw}%zz@"),
        format!("user:{pw}@@@"),
        format!("user:{pw} @"),
        format!("user :{pw}@"),
        format!(" user:{pw}@"),
        format!("user:{pw}\n@"),
        format!("us€r:{pw}@"),
        format!("user:{pw}/@"),
        format!("user:{pw}?@"),
        format!("user:{pw}#@"),
        format!("user%3A{pw}@"),
        format!("user:{pw}%3A@"),
        format!("[user:{pw}]@"),
    ] {
        urls.push(format!("{scheme}://{userinfo}{host_port}{path}"));
    }
    for tail in [
        format!("/:{pw}@x"),
        format!("{path}/user:{pw}@x"),
        format!("{path}?password={pw}"),
        format!("{path}?PASS={pw}&x=1"),
        format!("{path}?x=:{pw}@"),
        format!("{path}?sslmode=:{pw}@"),
        format!("{path}?sslmode=user:{pw}"),
        format!("{path}?:{pw}@"),
        format!("{path}#:{pw}@"),
        format!("@:{pw}"),
        format!("@:{pw}@"),
        format!(":{pw}@"),
    ] {
        urls.push(format!("{scheme}://{host_port}{tail}"));
    }
    urls.extend(with_bad_hosts(scheme, host_port, path, pw));
    urls.extend(edits_of(&valid));
    // A user name is shown: a password written as one (the `:` before it
    // deleted) cannot be told from a user name, and is not among these.
    let as_user_name = format!("://user{pw}@");
    urls.retain(|u| u.contains(pw) && !u.contains(&as_user_name));
    let mut seen = std::collections::HashSet::new();
    urls.retain(|u| seen.insert(u.clone()));
    urls
}

/// URLs with the password `pw` and a host and port that are not one.
fn with_bad_hosts(scheme: &str, host_port: &str, path: &str, pw: &str) -> Vec<String> {
    let mut urls = Vec::new();
    let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
    for bad_host in [
        format!("{host}:"),
        format!("{host}:99999"),
        format!("{host}:-1"),
        format!("{host}:abc"),
        format!("{host_port}:1"),
        format!("{host}:６３７９"),
        "[::1".to_owned(),
        "::1:1".to_owned(),
        "[::1]:x".to_owned(),
        "hôst:1".to_owned(),
        "%zz:1".to_owned(),
        "%2Ftmp%2Fsock".to_owned(),
        "h st:1".to_owned(),
        String::new(),
        " ".to_owned(),
        "🦀".to_owned(),
    ] {
        urls.push(format!("{scheme}://user:{pw}@{bad_host}{path}"));
        urls.push(format!("{scheme}://:{pw}@{bad_host}{path}"));
    }
    urls
}

/// `valid` with blanks or brackets around it, cut at each character,
/// with a separator inserted at each, and with each character deleted.
fn edits_of(valid: &str) -> Vec<String> {
    let mut urls = Vec::new();
    for (before, after) in [
        (" ", ""),
        ("", "\n"),
        ("\t", "\t"),
        ("", " x"),
        ("<", ">"),
        ("\"", "\""),
    ] {
        urls.push(format!("{before}{valid}{after}"));
    }
    let boundaries: Vec<usize> = valid
        .char_indices()
        .map(|(i, _)| i)
        .chain([valid.len()])
        .collect();
    for &i in &boundaries {
        urls.push(valid[..i].to_owned());
        for insert in ["/", "@", ":", "%", " ", "//", "\\"] {
            urls.push(format!("{}{insert}{}", &valid[..i], &valid[i..]));
        }
    }
    for pair in boundaries.windows(2) {
        urls.push(format!("{}{}", &valid[..pair[0]], &valid[pair[1]..]));
    }
    urls
}
