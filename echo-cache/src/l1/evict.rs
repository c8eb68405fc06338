//! Making room in a full table that keeps the hot rows
//! ([`Eviction::Hot`](crate::Eviction::Hot)): the clock hand, the victim,
//! the admission test and probation (see [A full table](super#a-full-table)).
//!
//! Everything here runs under the lock of the shard it looks into; the
//! victim's value is retired like any removed value, and freed by the
//! epoch outside every lock (and its removal queued for the table's
//! listener, if any, delivered outside every lock too).

use std::collections::VecDeque;
use std::hash::BuildHasher;

use super::removal::RemovalCause;
use super::slot::Slot;
use super::weights::Weights;
use super::{Array, MARKING, REFRESHING, Rows, SHARDS, Tally, is_row, tombstone, update_mark};
use crate::entity::spec::Eviction;
use crate::l1::sketch::Sketch;
use crate::sync::AtomicU64;
use crate::sync::Ordering::Relaxed;

/// Of the unmarked rows after the hand, how many the victim is chosen from
/// (in a table without a byte bound).
const SAMPLE: usize = 4;
/// How far past the hand's row the others are looked for.
const LOOK_AHEAD: usize = 32;

/// A row's mark when it was read since the clock hand last passed it. Any
/// other mark but [`NEW`] counts the hand's passes since it was last read:
/// 0 for none yet, then `1 + passes` (see [`idle`]).
pub(super) const READ: u8 = 1;
/// The most passes a mark counts.
const MOST_IDLE: u8 = 8;
/// A new row's mark in a table that evicts, until the hand first passes
/// it: spared once, as a read row is (but not counted in the sketch: it
/// was not read). Without it the clock's victim was often a new row (the
/// least asked-for of the few looked at) rather than a row of a hot set
/// that moved on, whose count had not yet decayed: measured with
/// `benches/hit_ratio.rs` (as [`PROBATION_TENTHS`]), the moving hot set
/// -2.1, -3.5, -2.0 points at 1k, 10k, 100k rows without, -1.7, -1.3,
/// -0.9 with; the other loads within 0.1 point.
pub(super) const NEW: u8 = MOST_IDLE + 2;
// A mark's count stays below its REFRESHING bit.
const _: () = assert!(MOST_IDLE + 1 < NEW && NEW < REFRESHING);
/// Passes of the hand unread that halve a row's rank. Measured with
/// `benches/hit_ratio.rs` (points of hit ratio against the better of moka
/// and `quick_cache`; zipf 0.8, zipf 0.99, scan + zipf, shifting, loop): no
/// decay +0.75, +0.47, -0.43, -4.30, +0.22; every pass -0.44, -0.05, -1.54,
/// +0.06, +0.22 (with the floor of 2); every 2 passes, with
/// [`DECAYED_FLOOR`] 3: -0.02, +0.13, -0.47, -2.36, +1.84.
const PASSES_PER_HALVING: u8 = 2;
/// How often an id must have been asked for to take a ranked row's place
/// ([`admits`]): a one-off whose counters collide (a scan) must not evict
/// a row that was hot.
const DECAYED_FLOOR: u8 = 3;
/// The most rows on probation, in tenths of a shard's share: all of them.
/// Measured with `benches/hit_ratio.rs` (issue 27's six families at 1k,
/// 10k and 100k rows, points against the best of moka, `quick_cache` and
/// ten libCacheSim algorithms): the former cap of 2 tenths (with no
/// probation below 64 rows a shard) left a recency-biased load -6.7, -1.8
/// and -0.5 points short and a hot set moving wholesale -2.1, -7.0 and
/// -10.0; the whole share +0.4, +0.4, -0.1 and -1.8, -3.6, -1.7, the
/// frequency loads as before (with [`GROWTH`] and [`SHRINK`] scaled to
/// the share). A tenth of the share each: recency -2.1, -1.0, -0.9;
/// half: moving -2.1, -4.5, -0.7 but loops -20 (fixed, not adapted).
/// Each row on it costs 8 bytes (its id, in the queue), only while the
/// probation is that long: the queue grows as it does, never past the
/// share (a frequency load keeps it near one row).
const PROBATION_TENTHS: usize = 10;
/// Eighths of a row probation grows by for each row that leaves it read,
/// in a shard whose share is [`REFERENCE_SHARE`] rows (in proportion to
/// the share elsewhere, at least one eighth): it grows while more new rows
/// prove hot than [`SHRINK`] offsets, as when the hot set moves or
/// recency rules, and shrinks to one row while nearly every new id is a
/// one-off (a scan, the tail of a steady load). Measured at 10k rows with
/// a probation of at most 2 tenths: 48 +0.13, +0.16, -0.40, +0.23, +1.10
/// (zipf 0.8, zipf 0.99, scan + zipf, shifting, loop; 16 or 32 left the
/// shifting load's probation short: -2.95 and -2.15 points there); 80
/// +0.11, +0.07, -0.41, +0.95, +1.10; 96 grows it on a steady Zipf load
/// too: -0.16, +0.06, -0.43, +0.89, +1.10. With the whole share and 64
/// eighths at every size, not in proportion: 1k rows lost 4.1, 2.4, 3.8
/// points on zipf 0.8, zipf 0.99 and scan + zipf (8 rows at once in a
/// shard of 63), 16 eighths left the moving load -10.8 and -13.5 at 10k
/// and 100k.
const GROWTH: usize = 64;
/// The share [`GROWTH`] was measured at: a table of 10k rows.
const REFERENCE_SHARE: usize = 625;
/// The least share of a shard that keeps rows on probation: its one row
/// at least is then a small part of the shard (a table of 100 rows, 7 a
/// shard, would give up a seventh of them to one-offs: a scan of new ids
/// would evict a row a shard). Was 64: a table of 1k rows (63 a shard)
/// had none, and lost 6.7 points to LRU on a recency-biased load; with
/// probation +0.5 there, the frequency loads within 0.1 point, scan +
/// zipf +0.4. Shares from 32 to 62 are not measured.
const PROBATION_SHARE: usize = 32;
/// Eighths of a row probation shrinks by for each row that leaves it
/// unread, in a shard whose share is [`REFERENCE_SHARE`] rows; by the
/// square root of the share's ratio to it elsewhere (at least one eighth).
/// Measured at 100k rows (share 6,250): one eighth (growth 640 times the
/// shrink) zipf 0.8 -0.78, zipf 0.99 -0.60, moving -1.05; ten (in
/// proportion, as the growth) -0.58, -0.58, -1.47; three (the square
/// root) -0.31, -0.55, -1.66.
const SHRINK: usize = 1;

