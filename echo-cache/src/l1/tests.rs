//! L1's own tests: rows through rebuilds, expiry, a full table, and
//! readers against writers under Miri and loom.

use super::*;
use crate::l1::array::{ARRAY_ALIGN, start, tag, untag};
use crate::l1::epoch;
use crate::l1::expiry::expiry;
use crate::l1::slot::MAX_EXPIRY;
use std::sync::atomic::AtomicBool;

/// A table that evicts nothing when full.
fn rows<T>(max_size: usize) -> Rows<T> {
    table(max_size, Eviction::None)
}

fn table<T>(max_size: usize, eviction: Eviction) -> Rows<T> {
    Rows::new(&parts(max_size, eviction).build())
}

fn parts(max_size: usize, eviction: Eviction) -> crate::cache::directory::SpecParts {
    crate::cache::directory::SpecParts {
        name: "rows",
        type_name: "Rows",
        kind: "ROW",
        ttl_ms: 1_000,
        jitter: None,
        max_size: Some(max_size),
        sweep_ms: None,
        absent_ttl_ms: None,
        load_timeout_ms: None,
        lost_grace_ms: None,
        stale_if_error_ms: None,
        refresh_ms: None,
        coherence: crate::entity::spec::Coherence::None,
        placement: crate::entity::spec::Placement::Table,
        eviction,
        fingerprint: 0,
    }
}

fn row(value: u64, version: u64, expires_at: u64) -> Row<u64> {
    Row {
        value: Some(Arc::new(value)),
        version,
        expires_at,
        refreshable: true,
    }
}

#[test]
fn a_failed_refresh_is_rearmed_only_on_its_own_row() {
    let spec = crate::cache::directory::SpecParts {
        refresh_ms: Some(200),
        ..parts(100, Eviction::None)
    }
    .build();
    let rows = Rows::new(&spec);
    // The version of the row whose refresh this read starts, if it does.
    let due = |rows: &Rows<u64>| {
        let mut started = None;
        let live = rows.get(&epoch::pin(), 7, 850, |version| started = Some(version));
        assert_eq!(live.expect("alive").version, 1);
        started.is_some_and(|version| version == 1)
    };
    assert!(rows.insert(7, row(7, 1, 1_000), 0).is_ok());
    assert!(due(&rows), "the first read of a due row starts its refresh");
    assert!(!due(&rows), "one refresh at a time");
    rows.rearm_refresh(7, 2);
    assert!(
        !due(&rows),
        "another version's failure leaves the row alone"
    );
    rows.rearm_refresh(7, 1);
    assert!(
        due(&rows),
        "after its own refresh failed, a read starts it again"
    );
}

