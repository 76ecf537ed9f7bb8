//! `pipeline![...]`.
//!
//! Grammar (`seq` is a comma-separated list, a trailing comma allowed):
//!
//! ```text
//! input    := ("crate" "=" path ";")? seq
//! item     := stage
//!           | "parallel" "!" "[" branch, ... "]"
//!           | "fire_and_forget" "!" "[" branch, ... "]"
//!           | router routes
//!           | "sleep" "!" "(" (LIT_STR | "until" "=" LIT_STR) ")"
//!           | "wait" "!" "(" slot ("|" slot)* ("," option)* ")" routes?
//!           | "wait_any" "!" "(" slot ("," slot)* (";" option ("," option)*)? ")" routes?
//!           | "child" "!" "(" LIT_STR ("," child_option)* ")"
//!           | "[" seq "]" | "pipeline" "!" "[" seq "]"      (nested, flattened)
//! routes   := "=>" "{" (LIT_STR "=>" body), ... "}"
//! slot     := LIT_STR "as" TYPE ("into" LIT_STR)?
//! option   := "deadline" "=" LIT_STR | "deadline_at" "=" LIT_STR
//!           | "timeout" "=" ("fail" | "value" "(" EXPR ")")
//! child_option := ("input" | "output") "=" "[" LIT_STR, ... "]"
//!           | ("failure" | "deadline" | "poll" | "each" | "item" | "into") "=" LIT_STR
//! branch   := item | "[" seq "]"
//! body     := item | "[" seq "]"
//! stage, router := a path to a `#[stage]` function
//! ```
//!
//! Durations (`sleep!("24h")`, `deadline = "72h"`) are humantime's syntax,
//! read while the macro expands: a malformed one is a compile error at it.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
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
    Sleep(Time),
    Wait {
        slots: Vec<Slot>,
        deadline: Option<Time>,
        timeout: Timeout,
        routes: Option<Vec<(LitStr, Vec<Item>)>>,
    },
    Child(ChildItem),
}

/// `child!("billing", ...)`: a child run (rule 29).
#[derive(Default)]
struct ChildItem {
    pipeline: Option<LitStr>,
    input: Option<Vec<LitStr>>,
    output: Option<Vec<LitStr>>,
    failure: Option<LitStr>,
    deadline_ms: Option<u64>,
    poll_ms: Option<u64>,
    each: Option<LitStr>,
    item: Option<LitStr>,
    into: Option<LitStr>,
}

/// A sleep's end or a wait's deadline: a duration, or a context key.
enum Time {
    After(u64),
    Key(LitStr),
}

/// One name of a wait.
struct Slot {
    name: LitStr,
    ty: syn::Type,
    into: LitStr,
}

