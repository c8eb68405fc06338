//! Fail-safe (`stale_if_error_ms`): while the loader fails or times out, an
//! expired value answers for the declared grace ([`Source::Stale`]), never
//! after an invalidation of its id, and the loader is left alone for a
//! moment after each failure.
//!
//! L1 tests run on a [`Clock::manual`]: rows die when the test moves the
//! clock. L2 frames expire on the wall clock (they are shared by nodes):
//! the L2 tests wait, bounded, for the server to say a frame's TTL is past.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{BOUND, Calls, bounded, eventually};
use echo_cache::{Builder, Cache, Cached, Clock, Error, Id, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use redis::AsyncCommands;

/// A table whose rows live exactly 10 s, then answer stale for 5 s more
/// while the loader fails.
#[near_cache(
    kind = "SES",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 5_000,
    name = "stale_session"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Session {
    revision: u64,
}

/// The same without a grace: today's behaviour.
#[near_cache(kind = "SPN", ttl_ms = 10_000, jitter = 0.0, name = "stale_plain")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Plain {
    revision: u64,
}

/// A grace, and a flight deadline of 50 ms.
#[near_cache(
    kind = "SLW",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 5_000,
    load_timeout_ms = 50
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Slow {
    revision: u64,
}

/// A grace, and a sweeper every 5 ms.
#[near_cache(
    kind = "SSW",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 5_000,
    sweep_ms = 5,
    name = "stale_swept"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Swept {
    revision: u64,
}

/// On a server: rows (and frames) live 300 ms, then answer stale for 60 s.
#[near_cache(
    kind = "SBR",
    ttl_ms = 300,
    jitter = 0.0,
    stale_if_error_ms = 60_000,
    coherence = "broadcast",
    name = "stale_broadcast"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Broadcast {
    revision: u64,
}

/// The same, kept coherent by the server's tracking.
#[near_cache(
    kind = "STK",
    ttl_ms = 300,
    jitter = 0.0,
    stale_if_error_ms = 60_000,
    coherence = "tracking",
    name = "stale_tracked"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tracked {
    revision: u64,
}

/// On a server without a coherence channel: rows live 10 s, then answer
/// stale for 60 s; B learns of A's invalidations only from L2's tombstones.
#[near_cache(
    kind = "SNO",
    ttl_ms = 10_000,
    jitter = 0.0,
    stale_if_error_ms = 60_000,
    coherence = "none",
    name = "stale_unshared"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Unshared {
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
entity!(Session, Plain, Slow, Swept, Broadcast, Tracked, Unshared);

const UP: u8 = 0;
const FAILING: u8 = 1;
const HANGING: u8 = 2;

/// The system of record: up (each load answers the next revision),
/// failing (an error) or hanging (never answers); it counts its calls.
#[derive(Clone, Default)]
struct Store {
    mode: Arc<AtomicU8>,
    revision: Arc<AtomicU64>,
    calls: Calls,
}

type Load<T> = BoxFuture<'static, Result<Option<T>, std::io::Error>>;

impl Store {
    fn set(&self, mode: u8) {
        self.mode.store(mode, SeqCst);
    }

    fn loader<T: Entity>(&self) -> impl Fn(Id<T>) -> Load<T> + Send + Sync + 'static {
        let store = self.clone();
        move |_| {
            store.calls.count();
            match store.mode.load(SeqCst) {
                UP => {
                    let revision = store.revision.fetch_add(1, SeqCst) + 1;
                    async move { Ok(Some(T::at(revision))) }.boxed()
                }
                FAILING => async { Err(std::io::Error::other("the store is down")) }.boxed(),
                _ => futures_util::future::pending().boxed(),
            }
        }
    }

    /// `builder` with this store as the loader of every table.
    fn serve(&self, builder: Builder) -> Builder {
        builder
            .loader(self.loader::<Session>())
            .loader(self.loader::<Plain>())
            .loader(self.loader::<Slow>())
            .loader(self.loader::<Swept>())
            .loader(self.loader::<Broadcast>())
            .loader(self.loader::<Tracked>())
            .loader(self.loader::<Unshared>())
    }
}

/// An L1-only cache on a manual clock, loading from `store`.
fn cache(store: &Store) -> (Cache, Clock) {
    let clock = Clock::manual();
    let builder = cache_builder().clock(clock.clone());
    (store.serve(builder).build().unwrap(), clock)
}

/// A node on `server`, on a manual clock, loading from `store`; linked.
async fn node(server: &RedisServer, store: &Store) -> (Cache, Clock) {
    node_with(server, store, |builder| builder).await
}

