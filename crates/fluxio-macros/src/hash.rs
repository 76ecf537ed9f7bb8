//! The stage hash: sha256 over a canonical encoding of the stage's tokens.
//!
//! Encoding `fluxio/stage/v1`: the domain tag, then four length-prefixed parts
//! (u64 little-endian length, then bytes): the `#[stage(...)]` arguments, the
//! function's other attributes, its signature, its body. Each part is its
//! tokens encoded one by one:
//!
//! - identifier: `i`, length, the identifier's text;
//! - punctuation: `p`, the character (spacing is ignored: it only reflects formatting);
//! - literal: `l`, length, the literal's source text;
//! - group: `g`, the delimiter (`(`, `[`, `{` or `n` for none), the inner tokens, `e`.
//!
//! Before encoding, tokens are normalized (see `normalize`) so that what
//! rustfmt changes does not count: doc comments (`#[doc = ...]` /
//! `#![doc = ...]`, which is what `///` and `//!` become) are skipped wherever
//! they appear, trailing commas and commas after `{...}` are dropped, and a
//! match-arm block holding one expression counts as that expression. Ordinary
//! comments and whitespace never reach the token stream. So reformatting or
//! editing comments keeps the hash; a change of meaning changes it.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use sha2::{Digest, Sha256};

pub(crate) const STAGE_DOMAIN: &[u8] = b"fluxio/stage/v1";

pub(crate) fn stage_hash(parts: &[TokenStream]) -> [u8; 32] {
    let mut h = Sha256::new();
    part(&mut h, STAGE_DOMAIN);
    for p in parts {
        let mut buf = Vec::new();
        encode(p.clone(), &mut buf);
        part(&mut h, &buf);
    }
    h.finalize().into()
}

