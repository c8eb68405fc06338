//! Checks the keys of `#[near_cache(...)]` and the item they sit on.
//!
//! Each value is judged on its own, and each mistake is spanned on the
//! literal (or key) that makes it, so the compiler points at exactly what
//! to fix. Every mistake is collected before giving up.

use proc_macro2::{Span, TokenStream};
use syn::{Data, DeriveInput, Item, Lit, LitStr};

use crate::attr::{self, Args, Value};
use crate::errors::{At, Errors};
use crate::hint;

/// The coherence modes: as written in the attribute, and the variant of
/// `echo_cache::Coherence` each names.
const COHERENCE: &[(&str, &str)] = &[
    ("none", "None"),
    ("tracking", "Tracking"),
    ("broadcast", "Broadcast"),
    ("durable", "Durable"),
];

/// The placements: as written in the attribute, and the variant of
/// `echo_cache::Placement` each names.
const PLACEMENT: &[(&str, &str)] = &[("table", "Table"), ("spread", "Spread")];

/// The eviction policies: as written in the attribute, and the variant of
/// `echo_cache::Eviction` each names.
const EVICTION: &[(&str, &str)] = &[("hot", "Hot"), ("none", "None")];

/// The warm starts: as written in the attribute, and the variant of
/// `echo_cache::Warm` each names (`Off` is the default, not written).
const WARM: &[(&str, &str)] = &[("ready", "Ready"), ("background", "Background")];

/// The herds: as written in the attribute, and the variant of
/// `echo_cache::Herd` each names.
const HERD: &[(&str, &str)] = &[("node", "Node"), ("fleet", "Fleet")];

/// A declaration that passed every check. Optional keys left out are
/// `None`: the runtime's defaults apply.
pub(crate) struct Decl {
    pub(crate) kind: String,
    pub(crate) ttl_ms: u64,
    /// The function that loads a row, checked by the compiler where the
    /// expansion names it.
    pub(crate) loader: Option<syn::ExprPath>,
    /// The removal listener's path (`listener = ...`), if declared.
    pub(crate) listener: Option<syn::ExprPath>,
    /// The function that names a row's tag (`tag = ...`), if declared.
    pub(crate) tag: Option<syn::ExprPath>,
    /// The variant of `echo_cache::Coherence`.
    pub(crate) coherence: &'static str,
    /// The variant of `echo_cache::Placement`.
    pub(crate) placement: &'static str,
    /// The variant of `echo_cache::Eviction`.
    pub(crate) eviction: &'static str,
    /// The variant of `echo_cache::Warm`.
    pub(crate) warm: &'static str,
    /// The variant of `echo_cache::Herd`.
    pub(crate) herd: &'static str,
    pub(crate) jitter: Option<f64>,
    pub(crate) max_size: Option<u64>,
    pub(crate) max_bytes: Option<u64>,
    /// The weigher's path (`weigher = ...`), if declared.
    pub(crate) weigher: Option<syn::ExprPath>,
    pub(crate) sweep_ms: Option<u64>,
    pub(crate) absent_ttl_ms: Option<u64>,
    pub(crate) load_timeout_ms: Option<u64>,
    pub(crate) lost_grace_ms: Option<u64>,
    pub(crate) stale_if_error_ms: Option<u64>,
    pub(crate) soft_timeout_ms: Option<u64>,
    pub(crate) refresh_ms: Option<u64>,
    pub(crate) idle_ms: Option<u64>,
    pub(crate) name: String,
    pub(crate) krate: syn::Path,
}

/// A declaration with mistakes: every one of them, and what the fallback
/// needs to keep the user's other code free of follow-on errors.
pub(crate) struct Invalid {
    /// Every mistake, in the order of the source.
    pub(crate) errors: Vec<syn::Error>,
    /// The path of the runtime crate, if the `crate` key (or its default)
    /// is a valid path.
    pub(crate) krate: Option<syn::Path>,
}

