//! A cohort never expires together (law 4): jittered expiry on an injected
//! clock, the sweeper, and a bounded table that serves without keeping.
//!
//! Every clock here is [`Clock::manual`]: rows die when the test moves the
//! clock, never because time passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{Calls, eventually};
use echo_cache::{Cache, Clock, Error, Health, Id, Source, Stats, near_cache};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

/// Rows live 100 s ± 25 %.
#[near_cache(kind = "JIT", ttl_ms = 100_000, jitter = 0.25, max_size = 20_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Jittery {
    n: u64,
}

/// Rows live exactly 100 s.
#[near_cache(kind = "EXA", ttl_ms = 100_000, jitter = 0.0, max_size = 20_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Exact {
    n: u64,
}

/// Rows live 1 s ± 10 %; the sweeper runs every 5 ms.
#[near_cache(kind = "SWP", ttl_ms = 1_000, sweep_ms = 5)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Swept {
    n: u64,
}

/// Four rows at most, and a full table evicts nothing (the seed's rule);
/// the sweeper runs once an hour, so only a full table's own reclaiming
/// frees room during a test.
#[near_cache(
    kind = "SML",
    ttl_ms = 1_000,
    max_size = 4,
    sweep_ms = 3_600_000,
    eviction = "none"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Small {
    n: u64,
}

type Load<T> = BoxFuture<'static, Result<Option<T>, std::io::Error>>;

/// A loader that finds every id while `open`, and nothing once closed: a
/// fetch then tells a live row (a hit) from a dead one (not found) without
/// refilling it.
fn switchable<T: Send + 'static>(
    open: &Arc<AtomicBool>,
    calls: &Calls,
    make: fn(u64) -> T,
) -> impl Fn(Id<T>) -> Load<T> + Send + Sync + 'static {
    let (open, calls) = (Arc::clone(open), calls.clone());
    move |id| {
        calls.count();
        let found = open.load(Ordering::SeqCst).then(|| make(id.payload()));
        async move { Ok(found) }.boxed()
    }
}

/// A cache of `T` on a [`Clock::manual`], its loader [`switchable`] (open
/// until the test closes it) and counting its calls.
struct Rig {
    cache: Cache,
    open: Arc<AtomicBool>,
    calls: Calls,
    clock: Clock,
}

impl Rig {
    fn new<T: echo_cache::Cached>(make: fn(u64) -> T) -> Rig {
        let (open, calls, clock) = (
            Arc::new(AtomicBool::new(true)),
            Calls::default(),
            Clock::manual(),
        );
        // A test reads one table: the others are built without a loader,
        // and `T`'s is given after them (the last word on a table wins).
        let cache = cache_builder()
            .without_loader::<Jittery>()
            .without_loader::<Exact>()
            .without_loader::<Swept>()
            .without_loader::<Small>()
            .loader(switchable(&open, &calls, make))
            .clock(clock.clone())
            .build()
            .unwrap();
        Rig {
            cache,
            open,
            calls,
            clock,
        }
    }
}

/// How many of `ids` are alive in L1: hits, where a dead row is refused
/// by the closed loader and so stays out of L1.
async fn alive<T: echo_cache::Cached + std::fmt::Debug>(cache: &Cache, ids: &[Id<T>]) -> usize {
    let mut alive = 0;
    for &id in ids {
        match cache.fetch(id).await {
            Ok(hit) => {
                assert_eq!(hit.source(), Source::Hit);
                alive += 1;
            }
            Err(Error::NotFound { .. }) => {}
            Err(other) => panic!("unexpected {other}"),
        }
    }
    alive
}

