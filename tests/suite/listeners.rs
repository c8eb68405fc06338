//! Removal listeners: a table's listener is told of every row that leaves
//! its L1, with the cause (expired, evicted, invalidated here, invalidated
//! by another node, replaced, flushed), runs with no lock of the cache held
//! (it may read and write its own table), and a panic in it is caught and
//! counted. A table without one behaves as before.
//!
//! Clocks are manual: nothing dies unless a test moves the clock.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::coherence_support::{self as coherence, Broadcast, Entity, Sor, Tracked};
use crate::common::{bounded, eventually};
use echo_cache::{Cache, Cached, Clock, Id, RemovalCause, Source, near_cache};
use echo_cache_testkit::RedisServer;

/// Rows that live a minute, exactly; swept every 5 ms.
#[near_cache(
    kind = "LSH",
    ttl_ms = 60_000,
    jitter = 0.0,
    sweep_ms = 5,
    name = "listen_heard"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Heard {
    n: u64,
}

/// Ten rows at most, evicting the cold ones; never swept during a test.
#[near_cache(
    kind = "LSE",
    ttl_ms = 3_600_000,
    max_size = 10,
    sweep_ms = 3_600_000,
    name = "listen_evicted"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Evicted {
    n: u64,
}

/// Rows that live a minute, never swept during a test: a dead row leaves
/// only when something takes its place.
#[near_cache(
    kind = "LSR",
    ttl_ms = 60_000,
    jitter = 0.0,
    sweep_ms = 3_600_000,
    name = "listen_replaced"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Unswept {
    n: u64,
}

/// A table that declares its listener ([`on_removed`]).
#[near_cache(
    kind = "LSD",
    ttl_ms = 3_600_000,
    listener = on_removed,
    name = "listen_declared"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Declared {
    n: u64,
}

/// A table without a listener.
#[near_cache(kind = "LSN", ttl_ms = 3_600_000, max_size = 10, name = "listen_none")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Unheard {
    n: u64,
}

/// What [`on_removed`] was told.
static DECLARED: Mutex<Vec<(u64, u64, RemovalCause)>> = Mutex::new(Vec::new());

/// The declared listener of [`Declared`].
fn on_removed(id: Id<Declared>, value: Arc<Declared>, cause: RemovalCause) {
    DECLARED
        .lock()
        .unwrap()
        .push((id.payload(), value.n, cause));
}

fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Heard>()
        .open::<Evicted>()
        .open::<Unswept>()
        .open::<Declared>()
        .open::<Unheard>()
}

/// What a listener was told, in order: each row's id, its value's `n`,
/// the cause.
struct Told<T>(Arc<Mutex<Vec<Tell<T>>>>);

/// One call of a listener: the id, its value's `n`, the cause.
type Tell<T> = (Id<T>, u64, RemovalCause);

impl<T> Clone for Told<T> {
    fn clone(&self) -> Told<T> {
        Told(Arc::clone(&self.0))
    }
}

impl<T> Told<T> {
    fn new() -> Told<T> {
        Told(Arc::default())
    }

    fn all(&self) -> Vec<Tell<T>> {
        self.0.lock().unwrap().clone()
    }

    /// The causes told of `id`, in order.
    fn of(&self, id: Id<T>) -> Vec<RemovalCause> {
        let told = self.0.lock().unwrap();
        told.iter().filter(|t| t.0 == id).map(|t| t.2).collect()
    }
}

impl<T: Cached> Told<T> {
    /// A listener that records what it is told, reading the value with
    /// `n`.
    fn listener(
        &self,
        n: fn(&T) -> u64,
    ) -> impl Fn(Id<T>, Arc<T>, RemovalCause) + Send + Sync + 'static {
        let told = self.clone();
        move |id, value, cause| told.0.lock().unwrap().push((id, n(&value), cause))
    }
}

type LoadOf<T> = std::pin::Pin<Box<dyn Future<Output = Result<Option<T>, std::io::Error>> + Send>>;

