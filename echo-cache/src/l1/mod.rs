//! L1: the rows of one table, read lock-free in the caller's thread.
//!
//! A purpose-built hash table for `u64` keys. The read side (a hit) takes no
//! lock and writes nothing shared; the write side (fills, puts,
//! invalidations, sweeps) is rare by comparison and serialized per shard by
//! a mutex readers never touch.
//!
//! - Open addressing, linear probing, rows inline: a slot holds the key, the
//!   `Arc` pointer, the version and a stamp (the expiry, the row's mark
//!   (below) and its write count), 32 bytes. A hit is a short chain of
//!   dependent loads (shard → the array's slot count → slot → the `Arc`'s
//!   count), which is what it costs once the `Arc`'s atomic increment
//!   orders everything.
//! - Arrays hold `m · 2^e` slots (`m` from 16 to 31): sized to the rows a
//!   shard holds, at most 6.25 % over, rather than to the next power of
//!   two (up to 100 % over). A key's probe starts at its hash's low bits
//!   scaled to the slot count (a multiply, not a mask), which a header
//!   before the slots holds.
//! - One hash of the key under the table's random seed gives both its
//!   shard (the top bits, [`shard_of`]) and its probe's start (the low
//!   bits).
//! - Arrays grow into twice their rows once two thirds claimed, and hold
//!   up to three quarters once they reach the size a full table needs: a
//!   table below its bound costs about what a full one costs a row, and a
//!   hit probes about 1.5 slots in either ([`Rows::crowded`]).
//! - A slot is claimed by one key for the life of its array (a removed row
//!   leaves a tombstone the same key reuses), so a reader that matched a key
//!   never sees the slot change owner. Arrays are rebuilt, not rehashed in
//!   place, when they fill with rows or tombstones.
//! - A row is written under a per-slot sequence count (a seqlock); a reader
//!   that catches a row mid-write treats it as a miss rather than wait. A
//!   write under way, and a slot without a row (a tombstone), show no
//!   expiry (0): a hit's test of the expiry is also its test of those.
//! - Values and arrays a writer unlinks are freed once no reader can still
//!   hold them ([`crate::epoch`]); a reader's protection is a store to its
//!   own thread's cell, no atomic read-modify-write.
//! - A table with a listener queues each row a writer removes (a reference
//!   to its value, and why: [`RemovalCause`]) under the shard's lock, and
//!   delivers it once the writer's locks are released ([`removal`]); a
//!   hit neither removes rows nor looks at the queue.
//!
//! Each row carries its own expiry, drawn at insertion from
//! `ttl ± ttl·jitter` on the cache's coarse [`Clock`](crate::Clock), so a
//! cohort filled together does not expire together. Dead rows stay until the
//! sweeper (or a full table) reclaims them; a dead row is never served as
//! a hit.
//!
//! A table that serves stale values while its loader fails
//! (`stale_if_error_ms`, its grace) keeps a dead row for the grace: the
//! sweeper reclaims it only once the grace is over, and a flight whose
//! loader failed may read it ([`Rows::stale`], under the shard's lock, off
//! the hit path). A full table still takes dead rows first, grace or not:
//! a live row is worth more than a fallback. Invalidations and flushes
//! remove dead rows like live ones.
//!
//! # A full table
//!
//! At `max_size` rows a new row needs another's place
//! ([`Eviction::Hot`]), or is served without being kept
//! ([`Eviction::None`], the seed's rule, after reclaiming dead rows).
//! Eviction is a clock over each shard's slots with `TinyLFU` admission
//! and an adaptive admission window (probation) for new ids: a table
//! that behaves as `TinyLFU` on frequency-skewed loads and as a clock (an
//! LRU) where recency rules, with no setting (figures: [Hit
//! ratio](#hit-ratio)).
//!
//! - A hit marks its row read: the mark is 5 bits of the stamp the hit
//!   reads anyway (no other cache line), and it is written only if it was
//!   not marked read (once per turn of the hand, not once per hit; no
//!   lock). The hand writes the other marks: how many times it passed the
//!   row unread. Marks change by compare-and-swap, which neither loses the
//!   other's bits nor spoils a reader's check (which ignores the mark).
//!   Hits mark rows only once the table is three quarters full: no hand
//!   turns before it fills.
//! - A new row's id is counted in its shard's [`Sketch`] (misses only).
//! - A new id goes on probation (the admission window), without the
//!   admission test: a first-in first-out queue of the shard's ids. At
//!   its length, its oldest rows leave it: a row read meanwhile stays as
//!   a ranked row; the first that leaves unread gives up its place to the
//!   new one, unless it was asked for before (counted twice in the sketch)
//!   and passes the admission test (below) against the clock's victim,
//!   which then goes; if every row left read, the clock's victim goes.
//!   The queue grows for each row that leaves it read and shrinks for
//!   each that leaves unread, from one row to the shard's whole share, in
//!   proportion to the share (1.28 % of the share grown per row read, 8
//!   rows of 625; an eighth of a row shrunk per row unread for a share of
//!   625, by the square root of the share's ratio to 625 elsewhere): long
//!   while new ids
//!   prove hot (a hot set that moved, re-reads of what was read lately:
//!   the table then behaves as a clock over its newest rows, as an LRU
//!   would), one row while nearly all are one-offs (a scan, the tail of a
//!   steady Zipf load: the table is then `TinyLFU`'s). While the queue is
//!   at its one row, an id asked for before skips it for the admission
//!   test directly (a loop a little larger than the table keeps most of
//!   it); once it has grown, every new id goes on probation. Shards of
//!   fewer than 32 rows (tables under about 500) have none: one row is
//!   too much of them; a new id there meets the admission test at once
//!   (asked for twice, not three times).
//! - The clock's victim: the shard's hand turns; a dead row is taken at
//!   once; a marked row is unmarked (and counted in the sketch: it was
//!   read) and spared, and so is a row new since the hand last passed
//!   (its mark says so, it is not counted: a hot set that moved on must
//!   not outlast the new one for its old counts); the first unmarked row,
//!   or one of it and the next few unmarked ones, is the victim: one the
//!   hand passed twice since it was last read before one read since,
//!   then the least asked-for; a row's count is halved for every two
//!   passes of the hand it was not read since (a hot set that moved on
//!   loses its rank as fast as rows are evicted).
//! - The admission test: the victim goes only if the id was asked for at
//!   least three times (its first ask had its chance on probation) and
//!   more often than the victim plus one: one-off ids (a scan) do not pass
//!   it, and two rows asked for equally often do not trade places.
//!   Otherwise the new row is served, not kept (or the row leaving
//!   probation goes).
//!
//! ## Hit ratio
//!
//! `benches/hit_ratio.rs` (2M reads a trace; points against the best of
//! moka, `quick_cache` and ten libCacheSim algorithms: LRU, ARC, LIRS, 2Q,
//! S3-FIFO, SIEVE, W-TinyLFU, `ClockPro`, Cacheus, `LeCaR`), at 1k / 10k /
//! 100k rows (`benches/results/hit_ratio.md`, 2026-12-07): Zipf 0.8 -1.3
//! / -0.1 / -0.4 to -0.7 (from run to run), Zipf 0.99 -0.6 / +0.1 / -0.6
//! to -0.7, Zipf with scans -0.3 / -0.2 / -0.2 to -0.5, a loop 1.1 times
//! the table -0.1 / +0.2 to +0.9 / +0.9, recency-biased +0.1 / -0.0 /
//! -0.1, a hot set moving wholesale -1.6 / -0.5 to -0.6 / -0.5 to -1.0
//! (LRU holds every hot id there, and is Belady's bound: sharding pins
//! each shard's rows to its count when the table filled, which costs most
//! at 1k rows, 62 a shard). Before the clock's victim was one passed
//! twice unread first: moving -1.7 / -1.4 / -1.1. Before the adaptive
//! window: recency -6.7 / -1.8 / -0.5, moving -2.1 / -7.0 / -10.0; with
//! it but new rows unmarked (the clock's victim often the new
//! row, least asked-for): moving -2.1 / -3.5 / -2.0.
//!
//! The victim's value is retired like any removed value: freed by the
//! epoch, outside every lock.
//!
//! # Refresh-ahead
//!
//! A table that declares `refresh_ms` wants its rows reloaded before they
//! die. A hit already holds the row's expiry and `now`: if less than
//! `refresh_ms` remain, it has its caller start the refresh once per row,
//! by setting a second bit of the row's mark ([`REFRESHING`]) as it sets
//! the read bit: by compare-and-swap, which a failed refresh's re-arm
//! cannot lose. A hit tells a row due, or one to mark read, with one
//! compare ([`Shard::watch_ms`]); all else is out of its line. A new row
//! starts with the bit clear, unless its whole life is within `refresh_ms`
//! (an absence, a value the loader gave a short TTL): those are never
//! refreshed. The bit is a filter, not a lock: two readers may
//! both see it clear (the table's flight registry keeps it to one flight
//! per id), and a reader that read the row a refresh replaces may set it
//! on the new row, which then dies unrefreshed, once. The hand of eviction
//! looks at the read bit only.
//!
//! # Time-to-idle
//!
//! A table that declares `idle_ms` lets rows die unread. A row's stamp
//! holds the nearer of its TTL's expiry (its hard deadline) and 1.5 ×
//! `idle_ms` after its write ([`idle_life`]); the hard deadline is kept
//! after the shard's slots ([`Array::deadlines`], only in such tables). The
//! table's hits watch every row ([`MARKING`] from the start): one that
//! finds at most `idle_ms` left moves the expiry to [`idle_life`] from now,
//! capped by the hard deadline, by compare-and-swap of the stamp
//! ([`slot::extend`]), which keeps its mark, as a mark keeps an extension.
//! So a row lives `idle_ms` at least after its last read and 1.5 ×
//! `idle_ms` at most, and a hit writes the stamp once a half `idle_ms` at
//! most. An extension changes the stamp's expiry: a reader that loaded the
//! stamp before it and checks it after reads a miss (as mid-write), while
//! marks and extensions compare write counts only ([`slot::same_row`]).
//! The sweeper, the clock hand and the full table's reclaiming see an idle
//! row dead as they see any: by its stamp.

