//! Keeping a store URL's password out of every string a store produces:
//! shared by the Redis and Postgres stores (and any backend that takes a URL).

use std::fmt;

/// A server URL with its password replaced by `***`, and the secrets to
/// scrub from any other text (the password as written and percent-decoded).
///
/// Only a URL that parses is shown, rebuilt from its parts; of one that does
/// not parse only the scheme is shown.
///
/// ```
/// use fluxio_core::store::RedactedUrl;
///
/// let r = RedactedUrl::new("redis://user:hunter2@host:6379/0");
/// assert_eq!(r.url, "redis://user:***@host:6379/0");
/// assert!(r.leaks("auth failed for hunter2"));
/// assert_eq!(r.scrub("auth failed for hunter2"), "auth failed for ***");
/// let bad = RedactedUrl::new("redis//:hunter2@host");
/// assert!(!bad.url.contains("hunter2"));
/// ```
#[derive(Clone)]
pub struct RedactedUrl {
    /// The URL with the password (userinfo and `pass`/`password` query
    /// parameters) replaced by `***`.
    pub url: String,
    secrets: Vec<String>,
}

const MASK: &str = "***";

impl fmt::Debug for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

impl RedactedUrl {
    /// Redacts `url`.
    #[must_use]
    pub fn new(url: &str) -> Self {
        let mut secrets = Vec::new();
        let out = redact(url, &mut secrets);
        // A client reads a path as a name without its leading `/`.
        let trimmed: Vec<String> = secrets
            .iter()
            .map(|s| s.trim_start_matches('/').to_owned())
            .collect();
        secrets.extend(trimmed);
        let decoded: Vec<String> = secrets.iter().map(|s| percent_decode(s)).collect();
        secrets.extend(decoded);
        secrets.retain(|s| !s.is_empty());
        secrets.sort();
        secrets.dedup();
        RedactedUrl { url: out, secrets }
    }

    /// Whether `text` contains the password.
    #[must_use]
    pub fn leaks(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `text` with every occurrence of the password replaced by `***`.
    #[must_use]
    pub fn scrub(&self, text: &str) -> String {
        // Longest first, so a secret that contains another is masked whole.
        let mut secrets: Vec<&String> = self.secrets.iter().collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
            .into_iter()
            .fold(text.to_owned(), |t, s| t.replace(s.as_str(), MASK))
    }
}

/// What a message may show of `url`, pushing what it hides onto `secrets`.
///
/// Only a URL that parses is shown, rebuilt from its parts: the password,
/// a user name without a password (it may be a password missing its `:`), a
/// path or query value holding `@` or `:` (a misplaced user info), a
/// `pass`/`password` parameter and the fragment become `***`. Of a URL that
/// does not parse, where no parser can say which part is the password, only
/// the scheme is shown.
fn redact(url: &str, secrets: &mut Vec<String>) -> String {
    let parsed = match url::Url::parse(url) {
        Ok(parsed) if !parsed.cannot_be_a_base() => parsed,
        unusable => {
            secrets.push(url.to_owned());
            // `scheme:user:password@host`: a client may still read the rest
            // as a path (a database name), which a server may quote back.
            if let Ok(opaque) = unusable {
                secrets.push(opaque.path().to_owned());
            }
            return match scheme(url) {
                Some(scheme) => format!("{scheme}:{HIDDEN}"),
                None => HIDDEN.to_owned(),
            };
        }
    };
    let mut out = format!("{}://", parsed.scheme());
    match parsed.password() {
        Some(password) => {
            secrets.push(password.to_owned());
            out.push_str(parsed.username());
            out.push(':');
            out.push_str(MASK);
            out.push('@');
        }
        // A user info without `:` may be a password whose `:` was left out.
        None if !parsed.username().is_empty() => {
            secrets.push(parsed.username().to_owned());
            out.push_str(MASK);
            out.push('@');
        }
        None => {}
    }
    out.push_str(parsed.host_str().unwrap_or_default());
    if let Some(port) = parsed.port() {
        out.push_str(&format!(":{port}"));
    }
    let path = parsed.path();
    if suspicious(path) {
        secrets.push(path.to_owned());
        out.push('/');
        out.push_str(MASK);
    } else {
        out.push_str(path);
    }
    if let Some(query) = parsed.query() {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, v))
                    if k.eq_ignore_ascii_case("pass")
                        || k.eq_ignore_ascii_case("password")
                        || suspicious(v) =>
                {
                    secrets.push(v.to_owned());
                    format!("{k}={MASK}")
                }
                None if suspicious(pair) => {
                    secrets.push(pair.to_owned());
                    MASK.to_owned()
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    if let Some(fragment) = parsed.fragment() {
        if suspicious(fragment) {
            secrets.push(fragment.to_owned());
        }
        out.push('#');
        out.push_str(MASK);
    }
    out
}

/// Shown instead of a URL that does not parse.
const HIDDEN: &str = "<a url that does not parse, not shown>";

/// Whether a path or query part looks like a misplaced user info.
fn suspicious(part: &str) -> bool {
    part.contains(['@', ':'])
        || part.contains("%40")
        || part.contains("%3A")
        || part.contains("%3a")
}

/// The scheme of `url`, if it starts with a well-formed one
/// (`[A-Za-z][A-Za-z0-9+.-]*:`).
fn scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let (h, l) = (hex(h).unwrap_or(0), hex(l).unwrap_or(0));
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::RedactedUrl as Redacted;