/// (value, version) of the live row of `key` at `now`.
fn read(rows: &Rows<u64>, key: u64, now: u64) -> Option<(Option<u64>, u64)> {
    let live = rows.get(&epoch::pin(), key, now, |_| ())?;
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
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
    }
    assert_eq!(rows.len(), KEYS);
    for (i, key) in keys(KEYS as u64).enumerate() {
        assert_eq!(read(&rows, key, 0), Some((Some(key), 1)));
        if i % 2 == 0 {
            assert!(rows.insert(key, row(key ^ 1, 2, 100), 0).is_ok());
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
        assert!(rows.insert(key, row(7, 3, 100), 0).is_ok());
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
        assert!(rows.insert(key, row(key, 1, 10 + key % 2), 0).is_ok());
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
    assert!(rows.insert(5, row(5, 1, u64::MAX), 0).is_ok());
    assert_eq!(read(&rows, 5, MAX_EXPIRY - 1), Some((Some(5), 1)));
}

#[test]
fn a_remembered_absence_reads_as_a_live_row_without_a_value() {
    let rows = rows(usize::MAX);
    let absent = Row {
        value: None,
        version: 4,
        expires_at: 100,
        refreshable: false,
    };
    assert!(rows.insert(9, absent, 0).is_ok());
    assert_eq!(read(&rows, 9, 0), Some((None, 4)));
    assert_eq!(rows.len(), 1);
    assert!(rows.remove_older(9, None));
    assert_eq!(read(&rows, 9, 0), None);
}

#[test]
fn a_full_table_keeps_no_new_key_but_replaces_its_rows() {
    let rows = rows(10);
    for key in 0..10 {
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
    }
    assert!(rows.insert(10, row(10, 1, 100), 0).is_err());
    assert_eq!(read(&rows, 10, 0), None);
    assert!(rows.insert(3, row(33, 2, 100), 0).is_ok(), "a replacement");
    assert_eq!(read(&rows, 3, 0), Some((Some(33), 2)));
    assert!(rows.remove_older(4, None));
    assert!(rows.insert(10, row(10, 1, 100), 0).is_ok());
    assert!(rows.insert(4, row(4, 1, 100), 0).is_err(), "a tombstone");
    rows.clear();
    assert_eq!(rows.len(), 0);
    assert!((0..=10).all(|key| read(&rows, key, 0).is_none()));
    assert!(rows.insert(4, row(4, 1, 100), 0).is_ok());
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
            refreshable: true,
        };
        assert!(rows.insert(key, row, 0).is_ok());
    }
    rows.remove_older(1, None);
    assert!(rows.insert(2, row(3, 2, 100), 0).is_ok());
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
    let kept = rows
        .get(&epoch::pin(), 2, 0, |_| ())
        .and_then(|live| live.value);
    drop(rows);
    assert_eq!(kept.map(|v| (*v, Arc::strong_count(&v))), Some((3, 1)));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "no unsafe code; too slow at a size that measures a spread"
)]
fn ids_in_sequence_spread_over_every_shard() {
    // Counters, snowflakes (a millisecond apart, or one worker's sequence)
    // and round numbers: a full table evicts per shard, so a shard that
    // takes too many of them evicts its own rows while others have room.
    // Under every seed: a few fixed ones, and this run's random one.
    let ids = 1_600;
    let fair = ids / SHARDS;
    let seeds = [0, 1, 0x9E37_79B9_7F4A_7C15, u64::MAX];
    let hashers = seeds
        .map(Hasher::with_seed)
        .into_iter()
        .chain([random_hasher()]);
    for (h, hasher) in hashers.enumerate() {
        for base in [0, 1 << 50, u64::MAX / 3] {
            for stride in [1, 3, 7, 1_000, 4_096_000, 1 << 22, 1_000_000_000, 1 << 40] {
                let mut per_shard = [0; SHARDS];
                for i in 0..ids as u64 {
                    per_shard[shard_of(hasher.hash_one(base.wrapping_add(i * stride)))] += 1;
                }
                assert!(
                    per_shard
                        .iter()
                        .all(|&n| n > fair * 2 / 5 && n < fair * 8 / 5),
                    "hasher {h}, base {base}, stride {stride}: {per_shard:?}"
                );
            }
        }
    }
}

/// The mark of `key`'s row.
fn mark<T>(rows: &Rows<T>, key: u64) -> u8 {
    let (shard, hash) = rows.locate(key);
    let tally = shard.lock();
    let array = shard.array(&tally).expect("an array");
    let (i, found) = array.find(key, hash);
    assert!(found, "a row of {key}");
    array.slots()[i].mark()
}

/// `n` keys of the shard of `key`, `key` first.
fn shard_mates<T>(rows: &Rows<T>, key: u64, n: usize) -> Vec<u64> {
    let shard = rows.locate(key).0;
    (key..)
        .filter(|&k| ptr::eq(rows.locate(k).0, shard))
        .take(n)
        .collect()
}

