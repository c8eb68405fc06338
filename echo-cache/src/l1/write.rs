//! The write side of L1: inserts, rebuilds, removals and sweeps, each
//! under its shard's lock, which readers never touch; what a write unlinks
//! is retired to the epochs, freed once no reader can hold it, and a row
//! it removes is queued for the table's listener, if it has one
//! ([`removal`](super::removal)), which the collections deliver.

use std::hash::BuildHasher;
use std::ptr;
use std::sync::Arc;

use super::evict::{self, Room};
use super::removal::RemovalCause;
use super::slot::Slot;
use super::{
    Array, REFRESHING, Row, Rows, SEQ_BITS, Shard, Tally, absent, capacity_for, idle_life,
    into_raw, is_row, mark_of, moved_hand, shard_of, share, tombstone,
};
use crate::entity::spec::Eviction;
use crate::sync::Ordering::{Relaxed, Release};
use crate::sync::{AtomicU64, MutexGuard};

/// What became of a row to insert.
pub(super) enum Insert<T> {
    Kept,
    Declined(Row<T>),
    /// See [`Room::Elsewhere`].
    Elsewhere(Row<T>, u8),
}

/// Why the row `slot` holds leaves when a new value of its id takes its
/// place at `now`: it was [`Replaced`](RemovalCause::Replaced), or it was
/// dead already ([`Expired`](RemovalCause::Expired): a read of a dead row
/// misses, and its fill replaces it).
fn replaced<T>(slot: &Slot<T>, now: u64) -> RemovalCause {
    if now >= slot.expires_at() {
        RemovalCause::Expired
    } else {
        RemovalCause::Replaced
    }
}

impl<T> Rows<T> {
    pub(super) fn reserve(&self) -> bool {
        let reserved = self.size.fetch_update(Relaxed, Relaxed, |size| {
            (size < self.max_size).then_some(size + 1)
        });
        if reserved.is_ok_and(|size| size + 1 == self.marking_from) {
            self.start_marking();
        }
        reserved.is_ok()
    }

