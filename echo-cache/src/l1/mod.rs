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
//!   dependent loads (shard → slot → the `Arc`'s count), which is what it
//!   costs once the `Arc`'s atomic increment orders everything.
//! - Arrays hold `m · 2^e` slots (`m` from 16 to 31): sized to the rows a
//!   shard holds, at most 6.25 % over, rather than to the next power of
//!   two (up to 100 % over). A key's probe starts at its hash's low bits
//!   scaled to the slot count (a multiply, not a mask).
//! - One hash of the key under the table's random seed gives both its
//!   shard (the top bits, [`shard_of`]) and its probe's start (the low
//!   bits).
//! - Arrays are at most half claimed while they grow (a hit's probe is
//!   short: most hits read one slot) and up to three quarters once they
//!   reach the size a full table needs, which is what a full table costs
//!   in memory ([`Rows::crowded`]).
//! - A slot is claimed by one key for the life of its array (a removed row
//!   leaves a tombstone the same key reuses), so a reader that matched a key
//!   never sees the slot change owner. Arrays are rebuilt, not rehashed in
//!   place, when they fill with rows or tombstones.
//! - A row is written under a per-slot sequence count (a seqlock); a reader
//!   that catches a row mid-write treats it as a miss rather than wait.
//! - Values and arrays a writer unlinks are freed once no reader can still
//!   hold them ([`crate::epoch`]); a reader's protection is a store to its
//!   own thread's cell, no atomic read-modify-write.
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
//! and a probation for new ids:
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
//! - An id asked for once lately (a first ask: a new hot id, or a one-off)
//!   goes on probation, without the admission test: a first-in first-out
//!   queue of the shard's ids. At its length, its oldest rows leave it:
//!   a row asked for again meanwhile (read, counted in the sketch) stays
//!   as a ranked row, and the first that leaves unread gives up its place
//!   to the new one; if none does, the clock's victim (below) does. The
//!   queue grows by eight rows for each row that leaves it read and
//!   shrinks by an eighth of a row for each that leaves unread, from one
//!   row to 20 % of the shard's share: long while new ids prove hot (a hot
//!   set that moved), one row while nearly all are one-offs (a scan, or
//!   the tail of a steady load): a scan cycles through one row a shard.
//!   Shards of fewer than 64 rows have none (that row would cost them
//!   too much).
//! - An id asked for more often turns the shard's hand: a dead row is
//!   taken at once; a marked row is unmarked (and counted in the sketch:
//!   it was read) and spared; the first unmarked row, or the least
//!   asked-for of it and the next few unmarked ones, is the victim; a
//!   row's count is halved for every two passes of the hand it was not
//!   read since (a hot set that moved on loses its rank as fast as rows
//!   are evicted). The victim goes only if the new id was asked for at
//!   least twice (three times against a halved count, or in a shard with
//!   probation, where its first ask had its chance) and more often than
//!   the victim plus one: one-off ids (a scan) do not pass it, and two
//!   rows asked for equally often do not trade places (a loop a little
//!   larger than the table keeps most of it). Otherwise the new row is
//!   served, not kept.
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

use std::alloc::{self, Layout};
use std::hash::BuildHasher;
use std::ptr::{self, NonNull};
use std::sync::{Arc, PoisonError};

use crate::entity::spec::{Eviction, TableSpec};
use crate::l1::epoch::{Garbage, Pin};
use crate::l1::sketch::Sketch;

pub(crate) mod epoch;
mod evict;
pub(crate) mod sketch;