#[test]
fn a_full_table_that_evicts_spares_read_rows_and_admits_ids_asked_for_twice() {
    // Eight rows of one shard: four read (marked), four not.
    let rows = table(8, Eviction::Hot);
    let keys = shard_mates(&rows, 1, 10);
    for &key in &keys[..8] {
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
    }
    for &key in &keys[..4] {
        assert!(read(&rows, key, 0).is_some());
    }
    // Asked for once: served, not kept (it could be a one-off).
    assert!(rows.insert(keys[8], row(8, 1, 100), 0).is_err());
    assert_eq!(read(&rows, keys[8], 0), None);
    // Asked for twice: it takes an unread row's place.
    assert!(rows.insert(keys[8], row(8, 1, 100), 0).is_ok());
    assert_eq!(read(&rows, keys[8], 0), Some((Some(8), 1)));
    assert_eq!((rows.len(), rows.evictions()), (8, 1));
    assert!(keys[..4].iter().all(|&key| read(&rows, key, 0).is_some()));
    let unread_left = keys[4..8].iter().filter(|&&k| read(&rows, k, 0).is_some());
    assert_eq!(unread_left.count(), 3);
    // A replacement needs no room, whatever the table holds.
    assert!(rows.insert(keys[0], row(0, 2, 100), 0).is_ok());
    assert_eq!(rows.evictions(), 1);
}

/// A full table of 1,024 rows (64 a shard, the least share with
/// probation); `n` keys of the shard of key 1 that are not in it.
fn full_table_with_probation(n: usize) -> (Rows<u64>, Vec<u64>) {
    let rows = table(1_024, Eviction::Hot);
    let mut filled = 0;
    for key in (1_000_000..).step_by(7) {
        if rows.is_full() {
            break;
        }
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
        filled += 1;
    }
    assert_eq!(filled, 1_024);
    let keys = shard_mates(&rows, 1, n);
    (rows, keys)
}

#[test]
fn a_new_id_goes_on_probation_and_stays_if_read_again() {
    let (rows, keys) = full_table_with_probation(3);
    // Asked for once, it is kept on probation (one row a shard at first),
    // in the place of the clock's victim.
    assert!(rows.insert(keys[0], row(0, 1, 100), 0).is_ok());
    assert_eq!(read(&rows, keys[0], 0), Some((Some(0), 1)));
    assert_eq!((rows.len(), rows.evictions()), (1_024, 1));
    // The next new id of the shard: the first leaves probation read, and
    // stays; the clock's victim makes room again.
    assert!(rows.insert(keys[1], row(1, 1, 100), 0).is_ok());
    assert_eq!(read(&rows, keys[0], 0), Some((Some(0), 1)));
    assert_eq!((rows.len(), rows.evictions()), (1_024, 2));
    // The probation grew (a row left it read): the third new id, unread
    // or not, finds room there without pushing the second out.
    assert!(rows.insert(keys[2], row(2, 1, 100), 0).is_ok());
    assert!(keys.iter().all(|&key| read(&rows, key, 0).is_some()));
    assert_eq!((rows.len(), rows.evictions()), (1_024, 3));
}

#[test]
fn a_new_id_that_leaves_probation_unread_gives_up_its_place() {
    let (rows, keys) = full_table_with_probation(3);
    assert!(rows.insert(keys[0], row(0, 1, 100), 0).is_ok());
    // Unread, the first new id leaves probation for the second.
    assert!(rows.insert(keys[1], row(1, 1, 100), 0).is_ok());
    assert_eq!(read(&rows, keys[0], 0), None);
    assert_eq!(read(&rows, keys[1], 0), Some((Some(1), 1)));
    assert_eq!((rows.len(), rows.evictions()), (1_024, 2));
    // Asked for again, the first id is no one-off: it competes with the
    // clock's victim (a row never counted in the sketch), and wins on its
    // third ask (its first had its chance on probation).
    assert!(rows.insert(keys[0], row(0, 2, 100), 0).is_err());
    assert!(rows.insert(keys[0], row(0, 2, 100), 0).is_ok());
    assert_eq!(read(&rows, keys[0], 0), Some((Some(0), 2)));
    assert_eq!(read(&rows, keys[1], 0), Some((Some(1), 1)));
}

