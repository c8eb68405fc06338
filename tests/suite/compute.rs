//! Compute: [`Cache::compute`] and [`Cache::upsert`] read an id's current
//! value (loading it if need be), write a closure's decision on it through
//! the usual write path, and run one at a time per id on a node.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{Calls, bounded, eventually};
use echo_cache::{Builder, Cache, Cached, Change, Clock, Error, Id, Source, near_cache};
use echo_cache_testkit::RedisServer;

/// A counter kept in the cache alone, shared through L2 (`broadcast`).
#[near_cache(
    kind = "CPB",
    ttl_ms = 600_000,
    coherence = "broadcast",
    name = "compute_broadcast"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Counter {
    n: u64,
}

/// The same, kept coherent by the server's tracking.
#[near_cache(
    kind = "CPT",
    ttl_ms = 600_000,
    coherence = "tracking",
    name = "compute_tracking"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tracked {
    n: u64,
}

/// A table in front of a system of record, with a grace while it fails.
#[near_cache(
    kind = "CPL",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 5_000,
    name = "compute_loaded"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Loaded {
    n: u64,
}

/// A value of `n`, for each table.
trait Count: Cached + Clone + std::fmt::Debug {
    fn of(n: u64) -> Self;
    fn n(&self) -> u64;
}

impl Count for Counter {
    fn of(n: u64) -> Counter {
        Counter { n }
    }
    fn n(&self) -> u64 {
        self.n
    }
}

impl Count for Tracked {
    fn of(n: u64) -> Tracked {
        Tracked { n }
    }
    fn n(&self) -> u64 {
        self.n
    }
}

/// Adds one to the count, from 0 if there is none.
fn increment<T: Count>(current: Option<&T>) -> Change<T> {
    Change::Put(T::of(current.map_or(0, T::n) + 1))
}

/// The system of record of `Loaded`: `n` (absent while it is 0), or an
/// error while `down`; counts its calls.
#[derive(Clone, Default)]
struct Store {
    n: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
    calls: Calls,
}

/// A node of this module's tables: the counters have no loader.
fn node(store: &Store) -> Builder {
    let store = store.clone();
    cache_builder()
        .without_loader::<Counter>()
        .without_loader::<Tracked>()
        .loader(move |_: Id<Loaded>| {
            store.calls.count();
            let (n, down) = (store.n.load(SeqCst), store.down.load(SeqCst));
            async move {
                if down {
                    return Err(std::io::Error::other("the store is down"));
                }
                Ok((n > 0).then_some(Loaded { n }))
            }
        })
}

/// A node on `server`, ready (its coherence channels up).
async fn node_on(server: &RedisServer) -> Cache {
    let cache = node(&Store::default())
        .l2(server.url())
        .l2_timeout(Duration::from_secs(2))
        .build()
        .expect("a cache");
    bounded("the node to be ready", cache.ready()).await;
    cache
}

/// `n` computes of one id at once, on four threads, each writing through
/// L2 (a round trip during which another compute would read the old
/// value, were they not one at a time): the count is `n`, and each
/// compute saw the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_computes_of_one_id_on_one_node_add_up() {
    let server = RedisServer::start();
    let cache = node_on(&server).await;
    let id = Id::<Counter>::mint();
    let computes: Vec<_> = (0..64)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.compute(id, increment::<Counter>).await })
        })
        .collect();
    let mut seen = Vec::new();
    for compute in computes {
        let written = bounded("a compute", compute).await.expect("no panic");
        let written = written.expect("computed").expect("a put answers its value");
        assert_eq!(written.source(), Source::Put);
        seen.push(written.n);
    }
    seen.sort_unstable();
    assert_eq!(
        seen,
        (1..=64).collect::<Vec<_>>(),
        "each saw the one before"
    );
    assert_eq!(cache.fetch(id).await.expect("the count").n, 64);
    assert_eq!(cache.stats::<Counter>().puts, 64);
}

#[tokio::test]
async fn a_compute_of_an_absent_id_sees_none() {
    let store = Store::default(); // finds nothing
    let cache = node(&store).build().expect("a cache");

    // Nothing kept, nothing written.
    let id = Id::<Loaded>::mint();
    let mut saw = None;
    let kept = cache
        .compute(id, |current: Option<&Loaded>| {
            saw = Some(current.cloned());
            Change::Keep
        })
        .await;
    assert_eq!(saw, Some(None), "the closure saw no value");
    assert!(kept.expect("computed").is_none());
    assert!(cache.fetch(id).await.is_err_and(|e| e.is_not_found()));

    // A put of the absent id, then a hit on it.
    let written = cache
        .compute(id, |current: Option<&Loaded>| {
            assert!(current.is_none());
            Change::Put(Loaded { n: 7 })
        })
        .await
        .expect("computed")
        .expect("written");
    let read = cache.fetch(id).await.expect("the value written");
    assert_eq!((read.source(), read.n), (Source::Hit, 7));
    assert_eq!(read.version(), written.version());

    // A table with no loader: an id never written is absent too.
    let counted = cache.compute(Id::<Counter>::mint(), increment::<Counter>);
    assert_eq!(counted.await.expect("computed").expect("written").n, 1);
}