use crate::sync::Ordering::{Acquire, Relaxed, Release};
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Mutex, MutexGuard, fence};
use evict::{Probation, Room};

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
/// Slots of a shard's first array (the least `m · 2^e`, see [`tag`]).
const MIN_SLOTS: usize = 16;
/// Expiries are kept in the top 40 bits of a slot's stamp (34 years of
/// milliseconds on the cache's clock, which starts at 0; later is "never");
/// the low 24 bits hold the row's mark and count its writes, two per
/// write (odd while under way).
///
/// A reader checks the stamp before and after loading a row, so it could
/// pair a value with another write's version only if, between its two
/// stamp loads (a few nanoseconds), the slot were written a multiple of
/// 2^18 times (the count's 19 bits, less the odd bit; the row's mark takes
/// 5 of the 24 bits below the expiry), the last write drawing the same
/// expiry as the first. That takes 262,144 writes of one id (44 ms at the
/// 6 million a second one writer manages into one id, measured) while the
/// reader stays descheduled right there, and an expiry drawn again to the
/// millisecond: `ttl ± ttl·jitter` gives 1 in 120,001 for 10-minute rows
/// at the default 10 % jitter; without jitter the clock (ticking at least every 100 ms)
/// must not have moved in those 44 ms; rows that never expire share one
/// expiry, and only the count guards them. Even then the read is sound:
/// the pin keeps alive every value unlinked since it began, and both
/// halves come from writes made during that one read.
const SEQ_BITS: u32 = 24;
/// Where a row's mark (5 bits) sits in its stamp: above the write count,
/// below the expiry. A hit reads it with the stamp it loads anyway.
const MARK_SHIFT: u32 = 19;
const MARK_BITS: u64 = 0x1F << MARK_SHIFT;
const SEQ_MASK: u64 = (1 << MARK_SHIFT) - 1;
const MAX_EXPIRY: u64 = u64::MAX >> SEQ_BITS;

/// One cached row: the value (or the remembered absence of one), its version
/// payload and when it dies.
pub(crate) struct Row<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
    pub(crate) expires_at: u64,
    /// Whether a read may start its refresh once it is due (`refresh_ms`):
    /// not an absence, nor a value whose loader gave it a whole life within
    /// `refresh_ms`, which would be due at once, every time.
    pub(crate) refreshable: bool,
}

/// The mark in a slot's stamp.
fn mark_of(stamp: u64) -> u8 {
    #[allow(clippy::cast_possible_truncation)] // masked to the mark's 5 bits
    let mark = ((stamp & MARK_BITS) >> MARK_SHIFT) as u8;
    mark
}

/// `stamp` with its mark replaced by `mark`.
fn with_mark(stamp: u64, mark: u8) -> u64 {
    stamp & !MARK_BITS | u64::from(mark) << MARK_SHIFT
}

/// Whether two stamps are of the same write of a slot (marks aside): no
/// write began or ended between their loads.
fn same_write(a: u64, b: u64) -> bool {
    (a ^ b) & !MARK_BITS == 0
}

/// Sets the mark of a slot's `stamp`, read as `read`, to `to(mark)`;
/// returns the mark it replaced, or `None` if the slot was written since
/// `read` (another row, or a write under way: not the caller's to mark).
/// Compare and swap, not a load and a store: a mark written meanwhile (a
/// hit's read bit, the hand's count, a failed refresh's re-arm clearing
/// [`REFRESHING`]) is seen by `to`, not undone.
fn update_mark(stamp: &AtomicU64, read: u64, to: impl Fn(u8) -> u8) -> Option<u8> {
    let mut seen = read;
    loop {
        let mark = mark_of(seen);
        let wanted = with_mark(seen, to(mark));
        if wanted == seen {
            return Some(mark);
        }
        match stamp.compare_exchange_weak(seen, wanted, Relaxed, Relaxed) {
            Ok(_) => return Some(mark),
            Err(current) if !same_write(current, read) => return None,
            Err(current) => seen = current,
        }
    }
}

/// What a live row holds.
pub(crate) struct Live<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
}

/// A row's mark, its top bit: its refresh was started, or it is not to be
/// refreshed. The other bits are eviction's ([`evict::READ`]), which leaves
/// this one as it is.
const REFRESHING: u8 = 0x10;

// What a slot's value pointer holds besides an `Arc`'s (whose pointers are
// never null, 1 or 2: they point past the `Arc`'s counts).

/// A slot no key has claimed: the end of a probe. All zeroes, like a fresh
/// slot.
fn empty<T>() -> *mut T {
    ptr::null_mut()
}

/// A claimed slot whose row was removed.
fn tombstone<T>() -> *mut T {
    ptr::without_provenance_mut(1)
}

/// A row remembering that the system of record has no such id.
fn absent<T>() -> *mut T {
    ptr::without_provenance_mut(2)
}

/// Whether a slot's value pointer is a row (a value or an absence).
fn is_row<T>(value: *mut T) -> bool {
    value != empty() && value != tombstone()
}

/// One slot. All zeroes is an empty slot.
#[repr(C, align(32))]
struct Slot<T> {
    /// Written once, when the slot is claimed, before `value`.
    key: AtomicU64,
    /// `Arc::into_raw` of the value, or one of the markers above.
    value: AtomicPtr<T>,
    version: AtomicU64,
    /// `expires_at << SEQ_BITS | mark << MARK_SHIFT | writes`; odd while a
    /// write is under way. The mark (see [`REFRESHING`], [`evict::READ`])
    /// changes without a write: a reader's check ignores it.
    stamp: AtomicU64,
}

