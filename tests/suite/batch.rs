//! Batch fetch (`Cache::fetch_many`, `Builder::loader_many`) against real
//! servers: answers in the order of the ids, a duplicate read once, L1 hits,
//! L2 hits and loads mixed in one call with one `MGET` and one batch-loader
//! call, the single loader as the fallback, the herd rules per id (a
//! concurrent fetch joins, an invalidation wins), a batch loader's error
//! and panic, a timeout that leaves the flights to land, L1-only, and a
//! spread table on one server and on a real cluster.
//!
//! Loaders that must be caught in the act wait on a [`Gate`] the test
//! opens once the fact it checks is observed: nothing sleeps.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Calls, Gate, bounded, eventually, query};
use echo_cache::{Builder, Cache, Cached, Error, Fetched, Id, Source, keyspace, near_cache};
use echo_cache_testkit::{RedisCluster, RedisServer};

#[near_cache(kind = "BAT", ttl_ms = 600_000, jitter = 0.1, name = "batch_items")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Item {
    id: u64,
    revision: u64,
}

/// Each id on its own slot: a batch of them spans every master.
#[near_cache(
    kind = "BSP",
    ttl_ms = 600_000,
    name = "batch_spread",
    placement = "spread"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Spread {
    id: u64,
}

/// A `tracking` table: its fills are written with `SET NX`.
#[near_cache(
    kind = "BTR",
    ttl_ms = 600_000,
    name = "batch_tracked",
    coherence = "tracking"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tracked {
    id: u64,
}

fn item(id: Id<Item>, revision: u64) -> Item {
    Item {
        id: id.payload(),
        revision,
    }
}

/// The ids each batch-loader call was given, in call order.
#[derive(Clone, Default)]
struct Batches(Arc<Mutex<Vec<Vec<Id<Item>>>>>);

impl Batches {
    fn record(&self, ids: &[Id<Item>]) {
        self.0.lock().unwrap().push(ids.to_vec());
    }

    fn calls(&self) -> Vec<Vec<Id<Item>>> {
        self.0.lock().unwrap().clone()
    }
}

/// A builder whose fetches wait as long as their flights take (the tests
/// bound their waits themselves), with loaders for the spread and the
/// tracking tables.
fn builder() -> Builder {
    cache_builder()
        .fetch_timeout(None)
        .l2_timeout(Duration::from_secs(2))
        .loader(
            |id: Id<Spread>| async move { Ok::<_, Infallible>(Some(Spread { id: id.payload() })) },
        )
        .loader(
            |id: Id<Tracked>| async move { Ok::<_, Infallible>(Some(Tracked { id: id.payload() })) },
        )
}

/// `builder` with a single loader of items at revision 0, counting calls.
fn single(builder: Builder, calls: &Calls) -> Builder {
    let calls = calls.clone();
    builder.loader(move |id: Id<Item>| {
        calls.count();
        async move { Ok::<_, Infallible>(Some(item(id, 0))) }
    })
}

/// `builder` with a batch loader of items that finds every id but those
/// in `absent`, at revision `revision`, after `gate`, recording its calls.
fn batched(builder: Builder, batches: &Batches, gate: &Gate, absent: &[Id<Item>]) -> Builder {
    let (batches, gate) = (batches.clone(), gate.clone());
    let absent: HashSet<Id<Item>> = absent.iter().copied().collect();
    builder.loader_many(move |ids: Vec<Id<Item>>| {
        batches.record(&ids);
        let (gate, absent) = (gate.clone(), absent.clone());
        async move {
            gate.pass().await;
            let found: HashMap<Id<Item>, Item> = (ids.into_iter())
                .filter(|id| !absent.contains(id))
                .map(|id| (id, item(id, 0)))
                .collect();
            Ok::<_, Infallible>(found)
        }
    })
}

fn open() -> Gate {
    let gate = Gate::closed();
    gate.open();
    gate
}

fn ok<T: Cached>(answer: &Result<Fetched<T>, Error>) -> &Fetched<T> {
    answer.as_ref().expect("a value")
}

/// How many `MGET`s `server` ran since its counters were reset.
fn mgets(server: &RedisServer) -> u64 {
    let info: String = server.query(redis::cmd("INFO").arg("commandstats"));
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_mget:calls="))
        .map_or(0, |rest| {
            rest.split(',').next().unwrap().parse().expect("a count")
        })
}

