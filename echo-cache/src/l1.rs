//! L1: the rows of one table, read lock-free in the caller's thread.
//!
//! A purpose-built hash table for `u64` keys. The read side (a hit) takes no
//! lock and writes nothing shared; the write side (fills, puts,
//! invalidations, sweeps) is rare by comparison and serialized per shard by
//! a mutex readers never touch.
//!
//! - Open addressing, linear probing, rows inline: a slot holds the key, the
//!   `Arc` pointer, the version and the expiry, 32 bytes. A hit is a short
//!   chain of dependent loads (shard → slot → the `Arc`'s count), which is
//!   what it costs once the `Arc`'s atomic increment orders everything.
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
//! sweeper (or a full table) reclaims them; a dead row is never served.

use std::alloc::{self, Layout};
use std::hash::BuildHasher;
use std::ptr::{self, NonNull};
use std::sync::{Arc, PoisonError};

use crate::epoch::{Garbage, Pin};
use crate::spec::TableSpec;
use crate::sync::Ordering::{Acquire, Relaxed, Release};
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize, Mutex, MutexGuard, fence};

#[cfg(not(all(test, echo_cache_loom)))]
type Hasher = foldhash::fast::RandomState;
/// The model checker replays executions: where keys land must not change.
#[cfg(all(test, echo_cache_loom))]
type Hasher = foldhash::fast::FixedState;

/// Writers lock one of 16 shards (by the hash's top bits): fills of
/// different ids rarely wait for each other, and a rebuild copies a
/// sixteenth of the table.
const SHARD_BITS: u32 = 4;
const SHARDS: usize = 1 << SHARD_BITS;
/// Slots of a shard's first array (log2).
const MIN_LOG2: u32 = 3;
/// Expiries are kept in the top 40 bits of a slot's stamp (34 years of
/// milliseconds on the cache's clock, which starts at 0; later is "never");
/// the low 24 bits count its writes, two per write (odd while under way).
///
/// A reader checks the stamp before and after loading a row, so it could
/// pair a value with another write's version only if, between its two
/// stamp loads (a few nanoseconds), the slot were written a multiple of
/// 2^23 times, the last write drawing the same expiry as the first. That
/// takes 8.4 million writes of one id (1.4 s at the 6 million a second one
/// writer manages into one id, measured) while the reader stays
/// descheduled right there, and an expiry drawn again to the millisecond:
/// `ttl ± ttl·jitter` gives 1 in 120,001 for 10-minute rows at the default
/// 10 % jitter; without jitter the clock (ticking at least every 100 ms)
/// must not have moved in those 1.4 s; rows that never expire share one
/// expiry, and only the count guards them. Even then the read is sound:
/// the pin keeps alive every value unlinked since it began, and both
/// halves come from writes made during that one read.
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const MAX_EXPIRY: u64 = u64::MAX >> SEQ_BITS;

/// One cached row: the value (or the remembered absence of one), its version
/// payload and when it dies.
pub(crate) struct Row<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
    pub(crate) expires_at: u64,
}

/// What a live row holds.
pub(crate) struct Live<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
}

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
    /// `expires_at << SEQ_BITS | writes`; odd while a write is under way.
    stamp: AtomicU64,
}

/// The slots of one shard: `1 << log2` of them in one zeroed allocation,
/// aligned so that the low bits of its address carry `log2`: one load of
/// the shard's pointer gives a reader both.
struct Array<T> {
    slots: NonNull<Slot<T>>,
    log2: u32,
}

/// Alignment of arrays: six free low bits, enough for any `log2`.
const ARRAY_ALIGN: usize = 64;

/// Slots with a key (rows and tombstones) and rows, of one shard.
#[derive(Default)]
struct Tally {
    claimed: usize,
    rows: usize,
}

#[repr(align(128))]
struct Shard<T> {
    /// The tagged address of the shard's [`Array`]; null before the first
    /// row.
    array: AtomicPtr<Slot<T>>,
    writer: Mutex<Tally>,
}

pub(crate) struct Rows<T> {
    shards: [Shard<T>; SHARDS],
    hasher: Hasher,
    garbage: Garbage,
    /// Rows in the table, live or dead (tombstones are not rows).
    size: AtomicUsize,
    max_size: usize,
    /// When a full table last looked for dead rows to reclaim.
    last_reclaim: AtomicU64,
    reclaim_every_ms: u64,
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