/// The slots of one shard, `capacity` of them, in one zeroed allocation
/// aligned so that the low bits of its address carry the capacity's
/// [`tag`]: one load of the shard's pointer gives a reader both.
struct Array<T> {
    slots: NonNull<Slot<T>>,
    /// The slot count's [`tag`].
    tag: usize,
}

/// Alignment of arrays: ten free low bits, for the [`tag`] of any
/// capacity below `2^32` slots.
const ARRAY_ALIGN: usize = 1024;

/// The slot count `m · 2^e` (`m` from 16 to 31) as `e << 5 | m`: a probe's
/// [`start`] takes `m` with one mask of the shard's pointer.
fn tag(capacity: usize) -> usize {
    let e = (usize::BITS - 5).saturating_sub(capacity.leading_zeros());
    let m = capacity >> e;
    debug_assert!((16..32).contains(&m) && m << e == capacity);
    (e as usize) << 5 | m
}

/// Where the probe of `hash` starts in an array of the slot count `m ·
/// 2^e` [`tag`]ged: the hash's low 31 bits scaled to the slot count, `h · m
/// · 2^e / 2^31` computed as `h · m >> (31 - e)`, which a hit reaches in
/// three operations from the shard's pointer.
#[inline]
fn start(hash: u64, tag: usize) -> usize {
    let (m, e) = (tag & 31, tag >> 5);
    // The slot count is below 2^32 (`capacity_for`), so `e` < 28 and the
    // result is below it.
    #[allow(clippy::cast_possible_truncation)]
    let start = (((hash & 0x7FFF_FFFF) * m as u64) >> (31 - e)) as usize;
    start
}

/// The slot count of a [`tag`].
#[inline]
fn untag(tag: usize) -> usize {
    (tag & 31) << (tag >> 5)
}

/// The least slot count `m · 2^e` (`m` from 16 to 31) of at least `slots`.
fn capacity_for(slots: usize) -> usize {
    let slots = slots.max(MIN_SLOTS);
    let e = usize::BITS - 5 - slots.leading_zeros();
    let m = slots.div_ceil(1 << e);
    let capacity = if m == 32 { 16 << (e + 1) } else { m << e };
    assert!(
        u32::try_from(capacity).is_ok(),
        "an L1 shard holds fewer than 2^32 slots"
    );
    capacity
}

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
}

#[repr(align(128))]
struct Shard<T> {
    /// The tagged address of the shard's [`Array`]; null before the first
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
/// Before, a hit neither tests nor writes marks.
const MARKING: u64 = u64::MAX;

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
    /// Live rows evicted for new ones.
    evictions: AtomicU64,
    /// When a full table last looked for dead rows to reclaim.
    last_reclaim: AtomicU64,
    /// How long the sweeper keeps a dead row (`stale_if_error_ms`).
    grace: u64,
    reclaim_every_ms: u64,
    /// How long before its expiry a read starts a row's refresh (0: never).
    refresh_ms: u64,
    /// The size from which hits mark the rows they read (see
    /// [`MARKING`]): three quarters of `max_size`, so that the rows
    /// read as the table fills are marked when its hand first turns.
    marking_from: usize,
}

// SAFETY: a `Rows<T>` owns `Arc<T>`s and hands out clones of them.
unsafe impl<T: Send + Sync> Send for Rows<T> {}
unsafe impl<T: Send + Sync> Sync for Rows<T> {}

impl<T> Slot<T> {
    /// An empty slot, under loom (elsewhere zeroed memory is one).
    #[cfg(all(test, echo_cache_loom))]
    fn vacant() -> Slot<T> {
        Slot {
            key: AtomicU64::new(0),
            value: AtomicPtr::new(empty()),
            version: AtomicU64::new(0),
            stamp: AtomicU64::new(0),
        }
    }

    /// Fails the model unless every access to the slot happens before
    /// this call (loom checks it on a mutable access).
    #[cfg(all(test, echo_cache_loom))]
    fn assert_unshared(&mut self) {
        self.key.with_mut(|_| ());
        self.value.with_mut(|_| ());
        self.version.with_mut(|_| ());
        self.stamp.with_mut(|_| ());
    }

