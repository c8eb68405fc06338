//! How often each id was asked for lately: the admission test of a full
//! table that keeps the hot rows ([`Eviction::Hot`](crate::Eviction::Hot)).
//!
//! A count-min sketch (`TinyLFU`'s): four rows of 4-bit counters, each id
//! counted in one counter of each row, its estimate the least of the four
//! (collisions only ever inflate a counter). An addition raises only the
//! counters at that least value (the "conservative update"), which keeps
//! the estimates of ids that share counters apart. After a sample of
//! additions fifteen times the rows the sketch is sized for, every
//! counter is halved: old popularity fades, so a shifted workload is
//! admitted after a while.
//!
//! It is written only by its shard's writer, under the shard's lock: a miss
//! adds its id, and the clock hand (or probation, as a row leaves it) adds
//! each row it finds read since it last passed. Hits never touch it.

/// Counters per id in each row (12 bytes an id in all): fewer collisions
/// keep one-off ids (a scan) from passing for ids asked for twice (4 lose
/// a point of hit ratio on a scan mixed into a Zipf load, 8 gain 0.15).
const WIDTH_PER_ROW: usize = 6;
/// The rows the smallest sketch is sized for (1 KiB): a small table's
/// handful of ids must not share counters.
const MIN_ROWS: usize = 64;
/// Additions between two halvings, per id the sketch is sized for. Only
/// misses and the hand's finds are added (hits are not), so this is a
/// longer memory than `TinyLFU`'s ten accesses per row. Measured against
/// 10 and 20 (`benches/hit_ratio.rs`): a shorter memory follows a shifting
/// hot set sooner (+1.5 points at 10, -1 at 20), a longer one ranks a
/// steady Zipf load and a scan better (about -0.5 and +0.3 points).
const SAMPLE_PER_ROW: usize = 15;
/// The largest count (4 bits).
const MAX: u64 = 15;
/// Odd multipliers that draw four counter indexes from one hash.
const SEEDS: [u64; 4] = [
    0x9E37_79B9_7F4A_7C15,
    0xC2B2_AE3D_27D4_EB4F,
    0x1656_67B1_9E37_79F9,
    0xD6E8_FEB8_6659_FD93,
];

#[derive(Clone)]
pub(crate) struct Sketch {
    /// Four rows of `width` counters, sixteen to a word.
    words: Box<[u64]>,
    /// Counters in a row (a multiple of 16).
    width: usize,
    /// Additions since the last halving.
    added: usize,
    /// Additions that trigger a halving.
    sample: usize,
}

impl Sketch {
    /// A sketch for a shard that holds about `rows` rows (at least
    /// [`MIN_ROWS`]).
    pub(crate) fn new(rows: usize) -> Sketch {
        let rows = rows.max(MIN_ROWS);
        let width = (rows * WIDTH_PER_ROW).next_multiple_of(16);
        Sketch {
            words: vec![0; width / 16 * SEEDS.len()].into_boxed_slice(),
            width,
            added: 0,
            sample: rows * SAMPLE_PER_ROW,
        }
    }

    /// The bytes it holds: its counters, and itself.
    pub(crate) fn bytes(&self) -> usize {
        size_of::<Sketch>() + size_of_val(&*self.words)
    }

    /// The word and the shift of the counter of `hash` in row `row`.
    fn counter(&self, hash: u64, row: usize) -> (usize, u32) {
        // The high half of the product mixes every bit of the hash; its
        // top 32 bits pick a counter in the row.
        let mixed = hash.wrapping_mul(SEEDS[row]) >> 32;
        #[allow(clippy::cast_possible_truncation)] // `width` counters fit a usize
        let index = ((mixed * self.width as u64) >> 32) as usize;
        #[allow(clippy::cast_possible_truncation)] // below 64
        let shift = (index % 16 * 4) as u32;
        (row * self.width / 16 + index / 16, shift)
    }

    fn count(&self, (word, shift): (usize, u32)) -> u64 {
        self.words[word] >> shift & MAX
    }

    /// How often `hash` was added lately (at most 15).
    pub(crate) fn estimate(&self, hash: u64) -> u8 {
        let least = (0..SEEDS.len())
            .map(|row| self.count(self.counter(hash, row)))
            .min()
            .unwrap_or(0);
        #[allow(clippy::cast_possible_truncation)] // at most 15
        let least = least as u8;
        least
    }

    /// Counts one more ask for `hash`.
    pub(crate) fn add(&mut self, hash: u64) {
        let counters: [(usize, u32); 4] = std::array::from_fn(|row| self.counter(hash, row));
        let least = counters.iter().map(|&c| self.count(c)).min().unwrap_or(0);
        if least < MAX {
            for (word, shift) in counters {
                if self.words[word] >> shift & MAX == least {
                    self.words[word] += 1 << shift;
                }
            }
        }
        self.added += 1;
        if self.added >= self.sample {
            self.halve();
        }
    }

    /// Halves every counter (and the count of additions).
    fn halve(&mut self) {
        for word in &mut self.words {
            *word = *word >> 1 & 0x7777_7777_7777_7777;
        }
        self.added /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::Sketch;

    fn hash(n: u64) -> u64 {
        n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29) ^ n
    }

    #[test]
    #[cfg_attr(miri, ignore = "no unsafe code")]
    fn counts_saturate_at_fifteen_and_halve_after_the_sample() {
        let mut sketch = Sketch::new(100);
        assert_eq!(sketch.sample, 1_500);
        for n in 1..=20 {
            sketch.add(hash(1));
            assert_eq!(sketch.estimate(hash(1)), n.min(15));
        }
        assert_eq!(sketch.estimate(hash(2)), 0, "never added");
        // 15 × 100 additions in all halve every counter once.
        for n in 0..(1_500 - 20) {
            sketch.add(hash(1_000 + n));
        }
        assert_eq!(sketch.estimate(hash(1)), 7);
    }

    #[test]
    #[cfg_attr(miri, ignore = "no unsafe code")]
    fn frequent_ids_outrank_rare_ones() {
        let mut sketch = Sketch::new(1_000);
        for round in 0..8 {
            for n in 0..1_000 {
                if n % 10 == 0 || round == 0 {
                    sketch.add(hash(n));
                }
            }
        }
        let hot = (0..1_000).step_by(10).map(|n| sketch.estimate(hash(n)));
        assert!(hot.clone().all(|e| e >= 8), "each added 8 times");
        let cold = (0..1_000).filter(|n| n % 10 != 0);
        let inflated = cold.filter(|&n| sketch.estimate(hash(n)) > 1).count();
        assert!(
            inflated < 9,
            "{inflated} of 900 ids added once read as more"
        );
    }
}
