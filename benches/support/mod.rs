//! Helpers the benches share: when to run the summary pass, the figures
//! printed around it (median, load average, CPUs, verdicts) and where its
//! table is written; and the interleaved rounds of a summary pass
//! ([`Rounds`], for `benches/l2.rs` and `benches/cluster`). Below it, what
//! only some benches use: the draws of keys ([`draw`]: one `Rng`, one
//! `Zipf`), an L1 hit's setup, engines and loop (`benches/l1_hit.rs`,
//! `benches/hit_instructions.rs`: [`l1`]), the `Profile` entity of the
//! benches that go to L2 ([`entity`]), the pool of ids and the raw `GET`
//! line of `benches/l2.rs` and `benches/cluster` ([`pool`]), and the
//! invalidation lines of `benches/coherence.rs` and `benches/cluster`
//! ([`invalidation`]). Each bench includes this with `mod support;` (a
//! bench in a folder, with `#[path = "../support/mod.rs"]`) and uses only
//! part of it.

pub mod draw;
pub mod entity;
pub mod invalidation;
pub mod l1;
pub mod pool;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

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