/// [`node`], its builder amended by `amend`.
async fn node_with(
    server: &RedisServer,
    store: &Store,
    amend: impl FnOnce(Builder) -> Builder,
) -> (Cache, Clock) {
    let clock = Clock::manual();
    let builder = cache_builder()
        .l2(server.url())
        .l2_timeout(Duration::from_secs(2))
        .fetch_timeout(Some(BOUND))
        .coherence_ping_every(Duration::from_millis(200))
        .clock(clock.clone());
    let cache = store.serve(amend(builder)).build().unwrap();
    bounded("the node to be ready", cache.ready()).await;
    (cache, clock)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What a fetch answered: the source and the revision, or the error.
async fn fetch<T: Entity>(cache: &Cache, id: Id<T>) -> Result<(Source, u64), Error> {
    cache
        .fetch(id)
        .await
        .map(|fetched| (fetched.source(), fetched.revision()))
}

fn is_load_error<T>(answer: &Result<T, Error>) -> bool {
    matches!(answer, Err(Error::Load { .. }))
}

#[tokio::test]
async fn store_down_serves_the_stale_value_within_the_grace_and_the_error_after() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let id = Id::<Session>::mint();
    let filled = cache.fetch(id).await.unwrap();
    assert_eq!((filled.source(), filled.revision), (Source::Fill, 1));

    store.set(FAILING);
    clock.advance(ms(10_000)); // just dead
    let stale = cache.fetch(id).await.unwrap();
    assert_eq!(stale.source(), Source::Stale);
    assert_eq!((stale.revision, stale.version()), (1, filled.version()));
    assert!(Arc::ptr_eq(stale.value(), filled.value()), "L1's own value");
    // Served, not installed: the next fetch is a flight again.
    clock.advance(ms(4_999)); // the last millisecond of the grace
    assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Stale, 1));
    let stats = cache.stats::<Session>();
    assert_eq!(
        (stats.stale_served, stats.hits, stats.load_errors),
        (2, 0, 0)
    );
    assert_eq!(store.calls.get(), 3, "the fill, then a load per flight");

    clock.advance(ms(1)); // the grace is over
    assert!(
        is_load_error(&fetch(&cache, id).await),
        "the loader's error"
    );
    assert_eq!(cache.stats::<Session>().load_errors, 1);
}

#[tokio::test]
async fn without_a_grace_the_loader_error_answers_as_today() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let (plain, session) = (Id::<Plain>::mint(), Id::<Session>::mint());
    cache.fetch(plain).await.unwrap();
    cache.fetch(session).await.unwrap();

    store.set(FAILING);
    clock.advance(ms(10_000));
    assert!(
        is_load_error(&fetch(&cache, plain).await),
        "no grace declared"
    );
    assert_eq!(Plain::spec().stale_if_error_ms(), 0, "off unless declared");
    // The same moment, on a table with a grace:
    assert_eq!(fetch(&cache, session).await.unwrap(), (Source::Stale, 2));
    assert_eq!(cache.stats::<Plain>().stale_served, 0);
}

#[tokio::test]
async fn the_loader_is_not_called_again_within_the_backoff() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let id = Id::<Session>::mint();
    cache.fetch(id).await.unwrap();
    store.set(FAILING);
    clock.advance(ms(10_000));

    assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Stale, 1));
    assert_eq!(store.calls.get(), 2, "the fill, then the failed load");
    // Within the backoff (min(grace, 1 s)): answered without the loader.
    for _ in 0..3 {
        assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Stale, 1));
    }
    clock.advance(ms(999));
    assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Stale, 1));
    assert_eq!(store.calls.get(), 2, "the failing store was left alone");
    let stats = cache.stats::<Session>();
    assert_eq!((stats.stale_served, stats.stale_backoffs), (5, 4));

    // Past the backoff the loader is asked again; once it answers, the
    // value is fresh.
    clock.advance(ms(1));
    store.set(UP);
    let fresh = cache.fetch(id).await.unwrap();
    assert_eq!((fresh.source(), fresh.revision), (Source::Fill, 2));
    assert_eq!(store.calls.get(), 3);
    assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Hit, 2));
}

#[tokio::test]
async fn a_loader_timeout_serves_stale_too() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let id = Id::<Slow>::mint();
    cache.fetch(id).await.unwrap();

    store.set(HANGING);
    clock.advance(ms(10_000));
    assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Stale, 1));
    let stats = cache.stats::<Slow>();
    assert_eq!((stats.stale_served, stats.load_timeouts), (1, 0));

    clock.advance(ms(5_000));
    assert!(matches!(
        fetch(&cache, id).await,
        Err(Error::LoadTimeout { .. })
    ));
}