    #[test]
    fn passwords_are_masked_redis() {
        let cases = [
            (
                "redis://user:secret@host:6379/0",
                "redis://user:***@host:6379/0",
            ),
            ("rediss://:secret@host", "rediss://:***@host"),
            ("redis://user@host", "redis://***@host"),
            ("redis://host:6379", "redis://host:6379"),
            (
                "redis://u:p%40ss@h/1?protocol=resp3",
                "redis://u:***@h/1?protocol=resp3",
            ),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=secret",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            ("redis://u:a@b@host", "redis://u:***@host"),
            (
                "redis//:hunter2@127.0.0.1:6379",
                "<a url that does not parse, not shown>",
            ),
            ("redis:///:hunter2@127.0.0.1:6379", "redis:///***"),
            (
                "redis://:hunter2@host:99999",
                "redis:<a url that does not parse, not shown>",
            ),
            ("redis://h/0?x=a@b#frag", "redis://h/0?x=***#***"),
        ];
        for (url, want) in cases {
            assert_eq!(Redacted::new(url).url, want, "{url}");
        }
    }

    #[test]
    fn scrubs_raw_and_decoded_passwords_redis() {
        let r = Redacted::new("redis://u:p%40ss@h");
        assert!(r.leaks("auth with p@ss failed"));
        assert_eq!(r.scrub("p%40ss and p@ss"), "*** and ***");
        assert!(!Redacted::new("redis://h").leaks("anything"));
    }

    #[test]
    fn passwords_are_masked_postgres() {
        let cases = [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgres://u@h/db", "postgres://***@h/db"),
            ("postgres://h/db", "postgres://h/db"),
            (
                "postgres://u:p%40ss@h/db?sslmode=require",
                "postgres://u:***@h/db?sslmode=require",
            ),
            ("postgres://u:a@b@h", "postgres://u:***@h"),
            (
                "postgresql://h/db?user=u&password=secret&x=1",
                "postgresql://h/db?user=u&password=***&x=1",
            ),
            (
                "postgres://u:secret@h?password=x#frag",
                "postgres://u:***@h?password=***#***",
            ),
            (
                "postgres//:hunter2@127.0.0.1:5432",
                "<a url that does not parse, not shown>",
            ),
            ("postgres:///:hunter2@127.0.0.1:5432/db", "postgres:///***"),
            (
                "postgres:user:hunter2@h/db",
                "postgres:<a url that does not parse, not shown>",
            ),
        ];
        for (url, want) in cases {
            assert_eq!(Redacted::new(url).url, want, "{url}");
        }
    }

    #[test]
    fn scrubs_raw_and_decoded_passwords_postgres() {
        let r = Redacted::new("postgres://u:p%40ss@h");
        assert!(r.leaks("auth with p@ss failed"));
        assert_eq!(r.scrub("p%40ss and p@ss"), "*** and ***");
        assert!(!Redacted::new("postgres://h/db").leaks("anything"));
        let opaque = Redacted::new("postgres:hunter2@127.0.0.1/db");
        assert!(opaque.leaks("database \"hunter2@127.0.0.1/db\" does not exist"));
    }
}