/// A loader that finds every id, its value made of its payload.
fn load<T: Send + 'static>(make: fn(u64) -> T) -> impl Fn(Id<T>) -> LoadOf<T> + Send + Sync {
    move |id| Box::pin(async move { Ok(Some(make(id.payload()))) })
}

/// A cache on `clock` whose tables load every id, with listeners on
/// `Heard`, `Evicted` and `Unswept` recording into the three `Told`s.
fn cache(
    clock: &Clock,
    heard: &Told<Heard>,
    evicted: &Told<Evicted>,
    unswept: &Told<Unswept>,
) -> Cache {
    cache_builder()
        .clock(clock.clone())
        .loader(load(|n| Heard { n }))
        .loader(load(|n| Evicted { n }))
        .loader(load(|n| Unswept { n }))
        .loader(load(|n| Declared { n }))
        .loader(load(|n| Unheard { n }))
        .listener(heard.listener(|v: &Heard| v.n))
        .listener(evicted.listener(|v: &Evicted| v.n))
        .listener(unswept.listener(|v: &Unswept| v.n))
        .build()
        .expect("the cache builds")
}

/// A cache with a listener on `Heard` only.
fn heard_cache(clock: &Clock, heard: &Told<Heard>) -> Cache {
    cache(clock, heard, &Told::new(), &Told::new())
}

#[tokio::test]
async fn the_sweeper_tells_of_expired_rows() {
    let (clock, told) = (Clock::manual(), Told::<Heard>::new());
    let cache = heard_cache(&clock, &told);
    let (id, other) = (Id::<Heard>::mint(), Id::<Heard>::mint());
    cache.fetch(id).await.unwrap();
    clock.advance(Duration::from_secs(30));
    cache.fetch(other).await.unwrap();
    clock.advance(Duration::from_secs(30)); // `id` dies, `other` lives
    eventually("the sweeper reclaims the dead row", async || {
        cache.stats::<Heard>().swept == 1
    })
    .await;
    assert_eq!(told.all(), [(id, id.payload(), RemovalCause::Expired)]);
    assert!(cache.contains(other), "the live row stays, untold");
}

#[tokio::test]
async fn a_fill_or_put_over_a_dead_row_tells_it_expired_and_over_a_live_one_replaced() {
    let (clock, told) = (Clock::manual(), Told::<Unswept>::new());
    let cache = cache(&clock, &Told::new(), &Told::new(), &told);
    let id = Id::<Unswept>::mint();
    cache.fetch(id).await.unwrap();
    clock.advance(Duration::from_secs(60));
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);
    assert_eq!(told.of(id), [RemovalCause::Expired]);

    // A put over the live row that fill left, then over a dead one.
    cache.put(id, Unswept { n: 7 }).await.unwrap();
    assert_eq!(
        told.all().last(),
        Some(&(id, id.payload(), RemovalCause::Replaced))
    );
    clock.advance(Duration::from_secs(60));
    cache.put(id, Unswept { n: 8 }).await.unwrap();
    assert_eq!(
        told.of(id),
        [
            RemovalCause::Expired,
            RemovalCause::Replaced,
            RemovalCause::Expired
        ]
    );
    assert_eq!(told.all().last().map(|t| t.1), Some(7));
    assert_eq!(cache.stats::<Unswept>().listener_panics, 0);
}

#[tokio::test]
async fn a_full_table_tells_of_the_rows_it_evicts() {
    let (clock, told) = (Clock::manual(), Told::<Evicted>::new());
    let cache = cache(&clock, &Told::new(), &told, &Told::new());
    let cold: Vec<Id<Evicted>> = (0..10).map(|_| Id::mint()).collect();
    for &id in &cold {
        cache.fetch(id).await.unwrap();
    }
    // New ids, each asked for until the table admits it (a cold row goes).
    let hot: Vec<Id<Evicted>> = (0..5).map(|_| Id::mint()).collect();
    for _ in 0..4 {
        for &id in &hot {
            cache.fetch(id).await.unwrap();
        }
    }
    let evictions = cache.stats::<Evicted>().evictions;
    assert!(evictions > 0, "hot ids took cold rows' places");
    let told = told.all();
    assert_eq!(told.len() as u64, evictions, "{told:?}");
    for (id, n, cause) in told {
        assert_eq!(cause, RemovalCause::Evicted);
        assert_eq!(n, id.payload(), "the evicted row's own value");
        assert!(
            cold.contains(&id) || hot.contains(&id),
            "a row of the table"
        );
        if cold.contains(&id) {
            assert!(!cache.contains(id), "a cold row told evicted is gone");
        }
    }
}