fn reset_counters(server: &RedisServer) {
    let () = server.query(redis::cmd("CONFIG").arg("RESETSTAT"));
}

#[tokio::test]
async fn answers_follow_the_ids_and_a_duplicate_is_read_once() {
    // L1 only, and no batch loader: the single loader, once per id.
    let calls = Calls::default();
    let cache = single(builder(), &calls).build().unwrap();
    let [a, b, c] = [(); 3].map(|()| Id::<Item>::mint());

    let answers = bounded("the batch", cache.fetch_many([b, a, b, c, b])).await;
    let ids: Vec<u64> = answers.iter().map(|answer| ok(answer).id).collect();
    let payloads = [b, a, b, c, b].map(Id::payload);
    assert_eq!(ids, payloads, "one answer per id, in the order given");
    assert_eq!(calls.get(), 3, "b, given three times, loaded once");
    assert!(
        answers
            .iter()
            .all(|answer| ok(answer).source() == Source::Fill)
    );
    assert_eq!(ok(&answers[0]).version(), ok(&answers[4]).version());
    assert!(Arc::ptr_eq(
        ok(&answers[0]).value(),
        ok(&answers[2]).value()
    ));
    let stats = cache.stats::<Item>();
    assert_eq!((stats.misses, stats.flights, stats.fills), (3, 3, 3));

    // Installed in L1, as fetches would have.
    for id in [a, b, c] {
        assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
    }
    let again = cache.fetch_many(vec![c, a]).await;
    assert!(
        again
            .iter()
            .all(|answer| ok(answer).source() == Source::Hit)
    );
    assert_eq!(calls.get(), 3);
    assert!(cache.fetch_many(Vec::<Id<Item>>::new()).await.is_empty());
}

#[tokio::test]
async fn without_a_batch_loader_the_misses_load_at_once() {
    // The single loader for each miss, all at once: three calls are in
    // their loaders before any answers.
    let (calls, gate) = (Calls::default(), Gate::closed());
    let loader_gate = gate.clone();
    let counted = calls.clone();
    let cache = builder()
        .loader(move |id: Id<Item>| {
            counted.count();
            let gate = loader_gate.clone();
            async move {
                gate.pass().await;
                Ok::<_, Infallible>(id.payload().is_multiple_of(2).then(|| item(id, 0)))
            }
        })
        .build()
        .unwrap();
    let ids: Vec<Id<Item>> = (1..=3).map(Id::from_payload).collect();
    let batch = tokio::spawn(cache.fetch_many(ids.clone()));
    eventually("every miss in its loader", async || calls.get() == 3).await;
    gate.open();
    let answers = bounded("the batch", batch).await.unwrap();
    assert!(answers[0].as_ref().unwrap_err().is_not_found());
    assert_eq!(ok(&answers[1]).id, 2);
    assert!(answers[2].as_ref().unwrap_err().is_not_found());
    assert_eq!(cache.stats::<Item>().not_found, 2);
}

