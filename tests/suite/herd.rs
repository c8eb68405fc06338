//! One fill per herd (law 3): concurrent misses share one flight, its one
//! answer (value, error or crash) reaches every waiter, and a caller that
//! gives up cancels nothing for the others.
//!
//! Every loader here waits on a [`Gate`] the test opens only once every
//! caller has joined, so "concurrent" is a fact, not a hope.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Calls, Gate, bounded, eventually};
use echo_cache::{Cache, Error, Fetched, Id, Source, near_cache};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

#[near_cache(kind = "HRD", ttl_ms = 600_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Item {
    id: u64,
}

type Load = BoxFuture<'static, Result<Option<Item>, std::io::Error>>;

/// A loader that counts its calls, waits for `gate`, then finds the item.
fn gated(gate: &Gate, calls: &Calls) -> impl Fn(Id<Item>) -> Load + Send + Sync + 'static {
    let (gate, calls) = (gate.clone(), calls.clone());
    move |id| {
        let (gate, calls) = (gate.clone(), calls.clone());
        async move {
            calls.count();
            gate.pass().await;
            Ok(Some(Item { id: id.payload() }))
        }
        .boxed()
    }
}

/// A cache whose fetches wait as long as their flight takes: the tests
/// bound their waits themselves.
fn cache_with(loader: impl Fn(Id<Item>) -> Load + Send + Sync + 'static) -> Cache {
    cache_builder()
        .loader(loader)
        .fetch_timeout(None)
        .build()
        .expect("one declaration, no conflict")
}