use std::hash::BuildHasher;
use std::ptr;
use std::sync::{Arc, PoisonError};

use crate::entity::spec::{Eviction, TableSpec};
use crate::l1::epoch::{Garbage, Pinned};
use crate::l1::sketch::Sketch;

mod array;
pub(crate) mod epoch;
mod evict;
mod expiry;
mod inspect;
mod removal;
pub(crate) mod sketch;
mod slot;
mod weights;
mod write;

use array::{Array, capacity_for, moved_hand};
pub(crate) use expiry::{expiry_within, longest_lifetime, shortest_lifetime};
pub use removal::RemovalCause;
use removal::Removals;
pub use removal::{Listener, listener};
pub(crate) use slot::{Live, Row};
use slot::{
    REFRESHING, SEQ_BITS, Slot, absent, into_raw, is_row, mark_of, same_write, share, tombstone,
    update_mark, with_mark,
};

use crate::sync::Ordering::{Acquire, Relaxed};
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Mutex, MutexGuard, fence};
use evict::Probation;
use weights::Weights;

/// The hash of a key's shard, its probe's start and the sketch: foldhash's
/// `quality` flavour under the table's random seed ([`random_hasher`]),
/// one more multiply than `fast`, whose one multiply by the seed placed
/// sequential ids (snowflakes, counters) in a few shards for some seeds.
/// `FixedState` with a seed of our own rather than `RandomState`: its
/// other seeds are constants, so a hit loads one seed, not two.
type Hasher = foldhash::quality::FixedState;

