//! L2: the shared Valkey/Redis tier behind every table.
//!
//! Each table reaches the cache's [`Server`](crate::connections::Server)
//! through its [`Tier`], which knows the table's keys, frames, codec and
//! schema.
//!
//! L2 never fails a fetch: an operation that errs, times out or is refused by
//! the open breaker is counted (`l2_errors`, `l2_writes_dropped`) and the
//! fetch goes on to the loader. A write the server did not take reports it
//! to its table, which keeps a put's or an invalidation's for delivery once
//! the server is back (`backlog`), and forgets a fill's.

mod codec;
mod frame;
mod script;
mod shape;
mod tier;
#[cfg(test)]
mod wire_examples;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use crate::clock::millis;

pub use codec::{Codec, Postcard};
pub(crate) use tier::lease::{Lease, Leased};
pub(crate) use tier::{Found, Tier, Write};

/// A warning logged at most once per interval, with the count it stood for.
pub(crate) struct Warning {
    origin: Instant,
    /// When the last warning was logged, in ms since `origin`, plus one.
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl Warning {
    const EVERY_MS: u64 = 10_000;

    pub(crate) fn new() -> Warning {
        Warning {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Calls `log` with the number of occurrences since the last warning,
    /// if the last warning is old enough; else counts this one.
    pub(crate) fn emit(&self, log: impl FnOnce(u64)) {
        let now = millis(self.origin.elapsed()) + 1;
        let last = self.last.load(Relaxed);
        if (last == 0 || now.saturating_sub(last) >= Self::EVERY_MS)
            && self
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            log(self.suppressed.swap(0, Relaxed) + 1);
        } else {
            self.suppressed.fetch_add(1, Relaxed);
        }
    }
}
