//! L2, side by side: what a fill served from the shared Valkey/Redis tier
//! costs next to a plain `redis` GET of the same frame, and what a near-cache
//! hit costs next to that same GET.
//!
//! # What runs
//!
//! The bench starts its own `redis-server` (or `valkey-server`) on a free
//! loopback port with the testkit fixture, and a Tokio runtime
//! (`current_thread` by default; `ECHO_L2_BENCH_RUNTIME=multi_thread` for a
//! multi-thread one). Every timed loop runs inside one task spawned on that
//! runtime (`Runtime::block_on` of the task), timing N operations per
//! criterion sample (`iter_custom`). The value is a `Profile` of about 100
//! bytes (in memory and postcard-encoded; the frame size is printed).
//!
//! Three caches share the server: node A fills L2 once, through its loader,
//! for a pool of 8,192 ids; node B is the one measured for fills, its L1
//! flushed as the lines need; node C reads the pool from L2 once and serves
//! the hit lines from its L1, never flushed. Node B's loader counts its
//! calls: a fill that did not come from L2 shows up there (and in
//! `l2_errors`), and is reported.
//!
//! The lines of group `l2`, one after another in the same run:
//!
//! - `raw_get`: `GET <key>` on a `redis::aio::ConnectionManager` (the kind
//!   of connection echo-cache uses inside) to the same server, keys cycling
//!   through the pool, the frame returned as `Option<Vec<u8>>`.
//! - `fill_fresh`: `cache.fetch(id)` of an id that is cold in L1 and warm in
//!   L2: the flight (re-check L1, `GET`, frame check, postcard decode,
//!   install in L1) and the wait for it. Ids are taken in turn from the
//!   pool; when the pool is used up, L1 is flushed with the clock stopped,
//!   and the rows it dropped are reclaimed before the clock starts again
//!   (L1's epoch-based reclamation would otherwise free them inside the
//!   timed fills). No flush is timed here: this is the fill itself.
//! - `flush_fetch`: `cache.flush::<Profile>()` then `cache.fetch(id)`, both
//!   timed: a cold L1 forced on every operation.
//! - `flush`: `cache.flush::<Profile>()` alone (of an empty table), so that
//!   `flush_fetch − flush` can be set against `raw_get`.
//! - `hit_polled`: `cache.fetch(id)` on node C, ids cycling through a hot
//!   set of 1,024 ids of the pool, all warm in L1, polled once with
//!   `std::task::Waker::noop()` outside the runtime (a hit is `Ready` on the
//!   first poll; checked at the end: node C missed each id once, when it
//!   was warmed). The summary adds `hit_polled_pool`, the same over all
//!   8,192 ids, whose rows and values no longer all fit a core's caches.
//! - `hit_awaited`: the same fetch `.await`ed inside the spawned task.
//!
//! # How to read it
//!
//! Criterion prints the time per operation of each line. After criterion,
//! the bench does its own pass: every line and a few components (below) run
//! round-robin from a rotating start, 15 rounds of a short batch each. It
//! prints each line's median and minimum in µs per operation, then every
//! ratio as the median over rounds of that ratio within one round (lines
//! measured a fraction of a second apart, so a drift of the machine's load
//! cancels out), against the targets of issue 3, and writes the table to
//! `echo-l2-bench-summary.txt` in the target directory (`$CARGO_TARGET_DIR`,
//! else `target/`):
//!
//! - L2 fill overhead = `fill_fresh / raw_get − 1` (target ≤ 15%), and the
//!   same from the flush lines: `(flush_fetch − flush) / raw_get − 1`.
//! - hit ratio = `raw_get / hit_polled` and `raw_get / hit_awaited` (expect
//!   ≥ 1000×).
//!
//! The components split the fill's overhead: `get_as_run` is the raw GET
//! dressed the way echo-cache's `Server::run` sends it (a fresh `Cmd`, a
//! clone of the connection, `tokio::time::timeout`), `get_in_task` is that
//! in a task of its own (`spawn` + await: the hop a flight takes only when
//! the caller leading it gives up and it is detached; a fill's leader drives
//! it in its own task, so the breakdown prints the hop apart, outside the
//! fill's sum), `fill_no_timeout` is `fetch_within(id, None)` (no waiter's timer),
//! `decode` is the frame body decoded with `Postcard` into an `Arc`, and
//! `put_flush − put` is the flush of a table holding one row (in an L1-only
//! cache), for reading `flush_fetch`. The summary prints their differences
//! (medians over rounds, as above) as a breakdown. A difference of two
//! network lines is a few tenths of a µs carved out of some tens: only a
//! quiet machine resolves it; a profiler (below) does better. A loopback
//! round trip takes some tens of µs, a hit some tens of ns: on a loaded or
//! 2-CPU machine every line is noisy (the minima are the least disturbed
//! rounds), so read the load average printed beside the numbers. On a
//! virtual machine the round trip itself can be bimodal (the server's vCPU
//! awake, or idle and woken for each request, some 30 µs apart), and the
//! hit ratio moves with it: compare lines of the same run, and the same
//! round. On `multi_thread`, `get_in_task − get_as_run` is the price of
//! handing work to a task of its own, which a spawn from a worker may give
//! to (and wake) another worker.
//!
//! ```sh
//! cargo bench --bench l2                 # about 40 s once built
//! cargo bench --bench l2 -- fill_fresh   # one line (the summary still runs)
//! ECHO_L2_BENCH_RUNTIME=multi_thread cargo bench --bench l2
//! # one line alone, N operations (run the bench binary under a profiler):
//! ECHO_L2_BENCH_PROFILE=fill_fresh:300000 cargo bench --bench l2
//! ```

