//! Batch fetch, side by side: `fetch_many` of N ids cold in L1 and warm in
//! L2, next to N sequential `fetch`es of them, N `fetch`es joined at once,
//! and a raw `MGET` of the same keys.
//!
//! # What runs
//!
//! The bench starts its own `redis-server` (or `valkey-server`) on a free
//! loopback port with the testkit fixture, and a `current_thread` Tokio
//! runtime. Node A fills L2, through its loader, for [`N`] random 64-bit
//! ids of a `Profile` of about 100 bytes (a realistic user row; the frame
//! size is printed). Node B is measured: its L1 is flushed, untimed, before
//! each operation, so every id of every operation is an L2 hit. Its loader
//! counts its calls: a fill that did not come from L2 is reported.
//!
//! The lines of group `batch` (one operation = all N ids):
//!
//! - `raw_mget`: `MGET` of the N keys on a `redis::aio::ConnectionManager`
//!   (the connection echo-cache uses inside), the frames returned as
//!   `Vec<Option<Vec<u8>>>`, not decoded: the floor.
//! - `fetch_many`: `cache.fetch_many(ids)`: one `MGET`, the N frames
//!   checked and decoded, N flights landed in L1.
//! - `fetch_joined`: the N `cache.fetch(id)` futures joined
//!   (`join_all`): what a caller without `fetch_many` would write, N `GET`s
//!   pipelined on the connection.
//! - `fetch_sequential`: the N `cache.fetch(id)` awaited one after another:
//!   N round trips.
//!
//! After criterion, a summary pass runs the lines round-robin from a
//! rotating start (15 rounds) and prints each line's median and the ratios
//! of lines within a round (medians over rounds), with the load average,
//! and writes them to `echo-batch-bench-summary.txt` in the target
//! directory.
//!
//! ```sh
//! cargo bench --bench batch
//! ECHO_BATCH_BENCH_N=1000 cargo bench --bench batch
//! ```

use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use echo_cache::{Cache, Cached, Id, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;
use redis::aio::ConnectionManager;
use tokio::runtime::Runtime;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::draw::Rng;
use support::{Rounds, TimedLine, benchmarking, cpus, load_average, publish};

/// Ids per operation, unless `ECHO_BATCH_BENCH_N` says otherwise.
const N: usize = 100;
/// Rounds of the summary pass.
const ROUNDS: usize = 15;
/// Operations per line per round of the summary pass.
const OPS: u64 = 40;

support::entity::profile! {
    /// The cached entity: about 100 bytes, in memory and on the wire.
    #[near_cache(kind = "PRF", ttl_ms = 3_600_000, coherence = "none")]
    pub struct Profile;
}

/// `n` random 64-bit numbers (SplitMix64, seeded by the clock).
fn random_payloads(n: usize) -> Vec<u64> {
    let mut rng = Rng(u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos()
            % u128::from(u64::MAX),
    )
    .expect("fits"));
    (0..n).map(|_| rng.next()).collect()
}

struct Bench {
    runtime: Runtime,
    /// Node B, measured.
    cache: Cache,
    /// Calls of node B's loader (should stay 0).
    loads: Arc<AtomicUsize>,
    ids: Arc<[Id<Profile>]>,
    keys: Arc<[String]>,
    manager: ConnectionManager,
    frame_len: usize,
    /// Kept alive for the whole run; killed on drop.
    _server: RedisServer,
}

impl Bench {
    fn new(n: usize) -> Bench {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the runtime starts");
        let server = RedisServer::start();
        let url = server.url();
        let node = |loads: Arc<AtomicUsize>| {
            runtime.block_on(async {
                Cache::builder()
                    .l2(url.clone())
                    .loader(move |id: Id<Profile>| {
                        loads.fetch_add(1, Relaxed);
                        async move { Ok::<_, std::io::Error>(Some(Profile::of(id))) }
                    })
                    .build()
                    .expect("the cache builds")
            })
        };
        let a = node(Arc::new(AtomicUsize::new(0)));
        let loads = Arc::new(AtomicUsize::new(0));
        let cache = node(Arc::clone(&loads));

        let ids: Arc<[Id<Profile>]> = random_payloads(n)
            .into_iter()
            .map(Id::from_payload)
            .collect();
        let keys: Arc<[String]> = (ids.iter())
            .map(|id| keyspace::key(Profile::spec(), &id.raw()))
            .collect();
        runtime.block_on(async {
            for fetched in a.fetch_many(ids.iter().copied()).await {
                assert_eq!(fetched.expect("node A fills").source(), Source::Fill);
            }
        });
        let frame: Vec<u8> = server.query(redis::cmd("GET").arg(&keys[0]));
        let manager = runtime.block_on(async {
            let client = redis::Client::open(url.as_str()).expect("the URL parses");
            ConnectionManager::new(client)
                .await
                .expect("the connection manager connects")
        });
        Bench {
            runtime,
            cache,
            loads,
            ids,
            keys,
            manager,
            frame_len: frame.len(),
            _server: server,
        }
    }

