//! Writes against fills: an `invalidate`, `put` or `flush` that lands while
//! a fill of the same id is in flight keeps that fill's value out of L1;
//! absence ("not found") and tables without a loader.
//!
//! The fills here wait on a [`Gate`] the test holds, so the write lands
//! mid-flight by construction.

use std::time::Duration;

use crate::common::{Calls, Gate, bounded, eventually};
use echo_cache::{Builder, Cache, Clock, Error, Fetched, Id, Source, near_cache};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

/// A mutable document: its loader answers what the "database" holds.
#[near_cache(
    kind = "DOC",
    ttl_ms = 600_000,
    coherence = "broadcast",
    name = "writes_doc"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Doc {
    body: String,
}

/// A table whose loader's "not found" is not remembered (the default).
#[near_cache(kind = "WPN", ttl_ms = 600_000, name = "writes_plain")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Plain {
    n: u32,
}

/// A table that remembers "not found" for a minute.
#[near_cache(kind = "GHO", ttl_ms = 600_000, absent_ttl_ms = 60_000, jitter = 0.5)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Ghost {
    n: u32,
}

/// A table that is never given a loader.
#[near_cache(kind = "ORP", ttl_ms = 600_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Orphan {
    n: u32,
}

type Load<T> = BoxFuture<'static, Result<Option<T>, std::io::Error>>;

/// A loader of `Doc`s that counts its calls and waits for `gate`; call `n`
/// answers the body `"loaded n"`.
fn doc_loader(gate: &Gate, calls: &Calls) -> impl Fn(Id<Doc>) -> Load<Doc> + Send + Sync + 'static {
    let (gate, calls) = (gate.clone(), calls.clone());
    move |_| {
        let (gate, calls) = (gate.clone(), calls.clone());
        async move {
            let call = calls.count();
            gate.pass().await;
            Ok(Some(Doc {
                body: format!("loaded {call}"),
            }))
        }
        .boxed()
    }
}

/// A loader that never finds anything, counting its calls.
fn nothing<T: Send + 'static>(calls: &Calls) -> impl Fn(Id<T>) -> Load<T> + Send + Sync + 'static {
    let calls = calls.clone();
    move |_| {
        calls.count();
        async { Ok(None) }.boxed()
    }
}

/// A builder whose tables have no loader: a test gives the loader of the
/// table it reads (the last word on a table wins); `Orphan` never has one.
fn put_only() -> Builder {
    cache_builder()
        .without_loader::<Doc>()
        .without_loader::<Plain>()
        .without_loader::<Ghost>()
        .without_loader::<Orphan>()
}

fn doc_cache(gate: &Gate, calls: &Calls) -> Cache {
    put_only()
        .loader(doc_loader(gate, calls))
        .fetch_timeout(None)
        .build()
        .expect("no conflict")
}

