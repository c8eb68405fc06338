//! The cluster: echo-cache with its L2 on a real local Valkey/Redis Cluster,
//! three figures of issue 9 (section 6): what a fill from L2 costs next to a
//! raw cluster GET of the same key, how long an invalidation takes to reach
//! another node per coherence mode, and what a live reshard of a table's
//! slot does to the hit rate and the loader.
//!
//! # What runs
//!
//! The bench starts its own cluster with the testkit fixture,
//! `RedisCluster::start(3, 0)`: three masters on free loopback ports
//! (`valkey-server`, else `redis-server`), the slots shared evenly. Every
//! cache is built with `Cache::builder().l2_cluster(cluster.urls())`. A
//! table's keys share its `{<table>}` hashtag, so each table below lives on
//! one slot of one master; the summary names it. The parts run one after
//! the other, each with caches of its own (dropped before the next part):
//!
//! 1. **Fill** (group `cluster_fill`, [`fill`]): a fill from L2 on the
//!    cluster against a raw cluster GET of the same key.
//! 2. **Invalidation latency** (group `cluster_coherence`, [`coherence`]):
//!    how long an invalidation on node A takes to reach node B, per mode.
//! 3. **Reshard** (no criterion line, [`reshard`]): what a live reshard
//!    of a table's slot does to the hit rate and the loader, per mode.
//!
//! Each part's module says what it runs and how to read its part of the
//! summary; the tables of parts 2 and 3 are declared together in
//! [`tables`]. This file reads the settings and runs the parts in turn.
//!
//! # How to read it
//!
//! Criterion prints the time per operation of each `cluster_fill` line, and
//! per `cluster_coherence` line the mean time from A's call to B's eviction
//! seen. After criterion the bench prints a summary, and writes it to
//! `echo-cluster-bench-summary.txt` in the target directory
//! (`$CARGO_TARGET_DIR`, else `target/`), with the machine's load average
//! before and after each part.
//!
//! The whole run takes about 30 s once built on a 2-CPU machine (the
//! summary ends with its length). `ECHO_CLUSTER_BENCH_QUICK=1` shortens it
//! to about 20 s (7 rounds, 500 invalidation samples per mode, 1 s
//! phases); `ECHO_CLUSTER_BENCH_PARTS` picks parts
//! (`fill,coherence,reshard`, the default). A criterion filter picks lines
//! of parts 1 and 2; part 3 runs whenever it is picked.
//!
//! ```sh
//! cargo bench --bench cluster
//! cargo bench --bench cluster -- --warm-up-time 1 --measurement-time 2
//! ECHO_CLUSTER_BENCH_QUICK=1 cargo bench --bench cluster
//! ECHO_CLUSTER_BENCH_PARTS=reshard cargo bench --bench cluster
//! ECHO_CLUSTER_BENCH_RUNTIME=multi_thread cargo bench --bench cluster -- fill
//! ```

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use criterion::Criterion;
use echo_cache_testkit::RedisCluster;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

mod coherence;
mod fill;
mod reshard;
mod tables;

use coherence::{Coh, coherence_group, coherence_summary};
use fill::{ClusterProfile, Fill, fill_group, fill_summary};
use reshard::reshard_summary;
use support::{benchmarking, cpus, load_average, publish};

/// What the bench was asked to do (environment variables).
struct Settings {
    quick: bool,
    /// Rounds of the fill summary pass.
    rounds: usize,
    /// Invalidation samples per mode criterion is sized for, and the fewest
    /// the percentiles are computed from.
    samples: usize,
    /// The reshard part's `before` and `after`.
    phase: Duration,
    fill_multi_thread: bool,
    fill: bool,
    coherence: bool,
    reshard: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let quick = std::env::var("ECHO_CLUSTER_BENCH_QUICK").is_ok_and(|v| v == "1");
        let parts = std::env::var("ECHO_CLUSTER_BENCH_PARTS")
            .unwrap_or_else(|_| "fill,coherence,reshard".to_owned());
        let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
        Settings {
            quick,
            rounds: if quick { 7 } else { 15 },
            samples: if quick { 500 } else { 2_000 },
            phase: Duration::from_secs(if quick { 1 } else { 2 }),
            fill_multi_thread: std::env::var("ECHO_CLUSTER_BENCH_RUNTIME")
                .is_ok_and(|v| v == "multi_thread"),
            fill: part("fill"),
            coherence: part("coherence"),
            reshard: part("reshard"),
        }
    }
}

fn main() {
    let started = Instant::now();
    let settings = Settings::from_env();
    let load_start = load_average();
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let cluster_up = started.elapsed();
    // The summary only when benchmarking (`cargo bench`), not when
    // `cargo test --benches` runs each line once, nor under `--list` or
    // `--profile-time`.
    let benchmarking = benchmarking();

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .nresamples(10_000)
        .without_plots()
        .configure_from_args();

    let first = &cluster.nodes()[0];
    let mut report = String::new();
    let _ = writeln!(
        report,
        "echo-cache on a cluster: {} masters on loopback ({}), server {} {}; {} CPUs; \
         load average at start: {load_start}{}\n",
        cluster.masters().len(),
        cluster
            .masters()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        first.binary().display(),
        first.version(),
        cpus(),
        if settings.quick {
            " (ECHO_CLUSTER_BENCH_QUICK=1)"
        } else {
            ""
        },
    );

    if settings.fill {
        let fill = Fill::new(&cluster, settings.fill_multi_thread);
        let ran = fill_group(&mut criterion, &fill.lines());
        if benchmarking && ran {
            report.push_str(&fill_summary(&fill, &settings));
            report.push('\n');
        }
        let loads = fill.loads.load(Relaxed);
        let stats = fill.cache.stats::<ClusterProfile>();
        if (loads, stats.l2_errors, stats.decode_errors) != (0, 0, 0) {
            eprintln!(
                "WARNING: node B was not served by L2 every time: {loads} loader calls, \
                 {} l2_errors, {} decode_errors",
                stats.l2_errors, stats.decode_errors
            );
        }
    }

    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a Tokio runtime"),
    );
    if settings.coherence {
        let load_before = load_average();
        let coh = Coh::new(&cluster, &rt);
        let mut lines = coh.lines(&cluster);
        coherence_group(&mut criterion, &mut lines, benchmarking, settings.samples);
        if benchmarking && lines.iter().any(|l| !l.samples.is_empty()) {
            for line in lines.iter_mut().filter(|l| !l.samples.is_empty()) {
                let short = settings.samples.saturating_sub(line.samples.len());
                if short > 0 {
                    line.samples.extend((line.run)(short as u64));
                }
            }
            report.push_str(&coherence_summary(&coh, &lines, &load_before));
            report.push('\n');
        }
    }
    criterion.final_summary();

    if benchmarking && settings.reshard {
        report.push_str(&reshard_summary(&cluster, &rt, &settings));
    }
    if benchmarking {
        let _ = writeln!(
            report,
            "\nthe whole bench took {:.1} s (the cluster's start {:.1} s); load average at the \
             end: {}",
            started.elapsed().as_secs_f64(),
            cluster_up.as_secs_f64(),
            load_average()
        );
        publish(&report, "echo-cluster-bench-summary.txt");
    }
}
