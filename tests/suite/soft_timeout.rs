//! Soft timeouts (`soft_timeout_ms`): a flight whose loader runs past the
//! soft timeout answers its waiters with the expired value the table's
//! grace allows ([`Source::Stale`]) and keeps loading; what it brings lands
//! under the usual rules. The hard deadline (`load_timeout_ms`) stays, and
//! a loader learns from its [`LoadToken`] when nobody waits any more.
//!
//! The L1 tests run on Tokio's paused clock (timers fire at their exact
//! deadline, in order, as soon as the runtime is idle: a loader waiting on
//! a closed gate lets time run to the next timer) and on a
//! [`Clock::manual`] for the rows' lives. The L2 test runs on real time
//! against a real server, its waits bounded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{BOUND, Calls, Gate, bounded, eventually};
use echo_cache::{
    Builder, Cache, Cached, Clock, Error, Fetched, Id, Limits, LoadToken, Source, keyspace,
    near_cache,
};
use echo_cache_testkit::RedisServer;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use redis::AsyncCommands;
use tokio::time::Instant;

/// Rows live 10 s, then may answer stale for a minute; waiters wait
/// 100 ms for the loader, flights 1 s.
#[near_cache(
    kind = "SFT",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 60_000,
    soft_timeout_ms = 100,
    load_timeout_ms = 1_000,
    name = "soft_price"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Price {
    revision: u64,
}

/// The same without a soft timeout: today's behaviour.
#[near_cache(
    kind = "SFP",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 60_000,
    load_timeout_ms = 1_000,
    name = "soft_plain"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Plain {
    revision: u64,
}

/// On a server, versioned: rows (and frames) live 300 ms, waiters wait
/// 50 ms.
#[near_cache(
    kind = "SFB",
    ttl_ms = 300,
    jitter = 0.0,
    stale_if_error_ms = 60_000,
    soft_timeout_ms = 50,
    coherence = "broadcast",
    name = "soft_shared"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Shared {
    revision: u64,
}

trait Entity: Cached + Clone + std::fmt::Debug {
    fn at(revision: u64) -> Self;
    fn revision(&self) -> u64;
}

macro_rules! entity {
    ($($entity:ident),*) => {$(
        impl Entity for $entity {
            fn at(revision: u64) -> $entity {
                $entity { revision }
            }
            fn revision(&self) -> u64 {
                self.revision
            }
        }
    )*};
}
entity!(Price, Plain, Shared);

type Load<T> = BoxFuture<'static, Result<Option<T>, std::io::Error>>;

/// The system of record: each load reads the revision it holds when the
/// load is called, then, while the store is slow, waits for its gate.
#[derive(Clone, Default)]
struct Store {
    revision: Arc<AtomicU64>,
    /// Slow: each load waits for this gate after its read.
    gate: Arc<Mutex<Option<Gate>>>,
    /// Loads stop once their token says nobody waits.
    heed: Arc<AtomicBool>,
    calls: Calls,
    /// When loads' futures were dropped before they answered.
    dropped: Arc<Mutex<Vec<Instant>>>,
    /// Loads that stopped because nobody waited, and when.
    stopped: Arc<Mutex<Vec<Instant>>>,
}

/// Notes when a load's future is dropped before it answered.
struct Unfinished(Option<Arc<Mutex<Vec<Instant>>>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            dropped.lock().unwrap().push(Instant::now());
        }
    }
}

impl Store {
    fn at(revision: u64) -> Store {
        let store = Store::default();
        store.revision.store(revision, SeqCst);
        store
    }

    /// From now on each load waits for a gate, closed: returned.
    fn slow(&self) -> Gate {
        let gate = Gate::closed();
        *self.gate.lock().unwrap() = Some(gate.clone());
        gate
    }

    /// From now on loads answer at once.
    fn quick(&self) {
        *self.gate.lock().unwrap() = None;
    }

    fn stopped(&self) -> Vec<Instant> {
        self.stopped.lock().unwrap().clone()
    }

