//! Whether an `async fn` stage can wait: what decides if `#[stage]` runs
//! it in place (`__private::ready_stage`, no boxed future) or boxes its
//! future (`__private::async_stage`).
//!
//! An `async fn`'s future returns `Pending` only from an `.await` in its
//! body. The body's tokens are searched for one, inside every group and
//! every macro's arguments too. What could add one unseen is refused, so
//! that the answer errs only towards "can wait", which is always correct:
//! a macro other than the well-known ones below (`tokio::join!` expands to
//! an `.await`), and an attribute on the function other than inert ones
//! (`#[tracing::instrument]` rewrites the body). Attributes inside the
//! body can only be on items, which cannot wait in the stage's future.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use syn::Attribute;

/// Macros that expand to no `.await`: std's, and logging's.
const QUIET_MACROS: &[&str] = &[
    "assert",
    "assert_eq",
    "assert_ne",
    "cfg",
    "column",
    "concat",
    "dbg",
    "debug",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "env",
    "eprint",
    "eprintln",
    "error",
    "event",
    "file",
    "format",
    "format_args",
    "include_bytes",
    "include_str",
    "info",
    "line",
    "matches",
    "module_path",
    "option_env",
    "panic",
    "print",
    "println",
    "stringify",
    "todo",
    "trace",
    "unimplemented",
    "unreachable",
    "vec",
    "warn",
    "write",
    "writeln",
];

/// Attributes that leave the function's body as it is.
const INERT_ATTRIBUTES: &[&str] = &[
    "allow", "cfg", "clippy", "cold", "deny", "doc", "expect", "forbid", "inline", "must_use",
    "rustfmt", "warn",
];

/// Keywords an `!` after which is a negation, not a macro call.
const KEYWORDS: &[&str] = &[
    "as", "await", "box", "break", "else", "for", "if", "in", "let", "loop", "match", "move",
    "mut", "ref", "return", "while", "yield",
];

/// Whether a function with these attributes (`#[stage]` excluded) and this
/// body may wait (has, or may have, an `.await`).
pub(crate) fn may_wait(attrs: &[Attribute], body: &TokenStream) -> bool {
    let inert = |a: &Attribute| {
        a.path()
            .segments
            .first()
            .is_some_and(|s| INERT_ATTRIBUTES.iter().any(|i| s.ident == i))
    };
    !attrs.iter().all(inert) || tokens_may_wait(body.clone())
}

fn tokens_may_wait(tokens: TokenStream) -> bool {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    tokens.iter().enumerate().any(|(i, t)| match t {
        TokenTree::Group(g) => tokens_may_wait(g.stream()),
        TokenTree::Ident(id) if id == "await" => {
            i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '.')
        }
        TokenTree::Punct(p) if p.as_char() == '!' => {
            let called = matches!(
                tokens.get(i + 1),
                Some(TokenTree::Group(g)) if g.delimiter() != Delimiter::None
            );
            match i.checked_sub(1).map(|j| &tokens[j]) {
                Some(TokenTree::Ident(name)) if called => {
                    let name = name.to_string();
                    !KEYWORDS.contains(&name.as_str()) && !QUIET_MACROS.contains(&name.as_str())
                }
                _ => false,
            }
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn waits(body: TokenStream) -> bool {
        may_wait(&[], &body)
    }

    #[test]
    fn a_body_without_await_or_macros_never_waits() {
        assert!(!waits(quote!({ Ok(ctx.set("out", "a small text")?) })));
        assert!(!waits(quote!({
            let n: u64 = ctx.get("n")?;
            if !(n > 3) && n != 2 {
                return Err(Bad.into());
            }
            let f = |x: u64| !x;
            Ok(ctx.set("n", f(n))?)
        })));
    }

    #[test]
    fn an_await_anywhere_may_wait() {
        assert!(waits(quote!({ fetch().await })));
        assert!(waits(quote!({
            let x = { if a { b.await } else { c } };
            x
        })));
        assert!(waits(quote!({ format!("{}", f().await) })));
        assert!(waits(quote!({
            let g = async move { h.await };
            Ok(ctx)
        })));
    }

    #[test]
    fn a_macro_not_known_to_be_quiet_may_wait() {
        assert!(waits(quote!({
            tokio::join!(a(), b());
            Ok(ctx)
        })));
        assert!(waits(quote!({
            my_macro! { x };
            Ok(ctx)
        })));
        assert!(!waits(quote!({
            tracing::info!("x");
            assert_eq!(a, b);
            Ok(ctx)
        })));
        assert!(!waits(quote!({
            let v = vec![1, 2];
            Ok(ctx.set("v", v)?)
        })));
    }

    #[test]
    fn an_attribute_that_may_rewrite_the_body_may_wait() {
        let attrs = |t: TokenStream| syn::Attribute::parse_outer.parse2(t).expect("attributes");
        use syn::parse::Parser as _;
        let body = quote!({ Ok(ctx) });
        assert!(may_wait(&attrs(quote!(#[tracing::instrument])), &body));
        assert!(may_wait(&attrs(quote!(#[cfg_attr(test, foo)])), &body));
        assert!(!may_wait(
            &attrs(quote!(#[doc = "x"] #[allow(unused)] #[clippy::too_many_lines])),
            &body
        ));
    }
}
