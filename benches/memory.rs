//! Memory per entry of a full table, side by side: echo-cache's L1,
//! quick_cache and a `HashMap`, counted by the allocator.
//!
//! # What runs
//!
//! For 100,000 and 1,000,000 entries, each engine is bounded at that many
//! (the `HashMap` simply holds them), keyed by `u64` ids, each value a
//! 64-byte struct behind an `Arc`, hashed with foldhash. Each is measured
//! three times, afresh: *filled* with as many ids as its bound; *bound 2x*:
//! bounded at twice the entries it is filled with, as a service sizes a
//! bound above what it holds; and *churned*: filled, then offered as many
//! new ids again, each twice, so that it is full and evicting (echo-cache's admission sketch exists only once its
//! table has filled, and its evictions leave tombstones until a rebuild).
//! A counting global allocator gives the bytes each engine holds, less the
//! values' own allocations (an `Arc` of a 64-byte value: 80 bytes each,
//! the same in every engine), divided by the entries it holds.
//!
//! echo-cache's figure includes its slot arrays (32 bytes a slot, the
//! row's mark in it, sized for about 62.5 % full at `max_size`), the admission sketch
//! (12 bytes an entry), and the table's other state; arrays that rebuilds
//! retired are freed (the bench waits for the maintenance thread's sweeps
//! to collect them) before it counts.
//!
//! ```sh
//! cargo bench --bench memory
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::task::Poll;
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Id, near_cache};

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::{poll_once, publish, verdict};

/// The hasher echo-cache uses inside: the peers hash as it does.
type Hasher = foldhash::quality::RandomState;

/// The global allocator, counting the bytes allocated and not yet freed.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to `System` unchanged; only counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(size(layout), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(size(layout), Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(size(layout), Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(signed(new_size) - size(layout), Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn size(layout: Layout) -> isize {
    signed(layout.size())
}

fn signed(n: usize) -> isize {
    isize::try_from(n).expect("an allocation fits isize")
}

fn held() -> isize {
    HELD.load(Relaxed)
}

/// A 64-byte value.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Blob {
    /// Its bytes.
    pub words: [u64; 8],
}

fn blob(n: u64) -> Blob {
    Blob { words: [n; 8] }
}

/// What an `Arc<Blob>` allocates: its two counts and the value.
const VALUE_BYTES: isize = 16 + 64;

/// The value of a table bounded at 100,000 rows.
#[near_cache(kind = "MEA", ttl_ms = 3_600_000, max_size = 100_000, sweep_ms = 10)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Small(Blob);

/// The value of a table bounded at 1,000,000 rows.
#[near_cache(kind = "MEB", ttl_ms = 3_600_000, max_size = 1_000_000, sweep_ms = 10)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Large(Blob);

/// The value of a table bounded at 200,000 rows, filled with 100,000: a
/// service sizes its bound above what it holds.
#[near_cache(kind = "MEC", ttl_ms = 3_600_000, max_size = 200_000, sweep_ms = 10)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SmallRoomy(Blob);

/// The value of a table bounded at 2,000,000 rows, filled with 1,000,000.
#[near_cache(kind = "MED", ttl_ms = 3_600_000, max_size = 2_000_000, sweep_ms = 10)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct LargeRoomy(Blob);

/// Bytes held per entry beyond the values, and the entries held.
#[allow(clippy::cast_precision_loss)]
fn per_entry(bytes: isize, entries: usize) -> f64 {
    (bytes - VALUE_BYTES * signed(entries)) as f64 / entries as f64
}

/// The ids offered to a table of `n` entries: `n` of them, or (`churn`)
/// then `n` new ones, each twice (a full echo-cache table keeps an id asked
/// for twice in place of a cold one).
fn offers(n: usize, churn: bool) -> impl Iterator<Item = u64> {
    let churned = (n as u64..2 * n as u64).flat_map(|i| [i, i]);
    (0..n as u64).chain(churned.take(if churn { 2 * n } else { 0 }))
}