/// A [`Hasher`] with a random seed: ids an adversary picks cannot be
/// aimed at one probe's run. The model checker replays executions, so
/// under it keys land where they did the last time.
fn random_hasher() -> Hasher {
    #[cfg(not(all(test, echo_cache_loom)))]
    let hasher = Hasher::with_seed(foldhash::quality::RandomState::default().hash_one(0_u64));
    #[cfg(all(test, echo_cache_loom))]
    let hasher = Hasher::default();
    hasher
}

/// Writers lock one of 16 shards ([`shard_of`]): fills of
/// different ids rarely wait for each other, and a rebuild copies a
/// sixteenth of the table.
const SHARD_BITS: u32 = 4;
const SHARDS: usize = 1 << SHARD_BITS;
/// Slots of a shard's first array (the least `m · 2^e`, see [`capacity_for`]).
const MIN_SLOTS: usize = 16;

// What a slot's value pointer holds besides an `Arc`'s (whose pointers are
// never null, 1 or 2: they point past the `Arc`'s counts).

/// Slots with a key (rows and tombstones) and rows, of one shard; and its
/// eviction state.
#[derive(Default)]
struct Tally {
    claimed: usize,
    rows: usize,
    /// The slot the clock hand of eviction looks at next.
    hand: usize,
    /// How often the shard's ids were asked for lately; made when the
    /// table first fills ([`Eviction::Hot`] only).
    sketch: Option<Sketch>,
    /// New rows kept without the admission test, for a while; made for
    /// the shard's first, once the table is full ([`Eviction::Hot`]
    /// only). Boxed so that a shard stays small: a loom model builds a
    /// table on a 32 KiB stack, which 16 inline queues overflowed.
    probation: Option<Box<Probation>>,
    /// The weights of its rows, in a table with a byte bound only.
    weights: Option<Box<Weights>>,
}

