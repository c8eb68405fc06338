//! Warm start: the hit ratio of a node started cold against one started
//! warm (`warm = "ready"`), over its first seconds of a Zipf load, on a
//! real `valkey-server`/`redis-server` on loopback.
//!
//! # What runs
//!
//! One table of 10,000 rows (`max_size`), its hot list 10,000 ids
//! (`Limits::warm_ids`), rows living 10 minutes. The load: ids drawn by
//! Zipf(0.99) over 100,000 ids, from fixed seeds, at a steady 5,000
//! reads a second (one task; each millisecond it reads what the rate
//! says it is owed), the loader answering at once (the figure is the hit
//! ratio, not the loader's time).
//!
//! 1. Node A serves 200,000 reads of the load: L2 holds the frames of
//!    every id it read, and A merges its hottest ids into the fleet's list
//!    ([`Cache::publish_hot`], as it would every 10 s); then it stops.
//! 2. Node *cold* starts, and its L1 is flushed once it is ready (L2 is
//!    as warm as for the other: only its L1 is cold, as a node of a table
//!    not declared `warm`); node *warm* starts and warms from the list
//!    before `ready()` returns (the time it took is printed). Each then
//!    serves the same stretch of the load, from another seed than A's,
//!    for 10 s, and its hits are counted second by second (a read is a
//!    hit if it answered from L1, [`Source::Hit`]).
//!
//! The cold node runs first: the ids it loads (the Zipf tail A never read)
//! are in L2 when the warm node reads them, which moves their `fills`
//! and `l2_hits`, not their hit ratio (L1's).
//!
//! Measured (2 cores shared, load average 9): cold 67.9 % over the first
//! 10 s (49 % in the first second, 73 % from the sixth on), warm 77.8 %
//! (78 % from the first second); the warm node was ready in 72.5 ms with
//! 10,000 rows in L1.
//!
//! `WARM_SECONDS=n` changes the 10 s; `cargo test --benches` runs 1 s and
//! 20,000 reads of A. The figures are printed and written to
//! `<target>/warm_start.txt`.
//!
//! ```sh
//! cargo bench -p echo-cache-benches --bench warm_start
//! ```

use std::convert::Infallible;
use std::time::{Duration, Instant};

use echo_cache::{Cache, Id, Limits, Source, Stats, near_cache};
use echo_cache_testkit::RedisServer;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::draw::{Rng, Zipf};
use support::{benchmarking, load_average, publish};

#[near_cache(
    kind = "BWS",
    ttl_ms = 600_000,
    max_size = 10_000,
    name = "bench_warm",
    warm = "ready"
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Item {
    n: u64,
    body: String,
}

/// Rows L1 keeps, and hot ids listed and warmed.
const ROWS: usize = 10_000;
/// Ids the load draws from.
const IDS: usize = 100_000;
/// Reads a second.
const RATE: u64 = 5_000;

fn node(server: &RedisServer) -> Cache {
    Cache::builder()
        .open::<Item>()
        .l2(server.url())
        .l2_timeout(Duration::from_secs(1))
        .limits::<Item>(Limits::new().warm_ids(ROWS))
        .loader(|id: Id<Item>| async move {
            Ok::<_, Infallible>(Some(Item {
                n: id.payload(),
                body: "x".repeat(64),
            }))
        })
        .build()
        .expect("cache builds")
}

/// The hits and reads of each second of `seconds` of the load drawn from
/// `seed` over `ids` on `cache`.
async fn serve(cache: &Cache, ids: &[Id<Item>], seed: u64, seconds: u64) -> Vec<(u64, u64)> {
    let zipf = Zipf::new(ids.len(), 0.99);
    let mut rng = Rng(seed);
    let mut per_second = vec![(0_u64, 0_u64); usize::try_from(seconds).expect("seconds")];
    let start = Instant::now();
    let mut done = 0_u64;
    loop {
        let elapsed = start.elapsed();
        if elapsed >= Duration::from_secs(seconds) {
            return per_second;
        }
        let owed = u64::try_from(elapsed.as_micros()).expect("µs") * RATE / 1_000_000;
        let second = usize::try_from(elapsed.as_secs()).expect("s");
        while done < owed {
            let id = ids[zipf.rank(&mut rng)];
            let fetched = cache.fetch(id).await.expect("fetch");
            per_second[second].0 += u64::from(fetched.source() == Source::Hit);
            per_second[second].1 += 1;
            done += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Hits over reads, in percent.
#[allow(clippy::cast_precision_loss)]
fn ratio((hits, reads): (u64, u64)) -> f64 {
    if reads == 0 {
        return 0.0;
    }
    100.0 * hits as f64 / reads as f64
}

fn sum(seconds: &[(u64, u64)]) -> (u64, u64) {
    seconds
        .iter()
        .fold((0, 0), |(h, r), &(hits, reads)| (h + hits, r + reads))
}

fn line(name: &str, seconds: &[(u64, u64)], stats: &Stats) -> String {
    let each: Vec<String> = seconds
        .iter()
        .map(|&s| format!("{:.0}", ratio(s)))
        .collect();
    format!(
        "{name:<5} {:>6.1} %  {:>7}  {:>6}  {:>8}  {:>7}  {}",
        ratio(sum(seconds)),
        sum(seconds).1,
        stats.warmed,
        stats.l2_hits,
        stats.fills,
        each.join(" ")
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let full = benchmarking();
    let seconds: u64 = std::env::var("WARM_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if full { 10 } else { 1 });
    let a_reads = if full { 200_000 } else { 20_000 };
    let load_before = load_average();
    let server = RedisServer::start();
    let ids: Vec<Id<Item>> = (0..IDS).map(|_| Id::mint()).collect();

    // 1. A serves the load; its hottest ids are listed.
    let a = node(&server);
    a.ready().await;
    let zipf = Zipf::new(IDS, 0.99);
    let mut rng = Rng(1);
    for _ in 0..a_reads {
        a.fetch(ids[zipf.rank(&mut rng)]).await.expect("fetch");
    }
    let a_ratio = ratio((a.stats::<Item>().hits, a_reads));
    let listed = a.publish_hot::<Item>().await;
    drop(a);

    // 2. A cold node and a warm one serve the same stretch of the load.
    let cold = node(&server);
    cold.ready().await;
    cold.flush::<Item>();
    let cold_seconds = serve(&cold, &ids, 2, seconds).await;
    let cold_stats = cold.stats::<Item>();
    drop(cold);

    let started = Instant::now();
    let warm = node(&server);
    warm.ready().await;
    let warming = started.elapsed();
    let warm_rows = warm.stats::<Item>().size;
    let warm_seconds = serve(&warm, &ids, 2, seconds).await;
    let warm_stats = warm.stats::<Item>();

    let table = format!(
        "warm start: Zipf(0.99) over {IDS} ids at {RATE} reads/s, L1 of {ROWS} rows, \
         on {} {}\n\
         node A: {a_reads} reads, hit ratio {a_ratio:.1} %, {listed} hot ids listed\n\
         warm node ready in {warming:.1?} with {warm_rows} rows in L1\n\n\
         node  first {seconds} s   reads  warmed  l2 hits  fills  hit ratio each second (%)\n\
         {}\n{}\n\n\
         (the cold node warmed too, then flushed its L1; it ran first, so the ids it \
         loaded were in L2 for the warm one: `fills`, not the hit ratio, shows it)\n\
         load average before: {load_before}, after: {}",
        "valkey/redis",
        server.version(),
        line("cold", &cold_seconds, &cold_stats),
        line("warm", &warm_seconds, &warm_stats),
        load_average(),
    );
    publish(&table, "warm_start.txt");
}