#[tokio::test]
async fn a_compute_loads_the_current_value_and_writes_through_l1() {
    let store = Store::default();
    store.n.store(5, SeqCst);
    let cache = node(&store).build().expect("a cache");
    let id = Id::<Loaded>::mint();

    let written = cache
        .compute(id, |current: Option<&Loaded>| {
            Change::Put(Loaded {
                n: current.expect("loaded").n + 1,
            })
        })
        .await
        .expect("computed")
        .expect("written");
    assert_eq!((written.n, store.calls.get()), (6, 1));
    let read = cache.fetch(id).await.expect("a hit");
    assert_eq!((read.source(), read.n), (Source::Hit, 6));

    // An invalidation: the next read goes back to the store.
    let dropped = cache.compute(id, |_: Option<&Loaded>| Change::Invalidate);
    assert!(dropped.await.expect("computed").is_none());
    let read = cache.fetch(id).await.expect("reloaded");
    assert_eq!((read.source(), read.n), (Source::Fill, 5));
    assert_eq!(cache.stats::<Loaded>().invalidations, 1);

    // Upsert: an update of the value there, then of an absent one.
    let updated = cache.upsert(id, Loaded { n: 0 }, |l| Loaded { n: l.n * 10 });
    assert_eq!(updated.await.expect("upserted").n, 50);
    let fresh = Id::<Loaded>::mint();
    store.n.store(0, SeqCst);
    let inserted = cache.upsert(fresh, Loaded { n: 1 }, |_| unreachable!("absent"));
    assert_eq!(inserted.await.expect("upserted").n, 1);
}

#[tokio::test]
async fn a_compute_does_not_build_on_a_stale_value() {
    let (store, clock) = (Store::default(), Clock::manual());
    store.n.store(1, SeqCst);
    let cache = node(&store).clock(clock.clone()).build().expect("a cache");
    let id = Id::<Loaded>::mint();
    cache.fetch(id).await.expect("filled");

    store.down.store(true, SeqCst);
    clock.advance(Duration::from_secs(10)); // expired, within its grace
    assert_eq!(
        cache.fetch(id).await.expect("stale").source(),
        Source::Stale
    );
    let mut ran = false;
    let computed = cache
        .compute(id, |_: Option<&Loaded>| {
            ran = true;
            Change::Keep
        })
        .await;
    assert!(matches!(computed, Err(Error::Load { .. })), "{computed:?}");
    assert!(!ran, "the closure is not run on a stale value");
}

/// A panic in the closure reaches the caller; the id's next compute goes
/// ahead, and sees the value from before the panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_closure_leaves_the_id_usable() {
    let cache = node(&Store::default()).build().expect("a cache");
    let id = Id::<Counter>::mint();
    cache.compute(id, increment::<Counter>).await.expect("1");

    let panicked = {
        let cache = cache.clone();
        tokio::spawn(async move {
            cache
                .compute(id, |_: Option<&Counter>| -> Change<Counter> {
                    panic!("the closure fails")
                })
                .await
        })
    };
    let joined = bounded("the panicking compute", panicked).await;
    assert!(joined.expect_err("it panicked").is_panic());

    let after = bounded("the next compute", cache.compute(id, increment::<Counter>)).await;
    assert_eq!(after.expect("computed").expect("written").n, 2);
    assert_eq!(cache.fetch(id).await.expect("the count").n, 2);
}

/// What one node computes, another that held the old value reads within
/// the delivery bound.
async fn a_second_node_sees_the_result<T: Count>() {
    let server = RedisServer::start();
    let (a, b) = (node_on(&server).await, node_on(&server).await);
    let id = Id::<T>::mint();
    a.compute(id, increment::<T>).await.expect("1");
    let held = b.fetch(id).await.expect("from L2");
    assert_eq!(held.n(), 1);
    assert_eq!(b.fetch(id).await.expect("held").source(), Source::Hit);

    let written = a
        .compute(id, increment::<T>)
        .await
        .expect("2")
        .expect("written");
    eventually("B to read A's compute", async || {
        b.fetch(id).await.is_ok_and(|read| read.n() == 2)
    })
    .await;
    assert_eq!(b.fetch(id).await.expect("2").version(), written.version());
    // And B computes on it.
    let on_b = b
        .compute(id, increment::<T>)
        .await
        .expect("3")
        .expect("written");
    assert_eq!(on_b.n(), 3);
}

#[tokio::test]
async fn a_second_node_sees_a_compute_broadcast() {
    a_second_node_sees_the_result::<Counter>().await;
}

#[tokio::test]
async fn a_second_node_sees_a_compute_tracking() {
    a_second_node_sees_the_result::<Tracked>().await;
}

fn cache_builder() -> Builder {
    Cache::builder()
        .open::<Counter>()
        .open::<Tracked>()
        .open::<Loaded>()
}
