//! `#[stage]`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::parse::Parser as _;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Attribute, Expr, ExprLit, FnArg, ItemFn, Lit, LitStr, Meta, ReturnType, Token};

use crate::hash::stage_hash;
use crate::waits::may_wait;

/// The options of `#[stage(...)]`.
struct Options {
    name: Option<LitStr>,
    reads: Option<Vec<KeyEntry>>,
    writes: Option<Vec<KeyEntry>>,
    timeout_ms: Option<u64>,
    input: Option<syn::Type>,
    output: Option<syn::Type>,
    /// The helpers whose code counts in the stage's hash (rule 34).
    uses: Vec<syn::Path>,
    /// The stage that compensates this one (rule 35).
    compensate: Option<syn::Path>,
    /// A point of no return (rule 35).
    pivot: bool,
    krate: syn::Path,
}

/// Expands `#[stage(args)] item`.
///
/// A mistake gives one error, and the function is always emitted (so the IDE
/// keeps working):
///
/// - a bad option or signature: the errors, the function, and the hidden
///   type with defaults (`refused`), so that a `pipeline!` naming the stage
///   adds no error of its own;
/// - a body syn cannot parse: the function with its body as written, and
///   the whole expansion; rustc reports the error in the body;
/// - anything else syn cannot parse: the error and the tokens as written.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let func = match StageFn::parse_or_emit(item) {
        Ok(f) => f,
        Err(out) => return out,
    };
    let (opts, opt_errors) = parse_options(args.clone());
    let sig = check_signature(&func.sig);
    let hash = func.hash(args);
    match (opt_errors, sig) {
        (None, Ok(sig)) => expand_fn(&func, &opts, &sig, &hash),
        (opt_errors, sig) => {
            let mut errors = opt_errors;
            if let Err(e) = sig {
                combine(&mut errors, e);
            }
            let mut out = errors.map(|e| e.to_compile_error()).unwrap_or_default();
            out.extend(refused(&func, &opts, &hash));
            out
        }
    }
}

/// The function `#[stage]` is on.
pub(crate) struct StageFn {
    /// Its attributes other than `#[stage]`, inner ones included.
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: syn::Visibility,
    pub(crate) sig: syn::Signature,
    /// The body's tokens as hashed: syn's `Block` when it parses (the stage
    /// hash has always been taken over it), else the tokens as written.
    pub(crate) body: TokenStream,
    /// The function as emitted.
    pub(crate) item: TokenStream,
}

impl StageFn {
    /// [`parse`](Self::parse), or what to emit when syn cannot parse the
    /// item at all: the error, and the tokens as written.
    pub(crate) fn parse_or_emit(item: TokenStream) -> Result<Self, TokenStream> {
        Self::parse(item.clone()).map_err(|e| {
            let mut out = e.to_compile_error();
            out.extend(item);
            out
        })
    }

    /// The function's own hash (`fluxio/stage/v1`): its attribute's `args`,
    /// its other attributes, its signature and its body.
    pub(crate) fn hash(&self, args: TokenStream) -> [u8; 32] {
        stage_hash(&[
            args,
            self.attrs.iter().map(ToTokens::to_token_stream).collect(),
            self.sig.to_token_stream(),
            self.body.clone(),
        ])
    }

    /// Parses `item`; a body that syn cannot parse is kept as tokens
    /// (rustc then reports the error in it, at the user's tokens), as
    /// tracing-attributes does.
    pub(crate) fn parse(item: TokenStream) -> syn::Result<Self> {
        if let Ok(f) = syn::parse2::<ItemFn>(item.clone()) {
            return Ok(StageFn {
                body: f.block.to_token_stream(),
                item: f.to_token_stream(),
                attrs: f.attrs,
                vis: f.vis,
                sig: f.sig,
            });
        }
        let RawBodyFn {
            attrs,
            vis,
            sig,
            body,
        } = syn::parse2(item.clone())?;
        Ok(StageFn {
            attrs,
            vis,
            sig,
            body,
            item,
        })
    }
}

