//! Limits from configuration: [`Builder::limits`] and
//! [`Builder::limits_named`] set a table's `ttl_ms`, `jitter`,
//! `max_size`, `refresh_ms` and `stale_if_error_ms` in place of the
//! declared ones; [`Cache::tables`] shows them, every part of the table
//! follows them, and a mistake is refused in the attribute's words.
//!
//! L1 tests run on a [`Clock::manual`]; the L2 tests read the server's
//! PTTLs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use crate::common::eventually;
use echo_cache::{
    Builder, Cache, Cached, Clock, Error, Eviction, Health, Id, Limits, Source, keyspace,
    near_cache,
};
use echo_cache_testkit::RedisServer;
use redis::AsyncCommands;

/// Ten-minute rows, 50,000 of them, full means full.
#[near_cache(
    kind = "LMG",
    ttl_ms = 600_000,
    jitter = 0.0,
    max_size = 50_000,
    eviction = "none",
    coherence = "broadcast",
    name = "limits_games"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Game {
    n: u64,
}

/// A minute, with the default jitter: what the UI tests declare.
#[near_cache(kind = "LMP", ttl_ms = 60_000, name = "limits_plain")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Plain {
    n: u64,
}

/// A `none` table of 10 s rows.
#[near_cache(kind = "LMU", ttl_ms = 10_000, jitter = 0.0, name = "limits_unshared")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Unshared {
    n: u64,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A system of record: every table answers `n`, or fails while `down`.
#[derive(Clone, Default)]
struct Store {
    n: Arc<AtomicU64>,
    down: Arc<AtomicBool>,
}

impl Store {
    fn answer<T>(&self, make: fn(u64) -> T) -> impl Fn(Id<T>) -> Loaded<T> + Send + Sync + 'static
    where
        T: Send + 'static,
    {
        let store = self.clone();
        move |_| {
            let (n, down) = (store.n.load(SeqCst), store.down.load(SeqCst));
            Box::pin(async move {
                if down {
                    return Err(std::io::Error::other("the store is down"));
                }
                Ok(Some(make(n)))
            })
        }
    }
}

type Loaded<T> = futures_util::future::BoxFuture<'static, Result<Option<T>, std::io::Error>>;

/// A cache of this module's tables, each loading from `store`.
fn builder(store: &Store) -> Builder {
    cache_builder()
        .loader(store.answer(|n| Game { n }))
        .loader(store.answer(|n| Plain { n }))
        .loader(store.answer(|n| Unshared { n }))
}

/// The spec in force of `T`'s table, as the roster shows it.
fn in_force<T: Cached>(cache: &Cache) -> echo_cache::TableSpec {
    let tables = cache.tables();
    let info = tables.iter().find(|t| t.spec.name() == T::spec().name());
    *info.expect("the table is open").spec
}

#[tokio::test]
async fn tables_shows_the_limits_in_force_and_the_declaration_stays_the_default() {
    let limits = Limits::new()
        .ttl_ms(30_000)
        .jitter(0.2)
        .max_size(10)
        .refresh_ms(5_000)
        .stale_if_error_ms(1_000);
    let cache = builder(&Store::default())
        .limits::<Game>(limits)
        .build()
        .expect("within the rules");

    let (game, declared) = (in_force::<Game>(&cache), Game::spec());
    assert_eq!(
        (game.ttl_ms(), game.jitter(), game.max_size()),
        (30_000, 0.2, 10)
    );
    assert_eq!(
        (game.refresh_ms(), game.stale_if_error_ms()),
        (5_000, 1_000)
    );
    // The declaration is untouched, and the source of the rest.
    assert_eq!((declared.ttl_ms(), declared.max_size()), (600_000, 50_000));
    assert_eq!(game.name(), declared.name());
    assert_eq!(game.kind(), declared.kind());
    assert_eq!(game.coherence(), declared.coherence());
    assert_eq!(game.placement(), declared.placement());
    assert_eq!(game.eviction(), Eviction::None);
    assert_eq!(game.fingerprint(), declared.fingerprint());
    // A table given no limits is as declared.
    assert_eq!(in_force::<Plain>(&cache), *Plain::spec());
}

