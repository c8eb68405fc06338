//! Part 1 of the cluster bench, the fill (group `cluster_fill`): what a fill
//! from L2 costs on the cluster next to a raw cluster GET of the same key,
//! against the target of issue 9 (`fill_fresh / raw_get` ≤ 1.15×).
//!
//! # What runs
//!
//! On a Tokio runtime of its own (`current_thread` by default, as in
//! `benches/l2.rs`; `ECHO_CLUSTER_BENCH_RUNTIME=multi_thread` for a
//! multi-thread one), each timed loop in one task spawned on it, N
//! operations per criterion sample (`iter_custom`). Table `clu_profile`
//! (`none`), whose value is a `ClusterProfile` of about 100 bytes (the
//! `Profile` of `support::entity`, as in `benches/l2.rs`). Node A fills L2
//! once through its loader for a pool of 8,192 ids; node B is measured, its
//! loader counting calls (a fill that L2 did not serve shows up there, and
//! is reported).
//!
//! - `raw_get`: `GET <key>` on a `redis::cluster_async::ClusterConnection`
//!   (`ClusterClient::new(urls)`: the crate's cluster client, which
//!   echo-cache uses inside), keys cycling through the pool, the frame
//!   returned as `Option<Vec<u8>>`.
//! - `fill_fresh`: `cache.fetch(id)` on node B of an id cold in L1 and
//!   warm in L2 (the flight: `GET` through the cluster connection, frame
//!   check, decode, install in L1). Ids are taken in turn from the pool;
//!   when it is used up, L1 is flushed with the clock stopped.
//!
//! The summary adds `raw_get_node`: the same GET on a plain
//! `ConnectionManager` to the master that owns the slot (the raw line of
//! `benches/l2.rs`), to show what the cluster client's routing costs.
//!
//! # How to read it
//!
//! The summary's first part: the lines run round-robin from a rotating start, 15 rounds of
//! 1,500 operations each; each line's median and minimum in µs per
//! operation, then `fill_fresh / raw_get` as the median over rounds of
//! that ratio within one round (lines a fraction of a second apart, so a
//! drift of the machine's load cancels out), against the target of issue
//! 9 (≤ 1.15×), and `raw_get / raw_get_node` (the cluster client against
//! a plain connection). A loopback round trip takes some tens of µs; on a
//! loaded or 2-CPU machine every line is noisy (the minima are the least
//! disturbed rounds), so read the load average beside the figures.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use echo_cache::{Cache, Cached, Id, Source, keyspace, near_cache};
use echo_cache_testkit::RedisCluster;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use tokio::runtime::Runtime;

use crate::Settings;
use crate::support;
use crate::support::pool::{POOL, at, timed_gets};
use crate::support::{Rounds, TimedLine, load_average, verdict};
use crate::tables::slot_of;

/// Operations per round of a fill line in the summary pass.
const NET_BATCH: u64 = 1_500;
/// The target of issue 9 for `fill_fresh / raw_get`.
const TARGET_FILL: f64 = 1.15;

support::entity::profile! {
    /// The cached entity of part 1: about 100 bytes, in memory and on the wire.
    #[near_cache(
        kind = "CPF",
        ttl_ms = 3_600_000,
        coherence = "none",
        max_size = 20_000,
        name = "clu_profile",
        loader = load_profile
    )]
    pub struct ClusterProfile;
}

/// Part 1 counts its loads with a loader of its own, which overrides this.
fn load_profile(
    id: Id<ClusterProfile>,
) -> std::future::Ready<Result<Option<ClusterProfile>, Infallible>> {
    std::future::ready(Ok(Some(ClusterProfile::of(id))))
}