#[tokio::test]
async fn an_invalidated_id_is_never_served_stale() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let (revoked, kept, put) = (
        Id::<Session>::mint(),
        Id::<Session>::mint(),
        Id::<Session>::mint(),
    );
    for id in [revoked, kept, put] {
        cache.fetch(id).await.unwrap();
    }
    clock.advance(ms(10_000)); // every row dead, in its grace
    store.set(FAILING);
    cache.invalidate(revoked).await.unwrap();

    assert!(
        is_load_error(&fetch(&cache, revoked).await),
        "an invalidated id answers the loader's error"
    );
    // A put replaces the row: a fresh value, never the older one.
    cache.put(put, Session { revision: 99 }).await.unwrap();
    assert_eq!(fetch(&cache, put).await.unwrap(), (Source::Hit, 99));
    // The one not invalidated is served stale (the grace is on).
    assert_eq!(fetch(&cache, kept).await.unwrap(), (Source::Stale, 2));
    // Nor after a flush.
    cache.flush::<Session>();
    assert!(is_load_error(&fetch(&cache, kept).await));
}

#[tokio::test]
async fn the_sweeper_keeps_a_dead_row_for_the_grace_then_reclaims_it() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let id = Id::<Swept>::mint();
    cache.fetch(id).await.unwrap();

    clock.advance(ms(10_000));
    let sweeps = cache.stats::<Swept>().sweeps;
    eventually("two more sweeps", async || {
        cache.stats::<Swept>().sweeps >= sweeps + 2
    })
    .await;
    let stats = cache.stats::<Swept>();
    assert_eq!((stats.size, stats.swept), (1, 0), "dead, in its grace");
    store.set(FAILING);
    assert_eq!(fetch(&cache, id).await.unwrap(), (Source::Stale, 1));

    clock.advance(ms(5_000));
    // A sweep counts what it removed once it is done: both, then.
    eventually("the row to be reclaimed by the sweeper", async || {
        let stats = cache.stats::<Swept>();
        (stats.size, stats.swept) == (0, 1)
    })
    .await;
}

/// The L2 key of `id`.
fn key<T: Cached>(id: Id<T>) -> String {
    keyspace::key(T::spec(), &id.raw())
}

/// Waits until the frame of `id` is past its TTL: it lives on in L2 for
/// the grace (60 s), so its PTTL drops below the grace.
async fn frame_expired<T: Cached>(server: &RedisServer, id: Id<T>) {
    let mut raw = server.connection().await;
    let pttl: i64 = raw.pttl(key(id)).await.unwrap();
    // Written moments ago with PX = ttl + grace (a fraction of the grace
    // may have passed since: the test waited for another frame first).
    assert!(
        (50_000..=60_300).contains(&pttl),
        "PX = ttl + grace, got a PTTL of {pttl}"
    );
    eventually("the frame's TTL to pass", async || {
        raw.pttl::<_, i64>(key(id)).await.unwrap() < 60_000
    })
    .await;
}

#[tokio::test]
async fn an_expired_l2_frame_answers_stale_on_another_node() {
    let server = RedisServer::start();
    let (up, down) = (Store::default(), Store::default());
    let (a, _) = node(&server, &up).await;
    let (b, _) = node(&server, &down).await;
    let id = Id::<Broadcast>::mint();
    let filled = a.fetch(id).await.unwrap();
    assert_eq!(
        fetch(&b, id).await.unwrap(),
        (Source::L2, 1),
        "a live frame"
    );
    b.flush::<Broadcast>(); // B's L1 forgets it: only L2 has it now

    frame_expired(&server, id).await;
    down.set(FAILING);
    let stale = b.fetch(id).await.unwrap();
    assert_eq!(stale.source(), Source::Stale);
    assert_eq!((stale.revision, stale.version()), (1, filled.version()));
    // An expired frame is a miss when the store is up.
    down.set(UP);
    b.clock().advance(ms(1_000)); // past the backoff
    assert_eq!(fetch(&b, id).await.unwrap(), (Source::Fill, 1));
}

/// B holds two dead rows (and their expired frames); A invalidates one.
/// B never serves that one stale, from L1 or L2; the other it does.
async fn another_nodes_invalidate_is_never_served_stale<T: Entity>() {
    let server = RedisServer::start();
    let (up, down) = (Store::default(), Store::default());
    let (a, _) = node(&server, &up).await;
    let (b, b_clock) = node(&server, &down).await;
    let (revoked, kept) = (Id::<T>::mint(), Id::<T>::mint());
    for id in [revoked, kept] {
        assert_eq!(fetch(&b, id).await.unwrap().0, Source::Fill);
    }
    frame_expired(&server, revoked).await;
    frame_expired(&server, kept).await;
    b_clock.advance(ms(300)); // B's rows dead too, in their grace
    down.set(FAILING);

    let before = b.stats::<T>();
    a.invalidate(revoked).await.unwrap();
    // Counted before the row goes (`Table::apply`): both, then (the dead
    // row counts in the size until it is gone).
    eventually("B to apply the invalidation", async || {
        let now = b.stats::<T>();
        now.invalidations > before.invalidations && now.size < before.size
    })
    .await;
    assert!(
        is_load_error(&fetch(&b, revoked).await),
        "never the revoked value"
    );
    assert_eq!(fetch(&b, kept).await.unwrap(), (Source::Stale, 2));
}

