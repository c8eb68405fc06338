//! A miss: what the miss path costs when the loader answers at once, and
//! what a `tracing` subscriber that records the cache's DEBUG spans adds.
//!
//! # What runs
//!
//! On a current-thread Tokio runtime, each fetch reads an id that is not
//! in L1: it misses, starts a flight (driven in the fetch's own task), the
//! loader answers at once, the flight lands and installs the row. That is
//! the whole miss path and nothing else: no L2, no waiting. Ids come from
//! a pool of 50,000; the table is flushed (untimed) before the pool is
//! read again.
//!
//! - `miss/quiet`: no subscriber wants the spans (as in production at
//!   INFO or WARN): each `flight` span is a disabled one.
//! - `miss/debug`: a `tracing-subscriber` `fmt` subscriber at DEBUG, writing
//!   to a sink: every flight's span is built, its fields formatted, and its
//!   `flight landed` event written.
//!
//! Build it with `--features metrics` and every flight also records its
//! time in the flight histogram (to the facade's no-op recorder: no
//! exporter is installed).
//!
//! # How to read it
//!
//! The summary gives µs per miss, the median of interleaved rounds, and
//! `debug/quiet`. Comparing builds (before and after a change, with and
//! without `metrics`) means comparing separate runs: read the load
//! average next to each.
//!
//! ```sh
//! cargo bench --bench miss
//! cargo bench --bench miss --features metrics
//! ```

use std::io;
use std::time::{Duration, Instant};

use criterion::Criterion;
use echo_cache::{Cache, Id, near_cache};
use tokio::runtime::Runtime;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::{Rounds, TimedLine, benchmarking, load_average, publish};

/// Ids read before the table is flushed.
const POOL: usize = 50_000;
/// Rounds of the summary pass, and misses per line in each.
const ROUNDS: usize = 15;
const BATCH: u64 = 50_000;

/// The entity missed.
#[near_cache(
    kind = "MIS",
    ttl_ms = 3_600_000,
    coherence = "none",
    max_size = 100_000
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Entity {
    /// Some payload.
    pub name: String,
}

struct Bench {
    runtime: Runtime,
    cache: Cache,
    ids: Vec<Id<Entity>>,
}

impl Bench {
    fn new() -> Bench {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let cache = runtime.block_on(async {
            Cache::builder()
                .loader(|id: Id<Entity>| {
                    std::future::ready(Ok::<_, io::Error>(Some(Entity {
                        name: format!("entity {id}"),
                    })))
                })
                .build()
                .expect("the cache builds")
        });
        let ids = (0..POOL).map(|_| Id::mint()).collect();
        Bench {
            runtime,
            cache,
            ids,
        }
    }

    /// `n` misses, timed; the table is flushed (untimed) between pools.
    fn misses(&self, n: u64) -> Duration {
        let mut left = usize::try_from(n).expect("n fits");
        let mut took = Duration::ZERO;
        while left > 0 {
            self.cache.flush::<Entity>();
            let ids = &self.ids[..left.min(POOL)];
            let start = Instant::now();
            self.runtime.block_on(async {
                for &id in ids {
                    let fetched = self.cache.fetch(id).await.expect("the loader answers");
                    debug_assert_eq!(fetched.source(), echo_cache::Source::Fill);
                }
            });
            took += start.elapsed();
            left -= ids.len();
        }
        took
    }
}

/// `misses` under a DEBUG `fmt` subscriber that writes to a sink.
fn with_debug_subscriber<R>(misses: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(io::sink)
        .finish();
    let result = tracing::subscriber::with_default(subscriber, misses);
    // Callsites cache the interest of the subscribers they have seen: drop
    // this one's, so the quiet line after it is quiet again (no subscriber:
    // a DEBUG span is skipped at its level check).
    tracing::callsite::rebuild_interest_cache();
    result
}

fn main() {
    let bench = Bench::new();
    // Every miss is a fill, answered without waiting.
    bench.misses(1_000);
    let stats = bench.cache.stats::<Entity>();
    assert_eq!((stats.fills, stats.hits, stats.misses), (1_000, 0, 1_000));

    let lines: Vec<TimedLine<'_>> = vec![
        ("miss/quiet", Box::new(|n| bench.misses(n))),
        (
            "miss/debug",
            Box::new(|n| with_debug_subscriber(|| bench.misses(n))),
        ),
    ];

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .without_plots()
        .configure_from_args();
    let mut group = criterion.benchmark_group("miss");
    for (name, time) in &lines {
        let name = name.trim_start_matches("miss/");
        group.bench_function(name, |b| b.iter_custom(time));
    }
    group.finish();
    criterion.final_summary();

    if benchmarking() {
        let load_before = load_average();
        let rounds = Rounds::run(&lines, ROUNDS, |_| BATCH);
        let metrics = if cfg!(feature = "metrics") {
            "with"
        } else {
            "without"
        };
        let table = format!(
            "echo-cache miss summary ({metrics} the metrics feature): median of {ROUNDS} \
             interleaved rounds of {BATCH} misses\nload average before: {load_before}\n\n\
             miss/quiet  {:>7.3} µs per miss\nmiss/debug  {:>7.3} µs per miss\n\
             debug/quiet {:>7.2}x\n\nload average after: {}\n",
            rounds.median("miss/quiet"),
            rounds.median("miss/debug"),
            rounds.paired(|us| us("miss/debug") / us("miss/quiet")),
            load_average()
        );
        publish(&table, "echo-bench-miss.txt");
    }
    let stats = bench.cache.stats::<Entity>();
    assert_eq!(
        (stats.hits, stats.load_errors),
        (0, 0),
        "every fetch missed"
    );
}
