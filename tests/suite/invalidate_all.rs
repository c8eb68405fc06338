//! `Cache::invalidate_all`, a table-wide invalidation, on one real server
//! with several cache nodes, in every coherence mode: the writing node
//! reads afresh at once; the other nodes as their mode delivers (`none`:
//! at their next L2 read that meets a buried frame); L2 serves no frame
//! older than it to anyone; a fill that read the system of record before
//! it never lands; and the stale-read checker with table-wide
//! invalidations mixed in.
//!
//! The cluster's cases are in `cluster.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::coherence_support;
use crate::coherence_support::checker::Bulk;
use crate::coherence_support::{
    Broadcast, Durable, Entity, Plain, Sor, Tracked, bounded, builder, checker, eventually, health,
    linked,
};
use crate::common::Gate;
use echo_cache::{Cache, Cached, Coherence, Health, Id, Source, keyspace};
use echo_cache_testkit::RedisServer;

/// A node whose loaders of every table here read `sor`.
fn node(server: &RedisServer, sor: &Sor) -> Cache {
    coherence_support::with_loaders(builder(server), sor)
        .open::<Durable>()
        .loader(coherence_support::reads::<Durable>(sor))
        .open::<Plain>()
        .loader(coherence_support::reads::<Plain>(sor))
        .build()
        .expect("cache builds")
}

/// Waits until every coherent table of `cache` serves.
async fn ready(cache: &Cache) {
    linked(cache).await;
    eventually("the durable lane is up", async || {
        health::<Durable>(cache) == Health::Serving
    })
    .await;
}

/// What a fetch of `id` on `cache` answers: its revision and source.
async fn read<T: Entity>(cache: &Cache, id: Id<T>) -> (u64, Source) {
    let fetched = cache.fetch(id).await.expect("fetch");
    (fetched.revision(), fetched.source())
}