enum Timeout {
    Default,
    Fail,
    Value(syn::Expr),
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
        // `pipeline![]` is a pipeline that returns its input unchanged
        let seq = parse_seq(input)?;
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
    if peek_macro(input, "sleep") {
        input.parse::<syn::Ident>()?;
        input.parse::<Token![!]>()?;
        let content;
        syn::parenthesized!(content in input);
        let time = if content.peek(syn::Ident) {
            let until: syn::Ident = content.parse()?;
            if until != "until" {
                return Err(syn::Error::new(
                    until.span(),
                    "write `sleep!(\"24h\")` or `sleep!(until = \"key\")`",
                ));
            }
            content.parse::<Token![=]>()?;
            Time::Key(content.parse()?)
        } else {
            Time::After(duration_ms(&content.parse()?)?)
        };
        if !content.is_empty() {
            return Err(content.error("a sleep takes one duration or `until = \"key\"`"));
        }
        seq.push(Item::Sleep(time));
        return no_routing_after(input, "a sleep");
    }
    if peek_macro(input, "child") {
        input.parse::<syn::Ident>()?;
        input.parse::<Token![!]>()?;
        let content;
        syn::parenthesized!(content in input);
        seq.push(Item::Child(parse_child(&content)?));
        return no_routing_after(input, "a child step");
    }
    for (name, any) in [("wait", false), ("wait_any", true)] {
        if peek_macro(input, name) {
            input.parse::<syn::Ident>()?;
            input.parse::<Token![!]>()?;
            let content;
            syn::parenthesized!(content in input);
            let mut item = parse_wait(&content, any)?;
            if input.peek(Token![=>]) {
                input.parse::<Token![=>]>()?;
                if let Item::Wait { routes, .. } = &mut item {
                    *routes = Some(parse_routes(input)?);
                }
            }
            seq.push(item);
            return Ok(());
        }
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
    if input.peek(Token![|])
        || input.peek(Token![||])
        || input.peek(Token![async])
        || input.peek(Token![move])
        || input.peek(Token![static])
    {
        let message = "a closure cannot be a stage: write a function marked `#[fluxio::stage]`, e.g. `#[stage] async fn name(ctx: Context) -> StageResult { ... }`, and put its name here";
        return Err(match input.parse::<syn::ExprClosure>() {
            Ok(closure) => syn::Error::new_spanned(closure, message),
            Err(_) => syn::Error::new(input.span(), message),
        });
    }
    let path: syn::Path = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "expected a stage (the name of a function marked `#[fluxio::stage]`), `parallel![...]`, `fire_and_forget![...]`, a nested `[...]`, or a router with its routing block `router => { \"route\" => ... }`",
        )
    })?;
    if input.peek(syn::token::Paren) {
        let shown = quote!(#path).to_string().replace(' ', "");
        let message = if path.is_ident("parallel") || path.is_ident("fire_and_forget") {
            let args = input
                .fork()
                .parse::<proc_macro2::Group>()
                .map(|g| g.stream().to_string().replace(" ,", ","))
                .unwrap_or_default();
            format!(
                "a block is a macro call with `!` and square brackets: write `{shown}![{args}]`, \
                 not `{shown}({args})`"
            )
        } else {
            format!("a stage is named, not called: write `{shown}`, not `{shown}(...)`")
        };
        return Err(syn::Error::new(input.span(), message));
    }
    if !input.peek(Token![=>]) {
        seq.push(Item::Stage(path));
        return Ok(());
    }
    input.parse::<Token![=>]>()?;
    let routes = parse_routes(input)?;
    seq.push(Item::Routed {
        router: path,
        routes,
    });
    Ok(())
}

/// `{ "route" => body, ... }`.
fn parse_routes(input: ParseStream<'_>) -> syn::Result<Vec<(LitStr, Vec<Item>)>> {
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
    Ok(routes)
}

/// A duration literal (`"24h"`, humantime's syntax) in milliseconds.
fn duration_ms(lit: &LitStr) -> syn::Result<u64> {
    match humantime::parse_duration(lit.value().trim()) {
        Ok(d) => Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        Err(e) => Err(syn::Error::new(
            lit.span(),
            format!(
                "{:?} is not a duration ({e}): write one like \"24h\", \"1h 30m\" or \"250ms\"",
                lit.value()
            ),
        )),
    }
}