#[test]
fn a_scan_through_probation_evicts_a_row_a_shard() {
    let (rows, _) = full_table_with_probation(0);
    let old: Vec<u64> = (1_000_000..).step_by(7).take(1_024).collect();
    // As many one-off ids as the table holds: each shard gives its clock's
    // victim to its first, then each takes the place of the one before.
    // A one-off passes for an id asked for twice only if its four counters
    // collide with others' (rare in a sketch sized for 64 rows a shard:
    // with the hasher's random seed, one of the 1,024 in about one run in
    // seven); it then meets the admission test and is served, not kept.
    let declined = (1 << 40..)
        .take(1_024)
        .filter(|&key| rows.insert(key, row(key, 1, 100), 0).is_err())
        .count();
    assert!(declined <= 3, "{declined} one-offs passed for asked-twice");
    let kept = old.iter().filter(|&&key| read(&rows, key, 0).is_some());
    assert!(
        kept.count() >= 1_024 - 16 - 4,
        "at most about a row a shard went"
    );
}

#[test]
fn hits_mark_their_rows_once_the_table_is_three_quarters_full() {
    let rows = table(8, Eviction::Hot);
    let keys = shard_mates(&rows, 1, 6);
    let mark = |key: u64| mark(&rows, key);
    for &key in &keys[..5] {
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
    }
    assert!(read(&rows, keys[0], 0).is_some());
    assert_eq!(mark(keys[0]), 0, "marked with 5 rows of 8");
    assert!(rows.insert(keys[5], row(keys[5], 1, 100), 0).is_ok());
    assert!(read(&rows, keys[0], 0).is_some());
    assert_eq!(mark(keys[0]), evict::READ, "not marked with 6 rows of 8");
}

#[test]
fn a_shard_emptied_and_filled_again_turns_its_hand_in_its_new_array() {
    let rows = table(16, Eviction::Hot);
    let keys = shard_mates(&rows, 1, 80);
    let shard = rows.locate(1).0;
    // Sixteen rows in one shard (an array of more than 16 slots); one-off
    // ids, each declined, turn the hand past slot 16.
    for &key in &keys[..16] {
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
    }
    let mut one_offs = keys[16..].iter();
    while shard.lock().hand < 16 {
        let &key = one_offs.next().expect("the hand turns");
        assert!(rows.insert(key, row(key, 1, 100), 0).is_err());
    }
    rows.clear();
    // Four rows in that shard (an array of 16 slots), twelve in others:
    // the table is full, and the shard's hand must turn in its new array.
    let others = (2..).filter(|&k| !ptr::eq(rows.locate(k).0, shard));
    for key in keys[70..74].iter().copied().chain(others.take(12)) {
        assert!(rows.insert(key, row(key, 1, 100), 0).is_ok());
    }
    assert!(rows.is_full());
    let new = keys[74];
    let asked = (1..=8).find(|_| rows.insert(new, row(new, 1, 100), 0).is_ok());
    assert!(asked.is_some(), "an id asked for again and again is kept");
    assert_eq!((rows.len(), rows.evictions()), (16, 1));
}

#[test]
fn a_dead_row_makes_room_without_the_admission_test() {
    let rows = table(4, Eviction::Hot);
    let keys = shard_mates(&rows, 1, 5);
    for &key in &keys[..4] {
        assert!(rows.insert(key, row(key, 1, 10), 0).is_ok());
    }
    // At 10 every row is dead: a new id asked for once is kept.
    assert!(rows.insert(keys[4], row(4, 1, 100), 10).is_ok());
    assert_eq!(read(&rows, keys[4], 10), Some((Some(4), 1)));
    assert_eq!((rows.len(), rows.evictions()), (4, 0));
}

#[test]
fn a_table_smaller_than_its_shards_evicts_across_them() {
    let rows = table(1, Eviction::Hot);
    let other = (2..1_000)
        .find(|&k| !ptr::eq(rows.locate(k).0, rows.locate(1).0))
        .expect("a key of another shard");
    assert!(rows.insert(1, row(1, 1, 100), 0).is_ok());
    assert!(rows.insert(other, row(2, 1, 100), 0).is_err());
    assert!(rows.insert(other, row(2, 1, 100), 0).is_ok());
    assert_eq!(read(&rows, 1, 0), None);
    assert_eq!(read(&rows, other, 0), Some((Some(2), 1)));
    assert_eq!((rows.len(), rows.evictions()), (1, 1));
}