#[repr(align(128))]
struct Shard<T> {
    /// The address of the first slot of the shard's [`Array`] (its count is in the header before it); null before the first
    /// row.
    array: AtomicPtr<Slot<T>>,
    writer: Mutex<Tally>,
    /// How close to its expiry a hit looks at its row's mark: the table's
    /// `refresh_ms` (0, refresh off: never, for a live row), or
    /// [`MARKING`] once hits mark the rows they read (always). One load and
    /// one compare on the hit path for both, on the line of `array`, which
    /// a hit loads anyway.
    watch_ms: AtomicU64,
}

/// [`Shard::watch_ms`] while hits mark their rows read: once the table is
/// three quarters full ([`Eviction::Hot`]), so that the rows read lately
/// are marked when it fills and the clock hand starts to look at marks.
/// Before, a hit neither tests nor writes marks. Beyond every expiry (40
/// bits, [`slot::MAX_EXPIRY`]) yet far enough from `u64::MAX` that a hit
/// adds it to `now` without a saturating add; a longer `refresh_ms` is
/// kept just below it, where it watches every row all the same.
const MARKING: u64 = 1 << 62;

pub(crate) struct Rows<T> {
    shards: [Shard<T>; SHARDS],
    hasher: Hasher,
    garbage: Garbage,
    /// Rows in the table, live or dead (tombstones are not rows).
    size: AtomicUsize,
    max_size: usize,
    /// A shard's share of `max_size`: the rows its array is sized for once
    /// the table is full, and its sketch.
    share: usize,
    eviction: Eviction,
    /// A shard's share of `max_bytes`, which bounds the weight of its
    /// rows; 0 without a byte bound.
    byte_share: usize,
    /// Live rows evicted for new ones.
    evictions: AtomicU64,
    /// When a full table last looked for dead rows to reclaim.
    last_reclaim: AtomicU64,
    /// How long the sweeper keeps a dead row (`stale_if_error_ms`).
    grace: u64,
    reclaim_every_ms: u64,
    /// How long before its expiry a read starts a row's refresh (0: never).
    refresh_ms: u64,
    /// How long a row lives unread (0: to its TTL); see
    /// [Time-to-idle](self#time-to-idle).
    idle_ms: u64,
    /// How close to its expiry a hit on a watched row looks further: the
    /// longer of `refresh_ms` and `idle_ms`.
    wake_ms: u64,
    /// The size from which hits mark the rows they read (see
    /// [`MARKING`]): three quarters of `max_size`, so that the rows
    /// read as the table fills are marked when its hand first turns.
    marking_from: usize,
    /// The removals waiting for the table's listener; `None` without one.
    removals: Option<Removals<T>>,
}

// SAFETY: a `Rows<T>` owns `Arc<T>`s and hands out clones of them.
unsafe impl<T: Send + Sync> Send for Rows<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Send + Sync> Sync for Rows<T> {}

