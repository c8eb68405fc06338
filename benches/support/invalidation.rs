//! The invalidation lines of `benches/coherence.rs` and `benches/cluster`:
//! one write on node A timed to node B's eviction ([`measure`],
//! [`invalidation_sample`], the method of `benches/coherence.rs`), a
//! criterion line of such samples ([`invalidation_line`]) and their
//! figures ([`Figures`], [`quantile`], the CPU run-queue wait of
//! [`run_queue_wait`]). Apart from the rest of the support because only
//! the two benches that time a write's way to another node use it.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::BenchmarkGroup;
use criterion::measurement::WallTime;
use echo_cache::{Cache, Cached, Id, Source};

use super::verdict;

/// How long an invalidation sample waits for node B's eviction before it
/// counts as a timeout.
pub const EVICTION_WAIT: Duration = Duration::from_secs(1);
/// Timeouts after which a line of invalidation samples is abandoned (each
/// costs [`EVICTION_WAIT`]).
pub const MAX_TIMEOUTS: usize = 10;
/// Samples run (and discarded) to size criterion's run of an invalidation
/// line ([`invalidation_line`]).
pub const CALIBRATION: u64 = 100;
/// An invalidation later than this (write returned → evicted) is looked at
/// for run-queue wait ([`Figures::late`]).
pub const LATE: Duration = Duration::from_micros(100);

/// One invalidation, timed the way `benches/coherence.rs` times it: node B
/// holds a row, node A invalidates it, and B's table is watched from the
/// moment A's call returned (or was made: [`WatchFrom`]) until B has
/// applied the invalidation. The raw baselines of `benches/coherence.rs`
/// (a write on one connection, its push on another) are timed the same
/// way ([`measure`]).
#[derive(Clone, Copy, Debug)]
pub struct Invalidation {
    /// How long A's write (`invalidate`) took (called → returned).
    pub write: Duration,
    /// When B's eviction was seen, from A's call; `None` if not within
    /// [`EVICTION_WAIT`].
    pub evicted: Option<Duration>,
    /// Whether B held the row before the write (if not, no latency).
    pub held: bool,
    /// B's counter moved but B still held rows.
    pub stray: bool,
    /// Time the threads of the given processes spent runnable but off a
    /// CPU during the sample (see [`run_queue_wait`]).
    pub queued: Duration,
}

impl Invalidation {
    /// Write returned → eviction seen: 0 if B had evicted by the time A's
    /// call returned, [`EVICTION_WAIT`] on a timeout.
    pub fn latency(&self) -> Duration {
        self.evicted
            .map_or(EVICTION_WAIT, |at| at.saturating_sub(self.write))
    }

    /// Write called → eviction seen ([`EVICTION_WAIT`] on a timeout).
    pub fn delivery(&self) -> Duration {
        self.evicted.unwrap_or(EVICTION_WAIT)
    }

    /// B had evicted by the time A's call returned.
    pub fn early(&self) -> bool {
        self.evicted.is_some_and(|at| at <= self.write)
    }

    /// Eviction seen − write returned, in µs, signed (negative only with
    /// [`WatchFrom::Call`]); `None` on a timeout.
    pub fn lead_us(&self) -> Option<f64> {
        self.evicted
            .map(|at| (at.as_secs_f64() - self.write.as_secs_f64()) * 1e6)
    }
}

/// From when [`measure`] watches for B's eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFrom {
    /// From the moment the write returned: an eviction seen at the first
    /// poll is dated at the return (0 latency, "early"), one before it
    /// cannot be dated.
    Return,
    /// From the moment the write is called, polled in the same task joined
    /// with it: the eviction is dated even when it comes before the return,
    /// at the price of an observer that spins during the write.
    Call,
}

/// Polls `seen` until it holds or [`EVICTION_WAIT`] has passed since
/// `from`; when it held. Between two polls: a few `spin_loop` hints, a
/// Tokio yield (the runtime's other tasks run) and an OS yield (a thread
/// waiting for a CPU, often the worker about to deliver the eviction,
/// gets this one; `benches/coherence.rs` says why).
pub async fn wait_until(mut seen: impl FnMut() -> bool, from: Instant) -> Option<Instant> {
    loop {
        if seen() {
            return Some(Instant::now());
        }
        if from.elapsed() > EVICTION_WAIT {
            return None;
        }
        for _ in 0..16 {
            std::hint::spin_loop();
        }
        // Let the runtime's other tasks run on this thread, then let the OS
        // give this CPU to a thread that waits for one: on a busy machine
        // that is often the worker that would deliver the eviction.
        tokio::task::yield_now().await;
        std::thread::yield_now();
    }
}