/// Starts `n` fetches of `id`, each in its own task.
fn herd(
    cache: &Cache,
    id: Id<Item>,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<Fetched<Item>, Error>>> {
    (0..n)
        .map(|_| {
            let cache = cache.clone();
            tokio::spawn(async move { cache.fetch(id).await })
        })
        .collect()
}

/// Waits until `callers` misses have each joined or started a flight whose
/// loader has been entered.
async fn until_joined(cache: &Cache, calls: &Calls, callers: u64) {
    eventually("every caller to join a flight", async || {
        let stats = cache.stats::<Item>();
        stats.misses == callers && stats.coalesced + calls.get() as u64 == callers
    })
    .await;
}

async fn answers(
    callers: Vec<tokio::task::JoinHandle<Result<Fetched<Item>, Error>>>,
) -> Vec<Result<Fetched<Item>, Error>> {
    let mut answers = Vec::with_capacity(callers.len());
    for caller in callers {
        answers.push(
            bounded("a caller's answer", caller)
                .await
                .expect("no caller panics"),
        );
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_thousand_misses_of_one_cold_id_make_one_flight() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = cache_with(gated(&gate, &calls));
    let id = Id::<Item>::mint();

    let callers = herd(&cache, id, 1_000);
    until_joined(&cache, &calls, 1_000).await;
    assert_eq!(calls.get(), 1, "one loader call for the whole herd");
    gate.open();

    let answers = answers(callers).await;
    let first = answers[0].as_ref().expect("the fill answers").clone();
    assert_eq!(first.id, id.payload());
    for answer in &answers {
        let answer = answer.as_ref().expect("every caller gets the value");
        assert_eq!(answer.source(), Source::Fill);
        assert!(
            Arc::ptr_eq(answer.value(), first.value()),
            "every caller gets the same Arc"
        );
    }
    assert_eq!(calls.get(), 1);

    let stats = cache.stats::<Item>();
    assert_eq!(stats.misses, 1_000);
    assert_eq!(stats.coalesced, 999);
    assert_eq!(stats.fills, 1);
    assert_eq!(stats.hits, 0);
    assert_eq!(stats.size, 1);
    assert_eq!(stats.in_flight, 0);

    let again = cache.fetch(id).await.expect("now a hit");
    assert_eq!(again.source(), Source::Hit);
    assert!(Arc::ptr_eq(again.value(), first.value()));
    assert_eq!(cache.stats::<Item>().hits, 1);
    assert_eq!(calls.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_thousand_misses_over_a_hundred_ids_make_a_hundred_flights() {
    let gate = Gate::closed();
    let calls = Calls::default();
    let per_id: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
    let loader = {
        let (inner, per_id) = (gated(&gate, &calls), Arc::clone(&per_id));
        move |id: Id<Item>| {
            *per_id.lock().unwrap().entry(id.payload()).or_default() += 1;
            inner(id)
        }
    };
    let cache = cache_with(loader);
    let ids: Vec<Id<Item>> = (0..100).map(|_| Id::mint()).collect();

    // Interleaved: caller i asks for id i % 100.
    let callers: Vec<_> = (0..1_000)
        .map(|i| {
            let (cache, id) = (cache.clone(), ids[i % 100]);
            tokio::spawn(async move { (id, cache.fetch(id).await) })
        })
        .collect();
    until_joined(&cache, &calls, 1_000).await;
    gate.open();

    let mut values: HashMap<Id<Item>, Arc<Item>> = HashMap::new();
    for caller in callers {
        let (id, answer) = bounded("a caller's answer", caller)
            .await
            .expect("no caller panics");
        let answer = answer.expect("every caller gets its value");
        assert_eq!(
            answer.id,
            id.payload(),
            "each caller gets its own id's value"
        );
        let value = values
            .entry(id)
            .or_insert_with(|| Arc::clone(answer.value()));
        assert!(Arc::ptr_eq(value, answer.value()), "one Arc per id");
    }

    assert_eq!(calls.get(), 100);
    let per_id = per_id.lock().unwrap();
    assert_eq!(per_id.len(), 100);
    assert!(
        per_id.values().all(|&n| n == 1),
        "one call per id: {per_id:?}"
    );
    let stats = cache.stats::<Item>();
    assert_eq!(stats.misses, 1_000);
    assert_eq!(stats.coalesced, 900);
    assert_eq!(stats.fills, 100);
    assert_eq!(stats.size, 100);
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_panicking_loader_fails_every_waiter_and_the_next_fetch_loads() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let loader = {
        let (gate, calls) = (gate.clone(), calls.clone());
        move |id: Id<Item>| {
            let (gate, calls) = (gate.clone(), calls.clone());
            async move {
                let call = calls.count();
                gate.pass().await;
                if call == 0 {
                    panic!("the database caught fire (call {call})");
                }
                Ok(Some(Item { id: id.payload() }))
            }
            .boxed()
        }
    };
    let cache = cache_with(loader);
    let id = Id::<Item>::mint();

    let callers = herd(&cache, id, 100);
    until_joined(&cache, &calls, 100).await;
    gate.open();

    for answer in answers(callers).await {
        match answer {
            Err(Error::FlightCrashed { table, message }) => {
                assert_eq!(table, "item");
                assert_eq!(&*message, "the database caught fire (call 0)");
            }
            other => panic!("expected FlightCrashed, got {other:?}"),
        }
    }
    let stats = cache.stats::<Item>();
    assert_eq!(stats.in_flight, 0, "no flight entry left behind");
    assert_eq!(stats.load_errors, 1);
    assert_eq!(stats.fills, 0);
    assert_eq!(stats.size, 0);

    let next = bounded("the next fetch", cache.fetch(id))
        .await
        .expect("a fresh flight loads");
    assert_eq!(next.source(), Source::Fill);
    assert_eq!(next.id, id.payload());
    assert_eq!(calls.get(), 2);
    let stats = cache.stats::<Item>();
    assert_eq!(stats.fills, 1);
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panic_without_a_message_still_crashes_the_flight_cleanly() {
    let cache = cache_with(|_| async { std::panic::panic_any(42_u32) }.boxed());
    let id = Id::<Item>::mint();
    match bounded("the crashed fetch", cache.fetch(id)).await {
        Err(Error::FlightCrashed { message, .. }) => assert!(!message.is_empty()),
        other => panic!("expected FlightCrashed, got {other:?}"),
    }
    assert_eq!(cache.stats::<Item>().in_flight, 0);
    assert_eq!(cache.stats::<Item>().load_errors, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn a_loader_error_reaches_every_waiter_and_is_not_cached() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let loader = {
        let (gate, calls) = (gate.clone(), calls.clone());
        move |_: Id<Item>| {
            let (gate, calls) = (gate.clone(), calls.clone());
            async move {
                calls.count();
                gate.pass().await;
                Err(std::io::Error::other("the database is down"))
            }
            .boxed()
        }
    };
    let cache = cache_with(loader);
    let id = Id::<Item>::mint();

    let callers = herd(&cache, id, 50);
    until_joined(&cache, &calls, 50).await;
    gate.open();

    for answer in answers(callers).await {
        match answer {
            Err(Error::Load { table, source }) => {
                assert_eq!(table, "item");
                assert_eq!(source.to_string(), "the database is down");
            }
            other => panic!("expected Load, got {other:?}"),
        }
    }
    assert_eq!(calls.get(), 1);
    let stats = cache.stats::<Item>();
    assert_eq!(stats.load_errors, 1);
    assert_eq!(stats.not_found, 0);
    assert_eq!(stats.fills, 0);
    assert_eq!(stats.size, 0);
    assert_eq!(stats.in_flight, 0);

    // The error was not remembered: the next fetch asks the loader again.
    let next = bounded("the next fetch", cache.fetch(id)).await;
    assert!(matches!(next, Err(Error::Load { .. })), "{next:?}");
    assert_eq!(calls.get(), 2);
    assert_eq!(cache.stats::<Item>().load_errors, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn callers_that_give_up_cancel_nothing_for_the_others() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = cache_with(gated(&gate, &calls));
    let id = Id::<Item>::mint();

    // The leader: polled once (it starts the flight), then dropped.
    assert!(
        cache.fetch(id).now_or_never().is_none(),
        "the loader is held"
    );
    eventually("the flight to reach the loader", async || calls.get() == 1).await;

    // A caller that times out while the loader is held.
    let timed_out = cache.fetch_within(id, Some(Duration::from_millis(5))).await;
    assert!(
        matches!(&timed_out, Err(Error::Timeout { table: "item", .. })),
        "{timed_out:?}"
    );
    // Waiters, and one more that is aborted while it waits.
    let waiters = herd(&cache, id, 10);
    let aborted = herd(&cache, id, 1).pop().unwrap();
    eventually("every caller to join the flight", async || {
        cache.stats::<Item>().coalesced == 12
    })
    .await;
    aborted.abort();
    assert!(
        bounded("the aborted caller", aborted)
            .await
            .unwrap_err()
            .is_cancelled()
    );
    assert_eq!(cache.stats::<Item>().in_flight, 1, "the flight goes on");

    gate.open();
    let answers = answers(waiters).await;
    let first = answers[0]
        .as_ref()
        .expect("the waiters are answered")
        .clone();
    for answer in &answers {
        let answer = answer.as_ref().expect("the waiters are answered");
        assert!(Arc::ptr_eq(answer.value(), first.value()));
    }

    // The flight filled L1 for the next caller.
    let stats = cache.stats::<Item>();
    assert_eq!((stats.fills, stats.size, stats.in_flight), (1, 1, 0));
    let next = cache.fetch(id).await.expect("a hit");
    assert_eq!(next.source(), Source::Hit);
    assert!(Arc::ptr_eq(next.value(), first.value()));
    assert_eq!(calls.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flight_whose_every_caller_left_still_fills_l1() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = cache_with(gated(&gate, &calls));
    let id = Id::<Item>::mint();

    let gave_up = cache.fetch_within(id, Some(Duration::from_millis(1))).await;
    assert!(matches!(gave_up, Err(Error::Timeout { .. })), "{gave_up:?}");
    gate.open();
    eventually("the abandoned flight to land", async || {
        let stats = cache.stats::<Item>();
        stats.in_flight == 0 && stats.size == 1
    })
    .await;
    let next = cache.fetch(id).await.expect("a hit");
    assert_eq!(next.source(), Source::Hit);
    assert_eq!(calls.get(), 1);
}

/// The counters' identities hold under a storm of concurrent fetches,
/// invalidations and flushes over a few ids whose loads succeed, find
/// nothing, fail, panic or miss their deadline: once everything is
/// answered, `hits + misses` is the number of fetches, `misses` is
/// `flights + coalesced`, and every flight ended one way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_counters_add_up_under_a_storm() {
    const TASKS: u64 = 8;
    const FETCHES: u64 = 2_000;
    let ids: Vec<Id<Item>> = (0..20).map(|_| Id::mint()).collect();
    let cache = cache_builder()
        .loader(|id: Id<Item>| {
            async move {
                tokio::task::yield_now().await;
                match id.payload() % 5 {
                    0 => Ok(None),
                    1 => Err(std::io::Error::other("the store failed")),
                    2 if id.payload().is_multiple_of(2) => panic!("the loader panicked"),
                    3 => std::future::pending().await,
                    _ => Ok(Some(Item { id: id.payload() })),
                }
            }
            .boxed()
        })
        .load_timeout(Duration::from_millis(2))
        .fetch_timeout(None)
        .build()
        .expect("no conflict");

    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (cache, ids) = (cache.clone(), ids.clone());
            tokio::spawn(async move {
                for n in 0..FETCHES {
                    let id = ids[usize::try_from((n * 7 + task * 3) % 20).unwrap()];
                    let _ = cache.fetch(id).await;
                    match (n + task) % 50 {
                        0 => drop(cache.invalidate(id).await),
                        1 => cache.flush::<Item>(),
                        _ => {}
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a storm task", task).await.expect("no task panics");
    }

    let stats = cache.stats::<Item>();
    assert_eq!(stats.hits + stats.misses, TASKS * FETCHES, "{stats:?}");
    assert_eq!(stats.misses, stats.flights + stats.coalesced, "{stats:?}");
    assert_eq!(stats.in_flight, 0, "{stats:?}");
    assert_eq!(
        stats.flights,
        stats.l2_hits + stats.fills + stats.not_found + stats.load_errors + stats.load_timeouts,
        "{stats:?}"
    );
    assert!(
        [stats.hits, stats.coalesced, stats.fills, stats.not_found]
            .iter()
            .chain([stats.load_errors, stats.load_timeouts].iter())
            .all(|&n| n > 0),
        "the storm exercised every path: {stats:?}"
    );
}

/// Waiters of one flight with timeouts of their own (one timer serves the
/// herd, see the crate docs): each gives up at its own deadline, in
/// whatever order they joined (an earlier deadline after a later one, the
/// same deadline twice), with its own `after`; the flight goes on and
/// answers the waiters still there, and the next fetch is a hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_give_up_each_at_its_own_timeout_and_the_rest_are_answered() {
    let (gate, calls) = (Gate::closed(), Calls::default());
    let cache = cache_with(gated(&gate, &calls));
    let id = Id::<Item>::mint();
    let leader = herd(&cache, id, 1);
    eventually("the flight to reach the loader", async || calls.get() == 1).await;

    let timeouts = [
        Some(300),
        Some(100),
        Some(100),
        Some(200),
        None,
        Some(60_000),
    ];
    let waiters: Vec<_> = (timeouts.iter())
        .map(|ms| {
            let (cache, timeout) = (cache.clone(), ms.map(Duration::from_millis));
            tokio::spawn(async move {
                let start = tokio::time::Instant::now();
                let answer = cache.fetch_within(id, timeout).await;
                (answer, start.elapsed())
            })
        })
        .collect();
    let mut waiters = waiters.into_iter();
    let timed: Vec<_> = waiters.by_ref().take(4).collect();
    for (waiter, ms) in timed.into_iter().zip(timeouts) {
        let (answer, waited) = bounded("a waiter's timeout", waiter)
            .await
            .expect("no waiter panics");
        let after = Duration::from_millis(ms.expect("a timeout"));
        assert!(
            matches!(answer, Err(Error::Timeout { table: "item", after: a }) if a == after),
            "{answer:?}"
        );
        // Not early; late by no more than a loaded machine's scheduling.
        assert!(
            waited >= after,
            "gave up after {waited:?}, before {after:?}"
        );
        assert!(
            waited < after + Duration::from_secs(5),
            "{waited:?} for {after:?}"
        );
    }
    assert_eq!(cache.stats::<Item>().in_flight, 1, "the flight goes on");

    gate.open();
    let mut values = answers(leader).await;
    for waiter in waiters {
        let (answer, _) = bounded("a waiter's answer", waiter)
            .await
            .expect("no waiter panics");
        values.push(answer);
    }
    let first = values[0].as_ref().expect("answered").clone();
    for value in &values {
        let value = value.as_ref().expect("answered");
        assert!(Arc::ptr_eq(value.value(), first.value()));
    }
    assert_eq!(calls.get(), 1);
    let next = cache.fetch(id).await.expect("a hit");
    assert_eq!(next.source(), Source::Hit);
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Item>()
}