#[test]
fn churn_keeps_the_size_bound_and_every_row_readable() {
    const KEYS: u64 = if cfg!(miri) { 300 } else { 20_000 };
    let rows = table(100, Eviction::Hot);
    for n in 0..KEYS {
        // Each key asked for once to three times; some read back.
        let key = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..=(n % 3) {
            let _ = rows.insert(key, row(key, n, 100), 0);
            assert!(rows.len() <= 100);
        }
        let _ = read(&rows, key, 0);
    }
    assert_eq!(rows.len(), 100);
    assert!(rows.evictions() > 0);
    let live: usize = rows
        .shards
        .iter()
        .map(|shard| {
            let tally = shard.lock();
            let array = shard.array(&tally);
            let slots = array.iter().flat_map(Array::slots);
            let alive = slots
                .filter(|slot| is_row(slot.value.load(Relaxed)))
                .count();
            assert_eq!(alive, tally.rows);
            alive
        })
        .sum();
    assert_eq!(live, 100);
}

#[test]
fn slot_counts_are_sixteen_steps_of_a_power_of_two() {
    for (asked, capacity) in [
        (0, 16),
        (16, 16),
        (17, 17),
        (32, 32),
        (33, 34),
        (100, 100),
        (10_417, 10_752),
    ] {
        assert_eq!(capacity_for(asked), capacity, "{asked}");
        assert_eq!(untag(tag(capacity)), capacity);
    }
    for asked in 1..5_000 {
        let capacity = capacity_for(asked);
        assert!(capacity >= asked && capacity * 16 <= asked.max(16) * 17 + 16);
        assert!(tag(capacity) < ARRAY_ALIGN);
        // The hash's low 31 bits, scaled: the least to slot 0, the most to
        // the last.
        for hash in [0, 1 << 31, 0x5555_5555, 0x7FFF_FFFF, u64::MAX] {
            let scaled = ((hash & 0x7FFF_FFFF) * capacity as u64) >> 31;
            assert_eq!(start(hash, tag(capacity)) as u64, scaled);
        }
        assert_eq!(start(0x7FFF_FFFF, tag(capacity)), capacity - 1);
    }
    assert!(tag(capacity_for(u32::MAX as usize / 2)) < ARRAY_ALIGN);
}

/// Each shard's claimed slots and slot count.
fn fill<T>(rows: &Rows<T>) -> Vec<(usize, usize)> {
    rows.shards
        .iter()
        .map(|shard| {
            let tally = shard.lock();
            let capacity = shard.array(&tally).map_or(0, |array| array.capacity());
            (tally.claimed, capacity)
        })
        .collect()
}