/// A function whose body is not parsed: attributes, visibility, signature,
/// then the rest as tokens.
struct RawBodyFn {
    attrs: Vec<Attribute>,
    vis: syn::Visibility,
    sig: syn::Signature,
    body: TokenStream,
}

impl Parse for RawBodyFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        Ok(RawBodyFn {
            attrs: input.call(Attribute::parse_outer)?,
            vis: input.parse()?,
            sig: input.parse()?,
            body: input.parse()?,
        })
    }
}

pub(crate) fn combine(acc: &mut Option<syn::Error>, e: syn::Error) {
    match acc {
        Some(a) => a.combine(e),
        None => *acc = Some(e),
    }
}

/// Records that the signature lacks `what` (pointing at `span`), and gives
/// nothing in its place.
fn missing<T>(errors: &mut Option<syn::Error>, span: Span, what: &str) -> Option<T> {
    combine(
        errors,
        syn::Error::new(span, format!("missing {what}: {SIGNATURE}")),
    );
    None
}

/// A `reads`/`writes` entry: a string literal, or a typed key constant
/// (`fluxio::Key<T>`), whose name the generated code reads at compile time.
enum KeyEntry {
    Literal(LitStr),
    Typed(syn::Path),
}

fn key_list(expr: &Expr, option: &str) -> syn::Result<Vec<KeyEntry>> {
    let Expr::Array(arr) = expr else {
        return Err(syn::Error::new_spanned(
            expr,
            format!("`{option}` takes a list of keys: {option} = [\"a\", ORDER_ID]"),
        ));
    };
    arr.elems
        .iter()
        .map(|e| match e {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Ok(KeyEntry::Literal(s.clone())),
            Expr::Path(p) if p.qself.is_none() => Ok(KeyEntry::Typed(p.path.clone())),
            other => Err(syn::Error::new_spanned(
                other,
                "a key is a string literal or a `fluxio::Key` constant",
            )),
        })
        .collect()
}

/// The typed keys of `reads` and `writes`, whose names count in the hash.
fn typed_keys(opts: &Options) -> Vec<&syn::Path> {
    [&opts.reads, &opts.writes]
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|k| match k {
            KeyEntry::Typed(p) => Some(p),
            KeyEntry::Literal(_) => None,
        })
        .collect()
}

/// `uses = [helper, module::helper]`: the functions (marked `#[helper]` or
/// `#[stage]`) whose code counts in the hash.
pub(crate) fn path_list(expr: &Expr) -> syn::Result<Vec<syn::Path>> {
    let Expr::Array(arr) = expr else {
        return Err(syn::Error::new_spanned(
            expr,
            "`uses` takes a list of functions: uses = [price_with_tax, tax::rate]",
        ));
    };
    arr.elems
        .iter()
        .map(|e| match e {
            Expr::Path(p) if p.qself.is_none() => Ok(p.path.clone()),
            other => Err(syn::Error::new_spanned(
                other,
                "a helper is named by its path, as `price_with_tax` or `tax::rate`: not a call or an expression",
            )),
        })
        .collect()
}

