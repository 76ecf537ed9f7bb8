//! Procedural macros of [fluxio](https://docs.rs/fluxio): `#[stage]` and `pipeline!`.
//!
//! Use them through the `fluxio` crate, which re-exports them (their
//! documentation is on the macros themselves, so it shows there too, and in
//! an editor's hover). The generated code refers to `::fluxio::__private`,
//! which is not a stable API.

use proc_macro::TokenStream;

mod hash;
mod helper;
mod pipeline;
mod stage;
mod waits;

/// Marks a function as a pipeline stage.
///
/// The function stays as it was, callable as before (a test can call it
/// directly). Beside it, `#[stage]` defines a hidden type of the same name and
/// visibility that `pipeline!` refers to, and hashes the function's tokens
/// into the version of every pipeline that uses it.
///
/// Runnable examples are in the `fluxio` crate's documentation (the quick
/// start and the resources example) and its `examples/` directory; the
/// snippets here are not compiled.
///
/// # Signatures
///
/// | stage | signature |
/// |---|---|
/// | async | `async fn name(ctx: Context) -> Result<Context, E>`: runs on the async runtime |
/// | blocking | `fn name(ctx: Context) -> Result<Context, E>`: runs on tokio's blocking pool |
/// | router | `-> Result<fluxio::Route, E>` (async or not): picks a route of the routing block that follows it in `pipeline!` |
/// | stream | `async fn name(ctx: Context, out: fluxio::Emitter) -> Result<Context, E>`: emits chunks while it runs (`fluxio::stream`, `Pipeline::stream`) |
///
/// An async stage whose body has no `.await` is run in place when it is
/// called: its future is polled once and never boxed, so the call
/// allocates nothing. `#[stage]` decides from the tokens, and boxes the
/// future of a body that calls a macro other than std's (`format!`,
/// `vec!`, `assert!`, ...) and logging's (`info!`, `debug!`, ...), or of a
/// function with an attribute other than `doc`, lint levels, `cfg`,
/// `inline`, `must_use` or `cold`: either could add an `.await`. Nothing
/// else differs: such a stage's future could not have waited anyway.
///
/// `StageResult` is `Result<Context, BoxError>` and `StageResult<fluxio::Route>`
/// a router's. `E` is any `std::error::Error + Send + Sync + 'static` (the
/// caller gets it back with `Error::stage_error`), a
/// `Box<dyn Error + Send + Sync>` (`BoxError`; `stage_error` downcasts to the
/// boxed type) or an `anyhow::Error` (kept whole: `Error::stage_error_any`
/// returns it, and the error's `source` chain continues into anyhow's).
///
/// After the context (and a stream stage's `Emitter`) a stage takes any number
/// of **resources**, shared values such as a database pool, as
/// `name: Resource<T>` arguments. Each type is registered once on the builder
/// with `.resource(value)`; `build()` refuses a pipeline whose stages take a
/// type it does not register, naming the stage and the type. Resources are
/// part of neither the version nor the checkpoints.
///
/// ```text
/// #[stage]
/// async fn total(ctx: Context, prices: Resource<Prices>) -> StageResult {
///     let net: f64 = ctx.get("net")?;
///     Ok(ctx.set("total", net * (1.0 + prices.vat))?)
/// }
/// ```
///
/// # Options
///
/// `#[stage(option = value, ...)]`, each option at most once:
///
/// | option | meaning |
/// |---|---|
/// | `name = "x"` | the stage's name in checkpoints, errors, `replay`, `run_step` and `stage_middleware` (default: the function's name); two different stages of one pipeline may not share a name (a `build()` error) |
/// | `reads = ["a", "b"]` | the context keys it reads |
/// | `writes = ["c"]` | the keys it writes; two branches of a parallel block may not declare the same write (a `build()` error) |
/// | `timeout = "5s"` | fail the call with `Error::StageTimeout` after a whole number of `ms`, `s`, `m` or `h` (more than zero) |
/// | `input = T` | before the call, deserialize the context as a `T` (extra keys ignored); a mismatch is `Error::Validation` naming the stage and the field |
/// | `output = U` | the same check after the call |
/// | `uses = [f, m::g]` | the functions it calls whose code counts in its hash (rule 34): each marked `#[helper]` (or a `#[stage]`) |
/// | `crate = "path"` | where the `fluxio` crate is, when it is renamed or re-exported |
///
/// Consecutive stages that all declare both `reads` and `writes` (and are not
/// routers) are folded into one parallel block when no stage's writes meet
/// another's reads or writes: auto-parallelism, on unless the builder says
/// `.auto_parallel(false)`. Declarations are trusted, not enforced: an
/// undeclared write is caught only by the merge check at run time.
///
/// ```text
/// #[stage(name = "greet_user", reads = ["name"], writes = ["greeting"], timeout = "5s")]
/// fn greet(ctx: Context) -> StageResult {
///     let name: String = ctx.get("name")?;
///     Ok(ctx.set("greeting", format!("hello, {name}"))?)
/// }
///
/// #[stage(input = Order, output = Priced)]
/// async fn price(ctx: Context) -> StageResult { /* ... */ }
/// ```
///
/// # Version
///
/// The stage's hash covers its `#[stage(...)]` options, its other
/// attributes, its signature and its body, as tokens: any token changed
/// changes it (and the version of each pipeline using the stage), while
/// whitespace, comments, doc comments and what rustfmt adds or removes do
/// not. Code the stage calls is covered only when the stage declares it:
/// `uses = [price_with_tax]` counts the hash of each named `#[helper]`
/// function (itself covering its own `uses`), in order; code in other crates
/// never counts.
///
/// # Compile errors
///
/// A signature that is not one of the above (no context, a `&Context`, a
/// generic, `const`, `unsafe` or `extern` function, a method, a missing return
/// type, an `Emitter` out of place or in a non-async function), an unknown or
/// repeated option and a malformed value are errors at the offending token,
/// all reported at once. The function and its hidden type are emitted anyway,
/// so a `pipeline!` naming the stage adds no error of its own.
///
/// A stage is a free function at module level, never inside an `impl`
/// block: a method (`&self`) is refused with a message saying to move it out
/// and take `ctx: Context` instead. An associated function without `self`
/// cannot be told from a free one by the attribute, which does not see where
/// it is; the compiler then says that a struct (the stage's hidden type) "is
/// not supported in `trait`s or `impl`s" and to move it "to a nearby module
/// scope": move the function out of the `impl` block, and reach what the
/// type held through `Resource<T>` arguments.
#[proc_macro_attribute]
pub fn stage(args: TokenStream, item: TokenStream) -> TokenStream {
    stage::expand(args.into(), item.into()).into()
}

