//! Looking into a table without reading through it: `peek` and `contains`
//! count nothing, load nothing, mark nothing and refresh nothing;
//! `snapshot` lists the live values once each and never holds a lock
//! while the caller's code runs; `hottest` ranks by the eviction policy's
//! estimate; `figures` counts rows, bytes and the next expiry; and
//! `table_ops` does the same by table name, with ids as text.
//!
//! Clocks are manual where time matters: nothing dies unless a test moves
//! the clock.

use std::collections::HashSet;
use std::time::Duration;

use crate::common::{Calls, bounded, eventually};
use echo_cache::{Cache, Clock, Error, Id, IdError, RawId, Source, near_cache};
use echo_cache_testkit::RedisServer;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

/// Rows that live a minute, exactly; refreshed in their last 10 s. Never
/// swept while a test runs: the tests count dead rows.
#[near_cache(
    kind = "PEK",
    ttl_ms = 60_000,
    jitter = 0.0,
    refresh_ms = 10_000,
    sweep_ms = 3_600_000,
    name = "inspect_peeked"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Peeked {
    n: u64,
}

/// A table that remembers "not found" for a minute.
#[near_cache(
    kind = "ABS",
    ttl_ms = 600_000,
    absent_ttl_ms = 60_000,
    name = "inspect_absent"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Missing {
    n: u64,
}

/// A hundred rows at most, evicting the cold ones (the default).
#[near_cache(kind = "HTT", ttl_ms = 3_600_000, max_size = 100, name = "inspect_hot")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Ranked {
    n: u64,
}

/// A hundred rows at most, and a full table evicts nothing.
#[near_cache(
    kind = "KPN",
    ttl_ms = 3_600_000,
    max_size = 100,
    eviction = "none",
    name = "inspect_kept"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Unranked {
    n: u64,
}

/// Versioned writes told to the other nodes, for the operations by name.
#[near_cache(
    kind = "OPS",
    ttl_ms = 600_000,
    coherence = "broadcast",
    name = "inspect_ops"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Operated {
    n: u64,
}

type Load<T> = BoxFuture<'static, Result<Option<T>, std::io::Error>>;

/// A loader that finds every id (its value its payload), counting calls.
fn finds<T: Send + 'static>(
    calls: &Calls,
    make: fn(u64) -> T,
) -> impl Fn(Id<T>) -> Load<T> + Send + Sync + 'static {
    let calls = calls.clone();
    move |id| {
        calls.count();
        async move { Ok(Some(make(id.payload()))) }.boxed()
    }
}

/// A cache on `clock` whose loaders find every id but `Missing`'s, all
/// counted in `calls`.
fn cache(clock: &Clock, calls: &Calls) -> Cache {
    let nothing = {
        let calls = calls.clone();
        move |_: Id<Missing>| -> Load<Missing> {
            calls.count();
            async { Ok(None) }.boxed()
        }
    };
    cache_builder()
        .clock(clock.clone())
        .loader(finds(calls, |n| Peeked { n }))
        .loader(nothing)
        .loader(finds(calls, |n| Ranked { n }))
        .loader(finds(calls, |n| Unranked { n }))
        .loader(finds(calls, |n| Operated { n }))
        .build()
        .expect("the cache builds")
}

#[tokio::test]
async fn a_peek_answers_from_l1_only_and_counts_nothing() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let id = Id::<Peeked>::mint();
    assert!(cache.peek(id).is_none(), "not in L1, and not loaded");
    assert!(!cache.contains(id));
    assert_eq!(calls.get(), 0, "a peek never loads");

    let fetched = cache.fetch(id).await.expect("found");
    let before = cache.stats::<Peeked>();
    let peeked = cache.peek(id).expect("in L1");
    assert_eq!(peeked.n, id.payload());
    assert_eq!(peeked.version(), fetched.version());
    assert_eq!(peeked.source(), Source::Hit);
    assert!(cache.contains(id));
    let after = cache.stats::<Peeked>();
    assert_eq!(
        (after.hits, after.misses, after.flights),
        (before.hits, before.misses, before.flights),
        "a peek is no fetch"
    );
    assert_eq!((after.hits, after.misses), (0, 1));

    // A dead row is no value, even before the sweeper reclaims it.
    clock.advance(Duration::from_secs(60));
    assert!(cache.peek(id).is_none());
    let figures = cache.figures::<Peeked>();
    assert_eq!((figures.rows, figures.dead), (0, 1));
    assert_eq!(calls.get(), 1);
}

