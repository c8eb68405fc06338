//! Warm start (`warm = "ready" | "background"`), on a real server: node A
//! reads a Zipf set and merges its hottest ids into the fleet's hot list;
//! node B, started afterwards, holds the hot ids in L1 before any fetch
//! (before `ready()` returns, or soon after, in the background) without
//! calling its loader; a table not declared warm lists nothing; an id
//! invalidated (or a table invalidated whole) after it was listed is not
//! warmed stale; the list stays bounded.

use std::convert::Infallible;
use std::time::Duration;

use echo_cache::{Builder, Cache, Cached, Id, Limits, Source, Warm, keyspace, near_cache};
use echo_cache_testkit::{RedisCluster, RedisServer};

use crate::common::{Calls, bounded, eventually, query};

#[near_cache(
    kind = "WSG",
    ttl_ms = 600_000,
    max_size = 200,
    name = "warm_games",
    warm = "ready"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Game {
    rev: u64,
}

#[near_cache(
    kind = "WSU",
    ttl_ms = 600_000,
    max_size = 200,
    name = "warm_users",
    coherence = "broadcast",
    warm = "background"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct User {
    rev: u64,
}

#[near_cache(
    kind = "WST",
    ttl_ms = 600_000,
    max_size = 200,
    name = "warm_tracked",
    coherence = "tracking",
    warm = "ready"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tracked {
    rev: u64,
}

#[near_cache(
    kind = "WSS",
    ttl_ms = 600_000,
    max_size = 200,
    name = "warm_spread",
    placement = "spread",
    warm = "ready"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Spot {
    rev: u64,
}

#[near_cache(kind = "WSC", ttl_ms = 600_000, max_size = 200, name = "warm_cold")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Rule {
    rev: u64,
}

/// How many hot ids the lists here keep.
const LISTED: usize = 50;

fn cache_builder() -> Builder {
    Cache::builder()
        .open::<Game>()
        .open::<User>()
        .open::<Rule>()
        .open::<Tracked>()
        .open::<Spot>()
}

/// A node whose loaders answer revision `rev` and count their calls in
/// `calls`, merging its hot ids every `publish` (on a server, generous
/// timeouts: a loaded machine must not drop an L2 read).
fn node(server: &RedisServer, rev: u64, calls: &Calls, publish: Duration) -> Cache {
    loaders(cache_builder().l2(server.url()), rev, calls, publish)
        .build()
        .expect("cache builds")
}

/// `builder` with the loaders and limits of [`node`].
fn loaders(builder: Builder, rev: u64, calls: &Calls, publish: Duration) -> Builder {
    let limits = Limits::new().warm_ids(LISTED);
    let (game, user, rule) = (calls.clone(), calls.clone(), calls.clone());
    let (tracked, spot) = (calls.clone(), calls.clone());
    builder
        .l2_timeout(Duration::from_secs(2))
        .hot_publish_every(publish)
        .limits::<Game>(limits)
        .limits::<User>(limits)
        .limits::<Tracked>(limits)
        .limits::<Spot>(limits)
        .loader(move |_: Id<Game>| {
            game.count();
            async move { Ok::<_, Infallible>(Some(Game { rev })) }
        })
        .loader(move |_: Id<User>| {
            user.count();
            async move { Ok::<_, Infallible>(Some(User { rev })) }
        })
        .loader(move |_: Id<Rule>| {
            rule.count();
            async move { Ok::<_, Infallible>(Some(Rule { rev })) }
        })
        .loader(move |_: Id<Tracked>| {
            tracked.count();
            async move { Ok::<_, Infallible>(Some(Tracked { rev })) }
        })
        .loader(move |_: Id<Spot>| {
            spot.count();
            async move { Ok::<_, Infallible>(Some(Spot { rev })) }
        })
}

/// 300 ids of `T`, ranked by how often `cache` reads them, the hottest
/// first: the id of rank `r` (from 0) is read `60 / (r + 1)` times, at
/// least once, in rounds (each round reads every id not yet read as often
/// as its rank says, then 20 ids never read again). The first round takes
/// the table past its bound (200); from then on the one-off ids make it
/// evict, and its eviction policy counts the reads and ranks the ids. The
/// hottest were minted last: ties of the ranking, which come in the
/// order of the ids, do not favour them.
async fn zipf_reads<T: Cached>(cache: &Cache) -> Vec<Id<T>> {
    let mut ids: Vec<Id<T>> = (0..300).map(|_| Id::<T>::mint()).collect();
    ids.reverse();
    for round in 0..60 {
        for (rank, &id) in ids.iter().enumerate() {
            if round < (60 / (rank + 1)).max(1) {
                cache.fetch(id).await.expect("fetch");
            }
        }
        for _ in 0..20 {
            cache.fetch(Id::<T>::mint()).await.expect("fetch");
        }
    }
    ids
}

/// The ids the hot list of `T` holds, hottest first.
async fn listed<T: Cached>(server: &RedisServer) -> Vec<Id<T>> {
    let mut raw = server.connection().await;
    let mut range = redis::cmd("ZRANGE");
    range
        .arg(keyspace::hot(T::spec()))
        .arg(0)
        .arg(-1)
        .arg("REV");
    let members: Vec<String> = query(&mut raw, &range).await;
    members
        .iter()
        .map(|member| member.parse().expect("an id of the table"))
        .collect()
}

