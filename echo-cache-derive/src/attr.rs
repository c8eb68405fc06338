//! Reads the keys of `#[near_cache(...)]`, keeping each value's span.
//!
//! Nothing is judged here but the syntax: each key is one of the known
//! keys, appears at most once and is given a literal (a path, for
//! `loader`, `listener`, `tag` and `weigher`). Values are judged in `valid`; the loader's
//! and the listener's types by the compiler. Every mistake is kept, so one run of the compiler reports them
//! all.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Expr, ExprLit, ExprUnary, Lit, Token, UnOp};

use crate::errors::{At, Errors};
use crate::hint;

/// A key of `#[near_cache]`, with what the messages say about it.
pub(crate) struct Key {
    /// The key as written.
    pub(crate) name: &'static str,
    /// A value, as written after `=` in the messages' examples.
    pub(crate) example: &'static str,
    /// What the value is, for the "missing key" messages.
    pub(crate) meaning: &'static str,
}

/// The keys `#[near_cache]` accepts, in the order the docs list them.
pub(crate) const KEYS: &[Key] = &[
    Key {
        name: "kind",
        example: "\"GAM\"",
        meaning: "the three uppercase letters that begin the ids of this table",
    },
    Key {
        name: "ttl_ms",
        example: "60_000",
        meaning: "how long a row lives, in milliseconds",
    },
    Key {
        name: "loader",
        example: "load_game",
        meaning: "the function that reads a missing row from the system of record",
    },
    Key {
        name: "listener",
        example: "on_removed",
        meaning: "the function told when a row leaves L1: its id, its value and why",
    },
    Key {
        name: "tag",
        example: "tournament_of",
        meaning: "the function that names the group a row belongs to, for `Cache::invalidate_tag`",
    },
    Key {
        name: "coherence",
        example: "\"none\"",
        meaning: "how rows are kept coherent across nodes",
    },
    Key {
        name: "placement",
        example: "\"table\"",
        meaning: "where the table's keys live on a cluster: one slot (`table`) or every slot (`spread`)",
    },
    Key {
        name: "jitter",
        example: "0.1",
        meaning: "the fraction of `ttl_ms` by which a row's expiry may move",
    },
    Key {
        name: "max_size",
        example: "100_000",
        meaning: "how many rows L1 keeps at most",
    },
    Key {
        name: "max_bytes",
        example: "64_000_000",
        meaning: "how many bytes of values L1 keeps at most, by their weight",
    },
    Key {
        name: "weigher",
        example: "weigh_image",
        meaning: "the function that weighs a value for `max_bytes`, in bytes",
    },
    Key {
        name: "eviction",
        example: "\"hot\"",
        meaning: "what a full table does: keep the hot rows (`hot`) or keep what it has (`none`)",
    },
    Key {
        name: "warm",
        example: "\"ready\"",
        meaning: "whether a starting node warms L1 from the fleet's hot ids in L2: before `ready()` (`ready`) or behind its first reads (`background`)",
    },
    Key {
        name: "herd",
        example: "\"fleet\"",
        meaning: "how many loads a herd of misses on one id costs: one per node (`node`) or one across the fleet sharing L2 (`fleet`)",
    },
    Key {
        name: "sweep_ms",
        example: "1_000",
        meaning: "the period of the sweeper, in milliseconds",
    },
    Key {
        name: "absent_ttl_ms",
        example: "5_000",
        meaning: "how long the loader's \"not found\" is remembered, in milliseconds",
    },
    Key {
        name: "load_timeout_ms",
        example: "30_000",
        meaning: "how long a flight may take before its waiters get `LoadTimeout`, in milliseconds",
    },
    Key {
        name: "lost_grace_ms",
        example: "2_000",
        meaning: "how long L1 keeps serving once the invalidation channel is lost, in milliseconds",
    },
    Key {
        name: "stale_if_error_ms",
        example: "30_000",
        meaning: "how long past its expiry a value may still answer while the loader fails, in milliseconds (0: never)",
    },
    Key {
        name: "soft_timeout_ms",
        example: "200",
        meaning: "how long a flight's waiters wait for the loader before an expired value answers them, in milliseconds",
    },
    Key {
        name: "refresh_ms",
        example: "10_000",
        meaning: "how long before its expiry a row read starts its refresh, in milliseconds",
    },
    Key {
        name: "idle_ms",
        example: "300_000",
        meaning: "how long a row lives unread, in milliseconds",
    },
    Key {
        name: "name",
        example: "\"games\"",
        meaning: "the table's name",
    },
    Key {
        name: "crate",
        example: "\"::echo_cache\"",
        meaning: "the path of the echo_cache crate",
    },
];