#[tokio::test]
async fn hits_l2_hits_and_loads_in_one_call_one_mget_one_batch_load() {
    let server = RedisServer::start();
    let l2 = |builder: Builder| builder.l2(server.url());
    // Node A fills three ids into L2.
    let a_calls = Calls::default();
    let a = single(l2(builder()), &a_calls).build().unwrap();
    let in_l2: Vec<Id<Item>> = (0..3).map(|_| Id::mint()).collect();
    for &id in &in_l2 {
        a.fetch(id).await.unwrap();
    }
    // Node B has one in L1.
    let (calls, batches) = (Calls::default(), Batches::default());
    let b = batched(single(l2(builder()), &calls), &batches, &open(), &[])
        .build()
        .unwrap();
    let hot = Id::<Item>::mint();
    b.fetch(hot).await.unwrap();
    let fresh: Vec<Id<Item>> = (0..2).map(|_| Id::mint()).collect();
    let before = b.stats::<Item>();
    reset_counters(&server);

    let ids: Vec<Id<Item>> = [vec![hot], in_l2.clone(), fresh.clone()].concat();
    let answers = bounded("the batch", b.fetch_many(ids.iter().copied())).await;
    let sources: Vec<Source> = answers.iter().map(|answer| ok(answer).source()).collect();
    use Source::{Fill, Hit, L2};
    assert_eq!(sources, [Hit, L2, L2, L2, Fill, Fill]);
    for (answer, id) in answers.iter().zip(&ids) {
        assert_eq!(ok(answer).id, id.payload());
    }
    for (answer, &id) in answers[1..4].iter().zip(&in_l2) {
        let filled = a.fetch(id).await.unwrap();
        assert_eq!(ok(answer).version(), filled.version(), "A's fill, from L2");
    }
    assert_eq!(mgets(&server), 1, "one L2 round trip for the four misses");
    assert_eq!(
        batches.calls(),
        std::slice::from_ref(&fresh),
        "one batch load, of what L2 had not"
    );
    assert_eq!(calls.get(), 1, "the single loader ran only for `hot`");
    let stats = b.stats::<Item>();
    assert_eq!(stats.hits - before.hits, 1);
    assert_eq!(stats.misses - before.misses, 5);
    assert_eq!(stats.flights - before.flights, 5);
    assert_eq!(stats.l2_hits - before.l2_hits, 3);
    assert_eq!(stats.fills - before.fills, 2);
    assert_eq!(stats.in_flight, 0);

    // Filled as single reads fill: in B's L1, and in L2 for node A.
    for &id in &ids {
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    }
    for (answer, &id) in answers[4..].iter().zip(&fresh) {
        let shared = a.fetch(id).await.unwrap();
        assert_eq!(shared.source(), Source::L2);
        assert_eq!(shared.version(), ok(answer).version());
    }
    assert_eq!(a_calls.get(), 3);
    // With a jittered TTL, as a fill writes it.
    let mut raw = server.connection().await;
    let key = keyspace::key(Item::spec(), &fresh[0].raw());
    let pttl: i64 = query(&mut raw, redis::cmd("PTTL").arg(&key)).await;
    assert!((540_000..=660_000).contains(&pttl), "{pttl}");
}

#[tokio::test]
async fn a_batch_counts_as_the_single_fetches_would() {
    let server = RedisServer::start();
    let scenario = async |batch: bool| {
        let calls = Calls::default();
        let cache = single(builder().l2(server.url()), &calls).build().unwrap();
        let seeded = single(builder().l2(server.url()), &Calls::default())
            .build()
            .unwrap();
        let ids: Vec<Id<Item>> = (0..6).map(|_| Id::mint()).collect();
        cache.fetch(ids[0]).await.unwrap();
        seeded.fetch(ids[1]).await.unwrap();
        seeded.fetch(ids[2]).await.unwrap();
        let ids = [&ids[..], &ids[..2]].concat();
        if batch {
            let answers = cache.fetch_many(ids.clone()).await;
            assert!(answers.iter().all(Result::is_ok));
        } else {
            let mut seen = HashSet::new();
            for &id in ids.iter().filter(|&&id| seen.insert(id)) {
                cache.fetch(id).await.unwrap();
            }
        }
        let stats = cache.stats::<Item>();
        (
            stats.hits,
            stats.misses,
            stats.flights,
            stats.fills,
            stats.l2_hits,
            stats.size,
            calls.get(),
        )
    };
    assert_eq!(scenario(true).await, scenario(false).await);
}

#[tokio::test]
async fn absent_ids_are_not_found_and_a_batch_error_fails_its_ids() {
    let batches = Batches::default();
    let [a, b, gone] = [(); 3].map(|()| Id::<Item>::mint());
    let cache = batched(builder(), &batches, &open(), &[gone])
        .build()
        .unwrap();
    let answers = cache.fetch_many([a, gone, b]).await;
    assert_eq!(ok(&answers[0]).id, a.payload());
    assert!(answers[1].as_ref().unwrap_err().is_not_found());
    assert_eq!(ok(&answers[2]).id, b.payload());
    assert_eq!(cache.stats::<Item>().not_found, 1);
    // With only a batch loader, a fetch loads a batch of one.
    let one = Id::<Item>::mint();
    assert_eq!(cache.fetch(one).await.unwrap().source(), Source::Fill);
    assert_eq!(batches.calls().last().unwrap(), &[one]);

    let failing = builder()
        .loader_many(|_: Vec<Id<Item>>| async {
            Err::<Vec<(Id<Item>, Item)>, _>(std::io::Error::other("the database is away"))
        })
        .build()
        .unwrap();
    failing.put(a, item(a, 1)).await.unwrap();
    let answers = failing.fetch_many([a, b, gone]).await;
    assert_eq!(ok(&answers[0]).source(), Source::Hit);
    for failed in &answers[1..] {
        match failed {
            Err(Error::Load { source, .. }) => assert!(source.to_string().contains("away")),
            other => panic!("a load error, not {other:?}"),
        }
    }
    assert_eq!(failing.stats::<Item>().load_errors, 2);
    assert_eq!(failing.stats::<Item>().in_flight, 0);

    // `without_loader` drops a batch loader too; the last call wins.
    let unloaded = batched(builder(), &batches, &open(), &[]).without_loader::<Item>();
    let unloaded = unloaded.build().unwrap();
    let answers = unloaded.fetch_many([a]).await;
    assert!(
        matches!(answers[0], Err(Error::NoLoader { .. })),
        "{answers:?}"
    );
    let reloaded = builder().without_loader::<Item>();
    let reloaded = batched(reloaded, &batches, &open(), &[]).build().unwrap();
    assert_eq!(ok(&reloaded.fetch_many([a]).await[0]).id, a.payload());
    assert_eq!(reloaded.fetch(b).await.unwrap().source(), Source::Fill);
}