    fn expires_at(&self) -> u64 {
        self.stamp.load(Relaxed) >> SEQ_BITS
    }

    fn mark(&self) -> u8 {
        mark_of(self.stamp.load(Relaxed))
    }

    /// Claims an empty slot for `key`. The shard's writer only.
    fn claim(&self, key: u64, value: *mut T, version: u64, expires_at: u64, mark: u8) {
        self.key.store(key, Relaxed);
        self.version.store(version, Relaxed);
        let stamp = expires_at.min(MAX_EXPIRY) << SEQ_BITS;
        self.stamp.store(with_mark(stamp, mark), Relaxed);
        self.value.store(value, Release);
    }

    /// Writes a row (or a tombstone) into a claimed slot, with its `mark`.
    /// The shard's writer only. A hit marking the old row meanwhile is
    /// overwritten; once the stamp is odd, no hit marks.
    fn write(&self, value: *mut T, version: u64, expires_at: u64, mark: u8) {
        let stamp = self.stamp.load(Relaxed);
        self.stamp.store(stamp | 1, Relaxed);
        fence(Release);
        self.value.store(value, Relaxed);
        self.version.store(version, Relaxed);
        let writes = (stamp + 2) & SEQ_MASK;
        let stamp = expires_at.min(MAX_EXPIRY) << SEQ_BITS | writes;
        self.stamp.store(with_mark(stamp, mark), Release);
    }
}

impl<T> Array<T> {
    /// The layout of `capacity` slots.
    fn layout(capacity: usize) -> Layout {
        Layout::array::<Slot<T>>(capacity)
            .and_then(|slots| slots.align_to(ARRAY_ALIGN))
            .expect("an L1 array fits the address space")
    }

    /// A new array of empty slots, `capacity` of them.
    fn new(capacity: usize) -> Array<T> {
        let layout = Array::<T>::layout(capacity);
        // SAFETY: the layout is not zero-sized; all zeroes is empty slots.
        #[allow(clippy::cast_ptr_alignment)] // allocated with `ARRAY_ALIGN`
        let slots = unsafe { alloc::alloc_zeroed(layout) }.cast::<Slot<T>>();
        let Some(slots) = NonNull::new(slots) else {
            alloc::handle_alloc_error(layout)
        };
        let array = Array {
            slots,
            tag: tag(capacity),
        };
        // A loom atomic is a handle into the model, not its value: make them.
        #[cfg(all(test, echo_cache_loom))]
        for i in 0..capacity {
            // SAFETY: inside the allocation, and nothing else sees it yet.
            unsafe { slots.as_ptr().add(i).write(Slot::vacant()) };
        }
        array
    }

    fn tagged(&self) -> *mut Slot<T> {
        self.slots.as_ptr().map_addr(|address| address | self.tag)
    }

    /// The array a shard's pointer names, if any.
    ///
    /// # Safety
    ///
    /// `tagged` came from [`tagged`](Self::tagged), and the array is not
    /// freed while the result is used (the caller is pinned, or holds the
    /// shard's lock).
    #[inline]
    unsafe fn from_tagged(tagged: *mut Slot<T>) -> Option<Array<T>> {
        let tag = tagged.addr() & (ARRAY_ALIGN - 1);
        let slots = NonNull::new(tagged.map_addr(|address| address & !(ARRAY_ALIGN - 1)))?;
        Some(Array { slots, tag })
    }

    #[inline]
    fn capacity(&self) -> usize {
        untag(self.tag)
    }

    /// Where the probe of `hash` starts ([`start`]).
    #[inline]
    fn start(&self, hash: u64) -> usize {
        start(hash, self.tag)
    }

    #[inline]
    fn slots(&self) -> &[Slot<T>] {
        // SAFETY: `capacity` slots, allocated and initialized in `new`.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.capacity()) }
    }