#[test]
fn arrays_are_at_most_half_claimed_below_the_bound_and_three_quarters_at_it() {
    const MAX: usize = if cfg!(miri) { 1_600 } else { 16_000 };
    let rows = rows::<u64>(MAX);
    for (n, key) in keys(MAX as u64).enumerate() {
        assert!(rows.insert(key, row(key, 1, 10), 0).is_ok());
        if n + 1 == MAX / 2 {
            for (claimed, capacity) in fill(&rows) {
                assert!(claimed * 2 <= capacity, "{claimed} of {capacity} half full");
            }
        }
    }
    // A shard's share is MAX / 16 rows, in 8/5 of them (a slot count).
    let full = MAX / 16 * 8 / 5;
    assert_eq!(capacity_for(full), full);
    for (claimed, capacity) in fill(&rows) {
        assert!(claimed * 4 <= capacity * 3, "{claimed} of {capacity}");
        if claimed <= MAX / 16 {
            assert_eq!(capacity, full, "a shard of {claimed} rows");
        }
    }
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
    // 16 shards of 16 slots hold 192 rows: more keys make them grow, and
    // regrow after each clear.
    const KEYS: u64 = 256;
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
                                refreshable: true,
                            };
                            assert!(rows.insert(key, row, 0).is_ok(), "no size bound");
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
                        if let Some(live) = rows.get(&epoch::pin(), key, 0, |_| ()) {
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

/// Readers against writers that fill a full table that evicts: each
/// new key asked for twice, so rows are evicted (and their slots
/// reclaimed by rebuilds) while readers read them. A reader may miss a
/// row, never read a torn or freed one; each value is freed once.
#[test]
fn readers_see_whole_rows_while_a_full_table_evicts() {
    const KEYS: u64 = 256;
    const WRITES: u64 = if cfg!(miri) { 200 } else { 100_000 };
    let rows = table::<Word>(32, Eviction::Hot);
    let (made, drops) = (AtomicUsize::new(0), Arc::new(AtomicUsize::new(0)));
    let finished = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for writer in 0..2_u64 {
            let (rows, made, drops, finished) = (&rows, &made, &drops, &finished);
            s.spawn(move || {
                for n in 0..WRITES {
                    let key = (n / 2).wrapping_mul(writer * 2 + 7) % KEYS;
                    made.fetch_add(1, Relaxed);
                    let row = Row {
                        value: Some(Arc::new(Word::new(key, n + 1, drops))),
                        version: n + 1,
                        expires_at: 100,
                        refreshable: true,
                    };
                    drop(rows.insert(key, row, 0));
                    assert!(rows.len() <= 32);
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
                        if let Some(live) = rows.get(&epoch::pin(), key, 0, |_| ()) {
                            let word = live.value.expect("rows with values only");
                            word.assert_whole(key, live.version);
                        }
                    }
                    std::thread::yield_now();
                }
            });
        }
    });
    assert!(rows.evictions() > 0, "rows were evicted while readers read");
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
        refreshable: false,
    };
    let rows = rows(usize::MAX);
    let shard = rows.locate(0).0;
    let keys: Vec<u64> = (0..)
        .filter(|&key| ptr::eq(rows.locate(key).0, shard))
        .take(13)
        .collect();
    for &key in &keys[..12] {
        assert!(rows.insert(key, absence(), 0).is_ok());
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
            assert!(rows.get(&pin, keys[0], 0, |_| ()).is_some());
            read.store(true, Relaxed);
            wait(unpin);
            drop(pin);
            // Alive until freed: a thread's exit returns its epoch
            // lease under the lock every advance takes.
            wait(done);
        });
        wait(read);
        // Thirteen claimed slots of sixteen: the shard's array is rebuilt.
        assert!(rows.insert(keys[12], absence(), 0).is_ok());
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

