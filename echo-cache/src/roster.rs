//! The live roster of a cache: each table's spec, counters and health.

use crate::spec::TableSpec;
use crate::stats::Stats;

/// How a table is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Serving hits from L1 and keeping what it fills.
    Serving,
    /// L1 holds `max_size` rows: fills are served but not kept until the
    /// sweeper reclaims dead rows.
    Full,
    /// The L2 server is not answering: fetches go on to the loader, L2
    /// writes are dropped, and one probe per interval checks for its return.
    L2Down,
    /// The table's invalidation channel is down: L1 is flushed and reads
    /// bypass it (served from L2 or the loader) until the channel is back.
    Bypassing,
}

/// One running table, as [`Cache::tables`](crate::Cache::tables) lists it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TableInfo {
    /// What the table declared.
    pub spec: &'static TableSpec,
    /// Its counters now.
    pub stats: Stats,
    /// How it is doing.
    pub health: Health,
    /// Whether the cache was built with a loader for it.
    pub has_loader: bool,
}