/// A hit's look at the mark of its `live` row ([`Shard::watch_ms`]), out
/// of the hit's line: a hit comes here only if the row is due, or has a
/// mark to write (not in a half-full table without refresh, nor for a row
/// a full table's hit finds marked read). Marks the row read for the clock
/// hand if hits mark (a write once per turn of the hand), and calls
/// `start_refresh` with its version if it is `due` and this read is the
/// first to see it, which sets its [`REFRESHING`] bit. `read` is the
/// stamp the hit read the row with, `stamp` the slot's: a row written
/// since is not this read's to mark. Takes `live` and gives it back so
/// that the hit holds nothing across the call, which it would keep in
/// memory in case `start_refresh` unwinds.
#[cold]
#[inline(never)]
fn watched<T>(
    live: Live<T>,
    stamp: &AtomicU64,
    read: u64,
    marking: bool,
    due: bool,
    start_refresh: impl FnOnce(u64),
) -> Live<T> {
    let starts = |mark: u8| due && mark & REFRESHING == 0;
    let replaced = update_mark(stamp, read, |mark| {
        let count = if marking || starts(mark) {
            evict::READ
        } else {
            mark & !REFRESHING
        };
        let refreshing = if starts(mark) {
            REFRESHING
        } else {
            mark & REFRESHING
        };
        count | refreshing
    });
    if replaced.is_some_and(starts) {
        start_refresh(live.version);
    }
    live
}

/// What a hit saw of its watched row ([`Rows::look`]): the stamp it read
/// it with, the time, how long the row had left, whether hits mark rows.
#[derive(Clone, Copy)]
struct Seen {
    read: u64,
    now: u64,
    left: u64,
    marking: bool,
}

/// How long a row of a table with a time-to-idle of `idle_ms` lives
/// unread from its write, or from a read that found at most `idle_ms` of
/// its life left (which extends it): one and a half `idle_ms`, so that
/// every read leaves it at least `idle_ms` to live while only one read in
/// half an `idle_ms` writes the stamp.
pub(super) fn idle_life(idle_ms: u64) -> u64 {
    idle_ms.saturating_add(idle_ms / 2)
}

/// The shard of a key's [`Hasher`] hash: its top bits, while the
/// probe's [`start`](Array::start) takes the low ones.
#[inline]
fn shard_of(hash: u64) -> usize {
    #[allow(clippy::cast_possible_truncation)] // SHARD_BITS bits
    let shard = (hash >> (64 - SHARD_BITS)) as usize;
    shard
}

impl<T> Shard<T> {
    fn lock(&self) -> MutexGuard<'_, Tally> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard's array, for its writer (who holds the lock).
    fn array(&self, _locked: &MutexGuard<'_, Tally>) -> Option<Array<T>> {
        // SAFETY: only the lock holder replaces or retires the array.
        unsafe { Array::from_tagged(self.array.load(Acquire)) }
    }
}

impl<T> Rows<T> {
    #[cfg(test)]
    pub(crate) fn new(spec: &TableSpec) -> Rows<T> {
        Rows::with_listener(spec, None)
    }

    /// The rows of a table whose `listener` (if any) is told of every row
    /// that leaves ([`removal`]).
    pub(crate) fn with_listener(spec: &TableSpec, listener: Option<Listener<T>>) -> Rows<T> {
        Rows {
            shards: std::array::from_fn(|_| Shard {
                array: AtomicPtr::new(ptr::null_mut()),
                writer: Mutex::new(Tally {
                    weights: spec.max_bytes.map(|_| Box::default()),
                    ..Tally::default()
                }),
                // An idle table's hits look at every row (they may extend
                // it), and mark it read, once, as they are there anyway; a
                // byte bound may be reached at any count: hits mark the
                // rows they read from the first.
                watch_ms: AtomicU64::new(if spec.idle_ms > 0 || spec.max_bytes.is_some() {
                    MARKING
                } else {
                    spec.refresh_ms.min(MARKING - 1)
                }),
            }),
            hasher: random_hasher(),
            garbage: Garbage::new(),
            size: AtomicUsize::new(0),
            max_size: spec.max_size,
            share: spec.max_size.div_ceil(SHARDS),
            marking_from: match spec.eviction {
                Eviction::Hot => spec.max_size - spec.max_size / 4,
                Eviction::None => usize::MAX,
            },
            eviction: spec.eviction,
            byte_share: spec.max_bytes.map_or(0, |bytes| bytes.div_ceil(SHARDS)),
            evictions: AtomicU64::new(0),
            last_reclaim: AtomicU64::new(0),
            // A full table of live rows must not rescan on every miss.
            reclaim_every_ms: (spec.sweep_ms / 8).max(1),
            grace: spec.stale_if_error_ms,
            refresh_ms: spec.refresh_ms,
            idle_ms: spec.idle_ms,
            wake_ms: spec.refresh_ms.max(spec.idle_ms),
            removals: listener.map(|listener| Removals::new(listener, spec.name)),
        }
    }