/// The hand's passes over a row since it was last read.
fn idle(mark: u8) -> u8 {
    match mark {
        0 | READ | NEW => 0,
        passes => passes - 1,
    }
}

/// Sets the hand's count in the mark of a row (its slot's `stamp`) to
/// `to(count)`, keeping the mark's [`REFRESHING`] bit as it is at the
/// write ([`update_mark`]: a hit may set it meanwhile, starting the row's
/// refresh, which a lost bit would let the next hit start again), and
/// returns the count it replaced. Under the shard's lock: no write is
/// under way.
pub(super) fn recount(stamp: &AtomicU64, to: impl Fn(u8) -> u8) -> u8 {
    let replaced = update_mark(stamp, stamp.load(Relaxed), |mark| {
        to(mark & !REFRESHING) | mark & REFRESHING
    });
    replaced.expect("no write under the shard's lock") & !REFRESHING
}

/// A row's mark after one more pass of the hand without a read.
fn passed(mark: u8) -> u8 {
    match mark {
        0 | READ | NEW => 2,
        passes => (passes + 1).min(MOST_IDLE + 1),
    }
}

/// How often a row's id was asked for lately (`estimate`), halved for every
/// [`PASSES_PER_HALVING`] passes of the hand since it was last read: a row
/// hot once and read no more (a hot set that moved on) loses its rank at
/// the pace of evictions, not only at the sketch's halvings.
fn rank(estimate: u8, mark: u8) -> u8 {
    estimate
        .checked_shr((idle(mark) / PASSES_PER_HALVING).into())
        .unwrap_or(0)
}

/// How hot a live row is, as the policy ranks it ([`Rows::hottest`]):
/// its [`rank`] (the sketch's `estimate` of its id, decayed for the hand's
/// passes unread), plus one if it was read since the hand last passed,
/// which the hand will count when it next passes. At most 16.
pub(super) fn heat(estimate: u8, mark: u8) -> u8 {
    let mark = mark & !REFRESHING;
    rank(estimate, mark) + u8::from(mark == READ)
}