#[tokio::test]
async fn a_peek_of_a_row_due_for_refresh_starts_no_refresh() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let id = Id::<Peeked>::mint();
    cache.fetch(id).await.expect("found");
    // Within its last 10 s: a hit would start its refresh.
    clock.advance(Duration::from_secs(55));
    assert!(cache.peek(id).is_some());
    assert!(cache.contains(id));
    assert_eq!(
        cache.stats::<Peeked>().refreshes,
        0,
        "a peek refreshes nothing"
    );

    // The row was due: the first fetch starts the refresh.
    assert_eq!(cache.fetch(id).await.expect("found").source(), Source::Hit);
    assert_eq!(cache.stats::<Peeked>().refreshes, 1);
    eventually("the refresh loads", async || calls.get() == 2).await;
}

#[tokio::test]
async fn a_remembered_absence_is_known_absent_not_a_value() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let id = Id::<Missing>::mint();
    assert!(cache.fetch(id).await.expect_err("absent").is_not_found());
    assert!(cache.peek(id).is_none());
    assert!(!cache.contains(id));
    let figures = cache.figures::<Missing>();
    assert_eq!(
        (figures.rows, figures.absent),
        (1, 1),
        "a row, of an absence"
    );
    assert_eq!(cache.snapshot::<Missing>().count(), 0, "no value to list");
    // Known absent: the next fetch answers from L1, loading nothing.
    assert!(cache.fetch(id).await.expect_err("absent").is_not_found());
    assert_eq!(calls.get(), 1);
}

#[tokio::test]
async fn a_peeked_row_is_not_marked_read_for_eviction() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    // Three quarters full: hits mark the rows they read from now on.
    let ids: Vec<Id<Ranked>> = (0..80).map(|_| Id::mint()).collect();
    for &id in &ids {
        cache.fetch(id).await.expect("found");
    }
    for _ in 0..3 {
        assert!(cache.peek(ids[7]).is_some());
    }
    assert!(cache.hottest::<Ranked>(10).is_empty(), "peeks mark nothing");
    cache.fetch(ids[7]).await.expect("found");
    let hottest = cache.hottest::<Ranked>(10);
    assert_eq!(hottest.len(), 1, "{hottest:?}");
    assert_eq!(
        (hottest[0].id, hottest[0].heat),
        (ids[7], 1),
        "a hit marks it"
    );
}

#[tokio::test]
async fn hottest_ranks_the_ids_asked_for_most_once_the_table_has_filled() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let first: Vec<Id<Ranked>> = (0..60).map(|_| Id::mint()).collect();
    for &id in &first {
        cache.fetch(id).await.expect("found");
        cache.fetch(id).await.expect("a hit");
    }
    assert!(
        cache.hottest::<Ranked>(5).is_empty(),
        "below three quarters of its bound, the policy counts nothing"
    );
    // Past its bound: every miss is counted.
    for _ in 0..150 {
        cache.fetch(Id::<Ranked>::mint()).await.expect("found");
    }
    let (hot, warm) = (Id::<Ranked>::mint(), Id::<Ranked>::mint());
    for _ in 0..4 {
        cache.fetch(hot).await.expect("found");
    }
    for _ in 0..2 {
        cache.fetch(warm).await.expect("found");
    }
    let hottest = cache.hottest::<Ranked>(2);
    let ids: Vec<Id<Ranked>> = hottest.iter().map(|hot| hot.id).collect();
    assert_eq!(ids, [hot, warm], "{hottest:?}");
    assert!(hottest[0].heat > hottest[1].heat, "{hottest:?}");
    assert!(hottest[1].heat >= 2, "asked for twice: {hottest:?}");
    let all = cache.hottest::<Ranked>(1_000);
    assert!(all.len() <= 100, "live rows only");
    assert!(all.windows(2).all(|w| w[0].heat >= w[1].heat), "{all:?}");
    assert!(all.iter().all(|hot| hot.heat > 0));
    assert!(cache.hottest::<Ranked>(0).is_empty());
    assert_eq!(cache.stats::<Ranked>().hits, 60 + 2, "hottest is no fetch");

    // A table that evicts nothing ranks nothing, full or not.
    for _ in 0..150 {
        let id = Id::<Unranked>::mint();
        cache.fetch(id).await.expect("found");
        cache.fetch(id).await.expect("found");
    }
    assert!(cache.hottest::<Unranked>(5).is_empty());
}

