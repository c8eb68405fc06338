//! Helpers the benches share: when to run the summary pass, the figures
//! printed around it (median, load average, CPUs, verdicts) and where its
//! table is written. Each bench includes this with `mod support;` and uses
//! only part of it.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

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
