//! Hit ratios of a byte-bounded table (`max_bytes`, see "A byte bound" in
//! the crate docs) beside `quick_cache`'s weighted cache
//! (`quick_cache::sync::Cache::with_weighter`), at the same byte bound on
//! the same mixed trace.
//!
//! The trace: reads of ids drawn by Zipf(0.99) over 100,000 ids; an id
//! that is a multiple of 10 holds a value of 100 KiB, any other one of
//! 100 B (a tenth of the ids large, nine tenths of the bytes of any set of
//! ids read). Both engines weigh a value by that size (echo-cache by its
//! declared weigher; the values themselves are small, so that the figures
//! are the policies', not the allocator's). Bounds of 8, 32 and 128 MiB.
//! Printed: the hit ratio of all reads, of the small ones and of the large
//! ones, and the byte hit ratio (bytes read from the cache over bytes
//! read). 1M reads a trace (a tenth when `cargo test --benches` runs it
//! once). Nothing expires: echo-cache runs on a manual clock.

use std::convert::Infallible;
use std::sync::Arc;

use echo_cache::{Cache, Clock, Id, Source, near_cache};

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::draw::{Rng, Zipf};
use support::{benchmarking, publish};

const IDS: usize = 100_000;
const READS: usize = 1_000_000;
const SMALL: u32 = 100;
const LARGE: u32 = 100 * 1024;
const MIB: usize = 1 << 20;

/// The size of id `n`'s value.
fn size(n: u64) -> u32 {
    if n.is_multiple_of(10) { LARGE } else { SMALL }
}

fn weigh(value: &Blob) -> usize {
    value.len as usize
}

macro_rules! tables {
    ($($name:ident $kind:literal $bytes:literal),*) => {$(
        #[doc = concat!("A value of a table of ", stringify!($bytes), " bytes.")]
        #[near_cache(kind = $kind, ttl_ms = 3_600_000, max_bytes = $bytes, weigher = weigh_blob)]
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
        pub struct $name(Blob);
    )*};
}

/// A value: its size, as the trace gives it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Blob {
    len: u32,
}

/// Every table's weigher.
fn weigh_blob<T: AsRef<Blob>>(value: &T) -> usize {
    weigh(value.as_ref())
}

tables!(Bytes8 "WTA" 8_388_608, Bytes32 "WTB" 33_554_432, Bytes128 "WTC" 134_217_728);

macro_rules! as_ref {
    ($($name:ident),*) => {$(
        impl AsRef<Blob> for $name {
            fn as_ref(&self) -> &Blob {
                &self.0
            }
        }
    )*};
}
as_ref!(Bytes8, Bytes32, Bytes128);

/// What an engine made of a trace: hits of small and large reads.
#[derive(Default)]
struct Tally {
    small: (usize, usize),
    large: (usize, usize),
}

impl Tally {
    fn read(&mut self, n: u64, hit: bool) {
        let (hits, reads) = if size(n) == LARGE {
            &mut self.large
        } else {
            &mut self.small
        };
        *hits += usize::from(hit);
        *reads += 1;
    }

    fn line(&self, engine: &str, mib: usize) -> String {
        let pct = |(h, r): (usize, usize)| 100.0 * h as f64 / r.max(1) as f64;
        let all = (self.small.0 + self.large.0, self.small.1 + self.large.1);
        let bytes =
            |(h, r): (usize, usize), s: u32| (h as f64 * f64::from(s), r as f64 * f64::from(s));
        let (sb, st) = bytes(self.small, SMALL);
        let (lb, lt) = bytes(self.large, LARGE);
        format!(
            "| {mib} MiB | {engine} | {:.2} | {:.2} | {:.2} | {:.2} |",
            pct(all),
            pct(self.small),
            pct(self.large),
            100.0 * (sb + lb) / (st + lt),
        )
    }
}

fn trace(reads: usize) -> Vec<u64> {
    let zipf = Zipf::new(IDS, 0.99);
    let mut rng = Rng(29);
    (0..reads).map(|_| zipf.rank(&mut rng) as u64).collect()
}

fn cache() -> Cache {
    Cache::builder()
        .clock(Clock::manual())
        .loader(|id: Id<Bytes8>| async move {
            Ok::<_, Infallible>(Some(Bytes8(Blob {
                len: size(id.payload()),
            })))
        })
        .loader(|id: Id<Bytes32>| async move {
            Ok::<_, Infallible>(Some(Bytes32(Blob {
                len: size(id.payload()),
            })))
        })
        .loader(|id: Id<Bytes128>| async move {
            Ok::<_, Infallible>(Some(Bytes128(Blob {
                len: size(id.payload()),
            })))
        })
        .build()
        .expect("the cache builds")
}

macro_rules! echo {
    ($table:ident, $trace:expr) => {{
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let cache = cache();
            let mut tally = Tally::default();
            for &n in $trace {
                let fetched = cache
                    .fetch(Id::<$table>::from_payload(n))
                    .await
                    .expect("the loader finds every id");
                tally.read(n, fetched.source() == Source::Hit);
            }
            let bound = <$table as echo_cache::Cached>::spec()
                .max_bytes()
                .expect("declared");
            let weight = cache.figures::<$table>().weight.expect("a byte bound");
            assert!(weight <= bound as u64, "{weight} over {bound}");
            tally
        })
    }};
}

fn echo(trace: &[u64], mib: usize) -> Tally {
    match mib {
        8 => echo!(Bytes8, trace),
        32 => echo!(Bytes32, trace),
        128 => echo!(Bytes128, trace),
        _ => panic!("no table of {mib} MiB"),
    }
}

#[derive(Clone)]
struct BySize;

impl quick_cache::Weighter<u64, Arc<u32>> for BySize {
    fn weight(&self, _: &u64, len: &Arc<u32>) -> u64 {
        u64::from(**len)
    }
}

fn quick(trace: &[u64], mib: usize) -> Tally {
    let bytes = mib * MIB;
    // Items expected: the bound over the mean size of a distinct id read.
    let items = bytes / (LARGE as usize / 10 + SMALL as usize);
    let cache = quick_cache::sync::Cache::with_weighter(items, bytes as u64, BySize);
    let mut tally = Tally::default();
    for &n in trace {
        let hit = cache.get(&n).is_some();
        if !hit {
            cache.insert(n, Arc::new(size(n)));
        }
        tally.read(n, hit);
    }
    tally
}

fn main() {
    let reads = if benchmarking() { READS } else { READS / 10 };
    let trace = trace(reads);
    let mut table = String::from(
        "| bound | engine | hits % | small % | large % | bytes % |\n|---|---|---|---|---|---|\n",
    );
    for mib in [8, 32, 128] {
        for (engine, tally) in [
            ("echo-cache", echo(&trace, mib)),
            ("quick_cache", quick(&trace, mib)),
        ] {
            table.push_str(&tally.line(engine, mib));
            table.push('\n');
        }
    }
    publish(&table, "weighted.md");
}