/// A key of another Redis type (someone else's list) at an id's key:
/// `MGET` answers nil for it, so the batch loads the id. Its fill replaces
/// the key and counts one bad frame, as a single fetch's does (once: its
/// `GET` counted it already): on a `tracking` table, whose fills are `SET
/// NX` (which the key refuses), and on one whose fills go through the
/// versioned script (which replaced it without a word before it said so).
/// An invalidation that meets one replaces and counts it too.
#[tokio::test]
async fn a_batch_refills_over_a_key_of_another_type() {
    let server = RedisServer::start();
    let node = || {
        let builder = builder().l2(server.url());
        builder.without_loader::<Item>().build().unwrap()
    };
    refills_over_a_key_of_another_type(&server, node, |tracked: &Tracked| tracked.id).await;
    refills_over_a_key_of_another_type(&server, node, |spread: &Spread| spread.id).await;
}

async fn refills_over_a_key_of_another_type<T: Cached>(
    server: &RedisServer,
    node: impl Fn() -> Cache,
    payload: impl Fn(&T) -> u64,
) {
    let table = T::spec().name();
    let ids: Vec<Id<T>> = (0..3).map(|_| Id::mint()).collect();
    let listed = |id: Id<T>| {
        let key = keyspace::key(T::spec(), &id.raw());
        let () = server.query(redis::cmd("RPUSH").arg(&key).arg("not a frame"));
        key
    };
    let replaced = |key: &str| {
        let kind: String = server.query(redis::cmd("TYPE").arg(key));
        kind == "string"
    };

    let key = listed(ids[0]);
    let cache = node();
    let answers = bounded("the batch", cache.fetch_many(ids[..2].iter().copied())).await;
    for (answer, id) in answers.iter().zip(&ids) {
        let fetched = ok(answer);
        assert_eq!(
            (fetched.source(), payload(fetched.value())),
            (Source::Fill, id.payload()),
            "{table}"
        );
    }
    assert_eq!(cache.stats::<T>().decode_errors, 1, "{table}");
    assert!(replaced(&key), "{table}: the fill replaced the list");
    let shared = node().fetch(ids[0]).await.unwrap();
    assert_eq!(
        shared.source(),
        Source::L2,
        "{table}: another node reads the fill"
    );

    let key = listed(ids[2]);
    assert_eq!(cache.fetch(ids[2]).await.unwrap().source(), Source::Fill);
    assert_eq!(
        cache.stats::<T>().decode_errors,
        2,
        "{table}: a single fetch counts it once"
    );
    assert!(replaced(&key), "{table}: the single fill replaced the list");

    let id = Id::mint();
    let key = listed(id);
    cache.invalidate(id).await.unwrap();
    assert_eq!(
        cache.stats::<T>().decode_errors,
        3,
        "{table}: so does an invalidation"
    );
    assert!(replaced(&key), "{table}: the tombstone replaced the list");
}

