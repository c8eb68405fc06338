//! The `#[near_cache(...)]` attribute of [echo-cache](https://docs.rs/echo-cache).
//!
//! Use it through `echo_cache::near_cache`; the keys are documented there.
//! Parsing, validation and expansion live in their own modules: `attr`
//! reads the keys (keeping every span), `valid` checks them and collects
//! every mistake, `expand` writes the code.

mod attr;
mod expand;
mod valid;

use proc_macro::TokenStream;

/// Declares a near-cache on a struct or an enum. See `echo_cache`'s crate
/// docs for the keys.
#[proc_macro_attribute]
pub fn near_cache(args: TokenStream, item: TokenStream) -> TokenStream {
    let item2 = proc_macro2::TokenStream::from(item.clone());
    let expanded = item_of(item2.clone()).and_then(|input| {
        attr::parse(args.into())
            .and_then(|parsed| valid::validate(parsed, &input))
            .map(|decl| expand::expand(&decl, &input))
    });
    match expanded {
        Ok(tokens) => tokens.into(),
        // Re-emit the item so the user's other code still compiles and only
        // the real mistakes are reported.
        Err(errors) => {
            let errors = errors.iter().map(syn::Error::to_compile_error);
            quote::quote!(#item2 #(#errors)*).into()
        }
    }
}

/// The struct or enum the attribute sits on.
fn item_of(item: proc_macro2::TokenStream) -> Result<syn::DeriveInput, Vec<syn::Error>> {
    match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Struct(_) | syn::Item::Enum(_) | syn::Item::Union(_)) => {
            syn::parse2(item).map_err(|error| vec![error])
        }
        Ok(other) => Err(vec![syn::Error::new_spanned(
            other,
            "#[near_cache] goes on a struct or an enum: the entity type whose values the table holds",
        )]),
        Err(error) => Err(vec![error]),
    }
}
