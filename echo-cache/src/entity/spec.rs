//! What a declaration says: the [`TableSpec`] of a cache and the [`Cached`]
//! trait that `#[near_cache(...)]` implements.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::entity::kind::Kind;

/// How a table's rows are kept coherent across nodes.
///
/// Declared per table (`coherence = "..."`, `none` unless declared); see
/// [Coherence](crate#coherence) in the crate docs for what each mode
/// guarantees.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cached, Coherence};
///
/// /// Immutable once written: TTL alone.
/// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {}
///
/// /// Revocable: every node must drop it when it changes.
/// #[near_cache(kind = "SES", ttl_ms = 86_400_000, coherence = "tracking")]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Session {}
///
/// assert_eq!(Game::spec().coherence(), Coherence::None);
/// assert_eq!(Session::spec().coherence().as_str(), "tracking");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Coherence {
    /// TTL only: for entities that never change once written.
    None,
    /// Server-assisted: RESP3 client tracking pushes an invalidation to every
    /// node when another client writes a key.
    Tracking,
    /// Versioned, at-most-once: writers publish `id:version` messages that
    /// every node applies newer-wins.
    Broadcast,
    /// Versioned, at-least-once: the same messages through a stream that
    /// every node consumes and acknowledges.
    Durable,
}

impl Coherence {
    /// The name used in the attribute: `none`, `tracking`, `broadcast`, `durable`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Coherence::None => "none",
            Coherence::Tracking => "tracking",
            Coherence::Broadcast => "broadcast",
            Coherence::Durable => "durable",
        }
    }
}

impl Coherence {
    /// Whether values are versioned by writes (every mode but `none`):
    /// fills mint their version, L2 writes go through the version-checking
    /// script, invalidations leave tombstones and are applied newer-wins.
    pub(crate) const fn versioned(self) -> bool {
        !matches!(self, Coherence::None)
    }
}

/// Where a table's keys live on a cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Placement {
    /// On one slot, the table's (`ecc:{<table>}:<id>`): every key, the
    /// stream and the channel of a table on one master.
    #[default]
    Table,
    /// Every id on its own slot (`ecc:<table>:<id>`): a large, hot table
    /// spreads over the masters. Its stream and channel stay on the
    /// table's slot.
    Spread,
}

impl Placement {
    /// The name used in the attribute: `table`, `spread`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Placement::Table => "table",
            Placement::Spread => "spread",
        }
    }
}

/// What a table holding `max_size` rows does with a new one.
///
/// Declared per table (`eviction = "..."`, `hot` unless declared); see
/// [When a table is full](crate#when-a-table-is-full) in the crate docs.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cached, Eviction};
///
/// /// Bounded, and the hot rows stay: a new row evicts a colder one.
/// #[near_cache(kind = "GAM", ttl_ms = 600_000, max_size = 50_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {}
///
/// /// Full means full: new rows are served, not kept, until rows die.
/// #[near_cache(kind = "RUL", ttl_ms = 600_000, max_size = 1_000, eviction = "none")]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Rule {}
///
/// assert_eq!(Game::spec().eviction(), Eviction::Hot);
/// assert_eq!(Rule::spec().eviction().as_str(), "none");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Eviction {
    /// Keeps the rows asked for most: a new row evicts one that was not
    /// read since the clock hand last passed it, if the new row's id was
    /// asked for more often lately ([`Stats::evictions`](crate::Stats::evictions));
    /// otherwise the new row is served without being kept.
    #[default]
    Hot,
    /// Evicts nothing: a new row is served without being kept
    /// ([`Stats::full_skips`](crate::Stats::full_skips)) until dead rows
    /// are reclaimed. For tables whose rows must stay for their whole TTL.
    None,
}

impl Eviction {
    /// The name used in the attribute: `hot`, `none`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Eviction::Hot => "hot",
            Eviction::None => "none",
        }
    }
}

