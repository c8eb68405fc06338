//! Part 3 of the cluster bench, the reshard (no criterion line): what a
//! live reshard of a table's slot does to the hit rate and the loader, per
//! coherence mode, and whether invalidations reach the other node from the
//! slot's new owner.
//!
//! # What runs
//!
//! On the runtime of part 2, for each mode, a table of its own
//! (`rsh_tracked`, `rsh_broadcast`, `rsh_durable`), two fresh nodes
//! (`l2_timeout` 500 ms, loaders counting their calls), a hot set of 1,000
//! fresh ids read once by each node (A loads them, B reads them from L2),
//! then one reader task per node fetching ids drawn from a Zipf
//! distribution (s = 1) over the hot set (`support::draw`, a seed per
//! node), 64 fetches then a 1 ms sleep, in a loop: about 2 s `before`;
//! `during`, while `cluster.migrate_slot(slot, to)` moves the table's slot
//! (keys included) to another master on a blocking thread, until every
//! node agrees on the new owner; about 2 s `after`. Every 2 ms the bench
//! reads each node's L1 row count and the table's health. Then 50
//! invalidation samples (as in part 2) check delivery from the new owner.
//!
//! # How to read it
//!
//! The summary's third part, per mode and phase: its length, the fetches,
//! the hit rate (L1 hits / fetches, from the nodes' counters), the fetches
//! answered by L2 and by the loader (the loaders' own counts),
//! `l2_errors`, caller errors, invalidations applied, the fewest L1 rows
//! each node held at a poll (1,000 = all) and the polls at which either
//! node's table was not `Serving`; then a line on whether L1 was kept
//! (every row held at every poll, no loader call) or what it lost and how
//! it refilled. A reshard among the masters a node knows only re-routes its
//! tracking connections (the crate docs' Cluster section). A `broadcast`
//! table's sharded subscription is ended by the server when its slot
//! moves, and a durable lane starts afresh when its stream's owner changes:
//! both flush, bypass L1 until they are back on the new owner (the `not
//! Serving` polls), and refill from L2. A `tracking` table is not flushed,
//! but moving its keys is a write on both masters (`MIGRATE` deletes each
//! key on the old owner, `RESTORE` writes it on the new one), which the
//! servers report to every tracking client: each node applies up to two
//! invalidations per key of the slot (`inval`) and refills from L2. A
//! failover (a master the nodes do not know) would flush every mode; it is
//! not benchmarked here. Then the invalidation samples after the reshard:
//! p50, max and timeouts.

use std::fmt::Write as _;
use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Health, Id};
use echo_cache_testkit::RedisCluster;
use tokio::runtime::Runtime;

use crate::Settings;
use crate::support::draw::{Rng, Zipf};
use crate::support::invalidation::{Figures, WatchFrom, invalidation_sample, quantile, us};
use crate::support::load_average;
use crate::tables::{
    RshBroadcast, RshDurable, RshTracked, health_of, serving, slot_of, with_loader,
};

/// The hot set of the reshard part.
const HOT: usize = 1_000;
/// The Zipf exponent of the reshard part's reads.
const ZIPF_S: f64 = 1.0;
/// Fetches of a reader between two sleeps.
const READ_BATCH: usize = 64;
/// A reader's sleep between two batches.
const READ_PACE: Duration = Duration::from_millis(1);
/// How often the reshard part reads the nodes' L1 rows and health.
const POLL_EVERY: Duration = Duration::from_millis(2);
/// Invalidation samples after each reshard.
const AFTER_SAMPLES: usize = 50;

/// A reader's counts.
#[derive(Default)]
struct Reads {
    ok: AtomicU64,
    errors: AtomicU64,
}

/// Reads Zipf-drawn ids of the hot set on `cache` until `stop`, in batches
/// of `READ_BATCH` fetches `READ_PACE` apart.
async fn read_loop<T: Cached>(
    cache: Cache,
    ids: Arc<[Id<T>]>,
    zipf: Arc<Zipf>,
    seed: u64,
    stop: Arc<AtomicBool>,
    reads: Arc<Reads>,
) {
    let mut rng = Rng(seed);
    while !stop.load(Relaxed) {
        for _ in 0..READ_BATCH {
            let id = ids[zipf.rank(&mut rng)];
            match cache.fetch(id).await {
                Ok(value) => {
                    black_box(value);
                    reads.ok.fetch_add(1, Relaxed);
                }
                Err(_) => {
                    reads.errors.fetch_add(1, Relaxed);
                }
            }
        }
        tokio::time::sleep(READ_PACE).await;
    }
}

