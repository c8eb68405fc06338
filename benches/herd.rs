//! The herd: 10,000 tasks miss one cold id at once, and the loader behind
//! the cache takes 10 ms. echo-cache `fetch` against moka's
//! `future::Cache::get_with`, `quick_cache`'s `sync::Cache::get_or_insert_async`
//! and no cache at all (each task awaits the loader itself).
//!
//! # What runs
//!
//! On a multi-thread Tokio runtime (one worker per CPU), each herd mints a
//! fresh id that no engine has seen, spawns 10,000 tasks that each read it
//! through the engine, and waits for all of them. The loader (echo-cache's
//! registered loader, moka's and quick_cache's `init` future, the no-cache
//! task itself) counts its calls with an `AtomicUsize`, sleeps 10 ms
//! (`tokio::time::sleep`) and returns the value. A herd's time runs from
//! the first spawn to the last answer, so it holds the 10 ms of the one
//! load, the spawning of 10,000 tasks and the coalescing of their waits.
//! The no-cache line (`herd/no cache`) is the baseline a cache must not
//! lose to: 10,000 loads side by side, 10,000 timers, no coalescing.
//!
//! # How to read it
//!
//! Criterion reports the wall time per herd (`herd/echo-cache`,
//! `herd/moka`, ...); about 10 ms of it is the loader's sleep. A cache's
//! loader must run exactly once per herd (no cache: once per task): the
//! bench counts the calls of every herd and, after criterion, runs its own
//! pass of interleaved herds (each round every engine once, from a
//! rotating start) and prints each engine's median, fastest and slowest
//! herd and its loader calls per herd (min and max over every herd the
//! process ran, criterion's included), echo-cache's ratios to quick_cache
//! and to no cache (the median over rounds of the ratio within a round),
//! with the load average before and after. Wrong loader calls are flagged.
//! Then one herd per engine with every allocation counted: allocations and
//! bytes per task, which the machine's load does not move.
//!
//! ```sh
//! cargo bench --bench herd
//! cargo bench --bench herd -- summary-only   # a filter no line matches:
//!                                            # the summary pass alone
//! HERDS=61 cargo bench --bench herd          # 61 rounds (default 15)
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::Criterion;
use echo_cache::{Cache, Id, near_cache};
use tokio::runtime::Runtime;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::{Rounds, TimedLine, benchmarking, load_average, median, publish};

/// The hasher echo-cache uses inside: the peers hash as it does.
type Hasher = foldhash::quality::RandomState;

/// Tasks in a herd.
const TASKS: usize = 10_000;
/// How long the loader takes.
const LOAD: Duration = Duration::from_millis(10);
/// Herds per engine in the summary pass, unless `HERDS` says.
const SUMMARY_HERDS: usize = 15;

/// The system allocator, counting while [`COUNTING`] is set: the
/// allocation pass. Off, it costs a load per allocation, for every engine
/// alike.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

// SAFETY: the system allocator's own, with two counters beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
            ALLOCATED.fetch_add(layout.size() as u64, Relaxed);
        }
        // SAFETY: as the caller promised.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as the caller promised.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
            ALLOCATED.fetch_add(new_size as u64, Relaxed);
        }
        // SAFETY: as the caller promised.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The entity the herd wants.
#[near_cache(
    kind = "HRD",
    ttl_ms = 3_600_000,
    coherence = "none",
    max_size = 1_000_000
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Entity {
    /// Some payload.
    pub name: String,
}

/// Loader calls, and what each herd saw of them.
#[derive(Default)]
struct Calls {
    /// Loader calls so far.
    total: AtomicUsize,
    /// Fewest and most calls seen in one herd.
    min: AtomicUsize,
    max: AtomicUsize,
    herds: AtomicUsize,
}

impl Calls {
    fn new() -> Calls {
        Calls {
            min: AtomicUsize::new(usize::MAX),
            ..Calls::default()
        }
    }