    #[inline]
    fn locate(&self, key: u64) -> (&Shard<T>, u64) {
        let hash = self.hasher.hash_one(key);
        (&self.shards[shard_of(hash)], hash)
    }

    /// The row of `key` if it is alive at `now`. A row caught mid-write
    /// reads as a miss. If the row is due for refresh and this read is the
    /// first to see it, calls `refresh` with the row's version first (see
    /// [Refresh-ahead](self#refresh-ahead)).
    #[allow(clippy::inline_always)] // the hot path: see `Fetch::poll`
    #[inline(always)]
    pub(crate) fn get(
        &self,
        _pin: &impl Pinned,
        key: u64,
        now: u64,
        refresh: impl FnOnce(u64),
    ) -> Option<Live<T>> {
        let (shard, hash) = self.locate(key);
        // SAFETY: the pin keeps a published array allocated.
        let array = unsafe { Array::from_tagged(shard.array.load(Acquire)) }?;
        // Loaded now, on the line just read: a load after the count's
        // increment below (a locked instruction) waits for it.
        let watch_ms = shard.watch_ms.load(Relaxed);
        // A row expiring after this is alive and not watched. No overflow:
        // both are below 2^62 ([`MARKING`]; `now` counts milliseconds).
        let unwatched_after = now.wrapping_add(watch_ms);
        let slots = array.slots();
        let mut i = array.start(hash);
        let slot = loop {
            // SAFETY: `i < capacity` (`start`, `next`), the slots' count.
            let slot = unsafe { slots.get_unchecked(i) };
            if slot.value.load(Acquire).is_null() {
                return None;
            }
            if slot.key.load(Relaxed) == key {
                break slot;
            }
            i = array.next(i);
        };
        let stamp = slot.stamp.load(Acquire);
        let value = slot.value.load(Relaxed);
        let version = slot.version.load(Relaxed);
        fence(Acquire);
        // A mark written meanwhile changes no field of the row.
        if !same_write(slot.stamp.load(Relaxed), stamp) {
            return None;
        }
        // No test of a write under way or of a tombstone: the stamp of
        // either has no expiry (0, see `Slot::write`), which neither test
        // of the expiry below passes, so a slot that passes one holds a
        // row, written whole before `stamp` was.
        let expires = stamp >> SEQ_BITS;
        if expires > unwatched_after {
            debug_assert!(stamp & 1 == 0 && is_row(value));
            // SAFETY: `value` is a row's (its stamp has an expiry, above),
            // and the pin keeps its `Arc` alive even if a writer has since
            // replaced it.
            let value = unsafe { share(value) };
            return Some(Live { value, version });
        }
        if expires <= now {
            return None;
        }
        debug_assert!(stamp & 1 == 0 && is_row(value));
        let left = expires - now;
        let live = Live {
            // SAFETY: as above.
            value: unsafe { share(value) },
            version,
        };
        // A full table's usual hit: a row marked read, not near its expiry.
        if left <= self.wake_ms || mark_of(stamp) & !REFRESHING != evict::READ {
            let seen = Seen {
                read: stamp,
                now,
                left,
                marking: watch_ms == MARKING,
            };
            // One call, after which the hit holds nothing: a value kept
            // across it would cost every hit a saved register.
            return Some(self.look(live, array, i, seen, refresh));
        }
        Some(live)
    }

    /// A hit's look at its watched row, slot `i` of `array`, out of the
    /// hit's line: [`watched`], and in a table with a time-to-idle, the
    /// extension of a row with at most `idle_ms` left ([`extend_idle`](Self::extend_idle)).
    #[cold]
    #[inline(never)]
    #[allow(clippy::needless_pass_by_value)] // in registers: a reference puts it in memory
    fn look(
        &self,
        live: Live<T>,
        array: Array<T>,
        i: usize,
        seen: Seen,
        refresh: impl FnOnce(u64),
    ) -> Live<T> {
        let due = seen.left <= self.refresh_ms;
        let stamp = &array.slots()[i].stamp;
        let live = watched(live, stamp, seen.read, seen.marking, due, refresh);
        if seen.left <= self.idle_ms {
            self.extend_idle(&array, i, seen.read, seen.now);
        }
        live
    }