/// Everything the fill lines run against.
pub struct Fill {
    runtime: Runtime,
    runtime_name: &'static str,
    /// Node B, the measured one.
    pub cache: Cache,
    /// Calls of node B's loader (should stay 0).
    pub loads: Arc<AtomicU64>,
    ids: Arc<[Id<ClusterProfile>]>,
    keys: Arc<[String]>,
    cluster_conn: ClusterConnection,
    /// A plain connection to the master that owns the table's slot.
    node_conn: ConnectionManager,
    slot: u16,
    owner: String,
    frame_len: usize,
}

impl Fill {
    pub fn new(cluster: &RedisCluster, multi_thread: bool) -> Fill {
        let (runtime, runtime_name) = if multi_thread {
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
        let node = |loads: Arc<AtomicU64>| {
            runtime.block_on(async {
                Cache::builder()
                    .l2_cluster(cluster.urls())
                    .loader(move |id: Id<ClusterProfile>| {
                        loads.fetch_add(1, Relaxed);
                        async move { Ok::<_, Infallible>(Some(ClusterProfile::of(id))) }
                    })
                    .build()
                    .expect("the cache builds")
            })
        };
        let a_loads = Arc::new(AtomicU64::new(0));
        let a = node(Arc::clone(&a_loads));
        let loads = Arc::new(AtomicU64::new(0));
        let cache = node(Arc::clone(&loads));

        let ids: Arc<[Id<ClusterProfile>]> =
            (0..POOL).map(|_| Id::<ClusterProfile>::mint()).collect();
        let keys: Arc<[String]> = ids
            .iter()
            .map(|id| keyspace::key(ClusterProfile::spec(), &id.raw()))
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
        assert_eq!(a_loads.load(Relaxed), POOL as u64, "node A loaded every id");
        let stats = a.stats::<ClusterProfile>();
        assert_eq!(
            (stats.l2_errors, stats.l2_writes_dropped, stats.oversized),
            (0, 0, 0),
            "node A wrote every frame"
        );
        drop(a);

        let slot = cluster.slot_of(&keys[0]);
        assert_eq!(slot, slot_of::<ClusterProfile>(), "the table's slot");
        let owner = cluster.node_of_slot(slot);
        let frame: Vec<u8> = owner.query(redis::cmd("GET").arg(&keys[0]));
        let (cluster_conn, node_conn) = runtime.block_on(async {
            let cluster_conn = ClusterClient::new(cluster.urls())
                .expect("the seeds parse")
                .get_async_connection()
                .await
                .expect("the cluster connection connects");
            let node_conn = ConnectionManager::new(owner.client())
                .await
                .expect("the connection manager connects");
            (cluster_conn, node_conn)
        });

        // Node B reads from L2: same value, its loader untouched.
        runtime.block_on(async {
            let fetched = cache.fetch(ids[0]).await.expect("node B fetches");
            assert_eq!(fetched.source(), Source::L2);
            assert_eq!(*fetched, ClusterProfile::of(ids[0]));
        });
        assert_eq!(loads.load(Relaxed), 0, "node B's loader was not called");

        Fill {
            runtime,
            runtime_name,
            cache,
            loads,
            ids,
            keys,
            cluster_conn,
            node_conn,
            slot,
            owner: owner.to_string(),
            frame_len: frame.len(),
        }
    }

    /// Runs a timed loop in a task of its own on the runtime.
    fn run<F: Future<Output = Duration> + Send + 'static>(&self, timed: F) -> Duration {
        self.runtime
            .block_on(self.runtime.spawn(timed))
            .expect("the timed task ran")
    }

