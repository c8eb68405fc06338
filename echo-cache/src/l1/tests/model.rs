//! Loom models of the table through its own code (see the doc of this
//! module's declaration in `tests/mod.rs`).

use super::full::shard_mates;
use super::{Eviction, Row, Rows, rows, table};
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
        weight: 0,
    }
}

/// A remembered absence: no `Arc`, nothing but the row.
fn absence(version: u64) -> Row<Word> {
    Row {
        value: None,
        version,
        expires_at: 100,
        refreshable: false,
        weight: 0,
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
        assert_eq!(super::full::mark(&rows, 7), READ, "marked read");
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
