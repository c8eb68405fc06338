//! Readers against writers, in threads (under Miri too): whole rows are
//! read, and nothing is freed while a reader may hold it.

use super::*;

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

/// Readers (hits, and an operator's peeks and walks) against writers
/// that replace, remove, grow (rebuild), clear, sweep and collect, all at
/// once. Small enough under Miri
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
                        0 => drop(rows.remove_older(key, None, RemovalCause::Invalidated)),
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
                                weight: 0,
                            };
                            assert!(rows.insert(key, row, 0).is_ok(), "no size bound");
                        }
                    }
                    rows.collect_if_due();
                }
                finished.fetch_add(1, Relaxed);
            });
        }
        for reader in 0..2 {
            let (rows, finished) = (&rows, &finished);
            s.spawn(move || {
                while finished.load(Relaxed) < 2 {
                    if reader == 0 {
                        read_each_key(KEYS, |key| rows.get(&epoch::pin(), key, 0, |_| ()));
                    } else {
                        // The operator's reads: a peek of each key, and
                        // walks of every shard.
                        read_each_key(KEYS, |key| rows.peek(&epoch::pin(), key, 0));
                        walk(rows);
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

/// Reads each key of `0..keys` with `read`, checking each row it finds.
fn read_each_key(keys: u64, read: impl Fn(u64) -> Option<Live<Word>>) {
    for key in 0..keys {
        if let Some(live) = read(key) {
            let word = live.value.expect("rows with values only");
            word.assert_whole(key, live.version);
        }
    }
}

/// Walks every shard of `rows` as an operator does (the values, the
/// hottest, the figures), checking each row it finds.
fn walk(rows: &Rows<Word>) {
    let mut seen = std::collections::HashSet::new();
    for shard in 0.. {
        let Some(values) = rows.values_of_shard(shard, 0) else {
            break;
        };
        for (key, word, version) in values {
            word.assert_whole(key, version);
            assert!(seen.insert(key), "key {key} walked twice");
        }
    }
    let census = rows.census(0);
    assert!(census.live + census.dead <= 256, "{census:?}");
    assert!(rows.hottest(4, 0).len() <= 4);
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
                        weight: 0,
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
        weight: 0,
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