    fn dropped(&self) -> Vec<Instant> {
        self.dropped.lock().unwrap().clone()
    }

    fn loader<T: Entity>(&self) -> impl Fn(Id<T>) -> Load<T> + Send + Sync + 'static {
        let store = self.clone();
        move |_| {
            let store = store.clone();
            async move {
                store.calls.count();
                let revision = store.revision.load(SeqCst);
                let gate = store.gate.lock().unwrap().clone();
                let mut unfinished = Unfinished(Some(Arc::clone(&store.dropped)));
                if let Some(gate) = gate {
                    let token = LoadToken::current().expect("a flight's loader has its token");
                    if store.heed.load(SeqCst) {
                        tokio::select! {
                            () = gate.pass() => {}
                            () = token.unwaited() => {
                                unfinished.0 = None;
                                store.stopped.lock().unwrap().push(Instant::now());
                                return Err(std::io::Error::other("nobody waits: stopped"));
                            }
                        }
                    } else {
                        gate.pass().await;
                    }
                }
                unfinished.0 = None;
                Ok(Some(T::at(revision)))
            }
            .boxed()
        }
    }

    fn serve(&self, builder: Builder) -> Builder {
        builder
            .loader(self.loader::<Price>())
            .loader(self.loader::<Plain>())
            .loader(self.loader::<Shared>())
    }
}

/// An L1-only cache on a manual clock, loading from `store`; fetches wait
/// as long as their flight takes.
fn cache(store: &Store) -> (Cache, Clock) {
    let clock = Clock::manual();
    let builder = cache_builder().clock(clock.clone()).fetch_timeout(None);
    (store.serve(builder).build().unwrap(), clock)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What a fetch answered: where from and the revision.
fn answered<T: Entity>(fetched: &Result<Fetched<T>, Error>) -> (Source, u64) {
    let fetched = fetched.as_ref().expect("a value");
    (fetched.source(), fetched.revision())
}

/// A fetch of `id` in a task of its own, and when it started.
fn spawn_fetch<T: Entity>(
    cache: &Cache,
    id: Id<T>,
) -> tokio::task::JoinHandle<(Result<Fetched<T>, Error>, Duration)> {
    let cache = cache.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let fetched = cache.fetch(id).await;
        (fetched, started.elapsed())
    })
}

/// Fills `id` (at the store's revision), then lets its row die (into the
/// grace): the next fetch misses, with a stale value to fall back on.
async fn filled_then_dead<T: Entity>(cache: &Cache, clock: &Clock, id: Id<T>) -> u64 {
    let filled = cache.fetch(id).await.expect("filled");
    assert_eq!(filled.source(), Source::Fill);
    clock.advance(ms(10_000));
    filled.revision()
}

