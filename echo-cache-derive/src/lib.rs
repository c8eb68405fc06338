//! The `#[near_cache(...)]` attribute of [echo-cache](https://docs.rs/echo-cache).
//!
//! Use it through `echo_cache::near_cache`; the keys are documented there.
//! Parsing, validation and expansion live in their own modules: `attr`
//! reads the keys (keeping every span), `valid` checks them and collects
//! every mistake, `expand` writes the code, and `fallback` writes what
//! stands in for it when there are mistakes. `hint` finds the "did you
//! mean" of a misspelt word.

mod attr;
mod errors;
mod expand;
mod fallback;
mod hint;
mod valid;

use proc_macro::TokenStream;

/// Declares a near-cache on a struct or an enum: `kind` and `ttl_ms`, and
/// optionally `loader` (the function that reads a missing row),
/// `listener` (the function told when a row leaves L1), `tag` (the
/// function that names the group a row belongs to), `coherence`,
/// `placement`, `jitter`, `max_size`, `max_bytes`, `weigher` (the
/// function that weighs a value for `max_bytes`), `eviction`, `warm`,
/// `herd`, `sweep_ms`,
/// `absent_ttl_ms`, `load_timeout_ms`, `lost_grace_ms`,
/// `refresh_ms`, `idle_ms`, `stale_if_error_ms`, `name` and
/// `crate`. See
/// `echo_cache`'s crate docs for what each means.
#[proc_macro_attribute]
pub fn near_cache(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let output = match valid::item(item.clone()) {
        Ok(input) => match valid::validate(attr::parse(args.into()), &input) {
            Ok(decl) => expand::expand(&decl, &input),
            Err(invalid) => fallback::expand(&input, &invalid),
        },
        Err(error) => fallback::item(&item, &error),
    };
    output.into()
}
