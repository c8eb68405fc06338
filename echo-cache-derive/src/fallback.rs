//! What the attribute writes when the declaration has mistakes.
//!
//! The item is written back unchanged, with every error, so that the
//! compiler reports the mistakes and nothing else: the type still exists
//! (no "cannot find type" wherever it is used) and, when it can, a stand-in
//! implements `Cached` and `fetch` for it (no "has no near-cache" wherever
//! it is fetched). Nothing is declared: the program does not compile.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput};

use crate::expand;
use crate::valid::Invalid;

/// The item, its errors and, if the item allows it, the stand-in.
pub(crate) fn expand(input: &DeriveInput, invalid: &Invalid) -> TokenStream {
    let errors = invalid.errors.iter().map(syn::Error::to_compile_error);
    let stand_in = match &invalid.krate {
        Some(krate) if can_stand_in(input) => stand_in(krate, input),
        // Without a path to the runtime, or on a type that cannot be
        // cached at all, there is nothing to stand in for.
        _ => TokenStream::new(),
    };
    quote! {
        #input
        #(#errors)*
        #stand_in
    }
}

/// An item the attribute does not go on, unchanged, with the error.
pub(crate) fn item(item: &TokenStream, error: &syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    quote!(#item #error)
}

/// Whether a stand-in impl would compile: not for a union or a generic type,
/// which are mistakes of their own.
fn can_stand_in(input: &DeriveInput) -> bool {
    !matches!(input.data, Data::Union(_)) && input.generics.params.is_empty()
}

fn stand_in(krate: &syn::Path, input: &DeriveInput) -> TokenStream {
    let ident = &input.ident;
    let import = expand::import_private(krate);
    let fetch = expand::fetch(input);
    quote! {
        const _: () = {
            #import

            impl __echo_private::Cached for #ident {
                const KIND: __echo_private::Kind = __echo_private::Kind::new("ERR");

                fn __spec() -> &'static __echo_private::TableSpec {
                    ::core::unreachable!()
                }
            }

            #fetch
        };
    }
}