/// Whether an id asked for `estimate` times lately takes the place of
/// `victim` (ranked by [`rank`]): only ids asked for twice (a one-off,
/// say a scan, never evicts a ranked row), three times against a decayed
/// rank or where new ids go on probation (`probation`: every new id has
/// its chance there on its first ask, and a one-off whose counters
/// collide must not take a ranked place on its second), and only more
/// often than the victim plus one (two rows asked for alike do not trade
/// places). Asked of a new id asked for before while probation is at its
/// one row (or in a shard without probation), and of a row that leaves
/// probation unread.
///
/// That margin, measured with `benches/hit_ratio.rs` at 10k rows (zipf
/// 0.8, zipf 0.99, scan + zipf, shifting, loop; then: +0.07, +0.12,
/// -0.18, +0.40 to +0.73, +0.22 to +2.36): 0 gives -0.23 on scan + zipf;
/// 2 gives +0.39, +0.30, -0.11, -0.28, +1.65 (a moving hot set waits
/// longer); 2 against undecayed victims only, scan + zipf -0.12, shifting
/// +0.03, loop +0.35; 3, scan + zipf -0.40.
fn admits(estimate: u8, victim: &Victim, probation: bool) -> bool {
    let floor = if victim.decayed || probation {
        DECAYED_FLOOR
    } else {
        2
    };
    estimate >= floor && estimate > victim.estimate.saturating_add(1)
}

/// Whether `candidate` is to go before `victim`, of the rows the hand
/// looks at: one it passed twice unread before one read since it last
/// passed it; then one asked for less often or, in a table with a byte
/// bound, less often a byte (its estimate plus one, over its weight): a
/// large cold row yields before many small ones. A new hot set's rows are
/// read between passes while the old set's keep the counts they earned:
/// without the first rule the hand keeps the old set (a moving hot set at
/// 10k rows: +0.75 points; weighted rows at 8 MiB: +4.8).
fn goes_first<T>(
    candidate: &Victim,
    victim: &Victim,
    weights: Option<&Weights>,
    slots: &[Slot<T>],
) -> bool {
    if candidate.stale != victim.stale {
        return candidate.stale;
    }
    let Some(weights) = weights else {
        return candidate.estimate < victim.estimate;
    };
    let weight = |v: &Victim| weights.of(slots[v.index].key.load(Relaxed)) as u128;
    let heat = |v: &Victim| u128::from(v.estimate) + 1;
    heat(candidate) * weight(victim) < heat(victim) * weight(candidate)
}

/// A row the clock hand gives up.
struct Victim {
    index: usize,
    /// Dead rows go without the admission test, and are not counted as
    /// evictions.
    dead: bool,
    estimate: u8,
    /// Whether `estimate` was lowered for passes of the hand unread.
    decayed: bool,
    /// Whether the hand passed it twice or more since it was last read.
    stale: bool,
}

impl Victim {
    fn dead(index: usize) -> Victim {
        Victim::unranked(index, true)
    }

    /// A row given up whatever its rank: `dead`, or leaving probation
    /// unread.
    fn unranked(index: usize, dead: bool) -> Victim {
        Victim {
            index,
            dead,
            estimate: 0,
            decayed: false,
            stale: false,
        }
    }
}

/// A shard's new rows on probation (the admission window): new ids, kept
/// without the admission test, the oldest first, and how many it holds at
/// most.
pub(super) struct Probation {
    /// The ids of the rows on probation, the oldest first; some may have
    /// left the table since.
    ids: VecDeque<u64>,
    /// Its length in eighths of a row, beyond the one row it always has.
    eighths: usize,
}

impl Probation {
    /// The bytes it holds: its queue's ids, and itself.
    pub(super) fn bytes(&self) -> usize {
        size_of::<Probation>() + self.ids.capacity() * size_of::<u64>()
    }

    /// The rows it holds at most, `most` at most.
    fn len(&self, most: usize) -> usize {
        (1 + self.eighths / 8).min(most)
    }

    /// A row left it read: it grows by [`GROWTH`] for a `share` of
    /// [`REFERENCE_SHARE`] rows, in proportion elsewhere.
    fn grow(&mut self, most: usize, share: usize) {
        let growth = (GROWTH * share / REFERENCE_SHARE).max(1);
        self.eighths = (self.eighths + growth).min(most.saturating_sub(1) * 8);
    }

    /// A row left it unread: it shrinks by [`SHRINK`] for a `share` of
    /// [`REFERENCE_SHARE`] rows, by the square root of the ratio elsewhere.
    fn shrink(&mut self, share: usize) {
        let ratio = (share / REFERENCE_SHARE).max(1);
        self.eighths = self.eighths.saturating_sub(SHRINK * ratio.isqrt());
    }