#[tokio::test]
async fn a_fetch_joins_the_batch_and_the_batch_joins_a_fetch() {
    let (calls, batches, gate) = (Calls::default(), Batches::default(), Gate::closed());
    let cache = batched(single(builder(), &calls), &batches, &gate, &[])
        .build()
        .unwrap();
    let [a, b] = [(); 2].map(|()| Id::<Item>::mint());

    // A fetch of `a` while the batch loads it joins the batch's flight.
    let batch = tokio::spawn(cache.fetch_many([a, b]));
    eventually("the batch in its loader", async || {
        batches.calls().len() == 1
    })
    .await;
    let fetch = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.fetch(a).await })
    };
    eventually("the fetch to join", async || {
        cache.stats::<Item>().coalesced == 1
    })
    .await;
    gate.open();
    let answers = bounded("the batch", batch).await.unwrap();
    let joined = bounded("the fetch", fetch).await.unwrap().unwrap();
    assert_eq!(joined.source(), Source::Fill);
    assert_eq!(joined.version(), ok(&answers[0]).version(), "one load of a");
    assert_eq!(calls.get(), 0, "the single loader never ran");

    // A batch given an id a fetch is loading joins that fetch's flight.
    let (calls, batches, gate) = (Calls::default(), Batches::default(), Gate::closed());
    let loader_gate = gate.clone();
    let counted = calls.clone();
    let cache = batched(builder(), &batches, &open(), &[])
        .loader(move |id: Id<Item>| {
            counted.count();
            let gate = loader_gate.clone();
            async move {
                gate.pass().await;
                Ok::<_, Infallible>(Some(item(id, 7)))
            }
        })
        .build()
        .unwrap();
    let fetch = {
        let cache = cache.clone();
        tokio::spawn(async move { cache.fetch(a).await })
    };
    eventually("the fetch in its loader", async || calls.get() == 1).await;
    let batch = tokio::spawn(cache.fetch_many([a, b]));
    eventually("the batch to load b", async || batches.calls().len() == 1).await;
    assert_eq!(batches.calls(), [vec![b]], "a is the fetch's to load");
    gate.open();
    let answers = bounded("the batch", batch).await.unwrap();
    let fetched = bounded("the fetch", fetch).await.unwrap().unwrap();
    assert_eq!(ok(&answers[0]).revision, 7, "the fetch's load of a");
    assert_eq!(ok(&answers[0]).version(), fetched.version());
    assert_eq!(calls.get(), 1);
    let stats = cache.stats::<Item>();
    assert_eq!((stats.coalesced, stats.flights, stats.fills), (1, 2, 2));
}

#[tokio::test]
async fn an_invalidation_during_the_batch_load_wins() {
    let server = RedisServer::start();
    let (calls, batches, gate) = (Calls::default(), Batches::default(), Gate::closed());
    let cache = batched(
        single(builder().l2(server.url()), &calls),
        &batches,
        &gate,
        &[],
    )
    .build()
    .unwrap();
    let [a, b] = [(); 2].map(|()| Id::<Item>::mint());

    let batch = tokio::spawn(cache.fetch_many([a, b]));
    eventually("the batch in its loader", async || {
        batches.calls().len() == 1
    })
    .await;
    cache.invalidate(a).await.unwrap();
    gate.open();
    let answers = bounded("the batch", batch).await.unwrap();
    // Its callers started before the invalidation: they get what it read.
    assert!(answers.iter().all(Result::is_ok));

    // But it installed nothing of `a`, in L1 or L2: the next fetch loads.
    assert_eq!(cache.fetch(b).await.unwrap().source(), Source::Hit);
    let after = cache.fetch(a).await.unwrap();
    assert_eq!(after.source(), Source::Fill);
    assert_eq!(calls.get(), 1);
    assert!(after.version() > ok(&answers[0]).version());
}