/// Marks a function whose code counts in the version of the stages that
/// call it (rule 34).
///
/// A stage's hash covers its own tokens only; a stage that calls a helper
/// declares it with `#[stage(uses = [helper])]`, and the helper's hash (its
/// options, attributes, signature and body, normalized as a stage's: comments
/// and formatting do not count) then counts in the stage's, so editing the
/// helper changes the version of every pipeline using the stage, and editing
/// its comments does not. A helper can declare its own helpers with
/// `#[helper(uses = [...])]`; a cycle of helpers is a compile error. A stage
/// can be named in `uses` too.
///
/// The function stays as written. Beside it, `#[helper]` defines a hidden
/// type of the same name and visibility, so it must be a free function at
/// module level (not a method), and `uses` names it by path as it is seen
/// from the stage (`tax::vat`). Naming a function that is not marked is a
/// compile error at its name (rustc says "expected type, found function").
///
/// Not covered: code the helper calls without declaring it, other crates'
/// code (dependencies, the standard library), constants and statics the
/// function reads, and types' definitions.
///
/// ```text
/// #[helper]
/// fn price_with_tax(cents: u64) -> u64 {
///     cents + cents * 21 / 100
/// }
///
/// #[stage(uses = [price_with_tax])]
/// async fn price(ctx: Context) -> StageResult {
///     let net: u64 = ctx.get("net_cents")?;
///     Ok(ctx.set("total_cents", price_with_tax(net))?)
/// }
/// ```
#[proc_macro_attribute]
pub fn helper(args: TokenStream, item: TokenStream) -> TokenStream {
    helper::expand(args.into(), item.into()).into()
}

