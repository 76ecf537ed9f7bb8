//! `pipeline![...]`.
//!
//! Grammar (`seq` is a comma-separated list, a trailing comma allowed):
//!
//! ```text
//! input    := ("crate" "=" path ";")? seq
//! item     := stage
//!           | "parallel" "!" "[" branch, ... "]"
//!           | "fire_and_forget" "!" "[" branch, ... "]"
//!           | router "=>" "{" (LIT_STR "=>" body), ... "}"
//!           | "[" seq "]" | "pipeline" "!" "[" seq "]"      (nested, flattened)
//! branch   := item | "[" seq "]"
//! body     := item | "[" seq "]"
//! stage, router := a path to a `#[stage]` function
//! ```

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{LitStr, Token, braced, bracketed};

enum Item {
    Stage(syn::Path),
    Parallel {
        detached: bool,
        branches: Vec<Vec<Item>>,
    },
    Routed {
        router: syn::Path,
        routes: Vec<(LitStr, Vec<Item>)>,
    },
}

struct Input {
    krate: syn::Path,
    seq: Vec<Item>,
}

impl Parse for Input {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut krate: syn::Path = syn::parse_quote!(::fluxio);
        if input.peek(Token![crate]) && input.peek2(Token![=]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            krate = input.parse()?;
            input.parse::<Token![;]>()?;
        }
        let seq = parse_seq(input)?;
        if seq.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "a pipeline needs at least one stage",
            ));
        }
        Ok(Input { krate, seq })
    }
}

fn peek_macro(input: ParseStream<'_>, name: &str) -> bool {
    let fork = input.fork();
    matches!(fork.parse::<syn::Ident>(), Ok(i) if i == name) && fork.peek(Token![!])
}

