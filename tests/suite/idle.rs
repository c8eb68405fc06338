//! Time-to-idle (`idle_ms`): a row not read for that long dies before its
//! TTL, and is told to the listener as expired; a row read keeps living,
//! up to its TTL and no longer.
//!
//! Every clock here is [`Clock::manual`]: rows die when the test moves the
//! clock, never because time passed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::eventually;
use echo_cache::{Cache, Clock, Id, Limits, RemovalCause, Source, near_cache};

/// Rows live 10 s exactly, and die unread after 1 s (by 1.5 s); swept
/// every 5 ms.
#[near_cache(
    kind = "IDL",
    ttl_ms = 10_000,
    jitter = 0.0,
    idle_ms = 1_000,
    sweep_ms = 5,
    name = "idle_sessions"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Session {
    n: u64,
}

/// The same rows without a time-to-idle: they live their TTL, read or not.
#[near_cache(
    kind = "IDN",
    ttl_ms = 10_000,
    jitter = 0.0,
    sweep_ms = 5,
    name = "idle_none"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Kept {
    n: u64,
}

/// The causes the listener of [`Session`] was told, by id payload.
type Told = Arc<Mutex<Vec<(u64, RemovalCause)>>>;

fn cache(clock: &Clock, told: &Told, limits: Limits) -> Cache {
    let told = Arc::clone(told);
    Cache::builder()
        .open::<Session>()
        .open::<Kept>()
        .clock(clock.clone())
        .loader(|id: Id<Session>| async move {
            Ok::<_, std::io::Error>(Some(Session { n: id.payload() }))
        })
        .loader(
            |id: Id<Kept>| async move { Ok::<_, std::io::Error>(Some(Kept { n: id.payload() })) },
        )
        .listener(move |id: Id<Session>, _: Arc<Session>, cause| {
            told.lock().unwrap().push((id.payload(), cause));
        })
        .limits::<Session>(limits)
        .build()
        .expect("the cache builds")
}

#[tokio::test]
async fn an_unread_row_dies_at_idle_told_expired_and_swept() {
    let (clock, told) = (Clock::manual(), Told::default());
    let cache = cache(&clock, &told, Limits::new());
    let (id, kept) = (Id::<Session>::mint(), Id::<Kept>::mint());
    cache.fetch(id).await.unwrap();
    cache.fetch(kept).await.unwrap();
    clock.advance(Duration::from_millis(1_499));
    assert!(cache.contains(id), "alive until 1.5 × idle_ms unread");
    clock.advance(Duration::from_millis(1));
    assert!(!cache.contains(id), "dead at 1.5 × idle_ms unread");
    assert!(
        cache.contains(kept),
        "a table without idle_ms keeps its row"
    );
    eventually("the sweeper reclaims the idle row", async || {
        cache.stats::<Session>().swept == 1
    })
    .await;
    assert_eq!(
        *told.lock().unwrap(),
        [(id.payload(), RemovalCause::Expired)]
    );
    assert_eq!(cache.stats::<Session>().size, 0);
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);
}

#[tokio::test]
async fn a_row_read_within_idle_lives_to_its_ttl_and_no_longer() {
    let (clock, told) = (Clock::manual(), Told::default());
    let cache = cache(&clock, &told, Limits::new());
    let id = Id::<Session>::mint();
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);
    // Read every 999 ms: each read leaves the row idle_ms at least.
    for step in 1..=10 {
        clock.advance(Duration::from_millis(999));
        let read = cache.fetch(id).await.unwrap();
        assert_eq!(
            read.source(),
            Source::Hit,
            "read {step} at {} ms",
            step * 999
        );
    }
    clock.advance(Duration::from_millis(9)); // 9_999 ms
    assert!(cache.contains(id));
    clock.advance(Duration::from_millis(1)); // its TTL
    assert!(!cache.contains(id), "the TTL is a hard bound");
    eventually("the sweeper reclaims the row", async || {
        cache.stats::<Session>().swept == 1
    })
    .await;
    assert_eq!(
        *told.lock().unwrap(),
        [(id.payload(), RemovalCause::Expired)]
    );
    let stats = cache.stats::<Session>();
    assert_eq!((stats.hits, stats.fills), (10, 1));
}

#[tokio::test]
async fn a_read_leaves_a_row_idle_at_least_and_at_most_one_and_a_half_idle() {
    let (clock, told) = (Clock::manual(), Told::default());
    let cache = cache(&clock, &told, Limits::new());
    let (early, late) = (Id::<Session>::mint(), Id::<Session>::mint());
    cache.fetch(early).await.unwrap();
    cache.fetch(late).await.unwrap();
    clock.advance(Duration::from_millis(400));
    assert_eq!(cache.fetch(early).await.unwrap().source(), Source::Hit);
    clock.advance(Duration::from_millis(400));
    assert_eq!(cache.fetch(late).await.unwrap().source(), Source::Hit);
    // `early` was read at 400 ms (and left as it was: 1.1 s to live),
    // `late` at 800 ms (extended to 1.5 s from then).
    clock.advance(Duration::from_millis(699)); // 1_499 ms
    assert!(cache.contains(early) && cache.contains(late));
    clock.advance(Duration::from_millis(1));
    assert!(!cache.contains(early), "1.1 s after its last read");
    clock.advance(Duration::from_millis(799)); // 2_299 ms
    assert!(cache.contains(late));
    clock.advance(Duration::from_millis(1));
    assert!(!cache.contains(late), "1.5 s after its last read");
}

#[tokio::test]
async fn a_builder_limit_sets_idle_ms_and_tables_shows_it() {
    let (clock, told) = (Clock::manual(), Told::default());
    let cache = cache(&clock, &told, Limits::new().idle_ms(100));
    let spec = |name| {
        let tables = cache.tables();
        tables
            .iter()
            .find(|t| t.spec.name() == name)
            .map(|t| t.spec)
    };
    assert_eq!(spec("idle_sessions").map(|s| s.idle_ms()), Some(100));
    assert_eq!(spec("idle_none").map(|s| s.idle_ms()), Some(0));
    let id = Id::<Session>::mint();
    cache.fetch(id).await.unwrap();
    clock.advance(Duration::from_millis(150));
    assert!(!cache.contains(id), "dead at 1.5 × the idle_ms in force");

    let refused = Cache::builder()
        .open::<Session>()
        .without_loader::<Session>()
        .limits::<Session>(Limits::new().idle_ms(0))
        .build();
    assert!(
        matches!(&refused, Err(echo_cache::Error::Config(why)) if why.contains("`idle_ms` may not be 0")),
        "{refused:?}"
    );
    let refused = Cache::builder()
        .open::<Session>()
        .without_loader::<Session>()
        .limits::<Session>(Limits::new().ttl_ms(1_000))
        .build();
    assert!(
        matches!(&refused, Err(echo_cache::Error::Config(why)) if why.contains("`idle_ms` as declared")),
        "{refused:?}"
    );
}
