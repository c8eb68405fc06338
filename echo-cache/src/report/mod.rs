//! What a cache tells of itself: each table's [counters](stats), the live
//! [roster](roster) of tables and their health, and, with the `metrics`
//! feature, the same figures through the `metrics` facade.

#[cfg(feature = "metrics")]
pub(crate) mod metrics;
pub(crate) mod roster;
pub(crate) mod stats;
