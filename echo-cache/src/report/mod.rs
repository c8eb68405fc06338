//! What a cache tells of itself: each table's [counters](stats), the live
//! [roster](roster) of tables and their health, the [figures](figures) of
//! a table's rows and its hottest ids, and, with the `metrics`
//! feature, the same figures through the `metrics` facade.

pub(crate) mod figures;
#[cfg(feature = "metrics")]
pub(crate) mod metrics;
pub(crate) mod roster;
pub(crate) mod stats;