/// The struct, enum or union the attribute sits on; any other item is
/// refused with one error. (A union is refused by [`validate`], along
/// with the mistakes of the keys.)
pub(crate) fn item(tokens: TokenStream) -> syn::Result<DeriveInput> {
    match syn::parse2::<Item>(tokens.clone())? {
        Item::Struct(_) | Item::Enum(_) | Item::Union(_) => syn::parse2(tokens),
        Item::Fn(item) => Err(misplaced(&item.sig, "a function")),
        Item::Impl(item) => Err(misplaced(&item.self_ty, "an impl block")),
        Item::Trait(item) => Err(misplaced(&item.ident, "a trait")),
        Item::Type(item) => Err(misplaced(&item.ident, "a type alias")),
        Item::Mod(item) => Err(misplaced(&item.ident, "a module")),
        other => Err(misplaced(&other, "this item")),
    }
}

fn misplaced(span: &dyn quote::ToTokens, what: &str) -> syn::Error {
    syn::Error::new_spanned(
        span,
        format!(
            "#[near_cache] goes on a struct or an enum (the entity type whose values \
             the table holds), not on {what}"
        ),
    )
}

/// Checks the item and every key; a [`Decl`] if all is well, else every
/// mistake found.
pub(crate) fn validate(mut args: Args, input: &DeriveInput) -> Result<Decl, Invalid> {
    let mut errors = std::mem::take(&mut args.errors);
    check_item(input, &mut errors);

    let kind = required(&args, &args.kind, "kind", &mut errors)
        .and_then(|(at, lit)| errors.check(at, kind(lit)));
    let ttl_ms = required(&args, &args.ttl_ms, "ttl_ms", &mut errors)
        .and_then(|(at, lit)| errors.check(at, positive(lit, "ttl_ms")));
    let loader = args.loader.path().cloned();
    let listener = args.listener.path().cloned();
    let tag = args.tag.path().cloned();
    let coherence = match args.coherence.lit() {
        Some((at, lit)) => errors.check(at, coherence(lit)),
        None => Some("None"),
    };
    let placement = match args.placement.lit() {
        Some((at, lit)) => errors.check(
            at,
            placement(lit).and_then(|p| tag_placement(lit, p, tag.is_some())),
        ),
        None => Some("Table"),
    };
    let eviction = match args.eviction.lit() {
        Some((at, lit)) => errors.check(at, eviction(lit)),
        None => Some("Hot"),
    };
    let herd = match args.herd.lit() {
        Some((at, lit)) => errors.check(at, herd(lit)),
        None => Some("Node"),
    };
    let warm = match args.warm.lit() {
        Some((at, lit)) => errors.check(at, warm(lit)),
        None => Some("Off"),
    };
    let jitter = (args.jitter.lit()).and_then(|(at, lit)| errors.check(at, jitter(lit)));
    let max_size =
        (args.max_size.lit()).and_then(|(at, lit)| errors.check(at, positive(lit, "max_size")));
    let max_bytes =
        (args.max_bytes.lit()).and_then(|(at, lit)| errors.check(at, positive(lit, "max_bytes")));
    let weigher = args.weigher.path().cloned();
    let sweep_ms =
        (args.sweep_ms.lit()).and_then(|(at, lit)| errors.check(at, positive(lit, "sweep_ms")));
    let absent_ttl_ms = (args.absent_ttl_ms.lit())
        .and_then(|(at, lit)| errors.check(at, integer(lit, "absent_ttl_ms")));
    let load_timeout_ms = (args.load_timeout_ms.lit())
        .and_then(|(at, lit)| errors.check(at, positive(lit, "load_timeout_ms")));
    let lost_grace_ms = (args.lost_grace_ms.lit())
        .and_then(|(at, lit)| errors.check(at, lost_grace(lit, coherence)));
    let stale_if_error_ms =
        (args.stale_if_error_ms.lit()).and_then(|(at, lit)| errors.check(at, grace(lit)));
    let soft_timeout_ms = (args.soft_timeout_ms.lit()).and_then(|(at, lit)| {
        let graced = args.stale_if_error_ms.lit().is_some();
        errors.check(
            at,
            soft_timeout(lit, graced, stale_if_error_ms, load_timeout_ms),
        )
    });
    let refresh_ms = (args.refresh_ms.lit()).and_then(|(at, lit)| {
        let refresh_ms = positive(lit, "refresh_ms");
        // Checked against the TTL only if both are well-formed.
        let refresh_ms = match (refresh_ms, ttl_ms) {
            (Ok(refresh_ms), Some(ttl_ms)) => within_life(lit, refresh_ms, ttl_ms, jitter),
            (refresh_ms, _) => refresh_ms,
        };
        errors.check(at, refresh_ms)
    });
    let idle_ms = (args.idle_ms.lit()).and_then(|(at, lit)| {
        let idle_ms = positive(lit, "idle_ms");
        let idle_ms = match (idle_ms, ttl_ms) {
            (Ok(idle_ms), Some(ttl_ms)) => idle_within_life(lit, idle_ms, ttl_ms, jitter),
            (idle_ms, _) => idle_ms,
        };
        errors.check(at, idle_ms)
    });
    let name = match args.name.lit() {
        Some((at, lit)) => errors.check(at, table_name(lit)),
        None => errors.check(At::Item, derived_name(input)),
    };
    let krate = match &args.krate {
        Value::Lit(at, lit) => errors.check(*at, krate(lit)),
        // Only `loader`, `listener` and `tag` are read as paths.
        Value::Unreadable | Value::Path(..) => None,
        Value::Absent => Some(syn::parse_quote!(::echo_cache)),
    };

    match (
        kind, ttl_ms, coherence, placement, eviction, warm, herd, name, krate,
    ) {
        (
            Some(kind),
            Some(ttl_ms),
            Some(coherence),
            Some(placement),
            Some(eviction),
            Some(warm),
            Some(herd),
            Some(name),
            Some(krate),
        ) if errors.is_empty() => Ok(Decl {
            kind,
            ttl_ms,
            loader,
            listener,
            tag,
            coherence,
            placement,
            eviction,
            warm,
            herd,
            jitter,
            max_size,
            max_bytes,
            weigher,
            sweep_ms,
            absent_ttl_ms,
            load_timeout_ms,
            lost_grace_ms,
            stale_if_error_ms,
            soft_timeout_ms,
            refresh_ms,
            idle_ms,
            name,
            krate,
        }),
        (.., krate) => Err(Invalid {
            errors: errors.into_sorted(),
            krate,
        }),
    }
}