/// Counters of both nodes at one moment (summed).
#[derive(Clone, Copy, Debug)]
struct Tally {
    at: Instant,
    fetches: u64,
    hits: u64,
    misses: u64,
    l2_hits: u64,
    loads: u64,
    l2_errors: u64,
    errors: u64,
    invalidations: u64,
}

impl Tally {
    fn take<T: Cached>(
        caches: &[Cache; 2],
        reads: &[Arc<Reads>; 2],
        loads: &[Arc<AtomicU64>; 2],
    ) -> Tally {
        let stats = caches.each_ref().map(Cache::stats::<T>);
        let sum = |f: fn(&echo_cache::Stats) -> u64| stats.iter().map(f).sum::<u64>();
        Tally {
            at: Instant::now(),
            fetches: reads.iter().map(|r| r.ok.load(Relaxed)).sum(),
            hits: sum(|s| s.hits),
            misses: sum(|s| s.misses),
            l2_hits: sum(|s| s.l2_hits),
            loads: loads.iter().map(|l| l.load(Relaxed)).sum(),
            l2_errors: sum(|s| s.l2_errors),
            errors: reads.iter().map(|r| r.errors.load(Relaxed)).sum(),
            invalidations: sum(|s| s.invalidations),
        }
    }

    /// The counts of `self` and `other` added (`at` is `self`'s).
    fn plus(&self, other: &Tally) -> Tally {
        Tally {
            at: self.at,
            fetches: self.fetches + other.fetches,
            hits: self.hits + other.hits,
            misses: self.misses + other.misses,
            l2_hits: self.l2_hits + other.l2_hits,
            loads: self.loads + other.loads,
            l2_errors: self.l2_errors + other.l2_errors,
            errors: self.errors + other.errors,
            invalidations: self.invalidations + other.invalidations,
        }
    }

    /// What happened from `self` to `later`.
    fn until(&self, later: &Tally) -> Tally {
        Tally {
            at: self.at,
            fetches: later.fetches - self.fetches,
            hits: later.hits - self.hits,
            misses: later.misses - self.misses,
            l2_hits: later.l2_hits - self.l2_hits,
            loads: later.loads - self.loads,
            l2_errors: later.l2_errors - self.l2_errors,
            errors: later.errors - self.errors,
            invalidations: later.invalidations - self.invalidations,
        }
    }
}

/// What the polls of one phase saw.
#[derive(Clone, Copy, Debug)]
struct Watch {
    /// The fewest L1 rows of the table each node held at a poll.
    min_rows: [u64; 2],
    polls: u64,
    /// Polls at which the table was not `Serving` on either node.
    not_serving: u64,
}

/// Polls the nodes' L1 rows and health of `T` every `POLL_EVERY` until
/// `until` is done; what it saw, and `until`'s output.
async fn watch<T: Cached, F: Future>(caches: &[Cache; 2], until: F) -> (Watch, F::Output) {
    let mut seen = Watch {
        min_rows: [u64::MAX; 2],
        polls: 0,
        not_serving: 0,
    };
    let poll = |seen: &mut Watch| {
        seen.polls += 1;
        let mut serving = true;
        for (min, cache) in seen.min_rows.iter_mut().zip(caches) {
            *min = (*min).min(cache.stats::<T>().size);
            serving &= health_of::<T>(cache) == Some(Health::Serving);
        }
        seen.not_serving += u64::from(!serving);
    };
    tokio::pin!(until);
    let output = loop {
        poll(&mut seen);
        tokio::select! {
            output = &mut until => break output,
            () = tokio::time::sleep(POLL_EVERY) => {}
        }
    };
    poll(&mut seen);
    (seen, output)
}

/// The nodes of part 3 and their loaders' counts, `[table][node]`.
struct Reshard {
    caches: [Cache; 2],
    loads: [[Arc<AtomicU64>; 2]; 3],
    pids: Vec<u32>,
}