/// Builds a pipeline from stages, parallel blocks and routing blocks.
///
/// It returns a `PipelineBuilder`: `.name("orders")` with `.store(...)` (or `.durable(true)`) makes
/// the pipeline durable, `.auto_parallel(false)` switches folding off,
/// `.resource(value)` registers a resource, `.build()` compiles it into a
/// `Pipeline`. Runnable examples are in the `fluxio` crate's documentation;
/// the snippets here are not compiled.
///
/// # Syntax
///
/// A comma-separated sequence (a trailing comma allowed) of:
///
/// | item | meaning |
/// |---|---|
/// | `stage` | a function marked `#[stage]`, by name or path (`module::stage`); not a call, not a closure |
/// | `parallel![a, [b, c], ...]` | branches run concurrently, each on a fork of the context, then merged; two branches writing one key is an `Error::MergeConflict`. A branch is an item or a `[...]` sequence |
/// | `fire_and_forget![a, [b, c]]` | branches run in the background; their errors are logged, nothing is merged, the pipeline does not wait |
/// | `router => { "x" => body, "y" => body }` | a router stage and its routing block: the route it returns picks the body to run, then the run continues after the block. A body is a stage, a `[...]` sequence or a nested `pipeline![...]`; at least one route, each key once |
/// | `sleep!("24h")`, `sleep!(until = "key")` | a durable sleep (rule 25): the run parks until then, in the store, not in a process |
/// | `wait!("approval" as Approval into "decision", deadline = "72h")` | a durable wait for a signal (rule 26); `wait_any!(...)` waits for the first of several names; a routing block may follow it |
/// | `child!("billing", input = ["order_id"], output = ["invoice_id"], failure = "key", deadline = "1h", poll = "5s")` | a child run (rule 29) of the pipeline registered with `.child(billing)` under that name; the options are optional: all keys in and out by default, a failure fails the parent unless `failure` names a key for it |
/// | `child!("billing", each = "orders", item = "order", into = "invoices")` | a fan-out: one child per item of the list `orders` (the item under `order`, `"item"` by default), the parent going on when all have ended, with their results in order under `invoices` |
/// | `[a, b]`, `pipeline![a, b]` | a nested sequence, the same as writing its items in place |
///
/// `pipeline![]` is valid: it returns its input unchanged. When the `fluxio`
/// crate is renamed, start with `crate = path;`: `pipeline![crate = my_fluxio; a, b]`.
///
/// ```text
/// let pipeline = pipeline![
///     validate,
///     parallel![reserve_stock, fraud_check],
///     charge_card,
///     shipping => { "express" => express, "standard" => [standard, notify] },
///     fire_and_forget![send_receipt],
/// ]
/// .name("orders")
/// .store(InMemoryStore::new())
/// .build()?;
/// ```
///
/// # Version
///
/// The pipeline's version is computed at compile time from the hashes of its
/// stages, its shape (order, nesting, parallel and fire-and-forget blocks,
/// route keys) and whether auto-parallelism is on (both digests are computed;
/// `build()` takes one): the same source gives the same version on every
/// machine and compiler.
///
/// # Compile errors
///
/// A name that is not a `#[stage]` function ("`charge` is not a fluxio
/// stage"), a router without its routing block, a stage that is not a router
/// before one, a call, a closure, an empty parallel block, routing block or
/// route body, and a repeated route key are errors at the offending token.
#[proc_macro]
pub fn pipeline(input: TokenStream) -> TokenStream {
    pipeline::expand(input.into()).into()
}
