//! Keeping a store URL's password out of every string a store produces:
//! shared by the Redis and Postgres stores (and any backend that takes a URL).

use std::fmt;

/// A server URL with its password replaced by `***`, and the secrets to
/// scrub from any other text (the password as written and percent-decoded).
///
/// Only a URL that parses is shown, rebuilt from its parts; of one that does
/// not parse only the scheme is shown. The user name is not a secret and is
/// shown.
///
/// [`scrub`](Self::scrub) masks the password in a message only where the
/// message quotes it as a value: the whole URL as written (replaced by
/// [`url`](Self::url)), or the password between quotes or a URL's
/// delimiters (`:hunter2@`, `"hunter2"`, `password=hunter2&`). Its text
/// inside a word, a number or a host name, or as a word of prose, is left
/// alone, so a short password (`e`, `1`, `127`) or one that is a common
/// word never garbles a message, nor shows which of its words it is; and
/// a password that is also a part the shown URL shows (its user name, host,
/// port or database) is not masked elsewhere either.
///
/// ```
/// use fluxio_core::store::RedactedUrl;
///
/// let r = RedactedUrl::new("redis://user:hunter2@host:6379/0");
/// assert_eq!(r.url, "redis://user:***@host:6379/0");
/// assert!(r.leaks("auth failed for \"hunter2\""));
/// assert_eq!(r.scrub("auth failed for \"hunter2\""), "auth failed for \"***\"");
/// assert_eq!(
///     r.scrub("cannot parse redis://user:hunter2@host:6379/0"),
///     "cannot parse redis://user:***@host:6379/0"
/// );
/// let short = RedactedUrl::new("postgres://u:127@127.0.0.1/db");
/// assert_eq!(short.scrub("connection to 127.0.0.1 refused"), "connection to 127.0.0.1 refused");
/// let bad = RedactedUrl::new("redis//:hunter2@host");
/// assert!(!bad.url.contains("hunter2"));
/// ```
#[derive(Clone)]
pub struct RedactedUrl {
    /// The URL with the password (userinfo and `pass`/`password` query
    /// parameters) replaced by `***`.
    pub url: String,
    /// The URL as given: a message quoting it whole shows [`url`](Self::url)
    /// instead.
    raw: String,
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
        // What the shown URL shows anyway (a password that is the user name,
        // the host, the port or the database) is never masked elsewhere:
        // masking it would hide nothing and say which part it is.
        let shown: Vec<&str> = out.split(delimits).collect();
        secrets.retain(|s| !s.is_empty() && !shown.contains(&s.as_str()));
        // Longest first, so a secret that contains another is masked whole.
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        RedactedUrl {
            url: out,
            raw: url.to_owned(),
            secrets,
        }
    }

    /// Whether `text` quotes the password (what [`scrub`](Self::scrub)
    /// would mask).
    #[must_use]
    pub fn leaks(&self, text: &str) -> bool {
        self.scrub(text) != text
    }

    /// `text` with the URL as written replaced by [`url`](Self::url), and
    /// every other place that quotes the password as a value (between
    /// quotes or URL delimiters, or the whole text) replaced by `***`.
    #[must_use]
    pub fn scrub(&self, text: &str) -> String {
        let scrub_part = |part: &str| {
            self.secrets
                .iter()
                .fold(part.to_owned(), |t, s| mask_quoted(&t, s))
        };
        if self.raw.is_empty() || self.raw == self.url {
            return scrub_part(text);
        }
        let parts: Vec<String> = text.split(self.raw.as_str()).map(scrub_part).collect();
        parts.join(&self.url)
    }
}

/// Whether `c`, next to a secret's text, marks it as a quoted value rather
/// than a piece of a word, number or host name (or a word of prose).
fn delimits(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '`'
            | ':'
            | '@'
            | '/'
            | '='
            | '&'
            | '?'
            | '#'
            | ';'
            | ','
            | '('
            | ')'
            | '['
            | ']'
            | '{'
            | '}'
            | '<'
            | '>'
            | '|'
            | '\\'
    )
}

/// `text` with each occurrence of `secret` that is delimited on both sides
/// (by [`delimits`] or the text's ends) replaced by `***`.
fn mask_quoted(text: &str, secret: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for (at, _) in text.match_indices(secret) {
        if at < from {
            continue;
        }
        let end = at + secret.len();
        let before = text[..at].chars().next_back();
        let after = text[end..].chars().next();
        if before.is_none_or(delimits) && after.is_none_or(delimits) {
            out.push_str(&text[from..at]);
            out.push_str(MASK);
            from = end;
        }
    }
    out.push_str(&text[from..]);
    out
}

