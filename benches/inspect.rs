//! What an operator's look into a table costs (issue 29 §3), and what it
//! costs the writers meanwhile: `peek`, a whole `snapshot`, `figures` and
//! `hottest(10)` on a full table of 100,000 and of 1,000,000 rows, each
//! the median of a few runs; then the slowest of a writer's `put`s while
//! another thread walks the table without pause, against the slowest
//! while nothing walks it (a walk takes no shard lock while it reads, only
//! to copy a shard's sketch).
//!
//! ```sh
//! cargo bench --bench inspect
//! ```
//!
//! A plain timing program (no criterion): its figures are the crate
//! docs' ([Inspection](echo_cache#inspection)). On a loaded machine they
//! are noisy; the load average is printed beside them.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Id, near_cache};

/// The rows of the smaller table.
#[near_cache(
    kind = "ISM",
    ttl_ms = 3_600_000,
    max_size = 100_000,
    name = "inspect_small"
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Small {
    name: String,
}

/// The rows of the larger table.
#[near_cache(
    kind = "ILG",
    ttl_ms = 3_600_000,
    max_size = 1_000_000,
    name = "inspect_large"
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Large {
    name: String,
}

trait Named: Cached + Sized {
    fn named(n: u64) -> Self;
}

impl Named for Small {
    fn named(n: u64) -> Small {
        Small {
            name: format!("row {n}"),
        }
    }
}

impl Named for Large {
    fn named(n: u64) -> Large {
        Large {
            name: format!("row {n}"),
        }
    }
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[runs / 2]
}

/// The slowest of `n` puts of new ids (each makes room in a full table:
/// under a shard's lock), on `runtime`.
fn slowest_put<T: Named>(cache: &Cache, runtime: &tokio::runtime::Runtime, n: u64) -> Duration {
    (0..n)
        .map(|i| {
            let started = Instant::now();
            runtime
                .block_on(cache.put(Id::<T>::mint(), T::named(i)))
                .expect("put");
            started.elapsed()
        })
        .max()
        .unwrap_or_default()
}

fn measure<T: Named>(rows: u64, runtime: &tokio::runtime::Runtime) {
    let cache = Cache::builder()
        .open::<T>()
        .without_loader::<T>()
        .build()
        .expect("the cache builds");
    let ids: Vec<Id<T>> = (0..rows).map(|_| Id::mint()).collect();
    for (n, &id) in ids.iter().enumerate() {
        runtime
            .block_on(cache.put(id, T::named(n as u64)))
            .expect("put");
    }
    // Past its bound: the policy counts, and hits mark what they read.
    for n in 0..rows / 10 {
        runtime
            .block_on(cache.put(Id::<T>::mint(), T::named(n)))
            .expect("put");
    }
    for &id in ids.iter().step_by(97) {
        let _ = cache.peek(id);
    }
    let name = T::spec().name();
    let live = cache.figures::<T>().rows;
    let per_peek = {
        let started = Instant::now();
        for &id in &ids {
            std::hint::black_box(cache.peek(id));
        }
        started.elapsed() / ids.len() as u32
    };
    let snapshot = median(5, || {
        std::hint::black_box(cache.snapshot::<T>().count());
    });
    let figures = median(5, || {
        std::hint::black_box(cache.figures::<T>());
    });
    let hottest = median(5, || {
        std::hint::black_box(cache.hottest::<T>(10));
    });
    println!(
        "{name}: {live} live rows: peek {per_peek:?}, snapshot {snapshot:?}, figures {figures:?}, hottest(10) {hottest:?}"
    );

    let quiet = slowest_put::<T>(&cache, runtime, 20_000);
    let walking = AtomicBool::new(true);
    let (walks, busy) = std::thread::scope(|s| {
        let walker = s.spawn(|| {
            let mut walks = 0;
            while walking.load(Relaxed) {
                std::hint::black_box(cache.snapshot::<T>().count());
                std::hint::black_box(cache.figures::<T>());
                std::hint::black_box(cache.hottest::<T>(10));
                walks += 1;
            }
            walks
        });
        let busy = slowest_put::<T>(&cache, runtime, 20_000);
        walking.store(false, Relaxed);
        (walker.join().expect("the walker"), busy)
    });
    println!(
        "{name}: slowest of 20,000 puts: {quiet:?} alone, {busy:?} during {walks} rounds of snapshot + figures + hottest"
    );
}

fn main() {
    if std::env::args().any(|arg| arg == "--list" || arg == "--test") {
        return;
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average: {}",
        load.split_whitespace().next().unwrap_or("?")
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    measure::<Small>(100_000, &runtime);
    measure::<Large>(1_000_000, &runtime);
}