    /// Claims an empty slot for `key`. The shard's writer only.
    fn claim(&self, key: u64, value: *mut T, version: u64, expires_at: u64) {
        self.key.store(key, Relaxed);
        self.version.store(version, Relaxed);
        self.stamp
            .store(expires_at.min(MAX_EXPIRY) << SEQ_BITS, Relaxed);
        self.value.store(value, Release);
    }

    /// Writes a row (or a tombstone) into a claimed slot. The shard's writer
    /// only.
    fn write(&self, value: *mut T, version: u64, expires_at: u64) {
        let stamp = self.stamp.load(Relaxed);
        self.stamp.store(stamp | 1, Relaxed);
        fence(Release);
        self.value.store(value, Relaxed);
        self.version.store(version, Relaxed);
        let writes = (stamp + 2) & SEQ_MASK;
        self.stamp
            .store(expires_at.min(MAX_EXPIRY) << SEQ_BITS | writes, Release);
    }
}

impl<T> Array<T> {
    fn layout(log2: u32) -> Layout {
        Layout::array::<Slot<T>>(1 << log2)
            .and_then(|layout| layout.align_to(ARRAY_ALIGN))
            .expect("an L1 array fits the address space")
    }

    /// A new array of empty slots, room for `rows` rows.
    fn for_rows(rows: usize) -> Array<T> {
        let log2 = (rows * 2)
            .next_power_of_two()
            .trailing_zeros()
            .max(MIN_LOG2);
        let layout = Array::<T>::layout(log2);
        // SAFETY: the layout is not zero-sized; all zeroes is empty slots.
        #[allow(clippy::cast_ptr_alignment)] // allocated with `ARRAY_ALIGN`
        let slots = unsafe { alloc::alloc_zeroed(layout) }.cast::<Slot<T>>();
        let Some(slots) = NonNull::new(slots) else {
            alloc::handle_alloc_error(layout)
        };
        // A loom atomic is a handle into the model, not its value: make them.
        #[cfg(all(test, echo_cache_loom))]
        for i in 0..1 << log2 {
            // SAFETY: inside the allocation, and nothing else sees it yet.
            unsafe { slots.as_ptr().add(i).write(Slot::vacant()) };
        }
        Array { slots, log2 }
    }

    fn tagged(&self) -> *mut Slot<T> {
        self.slots
            .as_ptr()
            .map_addr(|address| address | self.log2 as usize)
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
        #[allow(clippy::cast_possible_truncation)] // below ARRAY_ALIGN
        let log2 = (tagged.addr() & (ARRAY_ALIGN - 1)) as u32;
        let slots = NonNull::new(tagged.map_addr(|address| address & !(ARRAY_ALIGN - 1)))?;
        Some(Array { slots, log2 })
    }

    fn capacity(&self) -> usize {
        1 << self.log2
    }

    fn mask(&self) -> usize {
        self.capacity() - 1
    }

    #[inline]
    fn slots(&self) -> &[Slot<T>] {
        // SAFETY: `capacity` slots, allocated and initialized in `for_rows`.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.capacity()) }
    }

    /// The slot claimed by `key`, or else the empty slot ending its probe.
    /// The shard's writer only.
    fn probe(&self, key: u64, hash: u64) -> (&Slot<T>, bool) {
        let (slots, mask) = (self.slots(), self.mask());
        let mut i = start(hash, mask);
        loop {
            let slot = &slots[i];
            if slot.value.load(Relaxed).is_null() {
                return (slot, false);
            }
            if slot.key.load(Relaxed) == key {
                return (slot, true);
            }
            i = (i + 1) & mask;
        }
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
            // SAFETY: the caller's guarantee; made in `for_rows`.
            let slot = unsafe { &mut *self.slots.as_ptr().add(i) };
            slot.assert_unshared();
            // SAFETY: as above, and never used again.
            unsafe { ptr::drop_in_place(slot) };
        }
        // SAFETY: allocated in `for_rows` with this layout.
        unsafe { alloc::dealloc(self.slots.as_ptr().cast(), Array::<T>::layout(self.log2)) };
    }
}

/// Where the probe of `hash` starts in an array of `mask + 1` slots.
#[inline]
fn start(hash: u64, mask: usize) -> usize {
    // Only the low bits matter (`mask` < `usize::MAX`).
    #[allow(clippy::cast_possible_truncation)]
    let low = hash as usize;
    low & mask
}