/// Whether a starting node warms the table's L1 from the fleet's list of
/// hot ids in L2, and when: see [Warm start](crate#warm-start).
///
/// Declared per table (`warm = "ready"` or `warm = "background"`; off
/// unless declared). A table declared warm also keeps the fleet's list up
/// to date: each node merges its hottest ids into it as it reads.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cached, Warm};
///
/// /// `Cache::ready()` returns once the hot games are in L1.
/// #[near_cache(kind = "GAM", ttl_ms = 600_000, warm = "ready")]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {}
///
/// /// Warmed behind the node's first reads.
/// #[near_cache(kind = "USR", ttl_ms = 600_000, warm = "background")]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct User {}
///
/// #[near_cache(kind = "RUL", ttl_ms = 600_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Rule {}
///
/// assert_eq!(Game::spec().warm(), Warm::Ready);
/// assert_eq!(User::spec().warm().as_str(), "background");
/// assert_eq!(Rule::spec().warm(), Warm::Off);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Warm {
    /// Starts cold, and lists nothing in L2 (today's behaviour).
    #[default]
    Off,
    /// Warms before [`Cache::ready`](crate::Cache::ready) returns.
    Ready,
    /// Warms in the background: `ready()` does not wait for it.
    Background,
}

impl Warm {
    /// The name used in the attribute: `off` (not declared), `ready`,
    /// `background`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Warm::Off => "off",
            Warm::Ready => "ready",
            Warm::Background => "background",
        }
    }
}

impl fmt::Display for Warm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many loads a herd of concurrent misses on one id costs: one per
/// node, or one across the fleet of nodes sharing L2. See
/// [Herds across the fleet](crate#herds-across-the-fleet).
///
/// Declared per table (`herd = "fleet"`; `node` unless declared).
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cached, Herd};
///
/// /// An expensive load: one node loads, the others read its frame.
/// #[near_cache(kind = "GAM", ttl_ms = 600_000, herd = "fleet")]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {}
///
/// #[near_cache(kind = "RUL", ttl_ms = 600_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Rule {}
///
/// assert_eq!(Game::spec().herd(), Herd::Fleet);
/// assert_eq!(Rule::spec().herd().as_str(), "node");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Herd {
    /// One flight per id on each node: a herd costs a load per node
    /// (today's behaviour, and no key beside the frame).
    #[default]
    Node,
    /// One load per id across the nodes sharing L2: a miss that finds no
    /// frame takes a lease on the id in the same round trip as its read;
    /// the other nodes wait for the holder's frame.
    Fleet,
}

impl Herd {
    /// The name used in the attribute: `node`, `fleet`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Herd::Node => "node",
            Herd::Fleet => "fleet",
        }
    }
}

impl fmt::Display for Herd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Eviction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Coherence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The declared specification of one cache table.
///
/// Written by `#[near_cache(...)]`, validated at compile time, listed by
/// [`declared`](crate::declared) and by a cache's roster.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cached, TableSpec};
///
/// #[near_cache(kind = "GAM", name = "cm_games", ttl_ms = 600_000, max_size = 50_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {}
///
/// let spec: &TableSpec = Game::spec();
/// assert_eq!((spec.name(), spec.kind().as_str()), ("cm_games", "GAM"));
/// assert_eq!((spec.ttl_ms(), spec.max_size()), (600_000, 50_000));
/// assert_eq!(spec.jitter(), TableSpec::DEFAULT_JITTER); // not declared: the default
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TableSpec {
    pub(crate) name: &'static str,
    pub(crate) type_name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) ttl_ms: u64,
    pub(crate) jitter: f64,
    pub(crate) max_size: usize,
    /// The most bytes of values L1 keeps, by their weight (`max_bytes`):
    /// none if `None`.
    pub(crate) max_bytes: Option<usize>,
    pub(crate) sweep_ms: u64,
    pub(crate) absent_ttl_ms: u64,
    /// `None`: the cache's [`Builder::load_timeout`](crate::Builder::load_timeout).
    pub(crate) load_timeout_ms: Option<u64>,
    /// 0: flush and bypass as soon as the channel is lost.
    pub(crate) lost_grace_ms: u64,
    /// How long past its expiry a row may answer while the loader fails.
    pub(crate) stale_if_error_ms: u64,
    /// How long a flight's waiters wait for the loader before a stale
    /// value answers them (`None`: until the deadline).
    pub(crate) soft_timeout_ms: Option<u64>,
    /// 0: no refresh-ahead.
    pub(crate) refresh_ms: u64,
    /// 0: rows live to their TTL, read or not.
    pub(crate) idle_ms: u64,
    pub(crate) coherence: Coherence,
    pub(crate) placement: Placement,
    pub(crate) eviction: Eviction,
    pub(crate) warm: Warm,
    pub(crate) herd: Herd,
    /// How many hot ids the fleet's list keeps, and a starting node warms.
    pub(crate) warm_ids: usize,
    pub(crate) fingerprint: u64,
}