fn part(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

fn text(out: &mut Vec<u8>, tag: u8, s: &str) {
    out.push(tag);
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn is_doc_attr(group: &TokenTree) -> bool {
    match group {
        TokenTree::Group(g) if g.delimiter() == Delimiter::Bracket => {
            matches!(g.stream().into_iter().next(), Some(TokenTree::Ident(i)) if i == "doc")
        }
        _ => false,
    }
}

/// A token after normalization.
enum Canon {
    Ident(String),
    Punct(char),
    Lit(String),
    Group(u8, Vec<Canon>),
}

fn is_punct(c: &Canon, ch: char) -> bool {
    matches!(c, Canon::Punct(p) if *p == ch)
}

/// Normalizes a token stream so that what rustfmt may change does not count:
/// doc attributes are dropped; a match-arm body `=> { expr }` without a `;`
/// counts as `=> expr,`; a comma directly after a `{...}` group and a trailing
/// comma count as absent (except the comma of a one-element tuple `(x,)`).
/// Only valid programs with the same meaning, or a valid and an invalid one,
/// share an encoding.
fn normalize(tokens: TokenStream, delimiter: Delimiter, arglist: bool) -> Vec<Canon> {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out: Vec<Canon> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if let TokenTree::Punct(p) = &tokens[i] {
            if p.as_char() == '#' {
                let inner =
                    matches!(tokens.get(i + 1), Some(TokenTree::Punct(b)) if b.as_char() == '!');
                let at = if inner { i + 2 } else { i + 1 };
                if tokens.get(at).is_some_and(is_doc_attr) {
                    i = at + 1;
                    continue;
                }
            }
        }
        match &tokens[i] {
            TokenTree::Ident(id) => out.push(Canon::Ident(id.to_string())),
            TokenTree::Punct(p) => out.push(Canon::Punct(p.as_char())),
            TokenTree::Literal(l) => out.push(Canon::Lit(l.to_string())),
            TokenTree::Group(g) => {
                let inner = normalize(g.stream(), g.delimiter(), is_arglist(&out));
                let arm = out.len() >= 2
                    && is_punct(&out[out.len() - 2], '=')
                    && is_punct(&out[out.len() - 1], '>');
                if g.delimiter() == Delimiter::Brace
                    && arm
                    && !inner.is_empty()
                    && !inner.iter().any(|c| is_punct(c, ';'))
                {
                    out.extend(inner);
                    out.push(Canon::Punct(','));
                    if matches!(tokens.get(i + 1), Some(TokenTree::Punct(c)) if c.as_char() == ',')
                    {
                        i += 1;
                    }
                } else {
                    let d = match g.delimiter() {
                        Delimiter::Parenthesis => b'(',
                        Delimiter::Bracket => b'[',
                        Delimiter::Brace => b'{',
                        Delimiter::None => b'n',
                    };
                    out.push(Canon::Group(d, inner));
                }
            }
        }
        i += 1;
    }
    let commas = out.iter().filter(|c| is_punct(c, ',')).count();
    let one_tuple = delimiter == Delimiter::Parenthesis
        && !arglist
        && commas == 1
        && out.last().is_some_and(|c| is_punct(c, ','));
    let mut kept = Vec::with_capacity(out.len());
    let len = out.len();
    for (idx, c) in out.into_iter().enumerate() {
        if is_punct(&c, ',') && !one_tuple {
            let after_brace = matches!(kept.last(), Some(Canon::Group(b'{', _)));
            if idx + 1 == len || after_brace {
                continue;
            }
        }
        kept.push(c);
    }
    kept
}

/// Whether a parenthesized group after `prev` is an argument or parameter
/// list (`f(x,)`, `fn f(x: T,)`, `f::<T>(x,)`, `f()(x,)`), whose trailing
/// comma means nothing, rather than a one-element tuple `(x,)`.
fn is_arglist(prev: &[Canon]) -> bool {
    const KEYWORDS: &[&str] = &[
        "return", "in", "match", "if", "while", "break", "yield", "else", "for", "let", "mut", "as",
    ];
    match prev.last() {
        Some(Canon::Ident(id)) => !KEYWORDS.contains(&id.as_str()),
        Some(Canon::Group(d, _)) => *d == b'(' || *d == b'[',
        Some(Canon::Punct('>')) => !(prev.len() >= 2 && is_punct(&prev[prev.len() - 2], '-')),
        _ => false,
    }
}

fn write(tokens: &[Canon], out: &mut Vec<u8>) {
    for t in tokens {
        match t {
            Canon::Ident(s) => text(out, b'i', s),
            Canon::Punct(ch) => {
                out.push(b'p');
                let mut b = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
            }
            Canon::Lit(s) => text(out, b'l', s),
            Canon::Group(d, inner) => {
                out.push(b'g');
                out.push(*d);
                write(inner, out);
                out.push(b'e');
            }
        }
    }
}

pub(crate) fn encode(tokens: TokenStream, out: &mut Vec<u8>) {
    write(&normalize(tokens, Delimiter::None, false), out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn h(src: &str) -> [u8; 32] {
        let ts = TokenStream::from_str(src).expect("test source parses");
        stage_hash(&[ts])
    }

    #[test]
    fn formatting_and_comments_do_not_matter() {
        let a = h("async fn a(ctx: Context) -> R { let x = ctx.get::<u64>(\"k\")?; Ok(ctx) }");
        let b = h(
            "async fn a(\n  ctx : Context,\n) -> R {\n  // a comment\n  /* block */ let x = ctx . get :: < u64 > (\"k\") ? ;\n  Ok(ctx)\n}",
        );
        let c = h(
            "/// outer doc\nasync fn a(ctx: Context) -> R { //! inner doc\n let x = ctx.get::<u64>(\"k\")?; Ok(ctx) }",
        );
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn one_token_changes_the_hash() {
        let base = h("fn a(ctx: Context) -> R { Ok(ctx.set(\"n\", 1)?) }");
        assert_ne!(
            base,
            h("fn a(ctx: Context) -> R { Ok(ctx.set(\"n\", 2)?) }")
        );
        assert_ne!(
            base,
            h("fn a(ctx: Context) -> R { Ok(ctx.set(\"m\", 1)?) }")
        );
        assert_ne!(
            base,
            h("fn b(ctx: Context) -> R { Ok(ctx.set(\"n\", 1)?) }")
        );
        assert_ne!(
            base,
            h("fn a(ctx: Context) -> R { Ok(ctx.set(\"n\", 1)? ) ; }")
        );
        // a one-element tuple is not a parenthesized expression
        assert_ne!(h("fn a() { let t = (x,); }"), h("fn a() { let t = (x); }"));
        assert_ne!(h("fn a() -> (u8,) { }"), h("fn a() -> (u8) { }"));
        assert_ne!(h("fn a() { return (x,); }"), h("fn a() { return (x); }"));
    }

    #[test]
    fn rustfmt_rewrites_do_not_matter() {
        assert_eq!(h("fn a() { f(x, y) }"), h("fn a() { f(\n x,\n y,\n) }"));
        assert_eq!(
            h("fn a() { match v { A => g(1), B => { h(2) } } }"),
            h("fn a() { match v { A => { g(1) }, B => h(2), } }")
        );
        assert_eq!(
            h("fn a() { match v { A => { x; }, B => {} } }"),
            h("fn a() { match v { A => { x; } B => {} } }")
        );
        assert_ne!(
            h("fn a() { match v { A => { x; y } } }"),
            h("fn a() { match v { A => x; y } }")
        );
    }

    #[test]
    fn parts_are_delimited() {
        let ab = stage_hash(&[
            TokenStream::from_str("a b").unwrap_or_default(),
            TokenStream::new(),
        ]);
        let a_b = stage_hash(&[
            TokenStream::from_str("a").unwrap_or_default(),
            TokenStream::from_str("b").unwrap_or_default(),
        ]);
        assert_ne!(ab, a_b);
    }

    #[test]
    fn golden_digest_is_pinned() {
        // Changing the canonical encoding changes every version: a deliberate decision.
        let d = h("async fn a(ctx: Context) -> R { Ok(ctx) }");
        let hex: String = d.iter().take(8).map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, GOLDEN);
    }

    const GOLDEN: &str = "5a6f2e6fab5dfc3a";

    /// A realistic stage, written compactly.
    const SAMPLE: &str = r#"
async fn enrich(ctx: Context) -> StageResult {
    let ids: Vec<u64> = ctx.get("ids")?;
    let names = ids.iter().map(|id| match id % 3 { 0 => format!("zero-{id}"), 1 => { format!("one-{id}") } _ => String::from("other") }).collect::<Vec<_>>();
    let pair = (names.len(), );
    let total: u64 = ids.iter().filter(|x| **x > 10).sum();
    if total > 1_000 { return Err(Box::new(TooBig { total, limit: 1_000, names: names.clone() })); }
    Ok(ctx.set("names", names)?.set("total", total)?.set("pair", pair)?)
}
"#;

    fn rustfmt(src: &str, width: u32) -> Option<String> {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child =
            Command::new(std::env::var("RUSTFMT").unwrap_or_else(|_| "rustfmt".to_owned()))
                .args([
                    "--edition",
                    "2024",
                    "--config",
                    &format!("max_width={width}"),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .ok()?;
        child.stdin.take()?.write_all(src.as_bytes()).ok()?;
        let out = child.wait_with_output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    #[test]
    fn real_rustfmt_layouts_keep_the_hash() {
        let (Some(narrow), Some(wide)) = (rustfmt(SAMPLE, 40), rustfmt(SAMPLE, 200)) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "rustfmt is required in CI"
            );
            eprintln!("SKIPPED real_rustfmt_layouts_keep_the_hash: rustfmt not found");
            return;
        };
        assert_ne!(narrow, wide, "the two layouts really differ");
        assert!(
            narrow.contains(",\n"),
            "the narrow layout has trailing commas:\n{narrow}"
        );
        assert_eq!(h(SAMPLE), h(&narrow), "narrow layout:\n{narrow}");
        assert_eq!(h(SAMPLE), h(&wide), "wide layout:\n{wide}");
    }
}
