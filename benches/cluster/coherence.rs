//! Part 2 of the cluster bench, invalidation latency (group
//! `cluster_coherence`): how long an invalidation on node A takes to reach
//! node B's L1 on the cluster, per coherence mode, against the target of
//! issue 9 (p99 ≤ 2 ms on loopback, every mode).
//!
//! # What runs
//!
//! On a `multi_thread` runtime, with the method of `benches/coherence.rs`
//! (`support::invalidation::invalidation_sample`): nodes A and B
//! (`l2_timeout` 2 s), one table per mode, `clu_tracked` (`tracking`),
//! `clu_broadcast` (`broadcast`) and `clu_durable` (`durable`), each
//! `Health::Serving` on both first. One sample: B fetches a fresh id twice
//! (a fill, then a hit: B holds the row); A calls `invalidate(id)`; the
//! clock starts when the call returns and stops when B's `invalidations`
//! counter moves (polled with spin hints, a Tokio yield and an OS yield
//! between polls; bounded at 1 s, a timeout). Each line's criterion run is
//! sized from a 100-sample calibration for about 2,000 samples, topped up
//! after.
//!
//! # How to read it
//!
//! The summary's second part, per mode, in µs: `early` (B had evicted by
//! the time A's call returned), `returned->evicted` p50, p99 and max
//! (nearest rank; a timeout counts as 1 s) against the target of issue 9
//! (p99 ≤ 2 ms on loopback, every mode), `called->evicted` and A's
//! `invalidate` call p50 and p99, timeouts, strays (B's counter moved but
//! it still held rows), and the samples later than 100 µs with how many
//! spent at least 90% of their delay runnable but off a CPU
//! (`/proc/<pid>/task/*/schedstat` of the bench and of the three servers):
//! those delays are the scheduler's. `benches/coherence.rs` has the same on
//! one server, with raw baselines.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use criterion::{Criterion, SamplingMode};
use echo_cache::{Cache, Cached};
use echo_cache_testkit::RedisCluster;
use tokio::runtime::Runtime;

use crate::support::invalidation::{
    EVICTION_WAIT, Figures, Invalidation, LATE, Run, WatchFrom, invalidation_line,
    invalidation_samples, quantile, us,
};
use crate::support::load_average;
use crate::tables::{CluBroadcast, CluDurable, CluTracked, serving, slot_of, with_loader};

/// The target of issue 9 for every mode's invalidation p99, on loopback.
const TARGET_P99: Duration = Duration::from_millis(2);

/// One line of part 2.
pub struct CohLine {
    name: &'static str,
    /// The master that owns the table's slot.
    owner: String,
    pub run: Run,
    /// Every sample run under criterion (and the top-up).
    pub samples: Vec<Invalidation>,
}

pub struct Coh {
    rt: Arc<Runtime>,
    a: Cache,
    b: Cache,
    durable: bool,
    /// This process's and the servers' ids, for the run-queue wait.
    pids: Arc<[u32]>,
}

impl Coh {
    pub fn new(cluster: &RedisCluster, rt: &Arc<Runtime>) -> Coh {
        let node = || {
            let _entered = rt.enter();
            let unused = Arc::new(AtomicU64::new(0));
            let builder = Cache::builder()
                .l2_cluster(cluster.urls())
                .l2_timeout(Duration::from_secs(2));
            let builder = with_loader::<CluTracked>(builder, &unused);
            let builder = with_loader::<CluBroadcast>(builder, &unused);
            with_loader::<CluDurable>(builder, &unused)
                .build()
                .expect("the cache builds")
        };
        let (a, b) = (node(), node());
        let both = [&a, &b];
        assert!(
            serving::<CluTracked>(rt, &both, Duration::from_secs(10)),
            "the tracking link never came up"
        );
        assert!(
            serving::<CluBroadcast>(rt, &both, Duration::from_secs(10)),
            "the broadcast link never came up"
        );
        let durable = serving::<CluDurable>(rt, &both, Duration::from_secs(10));
        Coh {
            rt: Arc::clone(rt),
            a,
            b,
            durable,
            pids: cluster.nodes().iter().filter_map(|n| n.pid()).collect(),
        }
    }