use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use echo_cache::{Cache, Cached, Codec, ID_LEN, Id, Postcard, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use tokio::runtime::Runtime;

// Not every bench uses every shared helper; an unused one would warn as dead.
#[allow(dead_code)]
mod support;

use support::pool::{POOL, at, timed_gets};
use support::{Rounds, TimedLine, benchmarking, cpus, load_average, poll_once, publish, verdict};

/// Rounds of the summary pass.
const ROUNDS: usize = 15;
/// Operations per round of a line that goes to the server.
const NET_BATCH: u64 = 1_500;
/// Operations per round of a line that stays in the process.
const CPU_BATCH: u64 = 1 << 17;
/// The hot set of the hit lines: the first ids of the pool.
const HOT: usize = 1_024;
/// Bytes of a frame before its body: the version, the schema stamp, then
/// the logical expiry.
const FRAME_HEADER: usize = ID_LEN + 16;

support::entity::profile! {
    /// The cached entity: about 100 bytes, in memory and on the wire.
    #[near_cache(
        kind = "PRF",
        ttl_ms = 3_600_000,
        coherence = "none",
        max_size = 20_000
    )]
    pub struct Profile;
}

/// Everything the lines run against.
struct Bench {
    runtime: Runtime,
    runtime_name: &'static str,
    /// The measured node.
    cache: Cache,
    /// Calls of node B's loader (should stay 0).
    loads: Arc<AtomicUsize>,
    /// Node C: every id of the pool in L1, never flushed, for the hit lines.
    near: Cache,
    /// An L1-only cache, for the cost of flushing a row.
    l1_only: Cache,
    ids: Arc<[Id<Profile>]>,
    keys: Arc<[String]>,
    manager: ConnectionManager,
    multiplexed: MultiplexedConnection,
    /// The body of one frame, for the decode component.
    body: Vec<u8>,
    frame_len: usize,
    /// Kept alive for the whole run; killed on drop.
    server: RedisServer,
}

