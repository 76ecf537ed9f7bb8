//! `#[helper]`: a function whose code counts in the hash of the stages that
//! declare it with `uses = [...]` (rule 34).

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::FnArg;

use crate::stage::{StageFn, each_option, hash_const, lit_str, path_list};

/// Expands `#[helper(args)] item`: the function as written, and a hidden
/// type of the same name and visibility implementing `HelperDef`, whose hash
/// covers the function's tokens (as a stage's does) and its own helpers'.
///
/// The function and the type are emitted even beside an error, so a stage
/// naming the helper adds no error of its own.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let func = match StageFn::parse_or_emit(item) {
        Ok(f) => f,
        Err(out) => return out,
    };
    let mut uses = Vec::new();
    let mut krate: syn::Path = syn::parse_quote!(::fluxio);
    let expected = "expected `uses = [...]` or `crate = \"...\"`";
    let errors = each_option(args.clone(), ("helper", expected), |key, nv| match key {
        "uses" => path_list(&nv.value).map(|v| uses = v),
        "crate" => lit_str(&nv.value, "crate")
            .and_then(|s| s.parse::<syn::Path>())
            .map(|p| krate = p),
        _ => Err(syn::Error::new_spanned(
            &nv.path,
            format!(
                "unknown helper option `{}`; expected `uses` or `crate`",
                nv.path.to_token_stream()
            ),
        )),
    });
    if let Some(FnArg::Receiver(r)) = func.sig.inputs.first() {
        // no hidden type: it could not live in the `impl` block either
        let mut out = syn::Error::new_spanned(
            r,
            "`#[helper]` marks a free function at module level, not a method: move it out of the `impl` block (a helper's hidden type cannot live there)",
        )
        .to_compile_error();
        out.extend(func.item);
        return out;
    }
    let own = func.hash(args);
    let p = quote!(#krate::__private);
    let hash = hash_const(&p, &own, &uses, &[]);
    let item = &func.item;
    let vis = &func.vis;
    let ident = &func.sig.ident;
    let name = ident.to_string();
    let mut out = errors.map(|e| e.to_compile_error()).unwrap_or_default();
    out.extend(quote! {
        #item

        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, unreachable_pub)]
        #vis struct #ident {}

        const _: () = {
            impl #p::HelperDef for #ident {
                const NAME: &'static str = #name;
                const HASH: [u8; 32] = #hash;
            }
        };
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_of(out: &str) -> String {
        let at = out
            .find("const HASH : [u8 ; 32] =")
            .expect("a HASH constant");
        out[at..].split(']').nth(1).unwrap_or_default().to_owned()
    }

    #[test]
    fn a_helper_gets_a_hidden_type_with_its_hash() {
        let out = expand(
            quote!(),
            quote!(
                fn tax(c: u64) -> u64 {
                    c * 21 / 100
                }
            ),
        )
        .to_string();
        assert!(out.contains("fn tax"), "{out}");
        assert!(out.contains("struct tax { }"), "{out}");
        assert!(out.contains("HelperDef for tax"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn rule34_the_hash_follows_the_code_not_the_comments() {
        let a = expand(
            quote!(),
            quote!(
                fn tax(c: u64) -> u64 {
                    c * 21 / 100
                }
            ),
        )
        .to_string();
        let doc = expand(
            quote!(),
            "/// the tax\nfn tax(c: u64) -> u64 {\n // VAT\n c * 21 / 100\n}"
                .parse()
                .expect("tokens"),
        )
        .to_string();
        let edit = expand(
            quote!(),
            quote!(
                fn tax(c: u64) -> u64 {
                    c * 20 / 100
                }
            ),
        )
        .to_string();
        assert_eq!(hash_of(&a), hash_of(&doc));
        assert_ne!(hash_of(&a), hash_of(&edit));
    }

    #[test]
    fn a_helper_with_helpers_combines_their_hashes() {
        let out = expand(
            quote!(uses = [rates::vat]),
            quote!(
                fn tax(c: u64) -> u64 {
                    c
                }
            ),
        )
        .to_string();
        assert!(out.contains("with_helpers"), "{out}");
        assert!(out.contains("rates :: vat as"), "{out}");
    }

    #[test]
    fn bad_options_and_methods_are_errors_and_the_type_is_still_emitted() {
        for (args, item) in [
            (
                quote!(uses = rates),
                quote!(
                    fn tax(c: u64) -> u64 {
                        c
                    }
                ),
            ),
            (
                quote!(uses = [rate()]),
                quote!(
                    fn tax(c: u64) -> u64 {
                        c
                    }
                ),
            ),
            (
                quote!(use = [rate]),
                quote!(
                    fn tax(c: u64) -> u64 {
                        c
                    }
                ),
            ),
            (
                quote!(uses = [a], uses = [b]),
                quote!(
                    fn tax(c: u64) -> u64 {
                        c
                    }
                ),
            ),
        ] {
            let out = expand(args, item).to_string();
            assert!(out.contains("compile_error"), "{out}");
            assert!(out.contains("struct tax { }"), "{out}");
        }
        let method = expand(
            quote!(),
            quote!(
                fn tax(&self) -> u64 {
                    1
                }
            ),
        )
        .to_string();
        assert!(method.contains("not a method"), "{method}");
        assert!(method.contains("fn tax"), "{method}");
        assert!(
            !method.contains("struct tax"),
            "no hidden type in an impl block: {method}"
        );
    }
}