    /// A line of table `T`: `n` samples in one task on the runtime.
    fn line<T: Cached>(&self, name: &'static str, cluster: &RedisCluster) -> CohLine {
        let (rt, a, b, pids) = (
            Arc::clone(&self.rt),
            self.a.clone(),
            self.b.clone(),
            Arc::clone(&self.pids),
        );
        let run: Run = Box::new(move |n| {
            let (a, b, pids) = (a.clone(), b.clone(), Arc::clone(&pids));
            let task = rt.spawn(async move {
                invalidation_samples::<T>(&a, &b, &pids, WatchFrom::Return, n).await
            });
            rt.block_on(task).expect("the sampling task")
        });
        CohLine {
            name,
            owner: cluster.node_of_slot(slot_of::<T>()).to_string(),
            run,
            samples: Vec::new(),
        }
    }

    pub fn lines(&self, cluster: &RedisCluster) -> Vec<CohLine> {
        let mut lines = vec![
            self.line::<CluTracked>("tracking", cluster),
            self.line::<CluBroadcast>("broadcast", cluster),
        ];
        if self.durable {
            lines.push(self.line::<CluDurable>("durable", cluster));
        }
        lines
    }
}

/// The criterion group of part 2: one `iter_custom` line per mode, sized
/// from a calibration so that about `samples` samples are taken.
pub fn coherence_group(c: &mut Criterion, lines: &mut [CohLine], calibrate: bool, samples: usize) {
    let mut group = c.benchmark_group("cluster_coherence");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    let size_for = calibrate.then(|| u32::try_from(samples).expect("a small count"));
    for line in lines {
        invalidation_line(
            &mut group,
            line.name,
            &line.run,
            &mut line.samples,
            size_for,
        );
    }
    group.finish();
}

pub fn coherence_summary(coh: &Coh, lines: &[CohLine], load_before: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "2. invalidation on the cluster: A's invalidate returned -> row gone on B, µs\n   \
         runtime multi_thread; load average before: {load_before}, after: {}\n   \
         returned->evicted: 0 when B had evicted by the time A's call returned (early); a \
         timeout (> {EVICTION_WAIT:?}) counts as {EVICTION_WAIT:?}; called->evicted: from A's \
         call; write: A's call\n   late: samples over {} µs; rq: of those, how many spent >= 90% \
         of their delay runnable but off a CPU (the bench's and the servers' threads)\n",
        load_average(),
        LATE.as_micros(),
    );
    let _ = writeln!(
        out,
        "   {:<10} {:<16} {:>5} {:>6} | {:^24} | {:^15} | {:^15} | {:^9} | {:>9}",
        "", "", "", "", "returned->evicted", "called->evicted", "A's write", "", "",
    );
    let _ = writeln!(
        out,
        "   {:<10} {:<16} {:>5} {:>6} | {:>7} {:>7} {:>8} | {:>7} {:>7} | {:>7} {:>7} | {:>3} {:>5} | {:>9}",
        "mode",
        "slot's master",
        "n",
        "early",
        "p50",
        "p99",
        "max",
        "p50",
        "p99",
        "p50",
        "p99",
        "t/o",
        "stray",
        "late (rq)",
    );
    let mut verdicts = String::new();
    for line in lines.iter().filter(|l| !l.samples.is_empty()) {
        let Some(figures) = Figures::of(&line.samples) else {
            let _ = writeln!(out, "   {:<10} no sample held a row", line.name);
            continue;
        };
        let Figures {
            latency,
            delivery,
            write,
            ..
        } = &figures;
        let n = figures.n();
        let p99 = figures.p99();
        #[allow(clippy::cast_precision_loss)]
        let _ = writeln!(
            out,
            "   {:<10} {:<16} {:>5} {:>5.1}% | {:>7.1} {:>7.1} {:>8.1} | {:>7.1} {:>7.1} | {:>7.1} {:>7.1} | {:>3} {:>5} | {:>9}",
            line.name,
            line.owner,
            n,
            100.0 * figures.early as f64 / n as f64,
            us(quantile(latency, 0.50)),
            us(p99),
            us(latency[n - 1]),
            us(quantile(delivery, 0.50)),
            us(quantile(delivery, 0.99)),
            us(quantile(write, 0.50)),
            us(quantile(write, 0.99)),
            figures.timeouts,
            figures.stray,
            format!("{} ({})", figures.late.len(), figures.in_queue),
        );
        let _ = writeln!(verdicts, "   {}", figures.verdict(line.name, TARGET_P99));
    }
    if !coh.durable {
        let _ = writeln!(
            out,
            "   durable: skipped, its table never came up Serving within 10 s"
        );
    }
    let _ = write!(
        out,
        "\n   target of issue 9 (returned->evicted):\n{verdicts}"
    );
    out
}
