//! Reads the keys of `#[near_cache(...)]`, keeping each value's span.
//!
//! Nothing is judged here but the syntax: a key appears at most once and is
//! one of the known keys. Every mistake is collected, so one run of the
//! compiler reports them all.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{Lit, LitStr};

/// The keys `#[near_cache]` accepts, in the order the docs list them.
pub(crate) const KEYS: &[&str] = &[
    "kind",
    "ttl_ms",
    "coherence",
    "jitter",
    "max_size",
    "sweep_ms",
    "absent_ttl_ms",
    "name",
    "crate",
];

/// The keys as written, each with its literal.
pub(crate) struct Args {
    pub(crate) kind: Option<LitStr>,
    pub(crate) ttl_ms: Option<Lit>,
    pub(crate) coherence: Option<LitStr>,
    pub(crate) jitter: Option<Lit>,
    pub(crate) max_size: Option<Lit>,
    pub(crate) sweep_ms: Option<Lit>,
    pub(crate) absent_ttl_ms: Option<Lit>,
    pub(crate) name: Option<LitStr>,
    pub(crate) krate: Option<LitStr>,
    /// Span of the whole argument list, for "missing key" errors.
    pub(crate) span: Span,
}

/// Parses the argument list; every mistake is returned, not just the first.
pub(crate) fn parse(tokens: TokenStream) -> Result<Args, Vec<syn::Error>> {
    let mut args = Args {
        kind: None,
        ttl_ms: None,
        coherence: None,
        jitter: None,
        max_size: None,
        sweep_ms: None,
        absent_ttl_ms: None,
        name: None,
        krate: None,
        span: if tokens.is_empty() {
            Span::call_site()
        } else {
            syn::spanned::Spanned::span(&tokens)
        },
    };
    let mut errors = Vec::new();
    let parser = syn::meta::parser(|meta| {
        if let Err(error) = read_key(&mut args, &meta) {
            errors.push(error);
        }
        Ok(())
    });
    if let Err(error) = syn::parse::Parser::parse2(parser, tokens) {
        errors.push(error);
    }
    if errors.is_empty() { Ok(args) } else { Err(errors) }
}

fn read_key(args: &mut Args, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    let key = meta
        .path
        .get_ident()
        .map(ToString::to_string)
        .unwrap_or_default();
    // Read the value first, so the parser moves on even past a bad key.
    let value: syn::Expr = meta.value()?.parse()?;
    let value = literal(value)?;
    match key.as_str() {
        "kind" => set(&mut args.kind, string(value)?, meta),
        "ttl_ms" => set(&mut args.ttl_ms, value, meta),
        "coherence" => set(&mut args.coherence, string(value)?, meta),
        "jitter" => set(&mut args.jitter, value, meta),
        "max_size" => set(&mut args.max_size, value, meta),
        "sweep_ms" => set(&mut args.sweep_ms, value, meta),
        "absent_ttl_ms" => set(&mut args.absent_ttl_ms, value, meta),
        "name" => set(&mut args.name, string(value)?, meta),
        "crate" => set(&mut args.krate, string(value)?, meta),
        _ => Err(meta.error(format!(
            "unknown key `{}`; the keys of #[near_cache] are: {}",
            quote::ToTokens::to_token_stream(&meta.path),
            KEYS.join(", ")
        ))),
    }
}

fn set<T>(slot: &mut Option<T>, value: T, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if slot.is_some() {
        let key = quote::ToTokens::to_token_stream(&meta.path);
        return Err(meta.error(format!("duplicate key `{key}`: give each key once")));
    }
    *slot = Some(value);
    Ok(())
}

fn literal(value: syn::Expr) -> syn::Result<Lit> {
    match value {
        syn::Expr::Lit(syn::ExprLit { lit, .. }) => Ok(lit),
        other => Err(syn::Error::new_spanned(
            other,
            "expected a literal, like \"GAM\" or 60_000",
        )),
    }
}

fn string(value: Lit) -> syn::Result<LitStr> {
    match value {
        Lit::Str(string) => Ok(string),
        other => Err(syn::Error::new(other.span(), "expected a string literal, like \"GAM\"")),
    }
}