/// The literal of a required key. A missing key is recorded, unless the
/// list could not be read to its end or an unknown key was taken for it.
fn required<'a>(
    args: &Args,
    value: &'a Value,
    name: &str,
    errors: &mut Errors,
) -> Option<(At, &'a Lit)> {
    let excused = !args.complete || args.guessed.contains(&name);
    if matches!(value, Value::Absent) && !excused {
        let message = format!(
            "#[near_cache] needs `{name}`, {}: add {}",
            attr::key(name).meaning,
            attr::example(name)
        );
        errors.push(At::Attribute, syn::Error::new(Span::call_site(), message));
    }
    value.lit()
}

fn check_item(input: &DeriveInput, errors: &mut Errors) {
    if let Data::Union(union) = &input.data {
        let (union_token, ident) = (union.union_token, &input.ident);
        let error = syn::Error::new_spanned(
            quote::quote!(#union_token #ident),
            "#[near_cache] goes on a struct or an enum, not on a union: cached values \
             are serialized, and serde does not serialize unions",
        );
        errors.push(At::Item, error);
    }
    if !input.generics.params.is_empty() {
        let error = syn::Error::new_spanned(
            &input.generics,
            "#[near_cache] goes on a type without generic parameters: a table holds \
             the values of one concrete type",
        );
        errors.push(At::Item, error);
    }
}

/// The value of a key that takes a string.
fn string<'a>(lit: &'a Lit, key: &str) -> syn::Result<&'a LitStr> {
    match lit {
        Lit::Str(string) => Ok(string),
        other => Err(syn::Error::new(
            other.span(),
            format!("`{key}` takes a string, like {}", attr::example(key)),
        )),
    }
}