/// A comma-separated sequence until the end of `input`, nested sequences flattened.
fn parse_seq(input: ParseStream<'_>) -> syn::Result<Vec<Item>> {
    let mut seq = Vec::new();
    while !input.is_empty() {
        parse_item(input, &mut seq)?;
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(seq)
}

fn bracket_seq(input: ParseStream<'_>) -> syn::Result<(Vec<Item>, Span)> {
    let content;
    let b = bracketed!(content in input);
    Ok((parse_seq(&content)?, b.span.join()))
}

fn parse_item(input: ParseStream<'_>, seq: &mut Vec<Item>) -> syn::Result<()> {
    if input.peek(syn::token::Bracket) {
        seq.extend(bracket_seq(input)?.0);
        return no_routing_after(input, "a nested sequence");
    }
    if peek_macro(input, "pipeline") {
        input.parse::<syn::Ident>()?;
        input.parse::<Token![!]>()?;
        seq.extend(bracket_seq(input)?.0);
        return no_routing_after(input, "a nested pipeline");
    }
    for (name, detached) in [("parallel", false), ("fire_and_forget", true)] {
        if peek_macro(input, name) {
            let ident: syn::Ident = input.parse()?;
            input.parse::<Token![!]>()?;
            let content;
            bracketed!(content in input);
            let mut branches = Vec::new();
            while !content.is_empty() {
                let mut branch = Vec::new();
                parse_item(&content, &mut branch)?;
                branches.push(branch);
                if content.is_empty() {
                    break;
                }
                content.parse::<Token![,]>()?;
            }
            if branches.is_empty() {
                return Err(syn::Error::new(
                    ident.span(),
                    format!("`{name}![]` needs at least one branch"),
                ));
            }
            seq.push(Item::Parallel { detached, branches });
            return no_routing_after(input, "a parallel block");
        }
    }
    let path: syn::Path = input.parse()?;
    if !input.peek(Token![=>]) {
        seq.push(Item::Stage(path));
        return Ok(());
    }
    input.parse::<Token![=>]>()?;
    let content;
    let brace = braced!(content in input);
    let mut routes: Vec<(LitStr, Vec<Item>)> = Vec::new();
    while !content.is_empty() {
        let key: LitStr = content.parse()?;
        if let Some((first, _)) = routes.iter().find(|(k, _)| k.value() == key.value()) {
            let mut e =
                syn::Error::new(key.span(), format!("route `{}` appears twice", key.value()));
            e.combine(syn::Error::new(first.span(), "first defined here"));
            return Err(e);
        }
        content.parse::<Token![=>]>()?;
        let mut body = Vec::new();
        let span = content.span();
        parse_item(&content, &mut body)?;
        if body.is_empty() {
            return Err(syn::Error::new(
                span,
                format!("route `{}` has an empty body", key.value()),
            ));
        }
        routes.push((key, body));
        if content.is_empty() {
            break;
        }
        content.parse::<Token![,]>()?;
    }
    if routes.is_empty() {
        return Err(syn::Error::new(
            brace.span.join(),
            "a routing block needs at least one route",
        ));
    }
    seq.push(Item::Routed {
        router: path,
        routes,
    });
    Ok(())
}

fn no_routing_after(input: ParseStream<'_>, what: &str) -> syn::Result<()> {
    if input.peek(Token![=>]) {
        return Err(syn::Error::new(
            input.span(),
            format!(
                "a routing block must follow a router stage, not {what}: write `router => {{ \"route\" => [...] }}`"
            ),
        ));
    }
    Ok(())
}

struct Emit {
    p: TokenStream,
    asserts: Vec<TokenStream>,
}

impl Emit {
    fn stage_checks(&mut self, path: &syn::Path, router: bool) {
        let p = &self.p;
        let shown = quote!(#path).to_string().replace(' ', "");
        let (cond, msg) = if router {
            (
                quote_spanned!(path.span()=> <#path as #p::StageDef>::ROUTER),
                format!(
                    "stage `{shown}` is used as a router but returns `Context`: a router returns `fluxio::Route`"
                ),
            )
        } else {
            (
                quote_spanned!(path.span()=> !<#path as #p::StageDef>::ROUTER),
                format!(
                    "stage `{shown}` returns `fluxio::Route`: follow it with a routing block `{shown} => {{ \"route\" => [...] }}`"
                ),
            )
        };
        let check = respan(quote!(#p::assert_router(#cond, #msg)), path.span());
        self.asserts
            .push(quote_spanned!(path.span()=> const _: () = #check;));
    }

    /// The runtime nodes and the hasher calls for a sequence.
    fn seq(&mut self, items: &[Item]) -> (TokenStream, TokenStream) {
        let p = self.p.clone();
        let mut nodes = Vec::new();
        let mut hash = quote!(.tag(b'['));
        for item in items {
            match item {
                Item::Stage(path) => {
                    self.stage_checks(path, false);
                    nodes.push(quote_spanned!(path.span()=> #p::Node::Stage(<#path as #p::StageDef>::stage())));
                    hash.extend(
                        quote_spanned!(path.span()=> .stage(&<#path as #p::StageDef>::HASH)),
                    );
                }
                Item::Parallel { detached, branches } => {
                    let tag = if *detached { b'F' } else { b'P' };
                    let n = u32::try_from(branches.len()).unwrap_or(u32::MAX);
                    hash.extend(quote!(.tag(#tag).count(#n)));
                    let mut bs = Vec::new();
                    for b in branches {
                        let (nodes, h) = self.seq(b);
                        bs.push(nodes);
                        hash.extend(h);
                    }
                    nodes.push(quote!(#p::Node::Parallel { branches: ::std::vec![#(#bs),*], detached: #detached }));
                }
                Item::Routed { router, routes } => {
                    self.stage_checks(router, true);
                    nodes.push(quote_spanned!(router.span()=> #p::Node::Stage(<#router as #p::StageDef>::stage())));
                    hash.extend(
                        quote_spanned!(router.span()=> .stage(&<#router as #p::StageDef>::HASH)),
                    );
                    let n = u32::try_from(routes.len()).unwrap_or(u32::MAX);
                    hash.extend(quote!(.tag(b'R').count(#n)));
                    let mut rs = Vec::new();
                    for (key, body) in routes {
                        let (nodes, h) = self.seq(body);
                        hash.extend(quote!(.part(#key.as_bytes())));
                        hash.extend(h);
                        rs.push(quote!((#p::String::from(#key), #nodes)));
                    }
                    nodes.push(quote!(#p::Node::Route { routes: ::std::vec![#(#rs),*] }));
                }
            }
        }
        hash.extend(quote!(.tag(b']')));
        (quote!(::std::vec![#(#nodes),*]), hash)
    }
}

pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<Input>(input) {
        Ok(parsed) => expand_input(parsed),
        // a block, so several `compile_error!`s form statements, not a broken expression
        Err(e) => {
            let errors = e.to_compile_error();
            quote!({ #errors })
        }
    }
}

/// `tokens` with every span set to `span`, so a const-evaluation error points
/// at the user's stage path instead of the whole macro call.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut t| {
            if let proc_macro2::TokenTree::Group(g) = &t {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                t = proc_macro2::TokenTree::Group(group);
            } else {
                t.set_span(span);
            }
            t
        })
        .collect()
}

fn expand_input(input: Input) -> TokenStream {
    let krate = &input.krate;
    let mut emit = Emit {
        p: quote!(#krate::__private),
        asserts: Vec::new(),
    };
    let (nodes, hash) = emit.seq(&input.seq);
    let p = &emit.p;
    let asserts = &emit.asserts;
    quote! {{
        const __FLUXIO_SHAPE: #p::VersionHasher = #p::VersionHasher::pipeline() #hash;
        const __FLUXIO_PLAIN: [u8; 32] = __FLUXIO_SHAPE.tag(b'N').finalize();
        const __FLUXIO_AUTO: [u8; 32] = __FLUXIO_SHAPE.tag(b'A').finalize();
        #(#asserts)*
        #p::PipelineBuilder::__new(#nodes, __FLUXIO_PLAIN, __FLUXIO_AUTO)
    }}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(src: &str) -> String {
        expand(src.parse().unwrap_or_default()).to_string()
    }

    #[test]
    fn empty_route_body_is_a_compile_error() {
        assert!(err(r#"r => { "a" => [] }"#).contains("route `a` has an empty body"));
    }

    #[test]
    fn routing_after_parallel_is_a_compile_error() {
        assert!(
            err(r#"parallel![a, b] => { "x" => c }"#)
                .contains("a routing block must follow a router stage")
        );
    }

    #[test]
    fn duplicate_route_is_a_compile_error() {
        assert!(err(r#"r => { "x" => a, "x" => b }"#).contains("route `x` appears twice"));
    }

    #[test]
    fn empty_pipeline_is_a_compile_error() {
        assert!(err("").contains("at least one stage"));
    }

    #[test]
    fn nested_sequences_flatten_to_the_same_expansion() {
        let flat = err("a, b, c");
        assert_eq!(flat, err("a, [b, c]"));
        assert_eq!(flat, err("a, pipeline![b, c]"));
    }

    #[test]
    fn shape_changes_the_hash_chain() {
        assert_ne!(err("a, b"), err("b, a"));
        assert_ne!(err("parallel![a, b]"), err("fire_and_forget![a, b]"));
        assert_ne!(err("parallel![a, b]"), err("a, b"));
    }
}