/// The entry of `name` in [`KEYS`], if it is a key.
fn known(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.name == name)
}

/// The entry of `name` in [`KEYS`].
///
/// # Panics
///
/// If `name` is not a key: the callers name keys of the table.
pub(crate) fn key(name: &str) -> &'static Key {
    known(name).expect("a key of KEYS")
}

/// `key = example`, the way a message shows how to write a key.
pub(crate) fn example(name: &str) -> String {
    format!("`{name} = {}`", key(name).example)
}

/// A key's value as written.
pub(crate) enum Value {
    /// The key is not in the list.
    Absent,
    /// The key is in the list, but without a literal; that mistake is
    /// already recorded.
    Unreadable,
    /// The key's literal, and its entry's place in the list.
    Lit(At, Lit),
    /// The key's path: `loader`, `listener`, `tag` and `weigher` take one.
    Path(syn::ExprPath),
}

impl Value {
    /// The literal and its place, if the key was given one.
    pub(crate) fn lit(&self) -> Option<(At, &Lit)> {
        match self {
            Value::Lit(at, lit) => Some((*at, lit)),
            Value::Absent | Value::Unreadable | Value::Path(..) => None,
        }
    }

    /// The path, if the key was given one.
    pub(crate) fn path(&self) -> Option<&syn::ExprPath> {
        match self {
            Value::Path(path) => Some(path),
            Value::Absent | Value::Unreadable | Value::Lit(..) => None,
        }
    }
}

/// The keys as written, each with its literal, and the mistakes found
/// reading them.
pub(crate) struct Args {
    pub(crate) kind: Value,
    pub(crate) ttl_ms: Value,
    pub(crate) loader: Value,
    pub(crate) listener: Value,
    pub(crate) tag: Value,
    pub(crate) coherence: Value,
    pub(crate) placement: Value,
    pub(crate) eviction: Value,
    pub(crate) warm: Value,
    pub(crate) herd: Value,
    pub(crate) jitter: Value,
    pub(crate) max_size: Value,
    pub(crate) max_bytes: Value,
    pub(crate) weigher: Value,
    pub(crate) sweep_ms: Value,
    pub(crate) absent_ttl_ms: Value,
    pub(crate) load_timeout_ms: Value,
    pub(crate) lost_grace_ms: Value,
    pub(crate) stale_if_error_ms: Value,
    pub(crate) soft_timeout_ms: Value,
    pub(crate) refresh_ms: Value,
    pub(crate) idle_ms: Value,
    pub(crate) name: Value,
    pub(crate) krate: Value,
    /// Whether the whole list could be read. After a syntax error the keys
    /// that follow it are unknown, so none of them is reported missing.
    pub(crate) complete: bool,
    /// The keys that unknown keys were taken for (`ttl_ms` for `ttl`):
    /// the "did you mean" already says they are missing.
    pub(crate) guessed: Vec<&'static str>,
    /// Every mistake found reading the list.
    pub(crate) errors: Errors,
}