fn kind(lit: &Lit) -> syn::Result<String> {
    let lit = string(lit, "kind")?;
    let kind = lit.value();
    if kind.len() == 3 && kind.bytes().all(|b| b.is_ascii_uppercase()) {
        return Ok(kind);
    }
    let upper = kind.to_ascii_uppercase();
    let rule = "a kind is three uppercase ASCII letters";
    let message = if upper.len() == 3 && upper.bytes().all(|b| b.is_ascii_uppercase()) {
        format!("{rule}: did you mean \"{upper}\"?")
    } else if kind.chars().count() == 3 {
        format!("{rule}, like \"GAM\"; {kind:?} is not")
    } else {
        format!(
            "{rule}, like \"GAM\"; {kind:?} has {}",
            kind.chars().count()
        )
    };
    Err(syn::Error::new(lit.span(), message))
}

fn integer(lit: &Lit, key: &str) -> syn::Result<u64> {
    match lit {
        Lit::Int(int) => int.base10_parse::<u64>().map_err(|_| {
            syn::Error::new(
                int.span(),
                format!("`{key}` is at most {} (u64::MAX)", u64::MAX),
            )
        }),
        // A number in quotes: say so rather than just "wrong type".
        Lit::Str(string) if string.value().replace('_', "").parse::<u64>().is_ok() => {
            Err(syn::Error::new(
                string.span(),
                format!(
                    "`{key}` takes an integer, not a string: write `{key} = {}`, without the quotes",
                    string.value()
                ),
            ))
        }
        other => Err(syn::Error::new(
            other.span(),
            format!("`{key}` takes an integer, like {}", attr::example(key)),
        )),
    }
}

fn positive(lit: &Lit, key: &str) -> syn::Result<u64> {
    match integer(lit, key)? {
        0 => Err(syn::Error::new(
            lit.span(),
            format!("`{key}` may not be 0: it is {}", attr::key(key).meaning),
        )),
        value => Ok(value),
    }
}

/// The longest `stale_if_error_ms`: a day (the message says so).
const MAX_GRACE_MS: u64 = 86_400_000;

/// `stale_if_error_ms`: 0 (off) up to [`MAX_GRACE_MS`].
fn grace(lit: &Lit) -> syn::Result<u64> {
    let key = "stale_if_error_ms";
    match integer(lit, key)? {
        value if value > MAX_GRACE_MS => Err(syn::Error::new(
            lit.span(),
            format!(
                "`{key}` is at most 86_400_000 (a day): a value expired longer ago is no \
                 fallback; lengthen `ttl_ms` instead"
            ),
        )),
        value => Ok(value),
    }
}

/// `soft_timeout_ms`: > 0, on a table with a grace (`stale_if_error_ms`
/// written, and > 0 if it is well-formed: `graced` says whether it was
/// written), and less than a declared `load_timeout_ms`.
fn soft_timeout(
    lit: &Lit,
    graced: bool,
    grace: Option<u64>,
    load_timeout_ms: Option<u64>,
) -> syn::Result<u64> {
    let soft = positive(lit, "soft_timeout_ms")?;
    if !graced || grace == Some(0) {
        return Err(syn::Error::new(
            lit.span(),
            "`soft_timeout_ms` answers a flight's waiters with an expired value: declare \
             how long past its expiry one may answer, `stale_if_error_ms = 30_000`",
        ));
    }
    if let Some(deadline) = load_timeout_ms
        && soft >= deadline
    {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`soft_timeout_ms` must be less than the flight's deadline, `load_timeout_ms` \
                 = {deadline}, not {soft}: past the deadline the flight is over"
            ),
        ));
    }
    Ok(soft)
}

