//! Live counters of a table, and the snapshot a caller reads.
//!
//! Hits happen on every thread at once, so they are striped: each thread
//! owns one cache-line-sized cell (by the lease index its L1 reads already
//! hold, see [`crate::epoch`]) and bumps it with a plain load and store, the
//! cheapest write there is and one no other thread shares. Reading the count
//! sums the cells. So are the misses that join a flight (a herd's waiters
//! join from every thread at once). Every other counter is on a slower
//! path (a flight, a sweep) and is one relaxed atomic.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

/// Threads beyond this many alive at once share one contended cell.
pub(crate) const CELLS: usize = 128;

/// A counter bumped from many threads without sharing a cache line.
/// The cells are inline (16 KiB), so a hit finds its own at a fixed
/// offset from the table: no pointer to load.
pub(crate) struct Striped {
    cells: [CachePadded<AtomicU64>; CELLS],
    overflow: AtomicU64,
}

impl Striped {
    pub(crate) fn new() -> Striped {
        Striped {
            cells: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
            overflow: AtomicU64::new(0),
        }
    }

    /// Counts one, on the cell of the thread leasing `index`.
    #[inline]
    pub(crate) fn incr(&self, index: usize) {
        match self.cells.get(index) {
            // Only this thread writes this cell, so load + store loses nothing.
            Some(cell) => cell.store(cell.load(Relaxed) + 1, Relaxed),
            None => {
                self.overflow.fetch_add(1, Relaxed);
            }
        }
    }

    pub(crate) fn sum(&self) -> u64 {
        self.cells.iter().map(|c| c.load(Relaxed)).sum::<u64>() + self.overflow.load(Relaxed)
    }
}

/// The counters of one table.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) flights: AtomicU64,
    pub(crate) refreshes: AtomicU64,
    /// Flights started and not yet ended (detached ones included).
    pub(crate) running: AtomicU64,
    pub(crate) fills: AtomicU64,
    pub(crate) l2_hits: AtomicU64,
    /// Striped: a herd's waiters join from every thread at once.
    pub(crate) coalesced: Striped,
    pub(crate) swept: AtomicU64,
    pub(crate) full_skips: AtomicU64,
    pub(crate) sweeps: AtomicU64,
    pub(crate) load_errors: AtomicU64,
    pub(crate) load_timeouts: AtomicU64,
    pub(crate) not_found: AtomicU64,
    pub(crate) invalidations: AtomicU64,
    pub(crate) puts: AtomicU64,
    pub(crate) l2_errors: AtomicU64,
    pub(crate) decode_errors: AtomicU64,
    pub(crate) oversized: AtomicU64,
    pub(crate) l2_writes_dropped: AtomicU64,
    pub(crate) announcements_dropped: AtomicU64,
    pub(crate) redeliveries: AtomicU64,
    pub(crate) malformed_messages: AtomicU64,
    pub(crate) stale_served: AtomicU64,
    pub(crate) stale_backoffs: AtomicU64,
    pub(crate) warmed: AtomicU64,
    pub(crate) soft_timeouts: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// The counters now, with those kept elsewhere: `hits`, the rows in
    /// L1 (`size`), and L1's `evictions` and `listener_panics`.
    pub(crate) fn snapshot(
        &self,
        hits: u64,
        size: usize,
        evictions: u64,
        listener_panics: u64,
    ) -> Stats {
        let (flights, coalesced) = (self.flights.load(Relaxed), self.coalesced.sum());
        Stats {
            hits,
            // Every miss leads a flight or joins one.
            misses: flights + coalesced,
            flights,
            refreshes: self.refreshes.load(Relaxed),
            fills: self.fills.load(Relaxed),
            l2_hits: self.l2_hits.load(Relaxed),
            coalesced,
            swept: self.swept.load(Relaxed),
            full_skips: self.full_skips.load(Relaxed),
            evictions,
            sweeps: self.sweeps.load(Relaxed),
            size: size as u64,
            in_flight: self.running.load(Relaxed),
            load_errors: self.load_errors.load(Relaxed),
            load_timeouts: self.load_timeouts.load(Relaxed),
            not_found: self.not_found.load(Relaxed),
            invalidations: self.invalidations.load(Relaxed),
            puts: self.puts.load(Relaxed),
            l2_errors: self.l2_errors.load(Relaxed),
            decode_errors: self.decode_errors.load(Relaxed),
            oversized: self.oversized.load(Relaxed),
            l2_writes_dropped: self.l2_writes_dropped.load(Relaxed),
            announcements_dropped: self.announcements_dropped.load(Relaxed),
            redeliveries: self.redeliveries.load(Relaxed),
            malformed_messages: self.malformed_messages.load(Relaxed),
            stale_served: self.stale_served.load(Relaxed),
            stale_backoffs: self.stale_backoffs.load(Relaxed),
            listener_panics,
            warmed: self.warmed.load(Relaxed),
            soft_timeouts: self.soft_timeouts.load(Relaxed),
        }
    }
}

impl Default for Striped {
    fn default() -> Striped {
        Striped::new()
    }
}