    /// Whether it grew past its one row: new rows have proved hot lately,
    /// so an id asked for before goes on probation too, not to the
    /// admission test.
    fn grown(&self) -> bool {
        self.eighths >= 8
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
    /// Room for one new row, of `key`, in a shard whose lock the caller
    /// holds: a reservation, or in a full table that evicts, a place on
    /// probation for an id asked for once lately, else the place of a row
    /// of this shard that the new id outranks. `count`: count the new id
    /// in the shard's sketch first.
    pub(super) fn room(
        &self,
        tally: &mut Tally,
        array: Option<&Array<T>>,
        key: u64,
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
            // The table just filled: from now on, count its misses, and
            // have hits mark what they read.
            self.start_marking();
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
        let grown = tally.probation.as_ref().is_some_and(|p| p.grown());
        if self.probation_most() > 0 && (estimate < 2 || grown) {
            self.make_probation_room(array, tally, key, now);
            return Room::Made;
        }
        let victim = self.victim(array, tally, now, None);
        if !victim.dead && !admits(estimate, &victim, self.probation_most() > 0) {
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

    /// Has hits mark the rows they read, in every shard (see
    /// [`MARKING`]).
    pub(super) fn start_marking(&self) {
        for shard in &self.shards {
            if shard.watch_ms.load(Relaxed) != MARKING {
                shard.watch_ms.store(MARKING, Relaxed);
            }
        }
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
                let victim = self.victim(&array, &mut tally, now, None);
                if !victim.dead && !admits(estimate, &victim, self.probation_most() > 0) {
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
    /// or, of it and the next few unmarked rows, the first to go by
    /// [`goes_first`]: one long unread, then the least asked-for.
    /// Marked rows it passes are unmarked and counted in the sketch (each
    /// was read since the hand last passed). Never `spared`'s row: the
    /// shard must hold another.
    fn victim(&self, array: &Array<T>, tally: &mut Tally, now: u64, spared: Option<u64>) -> Victim {
        let slots = array.slots();
        let Tally {
            hand,
            sketch,
            weights,
            ..
        } = tally;
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
            if !is_row(slot.value.load(Relaxed)) || spared == Some(slot.key.load(Relaxed)) {
                continue;
            }
            if now >= slot.expires_at() {
                return Victim::dead(i);
            }
            let skips_read = steps > 0;
            let mark = recount(&slot.stamp, |mark| {
                if (mark == READ || mark == NEW) && skips_read {
                    0
                } else {
                    passed(mark)
                }
            });
            if mark == READ && skips_read {
                sketch.add(self.hasher.hash_one(slot.key.load(Relaxed)));
                continue;
            }
            if mark == NEW && skips_read {
                continue;
            }
            break (i, mark);
        };
        let (first, mark) = first;
        let estimate = |index: usize, mark: u8| {
            let raw = sketch.estimate(self.hasher.hash_one(slots[index].key.load(Relaxed)));
            let ranked = rank(raw, mark);
            Victim {
                index,
                dead: false,
                estimate: ranked,
                decayed: ranked < raw,
                stale: idle(mark) > 0,
            }
        };
        let mut victim = estimate(first, mark);
        // Weights differ by orders where rows are weighed: a large cold row
        // a few places on must not be missed for the small ones before it.
        let sample = if weights.is_some() {
            LOOK_AHEAD
        } else {
            SAMPLE
        };
        let (mut i, mut seen) = (first, 1);
        for _ in 0..LOOK_AHEAD {
            i = array.next(i);
            let slot = &slots[i];
            if seen == sample || i == first {
                break;
            }
            let mark = slot.mark() & !REFRESHING;
            if !is_row(slot.value.load(Relaxed))
                || mark == READ
                || mark == NEW
                || spared == Some(slot.key.load(Relaxed))
            {
                continue;
            }
            if now >= slot.expires_at() {
                return Victim::dead(i);
            }
            seen += 1;
            let candidate = estimate(i, mark);
            if goes_first(&candidate, &victim, weights.as_deref(), slots) {
                victim = candidate;
            }
        }
        victim
    }

    /// The most rows a shard keeps on probation (see [`PROBATION_TENTHS`]):
    /// none if its share is below [`PROBATION_SHARE`].
    fn probation_most(&self) -> usize {
        if self.share < PROBATION_SHARE {
            return 0;
        }
        self.share * PROBATION_TENTHS / 10
    }

    /// Puts `key`'s new row on probation (the shard's sketch made), making
    /// room for it: the oldest rows leave probation (as many as it is over
    /// its length). One read while on probation stays, a ranked row (and
    /// probation grows); the first that leaves unread gives up its place,
    /// unless it was asked for before and [`admits`] it against the
    /// clock's victim, which then goes (either way probation shrinks). If
    /// every row left read, the clock's victim gives up its place, whatever
    /// its rank.
    fn make_probation_room(&self, array: &Array<T>, tally: &mut Tally, key: u64, now: u64) {
        let slots = array.slots();
        let most = self.probation_most();
        // Out of the tally while rows are evicted; its queue at full
        // length, once, not rounded up.
        let mut probation = tally.probation.take().unwrap_or_else(|| {
            Box::new(Probation {
                ids: VecDeque::new(),
                eighths: 0,
            })
        });
        let mut made = false;
        while probation.ids.len() >= probation.len(most) {
            let Some(old) = probation.ids.pop_front() else {
                break;
            };
            let hash = self.hasher.hash_one(old);
            let (i, found) = array.find(old, hash);
            // Gone: evicted by the clock, removed, or expired and swept.
            if !found || !is_row(slots[i].value.load(Relaxed)) {
                continue;
            }
            let sketch = tally.sketch.as_mut().expect("a full shard has a sketch");
            // A read counts as the hand counts it, in the sketch.
            let read = recount(&slots[i].stamp, |mark| if mark == READ { 0 } else { mark }) == READ;
            if read {
                sketch.add(hash);
            }
            let estimate = sketch.estimate(hash);
            let dead = now >= slots[i].expires_at();
            if !dead && read {
                probation.grow(most, self.share);
                continue;
            }
            probation.shrink(self.share);
            if made {
                // Others left unread are rows like any: the clock's first
                // victims, at their rank.
                continue;
            }
            made = true;
            if !dead && estimate >= 2 {
                let victim = self.victim(array, tally, now, None);
                if victim.dead || admits(estimate, &victim, self.probation_most() > 0) {
                    self.evict(array, tally, &victim);
                    continue;
                }
            }
            self.evict(array, tally, &Victim::unranked(i, dead));
        }
        if !made {
            let victim = self.victim(array, tally, now, None);
            self.evict(array, tally, &victim);
        }
        if probation.ids.len() == probation.ids.capacity() {
            // Twice as long, as a `VecDeque` grows, but never longer than
            // probation can be.
            let more = probation.ids.len().min(most - probation.ids.len()).max(1);
            probation.ids.reserve_exact(more);
        }
        probation.ids.push_back(key);
        tally.probation = Some(probation);
    }

    /// Evicts rows of a shard over its share of `max_bytes` until it is
    /// within it, by the clock hand and [`goes_first`], sparing `kept` (the
    /// row just written) as long as it is asked for more than each victim
    /// ([`admits`], as a full table admits a new id): else `kept` goes
    /// instead, and the rows it would have pushed out stay.
    pub(super) fn shed(&self, array: &Array<T>, tally: &mut Tally, kept: u64, now: u64) {
        let over =
            |tally: &Tally| (tally.weights.as_ref()).is_some_and(|w| w.bytes() > self.byte_share);
        if !over(tally) {
            return;
        }
        let hash = self.hasher.hash_one(kept);
        let sketch = tally.sketch.get_or_insert_with(|| Sketch::new(self.share));
        let estimate = sketch.estimate(hash);
        while over(tally) && tally.rows > 1 {
            let mut victim = self.victim(array, tally, now, Some(kept));
            if !victim.dead && !admits(estimate, &victim, false) {
                let (i, found) = array.find(kept, hash);
                if found {
                    victim = Victim::unranked(i, false);
                }
            }
            self.evict(array, tally, &victim);
            self.size.fetch_sub(1, Relaxed);
        }
    }

    /// Removes a victim's row; the caller accounts for the place it frees.
    fn evict(&self, array: &Array<T>, tally: &mut Tally, victim: &Victim) {
        let slot = &array.slots()[victim.index];
        let value = slot.value.load(Relaxed);
        slot.write(tombstone(), 0, 0, 0, None);
        let cause = if victim.dead {
            RemovalCause::Expired
        } else {
            RemovalCause::Evicted
        };
        self.retire_row(slot, value, cause);
        tally.forget(slot.key.load(Relaxed));
        tally.rows -= 1;
        if !victim.dead {
            self.evictions.fetch_add(1, Relaxed);
        }
    }
}
