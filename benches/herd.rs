//! The herd: 10,000 tasks miss one cold id at once, and the loader behind
//! the cache takes 10 ms. echo-cache `fetch` against moka's
//! `future::Cache::get_with` and `quick_cache`'s `sync::Cache::get_or_insert_async`.
//!
//! # What runs
//!
//! On a multi-thread Tokio runtime (one worker per CPU), each herd mints a
//! fresh id that no engine has seen, spawns 10,000 tasks that each read it
//! through the engine, and waits for all of them. The loader (echo-cache's
//! registered loader, moka's `init` future) counts its calls with an
//! `AtomicUsize`, sleeps 10 ms (`tokio::time::sleep`) and returns the value.
//! A herd's time runs from the first spawn to the last answer, so it holds
//! the 10 ms of the one load, the spawning of 10,000 tasks and the
//! coalescing of their waits.
//!
//! # How to read it
//!
//! Criterion reports the wall time per herd (`herd/echo-cache`,
//! `herd/moka`); about 10 ms of it is the loader's sleep. The loader must
//! run exactly once per herd: the bench counts the calls of every herd and,
//! after criterion, runs its own pass of interleaved herds and prints the
//! median and worst wall time per herd and the loader calls per herd (min
//! and max over every herd the process ran, criterion's included), with the
//! load average. Anything but 1 call per herd is flagged.
//!
//! ```sh
//! cargo bench --bench herd
//! ```

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::Criterion;
use echo_cache::{Cache, Id, near_cache};
use tokio::runtime::Runtime;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::{benchmarking, load_average};

/// The hasher echo-cache uses inside: the peers hash as it does.
type Hasher = foldhash::quality::RandomState;

/// Tasks in a herd.
const TASKS: usize = 10_000;
/// How long the loader takes.
const LOAD: Duration = Duration::from_millis(10);
/// Herds per engine in the summary pass.
const SUMMARY_HERDS: usize = 15;

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

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Interleaved herds, then each engine's median and worst herd and its
/// loader calls per herd.
fn summary(runtime: &Runtime, echo: &Echo, moka: &Moka, quick: &Quick) -> String {
    let before = load_average();
    let mut times: [Vec<Duration>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..SUMMARY_HERDS {
        times[0].push(herds(runtime, echo, 1));
        times[1].push(herds(runtime, moka, 1));
        times[2].push(herds(runtime, quick, 1));
    }
    let mut out = format!(
        "herd summary: {TASKS} tasks miss one cold id, {} ms loader, {} worker threads, \
         {SUMMARY_HERDS} interleaved herds per engine; load average before: {before}\n\n\
         {:<12} {:>10} {:>10} {:>22} {:>8}\n",
        LOAD.as_millis(),
        runtime.metrics().num_workers(),
        "engine",
        "median ms",
        "worst ms",
        "loader calls per herd",
        "herds",
    );
    let engines: [(&str, &Calls); 3] = [
        ("echo-cache", echo.calls()),
        ("moka", moka.calls()),
        ("quick_cache", quick.calls()),
    ];
    for ((name, calls), mut t) in engines.into_iter().zip(times) {
        t.sort();
        let (min, max) = (calls.min.load(Relaxed), calls.max.load(Relaxed));
        let flag = if min == 1 && max == 1 {
            ""
        } else {
            "  <- NOT one per herd"
        };
        out += &format!(
            "{name:<12} {:>10.2} {:>10.2} {:>22} {:>8}{flag}\n",
            millis(t[t.len() / 2]),
            millis(t[t.len() - 1]),
            format!("{min}..={max}"),
            calls.herds.load(Relaxed),
        );
    }
    let stats = echo.cache.stats::<Entity>();
    out += &format!(
        "\necho-cache counters: misses {}, coalesced {}, fills {}, hits {}\nload average after: {}\n",
        stats.misses,
        stats.coalesced,
        stats.fills,
        stats.hits,
        load_average()
    );
    out
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let echo = runtime.block_on(async { Echo::new() });
    let moka = Moka::new();
    let quick = Quick::new();

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10)
        .nresamples(10_000)
        .without_plots()
        .configure_from_args();
    {
        let mut group = criterion.benchmark_group("herd");
        group.bench_function("echo-cache", |b| {
            b.iter_custom(|iters| herds(&runtime, &echo, iters));
        });
        group.bench_function("moka", |b| {
            b.iter_custom(|iters| herds(&runtime, &moka, iters));
        });
        group.bench_function("quick_cache", |b| {
            b.iter_custom(|iters| herds(&runtime, &quick, iters));
        });
        group.finish();
    }
    criterion.final_summary();

    if benchmarking() {
        println!("\n{}", summary(&runtime, &echo, &moka, &quick));
    }
}