/// What a message may show of `url`, pushing what it hides onto `secrets`.
///
/// Only a URL that parses is shown, rebuilt from its parts: the password, a
/// user name holding an escaped `:` or `@` (a user info with its password), a
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
        // A user name is not a secret, unless it holds an escaped `:` or
        // `@`: then it is a user info with the password in it.
        None if suspicious(parsed.username()) => {
            secrets.push(parsed.username().to_owned());
            out.push_str(MASK);
            out.push('@');
        }
        None if !parsed.username().is_empty() => {
            out.push_str(parsed.username());
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
            ("redis://user@host", "redis://user@host"),
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
        assert_masked(&cases);
    }

    #[test]
    fn passwords_are_masked_postgres() {
        let cases = [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://u%3Asecret@h/db", "postgres://***@h/db"),
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
        assert_masked(&cases);
    }

    /// Each url of `cases` is shown as its masked form.
    fn assert_masked(cases: &[(&str, &str)]) {
        for (url, want) in cases {
            assert_eq!(Redacted::new(url).url, *want, "{url}");
        }
    }

    #[test]
    fn scrubs_raw_and_decoded_passwords() {
        // a url with a password, a message quoting it decoded, a text quoting
        // it both ways and that text scrubbed; a url of the scheme without one
        let cases = [
            (
                "redis://u:p%40ss@h",
                "auth with \"p@ss\" failed",
                "\"p%40ss\" and \"p@ss\"",
                "\"***\" and \"***\"",
                "redis://h",
            ),
            (
                "postgres://u:p%40ss@h",
                "auth with 'p@ss' failed",
                "(p%40ss) and [p@ss]",
                "(***) and [***]",
                "postgres://h/db",
            ),
        ];
        for (url, message, text, scrubbed, without) in cases {
            let r = Redacted::new(url);
            assert!(r.leaks(message), "{url}");
            assert_eq!(r.scrub(text), scrubbed, "{url}");
            assert!(!Redacted::new(without).leaks("anything"), "{without}");
        }
        let opaque = Redacted::new("postgres:hunter2@127.0.0.1/db");
        assert!(opaque.leaks("database \"hunter2@127.0.0.1/db\" does not exist"));
    }

    /// Messages as servers and clients write them: none quotes the password.
    const MESSAGES: [&str; 9] = [
        "cannot open the store: error communicating with database: Connection refused (os error 111)",
        "connection to 127.0.0.1:5432 refused",
        "pool timed out while waiting for an open connection",
        "error returned from database: password authentication failed for user \"u\"",
        "error returned from database: role \"u\" does not exist",
        "WRONGPASS invalid username-password pair or user is disabled.",
        "os error 1",
        "connection error: the server closed the connection (127.0.0.1)",
        "database \"db\" does not exist on localhost:5432",
    ];

    #[test]
    fn short_and_common_passwords_leave_messages_whole() {
        let passwords = [
            "e",
            "1",
            "0",
            "s",
            "ab",
            "127",
            "u",
            "db",
            "error",
            "password",
            "role",
            "the",
            "connection",
            "postgres",
            "localhost",
            "5432",
            "user",
            "is",
        ];
        for password in passwords {
            for scheme in ["postgres", "redis"] {
                let url = format!("{scheme}://u:{password}@127.0.0.1:5432/db");
                let r = Redacted::new(&url);
                assert_eq!(r.url, format!("{scheme}://u:***@127.0.0.1:5432/db"));
                for message in MESSAGES {
                    assert_eq!(r.scrub(message), message, "password {password:?}");
                    assert!(!r.leaks(message), "password {password:?}: {message}");
                }
            }
        }
    }

    #[test]
    fn a_quoted_short_password_is_masked_and_nothing_else() {
        for password in ["e", "1", "127", "ab", "error", "localhost"] {
            let url = format!("postgres://u:{password}@db.internal:5432/db");
            let r = Redacted::new(&url);
            let whole = format!("cannot open the store {url}: error");
            assert_eq!(
                r.scrub(&whole),
                "cannot open the store postgres://u:***@db.internal:5432/db: error",
                "{password:?}"
            );
            let options =
                format!("PgConnectOptions {{ host: \"h\", password: Some(\"{password}\") }}");
            assert_eq!(
                r.scrub(&options),
                "PgConnectOptions { host: \"h\", password: Some(\"***\") }",
                "{password:?}"
            );
            assert!(r.leaks(&options));
            assert_eq!(
                r.scrub(&format!("x=y&password={password}&z")),
                "x=y&password=***&z"
            );
            assert_eq!(
                r.scrub(&format!("other://a:{password}@b")),
                "other://a:***@b"
            );
            assert_eq!(r.scrub(password), "***", "the whole text");
        }
    }

    #[test]
    fn a_user_name_is_not_a_secret() {
        let r = Redacted::new("postgres://alice@h/db");
        assert_eq!(r.url, "postgres://alice@h/db");
        let message = "role \"alice\" does not exist";
        assert_eq!(r.scrub(message), message);
        assert!(!r.leaks(message));
        let r = Redacted::new("redis://alice:pw@h");
        assert_eq!(r.url, "redis://alice:***@h");
        assert_eq!(r.scrub("user \"alice\""), "user \"alice\"");
    }

    #[test]
    fn a_password_that_the_url_shows_anyway_is_not_masked_elsewhere() {
        for (password, message) in [
            ("u", "role \"u\" does not exist"),
            ("h", "cannot reach (h)"),
            ("5432", "connect to (h:5432)"),
            ("db", "database \"db\" does not exist"),
        ] {
            let url = format!("postgres://u:{password}@h:5432/db");
            let r = Redacted::new(&url);
            assert_eq!(r.url, "postgres://u:***@h:5432/db");
            assert_eq!(r.scrub(message), message, "{url}");
            assert_eq!(
                r.scrub(&url),
                r.url,
                "the URL quoted whole is still redacted"
            );
        }
    }
}