#[test]
fn a_bounded_life_is_a_deadline_jittered_down_only() {
    let draws = if cfg!(miri) { 200 } else { 10_000 };
    // Shorter than the TTL: within `within - within·jitter ..= within`.
    let short: Vec<u64> = (0..draws)
        .map(|_| expiry_within(1_000, 600_000, 0.1, 300_000))
        .collect();
    assert!(short.iter().all(|e| (271_000..=301_000).contains(e)));
    assert!(short.iter().any(|&e| e != short[0]));
    // Not shorter: the TTL's band, cut at the bound.
    let long: Vec<u64> = (0..draws)
        .map(|_| expiry_within(1_000, 600_000, 0.1, 620_000))
        .collect();
    assert!(long.iter().all(|e| (541_000..=621_000).contains(e)));
    assert!(
        long.contains(&621_000),
        "draws past the bound are cut to it"
    );
    assert_eq!(expiry_within(1_000, 600_000, 0.0, u64::MAX), 601_000);
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
    use super::{Eviction, Row, Rows, rows, shard_mates, table};
    use crate::l1::epoch;
    use crate::l1::evict::{READ, recount};
    use crate::l1::{Live, REFRESHING, mark_of, watched, with_mark};
    use crate::sync::AtomicU64;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// A row's stamp (expiry 100, two writes), its mark aside.
    const STAMP: u64 = 100 << super::SEQ_BITS | 4;

    /// A hit of a marking table on a row due for refresh, read as `read`:
    /// whether it starts the refresh.
    fn due_hit(stamp: &AtomicU64, read: u64) -> bool {
        let live = Live::<Word> {
            value: None,
            version: 1,
        };
        let mut started = false;
        watched(live, stamp, read, true, true, |_| started = true);
        started
    }

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
            refreshable: true,
        }
    }

    /// A remembered absence: no `Arc`, nothing but the row.
    fn absence(version: u64) -> Row<Word> {
        Row {
            value: None,
            version,
            expires_at: 100,
            refreshable: false,
        }
    }

    /// A reader of `key`, pinned across the read, checking what it
    /// reads. On a thread of its own: loom drops the main thread's
    /// thread-locals (its epoch lease) after the statics they go back
    /// to.
    fn reader(rows: &Arc<Rows<Word>>, key: u64) -> loom::thread::JoinHandle<()> {
        let rows = Arc::clone(rows);
        loom::thread::spawn(move || {
            let pin = epoch::pin();
            let Some(live) = rows.get(&pin, key, 0, |_| ()) else {
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
            let keys = shard_mates(&rows, 1, 13);
            for &key in &keys[..12] {
                assert!(rows.insert(key, absence(1), 0).is_ok());
            }
            let reader = reader(&rows, keys[0]);
            // Thirteen claimed slots of sixteen: the shard's array is
            // rebuilt.
            assert!(rows.insert(keys[12], absence(1), 0).is_ok());
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
            assert!(rows.insert(7, word(1, 100, &drops), 0).is_ok());
            let reader = reader(&rows, 7);
            assert!(rows.insert(7, word(2, 100, &drops), 0).is_ok());
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
            assert!(rows.insert(7, word(1, 100, &drops), 0).is_ok());
            let reader = reader(&rows, 7);
            let writer = {
                let (rows, drops) = (Arc::clone(&rows), Arc::clone(&drops));
                loom::thread::spawn(move || {
                    assert!(rows.insert(7, word(2, 100, &drops), 0).is_ok());
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

    /// An eviction retires the victim's value; it is freed after the
    /// reader that may hold it, once.
    #[test]
    fn an_eviction_frees_the_victim_only_after_the_reader() {
        check(|| {
            let rows = Arc::new(table::<Word>(1, Eviction::Hot));
            let drops = Arc::new(AtomicUsize::new(0));
            assert!(rows.insert(7, word(1, 100, &drops), 0).is_ok());
            let reader = reader(&rows, 7);
            // Asked for once, 8 is refused; asked for more often than 7
            // (read once more if the reader came first), it takes 7's place.
            assert!(rows.insert(8, absence(2), 0).is_err());
            let refused = (0..3)
                .take_while(|_| rows.insert(8, absence(2), 0).is_err())
                .count();
            assert!(refused < 3, "8 never took 7's place");
            assert_eq!(rows.evictions(), 1);
            for _ in 0..3 {
                rows.collect();
            }
            reader.join().unwrap();
            drop(Arc::into_inner(rows).expect("the reader is done"));
            assert_eq!(drops.load(Relaxed), 1);
        });
    }

    /// A sweep that empties a shard retires its last value and its
    /// array in one batch.
    #[test]
    fn a_sweep_that_empties_a_shard_frees_after_the_reader() {
        check(|| {
            let rows = Arc::new(rows::<Word>(usize::MAX));
            let drops = Arc::new(AtomicUsize::new(0));
            assert!(rows.insert(7, word(1, 10, &drops), 0).is_ok());
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

    /// A hit marking a row read while the row's failed refresh is re-armed
    /// (`rearm_refresh` clears the mark's REFRESHING bit): the re-arm is
    /// not undone. Either the hit saw it and starts the refresh, or the
    /// bit is left clear for the next hit. The mark is the hand's
    /// leftover: refresh started, read bit cleared by the hand.
    #[test]
    fn a_marking_hit_does_not_undo_a_failed_refreshs_rearm() {
        check(|| {
            let read = with_mark(STAMP, REFRESHING);
            let stamp = Arc::new(AtomicU64::new(read));
            let rearm = {
                let stamp = Arc::clone(&stamp);
                loom::thread::spawn(move || {
                    stamp.fetch_and(!with_mark(0, REFRESHING), Relaxed);
                })
            };
            let started = due_hit(&stamp, read);
            rearm.join().unwrap();
            let rearmed = mark_of(stamp.load(Relaxed)) & REFRESHING == 0;
            assert!(started || rearmed, "the re-arm was lost");
        });
    }

    /// Two hits marking the same row read (hits mark once the table is
    /// nearly full): the mark is 5 bits of the stamp each reads the row
    /// under, and one's mark written between the other's two loads of it
    /// does not make that read a miss.
    #[test]
    fn a_mark_written_during_a_read_does_not_spoil_it() {
        check(|| {
            let rows = Arc::new(table::<Word>(1, Eviction::Hot));
            let drops = Arc::new(AtomicUsize::new(0));
            assert!(rows.insert(7, word(1, 100, &drops), 0).is_ok());
            rows.start_marking();
            let hit = |rows: &Rows<Word>| {
                let pin = epoch::pin();
                let live = rows.get(&pin, 7, 0, |_| ());
                drop(pin);
                live.map(|live| live.version)
            };
            let other = {
                let rows = Arc::clone(&rows);
                loom::thread::spawn(move || hit(&rows))
            };
            assert_eq!(hit(&rows), Some(1), "a hit");
            assert_eq!(other.join().unwrap(), Some(1), "a hit");
            assert_eq!(super::mark(&rows, 7), READ, "marked read");
        });
    }

    /// The clock hand unmarking a row read (as it passes it, or as the
    /// row leaves probation) while a hit finds the row due and starts its
    /// refresh: the hit's REFRESHING bit stays, or a later hit would start
    /// a second refresh of the row.
    #[test]
    fn the_hand_keeps_the_refresh_a_hit_started() {
        check(|| {
            let read = with_mark(STAMP, READ);
            let stamp = Arc::new(AtomicU64::new(read));
            let hit = {
                let stamp = Arc::clone(&stamp);
                loom::thread::spawn(move || due_hit(&stamp, read))
            };
            recount(&stamp, |count| if count == READ { 0 } else { count });
            assert!(
                hit.join().unwrap(),
                "the row was not refreshing: the hit starts it"
            );
            assert_eq!(
                mark_of(stamp.load(Relaxed)) & REFRESHING,
                REFRESHING,
                "the refresh was lost"
            );
        });
    }
}

/// With a grace (`stale_if_error_ms`), a dead row is no hit but stays for
/// the grace, readable as stale; the sweeper takes it after, an
/// invalidation at once.
#[test]
fn a_dead_row_stays_for_the_grace_and_no_longer() {
    let spec = crate::cache::directory::SpecParts {
        name: "rows",
        type_name: "Rows",
        kind: "ROW",
        ttl_ms: 1_000,
        jitter: None,
        max_size: Some(100),
        sweep_ms: None,
        absent_ttl_ms: None,
        load_timeout_ms: None,
        lost_grace_ms: None,
        stale_if_error_ms: Some(500),
        refresh_ms: None,
        coherence: crate::entity::spec::Coherence::None,
        placement: crate::entity::spec::Placement::Table,
        eviction: Eviction::Hot,
        fingerprint: 0,
    }
    .build();
    let rows = Rows::<u64>::new(&spec);
    let stale = |key, now| rows.stale(key, now).map(|s| (*s.value.unwrap(), s.version));
    for key in [1, 2] {
        assert!(rows.insert(key, row(key * 10, key, 100), 0).is_ok());
    }
    assert_eq!(stale(1, 99), None, "alive: not stale");
    assert_eq!(read(&rows, 1, 100), None, "dead: no hit");
    assert_eq!(
        (stale(1, 100), stale(1, 599)),
        (Some((10, 1)), Some((10, 1)))
    );
    assert_eq!(stale(1, 600), None, "the grace is over");

    assert_eq!(rows.sweep(599), 0, "kept for the grace");
    assert!(
        rows.remove_older(2, None),
        "an invalidation takes a dead row"
    );
    assert_eq!(stale(2, 100), None);
    assert_eq!(rows.sweep(600), 1);
    assert_eq!((rows.len(), stale(1, 100)), (0, None));
}
