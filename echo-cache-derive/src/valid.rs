//! Checks the keys of `#[near_cache(...)]` and the item they sit on.
//!
//! Each value is judged on its own, and each mistake is spanned on the
//! literal that makes it, so the compiler points at exactly what to fix.

use proc_macro2::Span;
use syn::{Data, DeriveInput, Lit, LitStr};

use crate::attr::Args;

/// The coherence modes, as written in the attribute.
pub(crate) const COHERENCE: &[(&str, &str)] = &[
    ("none", "None"),
    ("tracking", "Tracking"),
    ("broadcast", "Broadcast"),
    ("durable", "Durable"),
];

/// A declaration that passed every check.
pub(crate) struct Decl {
    pub(crate) kind: String,
    pub(crate) ttl_ms: u64,
    /// The variant of `echo_cache::Coherence`.
    pub(crate) coherence: &'static str,
    pub(crate) jitter: Option<f64>,
    pub(crate) max_size: Option<u64>,
    pub(crate) sweep_ms: Option<u64>,
    pub(crate) absent_ttl_ms: Option<u64>,
    pub(crate) name: String,
    pub(crate) krate: syn::Path,
}

/// Every mistake found, in the order of the keys.
#[derive(Default)]
struct Errors(Vec<syn::Error>);

impl Errors {
    fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.0.push(syn::Error::new(span, message));
    }

    /// The value, or `None` after recording the error.
    fn check<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|error| self.0.push(error)).ok()
    }
}

pub(crate) fn validate(args: Args, input: &DeriveInput) -> Result<Decl, Vec<syn::Error>> {
    let mut errors = Errors::default();
    check_item(input, &mut errors);

    let kind = required(args.kind, "kind = \"ABC\"", "the three uppercase letters of this table's ids", args.span, &mut errors)
        .and_then(|lit| errors.check(kind(&lit)));
    let ttl_ms = required(args.ttl_ms, "ttl_ms = ...", "how long a row lives, in milliseconds", args.span, &mut errors)
        .and_then(|lit| errors.check(positive(&lit, "ttl_ms")));
    let coherence = args
        .coherence
        .map(|lit| errors.check(coherence(&lit)))
        .unwrap_or(Some("None"));
    let jitter = optional(args.jitter.as_ref().map(jitter), &mut errors);
    let max_size = optional(args.max_size.as_ref().map(|l| positive(l, "max_size")), &mut errors);
    let sweep_ms = optional(args.sweep_ms.as_ref().map(|l| positive(l, "sweep_ms")), &mut errors);
    let absent_ttl_ms = optional(args.absent_ttl_ms.as_ref().map(|l| integer(l, "absent_ttl_ms")), &mut errors);
    let name = match args.name {
        Some(lit) => errors.check(table_name(&lit)),
        None => {
            let derived = LitStr::new(&snake_case(&input.ident.to_string()), input.ident.span());
            errors.check(table_name(&derived).map_err(|_| {
                syn::Error::new(
                    input.ident.span(),
                    "this type's name gives no valid table name; declare one with `name = \"...\"` ([a-z0-9_]+)",
                )
            }))
        }
    };
    let krate = match args.krate {
        Some(lit) => errors.check(lit.parse::<syn::Path>().map_err(|_| {
            syn::Error::new(lit.span(), "`crate` must be a path, like \"::echo_cache\"")
        })),
        None => Some(syn::parse_quote!(::echo_cache)),
    };

    match (kind, ttl_ms, coherence, jitter, max_size, sweep_ms, absent_ttl_ms, name, krate) {
        (Some(kind), Some(ttl_ms), Some(coherence), Some(jitter), Some(max_size), Some(sweep_ms), Some(absent_ttl_ms), Some(name), Some(krate))
            if errors.0.is_empty() =>
        {
            Ok(Decl { kind, ttl_ms, coherence, jitter, max_size, sweep_ms, absent_ttl_ms, name, krate })
        }
        _ => Err(errors.0),
    }
}

