//! Helpers the benches share: when to run the summary pass, the figures
//! printed around it (median, load average, CPUs, verdicts) and where its
//! table is written; the interleaved rounds of a summary pass ([`Rounds`]);
//! and one invalidation timed from node A's call returning to node B's
//! eviction ([`invalidation_sample`], the method of `benches/coherence.rs`).
//! Each bench includes this with `mod support;` and uses only part of it.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Id, Source};

/// Whether this run is benchmarking (`cargo bench`), so the summary pass
/// runs: not when `cargo test --benches` runs each line once, nor under
/// `--list` or `--profile-time`.
pub fn benchmarking() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench")
        && !args
            .iter()
            .any(|a| a == "--test" || a == "--list" || a.starts_with("--profile-time"))
}

/// Polls `future` once with a no-op waker.
pub fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    pin!(future)
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
}

/// The median of `values` (the upper middle one of an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`, or `unknown`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The CPUs this process may use (0 if unknown).
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
}

/// `met` or `MISSED`, for a target.
pub fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

/// Prints the summary `table`, then writes it to `file` in the target
/// directory and says where (or why it could not).
pub fn publish(table: &str, file: &str) {
    println!("\n{table}");
    let path = target_dir().join(file);
    match std::fs::write(&path, table) {
        Ok(()) => println!("(written to {})", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
}

/// `target/` (or `$CARGO_TARGET_DIR`): the bench runs from
/// `<target>/release/deps/`.
fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return dir.into();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// A line of a summary pass: its name, and its timed loop of `n`
/// operations (the time they took).
pub type TimedLine<'a> = (&'static str, Box<dyn Fn(u64) -> Duration + 'a>);

/// µs per operation of every line in every round of a summary pass: the
/// lines interleaved round-robin from a rotating start, so that a drift of
/// the machine's load falls on every line of a round alike.
pub struct Rounds {
    names: Vec<&'static str>,
    /// `[line][round]`.
    us: Vec<Vec<f64>>,
}

impl Rounds {
    /// Runs `rounds` rounds of every line, `batch(name)` operations each.
    pub fn run(lines: &[TimedLine<'_>], rounds: usize, batch: impl Fn(&str) -> u64) -> Rounds {
        let mut us = vec![Vec::with_capacity(rounds); lines.len()];
        for round in 0..rounds {
            for k in 0..lines.len() {
                let which = (round + k) % lines.len();
                let (name, time) = &lines[which];
                let n = batch(name);
                #[allow(clippy::cast_precision_loss)]
                us[which].push(time(n).as_secs_f64() * 1e6 / n as f64);
            }
        }
        Rounds {
            names: lines.iter().map(|(name, _)| *name).collect(),
            us,
        }
    }

    /// The lines, in the order given.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// µs per operation of line `name`, round by round.
    pub fn line(&self, name: &str) -> &[f64] {
        let at = self.names.iter().position(|n| *n == name);
        &self.us[at.unwrap_or_else(|| panic!("no line {name:?}"))]
    }

    /// The median over rounds of line `name`.
    pub fn median(&self, name: &str) -> f64 {
        median(self.line(name))
    }

    /// The least disturbed round of line `name`.
    pub fn min(&self, name: &str) -> f64 {
        self.line(name)
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }

    /// The median over rounds of `f`, given each line's time in one round:
    /// ratios and differences of lines measured close together.
    pub fn paired(&self, f: impl Fn(&dyn Fn(&str) -> f64) -> f64) -> f64 {
        let rounds = self.us.first().map_or(0, Vec::len);
        let per_round: Vec<f64> = (0..rounds)
            .map(|round| f(&|name: &str| self.line(name)[round]))
            .collect();
        median(&per_round)
    }
}

/// How long an invalidation sample waits for node B's eviction before it
/// counts as a timeout.
pub const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// One invalidation, timed the way `benches/coherence.rs` times it: node B
/// holds a row, node A invalidates it, and B's table is watched from the
/// moment A's call returned until B has applied the invalidation.
#[derive(Clone, Copy, Debug)]
pub struct Invalidation {
    /// How long A's `invalidate` took (called → returned).
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
        tokio::task::yield_now().await;
        std::thread::yield_now();
    }
}

/// One sample of `benches/coherence.rs`'s method: B fetches a fresh id of
/// `T` until it holds the row (a fill, then a hit); A calls `invalidate`;
/// B's `stats::<T>().invalidations` is polled ([`wait_until`]) from the
/// moment the call returned. `pids`: the processes whose run-queue wait is
/// summed into [`Invalidation::queued`] (this one is always included).
pub async fn invalidation_sample<T: Cached>(a: &Cache, b: &Cache, pids: &[u32]) -> Invalidation {
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
    let seen = || b.stats::<T>().invalidations != before;
    let queued_before = run_queue_wait(pids);
    let called = Instant::now();
    a.invalidate(id).await.expect("A invalidates");
    let returned = Instant::now();
    let evicted = if seen() {
        Some(returned)
    } else {
        wait_until(seen, returned).await
    };
    let queued = run_queue_wait(pids).saturating_sub(queued_before);
    if evicted.is_none() {
        // A late push must not count for the next sample.
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.flush::<T>();
    }
    Invalidation {
        write: returned - called,
        evicted: evicted.map(|at| at - called),
        held,
        stray: evicted.is_some() && b.stats::<T>().size != 0,
        queued,
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