#[tokio::test]
async fn a_put_tells_of_the_row_it_replaced_and_an_invalidate_of_the_row_it_dropped() {
    let (clock, told) = (Clock::manual(), Told::<Heard>::new());
    let cache = heard_cache(&clock, &told);
    let id = Id::<Heard>::mint();
    cache.put(id, Heard { n: 1 }).await.unwrap();
    assert_eq!(
        told.all(),
        [],
        "nothing left: the first put replaced nothing"
    );
    cache.put(id, Heard { n: 2 }).await.unwrap();
    cache.invalidate(id).await.unwrap();
    assert_eq!(
        told.all(),
        [
            (id, 1, RemovalCause::Replaced),
            (id, 2, RemovalCause::Invalidated),
        ]
    );
    // Nothing left to invalidate: nothing told.
    cache.invalidate(id).await.unwrap();
    assert_eq!(told.all().len(), 2);
}

#[tokio::test]
async fn a_flush_and_an_invalidate_all_tell_of_every_row() {
    let (clock, told) = (Clock::manual(), Told::<Heard>::new());
    let cache = heard_cache(&clock, &told);
    let ids: Vec<Id<Heard>> = (0..20).map(|_| Id::mint()).collect();
    for &id in &ids {
        cache.fetch(id).await.unwrap();
    }
    cache.flush::<Heard>();
    let mut flushed: Vec<Id<Heard>> = told.all().iter().map(|t| t.0).collect();
    flushed.sort_unstable();
    assert_eq!(flushed, ids, "every row, once");
    assert!(told.all().iter().all(|t| t.2 == RemovalCause::Flushed));

    for &id in &ids[..5] {
        cache.fetch(id).await.unwrap();
    }
    cache.invalidate_all::<Heard>().await.unwrap();
    let told = told.all();
    assert_eq!(told.len(), 25);
    assert!(
        told[20..]
            .iter()
            .all(|t| t.2 == RemovalCause::Flushed && ids[..5].contains(&t.0))
    );
}

#[tokio::test]
async fn compute_tells_as_put_and_invalidate_do() {
    let (clock, told) = (Clock::manual(), Told::<Heard>::new());
    let cache = heard_cache(&clock, &told);
    let id = Id::<Heard>::mint();
    cache.fetch(id).await.unwrap();
    cache
        .compute(id, |_| echo_cache::Change::Put(Heard { n: 5 }))
        .await
        .unwrap();
    cache
        .compute(id, |_| echo_cache::Change::<Heard>::Invalidate)
        .await
        .unwrap();
    assert_eq!(
        told.all(),
        [
            (id, id.payload(), RemovalCause::Replaced),
            (id, 5, RemovalCause::Invalidated),
        ]
    );
}