/// The inside of `child!(...)`: the pipeline's name, then options.
fn parse_child(content: ParseStream<'_>) -> syn::Result<ChildItem> {
    let mut child = ChildItem {
        pipeline: Some(content.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                "write `child!(\"pipeline name\", input = [\"key\"], output = [\"key\"])`",
            )
        })?),
        ..ChildItem::default()
    };
    while !content.is_empty() {
        content.parse::<Token![,]>()?;
        if content.is_empty() {
            break;
        }
        let option: syn::Ident = content.parse()?;
        content.parse::<Token![=]>()?;
        let twice = || syn::Error::new(option.span(), format!("`{option}` is given twice"));
        match option.to_string().as_str() {
            which @ ("input" | "output") => {
                let list;
                bracketed!(list in content);
                let keys: Vec<LitStr> = list
                    .parse_terminated(|p| p.parse::<LitStr>(), Token![,])?
                    .into_iter()
                    .collect();
                let slot = if which == "input" {
                    &mut child.input
                } else {
                    &mut child.output
                };
                if slot.replace(keys).is_some() {
                    return Err(twice());
                }
            }
            which @ ("failure" | "each" | "item" | "into") => {
                let slot = match which {
                    "failure" => &mut child.failure,
                    "each" => &mut child.each,
                    "item" => &mut child.item,
                    _ => &mut child.into,
                };
                if slot.replace(content.parse()?).is_some() {
                    return Err(twice());
                }
            }
            which @ ("deadline" | "poll") => {
                let ms = duration_ms(&content.parse()?)?;
                let slot = if which == "deadline" {
                    &mut child.deadline_ms
                } else {
                    &mut child.poll_ms
                };
                if slot.replace(ms).is_some() {
                    return Err(twice());
                }
            }
            _ => {
                return Err(syn::Error::new(
                    option.span(),
                    format!(
                        "unknown child option `{option}`: use `input`, `output`, `failure`, \
                         `deadline`, `poll`, or for a fan-out `each`, `item` and `into`"
                    ),
                ));
            }
        }
    }
    match (&child.each, &child.into, &child.item) {
        (Some(each), None, _) => Err(syn::Error::new(
            each.span(),
            "a fan-out needs `into = \"key\"`: the key its children's results go to",
        )),
        (None, Some(into), _) => Err(syn::Error::new(
            into.span(),
            "`into` is a fan-out's: add `each = \"key\"`, the list of items",
        )),
        (None, None, Some(item)) => Err(syn::Error::new(
            item.span(),
            "`item` is a fan-out's: add `each = \"key\"`, the list of items",
        )),
        _ => Ok(child),
    }
}

/// The inside of `wait!(...)` (`any`: `wait_any!(...)`).
fn parse_wait(content: ParseStream<'_>, any: bool) -> syn::Result<Item> {
    let mut slots = vec![parse_slot(content)?];
    loop {
        let more = if any {
            content.peek(Token![,]) && content.peek2(LitStr)
        } else {
            content.peek(Token![|])
        };
        if !more {
            break;
        }
        if any {
            content.parse::<Token![,]>()?;
        } else {
            content.parse::<Token![|]>()?;
        }
        slots.push(parse_slot(content)?);
    }
    let mut deadline = None;
    let mut timeout = Timeout::Default;
    let mut first = true;
    while !content.is_empty() {
        if first && any {
            content.parse::<Token![;]>()?;
        } else {
            content.parse::<Token![,]>()?;
        }
        first = false;
        if content.is_empty() {
            break;
        }
        let option: syn::Ident = content.parse()?;
        content.parse::<Token![=]>()?;
        match option.to_string().as_str() {
            "deadline" => deadline = Some(Time::After(duration_ms(&content.parse()?)?)),
            "deadline_at" => deadline = Some(Time::Key(content.parse()?)),
            "timeout" => {
                let what: syn::Ident = content.parse()?;
                timeout = match what.to_string().as_str() {
                    "fail" => Timeout::Fail,
                    "value" => {
                        let inner;
                        syn::parenthesized!(inner in content);
                        Timeout::Value(inner.parse()?)
                    }
                    _ => {
                        return Err(syn::Error::new(
                            what.span(),
                            "a wait's timeout is `fail` or `value(expr)`; a routing block after the wait routes it with a `\"timeout\"` route",
                        ));
                    }
                };
            }
            _ => {
                return Err(syn::Error::new(
                    option.span(),
                    "a wait's options are `deadline = \"72h\"`, `deadline_at = \"key\"` and `timeout = fail | value(expr)`",
                ));
            }
        }
    }
    if slots.len() > 1 && !any {
        // `wait!(a | b)` is fine too: one wait, several names
    }
    Ok(Item::Wait {
        slots,
        deadline,
        timeout,
        routes: None,
    })
}

