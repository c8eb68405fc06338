//! The directory: every declaration linked into the program, gathered by the
//! linker (no start-up code, no registration call).
//!
//! `#[near_cache(...)]` places one [`Declaration`] per type in a distributed
//! slice ([`linkme`]); [`declared`] lists them and
//! [`Cache::builder`](crate::Cache::builder) opens one table per declaration.

use std::sync::OnceLock;

use linkme::distributed_slice;

use crate::entity::spec::{Coherence, Eviction, Herd, Placement, TableSpec, Warm};
use crate::error::Error;
use crate::table::{Declared, Opened, Shared};

/// Every declaration linked into the program, in link order.
#[doc(hidden)]
#[distributed_slice]
pub static DECLARATIONS: [Declaration];

/// One declared table: its spec and how to open it.
///
/// `repr(C)` with the spec first: the spec's address is the declaration's,
/// which is how [`Cached::__spec`](crate::Cached) finds a type's place in
/// the directory without naming the directory.
#[doc(hidden)]
#[repr(C)]
pub struct Declaration {
    pub(crate) spec: TableSpec,
    pub(crate) open: fn(&'static TableSpec, &Shared) -> Opened,
}

impl Declaration {
    #[doc(hidden)]
    #[must_use]
    pub const fn new<T: Declared>(spec: TableSpec) -> Declaration {
        Declaration {
            spec,
            open: crate::table::open::<T>,
        }
    }

    /// The declared spec (what the attribute's `Cached::__spec` answers).
    #[doc(hidden)]
    #[must_use]
    pub const fn spec(&'static self) -> &'static TableSpec {
        &self.spec
    }
}

/// The parts of a [`TableSpec`], as the attribute writes them.
#[doc(hidden)]
pub struct SpecParts {
    pub name: &'static str,
    pub type_name: &'static str,
    pub kind: &'static str,
    pub ttl_ms: u64,
    pub jitter: Option<f64>,
    pub max_size: Option<usize>,
    pub max_bytes: Option<usize>,
    pub sweep_ms: Option<u64>,
    pub absent_ttl_ms: Option<u64>,
    pub load_timeout_ms: Option<u64>,
    pub lost_grace_ms: Option<u64>,
    pub stale_if_error_ms: Option<u64>,
    pub soft_timeout_ms: Option<u64>,
    pub refresh_ms: Option<u64>,
    pub idle_ms: Option<u64>,
    pub coherence: Coherence,
    pub placement: Placement,
    pub eviction: Eviction,
    pub warm: Warm,
    pub herd: Herd,
    pub fingerprint: u64,
}

impl SpecParts {
    #[doc(hidden)]
    #[must_use]
    pub const fn build(self) -> TableSpec {
        TableSpec {
            name: self.name,
            type_name: self.type_name,
            kind: crate::entity::kind::Kind::new(self.kind),
            ttl_ms: self.ttl_ms,
            jitter: match self.jitter {
                Some(jitter) => jitter,
                None => TableSpec::DEFAULT_JITTER,
            },
            max_size: match self.max_size {
                Some(max_size) => max_size,
                None => TableSpec::DEFAULT_MAX_SIZE,
            },
            max_bytes: self.max_bytes,
            sweep_ms: match self.sweep_ms {
                Some(sweep_ms) => sweep_ms,
                None => TableSpec::DEFAULT_SWEEP_MS,
            },
            absent_ttl_ms: match self.absent_ttl_ms {
                Some(absent_ttl_ms) => absent_ttl_ms,
                None => TableSpec::DEFAULT_ABSENT_TTL_MS,
            },
            load_timeout_ms: self.load_timeout_ms,
            lost_grace_ms: match self.lost_grace_ms {
                Some(grace) => grace,
                None => 0,
            },
            stale_if_error_ms: match self.stale_if_error_ms {
                Some(grace) => grace,
                None => TableSpec::DEFAULT_STALE_IF_ERROR_MS,
            },
            soft_timeout_ms: self.soft_timeout_ms,
            refresh_ms: match self.refresh_ms {
                Some(refresh_ms) => refresh_ms,
                None => TableSpec::DEFAULT_REFRESH_MS,
            },
            idle_ms: match self.idle_ms {
                Some(idle_ms) => idle_ms,
                None => TableSpec::DEFAULT_IDLE_MS,
            },
            coherence: self.coherence,
            placement: self.placement,
            eviction: self.eviction,
            warm: self.warm,
            herd: self.herd,
            warm_ids: TableSpec::DEFAULT_WARM_IDS,
            fingerprint: self.fingerprint,
        }
    }
}

/// Every cache declared in the program, sorted by table name.
///
/// Gathered at link time: no registration call is needed, and the list is
/// complete before `main` runs.
///
/// ```
/// #[echo_cache::near_cache(kind = "GAM", ttl_ms = 60_000, name = "games")]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Game { secret: String }
///
/// let names: Vec<&str> = echo_cache::declared().iter().map(|s| s.name()).collect();
/// assert!(names.contains(&"games"));
/// ```
pub fn declared() -> &'static [&'static TableSpec] {
    static SORTED: OnceLock<Vec<&'static TableSpec>> = OnceLock::new();
    SORTED.get_or_init(|| {
        let mut specs: Vec<&'static TableSpec> = DECLARATIONS.iter().map(|d| &d.spec).collect();
        specs.sort_by_key(|spec| (spec.name, spec.type_name));
        specs
    })
}

/// The declared table named `name`, if the program declares one.
///
/// ```
/// #[echo_cache::near_cache(kind = "GAM", ttl_ms = 60_000, name = "cm_games")]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Game { secret: String }
///
/// let games = echo_cache::spec("cm_games").expect("cm_games is declared");
/// assert_eq!(games.kind().as_str(), "GAM");
/// assert!(echo_cache::spec("nothing_here").is_none());
/// ```
#[must_use]
pub fn spec(name: &str) -> Option<&'static TableSpec> {
    let specs = declared();
    // Sorted by name: the first of the names that are not less is the one.
    let at = specs.partition_point(|spec| spec.name < name);
    specs.get(at).copied().filter(|spec| spec.name == name)
}

/// Refuses two declarations that share a table name or a kind.
///
/// # Errors
///
/// [`Error::Conflict`] naming both types.
pub(crate) fn check_unique() -> Result<(), Error> {
    let specs = declared();
    for (i, a) in specs.iter().enumerate() {
        for b in &specs[i + 1..] {
            let clash = if a.name == b.name {
                Some(format!("table name `{}`", a.name))
            } else if a.kind == b.kind {
                Some(format!("kind `{}`", a.kind))
            } else {
                None
            };
            if let Some(what) = clash {
                return Err(Error::Conflict {
                    what: what.into(),
                    first: a,
                    second: b,
                });
            }
        }
    }
    Ok(())
}