fn check_item(input: &DeriveInput, errors: &mut Errors) {
    if let Data::Union(union) = &input.data {
        errors.push(
            union.union_token.span,
            "#[near_cache] goes on a struct or an enum, not on a union",
        );
    }
    if !input.generics.params.is_empty() {
        errors.push(
            syn::spanned::Spanned::span(&input.generics),
            "#[near_cache] goes on a type without generic parameters: a table holds one concrete type",
        );
    }
}

fn required<T>(value: Option<T>, key: &str, what: &str, span: Span, errors: &mut Errors) -> Option<T> {
    if value.is_none() {
        errors.push(span, format!("missing `{key}`: {what}"));
    }
    value
}

/// `Some(None)` when absent, `Some(Some(v))` when valid, `None` when not.
fn optional<T>(value: Option<syn::Result<T>>, errors: &mut Errors) -> Option<Option<T>> {
    match value {
        None => Some(None),
        Some(result) => errors.check(result).map(Some),
    }
}

fn kind(lit: &LitStr) -> syn::Result<String> {
    let kind = lit.value();
    if kind.len() == 3 && kind.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(kind)
    } else {
        Err(syn::Error::new(
            lit.span(),
            format!("kind must be exactly three uppercase ASCII letters, like \"GAM\"; found {:?}", kind),
        ))
    }
}

fn integer(lit: &Lit, key: &str) -> syn::Result<u64> {
    match lit {
        Lit::Int(int) => int.base10_parse::<u64>().map_err(|_| {
            syn::Error::new(int.span(), format!("{key} must be an integer from 0 to {}", u64::MAX))
        }),
        other => Err(syn::Error::new(other.span(), format!("{key} must be an integer, like 60_000"))),
    }
}

fn positive(lit: &Lit, key: &str) -> syn::Result<u64> {
    match integer(lit, key)? {
        0 => Err(syn::Error::new(lit.span(), format!("{key} may not be 0"))),
        value => Ok(value),
    }
}

fn jitter(lit: &Lit) -> syn::Result<f64> {
    let value = match lit {
        Lit::Float(float) => float.base10_parse::<f64>()?,
        Lit::Int(int) => int.base10_parse::<f64>()?,
        other => return Err(syn::Error::new(other.span(), "jitter must be a number, like 0.1")),
    };
    if (0.0..=0.5).contains(&value) {
        Ok(value)
    } else {
        Err(syn::Error::new(
            lit.span(),
            format!("jitter must be between 0.0 and 0.5 (a fraction of ttl_ms); found {value}"),
        ))
    }
}

fn coherence(lit: &LitStr) -> syn::Result<&'static str> {
    let mode = lit.value();
    COHERENCE
        .iter()
        .find(|(name, _)| *name == mode)
        .map(|(_, variant)| *variant)
        .ok_or_else(|| {
            let modes: Vec<&str> = COHERENCE.iter().map(|(name, _)| *name).collect();
            syn::Error::new(
                lit.span(),
                format!("unknown coherence mode {mode:?}; expected one of: {}", modes.join(", ")),
            )
        })
}

fn table_name(lit: &LitStr) -> syn::Result<String> {
    let name = lit.value();
    if !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        Ok(name)
    } else {
        Err(syn::Error::new(
            lit.span(),
            format!("a table name is lowercase ASCII letters, digits and `_`; found {name:?}"),
        ))
    }
}

/// `GameSession` → `game_session`, `HTTPRoute` → `http_route`.
fn snake_case(ident: &str) -> String {
    let chars: Vec<char> = ident.trim_start_matches("r#").chars().collect();
    let mut out = String::with_capacity(chars.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            if prev.is_ascii_lowercase() || prev.is_ascii_digit() || (prev.is_ascii_uppercase() && next_lower) {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::snake_case;

    #[test]
    fn snake_cases_type_names() {
        assert_eq!(snake_case("Game"), "game");
        assert_eq!(snake_case("GameSession"), "game_session");
        assert_eq!(snake_case("HTTPRoute"), "http_route");
        assert_eq!(snake_case("GameV2"), "game_v2");
    }
}