    /// Records a herd that started when the total was `before`.
    fn herd(&self, before: usize) -> usize {
        let calls = self.total.load(Relaxed) - before;
        self.min.fetch_min(calls, Relaxed);
        self.max.fetch_max(calls, Relaxed);
        self.herds.fetch_add(1, Relaxed);
        calls
    }
}

async fn load(calls: &Calls, key: u64) -> Entity {
    calls.total.fetch_add(1, Relaxed);
    tokio::time::sleep(LOAD).await;
    Entity {
        name: format!("entity {key}"),
    }
}

/// An engine under test: one herd on a fresh id, timed.
trait Herd {
    fn calls(&self) -> &Calls;
    async fn one(&self) -> Duration;
}

struct Echo {
    cache: Cache,
    calls: Arc<Calls>,
}

struct Moka {
    cache: moka::future::Cache<u64, Arc<Entity>, Hasher>,
    calls: Arc<Calls>,
}

struct Quick {
    cache: Arc<QuickCache>,
    calls: Arc<Calls>,
}

/// No cache: every task awaits the loader itself.
struct NoCache {
    calls: Arc<Calls>,
}

type QuickCache = quick_cache::sync::Cache<u64, Arc<Entity>, quick_cache::UnitWeighter, Hasher>;

impl Echo {
    fn new() -> Echo {
        let calls = Arc::new(Calls::new());
        let counted = Arc::clone(&calls);
        let cache = Cache::builder()
            .loader(move |id: Id<Entity>| {
                let calls = Arc::clone(&counted);
                async move { Ok::<_, std::io::Error>(Some(load(&calls, id.payload()).await)) }
            })
            .build()
            .expect("the cache builds");
        Echo { cache, calls }
    }
}

impl Herd for Echo {
    fn calls(&self) -> &Calls {
        &self.calls
    }

    async fn one(&self) -> Duration {
        one_herd(&self.calls, |key| {
            let cache = self.cache.clone();
            async move {
                let fetched = cache.fetch(Id::<Entity>::from_payload(key)).await;
                fetched.expect("a fetch answered").into_value()
            }
        })
        .await
    }
}

impl Moka {
    fn new() -> Moka {
        Moka {
            cache: moka::future::Cache::builder()
                .max_capacity(1_000_000)
                .build_with_hasher(Hasher::default()),
            calls: Arc::new(Calls::new()),
        }
    }
}

impl Herd for Moka {
    fn calls(&self) -> &Calls {
        &self.calls
    }

    async fn one(&self) -> Duration {
        one_herd(&self.calls, |key| {
            let (cache, calls) = (self.cache.clone(), Arc::clone(&self.calls));
            async move {
                let init = async { Arc::new(load(&calls, key).await) };
                cache.get_with(key, init).await
            }
        })
        .await
    }
}

impl Quick {
    fn new() -> Quick {
        Quick {
            cache: Arc::new(quick_cache::sync::Cache::with(
                1_000_000,
                1_000_000,
                quick_cache::UnitWeighter,
                Hasher::default(),
                quick_cache::sync::DefaultLifecycle::default(),
            )),
            calls: Arc::new(Calls::new()),
        }
    }
}

impl Herd for Quick {
    fn calls(&self) -> &Calls {
        &self.calls
    }

    async fn one(&self) -> Duration {
        one_herd(&self.calls, |key| {
            let (cache, calls) = (Arc::clone(&self.cache), Arc::clone(&self.calls));
            async move {
                let init = async { Ok::<_, ()>(Arc::new(load(&calls, key).await)) };
                cache
                    .get_or_insert_async(&key, init)
                    .await
                    .expect("a value")
            }
        })
        .await
    }
}

impl Herd for NoCache {
    fn calls(&self) -> &Calls {
        &self.calls
    }

    async fn one(&self) -> Duration {
        one_herd(&self.calls, |key| {
            let calls = Arc::clone(&self.calls);
            async move { Arc::new(load(&calls, key).await) }
        })
        .await
    }
}