#[tokio::test]
async fn the_last_limits_given_win_by_type_or_by_name() {
    let cache = builder(&Store::default())
        .limits::<Game>(Limits::new().max_size(10))
        .limits_named("limits_games", Limits::new().ttl_ms(5_000))
        .limits_named("limits_plain", Limits::new().max_size(7))
        .build()
        .expect("within the rules");
    let game = in_force::<Game>(&cache);
    assert_eq!(
        (game.ttl_ms(), game.max_size()),
        (5_000, 50_000),
        "the later limits replace the earlier ones whole"
    );
    assert_eq!(in_force::<Plain>(&cache).max_size(), 7);

    // Two caches with the same limits share one spec in force.
    let again = builder(&Store::default())
        .limits_named("limits_plain", Limits::new().max_size(7))
        .build()
        .expect("within the rules");
    let (one, two) = (cache.tables(), again.tables());
    let plain = |tables: &[echo_cache::TableInfo]| {
        let info = tables.iter().find(|t| t.spec.name() == "limits_plain");
        std::ptr::from_ref(info.expect("open").spec)
    };
    assert_eq!(plain(&one), plain(&two));
}

#[tokio::test]
async fn l1_holds_the_max_size_in_force() {
    let cache = builder(&Store::default())
        .limits::<Game>(Limits::new().max_size(2))
        .build()
        .expect("a cache");
    for n in 0..3 {
        cache
            .fetch(Id::<Game>::from_payload(n))
            .await
            .expect("served");
    }
    let stats = cache.stats::<Game>();
    assert_eq!((stats.size, stats.full_skips), (2, 1), "{stats:?}");
    assert_eq!(crate::common::health::<Game>(&cache), Health::Full);
}

#[tokio::test]
async fn rows_live_the_ttl_in_force() {
    let clock = Clock::manual();
    let cache = builder(&Store::default())
        .clock(clock.clone())
        .limits::<Game>(Limits::new().ttl_ms(2_000))
        .build()
        .expect("a cache");
    let id = Id::<Game>::mint();
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);
    clock.advance(ms(1_999));
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
    clock.advance(ms(1));
    assert_eq!(
        cache.fetch(id).await.unwrap().source(),
        Source::Fill,
        "dead at 2 s, not at the declared 10 minutes"
    );
}

#[tokio::test]
async fn l2_frames_live_the_ttl_in_force() {
    let server = RedisServer::start();
    let cache = builder(&Store::default())
        .l2(server.url())
        .l2_timeout(ms(2_000))
        .limits::<Unshared>(Limits::new().ttl_ms(5_000))
        .build()
        .expect("a cache");
    let id = Id::<Unshared>::mint();
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);

    let mut raw = server.connection().await;
    let key = keyspace::key(Unshared::spec(), &id.raw());
    eventually("the fill's frame", async || {
        raw.exists::<_, bool>(&key).await.unwrap()
    })
    .await;
    let pttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(
        (1..=5_000).contains(&pttl),
        "PX = the 5 s in force, not the declared 10 s: {pttl}"
    );
}

#[tokio::test]
async fn rows_are_refreshed_ahead_by_the_refresh_in_force() {
    let (store, clock) = (Store::default(), Clock::manual());
    let cache = builder(&store)
        .clock(clock.clone())
        .limits::<Plain>(Limits::new().jitter(0.0).refresh_ms(10_000))
        .build()
        .expect("a cache");
    let id = Id::<Plain>::mint();
    assert_eq!(cache.fetch(id).await.unwrap().n, 0);

    store.n.store(1, SeqCst);
    clock.advance(ms(50_000)); // 10 s left: due
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
    eventually("the refresh to land", async || {
        cache.stats::<Plain>().in_flight == 0
    })
    .await;
    assert_eq!(cache.stats::<Plain>().refreshes, 1);
    clock.advance(ms(10_000)); // past the first row's life
    let read = cache.fetch(id).await.unwrap();
    assert_eq!(
        (read.source(), read.n),
        (Source::Hit, 1),
        "the refreshed row"
    );
}

#[tokio::test]
async fn a_grace_in_force_serves_stale_while_the_store_fails() {
    let (store, clock) = (Store::default(), Clock::manual());
    let cache = builder(&store)
        .clock(clock.clone())
        .limits::<Unshared>(Limits::new().stale_if_error_ms(5_000))
        .build()
        .expect("a cache");
    let id = Id::<Unshared>::mint();
    cache.fetch(id).await.unwrap();

    store.down.store(true, SeqCst);
    clock.advance(ms(10_000)); // expired
    let stale = cache.fetch(id).await.expect("the grace answers");
    assert_eq!(stale.source(), Source::Stale);
    clock.advance(ms(5_000)); // the grace is over
    assert!(matches!(cache.fetch(id).await, Err(Error::Load { .. })));
}