    /// The slot after `i`, round the end.
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.capacity() { 0 } else { i + 1 }
    }

    /// The index of the slot claimed by `key`, or else of the empty slot
    /// ending its probe. The shard's writer only.
    fn find(&self, key: u64, hash: u64) -> (usize, bool) {
        let slots = self.slots();
        let mut i = self.start(hash);
        loop {
            let slot = &slots[i];
            if slot.value.load(Relaxed).is_null() {
                return (i, false);
            }
            if slot.key.load(Relaxed) == key {
                return (i, true);
            }
            i = self.next(i);
        }
    }

    /// The slot claimed by `key`, or else the empty slot ending its probe.
    /// The shard's writer only.
    fn probe(&self, key: u64, hash: u64) -> (&Slot<T>, bool) {
        let (i, found) = self.find(key, hash);
        (&self.slots()[i], found)
    }

    /// Frees the slots (not the values they point to).
    ///
    /// # Safety
    ///
    /// No reader or writer can reach the array any more.
    unsafe fn free(self) {
        // The model checks what Miri checks: every access to the slots
        // happens before they are freed.
        #[cfg(all(test, echo_cache_loom))]
        for i in 0..self.capacity() {
            // SAFETY: the caller's guarantee; made in `new`.
            let slot = unsafe { &mut *self.slots.as_ptr().add(i) };
            slot.assert_unshared();
            // SAFETY: as above, and never used again.
            unsafe { ptr::drop_in_place(slot) };
        }
        let layout = Array::<T>::layout(self.capacity());
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.slots.as_ptr().cast(), layout) };
    }
}

/// Where a hand at slot `hand` of `from` slots stands in an array of `to`
/// slots: the same place in the order of the hashes.
fn moved_hand(hand: usize, from: usize, to: usize) -> usize {
    // Both below 2^32 (`capacity_for`): the product fits.
    let moved = hand as u64 * to as u64 / from as u64;
    usize::try_from(moved).expect("below `to`")
}

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

/// The shard of a key's [`Hasher`] hash: its top bits, while the
/// probe's [`start`](Array::start) takes the low ones.
#[inline]
fn shard_of(hash: u64) -> usize {
    #[allow(clippy::cast_possible_truncation)] // SHARD_BITS bits
    let shard = (hash >> (64 - SHARD_BITS)) as usize;
    shard
}

/// A new reference to a row's value, or `None` for a remembered absence.
///
/// # Safety
///
/// `value` is a row's value pointer ([`is_row`]), whose `Arc` is alive (the
/// caller is pinned, or holds the shard's lock).
#[inline]
unsafe fn share<T>(value: *mut T) -> Option<Arc<T>> {
    (value != absent()).then(|| {
        // SAFETY: the caller's guarantee; it came from `Arc::into_raw`.
        unsafe {
            Arc::increment_strong_count(value);
            Arc::from_raw(value)
        }
    })
}

fn into_raw<T>(value: Option<Arc<T>>) -> *mut T {
    value.map_or(absent(), |value| Arc::into_raw(value).cast_mut())
}

