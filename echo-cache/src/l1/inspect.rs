//! What L1 shows an operator, off the hit path: one row read without a
//! trace ([`Rows::peek`]), a shard's live values copied out
//! ([`Rows::values_of_shard`]), the rows the eviction policy ranks
//! hottest ([`Rows::hottest`]), and the table's figures
//! ([`Rows::census`]).
//!
//! Each reads the slots as a hit does (pinned, the seqlock checked, no
//! lock), and none writes to a slot: no mark for the clock hand, no
//! refresh started, nothing counted. A walk pins the epoch one shard at a
//! time (a sixteenth of the table), so it never holds back the freeing of
//! removed values for longer than one shard's copy; it takes a shard's
//! lock only for what the lock guards (the sketch, copied out; the sizes
//! of the sketch and probation), never while it reads the slots.
//!
//! A walk is weakly consistent, as a concurrent map's iterator is: each
//! row it reports was alive at some moment of the walk; a row written or
//! removed during it may or may not be in it.

use std::alloc::Layout;
use std::hash::BuildHasher;
use std::sync::Arc;

use super::evict::heat;
use super::sketch::Sketch;
use super::slot::{MAX_EXPIRY, mark_of};
use super::{Array, Live, Rows, SEQ_BITS, Slot, absent, is_row, same_write, share};
use crate::l1::epoch::{self, Pin};
use crate::sync::Ordering::{Acquire, Relaxed};
use crate::sync::fence;

/// A table's figures as L1 counts them ([`Rows::census`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Rows alive, values and remembered absences.
    pub(crate) live: u64,
    /// Of them, remembered absences.
    pub(crate) absent: u64,
    /// Rows past their expiry, not yet swept (or kept for the grace of
    /// `stale_if_error_ms`).
    pub(crate) dead: u64,
    /// What L1 holds for the table: its slot arrays, its sketch and
    /// probation queues, and each live or dead value's `Arc` allocation
    /// (not what a value owns on the heap).
    pub(crate) bytes: u64,
    /// The weight of its rows, as its byte bound counts it (`max_bytes`
    /// only).
    pub(crate) weight: Option<u64>,
    /// The soonest expiry of a live row, on the table's clock.
    pub(crate) next_expiry: Option<u64>,
}

/// The row in `slot`, read as a hit reads it, if it is alive at `now`:
/// the stamp, the row's fields, the stamp again (a row caught mid-write
/// reads as none). The caller loaded the slot's value with `Acquire` and
/// found it claimed (not null), which orders the claim's writes, the key
/// included, before this read.
///
/// # Safety
///
/// The caller is pinned (`_pin`), and `slot` is in an array it loaded
/// under that pin.
unsafe fn live_row<T>(_pin: &Pin, slot: &Slot<T>, now: u64) -> Option<Live<T>> {
    let stamp = slot.stamp.load(Acquire);
    let value = slot.value.load(Relaxed);
    let version = slot.version.load(Relaxed);
    fence(Acquire);
    if !same_write(slot.stamp.load(Relaxed), stamp) {
        return None;
    }
    // A write under way and a tombstone show no expiry (0): neither passes.
    if stamp >> SEQ_BITS <= now {
        return None;
    }
    debug_assert!(stamp & 1 == 0 && is_row(value));
    Some(Live {
        // SAFETY: a row's value (its stamp has an expiry), kept allocated
        // by the pin even if a writer has since replaced it.
        value: unsafe { share(value) },
        version,
    })
}

/// The bytes of the allocation of an `Arc<T>`: its two counts and the
/// value, padded.
fn arc_bytes<T>() -> usize {
    let counts = Layout::new::<[usize; 2]>();
    counts
        .extend(Layout::new::<T>())
        .map_or(0, |(layout, _)| layout.pad_to_align().size())
}

/// The order of [`Rows::hottest`]: the hotter first, then by key.
fn hotter_first(a: &(u64, u8), b: &(u64, u8)) -> std::cmp::Ordering {
    b.1.cmp(&a.1).then(a.0.cmp(&b.0))
}

impl<T> Rows<T> {
    /// The array of shard `shard`, if it has one, loaded under `_pin`.
    fn pinned_array(&self, _pin: &Pin, shard: usize) -> Option<Array<T>> {
        // SAFETY: the pin keeps a published array allocated.
        unsafe { Array::from_tagged(self.shards[shard].array.load(Acquire)) }
    }

    /// The row of `key` if it is alive at `now`, read as
    /// [`get`](Self::get) reads it but leaving no trace: the row is not
    /// marked read for the clock hand, and no refresh is started.
    pub(crate) fn peek(&self, pin: &Pin, key: u64, now: u64) -> Option<Live<T>> {
        let (shard, hash) = self.locate(key);
        // SAFETY: the pin keeps a published array allocated.
        let array = unsafe { Array::from_tagged(shard.array.load(Acquire)) }?;
        let slots = array.slots();
        let mut i = array.start(hash);
        loop {
            let slot = &slots[i];
            if slot.value.load(Acquire).is_null() {
                return None;
            }
            if slot.key.load(Relaxed) == key {
                // SAFETY: pinned, and the slot is in an array loaded pinned.
                return unsafe { live_row(pin, slot, now) };
            }
            i = array.next(i);
        }
    }