impl Bench {
    fn new() -> Bench {
        let multi = std::env::var("ECHO_L2_BENCH_RUNTIME").is_ok_and(|v| v == "multi_thread");
        let (runtime, runtime_name) = if multi {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build();
            (rt, "multi_thread")
        } else {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            (rt, "current_thread")
        };
        let runtime = runtime.expect("the runtime starts");
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
        let a_loads = Arc::new(AtomicUsize::new(0));
        let a = node(Arc::clone(&a_loads));
        let loads = Arc::new(AtomicUsize::new(0));
        let cache = node(Arc::clone(&loads));
        // Node C reads only what A filled, and `l1_only` only what is put.
        let unloaded = || Cache::builder().without_loader::<Profile>();
        let l1_only = runtime.block_on(async { unloaded().build().expect("builds") });
        let near = runtime.block_on(async { unloaded().l2(url.clone()).build().expect("builds") });

        let ids: Arc<[Id<Profile>]> = (0..POOL).map(|_| Id::<Profile>::mint()).collect();
        let keys: Arc<[String]> = ids
            .iter()
            .map(|id| keyspace::key(Profile::spec(), &id.raw()))
            .collect();

        // Node A fills L2 for the whole pool, through its loader.
        runtime.block_on(async {
            for chunk in ids.chunks(256) {
                let fills = chunk.iter().map(|&id| a.fetch(id));
                for fetched in futures_util::future::join_all(fills).await {
                    assert_eq!(fetched.expect("node A fills").source(), Source::Fill);
                }
            }
        });
        assert_eq!(a_loads.load(Relaxed), POOL, "node A loaded every id once");
        let stats = a.stats::<Profile>();
        assert_eq!(
            (stats.l2_errors, stats.l2_writes_dropped, stats.oversized),
            (0, 0, 0),
            "node A wrote every frame"
        );
        drop(a);

        let frame: Vec<u8> = server.query(redis::cmd("GET").arg(&keys[0]));
        assert!(
            frame.len() > FRAME_HEADER,
            "a frame of {} bytes",
            frame.len()
        );
        let body = frame[FRAME_HEADER..].to_vec();
        let decoded: Profile = Postcard.decode(&body).expect("the body decodes");
        assert_eq!(decoded, Profile::of(ids[0]));

        let (manager, multiplexed) = runtime.block_on(async {
            let client = redis::Client::open(url.as_str()).expect("the URL parses");
            let manager = ConnectionManager::new(client)
                .await
                .expect("the connection manager connects");
            (manager, server.connection().await)
        });

        // Node B reads from L2: same value, its loader untouched.
        runtime.block_on(async {
            let fetched = cache.fetch(ids[0]).await.expect("node B fetches");
            assert_eq!(fetched.source(), Source::L2);
            assert_eq!(*fetched, Profile::of(ids[0]));
        });
        assert_eq!(loads.load(Relaxed), 0, "node B's loader was not called");

        // Node C reads the whole pool from L2 into its L1, once.
        runtime.block_on(async {
            for &id in ids.iter() {
                let fetched = near.fetch(id).await.expect("node C fetches");
                assert_eq!(fetched.source(), Source::L2);
            }
        });

        Bench {
            runtime,
            runtime_name,
            cache,
            loads,
            near,
            l1_only,
            ids,
            keys,
            manager,
            multiplexed,
            frame_len: frame.len(),
            body,
            server,
        }
    }

