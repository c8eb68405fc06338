//! Writes the code of a declaration.
//!
//! Generated code names only `<crate>::__private::…` (imported once as
//! `__echo_private`), `::core::…` and the user's own type, and lives in a
//! `const _: () = { … };` block so that its items (prefixed `__echo_` or
//! `__ECHO_`) cannot clash with the user's.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields};

use crate::valid::Decl;

/// The item, unchanged, then its declaration: the `Declaration` in the
/// directory's distributed slice, the `Cached` impl, and `fetch`.
pub(crate) fn expand(decl: &Decl, input: &DeriveInput) -> TokenStream {
    let ident = &input.ident;
    let (kind, ttl_ms, name) = (&decl.kind, decl.ttl_ms, &decl.name);
    let coherence = syn::Ident::new(decl.coherence, proc_macro2::Span::call_site());
    let placement = syn::Ident::new(decl.placement, proc_macro2::Span::call_site());
    let eviction = syn::Ident::new(decl.eviction, proc_macro2::Span::call_site());
    let warm = syn::Ident::new(decl.warm, proc_macro2::Span::call_site());
    let herd = syn::Ident::new(decl.herd, proc_macro2::Span::call_site());
    let jitter = option(decl.jitter.map(|j| quote!(#j)));
    let max_size = option(decl.max_size.map(|m| {
        let m = proc_macro2::Literal::u64_unsuffixed(m);
        quote!(#m)
    }));
    let max_bytes = option(decl.max_bytes.map(|m| {
        let m = proc_macro2::Literal::u64_unsuffixed(m);
        quote!(#m)
    }));
    let sweep_ms = option(decl.sweep_ms.map(|s| quote!(#s)));
    let absent_ttl_ms = option(decl.absent_ttl_ms.map(|a| quote!(#a)));
    let load_timeout_ms = option(decl.load_timeout_ms.map(|l| quote!(#l)));
    let lost_grace_ms = option(decl.lost_grace_ms.map(|l| quote!(#l)));
    let stale_if_error_ms = option(decl.stale_if_error_ms.map(|g| quote!(#g)));
    let soft_timeout_ms = option(decl.soft_timeout_ms.map(|s| quote!(#s)));
    let refresh_ms = option(decl.refresh_ms.map(|r| quote!(#r)));
    let idle_ms = option(decl.idle_ms.map(|i| quote!(#i)));
    let fingerprint = fingerprint(input);
    let import = import_private(&decl.krate);
    let fetch = fetch(input);
    let loader = decl.loader.as_ref().map(loader);
    let listener = decl.listener.as_ref().map(listener);
    let tag = decl.tag.as_ref().map(tag);
    let weigher = decl.weigher.as_ref().map(weigher);

    quote! {
        #input

        const _: () = {
            #import

            #[__echo_private::linkme::distributed_slice(__echo_private::DECLARATIONS)]
            #[linkme(crate = __echo_private::linkme)]
            static __ECHO_DECLARATION: __echo_private::Declaration =
                __echo_private::Declaration::new::<#ident>(
                    __echo_private::SpecParts {
                        name: #name,
                        type_name: ::core::concat!(
                            ::core::module_path!(),
                            "::",
                            ::core::stringify!(#ident),
                        ),
                        kind: #kind,
                        ttl_ms: #ttl_ms,
                        jitter: #jitter,
                        max_size: #max_size,
                        max_bytes: #max_bytes,
                        sweep_ms: #sweep_ms,
                        absent_ttl_ms: #absent_ttl_ms,
                        load_timeout_ms: #load_timeout_ms,
                        lost_grace_ms: #lost_grace_ms,
                        stale_if_error_ms: #stale_if_error_ms,
                        soft_timeout_ms: #soft_timeout_ms,
                        refresh_ms: #refresh_ms,
                        idle_ms: #idle_ms,
                        coherence: __echo_private::Coherence::#coherence,
                        placement: __echo_private::Placement::#placement,
                        eviction: __echo_private::Eviction::#eviction,
                        warm: __echo_private::Warm::#warm,
                        herd: __echo_private::Herd::#herd,
                        fingerprint: #fingerprint,
                    }
                    .build(),
                );

            impl __echo_private::Cached for #ident {
                const KIND: __echo_private::Kind = __echo_private::Kind::new(#kind);

                fn __spec() -> &'static __echo_private::TableSpec {
                    __ECHO_DECLARATION.spec()
                }

                #tag
            }

            impl __echo_private::Declared for #ident {
                #loader
                #listener
                #weigher
            }

            #fetch
        };
    }
}

/// Imports `<crate>::__private` as `__echo_private`, once at the top of
/// the generated block: a `crate` path that does not resolve is then
/// reported once, on its literal, rather than at every use.
pub(crate) fn import_private(krate: &syn::Path) -> TokenStream {
    quote!(use #krate::__private as __echo_private;)
}

/// The inherent `fetch` of the declared type, a shorthand of
/// `Cache::fetch`; also written by the fallback, so that code calling it
/// compiles whatever the mistakes of the attribute. Needs
/// [`import_private`] in scope.
pub(crate) fn fetch(input: &DeriveInput) -> TokenStream {
    let ident = &input.ident;
    let vis = &input.vis;
    let doc = format!(
        "Reads the `{ident}` of `id` through `cache`: its L1 row, else the one flight of `id` \
         (the table's L2, then its loader).\n\n# Errors\n\nAs `echo_cache::Cache::fetch`."
    );
    quote! {
        impl #ident {
            #[doc = #doc]
            #[allow(dead_code)]
            #vis fn fetch(
                cache: &__echo_private::Cache,
                id: impl __echo_private::IdOf<Self>,
            ) -> __echo_private::Fetch<'_, Self> {
                cache.fetch::<Self>(id)
            }
        }
    }
}

/// The `__loader` of the `Declared` impl: the declared loader, erased. A
/// loader of the wrong type is reported on its path.
fn loader(path: &syn::ExprPath) -> TokenStream {
    // Resolved where the attribute is, reported where the path is.
    let span = Span::call_site().located_at(path.span());
    let erased = quote_spanned!(span=> __echo_private::loader::<Self, _, _, _>(#path));
    quote! {
        fn __loader() -> ::core::option::Option<__echo_private::Loader<Self>> {
            ::core::option::Option::Some(#erased)
        }
    }
}

/// The `__listener` of the `Declared` impl: the declared removal
/// listener, erased. A listener of the wrong type is reported on its path.
fn listener(path: &syn::ExprPath) -> TokenStream {
    let span = Span::call_site().located_at(path.span());
    let erased = quote_spanned!(span=> __echo_private::listener::<Self, _>(#path));
    quote! {
        fn __listener() -> ::core::option::Option<__echo_private::Listener<Self>> {
            ::core::option::Option::Some(#erased)
        }
    }
}

/// The `__TAGGED` and `__tag` of the `Cached` impl: the declared tag
/// function, called on a row's value. One of the wrong type is reported
/// on its path.
fn tag(path: &syn::ExprPath) -> TokenStream {
    let span = Span::call_site().located_at(path.span());
    let call = quote_spanned!(span=> __echo_private::tag_of::<Self, _>(#path, self));
    quote! {
        const __TAGGED: bool = true;

        fn __tag(&self) -> ::core::option::Option<__echo_private::Tag> {
            #call
        }
    }
}

/// The `__weigher` of the `Declared` impl: the declared weigher, a
/// `fn(&Self) -> usize`. A function of another type is reported on its
/// path.
fn weigher(path: &syn::ExprPath) -> TokenStream {
    let span = Span::call_site().located_at(path.span());
    let erased = quote_spanned!(span=> __echo_private::weigher::<Self>(#path));
    quote! {
        fn __weigher() -> ::core::option::Option<__echo_private::Weigher<Self>> {
            ::core::option::Option::Some(#erased)
        }
    }
}

/// `Some(value)` or `None`, as code.
fn option(value: Option<TokenStream>) -> TokenStream {
    value.map_or_else(
        || quote!(::core::option::Option::None),
        |value| quote!(::core::option::Option::Some(#value)),
    )
}

/// A fingerprint of the type's serialized shape: its name, its fields' names
/// and types, its variants and its `#[serde]` attributes. Docs and other
/// attributes do not count, so editing a comment does not orphan L2 rows.
/// Only these tokens: the types of the fields are names here, and what
/// changes inside them is seen by the runtime's traced shape (the L2
/// schema stamp folds both).
fn fingerprint(input: &DeriveInput) -> u64 {
    let mut shape = TokenStream::new();
    input.ident.to_tokens(&mut shape);
    serde_attrs(&input.attrs, &mut shape);
    match &input.data {
        Data::Struct(data) => fields(&data.fields, &mut shape),
        Data::Enum(data) => {
            for variant in &data.variants {
                variant.ident.to_tokens(&mut shape);
                serde_attrs(&variant.attrs, &mut shape);
                fields(&variant.fields, &mut shape);
                if let Some((_, discriminant)) = &variant.discriminant {
                    discriminant.to_tokens(&mut shape);
                }
            }
        }
        Data::Union(_) => {}
    }
    fnv1a(shape.to_string().as_bytes())
}

fn fields(fields: &Fields, shape: &mut TokenStream) {
    let kind = match fields {
        Fields::Named(_) => "named",
        Fields::Unnamed(_) => "unnamed",
        Fields::Unit => "unit",
    };
    kind.to_tokens(shape);
    for field in fields {
        field.ident.to_tokens(shape);
        field.ty.to_tokens(shape);
        serde_attrs(&field.attrs, shape);
    }
}

fn serde_attrs(attrs: &[Attribute], shape: &mut TokenStream) {
    for attr in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        attr.to_tokens(shape);
    }
}

/// 64-bit FNV-1a: small, stable across compiler versions and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