    fn lines(&self) -> Vec<TimedLine<'_>> {
        vec![
            ("raw_mget", Box::new(|n| self.raw_mget(n))),
            ("fetch_many", Box::new(|n| self.fetch_many(n))),
            ("fetch_joined", Box::new(|n| self.fetch_joined(n))),
            ("fetch_sequential", Box::new(|n| self.fetch_sequential(n))),
        ]
    }

    fn raw_mget(&self, n: u64) -> Duration {
        let (mut conn, keys) = (self.manager.clone(), Arc::clone(&self.keys));
        self.runtime.block_on(async move {
            let start = Instant::now();
            for _ in 0..n {
                let mut mget = redis::cmd("MGET");
                for key in keys.iter() {
                    mget.arg(key);
                }
                let frames: Vec<Option<Vec<u8>>> =
                    mget.query_async(&mut conn).await.expect("MGET answers");
                assert!(frames.iter().all(Option::is_some), "every frame there");
                black_box(frames);
            }
            start.elapsed()
        })
    }

    /// `n` operations of `op` on node B, its L1 flushed (untimed) before each.
    fn timed(&self, n: u64, op: impl AsyncFn(Cache, Arc<[Id<Profile>]>)) -> Duration {
        self.runtime.block_on(async {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                self.cache.flush::<Profile>();
                let start = Instant::now();
                op(self.cache.clone(), Arc::clone(&self.ids)).await;
                total += start.elapsed();
            }
            total
        })
    }

    fn fetch_many(&self, n: u64) -> Duration {
        self.timed(n, async |cache, ids| {
            for fetched in cache.fetch_many(ids.iter().copied()).await {
                black_box(fetched.expect("an L2 hit"));
            }
        })
    }

    fn fetch_joined(&self, n: u64) -> Duration {
        self.timed(n, async |cache, ids| {
            let fetches = ids.iter().map(|&id| cache.fetch(id));
            for fetched in futures_util::future::join_all(fetches).await {
                black_box(fetched.expect("an L2 hit"));
            }
        })
    }

    fn fetch_sequential(&self, n: u64) -> Duration {
        self.timed(n, async |cache, ids| {
            for &id in ids.iter() {
                black_box(cache.fetch(id).await.expect("an L2 hit"));
            }
        })
    }
}

fn summary(bench: &Bench, n: usize) -> String {
    let lines = bench.lines();
    let rounds = Rounds::run(&lines, ROUNDS, |_| OPS);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "batch fetch: {n} random ids, L2 hits (L1 flushed before each operation), \
         frames of {} bytes, current_thread runtime; {} CPUs, load average {}",
        bench.frame_len,
        cpus(),
        load_average()
    );
    let _ = writeln!(out, "{:<18} {:>12} {:>12}", "line", "median µs", "min µs");
    for name in rounds.names() {
        let _ = writeln!(
            out,
            "{name:<18} {:>12.1} {:>12.1}",
            rounds.median(name),
            rounds.min(name)
        );
    }
    let ratio = |a: &'static str, b: &'static str| rounds.paired(|t| t(a) / t(b));
    let _ = writeln!(
        out,
        "ratios (median over rounds of the ratio within a round):"
    );
    let _ = writeln!(
        out,
        "  fetch_many / raw_mget         {:>6.2}×",
        ratio("fetch_many", "raw_mget")
    );
    let _ = writeln!(
        out,
        "  fetch_sequential / fetch_many {:>6.2}×",
        ratio("fetch_sequential", "fetch_many")
    );
    let _ = writeln!(
        out,
        "  fetch_joined / fetch_many     {:>6.2}×",
        ratio("fetch_joined", "fetch_many")
    );
    out
}

fn main() {
    let n = std::env::var("ECHO_BATCH_BENCH_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(N);
    let bench = Bench::new(n);
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .without_plots()
        .configure_from_args();
    let mut group = criterion.benchmark_group("batch");
    group.throughput(Throughput::Elements(n as u64));
    for (name, time) in &bench.lines() {
        group.bench_function(*name, |b| b.iter_custom(time));
    }
    group.finish();
    criterion.final_summary();
    if benchmarking() {
        publish(&summary(&bench, n), "echo-batch-bench-summary.txt");
    }
    assert_eq!(bench.loads.load(Relaxed), 0, "node B read every id from L2");
    let stats = bench.cache.stats::<Profile>();
    assert_eq!(stats.l2_errors, 0, "no L2 read failed");
}