/// Fills `n` rows of `T` at the clock's current instant, then closes the
/// loader.
async fn fill_cohort<T: echo_cache::Cached>(
    cache: &Cache,
    open: &AtomicBool,
    n: usize,
) -> Vec<Id<T>> {
    let ids: Vec<Id<T>> = (0..n).map(|_| Id::mint()).collect();
    for &id in &ids {
        let filled = cache.fetch(id).await.expect("the loader is open");
        assert_eq!(filled.source(), Source::Fill);
    }
    open.store(false, Ordering::SeqCst);
    assert_eq!(cache.stats::<T>().size, n as u64);
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cohort_filled_at_one_instant_dies_across_the_jitter_band() {
    let Rig {
        cache, open, clock, ..
    } = Rig::new(|n| Jittery { n });
    let ids = fill_cohort::<Jittery>(&cache, &open, 10_000).await;
    let start = clock.now_ms();
    let at = |ms: u64| {
        let now = clock.now_ms();
        assert!(start + ms >= now, "the clock only moves forward");
        clock.advance(Duration::from_millis(start + ms - now));
    };

    // ttl·(1−jitter) = 75 s, ttl·(1+jitter) = 125 s.
    at(75_000 - 1);
    assert_eq!(
        alive(&cache, &ids).await,
        10_000,
        "all alive before the band"
    );
    at(100_000);
    let at_ttl = alive(&cache, &ids).await;
    assert!(
        0 < at_ttl && at_ttl < 10_000,
        "at ttl some rows are alive and some dead, not all equal: {at_ttl} alive"
    );
    at(125_000);
    assert_eq!(alive(&cache, &ids).await, 0, "all dead after the band");

    // No dead row was ever refilled: every fetch after the fill was a hit or
    // a refused refill.
    let stats = cache.stats::<Jittery>();
    assert_eq!(stats.fills, 10_000);
    assert_eq!(stats.hits, 10_000 + at_ttl as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_jitter_every_row_dies_exactly_at_ttl() {
    let Rig {
        cache, open, clock, ..
    } = Rig::new(|n| Exact { n });
    let ids = fill_cohort::<Exact>(&cache, &open, 10_000).await;

    clock.advance(Duration::from_millis(100_000 - 1));
    assert_eq!(
        alive(&cache, &ids).await,
        10_000,
        "all alive just before ttl"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(alive(&cache, &ids).await, 0, "all dead at ttl");
}

#[tokio::test]
async fn a_clock_advanced_past_every_deadline_stays_past_them() {
    let Rig {
        cache, open, clock, ..
    } = Rig::new(|n| Exact { n });
    let ids = fill_cohort::<Exact>(&cache, &open, 100).await;

    clock.advance(Duration::MAX);
    assert_eq!(clock.now_ms(), u64::MAX, "saturated, not wrapped round");
    assert_eq!(alive(&cache, &ids).await, 0, "all dead");
    clock.advance(Duration::from_millis(1));
    assert_eq!(clock.now_ms(), u64::MAX);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweeper_reclaims_expired_rows_and_only_those() {
    let Rig {
        cache, open, clock, ..
    } = Rig::new(|n| Swept { n });
    let old = fill_cohort::<Swept>(&cache, &open, 500).await;

    // Passes over live rows reclaim nothing.
    let sweeps = cache.stats::<Swept>().sweeps;
    eventually("two sweeper passes", async || {
        cache.stats::<Swept>().sweeps >= sweeps + 2
    })
    .await;
    let stats = cache.stats::<Swept>();
    assert_eq!((stats.swept, stats.size), (0, 500));

    // Past ttl·(1+jitter) every row is dead; a later, live row stays.
    clock.advance(Duration::from_millis(1_100));
    let young = Id::<Swept>::mint();
    cache.put(young, Swept { n: 0 }).await.unwrap();
    eventually("the sweeper to reclaim the 500 dead rows", async || {
        let stats = cache.stats::<Swept>();
        // Only the live row is left.
        stats.swept == 500 && stats.sweeps > sweeps + 2 && stats.size == 1
    })
    .await;
    assert_eq!(alive(&cache, &old).await, 0);
    assert_eq!(alive(&cache, &[young]).await, 1);
    assert_eq!(
        cache.stats::<Swept>().swept,
        500,
        "the live row is never swept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_table_serves_without_keeping_then_reclaims_dead_rows() {
    let Rig { cache, clock, .. } = Rig::new(|n| Small { n });
    let kept: Vec<Id<Small>> = (0..4).map(|_| Id::mint()).collect();
    for &id in &kept {
        cache.fetch(id).await.unwrap();
    }
    let roster = |cache: &Cache| {
        cache
            .tables()
            .into_iter()
            .find(|t| t.spec.name() == "small")
            .unwrap()
    };
    assert_eq!(roster(&cache).health, Health::Full);

    // Full of live rows: the fill is served, not kept, every time.
    let extra = Id::<Small>::mint();
    for skips in 1..=2 {
        let got = cache
            .fetch(extra)
            .await
            .expect("a full table never refuses a read");
        assert_eq!((got.source(), got.n), (Source::Fill, extra.payload()));
        let stats = cache.stats::<Small>();
        assert_eq!((stats.full_skips, stats.size), (skips, 4));
    }
    for &id in &kept {
        assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
    }

    // Once the rows are dead (and the table's reclaim interval, sweep_ms/8,
    // has passed), the next fill reclaims them and is kept.
    clock.advance(Duration::from_millis(3_600_000));
    let got = cache.fetch(extra).await.unwrap();
    assert_eq!(got.source(), Source::Fill);
    let stats = cache.stats::<Small>();
    assert_eq!((stats.full_skips, stats.size), (2, 1));
    assert_eq!(stats.swept, 0, "reclaimed by the fill, not by the sweeper");
    assert_eq!(cache.fetch(extra).await.unwrap().source(), Source::Hit);
    assert_eq!(roster(&cache).health, Health::Serving);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_counters_add_up() {
    let Rig {
        cache, open, calls, ..
    } = Rig::new(|n| Small { n });
    let mut fetches = 0_u64;
    let mut fetch = async |id: Id<Small>| {
        fetches += 1;
        cache.fetch(id).await
    };

    let ids: Vec<Id<Small>> = (0..6).map(|_| Id::mint()).collect();
    for &id in &ids {
        fetch(id).await.unwrap(); // 4 fills kept, 2 served and skipped
    }
    for &id in &ids[..4] {
        assert_eq!(fetch(id).await.unwrap().source(), Source::Hit);
        assert_eq!(fetch(id).await.unwrap().source(), Source::Hit);
    }
    open.store(false, Ordering::SeqCst);
    for &id in &ids[4..] {
        assert!(fetch(id).await.unwrap_err().is_not_found());
    }
    cache.invalidate(ids[0]).await.unwrap();
    assert!(fetch(ids[0]).await.unwrap_err().is_not_found());
    let fetches = fetches;

    let Stats {
        hits,
        misses,
        fills,
        l2_hits,
        coalesced,
        full_skips,
        size,
        in_flight,
        load_errors,
        not_found,
        invalidations,
        ..
    } = cache.stats::<Small>();
    assert_eq!(hits + misses, fetches, "every fetch is a hit or a miss");
    assert_eq!(
        misses,
        coalesced + fills + l2_hits + not_found + load_errors,
        "every miss joins a flight or ends one"
    );
    assert_eq!(
        fills + not_found + load_errors,
        calls.get() as u64,
        "one loader call per flight"
    );
    assert_eq!((hits, misses, fills, not_found, coalesced), (8, 9, 6, 3, 0));
    assert_eq!((full_skips, size, in_flight, invalidations), (2, 3, 0, 1));
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Jittery>()
        .open::<Exact>()
        .open::<Swept>()
        .open::<Small>()
}