/// Runs `write` and dates, from its call, its return and the first poll at
/// which `seen` holds ([`wait_until`]), watching from `watch`. The sample
/// is `held` and not `stray` (the caller knows better); its `queued` is
/// the run-queue wait of this process and of `pids` over the sample.
pub async fn measure(
    write: impl Future<Output = ()>,
    mut seen: impl FnMut() -> bool,
    pids: &[u32],
    watch: WatchFrom,
) -> Invalidation {
    let queued_before = run_queue_wait(pids);
    let called = Instant::now();
    let (returned, evicted) = match watch {
        WatchFrom::Return => {
            write.await;
            let returned = Instant::now();
            let evicted = if seen() {
                Some(returned)
            } else {
                wait_until(seen, returned).await
            };
            (returned, evicted)
        }
        WatchFrom::Call => {
            let write = async {
                write.await;
                Instant::now()
            };
            tokio::join!(write, wait_until(seen, called))
        }
    };
    Invalidation {
        write: returned - called,
        evicted: evicted.map(|at| at - called),
        held: true,
        stray: false,
        queued: run_queue_wait(pids).saturating_sub(queued_before),
    }
}

/// One sample of `benches/coherence.rs`'s method: B fetches a fresh id of
/// `T` until it holds the row (a fill, then a hit); A calls `invalidate`;
/// B's `stats::<T>().invalidations` is polled ([`measure`], from `watch`).
/// `pids`: the processes whose run-queue wait is summed into
/// [`Invalidation::queued`] (this one is always included).
pub async fn invalidation_sample<T: Cached>(
    a: &Cache,
    b: &Cache,
    pids: &[u32],
    watch: WatchFrom,
) -> Invalidation {
    let id = Id::<T>::mint();
    let mut held = false;
    for _ in 0..100 {
        b.fetch(id).await.expect("B fills");
        if b.fetch(id).await.expect("B reads").source() == Source::Hit {
            held = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if !held {
        return Invalidation {
            write: Duration::ZERO,
            evicted: None,
            held,
            stray: false,
            queued: Duration::ZERO,
        };
    }
    let before = b.stats::<T>().invalidations;
    let write = async {
        a.invalidate(id).await.expect("A invalidates");
    };
    let seen = || b.stats::<T>().invalidations != before;
    let mut sample = measure(write, seen, pids, watch).await;
    if sample.evicted.is_none() {
        // A late push must not count for the next sample.
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.flush::<T>();
    } else {
        sample.stray = b.stats::<T>().size != 0;
    }
    sample
}

/// `n` [`invalidation_sample`]s in turn; panics at [`MAX_TIMEOUTS`]
/// timeouts.
pub async fn invalidation_samples<T: Cached>(
    a: &Cache,
    b: &Cache,
    pids: &[u32],
    watch: WatchFrom,
    n: u64,
) -> Vec<Invalidation> {
    let mut samples = Vec::new();
    let mut timeouts = 0;
    for _ in 0..n {
        let sample = invalidation_sample::<T>(a, b, pids, watch).await;
        timeouts += usize::from(sample.held && sample.evicted.is_none());
        samples.push(sample);
        assert!(
            timeouts < MAX_TIMEOUTS,
            "{timeouts} evictions of {} never seen within {EVICTION_WAIT:?}",
            T::spec().name()
        );
    }
    samples
}

/// Runs `n` invalidation samples of a line; they are returned.
pub type Run = Box<dyn Fn(u64) -> Vec<Invalidation>>;

/// Line `name` of `group`, by `iter_custom`: criterion's iterations are
/// samples of `run`, each timed as its [`Invalidation::delivery`] (unlike
/// the latency never 0, which keeps criterion's sizing sane), and every
/// sample is kept in `samples`. With `size_for`, the run is first sized
/// from a [`CALIBRATION`]-sample probe (discarded) for about that many
/// samples (criterion's warm-up has the last word).
pub fn invalidation_line(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    run: &Run,
    samples: &mut Vec<Invalidation>,
    size_for: Option<u32>,
) {
    if let Some(target) = size_for {
        let probe = run(CALIBRATION);
        let mean = probe.iter().map(Invalidation::delivery).sum::<Duration>()
            / u32::try_from(probe.len()).expect("a small count");
        let mean = mean.max(Duration::from_micros(1));
        group
            .warm_up_time(mean * 50)
            .measurement_time(mean * target);
    }
    group.bench_function(name, |bencher| {
        bencher.iter_custom(|iters| {
            let batch = run(iters);
            let total = batch.iter().map(Invalidation::delivery).sum::<Duration>();
            samples.extend(batch);
            total
        });
    });
}

/// The figures of a line of invalidation samples, over the samples where B
/// held the row.
pub struct Figures<'a> {
    /// The samples where B held the row (the others have no latency).
    pub held: Vec<&'a Invalidation>,
    /// Their [`Invalidation::latency`], sorted.
    pub latency: Vec<Duration>,
    /// Their [`Invalidation::delivery`], sorted.
    pub delivery: Vec<Duration>,
    /// Their A's write call, sorted.
    pub write: Vec<Duration>,
    /// How many B had evicted by the time A's call returned.
    pub early: usize,
    /// How many timed out.
    pub timeouts: usize,
    /// How many were stray.
    pub stray: usize,
    /// The ones later than [`LATE`], by latency.
    pub late: Vec<&'a Invalidation>,
    /// How many of `late` spent at least 90% of their delay runnable but
    /// off a CPU ([`Invalidation::queued`]): those delays are the CPU
    /// scheduler's.
    pub in_queue: usize,
}

impl<'a> Figures<'a> {
    /// The figures of `samples`; `None` if no sample held a row.
    pub fn of(samples: &'a [Invalidation]) -> Option<Figures<'a>> {
        let held: Vec<&Invalidation> = samples.iter().filter(|s| s.held).collect();
        if held.is_empty() {
            return None;
        }
        let sorted = |f: fn(&Invalidation) -> Duration| {
            let mut v: Vec<Duration> = held.iter().map(|s| f(s)).collect();
            v.sort();
            v
        };
        let mut late: Vec<&Invalidation> = held
            .iter()
            .copied()
            .filter(|s| s.latency() > LATE)
            .collect();
        late.sort_by_key(|s| s.latency());
        // Within 10%: both are read around the same window, not exactly it.
        let in_queue = late
            .iter()
            .filter(|s| s.queued.as_secs_f64() >= 0.9 * s.latency().as_secs_f64())
            .count();
        Some(Figures {
            latency: sorted(Invalidation::latency),
            delivery: sorted(Invalidation::delivery),
            write: sorted(|s| s.write),
            early: held.iter().filter(|s| s.early()).count(),
            timeouts: held.iter().filter(|s| s.evicted.is_none()).count(),
            stray: held.iter().filter(|s| s.stray).count(),
            held,
            late,
            in_queue,
        })
    }

    /// How many samples held a row.
    pub fn n(&self) -> usize {
        self.held.len()
    }

    /// The p99 latency (nearest rank).
    pub fn p99(&self) -> Duration {
        quantile(&self.latency, 0.99)
    }

    /// Line `name`'s verdict: its p99 latency against `target`.
    pub fn verdict(&self, name: &str, target: Duration) -> String {
        let p99 = self.p99();
        format!(
            "{name:<10} p99 {:>8.1} µs (n = {}), target <= {:.0} µs: {}",
            us(p99),
            self.n(),
            us(target),
            verdict(p99 <= target)
        )
    }
}

/// The time every thread of this process and of `pids` has spent runnable
/// but not running, so far (the second field of
/// `/proc/<pid>/task/<tid>/schedstat`); zero where that is not available.
pub fn run_queue_wait(pids: &[u32]) -> Duration {
    let dirs = std::iter::once(PathBuf::from("/proc/self/task")).chain(
        pids.iter()
            .map(|pid| PathBuf::from(format!("/proc/{pid}/task"))),
    );
    let waited = dirs
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(waited)
}

/// The nearest-rank `p` quantile of sorted `values`.
pub fn quantile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// µs of a duration, for the tables.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