    /// Runs a timed loop in a task of its own on the runtime.
    fn run<F: Future<Output = Duration> + Send + 'static>(&self, timed: F) -> Duration {
        self.runtime
            .block_on(self.runtime.spawn(timed))
            .expect("the timed task ran")
    }

    fn raw_get(&self, n: u64) -> Duration {
        self.gets(self.manager.clone(), n)
    }

    /// `n` plain GETs of the pool's frames on `conn`.
    fn gets<C: ConnectionLike + Send + 'static>(&self, conn: C, n: u64) -> Duration {
        self.run(timed_gets(conn, Arc::clone(&self.keys), n))
    }

    fn raw_get_multiplexed(&self, n: u64) -> Duration {
        self.gets(self.multiplexed.clone(), n)
    }

    /// The raw GET as `Server::run` sends it: a fresh `Cmd` with the key's
    /// bytes, a clone of the connection, within `tokio::time::timeout`.
    fn get_as_run(&self, n: u64) -> Duration {
        let (conn, keys) = (self.manager.clone(), Arc::clone(&self.keys));
        self.run(async move {
            let start = Instant::now();
            for i in 0..n {
                black_box(get_as_run(&conn, &keys[at(i)]).await);
            }
            start.elapsed()
        })
    }

    /// [`get_as_run`](Self::get_as_run), each in a task of its own.
    fn get_in_task(&self, n: u64) -> Duration {
        let (conn, keys) = (self.manager.clone(), Arc::clone(&self.keys));
        self.run(async move {
            let start = Instant::now();
            for i in 0..n {
                let (conn, keys) = (conn.clone(), Arc::clone(&keys));
                let task = tokio::spawn(async move { get_as_run(&conn, &keys[at(i)]).await });
                black_box(task.await.expect("the task ran"));
            }
            start.elapsed()
        })
    }

    /// Fetches of ids cold in L1 and warm in L2; L1 is flushed, untimed,
    /// whenever the pool is used up. `timeout`: use `fetch_within(id, None)`
    /// instead of `fetch` when false.
    fn fill_fresh(&self, n: u64, timeout: bool) -> Duration {
        let (cache, ids) = (self.cache.clone(), Arc::clone(&self.ids));
        self.run(async move {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < n {
                cache.flush::<Profile>();
                let chunk = (n - done).min(POOL as u64);
                let start = Instant::now();
                for i in 0..chunk {
                    let id = ids[at(i)];
                    let fetched = if timeout {
                        cache.fetch(id).await
                    } else {
                        cache.fetch_within(id, None).await
                    };
                    black_box(fetched.expect("a fill from L2"));
                }
                total += start.elapsed();
                done += chunk;
            }
            total
        })
    }

    fn flush_fetch(&self, n: u64) -> Duration {
        let (cache, ids) = (self.cache.clone(), Arc::clone(&self.ids));
        self.run(async move {
            let start = Instant::now();
            for i in 0..n {
                cache.flush::<Profile>();
                black_box(cache.fetch(ids[at(i)]).await.expect("a fill from L2"));
            }
            start.elapsed()
        })
    }

    fn flush(&self, n: u64) -> Duration {
        let cache = self.cache.clone();
        self.run(async move {
            let start = Instant::now();
            for _ in 0..n {
                cache.flush::<Profile>();
                black_box(&cache);
            }
            start.elapsed()
        })
    }

    /// Hits polled once, ids cycling through the first `span` of the pool.
    fn hit_polled(&self, n: u64, span: usize) -> Duration {
        let start = Instant::now();
        for i in 0..n {
            #[allow(clippy::cast_possible_truncation)]
            let id = self.ids[i as usize % span];
            drop(black_box(poll_once(self.near.fetch(id))));
        }
        start.elapsed()
    }

    fn hit_awaited(&self, n: u64) -> Duration {
        let (cache, ids) = (self.near.clone(), Arc::clone(&self.ids));
        self.run(async move {
            let start = Instant::now();
            for i in 0..n {
                #[allow(clippy::cast_possible_truncation)]
                let id = ids[i as usize % HOT];
                black_box(cache.fetch(id).await.expect("a hit"));
            }
            start.elapsed()
        })
    }

    /// The frame body decoded into an `Arc<Profile>`.
    fn decode(&self, n: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            let value: Profile = Postcard.decode(black_box(&self.body)).expect("decodes");
            black_box(Arc::new(value));
        }
        start.elapsed()
    }

    /// `put` of a row in the L1-only cache, then `flush` when `flush`.
    fn put_flush(&self, n: u64, flush: bool) -> Duration {
        let (id, value) = (self.ids[0], Profile::of(self.ids[0]));
        let start = Instant::now();
        for _ in 0..n {
            let put = poll_once(self.l1_only.put(id, value.clone()));
            assert!(put.is_ready(), "an L1-only put is ready at once");
            if flush {
                self.l1_only.flush::<Profile>();
            }
        }
        start.elapsed()
    }

    /// The lines of the criterion group, in order.
    fn lines(&self) -> Vec<TimedLine<'_>> {
        vec![
            ("raw_get", Box::new(|n| self.raw_get(n))),
            ("fill_fresh", Box::new(|n| self.fill_fresh(n, true))),
            ("flush_fetch", Box::new(|n| self.flush_fetch(n))),
            ("flush", Box::new(|n| self.flush(n))),
            ("hit_polled", Box::new(|n| self.hit_polled(n, HOT))),
            ("hit_awaited", Box::new(|n| self.hit_awaited(n))),
        ]
    }

    /// The components of the summary, beyond the lines.
    fn components(&self) -> Vec<TimedLine<'_>> {
        vec![
            (
                "raw_get_multiplexed",
                Box::new(|n| self.raw_get_multiplexed(n)),
            ),
            ("get_as_run", Box::new(|n| self.get_as_run(n))),
            ("get_in_task", Box::new(|n| self.get_in_task(n))),
            ("fill_no_timeout", Box::new(|n| self.fill_fresh(n, false))),
            ("hit_polled_pool", Box::new(|n| self.hit_polled(n, POOL))),
            ("decode", Box::new(|n| self.decode(n))),
            ("put", Box::new(|n| self.put_flush(n, false))),
            ("put_flush", Box::new(|n| self.put_flush(n, true))),
        ]
    }
}

async fn get_as_run(conn: &ConnectionManager, key: &str) -> Vec<u8> {
    let cmd = redis::Cmd::new().arg("GET").arg(key.as_bytes()).clone();
    let attempt = async {
        let mut conn = conn.clone();
        cmd.query_async::<Option<Vec<u8>>>(&mut conn).await
    };
    tokio::time::timeout(Duration::from_millis(50), attempt)
        .await
        .expect("GET within 50 ms")
        .expect("GET answers")
        .expect("the frame is there")
}

