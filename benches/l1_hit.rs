//! An L1 hit, side by side: what one read of a cached value costs in
//! echo-cache, in its peers and in a plain read-only map.
//!
//! # What runs
//!
//! 100,000 ids are cached in each engine, each value an `Arc` of a struct
//! holding a `String`; every engine is big enough that nothing is evicted
//! (checked before and after). Every lookup is a hit:
//!
//! - `echo-cache`: `cache.fetch(id)` polled once with a no-op waker. A hit
//!   is `Ready` on the first poll (asserted in setup for every id): the
//!   expiry check, the striped hit counter and the `Arc` handed out in a
//!   `Fetched`, all included. Its table is half full (`max_size` 200,000),
//!   so a hit does not mark its row for eviction (hits mark only from
//!   three quarters full). A full table's hit also loads the row's mark
//!   byte: set `max_size = 100_000` below to measure it (one run at load
//!   3.3: hot/1t 1.29–1.48× `quick_cache`'s time, against 1.19–1.32× half
//!   full; uniform and zipf within noise).
//! - `quick_cache`: `quick_cache::sync::Cache::get`.
//! - `moka`: `moka::sync::Cache::get` (no TTL set: moka's cheapest hit).
//! - `dashmap`: `DashMap::get(..)` and a clone of the `Arc` (a sharded,
//!   locked map: what a hand-rolled cache is often built on).
//! - `floor`: `HashMap::get(..).cloned()` on a map no one writes.
//!
//! All five hash with foldhash (`foldhash::quality::RandomState`, the
//! hasher echo-cache uses inside). The peers are keyed by the `u64` payload
//! of the same ids echo-cache is read with; every engine owns its own
//! values (allocated as it is filled) and returns (clones, then drops) an
//! `Arc`.
//!
//! Key patterns, each a precomputed sequence of 2^18 keys per thread:
//! `uniform` over the 100,000 ids, `zipf` (s = 1.0, ranks scattered over the
//! ids by a fixed shuffle) and `hot` (uniform over 1,000 of the ids). Each
//! pattern runs on 1 thread and on 2 threads (scoped threads started
//! together, each on its own sequence, each doing the same number of
//! lookups).
//!
//! # How to read it
//!
//! Criterion groups are named `PATTERN/THREADSt`, with the four engines one
//! after another in each group, so the ratios within a group come from the
//! same minute of the same run. With 1 thread the time is per lookup; with
//! 2 threads it is per pair of lookups (one on each thread, the slower
//! thread's time), and the throughput line gives lookups per second across
//! both threads. The 2-thread scaling is `2 × t(1t) / t(2t)`.
//!
//! After criterion, the bench does its own pass: in each of several rounds
//! every engine runs on 1 and on 2 threads back to back, the engines
//! round-robin from a rotating start. It prints each engine's median, the
//! ratios (echo/quick_cache, moka/echo, echo/floor) and the 2-thread scaling
//! (the median of each round's own ratio) against the targets of issue 2,
//! with the load average, and writes the table to
//! `target/echo-bench-summary.txt`. On a loaded or small machine the
//! numbers are noisy, and the 2-thread ones only mean something when two
//! cores are really free: read the load next to them.
//!
//! ```sh
//! cargo bench --bench l1_hit            # everything, a few minutes
//! cargo bench --bench l1_hit -- zipf/1t # one group (the summary still runs)
//! ```
//!
//! Times move with the machine's load; instruction counts do not:
//! `scripts/instructions` counts the instructions of the same hit (the same
//! fill, sequences and loop, `support::l1`) under callgrind, for every
//! engine at 100,000 and 1,000,000 rows (`benches/hit_instructions.rs`).
//! The latest figures of both, before and after issue 27's changes:
//! `benches/results/l1_hit.md`.

use std::fmt::Write as _;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use echo_cache::{Cache, near_cache};

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::l1::{Engine, Keys, Pattern, SEQ_LEN, hits, ids, patterns};
use support::{benchmarking, cpus, load_average, median, publish, verdict};

/// Ids cached in every engine.
const IDS: usize = 100_000;
/// Rounds of the summary pass, and lookups per thread in each.
const ROUNDS: usize = 7;
const BATCH: u64 = 1 << 20;