fn jitter(lit: &Lit) -> syn::Result<f64> {
    let value = match lit {
        Lit::Float(float) => float.base10_parse::<f64>()?,
        Lit::Int(int) => int.base10_parse::<f64>()?,
        other => {
            return Err(syn::Error::new(
                other.span(),
                format!("`jitter` takes a number, like {}", attr::example("jitter")),
            ));
        }
    };
    if (0.0..=0.5).contains(&value) {
        Ok(value)
    } else {
        Err(syn::Error::new(
            lit.span(),
            format!(
                "`jitter` is from 0.0 to 0.5, not {value}: a row's expiry is drawn from \
                 ttl_ms ± ttl_ms × jitter"
            ),
        ))
    }
}

/// The longest `lost_grace_ms`: the window is a short bridge over a
/// reconnection, not a way to run without coherence.
const MAX_LOST_GRACE_MS: u64 = 60_000;

/// `lost_grace_ms`, for a table of `coherence` (a variant name; `None`
/// when it did not parse).
fn lost_grace(lit: &Lit, coherence: Option<&str>) -> syn::Result<u64> {
    let grace = integer(lit, "lost_grace_ms")?;
    if coherence == Some("None") {
        return Err(syn::Error::new(
            lit.span(),
            "`lost_grace_ms` applies to a table with an invalidation channel: \
             declare `coherence = \"tracking\"`, `\"broadcast\"` or `\"durable\"`",
        ));
    }
    if grace > MAX_LOST_GRACE_MS {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`lost_grace_ms` is at most {MAX_LOST_GRACE_MS} (a minute), not {grace}: \
                 it is how long L1 keeps serving, unverified, while the channel is down"
            ),
        ));
    }
    Ok(grace)
}

/// `refresh_ms`, if it is shorter than the shortest life a row is drawn
/// (`ttl_ms − ttl_ms × jitter`): else a row would be due for refresh as
/// soon as it is filled, and refreshed on every read.
fn within_life(lit: &Lit, refresh_ms: u64, ttl_ms: u64, jitter: Option<f64>) -> syn::Result<u64> {
    let shortest = shortest_life(ttl_ms, jitter);
    if refresh_ms < shortest {
        return Ok(refresh_ms);
    }
    Err(syn::Error::new(
        lit.span(),
        format!(
            "`refresh_ms` must be less than the shortest life of a row, ttl_ms − ttl_ms × \
             jitter = {shortest} ms, not {refresh_ms}: a row is refreshed when less than \
             `refresh_ms` of its life remain, and this one would be due as soon as it is filled"
        ),
    ))
}

/// `idle_ms`, if it is shorter than the shortest life a row is drawn
/// (`ttl_ms − ttl_ms × jitter`): else the TTL ends every row first.
fn idle_within_life(lit: &Lit, idle_ms: u64, ttl_ms: u64, jitter: Option<f64>) -> syn::Result<u64> {
    let shortest = shortest_life(ttl_ms, jitter);
    if idle_ms < shortest {
        return Ok(idle_ms);
    }
    Err(syn::Error::new(
        lit.span(),
        format!(
            "`idle_ms` must be less than the shortest life of a row, ttl_ms − ttl_ms × \
             jitter = {shortest} ms, not {idle_ms}: a row dies unread after `idle_ms`, \
             and this one would reach its TTL first"
        ),
    ))
}

/// `ttl_ms − ttl_ms × jitter`, the shortest life the runtime draws.
fn shortest_life(ttl_ms: u64, jitter: Option<f64>) -> u64 {
    // The runtime's default jitter (`TableSpec::DEFAULT_JITTER`).
    let jitter = jitter.unwrap_or(0.1);
    // As the runtime draws it: the spread in whole milliseconds.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let shortest = ttl_ms - (ttl_ms as f64 * jitter) as u64;
    shortest
}

