//! The limits a builder sets on tables in place of their declarations'
//! ([`Builder::limits`], [`Builder::limits_named`]), and the specs in
//! force they make, which the tables open with.
//!
//! A table holds its spec as `&'static TableSpec` (so do its L2 tier, its
//! announcer and its coherence lanes): a spec in force that differs from
//! the declaration is leaked once per process for each distinct set of
//! values (about 150 bytes), and found again by every later cache built
//! with the same limits.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::Builder;
#[cfg(doc)]
use crate::cache::Cache;
use crate::cache::directory::DECLARATIONS;
use crate::entity::limits::{Limits, soft_past_deadline};
use crate::entity::spec::{Cached, TableSpec};
use crate::error::Error;

/// The table some limits are for: named by its type, or by its table
/// name (checked at build).
pub(super) enum Limited {
    Declared(&'static TableSpec),
    Named(String),
}

impl Builder {
    /// Sets `T`'s limits in this cache in place of the declared ones: its
    /// `ttl_ms`, `jitter`, `max_size`, `refresh_ms`, `idle_ms` and
    /// `stale_if_error_ms`, each that `limits` sets (see [`Limits`]). For
    /// a cache built from the same declarations in two deployments that
    /// need other limits: a small `max_size` on a small host, a short
    /// `ttl_ms` in staging.
    ///
    /// The declaration stays the default, and the source of the table's
    /// kind, name, coherence mode, placement and eviction policy.
    /// Everything the table sizes or times by its limits follows the
    /// limits in force: L1's bound, rows' and L2 frames' lifetimes,
    /// refresh-ahead, time-to-idle, stale serving (and the L2 tombstones a `none` table
    /// keeps for it), the clock's tick. [`Cache::tables`] shows them;
    /// `T::spec()` and [`declared`](crate::declared) keep showing the
    /// declaration. Like [`loader`](Self::loader), the last limits given
    /// to a table win (a later call replaces all of an earlier one's).
    ///
    /// [`build`](Self::build) checks the limits in force by the
    /// attribute's rules, and refuses a mistake with
    /// [`Error::Config`], naming the table and saying what the attribute
    /// would say of it; so does a table left closed ([`open`](Self::open))
    /// given limits.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Error, Limits};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000, max_size = 50_000, refresh_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Game { pub secret: String }
    ///
    /// // A small host: fewer rows, kept for less long.
    /// let cache = Cache::builder()
    ///     .without_loader::<Game>()
    ///     .limits::<Game>(Limits::new().max_size(1_000).ttl_ms(120_000).refresh_ms(10_000))
    ///     .build()?;
    /// let games = &cache.tables()[0].spec;
    /// assert_eq!((games.max_size(), games.ttl_ms(), games.refresh_ms()), (1_000, 120_000, 10_000));
    /// assert_eq!(<Game as echo_cache::Cached>::spec().max_size(), 50_000); // as declared
    ///
    /// // The declared refresh-ahead does not fit a 30 s TTL.
    /// let refused = Cache::builder()
    ///     .without_loader::<Game>()
    ///     .limits::<Game>(Limits::new().ttl_ms(30_000))
    ///     .build();
    /// assert!(matches!(refused, Err(Error::Config(why)) if why.contains("`refresh_ms` must be less")));
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    #[must_use]
    pub fn limits<T: Cached>(mut self, limits: Limits) -> Builder {
        self.limits.push((Limited::Declared(T::__spec()), limits));
        self
    }

    /// Sets the limits of the table named `table` (its declared `name`),
    /// as [`limits`](Self::limits) does for a type: for limits read from a
    /// configuration file, keyed by table name.
    ///
    /// [`build`](Self::build) refuses a name that no declaration of the
    /// program has ([`Error::Config`]).
    ///
    /// ```standalone_crate
    /// use std::collections::HashMap;
    /// use echo_cache::{near_cache, Cache, Error, Limits};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000, name = "games")]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Game { pub secret: String }
    ///
    /// // What this deployment's configuration says, by table.
    /// let configured = HashMap::from([("games", 30_000)]);
    /// let builder = configured.into_iter().fold(Cache::builder(), |builder, (table, ttl_ms)| {
    ///     builder.limits_named(table, Limits::new().ttl_ms(ttl_ms))
    /// });
    /// let cache = builder.without_loader::<Game>().build()?;
    /// assert_eq!(cache.tables()[0].spec.ttl_ms(), 30_000);
    ///
    /// let refused = Cache::builder().limits_named("gmaes", Limits::new()).build();
    /// assert!(matches!(refused, Err(Error::Config(why)) if why.contains("\"gmaes\"")));
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    #[must_use]
    pub fn limits_named(mut self, table: impl Into<String>, limits: Limits) -> Builder {
        self.limits.push((Limited::Named(table.into()), limits));
        self
    }