    /// The key, value and version of every row of shard `shard` holding a
    /// value alive at `now` (remembered absences left out), copied out
    /// under a pin of the epoch, without the shard's lock; `None` past the
    /// last shard.
    pub(crate) fn values_of_shard(
        &self,
        shard: usize,
        now: u64,
    ) -> Option<Vec<(u64, Arc<T>, u64)>> {
        if shard >= self.shards.len() {
            return None;
        }
        let pin = epoch::pin();
        let Some(array) = self.pinned_array(&pin, shard) else {
            return Some(Vec::new());
        };
        let rows = array.slots().iter().filter_map(|slot| {
            if slot.value.load(Acquire).is_null() {
                return None;
            }
            let key = slot.key.load(Relaxed);
            // SAFETY: pinned, and the slot is in an array loaded pinned.
            let live = unsafe { live_row(&pin, slot, now) }?;
            Some((key, live.value?, live.version))
        });
        Some(rows.collect())
    }

    /// The `n` rows alive at `now` that the eviction policy ranks hottest,
    /// the hottest first (ties by key): each row's key and heat
    /// ([`heat`]), rows of heat 0 left out. The policy counts nothing
    /// until the table first fills (then its sketch is made), and marks
    /// nothing read until it is three quarters full: before, every row is
    /// of heat 0. Each shard's sketch is copied under its lock (12 bytes a
    /// row of its share), and its slots read outside it.
    pub(crate) fn hottest(&self, n: usize, now: u64) -> Vec<(u64, u8)> {
        let mut hot: Vec<(u64, u8)> = Vec::new();
        if n == 0 {
            return hot;
        }
        for (i, shard) in self.shards.iter().enumerate() {
            let sketch = shard.lock().sketch.clone();
            // Neither counts nor marks: every row of the shard is of heat 0.
            if sketch.is_none() && !self.marking() {
                continue;
            }
            let estimate = |key| {
                let hash = self.hasher.hash_one(key);
                sketch.as_ref().map_or(0, |sketch| sketch.estimate(hash))
            };
            self.heat_of_shard(i, now, estimate, &mut hot);
            if hot.len() > n {
                hot.sort_unstable_by(hotter_first);
                hot.truncate(n);
            }
        }
        hot.sort_unstable_by(hotter_first);
        hot.truncate(n);
        hot
    }

    /// Whether hits mark the rows they read (see `MARKING`).
    fn marking(&self) -> bool {
        self.shards[0].watch_ms.load(Relaxed) == super::MARKING
    }

    /// Adds to `hot` the key and heat of each row of shard `shard` alive at
    /// `now` whose heat is above 0, its sketch's estimate of a key being
    /// `estimate(key)`.
    fn heat_of_shard(
        &self,
        shard: usize,
        now: u64,
        estimate: impl Fn(u64) -> u8,
        hot: &mut Vec<(u64, u8)>,
    ) {
        let pin = epoch::pin();
        let Some(array) = self.pinned_array(&pin, shard) else {
            return;
        };
        for slot in array.slots() {
            if !is_row(slot.value.load(Acquire)) {
                continue;
            }
            let key = slot.key.load(Relaxed);
            let stamp = slot.stamp.load(Relaxed);
            if stamp >> SEQ_BITS <= now {
                continue;
            }
            let heat = heat(estimate(key), mark_of(stamp));
            if heat > 0 {
                hot.push((key, heat));
            }
        }
    }

    /// The table's figures at `now` ([`Census`]). Reads each shard's
    /// slots without its lock: rows written meanwhile may be miscounted
    /// (a row caught mid-write counts as dead).
    pub(crate) fn census(&self, now: u64) -> Census {
        let mut census = Census::default();
        let (mut values, mut bytes) = (0_usize, 0_usize);
        for (i, shard) in self.shards.iter().enumerate() {
            {
                let tally = shard.lock();
                bytes += tally.sketch.as_ref().map_or(0, Sketch::bytes);
                bytes += tally
                    .probation
                    .as_ref()
                    .map_or(0, |probation| probation.bytes());
                if let Some(weights) = &tally.weights {
                    bytes += weights.overhead();
                    let weight = census.weight.unwrap_or(0);
                    census.weight = Some(weight + weights.bytes() as u64);
                }
            }
            let pin = epoch::pin();
            let Some(array) = self.pinned_array(&pin, i) else {
                continue;
            };
            bytes += Array::<T>::layout(array.capacity(), array.deadlines().is_some()).size();
            for slot in array.slots() {
                let value = slot.value.load(Acquire);
                if !is_row(value) {
                    continue;
                }
                if value != absent() {
                    values += 1;
                }
                let expires = slot.expires_at();
                if expires <= now {
                    census.dead += 1;
                    continue;
                }
                census.live += 1;
                if value == absent() {
                    census.absent += 1;
                }
                if expires < MAX_EXPIRY {
                    census.next_expiry =
                        Some(census.next_expiry.map_or(expires, |e| e.min(expires)));
                }
            }
        }
        bytes = bytes.saturating_add(values.saturating_mul(arc_bytes::<T>()));
        census.bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        census
    }
}
