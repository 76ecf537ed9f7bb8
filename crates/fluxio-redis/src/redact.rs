//! Keeping the URL's password out of every string this crate produces.

/// A Redis URL with its password replaced by `***`, and the secrets to scrub
/// from any other text (the password as written and percent-decoded).
#[derive(Clone)]
pub(crate) struct Redacted {
    /// The URL with the password (userinfo and `pass`/`password` query
    /// parameters) replaced by `***`.
    pub(crate) url: String,
    secrets: Vec<String>,
}

const MASK: &str = "***";

impl Redacted {
    pub(crate) fn new(url: &str) -> Self {
        let mut secrets = Vec::new();
        let (scheme, rest) = match url.find("://") {
            Some(i) => url.split_at(i + 3),
            None => ("", url),
        };
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let mut out = String::with_capacity(url.len());
        out.push_str(scheme);
        match authority.rfind('@') {
            Some(at) => {
                let (userinfo, host) = authority.split_at(at);
                match userinfo.split_once(':') {
                    Some((user, password)) => {
                        secrets.push(password.to_owned());
                        out.push_str(user);
                        out.push(':');
                        out.push_str(MASK);
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(host);
            }
            None => out.push_str(authority),
        }
        let (path, fragment) = match tail.find('#') {
            Some(i) => tail.split_at(i),
            None => (tail, ""),
        };
        match path.split_once('?') {
            Some((path, query)) => {
                out.push_str(path);
                out.push('?');
                let pairs: Vec<String> = query
                    .split('&')
                    .map(|pair| match pair.split_once('=') {
                        Some((k, v))
                            if k.eq_ignore_ascii_case("pass")
                                || k.eq_ignore_ascii_case("password") =>
                        {
                            secrets.push(v.to_owned());
                            format!("{k}={MASK}")
                        }
                        _ => pair.to_owned(),
                    })
                    .collect();
                out.push_str(&pairs.join("&"));
            }
            None => out.push_str(path),
        }
        out.push_str(fragment);

        let decoded: Vec<String> = secrets.iter().map(|s| percent_decode(s)).collect();
        secrets.extend(decoded);
        secrets.retain(|s| !s.is_empty());
        secrets.sort();
        secrets.dedup();
        Redacted { url: out, secrets }
    }

    /// Whether `text` contains the password.
    pub(crate) fn leaks(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `text` with every occurrence of the password replaced by `***`.
    pub(crate) fn scrub(&self, text: &str) -> String {
        // Longest first, so a secret that contains another is masked whole.
        let mut secrets: Vec<&String> = self.secrets.iter().collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
            .into_iter()
            .fold(text.to_owned(), |t, s| t.replace(s.as_str(), MASK))
    }
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
    use super::Redacted;

    #[test]
    fn passwords_are_masked() {
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
        ];
        for (url, want) in cases {
            assert_eq!(Redacted::new(url).url, want, "{url}");
        }
    }

    #[test]
    fn scrubs_raw_and_decoded_passwords() {
        let r = Redacted::new("redis://u:p%40ss@h");
        assert!(r.leaks("auth with p@ss failed"));
        assert_eq!(r.scrub("p%40ss and p@ss"), "*** and ***");
        assert!(!Redacted::new("redis://h").leaks("anything"));
    }
}