    /// The specs in force of the tables given limits, by their
    /// declaration's address; each table given limits is recorded as
    /// configured (see [`check_open`](Self::check_open)).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a table name no declaration has, or limits
    /// that break the attribute's rules.
    pub(super) fn specs_in_force(&mut self) -> Result<HashMap<usize, &'static TableSpec>, Error> {
        // The last limits given to a table win.
        let mut given: HashMap<usize, (&'static TableSpec, Limits)> = HashMap::new();
        for (table, limits) in std::mem::take(&mut self.limits) {
            let declared = match table {
                Limited::Declared(spec) => spec,
                Limited::Named(name) => crate::spec(&name).ok_or_else(|| {
                    Error::Config(format!(
                        "limits given to the table {name:?}, which no declaration of the \
                         program names"
                    ))
                })?,
            };
            self.configure(declared);
            given.insert(address(declared), (declared, limits));
        }
        let mut in_force = HashMap::new();
        for (at, (declared, limits)) in given {
            let spec = declared.limited(&limits).map_err(|faults| {
                Error::Config(format!(
                    "the limits given to the table {:?} (`{}`): {}",
                    declared.name(),
                    declared.type_name(),
                    faults.join("; ")
                ))
            })?;
            in_force.insert(at, interned(declared, spec));
        }
        Ok(in_force)
    }
}

impl Builder {
    /// Checks that each open table's soft timeout in force is shorter than
    /// its flight's deadline in force: its `load_timeout_ms`, else
    /// [`load_timeout`](Self::load_timeout) (the table's own deadline is
    /// checked with its limits).
    ///
    /// # Errors
    ///
    /// [`Error::Config`], naming the table, if one is not.
    pub(super) fn check_soft_timeouts(
        &self,
        in_force: &HashMap<usize, &'static TableSpec>,
    ) -> Result<(), Error> {
        let deadline_ms = u64::try_from(self.load_timeout.as_millis()).unwrap_or(u64::MAX);
        for declaration in DECLARATIONS {
            let declared = declaration.spec();
            let spec = in_force
                .get(&address(declared))
                .copied()
                .unwrap_or(declared);
            let Some(soft_ms) = spec
                .soft_timeout_ms
                .filter(|_| spec.load_timeout_ms.is_none())
            else {
                continue;
            };
            if !super::opens(&self.open, declared) {
                continue;
            }
            if let Some(fault) = soft_past_deadline(soft_ms, deadline_ms, "`Builder::load_timeout`")
            {
                return Err(Error::Config(format!(
                    "the table {:?} (`{}`): {fault}",
                    spec.name(),
                    spec.type_name()
                )));
            }
        }
        Ok(())
    }
}

/// The address of a declared spec: its declaration's.
pub(super) fn address(spec: &'static TableSpec) -> usize {
    std::ptr::from_ref(spec) as usize
}

/// `spec` for the life of the process: `declared` itself if the limits
/// changed nothing, else the one leaked for an equal spec before, else a
/// new one.
fn interned(declared: &'static TableSpec, spec: TableSpec) -> &'static TableSpec {
    static IN_FORCE: Mutex<Vec<&'static TableSpec>> = Mutex::new(Vec::new());
    if spec == *declared {
        return declared;
    }
    let mut specs = IN_FORCE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&found) = specs.iter().find(|&&known| *known == spec) {
        return found;
    }
    let leaked: &'static TableSpec = Box::leak(Box::new(spec));
    specs.push(leaked);
    leaked
}
