//! Refresh-ahead: a row read when less than `refresh_ms` of its life
//! remain is reloaded by one background flight while readers keep its
//! value, and the reload lands under the usual overtake rules.
//!
//! Every clock here is [`Clock::manual`]: rows die when the test moves the
//! clock, never because time passed.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::common::{Calls, Gate, eventually};
use echo_cache::{Cache, Clock, Id, Source, near_cache};

/// Rows live exactly 1 s; a read in their last 200 ms refreshes them.
#[near_cache(
    kind = "RFA",
    ttl_ms = 1_000,
    jitter = 0.0,
    refresh_ms = 200,
    name = "refresh_hot"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hot {
    n: u64,
}

/// The same rows without refresh-ahead.
#[near_cache(kind = "RFO", ttl_ms = 1_000, jitter = 0.0, name = "refresh_plain")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Plain {
    n: u64,
}

/// A cache on a manual clock whose loaders answer the current value of
/// `db` and count their calls.
fn rig(db: &Arc<AtomicU64>, calls: &Calls, clock: &Clock) -> Cache {
    let loads = |db: &Arc<AtomicU64>, calls: &Calls| {
        let (db, calls) = (Arc::clone(db), calls.clone());
        move || {
            calls.count();
            db.load(Ordering::SeqCst)
        }
    };
    let (hot, plain) = (loads(db, calls), loads(db, calls));
    cache_builder()
        .clock(clock.clone())
        .loader(move |_: Id<Hot>| {
            let n = hot();
            async move { Ok::<_, std::io::Error>(Some(Hot { n })) }
        })
        .loader(move |_: Id<Plain>| {
            let n = plain();
            async move { Ok::<_, std::io::Error>(Some(Plain { n })) }
        })
        .build()
        .expect("a cache")
}

#[tokio::test]
async fn a_hot_row_read_across_its_ttl_never_misses_and_loads_once_a_period() {
    let (db, calls, clock) = (
        Arc::new(AtomicU64::new(0)),
        Calls::default(),
        Clock::manual(),
    );
    let cache = rig(&db, &calls, &clock);
    let id = Id::<Hot>::mint();
    let first = cache.fetch(id).await.expect("filled");
    assert_eq!(first.source(), Source::Fill);

    // Five TTLs, read every 50 ms. A row lives 1 s from its (re)load and
    // is refreshed by the first read within its last 200 ms: at 800 ms,
    // then every 800 ms (1600, 2400, 3200, 4000, 4800).
    for step in 1..=100 {
        db.store(step, Ordering::SeqCst);
        clock.advance(Duration::from_millis(50));
        let read = cache.fetch(id).await.expect("a hit");
        assert_eq!(read.source(), Source::Hit, "step {step}: a hot row missed");
        // The refresh runs on the runtime: let it land before time moves.
        eventually("the refresh to land", async || {
            cache.stats::<Hot>().in_flight == 0
        })
        .await;
    }
    let stats = cache.stats::<Hot>();
    assert_eq!(stats.refreshes, 6, "one refresh a period: {stats:?}");
    assert_eq!(calls.get(), 7, "the fill and one load a period");
    assert_eq!((stats.misses, stats.flights, stats.fills), (1, 1, 7));
    // The row holds the last refresh's value (loaded at step 96: 4.8 s).
    assert_eq!(cache.fetch(id).await.expect("a hit").n, 96);
}

