//! Hit ratios of a full table, side by side: echo-cache (`eviction =
//! "hot"`: a clock with TinyLFU admission, new ids on an adaptive
//! probation), moka (TinyLFU admission, LRU
//! eviction) and quick_cache (S3-FIFO-like: a small and a main clock and a
//! ghost list), at the same capacity on the same traces.
//!
//! # What runs
//!
//! Each engine holds at most [`CAPACITY`] entries and sees every trace
//! afresh: a read of each key in turn; a miss inserts the key (echo-cache:
//! the fetch's loader, counted; the peers: `get`, then `insert`). The hit
//! ratio is hits over reads, the warm-up included. Nothing expires:
//! echo-cache runs on a manual clock with hour-long rows.
//!
//! The traces are drawn from fixed seeds, so every run reads the same keys
//! (the engines' own hashers are seeded at random, so their figures may
//! move in the second decimal). Keys are scattered 64-bit ids.
//!
//! - `zipf 0.8`, `zipf 0.99`: keys drawn by Zipf's law over 10 × the
//!   capacity.
//! - `scan + zipf`: 5 × capacity Zipf(0.99) reads, then a scan of 2 ×
//!   capacity keys never read again, over and over.
//! - `shifting`: Zipf(0.99) over 10 × capacity keys, a whole new set of
//!   keys every 10 × capacity reads.
//! - `loop`: the same 1.1 × capacity keys read in the same order, over and
//!   over (an LRU hits nothing).
//!
//! Measures ratios, not time: machine load does not change the figures.
//!
//! ```sh
//! cargo bench --bench hit_ratio
//! ```

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;

use echo_cache::{Cache, Clock, Id, Source, near_cache};

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::draw::{Rng, Zipf};
use support::{benchmarking, publish};

/// The hasher echo-cache uses inside: the peers hash as it does.
type Hasher = foldhash::quality::RandomState;

/// Entries every engine holds at most.
const CAPACITY: usize = 10_000;
/// Reads per trace (a tenth when `cargo test --benches` runs it once).
const READS: usize = 2_000_000;

/// The cached entity, its table bounded at [`CAPACITY`].
#[near_cache(kind = "HIT", ttl_ms = 3_600_000, max_size = 10_000)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Its key, so a value is not empty.
    pub key: u64,
}

/// A scattered 64-bit key for `n`.
fn key(n: u64) -> u64 {
    Rng(n).next()
}

/// The traces, `reads` keys each.
fn traces(reads: usize) -> Vec<(&'static str, Vec<u64>)> {
    let universe = 10 * CAPACITY;
    let mut traces = Vec::new();
    for (name, s, seed) in [("zipf 0.8", 0.8, 1), ("zipf 0.99", 0.99, 2)] {
        let (zipf, mut rng) = (Zipf::new(universe, s), Rng(seed));
        traces.push((
            name,
            (0..reads)
                .map(|_| key(zipf.rank(&mut rng) as u64))
                .collect(),
        ));
    }
    let (zipf, mut rng) = (Zipf::new(universe, 0.99), Rng(3));
    let mut scan = Vec::with_capacity(reads);
    let mut scanned = 1_u64 << 40;
    while scan.len() < reads {
        scan.extend((0..5 * CAPACITY).map(|_| key(zipf.rank(&mut rng) as u64)));
        scan.extend((0..2 * CAPACITY).map(|_| {
            scanned += 1;
            key(scanned)
        }));
    }
    scan.truncate(reads);
    traces.push(("scan + zipf", scan));
    let mut rng = Rng(4);
    let phase = 10 * CAPACITY;
    let shifting = (0..reads)
        .map(|i| key(((i / phase) as u64) << 32 | zipf.rank(&mut rng) as u64))
        .collect();
    traces.push(("shifting", shifting));
    let looped = CAPACITY * 11 / 10;
    let mut order: Vec<u64> = (0..looped as u64).map(|n| key(n ^ 0xABCD)).collect();
    let mut rng = Rng(5);
    for i in (1..looped).rev() {
        order.swap(i, rng.below(i + 1));
    }
    traces.push(("loop", (0..reads).map(|i| order[i % looped]).collect()));
    traces
}

/// Reads `trace` through a fresh echo-cache; its hit ratio, evictions and
/// values served without being kept.
fn echo(trace: &[u64]) -> (f64, u64, u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let cache = Cache::builder()
            .clock(Clock::manual())
            .loader(|id: Id<Entry>| async move {
                Ok::<_, Infallible>(Some(Entry { key: id.payload() }))
            })
            .build()
            .expect("the cache builds");
        let mut hits = 0_usize;
        for &key in trace {
            let fetched = cache
                .fetch(Id::<Entry>::from_payload(key))
                .await
                .expect("the loader finds every key");
            hits += usize::from(fetched.source() == Source::Hit);
        }
        let stats = cache.stats::<Entry>();
        assert!(
            stats.size <= CAPACITY as u64,
            "echo-cache kept {}",
            stats.size
        );
        assert_eq!(stats.hits + stats.misses, trace.len() as u64);
        (ratio(hits, trace.len()), stats.evictions, stats.full_skips)
    })
}

fn moka(trace: &[u64]) -> f64 {
    let cache = moka::sync::Cache::builder()
        .max_capacity(CAPACITY as u64)
        .build_with_hasher(Hasher::default());
    let mut hits = 0;
    for &key in trace {
        if cache.get(&key).is_some() {
            hits += 1;
        } else {
            cache.insert(key, Arc::new(Entry { key }));
        }
    }
    ratio(hits, trace.len())
}

fn quick(trace: &[u64]) -> f64 {
    let cache = quick_cache::sync::Cache::with(
        CAPACITY,
        CAPACITY as u64,
        quick_cache::UnitWeighter,
        Hasher::default(),
        quick_cache::sync::DefaultLifecycle::default(),
    );
    let mut hits = 0;
    for &key in trace {
        if cache.get(&key).is_some() {
            hits += 1;
        } else {
            cache.insert(key, Arc::new(Entry { key }));
        }
    }
    ratio(hits, trace.len())
}

/// `hits / reads`, in percent.
#[allow(clippy::cast_precision_loss)]
fn ratio(hits: usize, reads: usize) -> f64 {
    100.0 * hits as f64 / reads as f64
}

fn main() {
    let reads = if benchmarking() { READS } else { READS / 10 };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "hit ratio (%) at capacity {CAPACITY}, {reads} reads per trace, misses inserted\n"
    );
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>8} {:>11} | {:>8} {:>10} {:>10}",
        "trace", "echo-cache", "moka", "quick_cache", "echo-best", "evictions", "full_skips"
    );
    let mut met = Vec::new();
    for (name, trace) in traces(reads) {
        let (echo, evictions, skips) = echo(&trace);
        let (moka, quick) = (moka(&trace), quick(&trace));
        let best = moka.max(quick);
        let _ = writeln!(
            out,
            "{name:<12} {echo:>10.2} {moka:>8.2} {quick:>11.2} | {:>+8.2} {evictions:>10} {skips:>10}",
            echo - best
        );
        met.push(format!(
            "{name}: echo {echo:.2} >= best peer {best:.2} {}",
            support::verdict(echo >= best)
        ));
    }
    let _ = writeln!(
        out,
        "\ntarget (issue 11): a hit ratio at least the better peer's"
    );
    for line in met {
        let _ = writeln!(out, "  {line}");
    }
    publish(&out, "echo-hit-ratio.txt");
}