fn criterion_group(c: &mut Criterion, lines: &[TimedLine<'_>]) {
    let mut group = c.benchmark_group("l2");
    group.throughput(Throughput::Elements(1));
    for (name, time) in lines {
        group.bench_function(*name, |b| b.iter_custom(time));
    }
    group.finish();
}

/// Operations per round of line `name` in the summary pass: the bigger
/// batch for a line that stays in the process.
fn batch(name: &str) -> u64 {
    match name {
        "flush" | "hit_polled" | "hit_awaited" | "hit_polled_pool" | "decode" | "put"
        | "put_flush" => CPU_BATCH,
        _ => NET_BATCH,
    }
}

fn summary(bench: &Bench) -> String {
    let load_before = load_average();
    let lines: Vec<TimedLine<'_>> = bench
        .lines()
        .into_iter()
        .chain(bench.components())
        .collect();
    let rounds = Rounds::run(&lines, ROUNDS, batch);

    let mut out = String::new();
    let cpus = cpus();
    let _ = writeln!(
        out,
        "echo-cache L2 summary: {ROUNDS} interleaved rounds ({NET_BATCH} ops per round for lines \
         that reach the server, {CPU_BATCH} for the others)\n\
         runtime {}; server {} {}; frame {} bytes (body {}); a `fetch` future {} bytes; \
         {cpus} CPUs; load average before: {load_before}\n",
        bench.runtime_name,
        bench.server.binary().display(),
        bench.server.version(),
        bench.frame_len,
        bench.body.len(),
        std::mem::size_of_val(&bench.near.fetch(bench.ids[0])),
    );
    let _ = writeln!(
        out,
        "{:<22} {:>12} {:>12}",
        "line", "µs/op median", "µs/op min"
    );
    for name in rounds.names() {
        let _ = writeln!(
            out,
            "{name:<22} {:>12.4} {:>12.4}",
            rounds.median(name),
            rounds.min(name)
        );
    }

    let fill = rounds.paired(|t| t("fill_fresh") / t("raw_get"));
    let fill_us = rounds.paired(|t| t("fill_fresh") - t("raw_get"));
    let flushed = rounds.paired(|t| (t("flush_fetch") - t("flush")) / t("raw_get"));
    let flushed_us = rounds.paired(|t| t("flush_fetch") - t("flush") - t("raw_get"));
    let polled = rounds.paired(|t| t("raw_get") / t("hit_polled"));
    let awaited = rounds.paired(|t| t("raw_get") / t("hit_awaited"));
    let _ = writeln!(
        out,
        "\nratios and targets (issue 3), each the median over rounds of the ratio in one round:"
    );
    let _ = writeln!(
        out,
        "  L2 fill, fresh id:       fill_fresh / raw_get = {fill:.3} (overhead {:+.1}%, {fill_us:+.2} µs), \
         target <= 15%: {}",
        (fill - 1.0) * 100.0,
        verdict(fill <= 1.15),
    );
    let _ = writeln!(
        out,
        "  L2 fill, flushed L1:     (flush_fetch - flush) / raw_get = {flushed:.3} (overhead {:+.1}%, \
         {flushed_us:+.2} µs), target <= 15%: {}",
        (flushed - 1.0) * 100.0,
        verdict(flushed <= 1.15),
    );
    let _ = writeln!(
        out,
        "  near-cache hit, polled:  raw_get / hit_polled = {polled:.0}x, expect >= 1000x: {}",
        verdict(polled >= 1000.0),
    );
    let _ = writeln!(
        out,
        "  near-cache hit, awaited: raw_get / hit_awaited = {awaited:.0}x, expect >= 1000x: {}",
        verdict(awaited >= 1000.0),
    );
    let _ = writeln!(
        out,
        "  (hits over the whole pool of {POOL} ids, not the hot {HOT}: raw_get / hit_polled_pool = {:.0}x)",
        rounds.paired(|t| t("raw_get") / t("hit_polled_pool")),
    );
    let _ = writeln!(
        out,
        "  (from the minima, the least disturbed rounds: fill_fresh / raw_get = {:.3}, \
         raw_get / hit_polled = {:.0}x, raw_get / hit_awaited = {:.0}x)",
        rounds.min("fill_fresh") / rounds.min("raw_get"),
        rounds.min("raw_get") / rounds.min("hit_polled"),
        rounds.min("raw_get") / rounds.min("hit_awaited"),
    );

    breakdown(&mut out, &rounds);

    let stats = bench.cache.stats::<Profile>();
    let _ = writeln!(
        out,
        "\nnode B: l2_hits {}, fills {}, loader calls {}, l2_errors {}, decode_errors {}",
        stats.l2_hits,
        stats.fills,
        bench.loads.load(Relaxed),
        stats.l2_errors,
        stats.decode_errors
    );
    let _ = writeln!(out, "load average after: {}", load_average());
    out
}

/// Where the fill's time over a raw GET goes, from the components.
fn breakdown(out: &mut String, rounds: &Rounds) {
    let _ = writeln!(
        out,
        "\nwhere the fill's time over raw_get goes (medians over rounds of differences in one round):"
    );
    for (what, t) in [
        (
            "ConnectionManager vs multiplexed GET",
            rounds.paired(|t| t("raw_get") - t("raw_get_multiplexed")),
        ),
        (
            "Cmd + connection clone + L2 timeout",
            rounds.paired(|t| t("get_as_run") - t("raw_get")),
        ),
        (
            "the waiter's fetch timeout",
            rounds.paired(|t| t("fill_fresh") - t("fill_no_timeout")),
        ),
        ("frame body decode + Arc", rounds.median("decode")),
        (
            "the rest (flight registry, watch, land, L1, counters)",
            rounds.paired(|t| t("fill_no_timeout") - t("get_as_run") - t("decode")),
        ),
        (
            "(a task of its own: a detached flight's hop, not a fill's)",
            rounds.paired(|t| t("get_in_task") - t("get_as_run")),
        ),
        (
            "(flush of a 1-row table, for flush_fetch)",
            rounds.paired(|t| t("put_flush") - t("put")),
        ),
    ] {
        let _ = writeln!(out, "  {what:<56} {t:>+9.3} µs");
    }
}

/// `ECHO_L2_BENCH_PROFILE=LINE[:OPS]`: runs one line (or component) for
/// `OPS` operations (100,000 by default) and prints the time, instead of
/// criterion and the summary; for a profiler (`perf record`) to see one line.
fn profile_one(bench: &Bench, spec: &str) {
    let (name, ops) = match spec.split_once(':') {
        Some((name, ops)) => (name, ops.parse().expect("OPS is a number")),
        None => (spec, 100_000),
    };
    let lines: Vec<TimedLine<'_>> = bench
        .lines()
        .into_iter()
        .chain(bench.components())
        .collect();
    let Some((_, time)) = lines.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = lines.iter().map(|(n, _)| *n).collect();
        panic!("no line {name:?}; the lines: {names:?}");
    };
    let elapsed = time(ops);
    #[allow(clippy::cast_precision_loss)]
    let per_op = elapsed.as_secs_f64() * 1e6 / ops as f64;
    println!(
        "{name}: {ops} ops in {elapsed:?}, {per_op:.4} µs per op; load {}",
        load_average()
    );
}