    /// `n` plain GETs of the pool's frames on `conn`.
    fn gets<C: ConnectionLike + Send + 'static>(&self, conn: C, n: u64) -> Duration {
        self.run(timed_gets(conn, Arc::clone(&self.keys), n))
    }

    fn raw_get(&self, n: u64) -> Duration {
        self.gets(self.cluster_conn.clone(), n)
    }

    fn raw_get_node(&self, n: u64) -> Duration {
        self.gets(self.node_conn.clone(), n)
    }

    /// Fetches of ids cold in L1 and warm in L2; L1 is flushed, untimed,
    /// whenever the pool is used up.
    fn fill_fresh(&self, n: u64) -> Duration {
        let (cache, ids) = (self.cache.clone(), Arc::clone(&self.ids));
        self.run(async move {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < n {
                cache.flush::<ClusterProfile>();
                let chunk = (n - done).min(POOL as u64);
                let start = Instant::now();
                for i in 0..chunk {
                    black_box(cache.fetch(ids[at(i)]).await.expect("a fill from L2"));
                }
                total += start.elapsed();
                done += chunk;
            }
            total
        })
    }

    /// The lines of the criterion group, in order.
    pub fn lines(&self) -> Vec<TimedLine<'_>> {
        vec![
            ("raw_get", Box::new(|n| self.raw_get(n))),
            ("fill_fresh", Box::new(|n| self.fill_fresh(n))),
        ]
    }

    /// The summary's extra line.
    fn components(&self) -> Vec<TimedLine<'_>> {
        vec![("raw_get_node", Box::new(|n| self.raw_get_node(n)))]
    }
}

/// The criterion group of part 1; whether criterion ran any of its lines
/// (a filter may leave them all out).
pub fn fill_group(c: &mut Criterion, lines: &[TimedLine<'_>]) -> bool {
    let mut ran = false;
    let mut group = c.benchmark_group("cluster_fill");
    group.throughput(Throughput::Elements(1));
    for (name, time) in lines {
        group.bench_function(*name, |b| {
            ran = true;
            b.iter_custom(time);
        });
    }
    group.finish();
    ran
}

pub fn fill_summary(fill: &Fill, settings: &Settings) -> String {
    let load_before = load_average();
    let lines: Vec<TimedLine<'_>> = fill.lines().into_iter().chain(fill.components()).collect();
    let rounds = Rounds::run(&lines, settings.rounds, |_| NET_BATCH);

    let mut out = String::new();
    let _ = writeln!(
        out,
        "1. fill from L2 on the cluster vs a raw cluster GET: {} interleaved rounds of {NET_BATCH} \
         ops per line\n   runtime {}; table clu_profile on slot {} of master {}; frame {} bytes; \
         load average before: {load_before}\n",
        settings.rounds, fill.runtime_name, fill.slot, fill.owner, fill.frame_len,
    );
    let _ = writeln!(
        out,
        "   {:<14} {:>12} {:>12}",
        "line", "µs/op median", "µs/op min"
    );
    for name in rounds.names() {
        let _ = writeln!(
            out,
            "   {name:<14} {:>12.2} {:>12.2}",
            rounds.median(name),
            rounds.min(name)
        );
    }
    let ratio = rounds.paired(|t| t("fill_fresh") / t("raw_get"));
    let extra = rounds.paired(|t| t("fill_fresh") - t("raw_get"));
    let _ = writeln!(
        out,
        "\n   fill_fresh / raw_get = {ratio:.3} (overhead {:+.1}%, {extra:+.2} µs), \
         target <= {TARGET_FILL}x: {}   [median over rounds of the ratio in one round]",
        (ratio - 1.0) * 100.0,
        verdict(ratio <= TARGET_FILL),
    );
    let _ = writeln!(
        out,
        "   (from the minima: fill_fresh / raw_get = {:.3}; the cluster client against a plain \
         connection to the owner: raw_get / raw_get_node = {:.3})",
        rounds.min("fill_fresh") / rounds.min("raw_get"),
        rounds.paired(|t| t("raw_get") / t("raw_get_node")),
    );
    let stats = fill.cache.stats::<ClusterProfile>();
    let _ = writeln!(
        out,
        "   node B: l2_hits {}, loader calls {}, l2_errors {}, decode_errors {}",
        stats.l2_hits,
        fill.loads.load(Relaxed),
        stats.l2_errors,
        stats.decode_errors
    );
    let _ = writeln!(out, "   load average after: {}", load_average());
    out
}