fn into_raw<T>(value: Option<Arc<T>>) -> *mut T {
    value.map_or(absent(), |value| Arc::into_raw(value).cast_mut())
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
            }),
            hasher: Hasher::default(),
            garbage: Garbage::new(),
            size: AtomicUsize::new(0),
            max_size: spec.max_size,
            last_reclaim: AtomicU64::new(0),
            // A full table of live rows must not rescan on every miss.
            reclaim_every_ms: (spec.sweep_ms / 8).max(1),
        }
    }

    #[inline]
    fn locate(&self, key: u64) -> (&Shard<T>, u64) {
        let hash = self.hasher.hash_one(key);
        #[allow(clippy::cast_possible_truncation)] // the top SHARD_BITS bits
        let shard = (hash >> (64 - SHARD_BITS)) as usize;
        (&self.shards[shard], hash)
    }

    /// The row of `key` if it is alive at `now`. A row caught mid-write
    /// reads as a miss.
    #[allow(clippy::inline_always)] // the hot path: see `Fetch::poll`
    #[inline(always)]
    pub(crate) fn get(&self, _pin: &Pin, key: u64, now: u64) -> Option<Live<T>> {
        let (shard, hash) = self.locate(key);
        // SAFETY: the pin keeps a published array allocated.
        let array = unsafe { Array::from_tagged(shard.array.load(Acquire)) }?;
        let (slots, mask) = (array.slots(), array.mask());
        let mut i = start(hash, mask);
        let slot = loop {
            // SAFETY: `i <= mask`, and the array has `mask + 1` slots.
            let slot = unsafe { slots.get_unchecked(i) };
            if slot.value.load(Acquire).is_null() {
                return None;
            }
            if slot.key.load(Relaxed) == key {
                break slot;
            }
            i = (i + 1) & mask;
        };
        let stamp = slot.stamp.load(Acquire);
        let value = slot.value.load(Relaxed);
        let version = slot.version.load(Relaxed);
        fence(Acquire);
        if stamp & 1 == 1 || slot.stamp.load(Relaxed) != stamp || !is_row(value) {
            return None;
        }
        if now >= stamp >> SEQ_BITS {
            return None;
        }
        let value = (value != absent()).then(|| {
            // SAFETY: `value` came from `Arc::into_raw`, and the pin keeps
            // that `Arc` alive even if a writer has since replaced it.
            unsafe {
                Arc::increment_strong_count(value);
                Arc::from_raw(value)
            }
        });
        Some(Live { value, version })
    }

    fn reserve(&self) -> bool {
        self.size
            .fetch_update(Relaxed, Relaxed, |size| {
                (size < self.max_size).then_some(size + 1)
            })
            .is_ok()
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

    /// Inserts or replaces the row of `key`, unless the table is full of
    /// live rows: then the row comes back (the value was served, not kept).
    /// Call [`make_room`](Self::make_room) first, and
    /// [`collect_if_due`](Self::collect_if_due) after, outside any lock.
    pub(crate) fn insert(&self, key: u64, row: Row<T>) -> Result<(), Row<T>> {
        let (shard, hash) = self.locate(key);
        let mut tally = shard.lock();
        let array = shard.array(&tally);
        if let Some(array) = &array {
            let (slot, found) = array.probe(key, hash);
            if found {
                let old = slot.value.load(Relaxed);
                if old == tombstone() {
                    if !self.reserve() {
                        return Err(row);
                    }
                    tally.rows += 1;
                }
                slot.write(into_raw(row.value), row.version, row.expires_at);
                self.retire(old);
                return Ok(());
            }
        }
        if !self.reserve() {
            return Err(row);
        }
        let capacity = array.as_ref().map_or(0, Array::capacity);
        // At most three quarters claimed, so probes stay short and end.
        let array = if (tally.claimed + 1) * 4 > capacity * 3 {
            let rows = tally.rows + 1;
            self.rebuild(shard, &mut tally, rows)
        } else {
            array.expect("a shard with capacity has an array")
        };
        let (slot, _) = array.probe(key, hash);
        slot.claim(key, into_raw(row.value), row.version, row.expires_at);
        tally.claimed += 1;
        tally.rows += 1;
        Ok(())
    }

    /// Moves the rows of `shard` to a new array with room for `rows` rows.
    fn rebuild(
        &self,
        shard: &Shard<T>,
        tally: &mut MutexGuard<'_, Tally>,
        rows: usize,
    ) -> Array<T> {
        let new = Array::for_rows(rows);
        let old = shard.array(tally);
        for slot in old.iter().flat_map(Array::slots) {
            let value = slot.value.load(Relaxed);
            if is_row(value) {
                let key = slot.key.load(Relaxed);
                let (to, _) = new.probe(key, self.hasher.hash_one(key));
                to.claim(key, value, slot.version.load(Relaxed), slot.expires_at());
            }
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
        slot.write(tombstone(), 0, 0);
        self.retire(value);
        tally.rows -= 1;
        self.size.fetch_sub(1, Relaxed);
        true
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
                    slot.write(tombstone(), 0, 0);
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

    /// Removes every row dead at `now`; how many.
    pub(crate) fn sweep(&self, now: u64) -> usize {
        let swept = self.remove_where(|expires_at| now >= expires_at);
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

    /// When the table is full, reclaims its dead rows (at most once every
    /// few milliseconds). Returns how many it reclaimed.
    pub(crate) fn make_room(&self, now: u64) -> usize {
        if !self.is_full() {
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
        self.sweep(now)
    }

    /// Rows in the table, live or not yet swept.
    pub(crate) fn len(&self) -> usize {
        self.size.load(Relaxed)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.max_size
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

/// The shortest lifetime [`expiry`] draws.
pub(crate) fn shortest_lifetime(ttl_ms: u64, jitter: f64) -> u64 {
    ttl_ms - spread(ttl_ms, jitter)
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
mod tests {
    use super::*;
    use crate::epoch;
    use std::sync::atomic::AtomicBool;

    fn rows<T>(max_size: usize) -> Rows<T> {
        let spec = crate::directory::SpecParts {
            name: "rows",
            type_name: "Rows",
            kind: "ROW",
            ttl_ms: 1_000,
            jitter: None,
            max_size: Some(max_size),
            sweep_ms: None,
            absent_ttl_ms: None,
            load_timeout_ms: None,
            coherence: crate::Coherence::None,
            placement: crate::Placement::Table,
            fingerprint: 0,
        }
        .build();
        Rows::new(&spec)
    }

    fn row(value: u64, version: u64, expires_at: u64) -> Row<u64> {
        Row {
            value: Some(Arc::new(value)),
            version,
            expires_at,
        }
    }

    /// (value, version) of the live row of `key` at `now`.
    fn read(rows: &Rows<u64>, key: u64, now: u64) -> Option<(Option<u64>, u64)> {
        let live = rows.get(&epoch::pin(), key, now)?;
        Some((live.value.map(|v| *v), live.version))
    }

    /// Keys spread over the whole `u64` range, the markers' values included.
    fn keys(n: u64) -> impl Iterator<Item = u64> {
        [0, 1, 2, u64::MAX]
            .into_iter()
            .chain((4..n).map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }

    #[test]
    fn rows_are_found_replaced_and_removed_through_rebuilds() {
        // Enough under Miri for most shards' arrays to grow twice.
        const KEYS: usize = if cfg!(miri) { 200 } else { 20_000 };
        let rows = rows(usize::MAX);
        for key in keys(KEYS as u64) {
            assert!(rows.insert(key, row(key, 1, 100)).is_ok());
        }
        assert_eq!(rows.len(), KEYS);
        for (i, key) in keys(KEYS as u64).enumerate() {
            assert_eq!(read(&rows, key, 0), Some((Some(key), 1)));
            if i % 2 == 0 {
                assert!(rows.insert(key, row(key ^ 1, 2, 100)).is_ok());
            }
            if i % 3 == 0 {
                // Only a row older than the version goes.
                assert!(!rows.remove_older(key, Some(1)));
                assert!(rows.remove_older(key, Some(3)));
                assert!(!rows.remove_older(key, None), "already gone");
            }
        }
        let gone = keys(KEYS as u64).step_by(3).count();
        assert_eq!(rows.len(), KEYS - gone);
        for (i, key) in keys(KEYS as u64).enumerate() {
            let expected = match (i % 3, i % 2) {
                (0, _) => None,
                (_, 0) => Some((Some(key ^ 1), 2)),
                _ => Some((Some(key), 1)),
            };
            assert_eq!(read(&rows, key, 0), expected, "key {key}");
        }
        // Removed keys come back into their tombstones, or a rebuilt array.
        for key in keys(KEYS as u64).step_by(3) {
            assert!(rows.insert(key, row(7, 3, 100)).is_ok());
            assert_eq!(read(&rows, key, 0), Some((Some(7), 3)));
        }
        assert_eq!(rows.len(), KEYS);
        assert_eq!(read(&rows, 12_345, 0), None, "never inserted");
    }

    #[test]
    fn dead_rows_are_not_served_and_the_sweep_removes_them() {
        const KEYS: usize = if cfg!(miri) { 100 } else { 1_000 };
        let rows = rows(usize::MAX);
        for key in 0..KEYS as u64 {
            assert!(rows.insert(key, row(key, 1, 10 + key % 2)).is_ok());
        }
        assert_eq!(read(&rows, 0, 9), Some((Some(0), 1)));
        assert_eq!(read(&rows, 0, 10), None, "dies at its expiry");
        assert_eq!(read(&rows, 1, 10), Some((Some(1), 1)));
        assert_eq!(rows.sweep(10), KEYS / 2);
        assert_eq!(rows.len(), KEYS / 2);
        assert_eq!(read(&rows, 1, 10), Some((Some(1), 1)));
        assert_eq!(rows.sweep(11), KEYS / 2);
        assert_eq!(rows.len(), 0);
        // An expiry past the stamp's 40 bits is "never".
        assert!(rows.insert(5, row(5, 1, u64::MAX)).is_ok());
        assert_eq!(read(&rows, 5, MAX_EXPIRY - 1), Some((Some(5), 1)));
    }

    #[test]
    fn a_remembered_absence_reads_as_a_live_row_without_a_value() {
        let rows = rows(usize::MAX);
        let absent = Row {
            value: None,
            version: 4,
            expires_at: 100,
        };
        assert!(rows.insert(9, absent).is_ok());
        assert_eq!(read(&rows, 9, 0), Some((None, 4)));
        assert_eq!(rows.len(), 1);
        assert!(rows.remove_older(9, None));
        assert_eq!(read(&rows, 9, 0), None);
    }

    #[test]
    fn a_full_table_keeps_no_new_key_but_replaces_its_rows() {
        let rows = rows(10);
        for key in 0..10 {
            assert!(rows.insert(key, row(key, 1, 100)).is_ok());
        }
        assert!(rows.insert(10, row(10, 1, 100)).is_err());
        assert_eq!(read(&rows, 10, 0), None);
        assert!(rows.insert(3, row(33, 2, 100)).is_ok(), "a replacement");
        assert_eq!(read(&rows, 3, 0), Some((Some(33), 2)));
        assert!(rows.remove_older(4, None));
        assert!(rows.insert(10, row(10, 1, 100)).is_ok());
        assert!(rows.insert(4, row(4, 1, 100)).is_err(), "a tombstone");
        rows.clear();
        assert_eq!(rows.len(), 0);
        assert!((0..=10).all(|key| read(&rows, key, 0).is_none()));
        assert!(rows.insert(4, row(4, 1, 100)).is_ok());
    }

    #[test]
    fn removed_values_are_dropped_once_no_reader_can_hold_them() {
        let rows = rows(usize::MAX);
        let value = Arc::new(1);
        let replaced = Arc::new(2);
        for (key, value) in [(1, &value), (2, &replaced)] {
            let row = Row {
                value: Some(Arc::clone(value)),
                version: 1,
                expires_at: 100,
            };
            assert!(rows.insert(key, row).is_ok());
        }
        rows.remove_older(1, None);
        assert!(rows.insert(2, row(3, 2, 100)).is_ok());
        // Other tests' readers pin and unpin meanwhile; the epoch gets there.
        for _ in 0..10_000 {
            if Arc::strong_count(&value) == 1 && Arc::strong_count(&replaced) == 1 {
                break;
            }
            rows.collect();
            std::thread::yield_now();
        }
        assert_eq!(Arc::strong_count(&value), 1);
        assert_eq!(Arc::strong_count(&replaced), 1);
        let kept = rows.get(&epoch::pin(), 2, 0).and_then(|live| live.value);
        drop(rows);
        assert_eq!(kept.map(|v| (*v, Arc::strong_count(&v))), Some((3, 1)));
    }

    /// A value that checks itself: `key << 32 | version` and its
    /// complement, which its drop wipes. A torn row, or a value read or
    /// dropped after it was freed, fails an assertion (and Miri or the
    /// address sanitizer name the access); drops are counted.
    struct Word {
        bits: u64,
        check: u64,
        drops: Arc<AtomicUsize>,
    }

    impl Word {
        fn new(key: u64, version: u64, drops: &Arc<AtomicUsize>) -> Word {
            let bits = key << 32 | version;
            Word {
                bits,
                check: !bits,
                drops: Arc::clone(drops),
            }
        }

        fn assert_whole(&self, key: u64, version: u64) {
            assert_eq!(self.check, !self.bits, "a freed value, key {key}");
            assert_eq!(self.bits, key << 32 | version, "a torn row, key {key}");
        }
    }

    impl Drop for Word {
        fn drop(&mut self) {
            assert_eq!(self.check, !self.bits, "a value dropped twice");
            // Volatile: a store the allocator's free would otherwise elide.
            // SAFETY: a valid `&mut u64`.
            unsafe { ptr::write_volatile(&raw mut self.check, self.bits) };
            self.drops.fetch_add(1, Relaxed);
        }
    }

    /// Readers against writers that replace, remove, grow (rebuild),
    /// clear, sweep and collect, all at once. Small enough under Miri
    /// (`scripts/miri`) to check every access for races and
    /// use-after-free; large natively and under the address sanitizer
    /// (`scripts/sanitize`).
    #[test]
    fn readers_see_whole_rows_while_writers_rewrite_and_free_them() {
        // 16 shards of 8 slots hold 96 rows: more keys make them grow, and
        // regrow after each clear.
        const KEYS: u64 = 128;
        const WRITES: u64 = if cfg!(miri) { 150 } else { 200_000 };
        const CLEAR_EVERY: u64 = if cfg!(miri) { 50 } else { 5_000 };
        let rows = rows::<Word>(usize::MAX);
        let (made, drops) = (AtomicUsize::new(0), Arc::new(AtomicUsize::new(0)));
        let finished = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for writer in 0..2_u64 {
                let (rows, made, drops, finished) = (&rows, &made, &drops, &finished);
                s.spawn(move || {
                    for n in 0..WRITES {
                        let (key, version) = (n.wrapping_mul(writer * 2 + 7) % KEYS, n + 1);
                        if n % CLEAR_EVERY == CLEAR_EVERY - 1 {
                            rows.clear();
                            continue;
                        }
                        match n % 16 {
                            0 => drop(rows.remove_older(key, None)),
                            // Rows of odd versions die at 1 (readers read at 0).
                            1 => drop(rows.sweep(1)),
                            2 => rows.collect(),
                            _ => {
                                made.fetch_add(1, Relaxed);
                                let row = Row {
                                    value: Some(Arc::new(Word::new(key, version, drops))),
                                    version,
                                    expires_at: if version % 2 == 1 { 1 } else { 100 },
                                };
                                assert!(rows.insert(key, row).is_ok(), "no size bound");
                            }
                        }
                        rows.collect_if_due();
                    }
                    finished.fetch_add(1, Relaxed);
                });
            }
            for _ in 0..2 {
                let (rows, finished) = (&rows, &finished);
                s.spawn(move || {
                    while finished.load(Relaxed) < 2 {
                        for key in 0..KEYS {
                            if let Some(live) = rows.get(&epoch::pin(), key, 0) {
                                let word = live.value.expect("rows with values only");
                                word.assert_whole(key, live.version);
                            }
                        }
                        // Miri runs one thread at a time: let the writers on.
                        std::thread::yield_now();
                    }
                });
            }
        });
        assert!(
            drops.load(Relaxed) > 0,
            "values were freed while readers read"
        );
        drop(rows);
        assert_eq!(drops.load(Relaxed), made.load(Relaxed), "each freed once");
    }

    /// The review's directed case: a rebuild retires the array a pinned
    /// reader read, in a batch of its own (absences: no `Arc` whose counts
    /// would order the reader's loads before the free). The array is kept
    /// while the reader is pinned and freed after; under Miri, a free not
    /// ordered after the reader's loads by the epoch itself is a data race.
    #[test]
    fn a_rebuild_frees_the_old_array_once_the_reader_pinned_on_it_unpins() {
        let absence = || Row {
            value: None::<Arc<u64>>,
            version: 1,
            expires_at: 100,
        };
        let rows = rows(usize::MAX);
        let shard = rows.locate(0).0;
        let keys: Vec<u64> = (0..)
            .filter(|&key| ptr::eq(rows.locate(key).0, shard))
            .take(7)
            .collect();
        for &key in &keys[..6] {
            assert!(rows.insert(key, absence()).is_ok());
        }
        // Signals through relaxed flags: a channel, a lock or a `SeqCst`
        // operation in the reader after its reads could order them before
        // the free, and hide a missing fence in the epoch.
        let [read, unpin, done] = [(); 3].map(|()| AtomicBool::new(false));
        let wait = |flag: &AtomicBool| {
            while !flag.load(Relaxed) {
                std::thread::yield_now();
            }
        };
        std::thread::scope(|s| {
            let (rows, keys, read, unpin, done) = (&rows, &keys, &read, &unpin, &done);
            s.spawn(move || {
                let pin = epoch::pin();
                assert!(rows.get(&pin, keys[0], 0).is_some());
                read.store(true, Relaxed);
                wait(unpin);
                drop(pin);
                // Alive until freed: a thread's exit returns its epoch
                // lease under the lock every advance takes.
                wait(done);
            });
            wait(read);
            // Seven claimed slots of eight: the shard's array is rebuilt.
            assert!(rows.insert(keys[6], absence()).is_ok());
            assert_eq!(rows.garbage.held(), 1, "the old array, alone");
            for _ in 0..10 {
                rows.collect();
            }
            assert_eq!(rows.garbage.held(), 1, "freed under a pinned reader");
            unpin.store(true, Relaxed);
            let freed = (0..10_000).any(|_| {
                rows.collect();
                std::thread::yield_now();
                rows.garbage.held() == 0
            });
            done.store(true, Relaxed);
            assert!(freed, "never freed after the unpin");
        });
    }

    #[test]
    fn expiries_fall_inside_the_band_and_spread() {
        let draws = if cfg!(miri) { 200 } else { 10_000 };
        let expiries: Vec<u64> = (0..draws).map(|_| expiry(1_000, 600_000, 0.1)).collect();
        assert!(
            expiries
                .iter()
                .all(|e| (1_000 + 540_000..=1_000 + 660_000).contains(e))
        );
        assert!(expiries.iter().any(|&e| e != expiries[0]));
        assert_eq!(expiry(1_000, 600_000, 0.0), 601_000);
    }

    /// Loom models of the table through its own code: a reader against
    /// writes that retire what it reads and collections that free it, in
    /// every interleaving. Loom fails a model when a free is not ordered
    /// after every access to what it frees: the slots of an array
    /// ([`Array::free`]), a value ([`Word`]).
    ///
    /// Run with `RUSTFLAGS="--cfg echo_cache_loom" cargo test -p echo-cache
    /// --lib --target-dir target/loom model -- --test-threads=1`.
    #[cfg(echo_cache_loom)]
    mod model {
        use super::{Row, Rows, rows};
        use crate::epoch;
        use crate::sync::AtomicU64;
        use std::ptr;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

        /// A value loom watches: its bits are its row's version (a torn
        /// row shows), and a read of them not ordered before its drop fails
        /// the model.
        struct Word {
            bits: AtomicU64,
            drops: Arc<AtomicUsize>,
        }

        impl Drop for Word {
            fn drop(&mut self) {
                self.bits.with_mut(|_| ());
                self.drops.fetch_add(1, Relaxed);
            }
        }

        fn word(version: u64, expires_at: u64, drops: &Arc<AtomicUsize>) -> Row<Word> {
            let word = Word {
                bits: AtomicU64::new(version),
                drops: Arc::clone(drops),
            };
            Row {
                value: Some(Arc::new(word)),
                version,
                expires_at,
            }
        }

        /// A remembered absence: no `Arc`, nothing but the row.
        fn absence(version: u64) -> Row<Word> {
            Row {
                value: None,
                version,
                expires_at: 100,
            }
        }

        /// `n` keys of the shard of `key`, `key` first.
        fn shard_mates(rows: &Rows<Word>, key: u64, n: usize) -> Vec<u64> {
            let shard = rows.locate(key).0;
            (key..)
                .filter(|&k| ptr::eq(rows.locate(k).0, shard))
                .take(n)
                .collect()
        }

        /// A reader of `key`, pinned across the read, checking what it
        /// reads. On a thread of its own: loom drops the main thread's
        /// thread-locals (its epoch lease) after the statics they go back
        /// to.
        fn reader(rows: &Arc<Rows<Word>>, key: u64) -> loom::thread::JoinHandle<()> {
            let rows = Arc::clone(rows);
            loom::thread::spawn(move || {
                let pin = epoch::pin();
                let Some(live) = rows.get(&pin, key, 0) else {
                    return;
                };
                if let Some(word) = live.value {
                    let bits = word.bits.load(Relaxed);
                    assert_eq!(bits, live.version, "a value with another row's version");
                }
                drop(pin);
            })
        }

        /// Runs `model` in every interleaving with up to three preemptions
        /// (`LOOM_MAX_PREEMPTIONS` to change it): each model well under a
        /// minute, where an unbounded search takes hours.
        fn check(model: impl Fn() + Sync + Send + 'static) {
            let mut builder = loom::model::Builder::new();
            builder.preemption_bound = builder.preemption_bound.or(Some(3));
            builder.check(model);
        }

        /// The directed case: the batch a rebuild retires holds the old
        /// array alone (absences: no `Arc` whose counts would order the
        /// reader's loads before the free), and a reader reads from it.
        #[test]
        fn a_rebuild_frees_the_array_a_reader_read_only_after_it() {
            check(|| {
                let rows = Arc::new(rows::<Word>(usize::MAX));
                let keys = shard_mates(&rows, 1, 7);
                for &key in &keys[..6] {
                    assert!(rows.insert(key, absence(1)).is_ok());
                }
                let reader = reader(&rows, keys[0]);
                // Seven claimed slots of eight: the shard's array is rebuilt.
                assert!(rows.insert(keys[6], absence(1)).is_ok());
                assert_eq!(rows.garbage.held(), 1, "the old array, retired");
                for _ in 0..3 {
                    rows.collect();
                }
                reader.join().unwrap();
            });
        }

        /// A replaced value, freed after the reader that may hold it, once.
        #[test]
        fn a_replace_frees_the_old_value_only_after_the_reader() {
            check(|| {
                let rows = Arc::new(rows::<Word>(usize::MAX));
                let drops = Arc::new(AtomicUsize::new(0));
                assert!(rows.insert(7, word(1, 100, &drops)).is_ok());
                let reader = reader(&rows, 7);
                assert!(rows.insert(7, word(2, 100, &drops)).is_ok());
                for _ in 0..3 {
                    rows.collect();
                }
                reader.join().unwrap();
                drop(Arc::into_inner(rows).expect("the reader is done"));
                assert_eq!(drops.load(Relaxed), 2);
            });
        }

        /// Writes retiring while another thread collects: what a writer
        /// retires waits for the epochs after its own retirement, not the
        /// collection's.
        #[test]
        fn values_retired_during_a_collection_wait_for_the_reader() {
            check(|| {
                let rows = Arc::new(rows::<Word>(usize::MAX));
                let drops = Arc::new(AtomicUsize::new(0));
                assert!(rows.insert(7, word(1, 100, &drops)).is_ok());
                let reader = reader(&rows, 7);
                let writer = {
                    let (rows, drops) = (Arc::clone(&rows), Arc::clone(&drops));
                    loom::thread::spawn(move || {
                        assert!(rows.insert(7, word(2, 100, &drops)).is_ok());
                    })
                };
                for _ in 0..3 {
                    rows.collect();
                }
                reader.join().unwrap();
                writer.join().unwrap();
                drop(Arc::into_inner(rows).expect("the threads are done"));
                assert_eq!(drops.load(Relaxed), 2);
            });
        }

        /// A sweep that empties a shard retires its last value and its
        /// array in one batch.
        #[test]
        fn a_sweep_that_empties_a_shard_frees_after_the_reader() {
            check(|| {
                let rows = Arc::new(rows::<Word>(usize::MAX));
                let drops = Arc::new(AtomicUsize::new(0));
                assert!(rows.insert(7, word(1, 10, &drops)).is_ok());
                let reader = reader(&rows, 7);
                assert_eq!(rows.sweep(10), 1);
                for _ in 0..2 {
                    rows.collect();
                }
                reader.join().unwrap();
                drop(Arc::into_inner(rows).expect("the reader is done"));
                assert_eq!(drops.load(Relaxed), 1);
            });
        }
    }
}
