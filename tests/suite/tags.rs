//! `Cache::invalidate_tag`, the invalidation of one tag's rows, on one
//! real server with several cache nodes, in every coherence mode: the
//! writing node reads the tag afresh at once, the others as their mode
//! delivers; L2 serves no frame of the tag older than it; a fill that read
//! the system of record before it never lands; rows of other tags stay;
//! and the stale-read checker with tag invalidations mixed in.
//!
//! The cluster's cases are in `cluster.rs`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::coherence_support::checker::{self, Bulk};
use crate::coherence_support::{
    Entity, Sor, bounded, builder, eventually, linked, reads, with_loaders,
};
use crate::common::Gate;
use echo_cache::{Cache, Cached, Coherence, Health, Id, Source, Tag};
use echo_cache_testkit::RedisServer;

/// A table of `$coherence` whose rows are a revision and a group, their
/// tag.
// rustfmt re-indents an attribute of a macro's body at every run.
#[rustfmt::skip]
macro_rules! tagged {
    ($entity:ident, $kind:literal, $coherence:literal, $table:literal) => {
        #[echo_cache::near_cache(kind = $kind, ttl_ms = 600_000, coherence = $coherence, name = $table, tag = $entity::group)]
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $entity {
            pub revision: u64,
            pub group: u64,
        }

        impl $entity {
            fn group(&self) -> u64 {
                self.group
            }
        }

        impl Entity for $entity {
            fn at(revision: u64) -> $entity {
                $entity { revision, group: 0 }
            }
            fn revision(&self) -> u64 {
                self.revision
            }
            fn of(id: Id<$entity>, revision: u64) -> $entity {
                $entity { revision, group: group_of(id) }
            }
        }
    };
}

tagged!(TagPlain, "TGN", "none", "tag_plain");
tagged!(TagTracked, "TGT", "tracking", "tag_tracked");
tagged!(TagBroadcast, "TGB", "broadcast", "tag_broadcast");
tagged!(TagDurable, "TGD", "durable", "tag_durable");

/// The group of `id`, the tag of its rows ([`Entity::of`]): its payload's
/// parity.
pub fn group_of<T: Cached>(id: Id<T>) -> u64 {
    id.payload() % 2
}

/// An id of group `group`.
pub fn id_in<T: Cached>(group: u64) -> Id<T> {
    loop {
        let id = Id::<T>::mint();
        if group_of(id) == group {
            return id;
        }
    }
}

/// A node with `T`'s table, whose loader reads `sor`.
fn node<T: Entity>(server: &RedisServer, sor: &Sor) -> Cache {
    with_loaders(builder(server), sor)
        .open::<T>()
        .loader(reads::<T>(sor))
        .build()
        .expect("cache builds")
}

/// Waits until `cache` serves, `T`'s table too.
async fn ready<T: Cached>(cache: &Cache) {
    linked(cache).await;
    eventually("the table serves", async || {
        cache
            .tables()
            .iter()
            .any(|table| table.spec.name() == T::spec().name() && table.health == Health::Serving)
    })
    .await;
}

/// What a fetch of `id` on `cache` answers: its revision and source.
pub async fn read<T: Entity>(cache: &Cache, id: Id<T>) -> (u64, Source) {
    let fetched = cache.fetch(id).await.expect("fetch");
    (fetched.value().revision(), fetched.source())
}