/// echo-cache, its table offered [`offers`] by `put`: bytes per entry,
/// entries held.
fn echo<T: Cached>(n: usize, churn: bool, wrap: fn(Blob) -> T) -> (f64, usize) {
    let before = held();
    // Filled by `put`: no table needs a loader.
    let cache = (Cache::builder().open::<T>().without_loader::<T>())
        .build()
        .expect("the cache builds");
    for i in offers(n, churn) {
        let put = poll_once(cache.put(Id::<T>::from_payload(key(i)), wrap(blob(i))));
        assert!(matches!(put, Poll::Ready(Ok(_))), "a put is ready at once");
    }
    let stats = cache.stats::<T>();
    let entries = usize::try_from(stats.size).expect("fits");
    assert_eq!(entries, n, "echo-cache holds every id");
    assert_eq!(stats.evictions > 0, churn, "echo-cache evicted if churned");
    // Arrays retired by rebuilds are freed by the maintenance thread's
    // sweeps (every 10 ms here): wait until the count stops falling.
    let mut last = held();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = held();
        if now >= last || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    let bytes = held() - before;
    drop(cache);
    // The maintenance thread may hold the tables a moment longer: let it
    // free them before the next engine counts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while held() > before + (1 << 20) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    (per_entry(bytes, entries), entries)
}

/// quick_cache bounded at `bound`, offered [`offers`] of `n`.
fn quick(n: usize, bound: usize, churn: bool) -> (f64, usize) {
    let before = held();
    let cache = quick_cache::sync::Cache::with(
        bound,
        bound as u64,
        quick_cache::UnitWeighter,
        Hasher::default(),
        quick_cache::sync::DefaultLifecycle::default(),
    );
    for i in offers(n, churn) {
        cache.insert(key(i), Arc::new(blob(i)));
    }
    let bytes = held() - before;
    let entries = cache.len();
    drop(cache);
    (per_entry(bytes, entries), entries)
}

fn hashmap(n: usize) -> (f64, usize) {
    let before = held();
    let mut map = HashMap::with_hasher(Hasher::default());
    for i in 0..n as u64 {
        map.insert(key(i), Arc::new(blob(i)));
    }
    let bytes = held() - before;
    let entries = map.len();
    drop(map);
    (per_entry(bytes, entries), entries)
}

/// A scattered 64-bit id for `n`.
fn key(n: u64) -> u64 {
    n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555_5555
}

fn main() {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memory per entry (bytes), values (80 B each) excluded\n\
         filled: as many ids as the bound; bound 2x: as many ids as half the bound;\n\
         churned: as many as the bound, then as many new ids, each twice (full, evicting)\n"
    );
    let _ = writeln!(
        out,
        "{:<18} {:>10} {:>11} {:>8} | {:>8}",
        "entries", "echo-cache", "quick_cache", "HashMap", "echo-qc"
    );
    let mut targets = Vec::new();
    for n in [100_000, 1_000_000] {
        let (map, _) = hashmap(n);
        let runs = [
            ("filled", 1, false),
            ("bound 2x", 2, false),
            ("churned", 1, true),
        ];
        for (how, bound, churn) in runs {
            let (quick, _) = quick(n, bound * n, churn);
            let (echo, _) = match (n, bound) {
                (100_000, 1) => echo::<Small>(n, churn, Small),
                (100_000, _) => echo::<SmallRoomy>(n, churn, SmallRoomy),
                (_, 1) => echo::<Large>(n, churn, Large),
                _ => echo::<LargeRoomy>(n, churn, LargeRoomy),
            };
            let _ = writeln!(
                out,
                "{:<18} {echo:>10.1} {quick:>11.1} {map:>8.1} | {:>+8.1}",
                format!("{n} {how}"),
                echo - quick
            );
            targets.push(format!(
                "{n} {how}: echo {echo:.1} <= quick_cache {quick:.1} + 16 {}",
                verdict(echo <= quick + 16.0)
            ));
        }
    }
    let _ = writeln!(out, "\ntarget (issues 11 and 27):");
    for line in targets {
        let _ = writeln!(out, "  {line}");
    }
    publish(&out, "echo-memory.txt");
}