/// A listener that calls back into the cache (peek, put, flush, stats of
/// its own table) with no lock held: under one, the flush (every flight
/// lock and shard lock of the table) would deadlock. Its own removals
/// (the flush's) are told after it returns, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_may_read_and_write_its_own_table() {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    static ARMED: AtomicBool = AtomicBool::new(false);
    let told = Told::<Heard>::new();
    let listener = told.listener(|v: &Heard| v.n);
    let reentered = Told::<Heard>::new();
    let record = reentered.clone();
    let cache = cache_builder()
        .clock(Clock::manual())
        .loader(load(|n| Heard { n }))
        .without_loader::<Evicted>()
        .without_loader::<Unswept>()
        .without_loader::<Unheard>()
        .loader(load(|n| Declared { n }))
        .listener(move |id: Id<Heard>, value: Arc<Heard>, cause| {
            listener(id, Arc::clone(&value), cause);
            if cause == RemovalCause::Invalidated && ARMED.swap(false, SeqCst) {
                let cache = CACHE.get().expect("set before");
                // A peek and a put of other ids, a flush of the table.
                let peeked = cache.peek(Id::<Heard>::from_payload(1)).map(|p| p.n);
                record
                    .0
                    .lock()
                    .unwrap()
                    .push((id, peeked.unwrap_or(0), cause));
                let put = futures_util::FutureExt::now_or_never(
                    cache.put(Id::<Heard>::from_payload(2), Heard { n: 22 }),
                );
                assert!(matches!(put, Some(Ok(_))), "an L1-only put needs no await");
                cache.flush::<Heard>();
                let _ = cache.stats::<Heard>();
            }
        })
        .build()
        .unwrap();
    let cache = CACHE.get_or_init(|| cache);
    let (one, two, id) = (
        Id::<Heard>::from_payload(1),
        Id::<Heard>::from_payload(2),
        Id::<Heard>::mint(),
    );
    cache.fetch(one).await.unwrap();
    cache.put(two, Heard { n: 2 }).await.unwrap();
    cache.fetch(id).await.unwrap();
    ARMED.store(true, SeqCst);
    // On a worker: were the listener called under a lock, that worker
    // would deadlock, and this bound would fail the test.
    let invalidated = tokio::spawn(cache.invalidate(id));
    let invalidated = bounded("an invalidate whose listener calls back", invalidated).await;
    invalidated.unwrap().unwrap();
    assert_eq!(
        reentered.all(),
        [(id, 1, RemovalCause::Invalidated)],
        "peeked row 1"
    );
    let told = told.all();
    assert_eq!(told[0], (id, id.payload(), RemovalCause::Invalidated));
    // Then the listener's own removals: the put over row 2, the flush.
    assert_eq!(told[1], (two, 2, RemovalCause::Replaced));
    let mut flushed: Vec<(Id<Heard>, u64)> = told[2..]
        .iter()
        .map(|t| {
            assert_eq!(t.2, RemovalCause::Flushed);
            (t.0, t.1)
        })
        .collect();
    flushed.sort_unstable();
    assert_eq!(flushed, [(one, 1), (two, 22)]);
    assert_eq!(cache.stats::<Heard>().size, 0);
}

#[tokio::test]
async fn a_panicking_listener_is_caught_and_counted_and_the_cache_goes_on() {
    let told = Told::<Heard>::new();
    let record = told.listener(|v: &Heard| v.n);
    let cache = cache_builder()
        .clock(Clock::manual())
        .loader(load(|n| Heard { n }))
        .loader(load(|n| Evicted { n }))
        .loader(load(|n| Unswept { n }))
        .loader(load(|n| Declared { n }))
        .loader(load(|n| Unheard { n }))
        .listener(move |id: Id<Heard>, value: Arc<Heard>, cause| {
            record(id, Arc::clone(&value), cause);
            assert!(
                value.n.is_multiple_of(2),
                "a listener that panics on odd values"
            );
        })
        .build()
        .unwrap();
    let ids: Vec<Id<Heard>> = (1..=6).map(Id::from_payload).collect();
    for &id in &ids {
        cache.fetch(id).await.unwrap();
    }
    for &id in &ids {
        cache.invalidate(id).await.unwrap();
    }
    assert_eq!(told.all().len(), 6, "every removal told, panics or not");
    let stats = cache.stats::<Heard>();
    assert_eq!(stats.listener_panics, 3);
    let info = cache
        .tables()
        .into_iter()
        .find(|t| t.spec.name() == "listen_heard");
    assert_eq!(info.unwrap().stats.listener_panics, 3, "in the roster too");
    // The table goes on: fills, hits, more removals, told.
    assert_eq!(cache.fetch(ids[0]).await.unwrap().source(), Source::Fill);
    assert_eq!(cache.fetch(ids[0]).await.unwrap().source(), Source::Hit);
    cache.flush::<Heard>();
    assert_eq!(told.all().len(), 7);
    assert_eq!(cache.stats::<Heard>().listener_panics, 4);
}