impl Reshard {
    fn new(cluster: &RedisCluster, rt: &Runtime) -> Reshard {
        let loads: [[Arc<AtomicU64>; 2]; 3] = Default::default();
        let node = |i: usize| {
            let _entered = rt.enter();
            let builder = Cache::builder()
                .l2_cluster(cluster.urls())
                .l2_timeout(Duration::from_millis(500));
            let builder = with_loader::<RshTracked>(builder, &loads[0][i]);
            let builder = with_loader::<RshBroadcast>(builder, &loads[1][i]);
            with_loader::<RshDurable>(builder, &loads[2][i])
                .build()
                .expect("the cache builds")
        };
        let caches = [node(0), node(1)];
        let both = [&caches[0], &caches[1]];
        for (serves, name) in [
            (
                serving::<RshTracked>(rt, &both, Duration::from_secs(10)),
                "rsh_tracked",
            ),
            (
                serving::<RshBroadcast>(rt, &both, Duration::from_secs(10)),
                "rsh_broadcast",
            ),
            (
                serving::<RshDurable>(rt, &both, Duration::from_secs(10)),
                "rsh_durable",
            ),
        ] {
            assert!(serves, "{name} never came up Serving on both nodes");
        }
        Reshard {
            caches,
            loads,
            pids: cluster.nodes().iter().filter_map(|n| n.pid()).collect(),
        }
    }

    /// One mode's run; its rows of the summary.
    fn run<T: Cached>(
        &self,
        mode: &str,
        table: usize,
        cluster: &Arc<RedisCluster>,
        rt: &Runtime,
        phase: Duration,
    ) -> String {
        let caches = &self.caches;
        let loads = &self.loads[table];
        let ids: Arc<[Id<T>]> = (0..HOT).map(|_| Id::<T>::mint()).collect();
        let zipf = Arc::new(Zipf::new(HOT, ZIPF_S));
        // Every id once on each node: A loads it, B reads it from L2.
        rt.block_on(async {
            for cache in caches {
                for chunk in ids.chunks(100) {
                    let reads = chunk.iter().map(|&id| cache.fetch(id));
                    for read in futures_util::future::join_all(reads).await {
                        read.expect("the hot set warms");
                    }
                }
            }
        });
        let warm_loads: u64 = loads.iter().map(|l| l.load(Relaxed)).sum();
        let slot = slot_of::<T>();
        let from = cluster.node_of_slot(slot);
        let (from_id, from_name) = (from.id().to_owned(), from.to_string());

        let stop = Arc::new(AtomicBool::new(false));
        let reads: [Arc<Reads>; 2] = Default::default();
        let readers: Vec<_> = (0..2)
            .map(|i| {
                rt.spawn(read_loop(
                    caches[i].clone(),
                    Arc::clone(&ids),
                    Arc::clone(&zipf),
                    0x9E37_79B9_7F4A_7C15 ^ (i as u64 + 1),
                    Arc::clone(&stop),
                    Arc::clone(&reads[i]),
                ))
            })
            .collect();
        let tally = || Tally::take::<T>(caches, &reads, loads);
        let (phases, to_name, after_samples) = rt.block_on(async {
            let t0 = tally();
            let (before, ()) = watch::<T, _>(caches, tokio::time::sleep(phase)).await;
            let t1 = tally();
            let migration = {
                let cluster = Arc::clone(cluster);
                tokio::task::spawn_blocking(move || {
                    let to = *cluster
                        .masters()
                        .iter()
                        .find(|m| m.id() != from_id)
                        .expect("another master");
                    cluster.migrate_slot(slot, to);
                    let owner = cluster.node_of_slot(slot);
                    assert_ne!(owner.id(), from_id, "the slot moved");
                    owner.to_string()
                })
            };
            let (during, to_name) = watch::<T, _>(caches, migration).await;
            let to_name = to_name.expect("the reshard");
            let t2 = tally();
            let (after, ()) = watch::<T, _>(caches, tokio::time::sleep(phase)).await;
            let t3 = tally();
            stop.store(true, Relaxed);
            for reader in readers {
                reader.await.expect("a reader");
            }
            let mut samples = Vec::with_capacity(AFTER_SAMPLES);
            for _ in 0..AFTER_SAMPLES {
                samples.push(
                    invalidation_sample::<T>(&caches[0], &caches[1], &self.pids, WatchFrom::Return)
                        .await,
                );
            }
            let phases = [
                ("before", t0.until(&t1), t1.at - t0.at, before),
                ("during", t1.until(&t2), t2.at - t1.at, during),
                ("after", t2.until(&t3), t3.at - t2.at, after),
            ];
            (phases, to_name, samples)
        });

        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n   {mode}: table {}, slot {slot} moved {from_name} -> {to_name}; warm-up: {warm_loads} \
             loader calls for {HOT} ids on two nodes",
            T::spec().name(),
        );
        let _ = writeln!(
            out,
            "   {:<7} {:>7} {:>8} {:>9} {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>11} {:>11}",
            "phase",
            "ms",
            "fetches",
            "hit rate",
            "misses",
            "from L2",
            "loader",
            "l2_err",
            "errors",
            "inval",
            "L1 rows min",
            "not Serving"
        );
        let mut kept = true;
        let mut since = Tally {
            at: Instant::now(),
            fetches: 0,
            hits: 0,
            misses: 0,
            l2_hits: 0,
            loads: 0,
            l2_errors: 0,
            errors: 0,
            invalidations: 0,
        };
        let mut fewest = [HOT as u64; 2];
        let mut not_serving = 0;
        for (name, t, took, seen) in &phases {
            if *name != "before" {
                since = since.plus(t);
                for (fewest, min) in fewest.iter_mut().zip(seen.min_rows) {
                    *fewest = (*fewest).min(min);
                }
                not_serving += seen.not_serving;
            }
            let looked_up = t.hits + t.misses;
            #[allow(clippy::cast_precision_loss)]
            let rate = if looked_up == 0 {
                f64::NAN
            } else {
                100.0 * t.hits as f64 / looked_up as f64
            };
            kept &= *name == "before"
                || (t.loads == 0 && seen.min_rows.iter().all(|&r| r == HOT as u64));
            let _ = writeln!(
                out,
                "   {name:<7} {:>7.0} {:>8} {:>8.3}% {:>7} {:>7} {:>7} {:>6} {:>6} {:>6} {:>11} {:>11}",
                took.as_secs_f64() * 1e3,
                t.fetches,
                rate,
                t.misses,
                t.l2_hits,
                t.loads,
                t.l2_errors,
                t.errors,
                t.invalidations,
                format!("{} / {}", seen.min_rows[0], seen.min_rows[1]),
                format!("{} / {}", seen.not_serving, seen.polls),
            );
        }
        if let Some(figures) = Figures::of(&after_samples) {
            let latency = &figures.latency;
            let _ = writeln!(
                out,
                "   invalidations after the reshard (A -> B, from the new owner): n = {}, \
                 returned->evicted p50 {:.1} µs, max {:.1} µs, timeouts {}",
                figures.n(),
                us(quantile(latency, 0.5)),
                us(latency[latency.len() - 1]),
                figures.timeouts,
            );
        } else {
            let _ = writeln!(
                out,
                "   invalidations after the reshard: no sample held a row"
            );
        }
        if kept {
            let _ = writeln!(
                out,
                "   L1 kept through the reshard: every row held at every poll, no loader call"
            );
        } else {
            let _ = writeln!(
                out,
                "   L1 not kept through the reshard: during and after, rows fell to {} (A) / {} (B), \
                 {} invalidations applied, {not_serving} polls not Serving; refilled {} times \
                 from L2 and {} times by the loader ({} l2_errors, {} caller errors)",
                fewest[0],
                fewest[1],
                since.invalidations,
                since.l2_hits,
                since.loads,
                since.l2_errors,
                since.errors,
            );
        }
        out
    }
}