/// One herd: [`TASKS`] tasks spawned at once, each the read `read` makes of
/// one fresh key; timed from the first spawn to the last answer, its
/// loader calls recorded in `calls`.
async fn one_herd<F, Fut>(calls: &Calls, read: F) -> Duration
where
    F: Fn(u64) -> Fut,
    Fut: Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let key = Id::<Entity>::mint().payload();
    let before = calls.total.load(Relaxed);
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS).map(|_| tokio::spawn(read(key))).collect();
    for task in tasks {
        black_box(task.await.expect("a task ran"));
    }
    let elapsed = start.elapsed();
    calls.herd(before);
    elapsed
}

/// `herds` herds in a row, their total time.
fn herds<H: Herd>(runtime: &Runtime, engine: &H, herds: u64) -> Duration {
    runtime.block_on(async {
        let mut total = Duration::ZERO;
        for _ in 0..herds {
            total += engine.one().await;
        }
        total
    })
}

/// The engines, by name, with the loader calls a herd of each must make.
struct Engines {
    echo: Echo,
    moka: Moka,
    quick: Quick,
    none: NoCache,
}

const ECHO: &str = "echo-cache";
const MOKA: &str = "moka";
const QUICK: &str = "quick_cache";
const NONE: &str = "no cache";

impl Engines {
    /// Each engine's name, loader calls, and the loader calls one herd must
    /// make.
    fn calls(&self) -> [(&'static str, &Calls, usize); 4] {
        [
            (ECHO, self.echo.calls(), 1),
            (MOKA, self.moka.calls(), 1),
            (QUICK, self.quick.calls(), 1),
            (NONE, self.none.calls(), TASKS),
        ]
    }

    /// One herd of engine `name`, timed.
    fn herd(&self, runtime: &Runtime, name: &str) -> Duration {
        match name {
            ECHO => herds(runtime, &self.echo, 1),
            MOKA => herds(runtime, &self.moka, 1),
            QUICK => herds(runtime, &self.quick, 1),
            _ => herds(runtime, &self.none, 1),
        }
    }
}

/// Interleaved herds: each engine's median, fastest and slowest herd and
/// its loader calls per herd; echo-cache's ratios to quick_cache and to no
/// cache; then the allocations of a herd.
fn summary(runtime: &Runtime, engines: &Engines) -> String {
    let rounds = std::env::var("HERDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SUMMARY_HERDS);
    let before = load_average();
    let lines: Vec<TimedLine<'_>> = [ECHO, MOKA, QUICK, NONE]
        .into_iter()
        .map(|name| -> TimedLine<'_> {
            (
                name,
                Box::new(move |n| (0..n).map(|_| engines.herd(runtime, name)).sum()),
            )
        })
        .collect();
    let timed = Rounds::run(&lines, rounds, |_| 1);
    let after = load_average();
    let mut out = format!(
        "herd summary: {TASKS} tasks miss one cold id, {} ms loader, {} worker threads, \
         {rounds} interleaved rounds (one herd per engine each)\n\
         load average before: {before}; after: {after}\n\n\
         {:<12} {:>10} {:>10} {:>10} {:>22} {:>7}\n",
        LOAD.as_millis(),
        runtime.metrics().num_workers(),
        "engine",
        "median ms",
        "fastest",
        "slowest",
        "loader calls per herd",
        "herds",
    );
    for (name, calls, one) in engines.calls() {
        let (min, max) = (calls.min.load(Relaxed), calls.max.load(Relaxed));
        let flag = if min == one && max == one {
            String::new()
        } else {
            format!("  <- NOT {one} per herd")
        };
        out += &format!(
            "{name:<12} {:>10.2} {:>10.2} {:>10.2} {:>22} {:>7}{flag}\n",
            timed.median(name) / 1e3,
            timed.min(name) / 1e3,
            timed.line(name).iter().copied().fold(0.0, f64::max) / 1e3,
            format!("{min}..={max}"),
            calls.herds.load(Relaxed),
        );
    }
    out += "\necho-cache's ratios, the median over rounds of the ratio within a round \
            (goal: <= 1):\n";
    for peer in [QUICK, NONE, MOKA] {
        let ratios: Vec<f64> = timed
            .line(ECHO)
            .iter()
            .zip(timed.line(peer))
            .map(|(echo, peer)| echo / peer)
            .collect();
        let (lo, hi) = ratios.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), r| {
            (lo.min(*r), hi.max(*r))
        });
        out += &format!(
            "  echo-cache / {peer:<12} {:>6.3}  (rounds {lo:.3}..{hi:.3}; ratio of medians {:.3})\n",
            median(&ratios),
            timed.median(ECHO) / timed.median(peer),
        );
    }
    let stats = engines.echo.cache.stats::<Entity>();
    out += &format!(
        "\necho-cache counters: misses {}, coalesced {}, fills {}, hits {}\n",
        stats.misses, stats.coalesced, stats.fills, stats.hits,
    );
    out += &format!(
        "\nallocations of one herd, per task (the spawn and the task's own \
         future included; min over 3 herds):\n{:<12} {:>12} {:>12}\n",
        "engine", "allocations", "bytes"
    );
    for name in [ECHO, MOKA, QUICK, NONE] {
        let (allocations, bytes) = (0..3)
            .map(|_| counted(|| engines.herd(runtime, name)))
            .min()
            .expect("three herds");
        #[allow(clippy::cast_precision_loss)]
        let per_task = |n: u64| n as f64 / TASKS as f64;
        out += &format!(
            "{name:<12} {:>12.2} {:>12.1}\n",
            per_task(allocations),
            per_task(bytes)
        );
    }
    out
}