#[tokio::test]
async fn a_spread_table_on_one_server_reads_in_one_mget() {
    // One server has no slots: the spread keys go in one MGET too.
    let server = RedisServer::start();
    let node = || {
        single(builder().l2(server.url()), &Calls::default())
            .build()
            .unwrap()
    };
    let (a, b) = (node(), node());
    let ids: Vec<Id<Spread>> = (0..10).map(|_| Id::mint()).collect();
    for &id in &ids {
        a.fetch(id).await.unwrap();
    }
    reset_counters(&server);
    let answers = bounded("the batch", b.fetch_many(ids.iter().copied())).await;
    for (answer, id) in answers.iter().zip(&ids) {
        let answer = answer.as_ref().unwrap();
        assert_eq!((answer.id, answer.source()), (id.payload(), Source::L2));
    }
    assert_eq!(mgets(&server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_table_on_a_cluster_reads_one_mget_per_slot() {
    let cluster = RedisCluster::start(3, 0);
    let node = || {
        let calls = Calls::default();
        let builder = builder().l2_cluster(cluster.urls());
        (single(builder, &calls).build().unwrap(), calls)
    };
    let ((a, _), (b, _)) = (node(), node());

    let ids: Vec<Id<Spread>> = (0..30).map(|_| Id::mint()).collect();
    for &id in &ids[..20] {
        assert_eq!(a.fetch(id).await.unwrap().source(), Source::Fill);
    }
    let slots: HashSet<u16> = (ids.iter())
        .map(|id| keyspace::slot(keyspace::key(Spread::spec(), &id.raw()).as_bytes()))
        .collect();
    let masters = cluster.masters();
    for master in &masters {
        reset_counters(master);
    }
    let answers = bounded("the batch", b.fetch_many(ids.iter().copied())).await;
    for (answer, id) in answers.iter().zip(&ids[..20]) {
        let answer = answer.as_ref().unwrap();
        assert_eq!((answer.id, answer.source()), (id.payload(), Source::L2));
    }
    for answer in &answers[20..] {
        assert_eq!(answer.as_ref().unwrap().source(), Source::Fill);
    }
    let sent: u64 = masters.iter().map(|master| mgets(master)).sum();
    assert_eq!(sent, slots.len() as u64, "one MGET per slot");
    assert_eq!(b.stats::<Spread>().l2_hits, 20);
    // B's fills are in L2 for A, on their slots' owners.
    for &id in &ids[20..] {
        assert_eq!(a.fetch(id).await.unwrap().source(), Source::L2);
    }

    // A table's keys share a slot: one MGET in all.
    let items: Vec<Id<Item>> = (0..10).map(|_| Id::mint()).collect();
    for &id in &items {
        a.fetch(id).await.unwrap();
    }
    for master in &masters {
        reset_counters(master);
    }
    let answers = bounded("the batch", b.fetch_many(items.iter().copied())).await;
    assert!(
        answers
            .iter()
            .all(|answer| ok(answer).source() == Source::L2)
    );
    let sent: u64 = masters.iter().map(|master| mgets(master)).sum();
    assert_eq!(sent, 1);
}

#[tokio::test]
async fn a_batch_loader_that_panics_fails_its_ids_and_the_next_call_loads_afresh() {
    let panics = Calls::default();
    let counted = panics.clone();
    let cache = builder()
        .loader_many(move |ids: Vec<Id<Item>>| {
            let first = counted.count() == 0;
            async move {
                assert!(!first, "the first batch panics");
                Ok::<_, Infallible>(
                    ids.into_iter()
                        .map(|id| (id, item(id, 0)))
                        .collect::<Vec<_>>(),
                )
            }
        })
        .build()
        .unwrap();
    let [a, b] = [(); 2].map(|()| Id::<Item>::mint());
    let answers = bounded("the batch", cache.fetch_many([a, b])).await;
    for answer in &answers {
        match answer {
            Err(Error::FlightCrashed { message, .. }) => {
                assert!(message.contains("the first batch panics"), "{message}");
            }
            other => panic!("a crash, not {other:?}"),
        }
    }
    assert_eq!(cache.stats::<Item>().in_flight, 0);
    let answers = bounded("the batch", cache.fetch_many([a, b])).await;
    assert!(
        answers
            .iter()
            .all(|answer| ok(answer).source() == Source::Fill)
    );
}

#[tokio::test]
async fn a_batch_that_times_out_leaves_its_flights_to_land() {
    let (batches, gate) = (Batches::default(), Gate::closed());
    let cache = batched(builder(), &batches, &gate, &[]).build().unwrap();
    let [a, b] = [(); 2].map(|()| Id::<Item>::mint());
    cache.put(b, item(b, 3)).await.unwrap();

    // The gate stays closed until the batch has given up on `a`.
    let answers = cache
        .fetch_many_within([a, b], Some(Duration::from_millis(20)))
        .await;
    assert!(
        matches!(answers[0], Err(Error::Timeout { .. })),
        "{answers:?}"
    );
    assert_eq!(ok(&answers[1]).revision, 3, "b, from L1");
    gate.open();
    eventually("the detached flight to land", async || {
        cache.stats::<Item>().in_flight == 0
    })
    .await;
    assert_eq!(cache.fetch(a).await.unwrap().source(), Source::Hit);
    assert_eq!(batches.calls(), [vec![a]], "one load of a");
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Item>()
        .open::<Spread>()
        .open::<Tracked>()
}
