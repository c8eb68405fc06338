//! The quick start (examples/quickstart.rs) run as a newcomer runs it: this
//! binary runs itself again as the program (the ignored test `program`,
//! selected by an environment variable), and reads what it prints: what a
//! reader needs, no `Debug` dump of a table's counters.

#[path = "../examples/quickstart.rs"]
mod quickstart;

use std::process::Command;

/// Set in the child's environment to run the quick start.
const RUN: &str = "ECHO_CACHE_QUICKSTART";

/// Not a test: the quick start, run by the test below as a child process.
#[test]
#[ignore = "the quick start itself, run by the test as a child process"]
fn program() {
    if std::env::var_os(RUN).is_some() {
        quickstart::main().expect("the quick start runs");
    }
}

#[test]
fn the_quick_start_prints_what_a_reader_needs() {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["program", "--exact", "--ignored", "--nocapture"])
        .env(RUN, "1")
        .output()
        .expect("the quick start runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("an L1 hit: true"), "{stdout}");
    assert!(stdout.contains("1 flight, 1 loader call,"), "{stdout}");
    assert!(!stdout.contains("Stats {"), "a Debug dump:\n{stdout}");
}