pub fn reshard_summary(cluster: &Arc<RedisCluster>, rt: &Runtime, settings: &Settings) -> String {
    let load_before = load_average();
    let reshard = Reshard::new(cluster, rt);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "3. hit rate and loader calls through a live reshard of the table's slot \
         (`migrate_slot`, keys included)\n   two nodes, each reading a hot set of {HOT} ids \
         (Zipf, s = {ZIPF_S}) in batches of {READ_BATCH} fetches {READ_PACE:?} apart; \
         phases before and after: {:?}; L1 rows and health polled every {POLL_EVERY:?}\n   \
         load average before: {load_before}",
        settings.phase,
    );
    out.push_str(&reshard.run::<RshTracked>("tracking", 0, cluster, rt, settings.phase));
    out.push_str(&reshard.run::<RshBroadcast>("broadcast", 1, cluster, rt, settings.phase));
    out.push_str(&reshard.run::<RshDurable>("durable", 2, cluster, rt, settings.phase));
    let _ = writeln!(
        out,
        "\n   how to read it: a reshard among the masters a node knows only re-routes its \
         tracking connections (no flush, no bypass); a broadcast table's sharded subscription \
         ends when its slot moves and a durable lane starts afresh: both flush, then bypass \
         until they are back on the new owner (the `not Serving` polls). For tracking, moving the \
         keys is itself a write: MIGRATE deletes each key on the old owner and RESTORE writes it \
         on the new one, and each master reports its writes to every tracking client (BCAST), \
         so each node applies up to 2 invalidations per key of the slot (`inval`) and refills \
         from L2\n   load average after: {}",
        load_average()
    );
    out
}