/// The `HASH` of a stage's or helper's hidden type: its own hash, combined
/// with its helpers' when it declares any (`version::with_helpers`).
pub(crate) fn hash_const(
    p: &TokenStream,
    own: &[u8; 32],
    uses: &[syn::Path],
    keys: &[&syn::Path],
) -> TokenStream {
    let own = if uses.is_empty() {
        quote!([#(#own),*])
    } else {
        let helpers = uses.iter().map(|h| {
            quote_spanned!(h.span()=> (<#h as #p::HelperDef>::NAME, &<#h as #p::HelperDef>::HASH))
        });
        quote!(#p::with_helpers(&[#(#own),*], &[#(#helpers),*]))
    };
    if keys.is_empty() {
        return own;
    }
    let names = keys
        .iter()
        .map(|k| quote_spanned!(k.span()=> #p::key_of(&#k)));
    quote!(#p::with_keys(&#own, &[#(#names),*]))
}

/// `input = SomeType` / `output = SomeType`: a type that deserializes from the context.
fn schema_type(expr: &Expr) -> syn::Result<syn::Type> {
    syn::parse2::<syn::Type>(expr.to_token_stream()).map_err(|_| {
        syn::Error::new_spanned(
            expr,
            "`input` and `output` take a type that implements `Deserialize`",
        )
    })
}

pub(crate) fn lit_str(expr: &Expr, option: &str) -> syn::Result<LitStr> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s.clone()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{option}` takes a string literal"),
        )),
    }
}

/// `"250ms"`, `"5s"`, `"2m"`, `"1h"` to milliseconds.
fn parse_duration(lit: &LitStr) -> syn::Result<u64> {
    let s = lit.value();
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let err = || {
        syn::Error::new(
            lit.span(),
            format!(
                "invalid timeout {s:?}: write a whole number and a unit, e.g. \"250ms\", \"5s\", \"2m\", \"1h\""
            ),
        )
    };
    let factor = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(err()),
    };
    let too_long = || {
        syn::Error::new(
            lit.span(),
            format!("timeout {s:?} is too long: at most {} ms", u64::MAX),
        )
    };
    let n: u64 = match num.parse() {
        Ok(n) => n,
        // all digits, and a unit: a number past u64
        Err(_) if !num.is_empty() => return Err(too_long()),
        Err(_) => return Err(err()),
    };
    let ms = n.checked_mul(factor).ok_or_else(too_long)?;
    if ms == 0 {
        return Err(syn::Error::new(
            lit.span(),
            "a timeout must be longer than zero",
        ));
    }
    Ok(ms)
}

/// Calls `apply` with each `option = value` of an attribute's `args`, and
/// returns every error at once (serde's `Ctxt`): one that is not
/// `option = value` (`expected` says what is), an option given twice, and
/// what `apply` refuses (an unknown option, a malformed value). `what`
/// names the attribute in messages (`stage`, `helper`).
pub(crate) fn each_option(
    args: TokenStream,
    (what, expected): (&str, &str),
    mut apply: impl FnMut(&str, &syn::MetaNameValue) -> syn::Result<()>,
) -> Option<syn::Error> {
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args) {
        Ok(metas) => metas,
        Err(e) => return Some(e),
    };
    let mut errors: Option<syn::Error> = None;
    let mut seen: Vec<String> = Vec::new();
    for meta in metas {
        // a flag (`pivot`) is its name alone: `pivot = true`
        let flag = match &meta {
            Meta::Path(path) if path.is_ident("pivot") => Some(syn::MetaNameValue {
                path: path.clone(),
                eq_token: Token![=](path.span()),
                value: syn::parse_quote_spanned!(path.span()=> true),
            }),
            _ => None,
        };
        let Some(nv) = flag.as_ref().or(match &meta {
            Meta::NameValue(nv) => Some(nv),
            _ => None,
        }) else {
            combine(&mut errors, syn::Error::new_spanned(&meta, expected));
            continue;
        };
        let key = nv
            .path
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_default();
        if !key.is_empty() && seen.contains(&key) {
            combine(
                &mut errors,
                syn::Error::new_spanned(
                    &nv.path,
                    format!("the {what} option `{key}` is given twice: give each option once"),
                ),
            );
            continue;
        }
        seen.push(key.clone());
        if let Err(e) = apply(&key, nv) {
            combine(&mut errors, e);
        }
    }
    errors
}

/// The options, each one in error left at its default, and the errors, all
/// of them: a stage with a bad option is still emitted, with the options
/// that are right (`crate` above all).
fn parse_options(args: TokenStream) -> (Options, Option<syn::Error>) {
    let mut opts = Options {
        name: None,
        reads: None,
        writes: None,
        timeout_ms: None,
        input: None,
        output: None,
        uses: Vec::new(),
        compensate: None,
        pivot: false,
        krate: syn::parse_quote!(::fluxio),
    };
    let expected = "expected `option = value` or `pivot`: name, reads, writes, timeout, input, \
                    output, uses, compensate, pivot or crate";
    let errors = each_option(args, ("stage", expected), |key, nv| match key {
        "name" => lit_str(&nv.value, "name").map(|s| opts.name = Some(s)),
        "reads" => key_list(&nv.value, "reads").map(|v| opts.reads = Some(v)),
        "writes" => key_list(&nv.value, "writes").map(|v| opts.writes = Some(v)),
        "timeout" => lit_str(&nv.value, "timeout")
            .and_then(|s| parse_duration(&s))
            .map(|ms| opts.timeout_ms = Some(ms)),
        "input" => schema_type(&nv.value).map(|t| opts.input = Some(t)),
        "output" => schema_type(&nv.value).map(|t| opts.output = Some(t)),
        "uses" => path_list(&nv.value).map(|v| opts.uses = v),
        "compensate" => match &nv.value {
            Expr::Path(p) if p.qself.is_none() => {
                opts.compensate = Some(p.path.clone());
                Ok(())
            }
            other => Err(syn::Error::new_spanned(
                other,
                "`compensate` takes the stage that undoes this one: compensate = refund",
            )),
        },
        "pivot" => match &nv.value {
            Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Bool(b),
                ..
            }) => {
                opts.pivot = b.value;
                Ok(())
            }
            other => Err(syn::Error::new_spanned(
                other,
                "`pivot` is a flag: write `pivot` (or `pivot = true`)",
            )),
        },
        "crate" => lit_str(&nv.value, "crate")
            .and_then(|s| s.parse::<syn::Path>())
            .map(|p| opts.krate = p),
        _ => Err(syn::Error::new_spanned(
            &nv.path,
            format!(
                "unknown stage option `{}`; expected one of: name, reads, writes, timeout, input, output, uses, compensate, pivot, crate",
                nv.path.to_token_stream()
            ),
        )),
    });
    (opts, errors)
}

const SIGNATURE: &str = "a stage is `async fn name(ctx: Context) -> Result<Context, E>` (or a plain `fn`, or `-> Result<fluxio::Route, E>` for a router, or `async fn name(ctx: Context, out: fluxio::Emitter) -> Result<Context, E>` for a stream stage), then any resources it takes, as `db: fluxio::Resource<T>`";

/// Whether `ty` is a path whose last segment is `name` (`Emitter`,
/// `fluxio::Emitter`, ...); `generic`: with or without arguments.
fn last_segment_is(ty: &syn::Type, name: &str, generic: bool) -> bool {
    matches!(ty, syn::Type::Path(p) if p.qself.is_none()
        && p.path.segments.last().is_some_and(|s| s.ident == name && (generic || s.arguments.is_empty())))
}

/// Whether `ty` names the emitter (`Emitter`, `fluxio::Emitter`, ...).
fn is_emitter(ty: &syn::Type) -> bool {
    last_segment_is(ty, "Emitter", false)
}

/// What `check_signature` found.
struct Signature {
    /// The context argument.
    ctx: FnArg,
    /// The return type.
    ret: syn::Type,
    /// Whether the second argument is the `Emitter`.
    stream: bool,
    /// The types of the resource arguments, in order.
    resources: Vec<syn::Type>,
}

/// Checks the context argument: by value, first.
fn check_context(pat: &syn::PatType, errors: &mut Option<syn::Error>) {
    let ty = &*pat.ty;
    if let syn::Type::Reference(r) = ty {
        combine(
            errors,
            syn::Error::new_spanned(
                r,
                "a stage takes its context by value and returns the new one: write `ctx: Context`, not a reference",
            ),
        );
    } else if is_emitter(ty) || last_segment_is(ty, "Resource", true) {
        combine(
            errors,
            syn::Error::new_spanned(
                ty,
                format!("the context comes first: `fn name(ctx: Context, ...)`; {SIGNATURE}"),
            ),
        );
    }
}

/// The context argument, the return type, whether it is a stream stage and
/// its resource arguments.
fn check_signature(sig: &syn::Signature) -> syn::Result<Signature> {
    let mut errors: Option<syn::Error> = None;
    if let Some(c) = &sig.constness {
        combine(
            &mut errors,
            syn::Error::new_spanned(c, "a stage cannot be a `const fn`"),
        );
    }
    if let Some(u) = &sig.unsafety {
        combine(
            &mut errors,
            syn::Error::new_spanned(u, "a stage cannot be `unsafe`"),
        );
    }
    if let Some(a) = &sig.abi {
        combine(
            &mut errors,
            syn::Error::new_spanned(a, "a stage cannot have an `extern` ABI"),
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        combine(
            &mut errors,
            syn::Error::new_spanned(&sig.generics, "a stage cannot be generic"),
        );
    }
    if let Some(v) = &sig.variadic {
        combine(
            &mut errors,
            syn::Error::new_spanned(v, "a stage cannot be variadic"),
        );
    }
    let typed = |arg: &FnArg, errors: &mut Option<syn::Error>| match arg {
        FnArg::Receiver(r) => {
            combine(
                errors,
                syn::Error::new_spanned(
                    r,
                    "a stage is a free function, not a method: move it out of the `impl` block \
                     to module level and take `ctx: Context` in place of `self` (reach shared \
                     state through `Resource<T>` arguments registered with \
                     `PipelineBuilder::resource`)",
                ),
            );
            None
        }
        FnArg::Typed(pat) => Some(pat.clone()),
    };
    let mut inputs = sig.inputs.iter();
    let ctx = match inputs.next() {
        Some(first) => {
            let pat = typed(first, &mut errors);
            if let Some(pat) = &pat {
                check_context(pat, &mut errors);
            }
            pat.map(FnArg::Typed)
        }
        None => missing(
            &mut errors,
            sig.paren_token.span.join(),
            "the context argument",
        ),
    };
    let mut stream = false;
    let mut resources = Vec::new();
    for (i, arg) in inputs.enumerate() {
        let Some(pat) = typed(arg, &mut errors) else {
            continue;
        };
        if !is_emitter(&pat.ty) {
            resources.push((*pat.ty).clone());
        } else if i == 0 {
            stream = true;
        } else {
            combine(
                &mut errors,
                syn::Error::new_spanned(
                    &pat.ty,
                    "the `Emitter` of a stream stage comes right after the context: `async fn name(ctx: Context, out: fluxio::Emitter, ...)`",
                ),
            );
        }
    }
    if stream && sig.asyncness.is_none() {
        combine(
            &mut errors,
            syn::Error::new_spanned(
                sig.fn_token,
                "a stream stage (one taking an `Emitter`) must be an `async fn`",
            ),
        );
    }
    let ret = match &sig.output {
        ReturnType::Type(_, ty) => Some((**ty).clone()),
        ReturnType::Default => missing(&mut errors, sig.paren_token.span.close(), "return type"),
    };
    match (errors, ctx, ret) {
        (None, Some(ctx), Some(ret)) => Ok(Signature {
            ctx,
            ret,
            stream,
            resources,
        }),
        (Some(e), _, _) => Err(e),
        _ => Err(syn::Error::new(Span::call_site(), SIGNATURE)),
    }
}

/// The function, and its hidden type with what `pipeline!` needs.
fn expand_fn(func: &StageFn, opts: &Options, sig: &Signature, hash: &[u8; 32]) -> TokenStream {
    let Signature {
        ctx: arg,
        ret,
        stream,
        resources,
    } = sig;
    let stream = *stream;
    let krate = &opts.krate;
    let p = quote!(#krate::__private);
    let ident = &func.sig.ident;
    let name = opts
        .name
        .as_ref()
        .map_or_else(|| ident.to_string(), LitStr::value);
    let list = |v: &Option<Vec<KeyEntry>>| match v {
        None => quote!(#p::Option::None),
        Some(keys) => {
            let keys = keys.iter().map(|k| match k {
                KeyEntry::Literal(s) => quote!(#s),
                KeyEntry::Typed(path) => quote_spanned!(path.span()=> #p::key_of(&#path)),
            });
            // a `const`: a typed key's name is read at compile time
            quote!({
                const KEYS: &[&str] = &[#(#keys),*];
                #p::Option::Some(KEYS)
            })
        }
    };
    let (reads, writes) = (list(&opts.reads), list(&opts.writes));
    let timeout = match opts.timeout_ms {
        None => quote!(#p::Option::None),
        Some(ms) => quote!(#p::Option::Some(#p::Duration::from_millis(#ms))),
    };
    let is_async = func.sig.asyncness.is_some();
    let in_place = is_async && !stream && !may_wait(&func.attrs, &func.body);
    let call_fn = format_ident!("__fluxio_call");
    let ids: Vec<syn::Ident> = (0..resources.len())
        .map(|i| format_ident!("__fluxio_resource_{}", i))
        .collect();
    let extract = resources.iter().zip(&ids).map(|(ty, id)| {
        quote_spanned! {ty.span()=>
            let #id = match <#ty as #p::FromResources>::from_resources(__fluxio_resources) {
                #p::Option::Some(r) => r,
                #p::Option::None => {
                    return #p::missing_resource(#name, <#ty as #p::FromResources>::requirement());
                }
            };
        }
    });
    let req_list = resources
        .iter()
        .map(|ty| quote_spanned!(ty.span()=> <#ty as #p::FromResources>::requirement));
    let body = if stream && ids.is_empty() {
        quote_spanned!(arg.span()=> #p::stream_stage(#name, ctx, #ident, __fluxio_error))
    } else if stream {
        quote_spanned!(arg.span()=> #p::stream_stage(#name, ctx, move |ctx, out| #ident(ctx, out #(, #ids)*), __fluxio_error))
    } else if in_place {
        quote_spanned!(arg.span()=> #p::ready_stage(#name, #ident(ctx #(, #ids)*), __fluxio_error))
    } else if is_async {
        quote_spanned!(arg.span()=> #p::async_stage(#ident(ctx #(, #ids)*), __fluxio_error))
    } else {
        quote_spanned!(arg.span()=> #p::blocking_stage(move || #ident(ctx #(, #ids)*), __fluxio_error))
    };
    let error_fn = quote_spanned! {ret.span()=>
        fn __fluxio_error(e: <#ret as #p::StageReturn>::Err) -> #p::BoxError {
            #[allow(unused_imports)]
            use #p::{BoxKind as _, IntoKind as _, OpaqueKind as _, StdKind as _};
            (&&&#p::ErrorKindOf(&e)).fluxio_error_kind().convert(e)
        }
    };
    let schema = |t: &Option<syn::Type>| match t {
        None => quote!(#p::Option::None),
        Some(t) => quote_spanned!(t.span()=> #p::Option::Some(#p::validate::<#t>)),
    };
    let (input, output) = (schema(&opts.input), schema(&opts.output));
    let kind = if stream {
        quote!(#p::StageKind::Stream)
    } else if is_async {
        quote!(#p::StageKind::Async)
    } else {
        quote!(#p::StageKind::Blocking)
    };
    let ret_span = ret.span();
    let router =
        quote_spanned!(ret_span=> <<#ret as #p::StageReturn>::Ok as #p::StageOutput>::ROUTER);

    let compensate = opts.compensate.as_ref().map(
        |c| quote_spanned!(c.span()=> meta.compensate = #p::Option::Some(#p::compensator::<#c>);),
    );
    let pivot = opts.pivot.then(|| quote!(meta.pivot = true;));
    let new_stage = if in_place {
        quote!(#p::in_place_stage)
    } else {
        quote!(#p::Stage::new)
    };
    let stage = quote! {
        fn #call_fn(
            ctx: #p::Context,
            __fluxio_resources: &#p::Resources,
        ) -> #p::StageFuture {
            #error_fn
            #(#extract)*
            #body
        }
        const __FLUXIO_RESOURCES: &[fn() -> #p::ResourceReq] = &[#(#req_list),*];
        // field by field from the defaults: `StageMeta` is non-exhaustive
        let mut meta = #p::stage_meta(#name, <Self as #p::StageDef>::HASH);
        meta.kind = #kind;
        meta.router = <Self as #p::StageDef>::ROUTER;
        meta.reads = #reads;
        meta.writes = #writes;
        meta.timeout = #timeout;
        meta.input = #input;
        meta.output = #output;
        meta.resources = __FLUXIO_RESOURCES;
        #compensate
        #pivot
        #new_stage(meta, #call_fn)
    };
    let returns_route = quote!(#p::used_as::ReturnsRoute<{ #router }>);
    // the compensator's code counts in the hash, as a helper's does (rule 34)
    let uses: Vec<syn::Path> = opts.uses.iter().chain(&opts.compensate).cloned().collect();
    let hash = hash_const(&p, hash, &uses, &typed_keys(opts));
    companion(func, &p, &returns_route, &router, &hash, &name, &stage)
}

/// The function, and its hidden type with defaults, for a stage `#[stage]`
/// refused (its errors are reported beside it): the type fits every place
/// of a `pipeline!`, so naming the stage there adds no error, and it is
/// never run, since the program does not compile. Like tokio-macros'
/// `DEFAULT_ERROR_CONFIG`.
fn refused(func: &StageFn, opts: &Options, hash: &[u8; 32]) -> TokenStream {
    let krate = &opts.krate;
    let p = quote!(#krate::__private);
    let returns_route = quote!(#p::used_as::Refused);
    let name = func.sig.ident.to_string();
    companion(
        func,
        &p,
        &returns_route,
        &quote!(false),
        &hash_const(&p, hash, &[], &[]),
        &name,
        &quote!(#p::stand_in_stage()),
    )
}

/// The function as emitted, then the hidden type of the same name that
/// implements `StageDef` (and `HelperDef`, so that another stage can count a
/// stage it calls as a helper); `stage` is the body of `StageDef::stage`.
fn companion(
    func: &StageFn,
    p: &TokenStream,
    returns_route: &TokenStream,
    router: &TokenStream,
    hash: &TokenStream,
    name: &str,
    stage: &TokenStream,
) -> TokenStream {
    let item = &func.item;
    let vis = &func.vis;
    let ident = &func.sig.ident;
    quote! {
        #item

        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, unreachable_pub)]
        #vis struct #ident {}

        const _: () = {
            impl #p::StageDef for #ident {
                type ReturnsRoute = #returns_route;
                const HASH: [u8; 32] = #hash;
                const ROUTER: bool = #router;
                fn stage() -> #p::Stage {
                    #stage
                }
            }
            impl #p::HelperDef for #ident {
                const NAME: &'static str = #name;
                const HASH: [u8; 32] = <Self as #p::StageDef>::HASH;
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn expand_ok(args: TokenStream, item: TokenStream) -> String {
        expand(args, item).to_string()
    }

    #[test]
    fn unknown_option_is_an_error_naming_it() {
        let out = expand_ok(
            quote!(nme = "x"),
            quote!(
                async fn a(ctx: Context) -> R {
                    Ok(ctx)
                }
            ),
        );
        assert!(out.contains("unknown stage option `nme`"), "{out}");
        assert!(
            out.contains("async fn a"),
            "the function is still emitted: {out}"
        );
    }

    #[test]
    fn a_refused_stage_still_has_its_hidden_type() {
        for (args, item) in [
            (
                quote!(nme = "x"),
                quote!(
                    async fn a(ctx: Context) -> R {
                        Ok(ctx)
                    }
                ),
            ),
            (
                quote!(),
                quote!(
                    async fn a(ctx: &Context) -> R {
                        Ok(ctx)
                    }
                ),
            ),
        ] {
            let out = expand_ok(args, item);
            assert!(out.contains("compile_error"), "{out}");
            assert!(out.contains("struct a { }"), "{out}");
            assert!(out.contains("used_as :: Refused"), "{out}");
        }
    }

    #[test]
    fn a_body_syn_cannot_parse_is_left_to_rustc() {
        let out = expand_ok(
            quote!(),
            "async fn a(ctx: Context) -> R { let n: u32 = ; Ok(ctx) }"
                .parse()
                .unwrap_or_default(),
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("let n : u32 = ;"), "{out}");
        assert!(out.contains("used_as :: ReturnsRoute"), "{out}");
    }

    #[test]
    fn stage_meta_is_built_from_the_hidden_constructor() {
        let out = expand_ok(
            quote!(name = "x", reads = ["a"], timeout = "1s"),
            quote!(
                async fn a(ctx: Context) -> R {
                    Ok(ctx)
                }
            ),
        );
        assert!(!out.contains("StageMeta {"), "no struct literal: {out}");
        assert!(out.contains("__private :: stage_meta (\"x\""), "{out}");
    }

    #[test]
    fn a_repeated_option_is_an_error_not_last_wins() {
        let out = expand_ok(
            quote!(name = "first", timeout = "1s", name = "second"),
            quote!(
                async fn a(ctx: Context) -> R {
                    Ok(ctx)
                }
            ),
        );
        assert!(
            out.contains("the stage option `name` is given twice"),
            "{out}"
        );
        let ok = expand_ok(
            quote!(name = "first", timeout = "1s"),
            quote!(
                async fn a(ctx: Context) -> R {
                    Ok(ctx)
                }
            ),
        );
        assert!(!ok.contains("compile_error"), "{ok}");
    }

    #[test]
    fn a_timeout_past_u64_milliseconds_is_too_long_not_malformed() {
        for timeout in ["5124095576030431h", "99999999999999999999999ms"] {
            let out = expand_ok(
                quote!(timeout = #timeout),
                quote!(
                    async fn a(ctx: Context) -> R {
                        Ok(ctx)
                    }
                ),
            );
            assert!(out.contains("is too long: at most"), "{timeout}: {out}");
        }
    }

    #[test]
    fn all_option_errors_are_reported_together() {
        let out = expand_ok(
            quote!(nme = "x", timeout = "soon"),
            quote!(
                async fn a(ctx: Context) -> R {
                    Ok(ctx)
                }
            ),
        );
        assert!(out.contains("unknown stage option"), "{out}");
        assert!(out.contains("invalid timeout"), "{out}");
    }

    #[test]
    fn durations_parse() {
        let l = |s: &str| LitStr::new(s, Span::call_site());
        assert_eq!(parse_duration(&l("250ms")).ok(), Some(250));
        assert_eq!(parse_duration(&l("5s")).ok(), Some(5_000));
        assert_eq!(parse_duration(&l("2m")).ok(), Some(120_000));
        assert_eq!(parse_duration(&l("1h")).ok(), Some(3_600_000));
        assert!(parse_duration(&l("5")).is_err());
        assert!(parse_duration(&l("0s")).is_err());
        assert!(parse_duration(&l("1.5s")).is_err());
    }

    #[test]
    fn hash_ignores_formatting_but_not_tokens() {
        let hash_of = |item: TokenStream| {
            let out = expand(quote!(), item).to_string();
            let start = out.find("const HASH").unwrap_or(0);
            out[start..start + 200.min(out.len() - start)].to_owned()
        };
        let a = hash_of(quote!(
            async fn a(ctx: Context) -> R {
                Ok(ctx.set("n", 1)?)
            }
        ));
        let b = hash_of(
            "/// doc\nasync fn a(\n ctx: Context\n) -> R {\n // c\n Ok(ctx.set(\"n\", 1)?)\n}"
                .parse()
                .unwrap_or_default(),
        );
        let c = hash_of(quote!(
            async fn a(ctx: Context) -> R {
                Ok(ctx.set("n", 2)?)
            }
        ));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