    /// Drops the value a row held once no reader can hold it.
    pub(super) fn retire(&self, value: *mut T) {
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

    /// Retires the value of the row `slot` held (its key is still there),
    /// and queues its removal for the table's listener, if it has one and
    /// the row held a value (not a remembered absence). Under the shard's
    /// lock, after the slot was written: the queue holds a reference of
    /// its own, taken while the lock keeps the row's alive.
    pub(super) fn retire_row(&self, slot: &Slot<T>, value: *mut T, cause: RemovalCause) {
        if let Some(removals) = &self.removals
            && is_row(value)
            // SAFETY: a row's value, whose reference the slot held until
            // now and which is retired only below.
            && let Some(shared) = unsafe { share(value) }
        {
            removals.push(slot.key.load(Relaxed), shared, cause);
        }
        self.retire(value);
    }

    /// Delivers the removals queued for the table's listener, if it has
    /// one. Runs user code: never call it under a lock.
    fn deliver(&self) {
        if let Some(removals) = &self.removals {
            removals.deliver();
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
    pub(super) fn insert_hashed(
        &self,
        key: u64,
        hash: u64,
        row: Row<T>,
        now: u64,
        count: bool,
    ) -> Insert<T> {
        let shard = &self.shards[shard_of(hash)];
        let mut tally = shard.lock();
        let array = shard.array(&tally);
        let found = array
            .as_ref()
            .and_then(|array| match array.find(key, hash) {
                (i, true) => Some(i),
                (_, false) => None,
            });
        let unweighable = !self.fits(&tally, key, row.weight);
        if let (Some(array), Some(i)) = (&array, found) {
            let slot = &array.slots()[i];
            let old = slot.value.load(Relaxed);
            if is_row(old) && unweighable {
                // Not kept: nor is the row it would replace.
                let cause = replaced(slot, now);
                slot.write(tombstone(), 0, 0, 0, None);
                self.retire_row(slot, old, cause);
                tally.forget(key);
                tally.rows -= 1;
                self.size.fetch_sub(1, Relaxed);
                return Insert::Declined(row);
            }
            if is_row(old) {
                // A replacement: no room needed. The read bit stays; the
                // new row's refresh is not started.
                let mark = slot.mark() & !REFRESHING | self.refresh_mark(&row);
                let cause = replaced(slot, now);
                let (expires_at, deadline) = self.lifetime(array, i, row.expires_at, now);
                let weight = row.weight;
                slot.write(into_raw(row.value), row.version, expires_at, mark, deadline);
                self.retire_row(slot, old, cause);
                self.weigh(shard, &mut tally, key, weight, now);
                return Insert::Kept;
            }
        }
        if unweighable {
            return Insert::Declined(row);
        }
        match self.room(&mut tally, array.as_ref(), key, hash, now, count) {
            Room::Made => {}
            Room::Declined => return Insert::Declined(row),
            Room::Elsewhere(estimate) => return Insert::Elsewhere(row, estimate),
        }
        if let (Some(array), Some(i)) = (&array, found) {
            // The key's own tombstone.
            let (mark, weight) = (self.new_mark(&row), row.weight);
            let (expires_at, deadline) = self.lifetime(array, i, row.expires_at, now);
            array.slots()[i].write(into_raw(row.value), row.version, expires_at, mark, deadline);
            tally.rows += 1;
            self.weigh(shard, &mut tally, key, weight, now);
            return Insert::Kept;
        }
        let capacity = array.as_ref().map_or(0, Array::capacity);
        let array = if self.crowded(tally.claimed + 1, capacity) {
            let rows = tally.rows + 1;
            self.rebuild(shard, &mut tally, rows)
        } else {
            array.expect("a shard with capacity has an array")
        };
        let (i, _) = array.find(key, hash);
        let (mark, weight) = (self.new_mark(&row), row.weight);
        let (expires_at, deadline) = self.lifetime(&array, i, row.expires_at, now);
        let value = into_raw(row.value);
        array.slots()[i].claim(key, value, row.version, expires_at, mark, deadline);
        tally.claimed += 1;
        tally.rows += 1;
        self.weigh(shard, &mut tally, key, weight, now);
        Insert::Kept
    }

    /// The expiry a row written at `now` into slot `i` has in its stamp,
    /// and its hard deadline with its place among the array's deadlines: in
    /// a table with a time-to-idle, the nearer of `expires_at` (the row's
    /// TTL, its hard deadline) and `now` + [`idle_life`]; else `expires_at`.
    fn lifetime<'a>(
        &self,
        array: &'a Array<T>,
        i: usize,
        expires_at: u64,
        now: u64,
    ) -> (u64, Option<(&'a AtomicU64, u64)>) {
        match array.deadlines() {
            Some(deadlines) => (
                expires_at.min(now.saturating_add(idle_life(self.idle_ms))),
                Some((&deadlines[i], expires_at)),
            ),
            None => (expires_at, None),
        }
    }

    /// A new row's mark: [`evict::NEW`] in a table that evicts, with its
    /// [`refresh_mark`](Self::refresh_mark).
    fn new_mark(&self, row: &Row<T>) -> u8 {
        let new = if self.eviction == Eviction::Hot {
            evict::NEW
        } else {
            0
        };
        new | self.refresh_mark(row)
    }

    /// Slots for an array of `rows` rows: twice them, to grow into, but no
    /// more than a shard's share of `max_size` needs, and at least 8/5 of
    /// them (62.5 % full: room for the tombstones a full table's
    /// evictions leave, an eighth of the slots, before the next rebuild
    /// sweeps them).
    pub(super) fn slots_for(&self, rows: usize) -> usize {
        capacity_for((rows * 2).min(self.full_slots()).max(rows * 8 / 5 + 1))
    }

    /// The slots a shard's array needs once the table is full: 8/5 of its
    /// share.
    pub(super) fn full_slots(&self) -> usize {
        self.share.saturating_mul(8) / 5
    }

    /// Whether an array of `capacity` slots is to be rebuilt rather than
    /// have `claimed` of them claimed: past two thirds while it is smaller
    /// than a full table's, past three quarters from that size. Rebuilt
    /// into twice its rows, a table below its bound holds 1.5 to 2 slots a
    /// row (48 to 64 B): a service that sizes `max_size` at twice what it
    /// holds pays about what a full table pays a row (62.5 to 75 %
    /// claimed), and a hit probes about 1.5 slots in either
    /// (`benches/memory.rs`). Rebuilt at half claimed into four times its
    /// rows, as before, a table below its bound held 64 to 128 B a row:
    /// 104.9 B at a million rows under a bound of two million, against
    /// `quick_cache`'s 52.4, for 7 to 9 instructions a hit fewer.
    pub(super) fn crowded(&self, claimed: usize, capacity: usize) -> bool {
        // A slot count below `full_slots` is below the full array's, the
        // least slot count of at least it.
        if capacity < self.full_slots() {
            claimed * 3 > capacity * 2
        } else {
            claimed * 4 > capacity * 3
        }
    }

    /// Moves the rows of `shard` (marks and all) to a new array with room
    /// for `rows` rows.
    pub(super) fn rebuild(
        &self,
        shard: &Shard<T>,
        tally: &mut MutexGuard<'_, Tally>,
        rows: usize,
    ) -> Array<T> {
        let new = Array::new(self.slots_for(rows), self.idle_ms > 0);
        let old = shard.array(tally);
        // A shard's first array (or its first since it emptied): the hand
        // starts at its first slot.
        let hand = std::mem::take(&mut tally.hand);
        if let Some(old) = &old {
            let (deadlines, moved) = (old.deadlines(), new.deadlines());
            for (at, slot) in old.slots().iter().enumerate() {
                let value = slot.value.load(Relaxed);
                if is_row(value) {
                    let key = slot.key.load(Relaxed);
                    let (i, _) = new.find(key, self.hasher.hash_one(key));
                    let (version, stamp) = (slot.version.load(Relaxed), slot.stamp.load(Relaxed));
                    let deadline =
                        (deadlines.zip(moved)).map(|(old, new)| (&new[i], old[at].load(Relaxed)));
                    let (expires_at, mark) = (stamp >> SEQ_BITS, mark_of(stamp));
                    new.slots()[i].claim(key, value, version, expires_at, mark, deadline);
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
    pub(super) fn empty(&self, shard: &Shard<T>, tally: &mut MutexGuard<'_, Tally>) {
        if let Some(old) = shard.array(tally) {
            shard.array.store(ptr::null_mut(), Release);
            tally.claimed = 0;
            self.retire_array(&old);
        }
    }

    /// Frees an unpublished array (not the values it points to, which moved
    /// or were retired) once no reader can hold it.
    pub(super) fn retire_array(&self, old: &Array<T>) {
        unsafe fn free_array<T>(tagged: *mut ()) {
            // SAFETY: retired once, tagged by `Array::tagged`.
            unsafe { Array::<T>::from_tagged(tagged.cast()).map(|array| array.free()) };
        }
        // SAFETY: the caller unpublished it.
        unsafe { self.garbage.retire(old.tagged().cast(), free_array::<T>) };
    }

    /// Removes the row of `key` if it is older than `version` (any row
    /// when `version` is `None`), for `cause`; whether it did. Call
    /// [`collect_if_due`](Self::collect_if_due) after, outside any lock.
    pub(crate) fn remove_older(&self, key: u64, version: Option<u64>, cause: RemovalCause) -> bool {
        self.remove(key, version, |_| cause)
    }

    /// Removes the row of `key`, which a new value (a put) replaces at
    /// `now`: [`RemovalCause::Replaced`], or `Expired` if it was dead.
    /// Whether it did. Call [`collect_if_due`](Self::collect_if_due)
    /// after, outside any lock.
    pub(crate) fn remove_replaced(&self, key: u64, now: u64) -> bool {
        self.remove(key, None, |slot| replaced(slot, now))
    }

    /// [`remove_older`](Self::remove_older), the cause told by the row's
    /// slot before it is written.
    fn remove(
        &self,
        key: u64,
        version: Option<u64>,
        cause: impl FnOnce(&Slot<T>) -> RemovalCause,
    ) -> bool {
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
        let cause = cause(slot);
        slot.write(tombstone(), 0, 0, 0, None);
        self.retire_row(slot, value, cause);
        tally.forget(key);
        tally.rows -= 1;
        self.size.fetch_sub(1, Relaxed);
        true
    }

    /// Removes the rows whose expiry `dead` picks, for `cause`; how many.
    pub(super) fn remove_where(&self, dead: impl Fn(u64) -> bool, cause: RemovalCause) -> usize {
        let mut removed = 0;
        for shard in &self.shards {
            let mut tally = shard.lock();
            let Some(array) = shard.array(&tally) else {
                continue;
            };
            for slot in array.slots() {
                let value = slot.value.load(Relaxed);
                if is_row(value) && dead(slot.expires_at()) {
                    slot.write(tombstone(), 0, 0, 0, None);
                    self.retire_row(slot, value, cause);
                    tally.forget(slot.key.load(Relaxed));
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

    /// Removes every row dead at `now` for longer than the grace, and
    /// delivers their removals; how many. Runs user code: never call it
    /// under a lock.
    pub(crate) fn sweep(&self, now: u64) -> usize {
        let grace = self.grace;
        let swept = self.remove_where(
            |expires_at| now >= expires_at.saturating_add(grace),
            RemovalCause::Expired,
        );
        if swept > 0 {
            self.deliver();
        }
        self.garbage.collect();
        swept
    }

    /// Removes every row. Call [`collect_if_due`](Self::collect_if_due)
    /// after, outside any lock.
    pub(crate) fn clear(&self) {
        self.remove_where(|_| true, RemovalCause::Flushed);
    }

    /// Frees what writers removed, once no reader can hold it. Runs the
    /// values' destructors: never call it under a lock. Delivers no
    /// removal: each is delivered by the thread that removed it (see
    /// [`removal`](super::removal)), not a moment later by the
    /// maintenance thread's collection.
    pub(crate) fn collect(&self) {
        self.garbage.collect();
    }

    /// Delivers the removals queued for the table's listener, and
    /// [`collect`](Self::collect)s if writers retired enough since the
    /// last collection. Runs user code (the listener, the values'
    /// destructors): never call it under a lock.
    pub(crate) fn collect_if_due(&self) {
        self.deliver();
        self.garbage.collect_if_due();
    }

    /// When a table that evicts nothing ([`Eviction::None`]) is full,
    /// reclaims its dead rows (at most once every few milliseconds), and
    /// delivers their removals. Returns how many it reclaimed. Runs user
    /// code (the listener, the values' destructors): never call it under
    /// a lock.
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
        let reclaimed = self.remove_where(|expires_at| now >= expires_at, RemovalCause::Expired);
        if reclaimed > 0 {
            self.deliver();
        }
        self.garbage.collect();
        reclaimed
    }
}