/// `HERDS` herds of engine `name` alone, no criterion: for a profiler
/// (`HERD_ONLY=echo-cache HERDS=3 valgrind --tool=callgrind ...`).
fn only(runtime: &Runtime, engines: &Engines, name: &str) {
    let rounds = std::env::var("HERDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SUMMARY_HERDS);
    let times: Vec<f64> = (0..rounds)
        .map(|_| engines.herd(runtime, name).as_secs_f64() * 1e3)
        .collect();
    println!(
        "{name}: {rounds} herds, median {:.2} ms; load average {}",
        median(&times),
        load_average()
    );
}

/// The allocations `f` makes (counted on every thread), and their bytes.
fn counted(f: impl FnOnce() -> Duration) -> (u64, u64) {
    let (allocations, bytes) = (ALLOCATIONS.load(Relaxed), ALLOCATED.load(Relaxed));
    COUNTING.store(true, Relaxed);
    black_box(f());
    COUNTING.store(false, Relaxed);
    (
        ALLOCATIONS.load(Relaxed) - allocations,
        ALLOCATED.load(Relaxed) - bytes,
    )
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let engines = Engines {
        echo: runtime.block_on(async { Echo::new() }),
        moka: Moka::new(),
        quick: Quick::new(),
        none: NoCache {
            calls: Arc::new(Calls::new()),
        },
    };

    if let Ok(name) = std::env::var("HERD_ONLY") {
        only(&runtime, &engines, &name);
        return;
    }

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10)
        .nresamples(10_000)
        .without_plots()
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group("herd");
        group.bench_function(ECHO, |b| {
            b.iter_custom(|iters| herds(&runtime, &engines.echo, iters));
        });
        group.bench_function(MOKA, |b| {
            b.iter_custom(|iters| herds(&runtime, &engines.moka, iters));
        });
        group.bench_function(QUICK, |b| {
            b.iter_custom(|iters| herds(&runtime, &engines.quick, iters));
        });
        group.bench_function(NONE, |b| {
            b.iter_custom(|iters| herds(&runtime, &engines.none, iters));
        });
        group.finish();
    }
    criterion.final_summary();

    if benchmarking() {
        publish(&summary(&runtime, &engines), "echo-herd.txt");
    }
}
