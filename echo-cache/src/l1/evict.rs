//! Making room in a full table that keeps the hot rows
//! ([`Eviction::Hot`](crate::Eviction::Hot)): the clock hand, the victim
//! and the admission test (see [A full table](super#a-full-table)).
//!
//! Everything here runs under the lock of the shard it looks into; the
//! victim's value is retired like any removed value, and freed by the
//! epoch outside every lock.

use std::hash::BuildHasher;

use super::{Array, Rows, SHARDS, Slot, Tally, is_row, tombstone};
use crate::sketch::Sketch;
use crate::spec::Eviction;
use crate::sync::Ordering::Relaxed;

/// Of the unmarked rows after the hand, how many the victim is chosen from.
const SAMPLE: usize = 4;
/// How far past the hand's row the others are looked for.
const LOOK_AHEAD: usize = 32;

/// Whether a new id asked for `estimate` times lately takes the place of a
/// row asked for `victim` times: only twice asked-for ids (a one-off, say a
/// scan, never evicts), and only more often than the victim plus one (two
/// rows asked for alike do not trade places).
fn admits(estimate: u8, victim: u8) -> bool {
    estimate >= 2 && estimate > victim.saturating_add(1)
}

/// A row the clock hand gives up.
struct Victim {
    index: usize,
    /// Dead rows go without the admission test, and are not counted as
    /// evictions.
    dead: bool,
    estimate: u8,
}

impl Victim {
    fn dead(index: usize) -> Victim {
        Victim {
            index,
            dead: true,
            estimate: 0,
        }
    }
}

/// How a shard made room for a new row.
pub(super) enum Room {
    /// A reservation, or a row evicted for it.
    Made,
    /// None: the table is full, and evicts nothing or found no row the new
    /// one outranks.
    Declined,
    /// None in this shard, which holds less than its share of the rows
    /// (none at all, or none the new id outranks); the new id's estimate.
    Elsewhere(u8),
}

impl<T> Rows<T> {
    /// Room for one new row in a shard whose lock the caller holds: a
    /// reservation, or in a full table that evicts, the place of a row of
    /// this shard that the new id outranks. `count`: count the new id in
    /// the shard's sketch first.
    pub(super) fn room(
        &self,
        tally: &mut Tally,
        array: Option<&Array<T>>,
        hash: u64,
        now: u64,
        count: bool,
    ) -> Room {
        if count && let Some(sketch) = &mut tally.sketch {
            sketch.add(hash);
        }
        if self.reserve() {
            return Room::Made;
        }
        if self.eviction == Eviction::None {
            return Room::Declined;
        }
        let sketch = tally.sketch.get_or_insert_with(|| {
            // The table just filled: from now on, count its misses.
            let mut sketch = Sketch::new(self.share);
            if count {
                sketch.add(hash);
            }
            sketch
        });
        let estimate = sketch.estimate(hash);
        let Some(array) = array.filter(|_| tally.rows > 0) else {
            return Room::Elsewhere(estimate);
        };
        let victim = self.victim(array, tally, now);
        if !victim.dead && !admits(estimate, victim.estimate) {
            // A shard short of its share (hashing spread a small table's
            // rows unevenly) may hold only hot rows while others hold cold
            // ones: look there too.
            return if tally.rows < self.share {
                Room::Elsewhere(estimate)
            } else {
                Room::Declined
            };
        }
        // The new row takes the victim's place in the count.
        self.evict(array, tally, &victim);
        Room::Made
    }

    /// Evicts a row of another shard than `from` if the new id's
    /// `estimate` outranks it, and frees its place in the count; whether it
    /// did. The shard is the first after `from` holding at least its share
    /// of the rows (one that hashing favoured), else the first with rows.
    pub(super) fn evict_elsewhere(&self, from: usize, estimate: u8, now: u64) -> bool {
        for at_least in [self.share, 1] {
            for shard in (1..SHARDS).map(|d| &self.shards[(from + d) % SHARDS]) {
                let mut tally = shard.lock();
                let Some(array) = shard.array(&tally).filter(|_| tally.rows >= at_least) else {
                    continue;
                };
                if tally.sketch.is_none() {
                    tally.sketch = Some(Sketch::new(self.share));
                }
                let victim = self.victim(&array, &mut tally, now);
                if !victim.dead && !admits(estimate, victim.estimate) {
                    return false;
                }
                self.evict(&array, &mut tally, &victim);
                self.size.fetch_sub(1, Relaxed);
                return true;
            }
        }
        false
    }

    /// The row a shard's clock hand gives up (the shard has rows and a
    /// sketch): the first dead row it meets, else the first unmarked one
    /// or, of it and the next few unmarked rows, the least asked-for.
    /// Marked rows it passes are unmarked and counted in the sketch (each
    /// was read since the hand last passed).
    fn victim(&self, array: &Array<T>, tally: &mut Tally, now: u64) -> Victim {
        let (slots, marks) = (array.slots(), array.marks());
        let Tally { hand, sketch, .. } = tally;
        let sketch = sketch
            .as_mut()
            .expect("a full shard that evicts has a sketch");
        // Two turns unmark every row; past three, readers marking rows
        // again as fast as the hand unmarks them cannot hold it: any row.
        let mut steps = 3 * array.capacity();
        let first = loop {
            let i = *hand;
            *hand = array.next(i);
            steps = steps.saturating_sub(1);
            let slot = &slots[i];
            if !is_row(slot.value.load(Relaxed)) {
                continue;
            }
            if now >= slot.expires_at() {
                return Victim::dead(i);
            }
            if marks[i].load(Relaxed) != 0 && steps > 0 {
                marks[i].store(0, Relaxed);
                sketch.add(self.hasher.hash_one(slot.key.load(Relaxed)));
                continue;
            }
            break i;
        };
        let estimate =
            |slot: &Slot<T>| sketch.estimate(self.hasher.hash_one(slot.key.load(Relaxed)));
        let mut victim = Victim {
            index: first,
            dead: false,
            estimate: estimate(&slots[first]),
        };
        let (mut i, mut seen) = (first, 1);
        for _ in 0..LOOK_AHEAD {
            i = array.next(i);
            let slot = &slots[i];
            if seen == SAMPLE || i == first {
                break;
            }
            if !is_row(slot.value.load(Relaxed)) || marks[i].load(Relaxed) != 0 {
                continue;
            }
            if now >= slot.expires_at() {
                return Victim::dead(i);
            }
            seen += 1;
            let candidate = estimate(slot);
            if candidate < victim.estimate {
                victim = Victim {
                    index: i,
                    dead: false,
                    estimate: candidate,
                };
            }
        }
        victim
    }

    /// Removes a victim's row; the caller accounts for the place it frees.
    fn evict(&self, array: &Array<T>, tally: &mut Tally, victim: &Victim) {
        let slot = &array.slots()[victim.index];
        let value = slot.value.load(Relaxed);
        slot.write(tombstone(), 0, 0);
        self.retire(value);
        tally.rows -= 1;
        if !victim.dead {
            self.evictions.fetch_add(1, Relaxed);
        }
    }
}