    /// A read of the row in slot `i`, read with `stamp`, that found at
    /// most `idle_ms` left of its life: it lives [`idle_life`] from `now`,
    /// but not past its hard deadline (see [Time-to-idle](self#time-to-idle)).
    /// Nothing if the slot was written since, or another read extended it
    /// as far.
    fn extend_idle(&self, array: &Array<T>, i: usize, stamp: u64, now: u64) {
        let Some(deadlines) = array.deadlines() else {
            return;
        };
        // Acquiring: a deadline this load sees was written after its
        // write's odd stamp, which the swap below then finds.
        let deadline = deadlines[i].load(Acquire);
        let until = deadline.min(now.saturating_add(idle_life(self.idle_ms)));
        slot::extend(&array.slots()[i].stamp, stamp, until);
    }

    /// The mark a new row starts with: [`REFRESHING`] if it is not to be
    /// refreshed ([`Row::refreshable`]), else none.
    fn refresh_mark(&self, row: &Row<T>) -> u8 {
        // Refresh off: no read finds a row due, whatever its mark.
        if self.refresh_ms == 0 || row.refreshable {
            0
        } else {
            REFRESHING
        }
    }

    /// The value of `key` if its row died at most the grace before `now`
    /// (and `now` is past its expiry): for a flight whose loader failed.
    /// Takes the shard's lock: never on the hit path.
    pub(crate) fn stale(&self, key: u64, now: u64) -> Option<Live<T>> {
        let (shard, hash) = self.locate(key);
        let tally = shard.lock();
        let array = shard.array(&tally)?;
        let (slot, found) = array.probe(key, hash);
        let value = slot.value.load(Relaxed);
        let expires_at = slot.expires_at();
        if !found || !is_row(value) || value == absent() {
            return None;
        }
        if now < expires_at || now >= expires_at.saturating_add(self.grace) {
            return None;
        }
        Some(Live {
            // SAFETY: a row's value, which only the lock holder could
            // retire.
            value: unsafe { share(value) },
            version: slot.version.load(Relaxed),
        })
    }

    /// Lets a read start the refresh of `key`'s row again (clears its
    /// [`REFRESHING`] bit) if it is still the row at `version`: its refresh
    /// failed.
    pub(crate) fn rearm_refresh(&self, key: u64, version: u64) {
        let (shard, hash) = self.locate(key);
        let tally = shard.lock();
        let Some(array) = shard.array(&tally) else {
            return;
        };
        let (i, found) = array.find(key, hash);
        let slot = &array.slots()[i];
        if found && is_row(slot.value.load(Relaxed)) && slot.version.load(Relaxed) == version {
            slot.stamp.fetch_and(!with_mark(0, REFRESHING), Relaxed);
        }
    }

    /// The key and version of every row, live or not yet swept.
    pub(crate) fn versions(&self) -> Vec<(u64, u64)> {
        let mut rows = Vec::with_capacity(self.len());
        for shard in &self.shards {
            let tally = shard.lock();
            let Some(array) = shard.array(&tally) else {
                continue;
            };
            rows.extend(
                (array.slots().iter())
                    .filter(|slot| is_row(slot.value.load(Relaxed)))
                    .map(|slot| (slot.key.load(Relaxed), slot.version.load(Relaxed))),
            );
        }
        rows
    }

    /// Rows in the table, live or not yet swept.
    pub(crate) fn len(&self) -> usize {
        self.size.load(Relaxed)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.max_size
    }

    /// Live rows evicted for new ones, so far.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions.load(Relaxed)
    }

    /// Calls of the table's listener that panicked, so far.
    pub(crate) fn listener_panics(&self) -> u64 {
        self.removals.as_ref().map_or(0, Removals::panics)
    }
}

impl<T> Drop for Rows<T> {
    fn drop(&mut self) {
        for shard in &mut self.shards {
            // SAFETY: no reader or writer is left (`&mut self`); retired
            // arrays and values are the garbage list's to free.
            let Some(array) = (unsafe { Array::from_tagged(shard.array.load(Relaxed)) }) else {
                continue;
            };
            for slot in array.slots() {
                let value = slot.value.load(Relaxed);
                if is_row(value) && value != absent() {
                    // SAFETY: the slot's own reference, from `Arc::into_raw`.
                    drop(unsafe { Arc::from_raw(value) });
                }
            }
            // SAFETY: as above.
            unsafe { array.free() };
        }
    }
}

#[cfg(test)]
mod tests;