#[tokio::test]
async fn a_snapshot_lists_each_live_value_once() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let old: Vec<Id<Peeked>> = (0..300).map(|_| Id::mint()).collect();
    for &id in &old {
        cache.fetch(id).await.expect("found");
    }
    clock.advance(Duration::from_secs(30));
    let young: Vec<Id<Peeked>> = (0..700).map(|_| Id::mint()).collect();
    for &id in &young {
        cache.fetch(id).await.expect("found");
    }
    let listed = |cache: &Cache| {
        let mut seen = HashSet::new();
        for (id, value) in cache.snapshot::<Peeked>() {
            assert_eq!(value.n, id.payload());
            assert_eq!(value.source(), Source::Hit);
            assert!(seen.insert(id), "{id} listed twice");
        }
        seen
    };
    let all: HashSet<Id<Peeked>> = old.iter().chain(&young).copied().collect();
    assert_eq!(listed(&cache), all);
    // The old rows die; the dead are left out before they are swept.
    clock.advance(Duration::from_secs(30));
    assert_eq!(listed(&cache), young.iter().copied().collect());
    let stats = cache.stats::<Peeked>();
    assert_eq!((stats.hits, stats.misses), (0, 1_000), "a walk is no fetch");
}

#[tokio::test]
async fn a_snapshot_holds_no_lock_while_the_caller_writes() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let ids: Vec<Id<Peeked>> = (0..500).map(|_| Id::mint()).collect();
    for &id in &ids {
        cache.fetch(id).await.expect("found");
    }
    // Every write below takes a shard's lock: one the walk held would
    // deadlock its thread, which this test's thread would see time out.
    let walk = tokio::task::spawn_blocking({
        let (cache, runtime) = (cache.clone(), tokio::runtime::Handle::current());
        move || {
            let mut walked = 0;
            for (id, _) in cache.snapshot::<Peeked>() {
                runtime.block_on(cache.invalidate(id)).expect("invalidated");
                let put = cache.put(Id::<Peeked>::mint(), Peeked { n: 0 });
                runtime.block_on(put).expect("put");
                walked += 1;
            }
            walked
        }
    });
    let walked = bounded("a walk that writes as it goes", walk)
        .await
        .expect("the walk ends");
    // New rows may or may not come in the walk.
    assert!(walked >= 500, "{walked}");
    assert!(ids.iter().all(|&id| !cache.contains(id)));
}

#[tokio::test]
async fn figures_count_rows_absences_bytes_and_the_next_expiry() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let empty = cache.figures::<Peeked>();
    assert_eq!((empty.rows, empty.dead, empty.next_expiry), (0, 0, None));
    for _ in 0..100 {
        cache.fetch(Id::<Peeked>::mint()).await.expect("found");
    }
    clock.advance(Duration::from_secs(15));
    for _ in 0..900 {
        cache.fetch(Id::<Peeked>::mint()).await.expect("found");
    }
    let figures = cache.figures::<Peeked>();
    assert_eq!((figures.rows, figures.absent, figures.dead), (1_000, 0, 0));
    // The first hundred die first: 60 s after they came, 15 s ago.
    assert_eq!(figures.next_expiry, Some(Duration::from_secs(45)));
    // At least their slots (32 bytes each) and their values.
    let value = size_of::<Peeked>() as u64 + 16;
    assert!(figures.bytes >= 1_000 * (32 + value), "{figures:?}");
    assert!(figures.bytes > empty.bytes);
    assert_eq!(cache.stats::<Peeked>().size, 1_000);

    clock.advance(Duration::from_secs(45));
    let figures = cache.figures::<Peeked>();
    assert_eq!((figures.rows, figures.dead), (900, 100));
    assert_eq!(figures.next_expiry, Some(Duration::from_secs(15)));
    cache.flush::<Peeked>();
    assert_eq!(cache.figures::<Peeked>().rows, 0);
}