support::l1::entity! {
    /// The cached entity.
    #[near_cache(
        kind = "ENT",
        ttl_ms = 3_600_000,
        coherence = "none",
        max_size = 200_000
    )]
    pub struct Entity;
}

/// `n` lookups of `engine` along `keys`, timed.
fn run<E: Engine>(engine: &E, keys: &[u64; SEQ_LEN], n: u64) -> Duration {
    let start = Instant::now();
    hits(engine, keys, n);
    start.elapsed()
}

/// `n` lookups on each of `threads` threads (1 or 2) started together; the
/// slowest thread's time.
fn timed<E: Engine>(engine: &E, seqs: &[Keys; 2], threads: usize, n: u64) -> Duration {
    if threads == 1 {
        return run(engine, &seqs[0], n);
    }
    let barrier = Barrier::new(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = seqs[..threads]
            .iter()
            .map(|keys| {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    run(engine, keys, n)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a bench thread panicked"))
            .max()
            .expect("at least one thread")
    })
}

/// A contender: a name and its timed loop.
type Contender<'a> = (
    &'static str,
    Box<dyn Fn(&[Keys; 2], usize, u64) -> Duration + 'a>,
);

fn contender<'a, E: Engine>(name: &'static str, engine: &'a E) -> Contender<'a> {
    (
        name,
        Box::new(move |seqs, threads, n| timed(engine, seqs, threads, n)),
    )
}

