//! What a table shows an operator, beside the data path and never on it:
//! a look at one row that counts nothing and starts nothing
//! ([`Table::peek`]), its live values shard by shard
//! ([`Table::values_of_shard`]), its hottest rows ([`Table::hottest`]) and
//! its [`Figures`]. L1's walks ([`crate::l1`]'s `inspect`) on the table's
//! clock.

use std::sync::Arc;
use std::time::Duration;

use super::Table;
use crate::l1::epoch;
use crate::report::figures::Figures;
use crate::table::fetched::{Fetched, Source};

impl<T> Table<T> {
    /// The value of `key` if L1 holds it alive, as a hit would answer it
    /// ([`Source::Hit`]), but not counted (no hit, no miss), not marked
    /// read for eviction, never starting a refresh or a flight. A
    /// remembered absence is no value: `None`.
    pub(crate) fn peek(&self, key: u64) -> Option<Fetched<T>> {
        let pin = epoch::pin();
        let live = self.rows.peek(&pin, key, self.clock.now_ms())?;
        drop(pin);
        Some(Fetched::new(live.value?, Source::Hit, live.version))
    }

    /// The key, value and version of every live value of L1's shard
    /// `shard`; `None` past the last shard.
    pub(crate) fn values_of_shard(&self, shard: usize) -> Option<Vec<(u64, Arc<T>, u64)>> {
        self.rows.values_of_shard(shard, self.clock.now_ms())
    }

    /// The keys of the `n` live rows the eviction policy ranks hottest,
    /// with their heat, the hottest first.
    pub(crate) fn hottest(&self, n: usize) -> Vec<(u64, u8)> {
        self.rows.hottest(n, self.clock.now_ms())
    }

    /// The table's figures now.
    pub(crate) fn figures(&self) -> Figures {
        let now = self.clock.now_ms();
        let census = self.rows.census(now);
        Figures {
            rows: census.live,
            absent: census.absent,
            dead: census.dead,
            bytes: census.bytes,
            weight: census.weight,
            next_expiry: census
                .next_expiry
                .map(|at| Duration::from_millis(at.saturating_sub(now))),
        }
    }
}