#[tokio::test]
async fn another_nodes_invalidate_is_never_served_stale_broadcast() {
    another_nodes_invalidate_is_never_served_stale::<Broadcast>().await;
}

#[tokio::test]
async fn another_nodes_invalidate_is_never_served_stale_tracking() {
    another_nodes_invalidate_is_never_served_stale::<Tracked>().await;
}

/// A `none` table: B's row of `id` lives its TTL after A's invalidation
/// (no channel tells B), but is never served stale after it: A's tombstone
/// outlives the row and its grace, whatever the builder's `tombstone_ttl`.
#[tokio::test]
async fn a_none_tables_tombstone_outlives_every_row_it_buried() {
    let server = RedisServer::start();
    let (up, down) = (Store::default(), Store::default());
    let short = |builder: Builder| builder.tombstone_ttl(ms(100));
    let (a, _) = node_with(&server, &up, short).await;
    let (b, b_clock) = node_with(&server, &down, short).await;
    let id = Id::<Unshared>::mint();
    assert_eq!(fetch(&b, id).await.unwrap(), (Source::Fill, 1));

    a.invalidate(id).await.unwrap();
    let mut raw = server.connection().await;
    let pttl: i64 = raw.pttl(key(id)).await.unwrap();
    // B's row: 10 s, then a 60 s grace; a fill may land a flight's
    // deadline after the invalidation.
    assert!(pttl > 70_000, "the tombstone lives {pttl} ms");
    b_clock.advance(ms(10_000)); // B's row dead, in its grace
    down.set(FAILING);
    assert!(
        is_load_error(&fetch(&b, id).await),
        "never the invalidated value"
    );
}

/// A `none` table serves nothing stale when L2 cannot say whether the id
/// was invalidated: a failed read is no proof.
#[tokio::test]
async fn a_none_table_serves_nothing_stale_when_l2_does_not_answer() {
    let server = RedisServer::start();
    let (up, down) = (Store::default(), Store::default());
    let (a, _) = node(&server, &up).await;
    let quick = |builder: Builder| builder.l2_timeout(ms(200));
    let (b, b_clock) = node_with(&server, &down, quick).await;
    let (revoked, kept) = (Id::<Unshared>::mint(), Id::<Unshared>::mint());
    for id in [revoked, kept] {
        assert_eq!(fetch(&b, id).await.unwrap().0, Source::Fill);
    }
    a.invalidate(revoked).await.unwrap();
    b_clock.advance(ms(10_000)); // B's rows dead, in their grace
    down.set(FAILING);

    server.pause();
    for id in [revoked, kept] {
        assert!(is_load_error(&fetch(&b, id).await), "nothing stale");
    }
    let batch = b.fetch_many([revoked, kept]).await;
    server.resume();
    assert!(batch.iter().all(is_load_error), "nothing stale: {batch:?}");
    // L2 answers again (once its breaker lets reads through): its live
    // frame of the one, its tombstone of the other.
    eventually("L2 to answer B again", async || {
        fetch(&b, kept).await.ok() == Some((Source::L2, 2))
    })
    .await;
    assert!(is_load_error(&fetch(&b, revoked).await));
}

#[tokio::test]
async fn a_batch_serves_stale_too_and_not_an_invalidated_id() {
    let store = Store::default();
    let (cache, clock) = cache(&store);
    let (kept, revoked) = (Id::<Session>::mint(), Id::<Session>::mint());
    let filled = cache.fetch_many([kept, revoked]).await;
    let revision = filled[0].as_ref().expect("filled").revision;
    store.set(FAILING);
    cache.invalidate(revoked).await.unwrap();
    clock.advance(ms(10_000));

    let answers = cache.fetch_many([kept, revoked]).await;
    let answer = answers[0].as_ref().expect("served stale");
    assert_eq!(
        (answer.source(), answer.revision),
        (Source::Stale, revision)
    );
    assert!(is_load_error(&answers[1]), "invalidated: never stale");
    assert_eq!(cache.stats::<Session>().stale_served, 1);
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Session>()
        .open::<Plain>()
        .open::<Slow>()
        .open::<Swept>()
        .open::<Broadcast>()
        .open::<Tracked>()
        .open::<Unshared>()
}