/// Node A fills three ids of `T` (revision 0), B holds one; the system of
/// record moves them to revision 1 and A invalidates the table. A reads
/// revision 1 at once, from the loader; a third node reads it too (L2
/// buries the frames); B reads it as `T`'s mode delivers: within the bound
/// for the coherent modes, and for `none` once B's own L2 read of an id it
/// does not hold meets a buried frame, which flushes its L1.
async fn every_node_reads_afresh<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    ready(&a).await;
    ready(&b).await;
    let (held, for_c, for_b) = (Id::<T>::mint(), Id::<T>::mint(), Id::<T>::mint());
    for id in [held, for_c, for_b] {
        assert_eq!(read(&a, id).await, (0, Source::Fill));
        sor.bump(id.raw());
    }
    assert_eq!(read(&b, held).await, (0, Source::L2));
    assert_eq!(read(&b, held).await, (0, Source::Hit));

    let version = a.invalidate_all::<T>().await.expect("invalidate_all");
    assert_eq!(version.kind(), T::KIND);
    assert_eq!(a.stats::<T>().size, 0, "A's L1 emptied before it returns");
    assert_eq!(read(&a, held).await, (1, Source::Fill), "A reads its own");
    let c = node(&server, &sor);
    ready(&c).await;
    assert_eq!(
        read(&c, for_c).await,
        (1, Source::Fill),
        "L2 serves no frame older than the invalidation"
    );

    if T::spec().coherence() == Coherence::None {
        assert_eq!(
            read(&b, held).await,
            (0, Source::Hit),
            "`none`: no message, B's row lives until B reads L2"
        );
        assert_eq!(read(&b, for_b).await.0, 1, "B's L2 read meets the floor");
        assert_eq!(
            read(&b, held).await,
            (1, Source::L2),
            "and B's L1 is flushed"
        );
    }
    eventually("B reads afresh", async || read(&b, held).await.0 == 1).await;
    assert_eq!(read(&b, held).await.0, 1, "and never the older again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_none() {
    every_node_reads_afresh::<Plain>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_tracking() {
    every_node_reads_afresh::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_broadcast() {
    every_node_reads_afresh::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_durable() {
    every_node_reads_afresh::<Durable>().await;
}

/// Node B's fill of an id reads the system of record (revision 0), then
/// waits; the record moves to revision 1 and node A invalidates the table;
/// then B's fill goes on. B's caller gets what the fill read (it began
/// before), but the fill lands nowhere: not in L2 (a third node reads
/// revision 1), and, in a mode that tells B, not in B's L1.
async fn a_fill_that_read_before_never_lands<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let a = node(&server, &sor);
    let (gate, entered) = (Gate::closed(), Arc::new(tokio::sync::Notify::new()));
    let gated = {
        let (sor, gate, entered) = (sor.clone(), gate.clone(), Arc::clone(&entered));
        move |id: Id<T>| {
            let revision = sor.get(id.raw());
            let (gate, entered) = (gate.clone(), Arc::clone(&entered));
            async move {
                entered.notify_one();
                gate.pass().await;
                Ok::<_, std::convert::Infallible>(Some(T::at(revision)))
            }
        }
    };
    let b = coherence_support::with_loaders(builder(&server), &sor)
        .open::<Durable>()
        .loader(coherence_support::reads::<Durable>(&sor))
        .open::<Plain>()
        .loader(coherence_support::reads::<Plain>(&sor))
        .open::<T>()
        .loader(gated)
        .build()
        .expect("cache builds");
    ready(&a).await;
    ready(&b).await;
    // A row B holds, read from L2 (not through the gated loader): its
    // eviction tells that B has the news.
    let (id, probe) = (Id::<T>::mint(), Id::<T>::mint());
    assert_eq!(read(&a, probe).await, (0, Source::Fill));
    assert_eq!(read(&b, probe).await, (0, Source::L2));
    let fill = tokio::spawn({
        let b = b.clone();
        async move { read(&b, id).await }
    });
    bounded("B's fill reads the record", entered.notified()).await;
    sor.bump(id.raw());
    a.invalidate_all::<T>().await.expect("invalidate_all");
    if T::spec().coherence() != Coherence::None {
        // B has the news (its flight is overtaken) before its fill goes on.
        eventually("B applies the invalidation", async || {
            b.stats::<T>().size == 0
        })
        .await;
    }
    gate.open();
    let answered = bounded("B's fill", fill).await.expect("the fill's task");
    assert_eq!(answered, (0, Source::Fill), "the fill answers what it read");

    let c = node(&server, &sor);
    ready(&c).await;
    assert_eq!(read(&c, id).await.0, 1, "L2 serves nothing of the fill");
    if T::spec().coherence() != Coherence::None {
        assert_eq!(b.stats::<T>().size, 0, "nor in B's L1");
        assert_eq!(read(&b, id).await.0, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_none() {
    a_fill_that_read_before_never_lands::<Plain>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_tracking() {
    a_fill_that_read_before_never_lands::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_broadcast() {
    a_fill_that_read_before_never_lands::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_durable() {
    a_fill_that_read_before_never_lands::<Durable>().await;
}

/// A table-wide invalidation writes one key, whatever the table holds:
/// the frames stay (buried, unread) and expire with their TTL, and a
/// repeated or older table-wide invalidation leaves the floor where it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_writes_one_key_and_the_floor_never_goes_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let a = node(&server, &sor);
    ready(&a).await;
    let ids: Vec<Id<Broadcast>> = (0..50).map(|_| Id::mint()).collect();
    for &id in &ids {
        read(&a, id).await;
    }
    let floor_key = format!("{}*", keyspace::prefix(Broadcast::spec()));
    let keys = || server.query::<Vec<String>>(redis::cmd("KEYS").arg("ecc:{broadcast}:*"));
    let before = keys().len();
    let version = a
        .invalidate_all::<Broadcast>()
        .await
        .expect("invalidate_all");
    assert_eq!(keys().len(), before + 1, "one key written: the floor");
    let floor: Vec<u8> = server.query(redis::cmd("GET").arg(&floor_key));
    assert_eq!(floor, version.to_bytes());
    let ttl: i64 = server.query(redis::cmd("PTTL").arg(&floor_key));
    assert!(
        ttl > 600_000,
        "the floor outlives the frames under it: {ttl} ms"
    );
    let newer = a.invalidate_all::<Broadcast>().await.expect("again");
    assert!(newer > version);
    let floor: Vec<u8> = server.query(redis::cmd("GET").arg(&floor_key));
    assert_eq!(floor, newer.to_bytes(), "the newer one wins");
}

/// The stale-read checker of a mode, with table-wide invalidations mixed
/// in.
async fn stale_read_checker<T: Entity>() {
    let server = RedisServer::start();
    checker::two_nodes_bulk::<T>(
        |sor| node(&server, sor),
        async |nodes: &[Cache]| {
            for node in nodes {
                ready(node).await;
            }
        },
        Bulk::All,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_tracking_with_invalidate_all() {
    stale_read_checker::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_broadcast_with_invalidate_all() {
    stale_read_checker::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_durable_with_invalidate_all() {
    stale_read_checker::<Durable>().await;
}

/// Without L2 there is one node: its L1 is emptied and nothing older is
/// kept.
#[tokio::test]
async fn without_l2_it_empties_l1() {
    let sor = Sor::default();
    let cache = Cache::builder()
        .open::<Plain>()
        .loader(coherence_support::reads::<Plain>(&sor))
        .fetch_timeout(Some(Duration::from_secs(10)))
        .build()
        .expect("cache builds");
    let id = Id::<Plain>::mint();
    assert_eq!(read(&cache, id).await, (0, Source::Fill));
    sor.bump(id.raw());
    cache
        .invalidate_all::<Plain>()
        .await
        .expect("invalidate_all");
    assert_eq!(read(&cache, id).await, (1, Source::Fill));
}
