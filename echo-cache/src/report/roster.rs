//! The live roster of a cache: each table's spec, counters and health.

use crate::entity::spec::TableSpec;
use crate::report::stats::Stats;

/// How a table is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Serving hits from L1 and keeping what it fills.
    Serving,
    /// L1 holds `max_size` rows. With `eviction = "hot"` (the default) a
    /// new row evicts a colder one if its id was asked for more often, and
    /// is served without being kept otherwise; with `eviction = "none"`
    /// new rows are served but not kept until dead rows are reclaimed.
    /// See [When a table is full](crate#when-a-table-is-full).
    Full,
    /// The L2 server is not answering: fetches go on to the loader, L2
    /// writes are dropped, and one probe per interval checks for its return.
    L2Down,
    /// The table's invalidation channel is down: L1 is flushed and reads
    /// bypass it (served from L2 or the loader) until the channel is back.
    Bypassing,
    /// The table's invalidation channel is down, or back but not yet
    /// verified, within its `lost_grace_ms`: L1 keeps serving rows that may
    /// have missed invalidations. See [A lost channel](crate#a-lost-channel).
    Unverified,
}

/// One running table, as [`Cache::tables`](crate::Cache::tables) lists it.
///
/// A health check that reports each table:
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cache, Health, Id};
///
/// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {}
///
/// # fn main() -> Result<(), echo_cache::Error> {
/// let cache = Cache::builder()
///     .loader(|_: Id<Game>| async { Ok::<_, std::io::Error>(Some(Game {})) })
///     .build()?;
/// for table in cache.tables() {
///     let verdict = match table.health {
///         Health::Serving => "ok",
///         Health::Full => "full: raise max_size?",
///         Health::L2Down | Health::Bypassing => "degraded: reads go to the loader",
///         _ => "unknown",
///     };
///     println!("{}: {verdict}, {} rows, {} hits", table.spec.name(), table.stats.size, table.stats.hits);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TableInfo {
    /// The table's spec in force: what it declared, with the limits the
    /// builder set in place of the declared ones
    /// ([`Builder::limits`](crate::Builder::limits)).
    pub spec: &'static TableSpec,
    /// Its counters now.
    pub stats: Stats,
    /// How it is doing.
    pub health: Health,
    /// Whether it has a loader, declared or given to the builder: `false`
    /// only for a table built
    /// [`without_loader`](crate::Builder::without_loader).
    pub has_loader: bool,
}

/// What [`Cache::ready`](crate::Cache::ready) waits for, shared by the
/// tables and the claim keeper, which report each change.
pub(crate) struct Readiness {
    /// Whether the node number is settled: claimed on L2, or no claim is
    /// needed (no L2, no runtime to claim from).
    claimed: std::sync::atomic::AtomicBool,
    /// Tables declared `warm = "ready"` not warmed yet.
    warming: std::sync::atomic::AtomicUsize,
    changes: tokio::sync::watch::Sender<()>,
}

impl Readiness {
    pub(crate) fn new(claimed: bool) -> Readiness {
        Readiness {
            claimed: std::sync::atomic::AtomicBool::new(claimed),
            warming: std::sync::atomic::AtomicUsize::new(0),
            changes: tokio::sync::watch::Sender::new(()),
        }
    }

    pub(crate) fn claimed(&self) {
        self.claimed
            .store(true, std::sync::atomic::Ordering::Release);
        self.changed();
    }

    pub(crate) fn is_claimed(&self) -> bool {
        self.claimed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// One more table to warm before the cache is ready.
    pub(crate) fn warming(&self) {
        (self.warming).fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A table is warm (or gave up warming).
    pub(crate) fn warmed(&self) {
        (self.warming).fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.changed();
    }

    /// Whether every table to warm before the cache is ready is warm.
    pub(crate) fn is_warm(&self) -> bool {
        self.warming.load(std::sync::atomic::Ordering::Acquire) == 0
    }

    /// Wakes the waiters of `ready`, to look again.
    pub(crate) fn changed(&self) {
        self.changes.send_replace(());
    }

    /// Waits until `ready()` holds, looking again at every change.
    pub(crate) async fn until(&self, ready: impl Fn() -> bool) {
        let mut changes = self.changes.subscribe();
        while !ready() {
            // The sender lives as long as `self`.
            let _ = changes.changed().await;
        }
    }
}