/// Node A fills two ids of tag 0 and one of tag 1, B holds one of each;
/// the system of record moves all three to revision 1 and A invalidates
/// tag 0. A reads tag 0 afresh at once and keeps tag 1's row; a new node
/// reads tag 0 afresh from L2's point of view (the frames tombstoned);
/// B reads it afresh as `T`'s mode delivers (`none`: B keeps its row
/// until its TTL, the documented limit) and keeps tag 1's row.
async fn every_node_reads_afresh<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node::<T>(&server, &sor), node::<T>(&server, &sor));
    ready::<T>(&a).await;
    ready::<T>(&b).await;
    let (held, for_c, other) = (id_in::<T>(0), id_in::<T>(0), id_in::<T>(1));
    for id in [held, for_c, other] {
        assert_eq!(read(&a, id).await, (0, Source::Fill));
        sor.bump(id.raw());
    }
    if T::spec().coherence() == Coherence::Tracking {
        // The push of each of A's fills, which would drop B's row of it
        // were it to come after B read the frame.
        eventually("B to apply the pushes of A's fills", async || {
            b.stats::<T>().invalidations == 3
        })
        .await;
    }
    assert_eq!(read(&b, held).await, (0, Source::L2));
    assert_eq!(read(&b, other).await, (0, Source::L2));

    let version = a
        .invalidate_tag::<T>(Tag::from(0))
        .await
        .expect("invalidate_tag");
    assert_eq!(version.kind(), T::KIND);
    assert_eq!(
        a.stats::<T>().size,
        1,
        "A's rows of the tag gone before it returns"
    );
    assert_eq!(read(&a, held).await, (1, Source::Fill), "A reads its own");
    assert_eq!(
        read(&a, other).await,
        (0, Source::Hit),
        "another tag's row stays"
    );
    let c = node::<T>(&server, &sor);
    ready::<T>(&c).await;
    assert_eq!(
        read(&c, for_c).await,
        (1, Source::Fill),
        "L2 serves no frame of the tag older than the invalidation"
    );
    assert_eq!(
        read(&c, other).await,
        (0, Source::L2),
        "nor drops another tag's"
    );

    if T::spec().coherence() == Coherence::None {
        assert_eq!(
            read(&b, held).await,
            (0, Source::Hit),
            "`none`: no message, B's row lives its TTL"
        );
    } else {
        eventually("B reads afresh", async || read(&b, held).await.0 == 1).await;
        assert_eq!(read(&b, held).await.0, 1, "and never the older again");
    }
    assert_eq!(
        read(&b, other).await,
        (0, Source::Hit),
        "B keeps another tag's row"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_none() {
    every_node_reads_afresh::<TagPlain>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_tracking() {
    every_node_reads_afresh::<TagTracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_broadcast() {
    every_node_reads_afresh::<TagBroadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_reads_afresh_durable() {
    every_node_reads_afresh::<TagDurable>().await;
}

/// Node B's fill of an id of tag 0 reads the system of record (revision
/// 0), then waits; the record moves to revision 1 and node A invalidates
/// tag 0; then B's fill goes on. B's caller gets what the fill read (it
/// began before), but the fill lands nowhere: not in L2 (a third node
/// reads revision 1), and, in a mode that tells B, not in B's L1. The
/// same holds for a fill on A itself.
async fn a_fill_that_read_before_never_lands<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let a = node::<T>(&server, &sor);
    let (gate, entered) = (Gate::closed(), Arc::new(tokio::sync::Notify::new()));
    let gated = {
        let (sor, gate, entered) = (sor.clone(), gate.clone(), Arc::clone(&entered));
        move |id: Id<T>| {
            let revision = sor.get(id.raw());
            let (gate, entered) = (gate.clone(), Arc::clone(&entered));
            async move {
                entered.notify_one();
                gate.pass().await;
                Ok::<_, Infallible>(Some(T::of(id, revision)))
            }
        }
    };
    let b = with_loaders(builder(&server), &sor)
        .open::<T>()
        .loader(gated)
        .build()
        .expect("cache builds");
    ready::<T>(&a).await;
    ready::<T>(&b).await;
    // A row B holds, read from L2 (not through the gated loader): its
    // eviction tells that B has the news.
    let (id, probe) = (id_in::<T>(0), id_in::<T>(0));
    assert_eq!(read(&a, probe).await, (0, Source::Fill));
    assert_eq!(read(&b, probe).await, (0, Source::L2));
    let fill = tokio::spawn({
        let b = b.clone();
        async move { read(&b, id).await }
    });
    bounded("B's fill reads the record", entered.notified()).await;
    sor.bump(id.raw());
    a.invalidate_tag::<T>(0).await.expect("invalidate_tag");
    if T::spec().coherence() != Coherence::None {
        eventually("B applies the invalidation", async || {
            b.stats::<T>().size == 0
        })
        .await;
    }
    gate.open();
    let answered = bounded("B's fill", fill).await.expect("the fill's task");
    assert_eq!(answered, (0, Source::Fill), "the fill answers what it read");

    let c = node::<T>(&server, &sor);
    ready::<T>(&c).await;
    assert_eq!(read(&c, id).await.0, 1, "L2 serves nothing of the fill");
    if T::spec().coherence() != Coherence::None {
        assert_eq!(b.stats::<T>().size, 0, "nor B's L1");
        assert_eq!(read(&b, id).await.0, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_none() {
    a_fill_that_read_before_never_lands::<TagPlain>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_tracking() {
    a_fill_that_read_before_never_lands::<TagTracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_broadcast() {
    a_fill_that_read_before_never_lands::<TagBroadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_that_read_before_never_lands_durable() {
    a_fill_that_read_before_never_lands::<TagDurable>().await;
}

/// The stale-read checker of a mode, with tag invalidations mixed in.
async fn stale_read_checker<T: Entity>() {
    let server = RedisServer::start();
    checker::two_nodes_bulk::<T>(
        |sor| node::<T>(&server, sor),
        async |nodes: &[Cache]| {
            for node in nodes {
                ready::<T>(node).await;
            }
        },
        Bulk::Tag(group_of::<T>),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_tracking_with_invalidate_tag() {
    stale_read_checker::<TagTracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_broadcast_with_invalidate_tag() {
    stale_read_checker::<TagBroadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_durable_with_invalidate_tag() {
    stale_read_checker::<TagDurable>().await;
}

/// Without L2, on one node: a fill under way when the tag is invalidated
/// answers its caller but never installs, rows of other tags stay, and a
/// late (older) invalidation of the tag changes nothing.
#[tokio::test]
async fn without_l2_a_fill_under_way_never_installs() {
    let sor = Sor::default();
    let (gate, entered) = (Gate::closed(), Arc::new(tokio::sync::Notify::new()));
    let gated = {
        let (sor, gate, entered) = (sor.clone(), gate.clone(), Arc::clone(&entered));
        move |id: Id<TagPlain>| {
            let revision = sor.get(id.raw());
            let (gate, entered) = (gate.clone(), Arc::clone(&entered));
            async move {
                if group_of(id) == 0 {
                    entered.notify_one();
                    gate.pass().await;
                }
                Ok::<_, Infallible>(Some(TagPlain::of(id, revision)))
            }
        }
    };
    let cache = Cache::builder()
        .open::<TagPlain>()
        .loader(gated)
        .fetch_timeout(Some(Duration::from_secs(10)))
        .build()
        .expect("cache builds");
    let (id, other) = (id_in::<TagPlain>(0), id_in::<TagPlain>(1));
    assert_eq!(read(&cache, other).await, (0, Source::Fill));
    let fill = tokio::spawn({
        let cache = cache.clone();
        async move { read(&cache, id).await }
    });
    bounded("the fill reads the record", entered.notified()).await;
    sor.bump(id.raw());
    cache
        .invalidate_tag::<TagPlain>(0)
        .await
        .expect("invalidate_tag");
    gate.open();
    assert_eq!(
        bounded("the fill", fill).await.expect("task"),
        (0, Source::Fill)
    );
    assert_eq!(
        cache.stats::<TagPlain>().size,
        1,
        "only the other tag's row"
    );
    assert_eq!(read(&cache, other).await, (0, Source::Hit));
    let fill = tokio::spawn({
        let cache = cache.clone();
        async move { read(&cache, id).await }
    });
    assert_eq!(
        bounded("a fresh fill", fill).await.expect("task"),
        (1, Source::Fill)
    );
    assert_eq!(read(&cache, id).await, (1, Source::Hit));
}