#[tokio::test]
async fn a_declared_listener_is_told_and_a_builder_one_overrides_it() {
    let id = Id::<Declared>::mint();
    let declared_of = |id: Id<Declared>| {
        let told = DECLARED.lock().unwrap();
        told.iter()
            .filter(|t| t.0 == id.payload())
            .map(|t| (t.1, t.2))
            .collect::<Vec<_>>()
    };
    let cache = heard_cache(&Clock::manual(), &Told::new());
    cache.put(id, Declared { n: 1 }).await.unwrap();
    cache.invalidate(id).await.unwrap();
    assert_eq!(declared_of(id), [(1, RemovalCause::Invalidated)]);

    let told = Told::<Declared>::new();
    let overridden = cache_builder()
        .clock(Clock::manual())
        .loader(load(|n| Heard { n }))
        .loader(load(|n| Evicted { n }))
        .loader(load(|n| Unswept { n }))
        .loader(load(|n| Declared { n }))
        .loader(load(|n| Unheard { n }))
        .listener(told.listener(|v: &Declared| v.n))
        .build()
        .unwrap();
    let other = Id::<Declared>::mint();
    overridden.put(other, Declared { n: 2 }).await.unwrap();
    overridden.invalidate(other).await.unwrap();
    assert_eq!(told.all(), [(other, 2, RemovalCause::Invalidated)]);
    assert_eq!(declared_of(other), [], "the declared one is replaced");
}

#[tokio::test]
async fn a_table_without_a_listener_behaves_as_before() {
    let cache = heard_cache(&Clock::manual(), &Told::new());
    let ids: Vec<Id<Unheard>> = (0..30).map(|_| Id::mint()).collect();
    for _ in 0..3 {
        for &id in &ids {
            assert_eq!(cache.fetch(id).await.unwrap().n, id.payload());
        }
    }
    cache.put(ids[0], Unheard { n: 1 }).await.unwrap();
    cache.invalidate(ids[1]).await.unwrap();
    let stats = cache.stats::<Unheard>();
    assert!(stats.evictions > 0 && stats.size <= 10, "{stats:?}");
    assert_eq!(stats.listener_panics, 0);
    cache.flush::<Unheard>();
    assert_eq!(cache.stats::<Unheard>().size, 0);
}

/// Node A writes `id`; B, which holds its row, is told it was invalidated
/// by another node, with the value it held.
async fn another_nodes_write_is_told_invalidated_remotely<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let told = Told::<T>::new();
    let a = coherence::node(&server, &sor);
    let b = coherence::with_loaders(coherence::builder(&server), &sor)
        .listener(told.listener(|v: &T| v.revision()))
        .build()
        .unwrap();
    coherence::linked(&a).await;
    coherence::linked(&b).await;
    let (put, invalidated) = (Id::<T>::mint(), Id::<T>::mint());
    assert_eq!(b.fetch(put).await.unwrap().revision(), 0);
    assert_eq!(b.fetch(invalidated).await.unwrap().revision(), 0);

    let revision = sor.bump(put.raw());
    a.put(put, T::at(revision)).await.unwrap();
    a.invalidate(invalidated).await.unwrap();
    eventually("B is told of both", async || told.all().len() == 2).await;
    let mut told = told.all();
    told.sort_by_key(|t| t.0);
    let mut want = vec![
        (put, 0, RemovalCause::InvalidatedRemotely),
        (invalidated, 0, RemovalCause::InvalidatedRemotely),
    ];
    want.sort_by_key(|t| t.0);
    assert_eq!(told, want);
}

#[tokio::test]
async fn another_nodes_writes_are_told_invalidated_remotely_broadcast() {
    another_nodes_write_is_told_invalidated_remotely::<Broadcast>().await;
}

#[tokio::test]
async fn another_nodes_writes_are_told_invalidated_remotely_tracking() {
    another_nodes_write_is_told_invalidated_remotely::<Tracked>().await;
}