/// What became of a row to insert.
enum Insert<T> {
    Kept,
    Declined(Row<T>),
    /// See [`Room::Elsewhere`].
    Elsewhere(Row<T>, u8),
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
    pub(crate) fn new(spec: &TableSpec) -> Rows<T> {
        Rows {
            shards: std::array::from_fn(|_| Shard {
                array: AtomicPtr::new(ptr::null_mut()),
                writer: Mutex::new(Tally::default()),
                watch_ms: AtomicU64::new(spec.refresh_ms),
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
            evictions: AtomicU64::new(0),
            last_reclaim: AtomicU64::new(0),
            // A full table of live rows must not rescan on every miss.
            reclaim_every_ms: (spec.sweep_ms / 8).max(1),
            grace: spec.stale_if_error_ms,
            refresh_ms: spec.refresh_ms,
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
        _pin: &Pin,
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
        // A row expiring after this is alive and not watched.
        let unwatched_after = now.saturating_add(watch_ms);
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
        let rewritten = !same_write(slot.stamp.load(Relaxed), stamp);
        if stamp & 1 == 1 || rewritten || !is_row(value) {
            return None;
        }
        let expires = stamp >> SEQ_BITS;
        // SAFETY (both): `value` is a row's (`is_row`), and the pin keeps
        // its `Arc` alive even if a writer has since replaced it.
        if expires > unwatched_after {
            let value = unsafe { share(value) };
            return Some(Live { value, version });
        }
        if expires <= now {
            return None;
        }
        let left = expires - now;
        let live = Live {
            value: unsafe { share(value) },
            version,
        };
        let due = left <= self.refresh_ms;
        // A full table's usual hit: a row marked read, not due.
        if due || mark_of(stamp) & !REFRESHING != evict::READ {
            let marking = watch_ms == MARKING;
            return Some(watched(live, &slot.stamp, stamp, marking, due, refresh));
        }
        Some(live)
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

    fn reserve(&self) -> bool {
        let reserved = self.size.fetch_update(Relaxed, Relaxed, |size| {
            (size < self.max_size).then_some(size + 1)
        });
        if reserved.is_ok_and(|size| size + 1 == self.marking_from) {
            self.start_marking();
        }
        reserved.is_ok()
    }

    /// Drops the value a row held once no reader can hold it.
    fn retire(&self, value: *mut T) {
        unsafe fn drop_arc<T>(value: *mut ()) {
            // SAFETY: retired once, and it came from `Arc::into_raw`.
            drop(unsafe { Arc::from_raw(value.cast::<T>()) });
        }
        if is_row(value) && value != absent() {
            // SAFETY: the slot no longer holds `value`, so no reader that
            // pins from now on can load it.
            unsafe { self.garbage.retire(value.cast(), drop_arc::<T>) };
        }
    }

    /// Inserts or replaces the row of `key`. A new row needs room: in a
    /// full table the place of a colder row ([`Eviction::Hot`]), which it
    /// may not earn; then, or if the table evicts nothing, the row comes
    /// back (the value was served, not kept). Call
    /// [`make_room`](Self::make_room) first, and
    /// [`collect_if_due`](Self::collect_if_due) after, outside any lock.
    pub(crate) fn insert(&self, key: u64, row: Row<T>, now: u64) -> Result<(), Row<T>> {
        let hash = self.hasher.hash_one(key);
        match self.insert_hashed(key, hash, row, now, true) {
            Insert::Kept => Ok(()),
            Insert::Declined(row) => Err(row),
            // The key's shard, short of its share of rows, has none to give
            // up: a row of another shard, then a reservation.
            Insert::Elsewhere(row, estimate) => {
                if !self.evict_elsewhere(shard_of(hash), estimate, now) {
                    return Err(row);
                }
                match self.insert_hashed(key, hash, row, now, false) {
                    Insert::Kept => Ok(()),
                    Insert::Declined(row) | Insert::Elsewhere(row, _) => Err(row),
                }
            }
        }
    }

    /// [`insert`](Self::insert) within the key's shard; `count`: count the
    /// key in the shard's sketch (not again when trying a second time).
    fn insert_hashed(&self, key: u64, hash: u64, row: Row<T>, now: u64, count: bool) -> Insert<T> {
        let shard = &self.shards[shard_of(hash)];
        let mut tally = shard.lock();
        let array = shard.array(&tally);
        let found = array
            .as_ref()
            .and_then(|array| match array.find(key, hash) {
                (i, true) => Some(i),
                (_, false) => None,
            });
        if let (Some(array), Some(i)) = (&array, found) {
            let slot = &array.slots()[i];
            let old = slot.value.load(Relaxed);
            if is_row(old) {
                // A replacement: no room needed. The read bit stays; the
                // new row's refresh is not started.
                let mark = slot.mark() & !REFRESHING | self.refresh_mark(&row);
                slot.write(into_raw(row.value), row.version, row.expires_at, mark);
                self.retire(old);
                return Insert::Kept;
            }
        }
        match self.room(&mut tally, array.as_ref(), key, hash, now, count) {
            Room::Made => {}
            Room::Declined => return Insert::Declined(row),
            Room::Elsewhere(estimate) => return Insert::Elsewhere(row, estimate),
        }
        if let (Some(array), Some(i)) = (&array, found) {
            // The key's own tombstone.
            let mark = self.refresh_mark(&row);
            array.slots()[i].write(into_raw(row.value), row.version, row.expires_at, mark);
            tally.rows += 1;
            return Insert::Kept;
        }
        let capacity = array.as_ref().map_or(0, Array::capacity);
        let array = if self.crowded(tally.claimed + 1, capacity) {
            let rows = tally.rows + 1;
            self.rebuild(shard, &mut tally, rows)
        } else {
            array.expect("a shard with capacity has an array")
        };
        let (slot, _) = array.probe(key, hash);
        let mark = self.refresh_mark(&row);
        slot.claim(key, into_raw(row.value), row.version, row.expires_at, mark);
        tally.claimed += 1;
        tally.rows += 1;
        Insert::Kept
    }

    /// Slots for an array of `rows` rows: four times them, to grow into,
    /// but no more than a shard's share of `max_size` needs, and at least
    /// 8/5 of them (62.5 % full: room for the tombstones a full table's
    /// evictions leave, an eighth of the slots, before the next rebuild
    /// sweeps them).
    fn slots_for(&self, rows: usize) -> usize {
        capacity_for((rows * 4).min(self.full_slots()).max(rows * 8 / 5 + 1))
    }

    /// The slots a shard's array needs once the table is full: 8/5 of its
    /// share.
    fn full_slots(&self) -> usize {
        self.share.saturating_mul(8) / 5
    }

    /// Whether an array of `capacity` slots is to be rebuilt rather than
    /// have `claimed` of them claimed: past half while it is smaller than
    /// a full table's, past three quarters from that size. A hit's probe
    /// is short in a table below its bound (a shard's array is at most
    /// half claimed, twice to four times its rows: 64 to 128 B a row), and
    /// a full table is as small as its memory target needs (62.5 to 75 %
    /// claimed: about 1.5 probes a hit).
    fn crowded(&self, claimed: usize, capacity: usize) -> bool {
        // A slot count below `full_slots` is below the full array's, the
        // least slot count of at least it.
        if capacity < self.full_slots() {
            claimed * 2 > capacity
        } else {
            claimed * 4 > capacity * 3
        }
    }

    /// Moves the rows of `shard` (marks and all) to a new array with room
    /// for `rows` rows.
    fn rebuild(
        &self,
        shard: &Shard<T>,
        tally: &mut MutexGuard<'_, Tally>,
        rows: usize,
    ) -> Array<T> {
        let new = Array::new(self.slots_for(rows));
        let old = shard.array(tally);
        // A shard's first array (or its first since it emptied): the hand
        // starts at its first slot.
        let hand = std::mem::take(&mut tally.hand);
        if let Some(old) = &old {
            for slot in old.slots() {
                let value = slot.value.load(Relaxed);
                if is_row(value) {
                    let key = slot.key.load(Relaxed);
                    let (i, _) = new.find(key, self.hasher.hash_one(key));
                    let (version, stamp) = (slot.version.load(Relaxed), slot.stamp.load(Relaxed));
                    new.slots()[i].claim(key, value, version, stamp >> SEQ_BITS, mark_of(stamp));
                }
            }
            // Slots keep the order of their hashes: the hand keeps its place.
            tally.hand = moved_hand(hand, old.capacity(), new.capacity());
        }
        tally.claimed = tally.rows;
        shard.array.store(new.tagged(), Release);
        if let Some(old) = old {
            self.retire_array(&old);
        }
        new
    }

    /// Drops the array of a shard left without rows.
    fn empty(&self, shard: &Shard<T>, tally: &mut MutexGuard<'_, Tally>) {
        if let Some(old) = shard.array(tally) {
            shard.array.store(ptr::null_mut(), Release);
            tally.claimed = 0;
            self.retire_array(&old);
        }
    }

    /// Frees an unpublished array (not the values it points to, which moved
    /// or were retired) once no reader can hold it.
    fn retire_array(&self, old: &Array<T>) {
        unsafe fn free_array<T>(tagged: *mut ()) {
            // SAFETY: retired once, tagged by `Array::tagged`.
            unsafe { Array::<T>::from_tagged(tagged.cast()).map(|array| array.free()) };
        }
        // SAFETY: the caller unpublished it.
        unsafe { self.garbage.retire(old.tagged().cast(), free_array::<T>) };
    }

    /// Removes the row of `key` if it is older than `version` (any row
    /// when `version` is `None`); whether it did. Call
    /// [`collect_if_due`](Self::collect_if_due) after, outside any lock.
    pub(crate) fn remove_older(&self, key: u64, version: Option<u64>) -> bool {
        let (shard, hash) = self.locate(key);
        let mut tally = shard.lock();
        let Some(array) = shard.array(&tally) else {
            return false;
        };
        let (slot, found) = array.probe(key, hash);
        let value = slot.value.load(Relaxed);
        if !found || !is_row(value) || version.is_some_and(|v| slot.version.load(Relaxed) >= v) {
            return false;
        }
        slot.write(tombstone(), 0, 0, 0);
        self.retire(value);
        tally.rows -= 1;
        self.size.fetch_sub(1, Relaxed);
        true
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

    /// Removes the rows whose expiry `dead` picks; how many.
    fn remove_where(&self, dead: impl Fn(u64) -> bool) -> usize {
        let mut removed = 0;
        for shard in &self.shards {
            let mut tally = shard.lock();
            let Some(array) = shard.array(&tally) else {
                continue;
            };
            for slot in array.slots() {
                let value = slot.value.load(Relaxed);
                if is_row(value) && dead(slot.expires_at()) {
                    slot.write(tombstone(), 0, 0, 0);
                    self.retire(value);
                    tally.rows -= 1;
                    removed += 1;
                }
            }
            // No rows: free the slots. More tombstones than rows: shrink,
            // and shorten the probes.
            if tally.rows == 0 {
                self.empty(shard, &mut tally);
            } else if tally.claimed - tally.rows > tally.rows {
                let rows = tally.rows;
                self.rebuild(shard, &mut tally, rows);
            }
        }
        self.size.fetch_sub(removed, Relaxed);
        removed
    }

    /// Removes every row dead at `now` for longer than the grace; how
    /// many.
    pub(crate) fn sweep(&self, now: u64) -> usize {
        let grace = self.grace;
        let swept = self.remove_where(|expires_at| now >= expires_at.saturating_add(grace));
        self.garbage.collect();
        swept
    }

    /// Removes every row. Call [`collect_if_due`](Self::collect_if_due)
    /// after, outside any lock.
    pub(crate) fn clear(&self) {
        self.remove_where(|_| true);
    }

    /// Frees what writers removed, once no reader can hold it. Runs the
    /// values' destructors: never call it under a lock.
    pub(crate) fn collect(&self) {
        self.garbage.collect();
    }

    /// [`collect`](Self::collect)s if writers retired enough since the
    /// last collection. Never call it under a lock.
    pub(crate) fn collect_if_due(&self) {
        self.garbage.collect_if_due();
    }

    /// When a table that evicts nothing ([`Eviction::None`]) is full,
    /// reclaims its dead rows (at most once every few milliseconds).
    /// Returns how many it reclaimed.
    pub(crate) fn make_room(&self, now: u64) -> usize {
        // A table that evicts takes dead rows first, as its hand meets them.
        if self.eviction != Eviction::None || !self.is_full() {
            return 0;
        }
        let last = self.last_reclaim.load(Relaxed);
        if now.saturating_sub(last) < self.reclaim_every_ms
            || self
                .last_reclaim
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return 0;
        }
        // Dead rows go, in their grace or not: the table needs room.
        let reclaimed = self.remove_where(|expires_at| now >= expires_at);
        self.garbage.collect();
        reclaimed
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

/// When a row inserted at `now` with `ttl_ms` dies: uniform in
/// `ttl ± ttl·jitter`, exactly `ttl` when the jitter is 0.
pub(crate) fn expiry(now: u64, ttl_ms: u64, jitter: f64) -> u64 {
    let spread = spread(ttl_ms, jitter);
    let lifetime = if spread == 0 {
        ttl_ms
    } else {
        fastrand::u64(ttl_ms - spread..=ttl_ms + spread)
    };
    now.saturating_add(lifetime)
}

/// When a row inserted at `now` dies, if it must die within `within_ms`
/// (a TTL its loader gave, or what is left of the L2 frame it was read
/// from; `u64::MAX` for no bound): as [`expiry`] draws it if that bound is
/// not shorter than `ttl_ms`, but never past the bound; else uniform in
/// `within − within·jitter ..= within`: a bound is a deadline, so it is
/// jittered down only, and a cohort given one deadline still does not die
/// together.
pub(crate) fn expiry_within(now: u64, ttl_ms: u64, jitter: f64, within_ms: u64) -> u64 {
    if within_ms >= ttl_ms {
        return expiry(now, ttl_ms, jitter).min(now.saturating_add(within_ms));
    }
    let spread = spread(within_ms, jitter);
    now.saturating_add(fastrand::u64(within_ms - spread..=within_ms))
}

/// The shortest lifetime [`expiry`] draws.
pub(crate) fn shortest_lifetime(ttl_ms: u64, jitter: f64) -> u64 {
    ttl_ms - spread(ttl_ms, jitter)
}

/// The longest lifetime [`expiry`] draws.
pub(crate) fn longest_lifetime(ttl_ms: u64, jitter: f64) -> u64 {
    ttl_ms.saturating_add(spread(ttl_ms, jitter))
}

/// `ttl·jitter`, in whole milliseconds.
fn spread(ttl_ms: u64, jitter: f64) -> u64 {
    // Jitter is at most 0.5 and TTLs fit f64's 53-bit mantissa in practice.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let spread = (ttl_ms as f64 * jitter) as u64;
    spread
}

#[cfg(test)]
mod tests;