fn main() {
    let bench = Bench::new();
    if let Ok(spec) = std::env::var("ECHO_L2_BENCH_PROFILE") {
        profile_one(&bench, &spec);
        return;
    }

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .nresamples(10_000)
        .without_plots()
        .configure_from_args();
    criterion_group(&mut criterion, &bench.lines());
    criterion.final_summary();

    // The summary pass only when benchmarking (`cargo bench`), not when
    // `cargo test --benches` runs each line once, nor under `--profile-time`.
    if benchmarking() {
        publish(&summary(&bench), "echo-l2-bench-summary.txt");
    }

    let near = bench.near.stats::<Profile>();
    assert_eq!(
        (near.misses, near.size),
        (POOL as u64, POOL as u64),
        "node C served every hit line from L1"
    );

    // A fill that L2 did not serve (an L2 operation over its timeout on a
    // loaded machine) went to the loader: its time is in the lines above.
    let loads = bench.loads.load(Relaxed);
    let stats = bench.cache.stats::<Profile>();
    if (loads, stats.l2_errors, stats.decode_errors) != (0, 0, 0) {
        eprintln!(
            "WARNING: node B was not served by L2 every time: {loads} loader calls, \
             {} l2_errors, {} decode_errors",
            stats.l2_errors, stats.decode_errors
        );
    }
}