#[tokio::test]
async fn table_ops_act_on_a_table_by_name_with_ids_as_text() {
    let (clock, calls) = (Clock::manual(), Calls::default());
    let cache = cache(&clock, &calls);
    let ids: Vec<Id<Ranked>> = (0..200).map(|_| Id::mint()).collect();
    for &id in &ids {
        cache.fetch(id).await.expect("found");
    }
    let hot = Id::<Ranked>::mint();
    for _ in 0..3 {
        cache.fetch(hot).await.expect("found");
    }
    let ops = cache.table_ops("inspect_hot").expect("an open table");
    assert_eq!(ops.spec().name(), "inspect_hot");
    assert_eq!(ops.info().stats.hits, cache.stats::<Ranked>().hits);
    assert_eq!(ops.figures(), cache.figures::<Ranked>());
    // Hottest, as text that parses back to the typed ids.
    let hottest = ops.hottest(3);
    assert_eq!(hottest[0].id.to_string(), hot.to_string());
    let typed: Vec<(Id<Ranked>, u8)> = cache
        .hottest::<Ranked>(3)
        .into_iter()
        .map(|hot| (hot.id, hot.heat))
        .collect();
    let parsed: Vec<(Id<Ranked>, u8)> = hottest
        .iter()
        .map(|hot| (hot.id.to_string().parse().expect("an id"), hot.heat))
        .collect();
    assert_eq!(parsed, typed);

    // Invalidate an id given as text.
    let before = RawId::from(hot);
    let version = ops.invalidate(&hot.to_string()).await.expect("invalidated");
    assert!(!cache.contains(hot));
    assert!(version.is_newer_than(&before), "a fresh version");
    assert_eq!(cache.stats::<Ranked>().invalidations, 1);

    // Bad ids: the table and why.
    let err = ops
        .invalidate("HTT-not-an-id")
        .await
        .expect_err("malformed");
    assert!(
        matches!(
            &err,
            Error::BadId {
                table: "inspect_hot",
                source: IdError::Shape { .. }
            }
        ),
        "{err:?}"
    );
    let other = Id::<Peeked>::mint().to_string();
    let err = ops.invalidate(&other).await.expect_err("another kind");
    assert!(
        matches!(
            &err,
            Error::BadId {
                source: IdError::Kind { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("inspect_hot"), "{err}");

    // Flush.
    assert!(ops.figures().rows > 0);
    ops.flush();
    assert_eq!(ops.figures().rows, 0);
    assert!(ids.iter().all(|&id| !cache.contains(id)));

    // A name no table has, or one this cache left closed.
    for name in ["inspect_hto", "writes_doc"] {
        let err = cache.table_ops(name).expect_err("no such table");
        let Error::NoTable { name: given, open } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(&**given, name);
        assert!(open.contains(&"inspect_hot") && !open.contains(&"writes_doc"));
        assert!(err.to_string().contains("inspect_hot"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_by_name_reaches_the_other_nodes() {
    let server = RedisServer::start();
    let node = || {
        Cache::builder()
            .open::<Operated>()
            .l2(server.url())
            .loader(finds(&Calls::default(), |n| Operated { n }))
            .build()
            .expect("the cache builds")
    };
    let (a, b) = (node(), node());
    bounded("both nodes ready", async {
        a.ready().await;
        b.ready().await;
    })
    .await;
    let id = Id::<Operated>::mint();
    a.fetch(id).await.expect("found");
    b.fetch(id).await.expect("found");
    assert!(a.contains(id) && b.contains(id));
    let ops = a.table_ops("inspect_ops").expect("an open table");
    ops.invalidate(&id.to_string()).await.expect("invalidated");
    assert!(!a.contains(id), "this node's row goes before it returns");
    eventually("node b drops its row", async || !b.contains(id)).await;
}

fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Peeked>()
        .open::<Missing>()
        .open::<Ranked>()
        .open::<Unranked>()
        .open::<Operated>()
}