/// `"name" as Type (into "key")?`.
fn parse_slot(input: ParseStream<'_>) -> syn::Result<Slot> {
    let name: LitStr = input.parse().map_err(|e| {
        syn::Error::new(
            e.span(),
            "a wait names its signal and the payload's type: `wait!(\"approval\" as Approval)`",
        )
    })?;
    input.parse::<Token![as]>()?;
    let ty: syn::Type = input.parse()?;
    let mut into = name.clone();
    if input.peek(syn::Ident)
        && input
            .fork()
            .parse::<syn::Ident>()
            .is_ok_and(|i| i == "into")
    {
        input.parse::<syn::Ident>()?;
        into = input.parse()?;
    }
    Ok(Slot { name, ty, into })
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
    /// `const` items that check each stage and its place (see `lookup`).
    checks: Vec<TokenStream>,
    /// Each place a stage is named.
    lookups: Vec<Lookup>,
}

/// A stage named in the pipeline (see `expand_input`).
struct Lookup {
    /// The path as the user wrote it.
    path: syn::Path,
    /// The name it is looked up by: the stage's hidden type, or a fallback.
    alias: syn::Ident,
    /// The generated trait that fails for the fallback, saying "not a stage".
    is_stage: syn::Ident,
}

impl Emit {
    /// The name the stage at `path` is looked up by (see `expand_input`),
    /// after checking that it is a stage and fits its place: a router before
    /// a routing block (`router`), any other stage elsewhere. Each check
    /// names a trait on the stage's `ReturnsRoute` in a `const`, so that a
    /// misuse is a trait error at the user's token whose message (from
    /// `#[diagnostic::on_unimplemented]`) names the stage.
    fn lookup(&mut self, path: &syn::Path, router: bool) -> syn::Ident {
        let p = &self.p;
        let i = self.lookups.len();
        let alias = format_ident!("__fluxio_stage_{}", i, span = path.span());
        let is_stage = format_ident!("__fluxio_is_stage_{}", i, span = path.span());
        let place = if router {
            format_ident!("Router", span = path.span())
        } else {
            format_ident!("SequenceStage", span = path.span())
        };
        let returns = quote_spanned!(path.span()=> <#alias as #p::StageDef>::ReturnsRoute);
        self.checks.push(quote_spanned! {path.span()=>
            const _: () = <#returns as __fluxio_fallback::#is_stage>::OK;
            const _: () = <#returns as #p::used_as::#place<#alias>>::OK;
        });
        self.lookups.push(Lookup {
            path: path.clone(),
            alias: alias.clone(),
            is_stage,
        });
        alias
    }

    /// The runtime nodes and the hasher calls for a sequence: one call of a
    /// `VersionHasher` method per node (`fluxio-core`'s `version` module owns
    /// the encoding; nothing here knows its bytes).
    fn seq(&mut self, items: &[Item]) -> (TokenStream, TokenStream) {
        let p = self.p.clone();
        let mut nodes = Vec::new();
        let mut hash = quote!(.seq_start());
        for item in items {
            match item {
                Item::Stage(path) => {
                    let alias = self.lookup(path, false);
                    nodes.push(quote_spanned!(path.span()=> #p::Node::Stage(<#alias as #p::StageDef>::stage())));
                    hash.extend(
                        quote_spanned!(path.span()=> .stage(&<#alias as #p::StageDef>::HASH)),
                    );
                }
                Item::Parallel { detached, branches } => {
                    let block = if *detached {
                        format_ident!("fire_and_forget")
                    } else {
                        format_ident!("parallel")
                    };
                    let n = u32::try_from(branches.len()).unwrap_or(u32::MAX);
                    hash.extend(quote!(.#block(#n)));
                    let mut bs = Vec::new();
                    for b in branches {
                        let (nodes, h) = self.seq(b);
                        bs.push(nodes);
                        hash.extend(h);
                    }
                    nodes.push(quote!(#p::Node::Parallel { branches: #p::vec![#(#bs),*], detached: #detached }));
                }
                Item::Routed { router, routes } => {
                    let alias = self.lookup(router, true);
                    nodes.push(quote_spanned!(router.span()=> #p::Node::Stage(<#alias as #p::StageDef>::stage())));
                    hash.extend(
                        quote_spanned!(router.span()=> .stage(&<#alias as #p::StageDef>::HASH)),
                    );
                    self.routes(routes, &mut nodes, &mut hash);
                }
                Item::Sleep(time) => match time {
                    Time::After(ms) => {
                        hash.extend(quote!(.sleep_for(#ms)));
                        nodes.push(quote!(#p::Node::Sleep(#p::Sleep::after(#p::Duration::from_millis(#ms)))));
                    }
                    Time::Key(key) => {
                        hash.extend(quote!(.sleep_until(#key)));
                        nodes.push(quote!(#p::Node::Sleep(#p::Sleep::until_key(#key))));
                    }
                },
                Item::Child(child) => {
                    let (node, h) = self.child(child);
                    nodes.push(node);
                    hash.extend(h);
                }
                Item::Wait {
                    slots,
                    deadline,
                    timeout,
                    routes,
                } => self.wait(
                    slots,
                    deadline.as_ref(),
                    timeout,
                    routes.as_deref(),
                    &mut nodes,
                    &mut hash,
                ),
            }
        }
        hash.extend(quote!(.seq_end()));
        (quote!(#p::vec![#(#nodes),*]), hash)
    }
}

impl Emit {
    /// A child step's node and its hasher calls.
    fn child(&self, child: &ChildItem) -> (TokenStream, TokenStream) {
        let p = &self.p;
        let name = child
            .pipeline
            .as_ref()
            .map(LitStr::value)
            .unwrap_or_default();
        let mut node = quote!(#p::Child::of(#name));
        let mut hash = quote!(.child(#name));
        for (keys, method) in [
            (&child.input, quote!(input)),
            (&child.output, quote!(output)),
        ] {
            match keys {
                None => hash.extend(quote!(.child_keys(#p::Option::None))),
                Some(keys) => {
                    node.extend(quote!(.#method([#(#keys),*])));
                    hash.extend(quote!(.child_keys(#p::Option::Some(&[#(#keys),*]))));
                }
            }
        }
        if let (Some(each), Some(into)) = (&child.each, &child.into) {
            let item = child
                .item
                .as_ref()
                .map_or_else(|| "item".to_owned(), LitStr::value);
            node.extend(quote!(.each(#each, #item, #into)));
            hash.extend(quote!(.child_each(#each, #item, #into)));
        }
        let failure = match &child.failure {
            None => quote!(#p::Option::None),
            Some(key) => {
                node.extend(quote!(.failure_into(#key)));
                quote!(#p::Option::Some(#key))
            }
        };
        let deadline = match child.deadline_ms {
            None => quote!(#p::Option::None),
            Some(ms) => {
                node.extend(quote!(.deadline(#p::Duration::from_millis(#ms))));
                quote!(#p::Option::Some(#ms))
            }
        };
        if let Some(ms) = child.poll_ms {
            node.extend(quote!(.poll(#p::Duration::from_millis(#ms))));
        }
        hash.extend(quote!(.child_end(#failure, #deadline)));
        (quote!(#p::Node::Child(#node)), hash)
    }

    /// A wait's node (and its routing block's) and its hasher calls.
    fn wait(
        &mut self,
        slots: &[Slot],
        deadline: Option<&Time>,
        timeout: &Timeout,
        routes: Option<&[(LitStr, Vec<Item>)]>,
        nodes: &mut Vec<TokenStream>,
        hash: &mut TokenStream,
    ) {
        let p = self.p.clone();
        let n = u32::try_from(slots.len()).unwrap_or(u32::MAX);
        hash.extend(quote!(.wait(#n)));
        let mut wait = TokenStream::new();
        for (i, Slot { name, ty, into }) in slots.iter().enumerate() {
            let digest = crate::hash::stage_hash(&[quote!(#ty)]);
            hash.extend(quote!(.wait_name(#name, #into, &[#(#digest),*])));
            wait = if i == 0 {
                quote_spanned!(ty.span()=> #p::Wait::on::<#ty>(#name).into_key(#into))
            } else {
                quote_spanned!(ty.span()=> #wait.or::<#ty>(#name).into_key(#into))
            };
        }
        match deadline {
            None => hash.extend(quote!(.no_deadline())),
            Some(Time::After(ms)) => {
                hash.extend(quote!(.deadline_after(#ms)));
                wait = quote!(#wait.deadline(#p::Until::After(#p::Duration::from_millis(#ms))));
            }
            Some(Time::Key(key)) => {
                hash.extend(quote!(.deadline_at(#key)));
                wait = quote!(#wait.deadline(#p::Until::Key(#p::String::from(#key))));
            }
        }
        match timeout {
            Timeout::Default => hash.extend(quote!(.timeout_default())),
            Timeout::Fail => {
                hash.extend(quote!(.timeout_fail()));
                wait = quote!(#wait.on_timeout(#p::OnTimeout::Fail));
            }
            Timeout::Value(expr) => {
                let digest = crate::hash::stage_hash(&[quote!(#expr)]);
                hash.extend(quote!(.timeout_value(&[#(#digest),*])));
                wait = quote!(#wait.on_timeout_value(#p::timeout_value(&(#expr))));
            }
        }
        nodes.push(quote!(#p::Node::Wait(#wait)));
        if let Some(routes) = routes {
            self.routes(routes, nodes, hash);
        }
    }

    /// The routing block after a router or a wait, and its hasher calls.
    fn routes(
        &mut self,
        routes: &[(LitStr, Vec<Item>)],
        nodes: &mut Vec<TokenStream>,
        hash: &mut TokenStream,
    ) {
        let p = self.p.clone();
        let n = u32::try_from(routes.len()).unwrap_or(u32::MAX);
        hash.extend(quote!(.routes(#n)));
        let mut rs = Vec::new();
        for (key, body) in routes {
            let (body_nodes, h) = self.seq(body);
            hash.extend(quote!(.route_key(#key)));
            hash.extend(h);
            rs.push(quote!((#p::String::from(#key), #body_nodes)));
        }
        nodes.push(quote!(#p::Node::Route { routes: #p::vec![#(#rs),*] }));
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

/// The expansion. Stages are looked up by alias, so that a function without
/// `#[stage]` gets fluxio's message instead of "expected type, found
/// function": an outer block glob-imports a fallback type per stage, and an
/// inner block imports the user's path under the same name. An import
/// shadows a glob, in the namespaces the path has: a `#[stage]` function has
/// a type (the hidden struct), so its alias names it; a plain function has
/// only a value, so the type lookup falls through to the fallback.
///
/// The fallback implements `StageDef` (so the rest of the expansion compiles
/// and adds no error), with `ReturnsRoute = NotAStage`. What it fails is a
/// trait generated per stage name, implemented for every real stage's
/// `ReturnsRoute` (`used_as::IsStage`), whose `on_unimplemented` message
/// quotes the path as written: "`inner::refund` is not a fluxio stage". (A
/// message naming a type instead would show a generated path whenever two
/// fallbacks share a name.) A name with a type that is not a stage fails
/// `StageDef` itself.
fn expand_input(input: Input) -> TokenStream {
    let krate = &input.krate;
    let mut emit = Emit {
        p: quote!(#krate::__private),
        checks: Vec::new(),
        lookups: Vec::new(),
    };
    let (nodes, hash) = emit.seq(&input.seq);
    let p = &emit.p;
    let checks = &emit.checks;
    let aliases: Vec<&syn::Ident> = emit.lookups.iter().map(|l| &l.alias).collect();
    let fallbacks = emit.lookups.iter().map(|Lookup { path, alias, is_stage }| {
        // braces escaped: the message is a format string
        let shown = quote!(#path)
            .to_string()
            .replace(' ', "")
            .replace('{', "{{")
            .replace('}', "}}");
        let message = format!("`{shown}` is not a fluxio stage");
        quote! {
            pub struct #alias;
            #[diagnostic::on_unimplemented(
                message = #message,
                label = "not a stage",
                note = "mark the function with `#[fluxio::stage]`; `pipeline!` takes stage functions, `parallel![...]`, `fire_and_forget![...]` and routing blocks"
            )]
            pub trait #is_stage {
                const OK: () = ();
            }
            #[diagnostic::do_not_recommend]
            impl<T: #p::used_as::IsStage> #is_stage for T {}
        }
    });
    let imports = emit.lookups.iter().map(|Lookup { path, alias, .. }| {
        quote_spanned!(path.span()=> #[allow(unused_imports)] use #path as #alias;)
    });
    quote! {{
        #[allow(non_camel_case_types, non_snake_case, unreachable_pub, missing_debug_implementations, dead_code, unused_imports)]
        mod __fluxio_fallback {
            #(#fallbacks)*
        }
        #(
            #[diagnostic::do_not_recommend]
            impl #p::StageDef for __fluxio_fallback::#aliases {
                type ReturnsRoute = #p::used_as::NotAStage;
                const HASH: [u8; 32] = [0; 32];
                const ROUTER: bool = false;
                fn stage() -> #p::Stage {
                    #p::stand_in_stage()
                }
            }
        )*
        #[allow(unused_imports)]
        use __fluxio_fallback::*;
        {
            #(#imports)*
            const __FLUXIO_SHAPE: #p::VersionHasher = #p::VersionHasher::pipeline() #hash;
            const __FLUXIO_PLAIN: [u8; 32] = __FLUXIO_SHAPE.finish(false);
            const __FLUXIO_AUTO: [u8; 32] = __FLUXIO_SHAPE.finish(true);
            #(#checks)*
            #p::pipeline_builder(#nodes, __FLUXIO_PLAIN, __FLUXIO_AUTO)
        }
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
    fn empty_pipeline_is_accepted() {
        let out = err("");
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("pipeline_builder"), "{out}");
    }

    #[test]
    fn nested_sequences_flatten_to_the_same_expansion() {
        let flat = err("a, b, c");
        assert_eq!(flat, err("a, [b, c]"));
        assert_eq!(flat, err("a, pipeline![b, c]"));
    }

    #[test]
    fn the_encoding_is_named_not_spelled() {
        // the tag bytes live in fluxio-core's `version` module only
        let out = err(r#"a, parallel![b, [c]], fire_and_forget![d], r => { "x" => e }"#);
        assert!(!out.contains("b'"), "{out}");
        assert!(!out.contains(". tag"), "{out}");
        for call in [
            "seq_start ()",
            "seq_end ()",
            "parallel (2u32)",
            "fire_and_forget (1u32)",
            "routes (1u32)",
            "route_key (\"x\")",
            "finish (false)",
            "finish (true)",
        ] {
            assert!(out.contains(call), "missing `{call}` in {out}");
        }
    }

    #[test]
    fn a_name_is_checked_with_a_message_quoting_it() {
        let out = err("inner::refund, r => { \"x\" => a }");
        assert!(
            out.contains("\"`inner::refund` is not a fluxio stage\""),
            "{out}"
        );
        assert!(out.contains("SequenceStage"), "{out}");
        assert!(out.contains("Router"), "{out}");
    }

    #[test]
    fn sleeps_and_waits_expand_to_nodes_and_hasher_calls() {
        let out = err(
            r#"a, sleep!("1h 30m"), sleep!(until = "at"), wait!("ok" as Approval into "decision", deadline = "72h", timeout = fail), b"#,
        );
        assert!(!out.contains("compile_error"), "{out}");
        for call in [
            "sleep_for (5400000u64)",
            "sleep_until (\"at\")",
            "wait (1u32)",
            "wait_name (\"ok\" , \"decision\"",
            "deadline_after (259200000u64)",
            "timeout_fail ()",
            "Wait :: on :: < Approval > (\"ok\") . into_key (\"decision\")",
        ] {
            assert!(out.contains(call), "missing `{call}` in {out}");
        }
    }

    #[test]
    fn a_wait_routes_and_wait_any_takes_several_names() {
        let out = err(
            r#"wait_any!("yes" as Yes, "no" as No; deadline_at = "due", timeout = value(Default::default())) => { "yes" => a, "no" => b, "timeout" => c }"#,
        );
        assert!(!out.contains("compile_error"), "{out}");
        for call in [
            "wait (2u32)",
            "deadline_at (\"due\")",
            "timeout_value",
            "routes (3u32)",
            ". or :: < No > (\"no\")",
        ] {
            assert!(out.contains(call), "missing `{call}` in {out}");
        }
        let piped = err(r#"wait!("yes" as Yes | "no" as No)"#);
        assert!(piped.contains("wait (2u32)"), "{piped}");
    }

    #[test]
    fn a_malformed_duration_or_option_is_a_compile_error_at_it() {
        assert!(err(r#"sleep!("soon")"#).contains("is not a duration"));
        assert!(
            err(r#"wait!("ok" as bool, deadline = "3 fortnights")"#).contains("is not a duration")
        );
        assert!(err(r#"wait!("ok" as bool, within = "1h")"#).contains("a wait's options are"));
        assert!(err(r#"wait!("ok" as bool, timeout = retry)"#).contains("a wait's timeout is"));
        assert!(err(r#"wait!(ok as bool)"#).contains("a wait names its signal"));
        assert!(err(r#"sleep!("1h") => { "x" => a }"#).contains("a routing block must follow"));
    }

    #[test]
    fn child_steps_expand_to_a_node_and_hasher_calls_and_misuse_is_an_error() {
        let out = err(r#"a, child!("billing", input = ["x"], failure = "e", poll = "5s"), b"#);
        assert!(out.contains("Child :: of (\"billing\")"), "{out}");
        assert!(out.contains(". child (\"billing\")"), "{out}");
        assert!(out.contains("from_millis (5000u64)"), "{out}");
        let fan = err(r#"child!("billing", each = "orders", into = "out")"#);
        assert!(
            fan.contains(". each (\"orders\" , \"item\" , \"out\")"),
            "{fan}"
        );
        assert!(fan.contains("child_each"), "{fan}");
        assert!(err(r#"child!("k", each = "a")"#).contains("needs `into"));
        assert!(err(r#"child!("k", into = "a")"#).contains("is a fan-out's"));
        assert!(err(r#"child!("k", item = "a")"#).contains("is a fan-out's"));
        assert!(err(r#"child!("k", colour = "red")"#).contains("unknown child option `colour`"));
        assert!(err(r#"child!("k", poll = "soon")"#).contains("is not a duration"));
        assert!(err(r#"child!("k", failure = "a", failure = "b")"#).contains("given twice"));
        assert!(err(r#"child!(billing)"#).contains("pipeline name"));
        assert!(err(r#"child!("k") => { "x" => a }"#).contains("a routing block must follow"));
        // the poll is not part of the version; the other options are
        assert_eq!(
            err(r#"child!("k")"#).replace("5000u64", ""),
            err(r#"child!("k")"#)
        );
    }

    #[test]
    fn a_sleeps_duration_and_a_waits_names_change_the_hash_chain() {
        assert_ne!(err(r#"sleep!("1h")"#), err(r#"sleep!("2h")"#));
        assert_eq!(err(r#"sleep!("1h")"#), err(r#"sleep!("60m")"#));
        assert_ne!(err(r#"wait!("a" as T)"#), err(r#"wait!("b" as T)"#));
        assert_ne!(err(r#"wait!("a" as T)"#), err(r#"wait!("a" as U)"#));
    }

    #[test]
    fn shape_changes_the_hash_chain() {
        assert_ne!(err("a, b"), err("b, a"));
        assert_ne!(err("parallel![a, b]"), err("fire_and_forget![a, b]"));
        assert_ne!(err("parallel![a, b]"), err("a, b"));
    }
}