/// A `none` table learns of other nodes' invalidations only from L2's
/// tombstones: with a grace in force, they outlive every row a node may
/// still answer (10 s, then the grace), whatever `tombstone_ttl` says.
#[tokio::test]
async fn a_grace_in_force_keeps_a_none_tables_tombstones_long_enough() {
    let server = RedisServer::start();
    let node = |grace: Option<u64>| {
        let limits = grace.map_or(Limits::new(), |ms| Limits::new().stale_if_error_ms(ms));
        builder(&Store::default())
            .l2(server.url())
            .l2_timeout(ms(2_000))
            .tombstone_ttl(ms(100_000))
            .limits::<Unshared>(limits)
            .build()
            .expect("a cache")
    };
    let mut raw = server.connection().await;
    let mut tombstone = async |cache: Cache| {
        let id = Id::<Unshared>::mint();
        cache.invalidate(id).await.expect("invalidated");
        let key = keyspace::key(Unshared::spec(), &id.raw());
        raw.pttl::<_, i64>(&key).await.unwrap()
    };
    let plain = tombstone(node(None)).await;
    assert!((1..=100_000).contains(&plain), "the builder's: {plain}");
    // 10 s rows, a day's grace and a flight's deadline (30 s).
    let graced = tombstone(node(Some(86_400_000))).await;
    assert!(graced > 86_400_000 + 10_000, "outlives the grace: {graced}");
}

/// The attribute's message for a declaration of `file` (a UI test of
/// `tests/ui/value`): its expected output's first line.
fn attribute_says(file: &str) -> String {
    let path = format!("{}/ui/value/{file}.stderr", env!("CARGO_MANIFEST_DIR"));
    let expected = std::fs::read_to_string(&path).expect("the UI test's expected output");
    let first = expected.lines().next().expect("a line");
    first.strip_prefix("error: ").expect("an error").to_owned()
}

#[tokio::test]
async fn a_mistake_is_refused_in_the_attributes_words() {
    // The same mistakes as the UI tests' declarations (60 s rows, the
    // default jitter), given to the builder instead.
    let cases = [
        ("ttl_zero", Limits::new().ttl_ms(0)),
        ("max_size_zero", Limits::new().max_size(0)),
        ("jitter_out_of_band", Limits::new().jitter(0.7)),
        (
            "stale_if_error_too_long",
            Limits::new().stale_if_error_ms(604_800_000),
        ),
        ("refresh_past_life", Limits::new().refresh_ms(54_000)),
    ];
    for (file, limits) in cases {
        let refused = builder(&Store::default()).limits::<Plain>(limits).build();
        let Err(Error::Config(why)) = refused else {
            panic!("{file}: refused with Error::Config, got {refused:?}");
        };
        let expected = format!(
            "the limits given to the table \"limits_plain\" (`{}`): {}",
            Plain::spec().type_name(),
            attribute_says(file)
        );
        assert_eq!(why, expected, "{file}");
    }
}

#[tokio::test]
async fn limits_of_an_unknown_or_closed_table_are_refused() {
    let unknown = builder(&Store::default())
        .limits_named("limits_gmaes", Limits::new().ttl_ms(1))
        .build();
    let Err(Error::Config(why)) = unknown else {
        panic!("an unknown table is refused: {unknown:?}");
    };
    assert!(why.contains("\"limits_gmaes\""), "{why}");

    let closed = Cache::builder()
        .open::<Plain>()
        .without_loader::<Plain>()
        .limits::<Game>(Limits::new().ttl_ms(1_000))
        .build();
    let Err(Error::Config(why)) = closed else {
        panic!("a closed table's limits are refused: {closed:?}");
    };
    assert!(
        why.contains("given a loader, a codec, a listener or limits"),
        "{why}"
    );
    assert!(why.contains(Game::spec().type_name()), "{why}");
}

fn cache_builder() -> Builder {
    Cache::builder()
        .open::<Game>()
        .open::<Plain>()
        .open::<Unshared>()
}
