//! Procedural macros of [fluxio](https://docs.rs/fluxio): `#[stage]` and `pipeline!`.
//!
//! Use them through the `fluxio` crate, which documents them; the generated
//! code refers to `::fluxio::__private`.

use proc_macro::TokenStream;

mod hash;
mod pipeline;
mod stage;

/// Marks a function as a pipeline stage. Documented in the `fluxio` crate.
#[proc_macro_attribute]
pub fn stage(args: TokenStream, item: TokenStream) -> TokenStream {
    stage::expand(args.into(), item.into()).into()
}

/// Builds a pipeline from stages, parallel blocks and routing blocks.
/// Documented in the `fluxio` crate.
#[proc_macro]
pub fn pipeline(input: TokenStream) -> TokenStream {
    pipeline::expand(input.into()).into()
}
