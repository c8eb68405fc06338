//! Instructions per L1 hit, counted by callgrind: the same measure for
//! every change to the hit path (issue 27), deterministic however loaded
//! the machine is. `scripts/instructions` builds this, runs it under
//! valgrind for every engine, row count and pattern, and prints the table.
//!
//! # What runs
//!
//! ```text
//! hit_instructions ENGINE ROWS HITS PATTERN...
//! ```
//!
//! fills one engine (`echo`, `quick_cache`, `moka`, `dashmap`, `floor`,
//! or `loop`: no engine, the loop alone) with `ROWS` ids (at most
//! 1,000,000) exactly as `benches/l1_hit.rs` does (`support::l1`: the same
//! entity, values, capacities, checks and key sequences; echo-cache's table
//! is half full at 100,000 and at 1,000,000 rows), then for each `PATTERN`
//! (`uniform`, `zipf`, `hot`) calls `support::l1::hits` twice along the
//! pattern's first sequence: with 0 hits, then with `HITS`. That function
//! is the loop `benches/l1_hit.rs` times, its body the hit alone.
//!
//! Under `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='*support::l1::hits*' --dump-after='*support::l1::hits*'`
//! each call is counted alone, in a dump of its own (numbered in the order
//! of the calls, as printed), and nothing else is: instructions per hit =
//! (count(`HITS`) − count(0)) / `HITS`, the loop's own instructions
//! included (the `loop` engine's figure).
//!
//! The ids are minted and the hashers seeded at random, as in
//! `benches/l1_hit.rs`, so probe lengths, and the count, vary from run to
//! run: echo-cache's and moka's by up to about 4 instructions per hit, the
//! others' by about 1 at most. `REPEAT=n scripts/instructions` takes the
//! median of n runs.
//!
//! Run with no arguments (`cargo bench`, `cargo test --benches`) it says
//! how to run it, and does nothing else.

use std::hint::black_box;
use std::process::ExitCode;

use echo_cache::{Cache, near_cache};

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::l1::{Engine, Numbered, Pattern, hits, ids, patterns};

support::l1::entity! {
    /// The cached entity of up to 100,000 rows: `benches/l1_hit.rs`'s.
    #[near_cache(
        kind = "ENT",
        ttl_ms = 3_600_000,
        coherence = "none",
        max_size = 200_000
    )]
    pub struct Entity;
}

support::l1::entity! {
    /// The same, for up to 1,000,000 rows: half full at a million too.
    #[near_cache(
        kind = "BIG",
        ttl_ms = 3_600_000,
        coherence = "none",
        max_size = 2_000_000
    )]
    pub struct Big;
}

const USAGE: &str = "usage: hit_instructions ENGINE ROWS HITS PATTERN...\n  \
    ENGINE: echo, quick_cache, moka, dashmap, floor or loop; ROWS: at most 1000000;\n  \
    PATTERN: uniform, zipf or hot. Run it under callgrind: see scripts/instructions.";

/// No engine: the loop's own instructions.
struct Nothing;

impl Engine for Nothing {
    #[inline]
    fn hit(&self, key: u64) {
        black_box(key);
    }
}

/// For each pattern, 0 hits then `n`, each call printed before it runs.
fn count<E: Engine>(engine: &E, patterns: &[&Pattern], n: u64) {
    for pattern in patterns {
        for n in [0, n] {
            println!("{} {n}", pattern.name);
            hits(engine, &pattern.seqs[0], black_box(n));
        }
    }
}

/// Fills `engine` with `rows` ids of `T` and counts its hits.
fn run<T: Numbered>(engine: &str, rows: usize, n: u64, names: &[String]) -> Result<(), String> {
    let ids = ids::<T>(rows);
    let all = patterns(&ids);
    let chosen = names
        .iter()
        .map(|name| {
            all.iter()
                .find(|p| p.name == name)
                .ok_or_else(|| format!("no pattern {name:?}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match engine {
        "echo" => {
            // Both tables declared here need a loader or none.
            let builder = Cache::builder()
                .without_loader::<Entity>()
                .without_loader::<Big>();
            let echo = support::l1::echo::<T>(builder, &ids);
            count(&echo, &chosen, n);
        }
        "quick_cache" => {
            let quick = support::l1::quick::<T>(&ids);
            quick.check(&ids);
            count(&quick, &chosen, n);
        }
        "moka" => {
            let moka = support::l1::moka::<T>(&ids);
            moka.check(&ids);
            count(&moka, &chosen, n);
        }
        "dashmap" => {
            let dash = support::l1::dash::<T>(&ids);
            dash.check(&ids);
            count(&dash, &chosen, n);
        }
        "floor" => {
            let floor = support::l1::floor::<T>(&ids);
            floor.check(&ids);
            count(&floor, &chosen, n);
        }
        "loop" => count(&Nothing, &chosen, n),
        other => return Err(format!("no engine {other:?}")),
    }
    Ok(())
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; criterion's other flags do not apply.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [engine, rows, n, names @ ..] = args.as_slice() else {
        println!(
            "hit_instructions: counts instructions under callgrind; run scripts/instructions\n{USAGE}"
        );
        return ExitCode::SUCCESS;
    };
    let parsed = rows.parse::<usize>().ok().zip(n.parse::<u64>().ok());
    let result = match parsed {
        Some((rows, n)) if rows <= 100_000 => run::<Entity>(engine, rows, n, names),
        Some((rows, n)) if rows <= 1_000_000 => run::<Big>(engine, rows, n, names),
        _ => Err(format!("bad ROWS or HITS: {rows} {n}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hit_instructions: {e}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}