impl Args {
    /// The slot of the key `name`, or `None` if there is no such key.
    fn slot(&mut self, name: &str) -> Option<&mut Value> {
        Some(match name {
            "kind" => &mut self.kind,
            "ttl_ms" => &mut self.ttl_ms,
            "loader" => &mut self.loader,
            "listener" => &mut self.listener,
            "tag" => &mut self.tag,
            "coherence" => &mut self.coherence,
            "placement" => &mut self.placement,
            "eviction" => &mut self.eviction,
            "warm" => &mut self.warm,
            "herd" => &mut self.herd,
            "jitter" => &mut self.jitter,
            "max_size" => &mut self.max_size,
            "max_bytes" => &mut self.max_bytes,
            "weigher" => &mut self.weigher,
            "sweep_ms" => &mut self.sweep_ms,
            "absent_ttl_ms" => &mut self.absent_ttl_ms,
            "load_timeout_ms" => &mut self.load_timeout_ms,
            "lost_grace_ms" => &mut self.lost_grace_ms,
            "stale_if_error_ms" => &mut self.stale_if_error_ms,
            "soft_timeout_ms" => &mut self.soft_timeout_ms,
            "refresh_ms" => &mut self.refresh_ms,
            "idle_ms" => &mut self.idle_ms,
            "name" => &mut self.name,
            "crate" => &mut self.krate,
            _ => return None,
        })
    }
}

/// Reads the argument list. Mistakes are kept in [`Args::errors`], not
/// returned: the list is read to its end whatever it holds.
pub(crate) fn parse(tokens: TokenStream) -> Args {
    let mut args = Args {
        kind: Value::Absent,
        ttl_ms: Value::Absent,
        loader: Value::Absent,
        listener: Value::Absent,
        tag: Value::Absent,
        coherence: Value::Absent,
        placement: Value::Absent,
        eviction: Value::Absent,
        warm: Value::Absent,
        herd: Value::Absent,
        jitter: Value::Absent,
        max_size: Value::Absent,
        max_bytes: Value::Absent,
        weigher: Value::Absent,
        sweep_ms: Value::Absent,
        absent_ttl_ms: Value::Absent,
        load_timeout_ms: Value::Absent,
        lost_grace_ms: Value::Absent,
        stale_if_error_ms: Value::Absent,
        soft_timeout_ms: Value::Absent,
        refresh_ms: Value::Absent,
        idle_ms: Value::Absent,
        name: Value::Absent,
        krate: Value::Absent,
        complete: true,
        guessed: Vec::new(),
        errors: Errors::default(),
    };
    let mut entry = 0;
    let parser = syn::meta::parser(|meta| {
        let at = At::Entry(entry);
        entry += 1;
        // A syntax error ends the list: what follows it cannot be trusted.
        let value = read_value(&meta)?;
        if let Err(error) = set(&mut args, &meta, at, value) {
            args.errors.push(at, error);
        }
        Ok(())
    });
    if let Err(error) = syn::parse::Parser::parse2(parser, tokens) {
        args.errors.push(At::Entry(entry), error);
        args.complete = false;
    }
    args
}

/// The value after `key =`, or `None` when the key has no `= value`.
fn read_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Expr>> {
    if meta.input.is_empty() || meta.input.peek(Token![,]) {
        return Ok(None);
    }
    let equals = meta.value().map_err(|error| {
        let name = meta.path.to_token_stream().to_string();
        let like = match known(&name) {
            Some(_) => example(&name),
            None => format!("`{name} = ...`"),
        };
        syn::Error::new(
            error.span(),
            format!("expected `=` after `{name}`, like {like}"),
        )
    })?;
    Ok(Some(equals.parse()?))
}