/// Defaults of the optional keys of `#[near_cache(...)]`.
impl TableSpec {
    /// Expiry is drawn from `ttl ± ttl·jitter`; 10% unless declared.
    pub const DEFAULT_JITTER: f64 = 0.1;
    /// Rows kept in L1 at most, unless declared.
    pub const DEFAULT_MAX_SIZE: usize = 100_000;
    /// How often the sweeper reclaims expired rows, unless declared.
    pub const DEFAULT_SWEEP_MS: u64 = 1_000;
    /// How long "the loader found nothing" is remembered; 0 (not at all)
    /// unless declared.
    pub const DEFAULT_ABSENT_TTL_MS: u64 = 0;
    /// How long past its expiry a value may answer while the loader
    /// fails; 0 (never: the loader's error) unless declared.
    pub const DEFAULT_STALE_IF_ERROR_MS: u64 = 0;
    /// How long before its expiry a row read starts its refresh; 0 (rows
    /// are not refreshed ahead: they die and the next read misses) unless
    /// declared.
    pub const DEFAULT_REFRESH_MS: u64 = 0;
    /// How long a row lives unread; 0 (to its TTL, read or not) unless
    /// declared.
    pub const DEFAULT_IDLE_MS: u64 = 0;
    /// How many hot ids the fleet's list of a `warm` table keeps, and a
    /// starting node warms, unless set ([`Limits::warm_ids`](crate::Limits::warm_ids)).
    pub const DEFAULT_WARM_IDS: usize = 1_000;
}

impl TableSpec {
    /// The table name (`[a-z0-9_]+`), unique in the program.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The Rust type that declared the table.
    #[must_use]
    pub const fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The kind of the table's ids, unique in the program.
    #[must_use]
    pub const fn kind(&self) -> Kind {
        self.kind
    }

    /// Time to live of a row, in milliseconds, before jitter.
    #[must_use]
    pub const fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// Fraction of the TTL by which a row's expiry may move either way.
    #[must_use]
    pub const fn jitter(&self) -> f64 {
        self.jitter
    }

    /// Most rows kept in L1.
    #[must_use]
    pub const fn max_size(&self) -> usize {
        self.max_size
    }