/// A snapshot of one table's counters.
///
/// Each fetch is counted once, when L1 answers it or when it joins or
/// starts a flight, and each flight once more when it ends. With no fetch
/// under way (for the first two) and no flight under way (for the third):
///
/// - `hits + misses` = fetches;
/// - `misses` = `flights + coalesced`;
/// - `flights + refreshes` = `l2_hits + fills + not_found + load_errors +
///   load_timeouts + stale_served + in_flight` (`in_flight` is 0 at
///   rest).
///
/// A fetch that misses in the caller's thread but finds the row when it
/// comes to join a flight (one landed meanwhile) is a hit. A caller that
/// gives up waiting ([`Error::Timeout`](crate::Error::Timeout)) was counted
/// as a miss when it joined. A fetch refused with
/// [`Error::NoRuntime`](crate::Error::NoRuntime) is not counted.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cache, Id};
///
/// #[near_cache(kind = "DOC", ttl_ms = 60_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Doc { body: String }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), echo_cache::Error> {
/// let cache = Cache::builder()
///     .loader(|_: Id<Doc>| async { Ok::<_, std::io::Error>(Some(Doc { body: "hi".into() })) })
///     .build()?;
/// let id = Id::<Doc>::mint();
/// cache.fetch(id).await?; // a miss: a flight, answered by the loader
/// cache.fetch(id).await?; // a hit
/// let stats = cache.stats::<Doc>();
/// assert_eq!((stats.hits, stats.misses, stats.flights, stats.fills), (1, 1, 1, 1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Fetches answered from L1: in the caller's thread, or found there when
    /// the caller came to join a flight.
    pub hits: u64,
    /// Fetches that joined or started a flight.
    pub misses: u64,
    /// Flights started (each answers every miss that joined it).
    pub flights: u64,
    /// Refreshes started: flights of rows read when they were due for
    /// refresh (`refresh_ms`), which no fetch waits for. Each ends as a
    /// fill (or `not_found`, a load error or timeout) like any flight.
    pub refreshes: u64,
    /// Flights answered by the loader.
    pub fills: u64,
    /// Flights answered by L2.
    pub l2_hits: u64,
    /// Misses that joined a flight already under way.
    pub coalesced: u64,
    /// Expired rows reclaimed by the sweeper.
    pub swept: u64,
    /// Values served but not kept because L1 was full: the table evicts
    /// nothing (`eviction = "none"`) and held `max_size` live rows, or
    /// (`eviction = "hot"`) the value's id was not asked for more often
    /// than the row it would have evicted.
    pub full_skips: u64,
    /// Live rows evicted from a full table to keep new, more asked-for
    /// ones (`eviction = "hot"`). Dead rows reclaimed are not counted.
    pub evictions: u64,
    /// Sweeper passes.
    pub sweeps: u64,
    /// Rows in L1 now (live or not yet swept).
    pub size: u64,
    /// Flights under way now, including those a write detached (they
    /// answer their waiters but install nothing).
    pub in_flight: u64,
    /// Flights that failed: a loader error, a loader panic.
    pub load_errors: u64,
    /// Flights abandoned at their deadline ([`Error::LoadTimeout`](crate::Error::LoadTimeout)).
    pub load_timeouts: u64,
    /// Flights whose loader found nothing.
    pub not_found: u64,
    /// Invalidations applied: by this node's writes, and from other nodes
    /// (repeats and late messages are not counted).
    pub invalidations: u64,
    /// Values written with `put`.
    pub puts: u64,
    /// L2 reads that failed, timed out, or were not tried because the
    /// server is not answering; each went on to the loader.
    pub l2_errors: u64,
    /// L2 frames that were not a value of this table (short, malformed
    /// version, another schema, undecodable body, a key of another Redis
    /// type); each was refilled, or replaced by a write.
    pub decode_errors: u64,
    /// Values larger than `max_value_bytes`: served and kept in L1, not
    /// written to L2.
    pub oversized: u64,
    /// L2 writes and deletes dropped because the server did not take them.
    pub l2_writes_dropped: u64,
    /// Announcements of writes that did not reach the server (each write
    /// is kept and delivered once the server is back).
    pub announcements_dropped: u64,
    /// Deliveries of the writes kept while the server was away (each a
    /// batch: every write the table kept, in version order).
    pub redeliveries: u64,
    /// Invalidation messages that were not well-formed; dropped.
    pub malformed_messages: u64,
    /// Flights answered with an expired value (`stale_if_error_ms`,
    /// [`Source::Stale`](crate::Source::Stale)) because the loader failed or
    /// timed out, or was not called again so soon after it did (see
    /// `stale_backoffs`). Not counted in `load_errors` or `load_timeouts`.
    pub stale_served: u64,
    /// Of `stale_served`, the flights that did not call the loader: it
    /// failed on that id less than the backoff ago.
    pub stale_backoffs: u64,
    /// Calls of the table's removal listener that panicked
    /// ([Listeners](crate#listeners)): each panic is caught, and the
    /// removals after it are delivered as usual.
    pub listener_panics: u64,
    /// Rows a warm start installed from the fleet's hot list in L2 (see
    /// [Warm start](crate#warm-start)): read from L2 before any fetch asked
    /// for them, so neither hits, misses nor `l2_hits`.
    pub warmed: u64,
    /// Flights whose waiters an expired value answered at the table's
    /// soft timeout (`soft_timeout_ms`, [`Source::Stale`](crate::Source::Stale))
    /// while the load went on. Each flight is also counted by how it ended
    /// (`fills`, `load_timeouts`, ...), not in `stale_served` unless it
    /// ended that way.
    pub soft_timeouts: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::l1::epoch::Pinned;

    #[test]
    fn striped_counts_from_many_threads_add_up() {
        let counter = Striped::new();
        std::thread::scope(|s| {
            for _ in 0..(CELLS + 16) {
                s.spawn(|| (0..1000).for_each(|_| counter.incr(crate::l1::epoch::pin().index())));
            }
        });
        assert_eq!(counter.sum(), (CELLS as u64 + 16) * 1000);
    }
}