#[tokio::test]
async fn a_refresh_overtaken_by_an_invalidation_installs_nothing() {
    let (db, calls, clock) = (
        Arc::new(AtomicU64::new(1)),
        Calls::default(),
        Clock::manual(),
    );
    let (entered, gate) = (Gate::closed(), Gate::closed());
    let cache = {
        let (db, calls, entered, gate) = (
            Arc::clone(&db),
            calls.clone(),
            entered.clone(),
            gate.clone(),
        );
        cache_builder()
            .clock(clock.clone())
            .loader(move |_: Id<Hot>| {
                // The value is read before the gate: a refresh held there
                // has read what the invalidation replaces.
                let (n, first) = (db.load(Ordering::SeqCst), calls.count() == 0);
                let (entered, gate) = (entered.clone(), gate.clone());
                async move {
                    if !first {
                        entered.open();
                        gate.pass().await;
                    }
                    Ok::<_, std::io::Error>(Some(Hot { n }))
                }
            })
            .loader(|_: Id<Plain>| async { Ok::<_, std::io::Error>(None) })
            .build()
            .expect("a cache")
    };
    let id = Id::<Hot>::mint();
    assert_eq!(cache.fetch(id).await.expect("filled").n, 1);

    clock.advance(Duration::from_millis(900));
    let due = cache.fetch(id).await.expect("a hit");
    assert_eq!((due.source(), due.n), (Source::Hit, 1));
    crate::common::bounded("the refresh to reach the loader", entered.pass()).await;

    db.store(2, Ordering::SeqCst);
    cache.invalidate(id).await.expect("invalidated");
    gate.open();
    eventually("the refresh to land", async || {
        cache.stats::<Hot>().in_flight == 0
    })
    .await;

    let after = cache.fetch(id).await.expect("reloaded");
    assert_eq!(
        (after.source(), after.n),
        (Source::Fill, 2),
        "the refresh reinstalled the value the invalidation removed"
    );
    assert_eq!(cache.stats::<Hot>().refreshes, 1);
}

#[tokio::test]
async fn a_failed_refresh_is_tried_again_before_the_row_dies() {
    let (db, calls, clock) = (
        Arc::new(AtomicU64::new(1)),
        Calls::default(),
        Clock::manual(),
    );
    let cache = {
        let (db, calls) = (Arc::clone(&db), calls.clone());
        cache_builder()
            .clock(clock.clone())
            .loader(move |_: Id<Hot>| {
                // The fill answers; the next two loads (refreshes) fail.
                let (n, call) = (db.load(Ordering::SeqCst), calls.count());
                async move {
                    if (1..=2).contains(&call) {
                        return Err(std::io::Error::other("the store is down"));
                    }
                    Ok(Some(Hot { n }))
                }
            })
            .loader(|_: Id<Plain>| async { Ok::<_, std::io::Error>(None) })
            .build()
            .expect("a cache")
    };
    let id = Id::<Hot>::mint();
    cache.fetch(id).await.expect("filled");
    db.store(2, Ordering::SeqCst);

    // Due for refresh; the clock then stays there, 150 ms before the row
    // dies, while reads go on: each failed refresh is started again by a
    // later read (after a pause of a quarter of `refresh_ms`), until one
    // lands.
    clock.advance(Duration::from_millis(850));
    eventually("a refresh to land after two failures", async || {
        let read = cache.fetch(id).await.expect("a hit");
        assert_eq!(read.source(), Source::Hit, "the row is alive");
        cache.stats::<Hot>().fills == 2
    })
    .await;
    let stats = cache.stats::<Hot>();
    assert_eq!((stats.refreshes, stats.load_errors, calls.get()), (3, 2, 4));

    // Past the first row's death: the refreshed row answers.
    clock.advance(Duration::from_millis(200));
    let read = cache.fetch(id).await.expect("a hit");
    assert_eq!((read.source(), read.n), (Source::Hit, 2));
    assert_eq!(
        cache.stats::<Hot>().misses,
        1,
        "only the first fetch missed"
    );
}

#[tokio::test]
async fn without_refresh_ms_a_row_read_near_its_end_dies_and_misses() {
    let (db, calls, clock) = (
        Arc::new(AtomicU64::new(1)),
        Calls::default(),
        Clock::manual(),
    );
    let cache = rig(&db, &calls, &clock);
    let id = Id::<Plain>::mint();
    cache.fetch(id).await.expect("filled");

    clock.advance(Duration::from_millis(990));
    assert_eq!(cache.fetch(id).await.expect("a hit").source(), Source::Hit);
    clock.advance(Duration::from_millis(10));
    assert_eq!(
        cache.fetch(id).await.expect("refilled").source(),
        Source::Fill
    );
    let stats = cache.stats::<Plain>();
    assert_eq!((stats.refreshes, stats.misses, calls.get()), (0, 2, 2));
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Hot>().open::<Plain>()
}