/// Merges `cache`'s hottest ids of `T` into the list; what it lists.
async fn published<T: Cached>(server: &RedisServer, cache: &Cache) -> Vec<Id<T>> {
    assert_eq!(
        cache.publish_hot::<T>().await,
        LISTED,
        "a full share merged"
    );
    let hot = listed::<T>(server).await;
    assert_eq!(hot.len(), LISTED);
    hot
}

/// Nodes that merge their hot ids only when told (`publish_hot`).
const NEVER: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_warm_holds_the_hot_ids_before_any_fetch() {
    assert_eq!(Game::spec().warm(), Warm::Ready);
    let server = RedisServer::start();
    let a_calls = Calls::default();
    let a = node(&server, 1, &a_calls, NEVER);
    bounded("A ready", a.ready()).await;
    let ids = zipf_reads::<Game>(&a).await;
    let hot = published::<Game>(&server, &a).await;
    // The policy ranks the head hottest (the rest of the list, rows it
    // ranks no hotter than others, comes in L1's order).
    assert_eq!(a.hottest::<Game>(1)[0].id, ids[0]);
    assert_eq!(hot[0], ids[0], "the Zipf head is listed first");

    let b_calls = Calls::default();
    let b = node(&server, 2, &b_calls, NEVER);
    bounded("B ready", b.ready()).await;
    // Before any fetch of B: every listed id is in its L1, from L2.
    for &id in &hot {
        let peeked = b.peek(id).expect("a listed id is warm");
        assert_eq!(peeked.rev, 1, "A's value, read from L2");
        assert_eq!(Some(peeked.version()), a.peek(id).map(|a| a.version()));
    }
    let stats = b.stats::<Game>();
    assert_eq!(stats.warmed, LISTED as u64);
    assert_eq!((stats.hits, stats.misses, stats.l2_hits), (0, 0, 0));
    assert_eq!(b_calls.get(), 0, "warming never calls the loader");
    // And the first reads of the hot ids are hits.
    let first = b.fetch(hot[0]).await.expect("fetch");
    assert_eq!(first.source(), Source::Hit);
    assert_eq!(b_calls.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_warming_fills_l1_soon_after_start() {
    let server = RedisServer::start();
    let a = node(&server, 1, &Calls::default(), NEVER);
    bounded("A ready", a.ready()).await;
    zipf_reads::<User>(&a).await;
    let hot = published::<User>(&server, &a).await;

    let b_calls = Calls::default();
    let b = node(&server, 2, &b_calls, NEVER);
    eventually("B warms in the background", async || {
        b.stats::<User>().warmed == LISTED as u64
    })
    .await;
    for &id in &hot {
        assert_eq!(b.peek(id).map(|user| user.rev), Some(1), "{id} warm");
    }
    assert_eq!(b_calls.get(), 0, "warming never calls the loader");
    assert_eq!(b.stats::<User>().misses, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_not_declared_warm_lists_nothing_and_warms_nothing() {
    assert_eq!(Rule::spec().warm(), Warm::Off);
    let server = RedisServer::start();
    let a = node(&server, 1, &Calls::default(), Duration::from_millis(20));
    bounded("A ready", a.ready()).await;
    let rules = zipf_reads::<Rule>(&a).await;
    zipf_reads::<Game>(&a).await;
    // The warm table of the same node merges on its period: once it has,
    // the other table's period would have passed too.
    eventually("the warm table's list is full", async || {
        listed::<Game>(&server).await.len() == LISTED
    })
    .await;
    assert_eq!(a.publish_hot::<Rule>().await, 0, "nothing merged");
    let mut raw = server.connection().await;
    let exists: bool = query(
        &mut raw,
        redis::cmd("EXISTS").arg(keyspace::hot(Rule::spec())),
    )
    .await;
    assert!(!exists, "no hot list for a table not declared warm");

    let b_calls = Calls::default();
    let b = node(&server, 2, &b_calls, NEVER);
    bounded("B ready", b.ready()).await;
    assert_eq!(b.stats::<Rule>().warmed, 0);
    assert!(
        rules.iter().all(|&id| b.peek(id).is_none()),
        "B's rules start cold"
    );
    assert_eq!(b_calls.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_written_after_it_was_listed_is_warmed_as_l2_holds_it_now() {
    let server = RedisServer::start();
    let a = node(&server, 1, &Calls::default(), NEVER);
    bounded("A ready", a.ready()).await;
    zipf_reads::<Game>(&a).await;
    let hot = published::<Game>(&server, &a).await;
    let (invalidated, put) = (hot[0], hot[1]);
    a.invalidate(invalidated).await.expect("invalidate");
    let written = a.put(put, Game { rev: 3 }).await.expect("put");

    let b_calls = Calls::default();
    let b = node(&server, 2, &b_calls, NEVER);
    bounded("B ready", b.ready()).await;
    assert!(
        b.peek(invalidated).is_none(),
        "an invalidated id is not warmed"
    );
    let peeked = b.peek(put).expect("the put's frame is warmed");
    assert_eq!((peeked.rev, peeked.version()), (3, written));
    assert_eq!(b.stats::<Game>().warmed, LISTED as u64 - 1);
    assert_eq!(b_calls.get(), 0);
    // The invalidated id reads afresh, from the loader.
    let fresh = b.fetch(invalidated).await.expect("fetch");
    assert_eq!((fresh.rev, fresh.source()), (2, Source::Fill));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_invalidated_whole_after_it_was_listed_warms_nothing() {
    let server = RedisServer::start();
    let a = node(&server, 1, &Calls::default(), NEVER);
    bounded("A ready", a.ready()).await;
    zipf_reads::<Game>(&a).await;
    let hot = published::<Game>(&server, &a).await;
    a.invalidate_all::<Game>().await.expect("invalidate_all");

    let b_calls = Calls::default();
    let b = node(&server, 2, &b_calls, NEVER);
    bounded("B ready", b.ready()).await;
    assert!(
        hot.iter().all(|&id| b.peek(id).is_none()),
        "every frame is buried"
    );
    assert_eq!(b.stats::<Game>().warmed, 0);
    assert_eq!(b_calls.get(), 0);
    let fresh = b.fetch(hot[0]).await.expect("fetch");
    assert_eq!((fresh.rev, fresh.source()), (2, Source::Fill));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_stays_bounded_and_expires() {
    let server = RedisServer::start();
    let (a, c) = (
        node(&server, 1, &Calls::default(), Duration::from_millis(20)),
        node(&server, 1, &Calls::default(), Duration::from_millis(20)),
    );
    bounded("A ready", a.ready()).await;
    bounded("C ready", c.ready()).await;
    let from_a = zipf_reads::<Game>(&a).await;
    let from_c = zipf_reads::<Game>(&c).await;
    // Both nodes' heads make it into one list of at most `LISTED` ids.
    eventually("both nodes' hottest ids are listed", async || {
        let hot = listed::<Game>(&server).await;
        assert!(hot.len() <= LISTED, "the list holds {} ids", hot.len());
        hot.contains(&from_a[0]) && hot.contains(&from_c[0])
    })
    .await;
    assert_eq!(listed::<Game>(&server).await.len(), LISTED);
    let mut raw = server.connection().await;
    let ttl: i64 = query(
        &mut raw,
        redis::cmd("PTTL").arg(keyspace::hot(Game::spec())),
    )
    .await;
    assert!(
        (1..=600_000).contains(&ttl),
        "the list lives as long as its frames may: {ttl} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracking_table_warms_once_its_channel_is_up_and_stays_coherent() {
    let server = RedisServer::start();
    let a = node(&server, 1, &Calls::default(), NEVER);
    bounded("A ready", a.ready()).await;
    zipf_reads::<Tracked>(&a).await;
    let hot = published::<Tracked>(&server, &a).await;

    let b_calls = Calls::default();
    let b = node(&server, 2, &b_calls, NEVER);
    bounded("B ready", b.ready()).await;
    assert_eq!(b.stats::<Tracked>().warmed, LISTED as u64);
    assert!(
        hot.iter().all(|&id| b.peek(id).is_some()),
        "every listed id is warm"
    );
    assert_eq!(b_calls.get(), 0);
    // A warmed row is a row like any other: A's write evicts it on B.
    a.put(hot[0], Tracked { rev: 3 }).await.expect("put");
    eventually("B drops its warmed row", async || b.peek(hot[0]).is_none()).await;
    assert_eq!(b.fetch(hot[0]).await.expect("fetch").rev, 3);
}

/// On a cluster: the list is one key in the table's slot; a `spread`
/// table's frames, on every slot, are warmed by one `MGET` per slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_warms_on_a_cluster_in_either_placement() {
    let cluster = RedisCluster::start(3, 0);
    let on_cluster = |rev, calls: &Calls| {
        let builder = cache_builder().l2_cluster(cluster.urls());
        loaders(builder, rev, calls, NEVER)
            .build()
            .expect("cache builds")
    };
    let a = on_cluster(1, &Calls::default());
    bounded("A ready", a.ready()).await;
    let games = zipf_reads::<Game>(&a).await;
    let spots = zipf_reads::<Spot>(&a).await;
    assert_eq!(a.publish_hot::<Game>().await, LISTED);
    assert_eq!(a.publish_hot::<Spot>().await, LISTED);

    let b_calls = Calls::default();
    let b = on_cluster(2, &b_calls);
    bounded("B ready", b.ready()).await;
    assert_eq!(b.stats::<Game>().warmed, LISTED as u64);
    assert_eq!(b.stats::<Spot>().warmed, LISTED as u64);
    assert_eq!(
        b.peek(games[0]).map(|game| game.rev),
        Some(1),
        "the head is warm"
    );
    assert_eq!(
        b.peek(spots[0]).map(|spot| spot.rev),
        Some(1),
        "the head is warm"
    );
    assert_eq!(b_calls.get(), 0);
}