fn coherence(lit: &Lit) -> syn::Result<&'static str> {
    one_of(lit, "coherence", "coherence mode", "modes", COHERENCE)
}

/// A tagged table keeps its keys on one slot: a tag's key in L2 is
/// written with its rows' (see `l2::tier`).
fn tag_placement(lit: &Lit, placement: &'static str, tagged: bool) -> syn::Result<&'static str> {
    if tagged && placement == "Spread" {
        return Err(syn::Error::new_spanned(
            lit,
            "a table with a `tag` keeps its keys on one slot: a tag's key in L2 is written \
             with its rows'; remove `placement = \"spread\"` or the `tag`",
        ));
    }
    Ok(placement)
}

fn placement(lit: &Lit) -> syn::Result<&'static str> {
    one_of(lit, "placement", "placement", "placements", PLACEMENT)
}

fn eviction(lit: &Lit) -> syn::Result<&'static str> {
    one_of(lit, "eviction", "eviction policy", "policies", EVICTION)
}

fn herd(lit: &Lit) -> syn::Result<&'static str> {
    one_of(lit, "herd", "herd", "herds", HERD)
}

fn warm(lit: &Lit) -> syn::Result<&'static str> {
    one_of(lit, "warm", "warm start", "warm starts", WARM)
}

/// The variant of the value of `key`, one of `choices`; else a message
/// naming the `what` it is not, a guess, and every one of the `all`.
fn one_of(
    lit: &Lit,
    key: &str,
    what: &str,
    all: &str,
    choices: &[(&str, &'static str)],
) -> syn::Result<&'static str> {
    let lit = string(lit, key)?;
    let value = lit.value();
    if let Some((_, variant)) = choices.iter().find(|(name, _)| *name == value) {
        return Ok(variant);
    }
    let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
    let guess = match hint::closest(&value, &names) {
        Some(guess) => format!(": did you mean \"{guess}\"?"),
        None => String::new(),
    };
    Err(syn::Error::new(
        lit.span(),
        format!(
            "unknown {what} {value:?}{guess}\n\
             the {all} are: {}",
            names.join(", ")
        ),
    ))
}

/// Whether `name` is a valid table name: `[a-z0-9_]+`.
fn is_table_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn table_name(lit: &Lit) -> syn::Result<String> {
    let lit = string(lit, "name")?;
    let name = lit.value();
    if is_table_name(&name) {
        return Ok(name);
    }
    let fixed: String = snake_case(&name)
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
        .collect();
    let guess = if is_table_name(&fixed) {
        format!(": did you mean \"{fixed}\"?")
    } else {
        String::new()
    };
    Err(syn::Error::new(
        lit.span(),
        format!("a table name is lowercase ASCII letters, digits and `_`; {name:?} is not{guess}"),
    ))
}

/// The table name of a type that declared none: its name in snake case.
fn derived_name(input: &DeriveInput) -> syn::Result<String> {
    let name = snake_case(&input.ident.to_string());
    if is_table_name(&name) {
        return Ok(name);
    }
    Err(syn::Error::new(
        input.ident.span(),
        format!(
            "this type's name gives the table name {name:?}, but a table name is lowercase \
             ASCII letters, digits and `_`: name the table with `name = \"...\"`"
        ),
    ))
}

fn krate(lit: &Lit) -> syn::Result<syn::Path> {
    let lit = string(lit, "crate")?;
    lit.parse::<syn::Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` is the path of the echo_cache crate, like {}; {:?} is not a path",
                attr::example("crate"),
                lit.value()
            ),
        )
    })
}

/// `GameSession` → `game_session`, `HTTPRoute` → `http_route`.
fn snake_case(ident: &str) -> String {
    let chars: Vec<char> = ident.trim_start_matches("r#").chars().collect();
    let mut out = String::with_capacity(chars.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
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