/// Starts a fetch of `id` in a task and waits until its flight is in the
/// loader (held at the gate).
async fn paused_fill(
    cache: &Cache,
    calls: &Calls,
    id: Id<Doc>,
) -> tokio::task::JoinHandle<Result<Fetched<Doc>, Error>> {
    let before = calls.get();
    let fill = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.fetch(id).await })
    };
    eventually("the fill to reach the loader", async || {
        calls.get() == before + 1
    })
    .await;
    fill
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_invalidate_during_a_fill_keeps_its_value_out_of_l1() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = doc_cache(&gate, &calls);
    let id = Id::<Doc>::mint();

    let fill = paused_fill(&cache, &calls, id).await;
    cache.invalidate(id).await.expect("invalidate");
    gate.open();
    let filled = bounded("the paused fill", fill).await.unwrap();
    // The waiter still gets the flight's answer…
    assert_eq!(filled.expect("the fill answers").body, "loaded 0");
    // …but L1 did not keep it.
    let stats = cache.stats::<Doc>();
    assert_eq!(
        (stats.size, stats.in_flight, stats.invalidations),
        (0, 0, 1)
    );

    // The next fetch misses and loads afresh; that flight, which started
    // after the invalidate, does install (no ABA on a shared marker).
    let next = bounded("the next fetch", cache.fetch(id)).await.unwrap();
    assert_eq!(
        (next.source(), next.body.as_str()),
        (Source::Fill, "loaded 1")
    );
    assert_eq!(calls.get(), 2);
    let hit = cache.fetch(id).await.unwrap();
    assert_eq!((hit.source(), hit.body.as_str()), (Source::Hit, "loaded 1"));
    assert_eq!(calls.get(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_put_during_a_fill_wins_over_the_fill() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = doc_cache(&gate, &calls);
    let id = Id::<Doc>::mint();

    let fill = paused_fill(&cache, &calls, id).await;
    let version = cache
        .put(id, Doc { body: "put".into() })
        .await
        .expect("put");
    gate.open();
    bounded("the paused fill", fill)
        .await
        .unwrap()
        .expect("the fill answers its waiter");

    let got = cache.fetch(id).await.unwrap();
    assert_eq!(got.source(), Source::Hit, "the put's row is still there");
    assert_eq!(got.body, "put", "the put's value wins");
    assert_eq!(got.version(), version);
    assert_eq!(calls.get(), 1);
    let stats = cache.stats::<Doc>();
    assert_eq!(
        (stats.puts, stats.fills, stats.size, stats.in_flight),
        (1, 1, 1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flush_during_a_fill_keeps_its_value_out_of_l1() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = doc_cache(&gate, &calls);
    let kept = Id::<Doc>::mint();
    cache.put(kept, Doc { body: "old".into() }).await.unwrap();
    let id = Id::<Doc>::mint();

    let fill = paused_fill(&cache, &calls, id).await;
    cache.flush::<Doc>();
    assert_eq!(cache.stats::<Doc>().size, 0, "the flush dropped every row");
    gate.open();
    bounded("the paused fill", fill).await.unwrap().unwrap();
    assert_eq!(cache.stats::<Doc>().size, 0, "the fill did not install");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn puts_write_through_and_invalidates_drop() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    gate.open();
    let cache = doc_cache(&gate, &calls);
    let id = Id::<Doc>::mint();

    let first = cache.put(id, Doc { body: "one".into() }).await.unwrap();
    let second = cache.put(id, Doc { body: "two".into() }).await.unwrap();
    assert!(
        second.is_newer_than(&first),
        "each put mints a newer version"
    );
    let got = cache.fetch(id).await.unwrap();
    assert_eq!((got.source(), got.body.as_str()), (Source::Hit, "two"));
    assert_eq!(got.version(), second);

    cache.invalidate(id).await.unwrap();
    let got = cache.fetch(id).await.unwrap();
    assert_eq!(
        (got.source(), got.body.as_str()),
        (Source::Fill, "loaded 0")
    );
    // A mutable table's fill is versioned after the last put.
    assert!(got.version().is_newer_than(&second));
    let stats = cache.stats::<Doc>();
    assert_eq!(
        (stats.puts, stats.invalidations, stats.hits, stats.misses),
        (2, 1, 1, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn not_found_is_its_own_outcome_and_is_not_remembered_by_default() {
    let calls = Calls::default();
    let cache = put_only().loader(nothing::<Plain>(&calls)).build().unwrap();
    let id = Id::<Plain>::mint();

    for expected_calls in 1..=3 {
        match cache.fetch(id).await {
            Err(error @ Error::NotFound { .. }) => {
                assert!(error.is_not_found());
                let Error::NotFound { table, id: asked } = error else {
                    unreachable!()
                };
                assert_eq!((table, asked), ("writes_plain", id.raw()));
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
        assert_eq!(calls.get(), expected_calls, "absence is not remembered");
    }
    let stats = cache.stats::<Plain>();
    assert_eq!(stats.not_found, 3);
    assert_eq!(stats.load_errors, 0, "not found is not an error");
    assert_eq!((stats.fills, stats.size, stats.hits), (0, 0, 0));

    // Once the entity exists, it is found at once.
    cache.put(id, Plain { n: 7 }).await.unwrap();
    assert_eq!(cache.fetch(id).await.unwrap().n, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_herd_asking_for_nothing_makes_one_flight() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let loader = {
        let (gate, calls) = (gate.clone(), calls.clone());
        move |_: Id<Plain>| {
            let (gate, calls) = (gate.clone(), calls.clone());
            async move {
                calls.count();
                gate.pass().await;
                Ok::<_, std::io::Error>(None)
            }
            .boxed()
        }
    };
    let cache = put_only()
        .loader(loader)
        .fetch_timeout(None)
        .build()
        .unwrap();
    let id = Id::<Plain>::mint();
    let callers: Vec<_> = (0..20)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.fetch(id).await })
        })
        .collect();
    eventually("every caller to join", async || {
        let stats = cache.stats::<Plain>();
        stats.misses == 20 && stats.coalesced + calls.get() as u64 == 20
    })
    .await;
    gate.open();
    for caller in callers {
        let answer = bounded("a caller", caller).await.unwrap();
        assert!(matches!(answer, Err(Error::NotFound { .. })), "{answer:?}");
    }
    let stats = cache.stats::<Plain>();
    assert_eq!((calls.get(), stats.not_found, stats.load_errors), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_declared_absent_ttl_remembers_not_found_until_a_write() {
    let calls = Calls::default();
    let clock = Clock::manual();
    let cache = put_only()
        .loader(nothing::<Ghost>(&calls))
        .clock(clock.clone())
        .build()
        .unwrap();
    let id = Id::<Ghost>::mint();
    let not_found = |answer: Result<Fetched<Ghost>, Error>| {
        assert!(matches!(answer, Err(Error::NotFound { .. })), "{answer:?}");
    };

    not_found(cache.fetch(id).await);
    assert_eq!(calls.get(), 1);
    // Remembered: a hit that answers "not found", the loader is spared.
    not_found(cache.fetch(id).await);
    not_found(cache.fetch(id).await);
    assert_eq!(calls.get(), 1);
    let stats = cache.stats::<Ghost>();
    assert_eq!((stats.hits, stats.misses, stats.not_found), (2, 1, 1));
    assert_eq!((stats.load_errors, stats.size), (0, 1));

    // A put ends the absence at once.
    cache.put(id, Ghost { n: 1 }).await.unwrap();
    let got = cache.fetch(id).await.unwrap();
    assert_eq!((got.source(), got.n), (Source::Hit, 1));

    // An invalidate too: the next fetch asks the loader, which finds
    // nothing again, and that is remembered again.
    cache.invalidate(id).await.unwrap();
    not_found(cache.fetch(id).await);
    assert_eq!(calls.get(), 2);
    not_found(cache.fetch(id).await);
    assert_eq!(calls.get(), 2);

    // An invalidate of a remembered absence ends it as well.
    cache.invalidate(id).await.unwrap();
    not_found(cache.fetch(id).await);
    assert_eq!(calls.get(), 3);

    // It is remembered for absent_ttl_ms (± jitter), not for ttl_ms.
    clock.advance(Duration::from_millis(60_000 / 2 - 1));
    not_found(cache.fetch(id).await);
    assert_eq!(
        calls.get(),
        3,
        "still remembered before absent_ttl·(1−jitter)"
    );
    clock.advance(Duration::from_millis(60_000 + 1));
    not_found(cache.fetch(id).await);
    assert_eq!(calls.get(), 4, "forgotten after absent_ttl·(1+jitter)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_without_a_loader_serves_what_is_put() {
    let cache = put_only().build().unwrap();
    let id = Id::<Orphan>::mint();

    let missing = cache.fetch(id).await;
    assert!(
        matches!(missing, Err(Error::NoLoader { table: "orphan" })),
        "{missing:?}"
    );
    // Not remembered, not a load error: the loader is missing, not failing.
    let stats = cache.stats::<Orphan>();
    assert_eq!((stats.misses, stats.size, stats.in_flight), (1, 0, 0));

    cache.put(id, Orphan { n: 9 }).await.unwrap();
    let got = cache.fetch(id).await.unwrap();
    assert_eq!((got.source(), got.n), (Source::Hit, 9));
    let info = cache
        .tables()
        .into_iter()
        .find(|t| t.spec.name() == "orphan")
        .unwrap();
    assert!(!info.has_loader);
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Doc>()
        .open::<Plain>()
        .open::<Ghost>()
        .open::<Orphan>()
}