/// Records the value of one key, or says why it cannot.
fn set(
    args: &mut Args,
    meta: &ParseNestedMeta<'_>,
    at: At,
    value: Option<Expr>,
) -> syn::Result<()> {
    let path = &meta.path;
    let name = path.to_token_stream().to_string();
    let Some(slot) = args.slot(&name) else {
        let names: Vec<&'static str> = KEYS.iter().map(|key| key.name).collect();
        let guess = hint::closest(&name, &names);
        args.guessed.extend(guess);
        return Err(unknown(path, &name, &names, guess));
    };
    if !matches!(slot, Value::Absent) {
        return Err(syn::Error::new_spanned(
            path,
            format!("`{name}` is given twice: give each key once"),
        ));
    }
    // Mark the key as given before judging its value, so a key with a bad
    // value is not also reported missing.
    *slot = Value::Unreadable;
    let Some(value) = value else {
        return Err(syn::Error::new_spanned(
            path,
            format!("`{name}` needs a value, like {}", example(&name)),
        ));
    };
    *slot = if matches!(name.as_str(), "loader" | "listener" | "tag" | "weigher") {
        Value::Path(function_path(&name, value)?)
    } else {
        Value::Lit(at, literal(&name, value)?)
    };
    Ok(())
}

/// `value` out of the invisible groups around it: a `macro_rules!`
/// fragment (`$kind:literal`, `$ttl:expr`) reaches the attribute wrapped in
/// one.
fn ungrouped(value: Expr) -> Expr {
    match value {
        Expr::Group(group) => ungrouped(*group.expr),
        value => value,
    }
}

fn unknown(path: &syn::Path, name: &str, names: &[&str], guess: Option<&str>) -> syn::Error {
    let guess = match guess {
        Some(guess) => format!(": did you mean `{guess}`?"),
        None => String::new(),
    };
    syn::Error::new_spanned(
        path,
        format!(
            "unknown key `{name}`{guess}\n\
             the keys of #[near_cache] are: {}",
            names.join(", ")
        ),
    )
}

/// The path `loader`, `listener`, `tag` or `weigher` (`name`) names: a function, written as
/// it would be called.
fn function_path(name: &str, value: Expr) -> syn::Result<syn::ExprPath> {
    let value = ungrouped(value);
    let message = match value {
        Expr::Path(path) => return Ok(path),
        Expr::Lit(ExprLit {
            lit: Lit::Str(ref string),
            ..
        }) if string.parse::<syn::Path>().is_ok() => format!(
            "`{name}` takes the path of a function, not a string: write \
             `{name} = {}`, without the quotes",
            string.value()
        ),
        Expr::Closure(_) if name == "loader" => format!(
            "`loader` takes the path of a function, not a closure: write the loader \
             as an `async fn` and name it, like {}; a loader that needs state goes to \
             `Builder::loader`",
            example("loader")
        ),
        Expr::Closure(_) if name == "weigher" => format!(
            "`weigher` takes the path of a function, not a closure: write the weigher \
             as a `fn(&T) -> usize` and name it, like {}",
            example(name)
        ),
        Expr::Closure(_) if name == "listener" => format!(
            "`{name}` takes the path of a function, not a closure: write the listener \
             as a `fn` and name it, like {}; a listener that needs state goes to \
             `Builder::listener`",
            example(name)
        ),
        _ => format!(
            "`{name}` takes the path of a function, like {}",
            example(name)
        ),
    };
    Err(syn::Error::new_spanned(value, message))
}

fn literal(name: &str, value: Expr) -> syn::Result<Lit> {
    let value = ungrouped(value);
    if let Expr::Lit(ExprLit { lit, .. }) = value {
        return Ok(lit);
    }
    let string = key(name).example.starts_with('"');
    let negative = matches!(
        &value,
        Expr::Unary(ExprUnary { op: UnOp::Neg(_), expr, .. }) if matches!(**expr, Expr::Lit(_))
    );
    let message = if negative && !string {
        format!("`{name}` may not be negative")
    } else if string && matches!(value, Expr::Path(_)) {
        format!(
            "`{name}` takes a string: write it in quotes, like {}",
            example(name)
        )
    } else {
        format!(
            "`{name}` takes a literal, like {}: the attribute cannot read constants or \
             expressions",
            example(name)
        )
    };
    Err(syn::Error::new_spanned(value, message))
}