/// Lets every task the runtime can run, run (time does not move: no task
/// here waits for a timer to get going).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn past_the_soft_timeout_waiters_get_the_stale_value_and_the_load_lands_after() {
    let store = Store::at(1);
    let (cache, clock) = cache(&store);
    let id = Id::<Price>::mint();
    filled_then_dead(&cache, &clock, id).await;

    store.revision.store(2, SeqCst);
    let gate = store.slow();
    let herd: Vec<_> = (0..3).map(|_| spawn_fetch(&cache, id)).collect();
    for fetch in herd {
        let (fetched, took) = fetch.await.unwrap();
        assert_eq!(answered(&fetched), (Source::Stale, 1), "the expired value");
        assert_eq!(took, ms(100), "at the soft timeout, not before");
    }
    let stats = cache.stats::<Price>();
    assert_eq!(
        (stats.flights, stats.coalesced, stats.soft_timeouts),
        (2, 2, 1),
        "one flight (and the fill's) for the herd, answered at its soft timeout"
    );
    assert_eq!(
        (stats.in_flight, stats.stale_served, store.calls.get()),
        (1, 0, 2),
        "the load goes on"
    );

    // A miss while it goes on joins it, and is answered stale at once.
    let (joined, took) = spawn_fetch(&cache, id).await.unwrap();
    assert_eq!((answered(&joined), took), ((Source::Stale, 1), ms(0)));
    assert_eq!(store.calls.get(), 2, "no second load");

    gate.open();
    eventually("the background load to land", async || {
        cache.stats::<Price>().in_flight == 0
    })
    .await;
    let landed = cache.fetch(id).await;
    assert_eq!(
        answered(&landed),
        (Source::Hit, 2),
        "what it brought is served"
    );
    let stats = cache.stats::<Price>();
    assert_eq!(
        (stats.fills, stats.stale_served, stats.load_timeouts),
        (2, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_stale_value_waiters_wait_for_the_loader() {
    let store = Store::at(1);
    let (cache, clock) = cache(&store);
    // Never loaded, and expired longer ago than the grace.
    let cold = Id::<Price>::mint();
    let gone = Id::<Price>::mint();
    filled_then_dead(&cache, &clock, gone).await;
    clock.advance(ms(60_000));

    store.revision.store(2, SeqCst);
    let gate = store.slow();
    let fetches = [spawn_fetch(&cache, cold), spawn_fetch(&cache, gone)];
    tokio::time::sleep(ms(900)).await; // past the soft timeout, short of the deadline
    assert!(fetches.iter().all(|f| !f.is_finished()), "still waiting");
    gate.open();
    for fetch in fetches {
        let (fetched, took) = fetch.await.unwrap();
        assert_eq!((answered(&fetched), took), ((Source::Fill, 2), ms(900)));
    }
    assert_eq!(cache.stats::<Price>().soft_timeouts, 0);
}

#[tokio::test(start_paused = true)]
async fn the_hard_deadline_still_fires() {
    let store = Store::at(1);
    let (cache, clock) = cache(&store);
    let (cold, dead) = (Id::<Price>::mint(), Id::<Price>::mint());
    filled_then_dead(&cache, &clock, dead).await;
    let _gate = store.slow(); // never opened

    // Nothing stale: the waiter gets the deadline's error.
    let started = Instant::now();
    let (timed_out, took) = spawn_fetch(&cache, cold).await.unwrap();
    assert!(
        matches!(timed_out, Err(Error::LoadTimeout { after, .. }) if after == ms(1_000)),
        "{timed_out:?}"
    );
    assert_eq!(took, ms(1_000));
    assert_eq!(store.dropped(), [started + ms(1_000)], "the load dropped");

    // Stale at the soft timeout; the load is dropped at the deadline.
    let started = Instant::now();
    let (stale, took) = spawn_fetch(&cache, dead).await.unwrap();
    assert_eq!((answered(&stale), took), ((Source::Stale, 1), ms(100)));
    assert_eq!(store.dropped().len(), 1, "the load goes on");
    eventually("the background load's deadline", async || {
        cache.stats::<Price>().in_flight == 0
    })
    .await;
    assert_eq!(
        store.dropped()[1..],
        [started + ms(1_000)],
        "dropped at the deadline"
    );
    let stats = cache.stats::<Price>();
    assert_eq!(
        (stats.load_timeouts, stats.stale_served, stats.soft_timeouts),
        (1, 1, 1),
        "the cold flight timed out, the other ended stale as without a soft timeout"
    );
}

#[tokio::test(start_paused = true)]
async fn the_loader_learns_that_nobody_waits() {
    let store = Store::at(1);
    store.heed.store(true, SeqCst);
    let (cache, clock) = cache(&store);

    // Its waiters answered stale at the soft timeout: nobody waits.
    let id = Id::<Price>::mint();
    filled_then_dead(&cache, &clock, id).await;
    let started = Instant::now();
    let _gate = store.slow();
    let (stale, _) = spawn_fetch(&cache, id).await.unwrap();
    assert_eq!(answered(&stale), (Source::Stale, 1));
    settle().await;
    assert_eq!(store.stopped(), [started + ms(100)]);
    assert!(store.dropped().is_empty(), "it stopped itself");
    let stats = cache.stats::<Price>();
    assert_eq!(
        (stats.in_flight, stats.stale_served, stats.load_errors),
        (0, 1, 0),
        "a failed load, which its grace covers"
    );

    // No soft timeout: its two waiters give up, the second last.
    let id = Id::<Plain>::mint();
    let started = Instant::now();
    let [first, last] = [50, 300].map(|after| {
        let cache = cache.clone();
        tokio::spawn(async move { cache.fetch_within(id, Some(ms(after))).await })
    });
    let gave_up = first.await.unwrap();
    assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
    settle().await;
    assert_eq!(
        store.stopped().len(),
        1,
        "a waiter is left: the load goes on"
    );
    let gave_up = last.await.unwrap();
    assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
    settle().await;
    assert_eq!(store.stopped()[1..], [started + ms(300)]);
    assert_eq!(cache.stats::<Plain>().load_errors, 1);

    // Stopped: nothing was cached, the next fetch loads.
    store.quick();
    let again = cache.fetch(id).await;
    assert_eq!(answered(&again), (Source::Fill, 1));
}

#[tokio::test(start_paused = true)]
async fn a_table_without_a_soft_timeout_waits_for_its_loader_as_before() {
    let store = Store::at(1);
    let (cache, clock) = cache(&store);
    let id = Id::<Plain>::mint();
    filled_then_dead(&cache, &clock, id).await;

    store.revision.store(2, SeqCst);
    let gate = store.slow();
    let fetch = spawn_fetch(&cache, id);
    tokio::time::sleep(ms(900)).await;
    assert!(
        !fetch.is_finished(),
        "a stale value is there, but no soft timeout"
    );
    gate.open();
    let (fetched, took) = fetch.await.unwrap();
    assert_eq!((answered(&fetched), took), ((Source::Fill, 2), ms(900)));
    let stats = cache.stats::<Plain>();
    assert_eq!((stats.soft_timeouts, stats.stale_served), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn an_invalidation_racing_the_background_load_keeps_its_value_out() {
    let store = Store::at(1);
    let (cache, clock) = cache(&store);
    let id = Id::<Price>::mint();
    filled_then_dead(&cache, &clock, id).await;

    // The background load reads revision 2; then the store is written
    // (revision 3) and the id invalidated.
    store.revision.store(2, SeqCst);
    let old_gate = store.slow();
    let (stale, _) = spawn_fetch(&cache, id).await.unwrap();
    assert_eq!(answered(&stale), (Source::Stale, 1));
    store.revision.store(3, SeqCst);
    let new_gate = store.slow();
    bounded("the invalidation", cache.invalidate(id))
        .await
        .unwrap();

    // A fetch that starts now joins no flight answered before the write,
    // and nothing stale is left to answer it.
    let after = spawn_fetch(&cache, id);
    settle().await;
    assert_eq!(store.calls.get(), 3, "a flight of its own");
    old_gate.open();
    eventually("the old load to end", async || {
        cache.stats::<Price>().in_flight == 1
    })
    .await;
    assert!(
        cache.peek::<Price>(id).is_none(),
        "revision 2 installed nowhere"
    );
    tokio::time::sleep(ms(500)).await;
    assert!(!after.is_finished(), "waits for its own load, not stale");
    new_gate.open();
    let (fetched, _) = after.await.unwrap();
    assert_eq!(answered(&fetched), (Source::Fill, 3));
    assert_eq!(answered(&cache.fetch(id).await), (Source::Hit, 3));
}

/// Over L2 on real time: the invalidation's tombstone refuses the
/// background load's frame, so another node never reads it either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_racing_the_background_load_keeps_its_value_out_of_l2() {
    let server = RedisServer::start();
    let store = Store::at(1);
    let node = |clock: &Clock| {
        let builder = cache_builder()
            .l2(server.url())
            .l2_timeout(ms(2_000))
            .fetch_timeout(Some(BOUND))
            .clock(clock.clone());
        store.serve(builder).build().unwrap()
    };
    let clock = Clock::manual();
    let a = node(&clock);
    bounded("node a to be ready", a.ready()).await;
    let id = Id::<Shared>::mint();
    assert_eq!(answered(&a.fetch(id).await), (Source::Fill, 1));
    clock.advance(ms(300));
    // L2's frame lives on for the grace (60 s) past its TTL.
    let mut raw = server.connection().await;
    let key = keyspace::key(Shared::spec(), &id.raw());
    eventually("the frame's TTL to pass", async || {
        raw.pttl::<_, i64>(&key).await.unwrap() < 60_000
    })
    .await;

    store.revision.store(2, SeqCst);
    let old_gate = store.slow();
    let stale = bounded("the soft timeout", a.fetch(id)).await;
    assert_eq!(answered(&stale), (Source::Stale, 1));
    store.revision.store(3, SeqCst);
    store.quick();
    bounded("the invalidation", a.invalidate(id)).await.unwrap();
    old_gate.open();
    eventually("the old load to end", async || {
        a.stats::<Shared>().in_flight == 0
    })
    .await;

    let b = node(&Clock::manual());
    bounded("node b to be ready", b.ready()).await;
    let on_b = bounded("b's fetch", b.fetch(id)).await;
    assert_eq!(answered(&on_b), (Source::Fill, 3), "L2 kept revision 2 out");
    let on_a = bounded("a's fetch", a.fetch(id)).await.unwrap();
    assert_eq!(on_a.revision, 3);
}

#[tokio::test]
async fn a_soft_timeout_given_as_a_limit_follows_the_attributes_rules() {
    let store = Store::default();
    // Within the rules: shown in force.
    let cache = store
        .serve(cache_builder())
        .limits::<Plain>(Limits::new().soft_timeout_ms(250))
        .build()
        .unwrap();
    let plain = cache
        .tables()
        .into_iter()
        .find(|t| t.spec.name() == "soft_plain");
    assert_eq!(plain.unwrap().spec.soft_timeout_ms(), Some(250));

    let refused = |limits: Limits, amend: fn(Builder) -> Builder| {
        let built = amend(store.serve(cache_builder()).limits::<Plain>(limits)).build();
        match built {
            Err(Error::Config(why)) => why,
            other => panic!("refused with Error::Config, got {other:?}"),
        }
    };
    let keep = |builder| builder;
    let why = refused(Limits::new().soft_timeout_ms(0), keep);
    assert!(why.contains("`soft_timeout_ms` may not be 0"), "{why}");
    let why = refused(Limits::new().soft_timeout_ms(1_000), keep);
    assert!(
        why.contains("less than the flight's deadline, `load_timeout_ms` = 1000, not 1000"),
        "{why}"
    );
    let why = refused(
        Limits::new().soft_timeout_ms(100).stale_if_error_ms(0),
        keep,
    );
    assert!(why.contains(&attribute_says("soft_timeout_ms")), "{why}");
    // A declared soft timeout past the builder's deadline.
    let why = refused(Limits::new(), |builder| builder.load_timeout(ms(50)));
    assert!(
        why.contains("\"soft_shared\"") && why.contains("`Builder::load_timeout` = 50, not 50"),
        "{why}"
    );
}

/// The attribute's message for the `soft_timeout_ms` of the UI test
/// `attr/many_mistakes.rs` (which declares one without a grace).
fn attribute_says(key: &str) -> String {
    let path = format!(
        "{}/ui/attr/many_mistakes.stderr",
        env!("CARGO_MANIFEST_DIR")
    );
    let expected = std::fs::read_to_string(&path).expect("the UI test's expected output");
    let prefix = format!("error: `{key}`");
    let line = expected.lines().find(|line| line.starts_with(&prefix));
    let line = line.expect("the attribute's message");
    line.strip_prefix("error: ").unwrap().to_owned()
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> Builder {
    Cache::builder()
        .open::<Price>()
        .open::<Plain>()
        .open::<Shared>()
}