fn criterion_groups(c: &mut Criterion, patterns: &[Pattern], contenders: &[Contender<'_>]) {
    for pattern in patterns {
        for threads in [1, 2] {
            let mut group = c.benchmark_group(format!("{}/{threads}t", pattern.name));
            group.throughput(Throughput::Elements(threads as u64));
            for (name, time) in contenders {
                group.bench_function(*name, |b| {
                    b.iter_custom(|iters| time(&pattern.seqs, threads, iters));
                });
            }
            group.finish();
        }
    }
}

/// Nanoseconds per lookup on 1 thread (`[0]`) and per pair of lookups on 2
/// threads (`[1]`), indexed `[threads - 1][contender][round]`. In each
/// round every contender runs on 1 then 2 threads (2 then 1 in odd rounds),
/// back to back, the contenders round-robin from a rotating start, so each
/// round's 1-thread and 2-thread times come from the same moment.
fn samples(pattern: &Pattern, contenders: &[Contender<'_>]) -> [Vec<Vec<f64>>; 2] {
    let mut samples = [
        vec![Vec::with_capacity(ROUNDS); contenders.len()],
        vec![Vec::with_capacity(ROUNDS); contenders.len()],
    ];
    for round in 0..ROUNDS {
        for k in 0..contenders.len() {
            let which = (round + k) % contenders.len();
            let order = if round % 2 == 0 { [1, 2] } else { [2, 1] };
            for threads in order {
                let elapsed = (contenders[which].1)(&pattern.seqs, threads, BATCH);
                #[allow(clippy::cast_precision_loss)]
                samples[threads - 1][which].push(elapsed.as_nanos() as f64 / BATCH as f64);
            }
        }
    }
    samples
}

/// The summary pass and its table. Contenders: echo, quick_cache, moka,
/// floor, dashmap.
fn summary(patterns: &[Pattern], contenders: &[Contender<'_>]) -> String {
    let load_before = load_average();
    let mut out = String::new();
    let cpus = cpus();
    let _ = writeln!(
        out,
        "echo-cache L1 hit summary: median of {ROUNDS} interleaved rounds of {BATCH} lookups per thread\n\
         ns per lookup (2t: per pair of lookups, one per thread); {cpus} CPUs; load average before: {load_before}\n"
    );
    let _ = writeln!(
        out,
        "{:<12} {:>8} {:>11} {:>8} {:>8} {:>8} | {:>8} {:>9} {:>10} {:>9}",
        "scenario",
        "echo",
        "quick_cache",
        "moka",
        "floor",
        "dashmap",
        "echo/qc",
        "moka/echo",
        "echo/floor",
        "echo/dash"
    );
    let mut targets = Vec::new();
    // Per pattern: its name and each contender's 2-thread scaling.
    let mut scalings: Vec<(&str, Vec<f64>)> = Vec::new();
    for pattern in patterns {
        let samples = samples(pattern, contenders);
        for threads in [1, 2] {
            let ns: Vec<f64> = samples[threads - 1].iter().map(|s| median(s)).collect();
            let (echo, quick, moka, floor, dash) = (ns[0], ns[1], ns[2], ns[3], ns[4]);
            let _ = writeln!(
                out,
                "{:<12} {echo:>8.1} {quick:>11.1} {moka:>8.1} {floor:>8.1} {dash:>8.1} | {:>8.2} {:>9.1} {:>10.2} {:>9.2}",
                format!("{}/{threads}t", pattern.name),
                echo / quick,
                moka / echo,
                echo / floor,
                echo / dash,
            );
            if threads == 1 {
                targets.push(format!(
                    "{}/1t: echo/dashmap {:.2} <= 1.00 {}",
                    pattern.name,
                    echo / dash,
                    verdict(echo <= dash),
                ));
            }
            targets.push(format!(
                "{}/{threads}t: echo/qc {:.2} <= 1.00 {}; moka/echo {:.1} >= 8 {}; echo/floor {:.2} <= 1.5 {}",
                pattern.name,
                echo / quick,
                verdict(echo <= quick),
                moka / echo,
                verdict(moka >= 8.0 * echo),
                echo / floor,
                verdict(echo <= 1.5 * floor),
            ));
        }
        // The median over rounds of each round's own ratio.
        let scaling: Vec<f64> = samples[0]
            .iter()
            .zip(&samples[1])
            .map(|(one, two)| {
                let ratios: Vec<f64> = one.iter().zip(two).map(|(t1, t2)| 2.0 * t1 / t2).collect();
                median(&ratios)
            })
            .collect();
        targets.push(format!(
            "{}: echo 2-thread scaling {:.2}x >= 1.7x {}",
            pattern.name,
            scaling[0],
            verdict(scaling[0] >= 1.7)
        ));
        scalings.push((pattern.name, scaling));
    }
    let _ = writeln!(
        out,
        "\n2-thread scaling (lookups/s on 2 threads / on 1 = 2 x t1 / t2, median of the rounds' ratios)\n{:<12} {:>8} {:>11} {:>8} {:>8} {:>8}",
        "pattern", "echo", "quick_cache", "moka", "floor", "dashmap"
    );
    for (name, scaling) in &scalings {
        let _ = writeln!(
            out,
            "{name:<12} {:>7.2}x {:>10.2}x {:>7.2}x {:>7.2}x {:>7.2}x",
            scaling[0], scaling[1], scaling[2], scaling[3], scaling[4]
        );
    }
    let _ = writeln!(out, "\ntargets (issues 2 and 11):");
    for line in targets {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "\nload average after: {}", load_average());
    out
}

fn main() {
    let ids = ids::<Entity>(IDS);
    let patterns = patterns(&ids);

    let echo = support::l1::echo::<Entity>(Cache::builder().without_loader::<Entity>(), &ids);
    let quick = support::l1::quick::<Entity>(&ids);
    let moka = support::l1::moka::<Entity>(&ids);
    let floor = support::l1::floor::<Entity>(&ids);
    let dash = support::l1::dash::<Entity>(&ids);
    let check_peers = || {
        quick.check(&ids);
        moka.check(&ids);
        floor.check(&ids);
        dash.check(&ids);
    };
    check_peers();

    let contenders = [
        contender("echo-cache", &echo),
        contender("quick_cache", &quick),
        contender("moka", &moka),
        contender("floor", &floor),
        contender("dashmap", &dash),
    ];

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .nresamples(10_000)
        .without_plots()
        .configure_from_args();
    criterion_groups(&mut criterion, &patterns, &contenders);
    criterion.final_summary();

    // The summary pass only when benchmarking (`cargo bench`), not when
    // `cargo test --benches` runs each bench once.
    if benchmarking() {
        publish(&summary(&patterns, &contenders), "echo-bench-summary.txt");
    }

    // Still every id cached, and every echo-cache read was a hit.
    echo.check(&ids);
    check_peers();
}