    /// Most bytes of values kept in L1, counted by their weight
    /// (`max_bytes`), if the table declares a byte bound; see
    /// [A byte bound](crate#a-byte-bound).
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cached};
    ///
    /// #[near_cache(kind = "IMG", ttl_ms = 60_000, max_bytes = 64_000_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Image { pub png: Vec<u8> }
    ///
    /// assert_eq!(Image::spec().max_bytes(), Some(64_000_000));
    /// ```
    #[must_use]
    pub const fn max_bytes(&self) -> Option<usize> {
        self.max_bytes
    }

    /// Period of the sweeper, in milliseconds.
    #[must_use]
    pub const fn sweep_ms(&self) -> u64 {
        self.sweep_ms
    }

    /// How long the loader's "not found" is remembered, in milliseconds
    /// (0: not remembered).
    #[must_use]
    pub const fn absent_ttl_ms(&self) -> u64 {
        self.absent_ttl_ms
    }

    /// The deadline of the table's flights, in milliseconds, if the table
    /// declares one (`load_timeout_ms`); else the cache's
    /// [`Builder::load_timeout`](crate::Builder::load_timeout) applies.
    #[must_use]
    pub const fn load_timeout_ms(&self) -> Option<u64> {
        self.load_timeout_ms
    }

    /// How long L1 keeps serving, unverified, once the table's
    /// invalidation channel is lost (`lost_grace_ms`; 0, the default: it is
    /// flushed and bypassed at once). See
    /// [A lost channel](crate#a-lost-channel).
    #[must_use]
    pub const fn lost_grace_ms(&self) -> u64 {
        self.lost_grace_ms
    }

    /// How long past its expiry a value may still answer while the loader
    /// fails or times out (`stale_if_error_ms`), in milliseconds (0: never);
    /// see [Serving stale](crate#serving-stale-while-the-store-fails).
    #[must_use]
    pub const fn stale_if_error_ms(&self) -> u64 {
        self.stale_if_error_ms
    }

    /// How long a flight's waiters wait for the loader before an expired
    /// value answers them while the load goes on (`soft_timeout_ms`), in
    /// milliseconds, if the table declares one; see
    /// [Soft timeouts](crate#soft-timeouts).
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cached};
    ///
    /// #[near_cache(kind = "PRC", ttl_ms = 60_000, stale_if_error_ms = 600_000, soft_timeout_ms = 200)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Price { pub cents: u64 }
    ///
    /// assert_eq!(Price::spec().soft_timeout_ms(), Some(200));
    /// ```
    #[must_use]
    pub const fn soft_timeout_ms(&self) -> Option<u64> {
        self.soft_timeout_ms
    }

    /// How long before its expiry a row read starts its refresh, in
    /// milliseconds (`refresh_ms`; 0: rows are not refreshed ahead). See
    /// [Refresh-ahead](crate#refresh-ahead) in the crate docs.
    #[must_use]
    pub const fn refresh_ms(&self) -> u64 {
        self.refresh_ms
    }

    /// How long a row lives unread, in milliseconds (`idle_ms`; 0: rows
    /// live to their TTL, read or not). See
    /// [Time-to-idle](crate#time-to-idle) in the crate docs.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cached};
    ///
    /// #[near_cache(kind = "SES", ttl_ms = 3_600_000, idle_ms = 300_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Session { pub user: u64 }
    ///
    /// assert_eq!(Session::spec().idle_ms(), 300_000);
    /// ```
    #[must_use]
    pub const fn idle_ms(&self) -> u64 {
        self.idle_ms
    }

    /// The coherence mode.
    #[must_use]
    pub const fn coherence(&self) -> Coherence {
        self.coherence
    }

    /// Where the table's keys live on a cluster.
    #[must_use]
    pub const fn placement(&self) -> Placement {
        self.placement
    }

    /// What the table does when it holds `max_size` rows.
    #[must_use]
    pub const fn eviction(&self) -> Eviction {
        self.eviction
    }

    /// Whether and when a starting node warms the table (`warm`).
    #[must_use]
    pub const fn warm(&self) -> Warm {
        self.warm
    }

    /// How many loads a herd of misses on one id costs (`herd`).
    #[must_use]
    pub const fn herd(&self) -> Herd {
        self.herd
    }

    /// How many hot ids the fleet's list keeps, and a starting node warms
    /// (see [Warm start](crate#warm-start)).
    #[must_use]
    pub const fn warm_ids(&self) -> usize {
        self.warm_ids
    }

    /// A fingerprint of the declared struct's definition: two builds whose
    /// structs differ have different fingerprints. It sees the struct's own
    /// tokens only, not inside the types of its fields: the L2 schema stamp
    /// adds the traced shape of its values (see [L2](crate#l2)).
    #[must_use]
    pub const fn fingerprint(&self) -> u64 {
        self.fingerprint
    }
}

/// A type with a near-cache, declared with `#[near_cache(...)]`.
///
/// Implemented only by the attribute. It ties the type to its table: its
/// ids are [`Id<Self>`](crate::Id) of the declared kind, and
/// [`Cache::fetch`](crate::Cache::fetch) reads it through that table.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no near-cache",
    label = "`{Self}` is not declared with `#[near_cache(...)]`",
    note = "add `#[echo_cache::near_cache(kind = \"ABC\", ttl_ms = 60_000)]` to the definition of `{Self}` to give it a cache"
)]
pub trait Cached: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The kind of this type's ids.
    const KIND: Kind;

    /// The spec in the type's declaration (whose address is the
    /// declaration's: see `Declaration`).
    #[doc(hidden)]
    fn __spec() -> &'static TableSpec;

    /// The declared specification of this type's table. A cache may run
    /// it with other limits ([`Builder::limits`](crate::Builder::limits)):
    /// [`Cache::tables`](crate::Cache::tables) shows those in force.
    #[must_use]
    fn spec() -> &'static TableSpec {
        Self::__spec()
    }

    /// Whether the declaration names a `tag` function.
    #[doc(hidden)]
    const __TAGGED: bool = false;

    /// The tag of `self` by the declared `tag` function (none without one).
    #[doc(hidden)]
    #[must_use]
    fn __tag(&self) -> Option<crate::entity::tag::Tag> {
        None
    }
}
