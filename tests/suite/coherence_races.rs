//! Coherence under concurrency, on one real server with two cache nodes:
//! the stale-read checker of each mode, fills racing invalidations, and a
//! node's own fills never evicting its own rows.
//!
//! Besides the `tracking` and `broadcast` tables of `coherence_support`,
//! this binary declares a `durable` one: every node here also runs a
//! durable lane.

use std::convert::Infallible;

use crate::coherence_support;
use crate::coherence_support::{
    Broadcast, Durable, Entity, Plain, Row, Sor, Tracked, bounded, builder, checker, eventually,
    health, l2_row, linked, with_loaders,
};
use echo_cache::{Cache, Health, Id, RawId, Source};
use echo_cache_testkit::RedisServer;
use tokio::sync::{mpsc, oneshot};

// Besides the support's tables: a durable one (every node here runs a
// durable lane), and a `none` one over L2, TTL only across nodes, but whose
// L2 obeys invalidations like every other table's.

/// A node whose loaders, the durable and plain tables' included, read `sor`.
fn node(server: &RedisServer, sor: &Sor) -> Cache {
    with_loaders(builder(server), sor)
        .open::<Durable>()
        .loader(coherence_support::reads::<Durable>(sor))
        .open::<Plain>()
        .loader(coherence_support::reads::<Plain>(sor))
        .build()
        .expect("cache builds")
}

/// Waits until every coherent table of `cache` serves: its link and its
/// durable lane are up.
async fn lanes_up(cache: &Cache) {
    linked(cache).await;
    eventually("the durable lane is up", async || {
        health::<Durable>(cache) == Health::Serving
    })
    .await;
}

/// The stale-read checker of a mode, on two nodes of one server.
async fn stale_read_checker<T: Entity>() {
    let server = RedisServer::start();
    checker::two_nodes::<T>(
        |sor| node(&server, sor),
        async |nodes: &[Cache]| {
            for node in nodes {
                lanes_up(node).await;
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_tracking() {
    stale_read_checker::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_broadcast() {
    stale_read_checker::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_durable() {
    stale_read_checker::<Durable>().await;
}

/// What a gated loader tells the test when it has read the system of
/// record: the id, the revision it read, and the sender that lets it return.
type Entered = (RawId, u64, oneshot::Sender<()>);

/// A node whose loaders read the system of record, then, if they read
/// revision 0 (the fill that starts a round), wait until the test lets them
/// return.
fn gated_node(server: &RedisServer, sor: &Sor) -> (Cache, mpsc::UnboundedReceiver<Entered>) {
    let (entered, receiver) = mpsc::unbounded_channel();
    let cache = builder(server)
        .loader(gated::<Tracked>(sor.clone(), entered.clone()))
        .loader(gated::<Broadcast>(sor.clone(), entered.clone()))
        .open::<Durable>()
        .loader(gated::<Durable>(sor.clone(), entered.clone()))
        .open::<Plain>()
        .loader(gated::<Plain>(sor.clone(), entered))
        .build()
        .expect("cache builds");
    (cache, receiver)
}

fn gated<T: Entity>(
    sor: Sor,
    entered: mpsc::UnboundedSender<Entered>,
) -> impl Fn(Id<T>) -> futures_util::future::BoxFuture<'static, Result<Option<T>, Infallible>>
+ Send
+ Sync
+ 'static {
    move |id: Id<T>| {
        let revision = sor.get(id.raw());
        let released = (revision == 0).then(|| {
            let (release, released) = oneshot::channel();
            // The test may be gone (it failed): return anyway.
            let _ = entered.send((id.raw(), revision, release));
            released
        });
        Box::pin(async move {
            if let Some(released) = released {
                let _ = released.await;
            }
            Ok(Some(T::at(revision)))
        })
    }
}

/// Rounds of the fill-versus-invalidate race, per mode.
const ROUNDS: usize = 1_000;

/// A fill that read the system of record before a write is held until the
/// write's invalidation (on the filling node, or on the other node and
/// applied by the filling one) is done, then released: it answers its own
/// caller, but installs its stale value neither in the filling node's L1
/// (the next fetch is not a hit of it) nor in L2 (which holds the
/// invalidation's tombstone, or a newer frame, never the stale frame).
async fn fill_versus_invalidate<T: Entity>() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (filler, mut entered) = gated_node(&server, &sor);
    let (other, _other_entered) = gated_node(&server, &sor);
    lanes_up(&filler).await;
    lanes_up(&other).await;
    let mut raw = server.connection().await;

    for round in 0..ROUNDS {
        let same_node = round % 2 == 0;
        let id = Id::<T>::mint();
        let fetch = tokio::spawn({
            let filler = filler.clone();
            async move { filler.fetch(id).await }
        });
        let (loading, read, release) = bounded("the loader is called", entered.recv())
            .await
            .expect("the loader is called");
        assert_eq!((loading, read), (id.raw(), 0), "round {round}");

        // The write: the system of record, then the invalidation.
        assert_eq!(sor.bump(id.raw()), 1);
        let before = filler.stats::<T>().invalidations;
        let version = if same_node {
            filler.invalidate(id).await.expect("invalidate")
        } else {
            let version = other.invalidate(id).await.expect("invalidate");
            eventually("the filling node applies the invalidation", async || {
                filler.stats::<T>().invalidations > before
            })
            .await;
            version
        };
        release.send(()).expect("the loader waits");
        let answered = bounded("the fill answers", fetch)
            .await
            .expect("the fetch task")
            .expect("the fetch");
        assert_eq!(
            (answered.source(), answered.revision()),
            (Source::Fill, 0),
            "round {round}: the fill answers its caller with what it read"
        );

        stale_fill_not_in_l2(&mut raw, id, version, round).await;
        let next = filler.fetch(id).await.expect("fetch");
        assert!(
            next.source() != Source::Hit && next.revision() == 1,
            "round {round} (invalidated on the {} node): the next fetch is {:?} of revision {}",
            if same_node { "same" } else { "other" },
            next.source(),
            next.revision()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_racing_an_invalidation_installs_nowhere_tracking() {
    fill_versus_invalidate::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_racing_an_invalidation_installs_nowhere_broadcast() {
    fill_versus_invalidate::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_racing_an_invalidation_installs_nowhere_durable() {
    fill_versus_invalidate::<Durable>().await;
}

/// Checks that L2 holds the tombstone of the invalidation at `version` of
/// `id`, or a newer frame, never the stale frame of the fill it overtook.
async fn stale_fill_not_in_l2<T: Entity>(
    raw: &mut redis::aio::MultiplexedConnection,
    id: Id<T>,
    version: RawId,
    round: usize,
) {
    match l2_row(raw, id).await {
        Row::Tombstone(v) => assert_eq!(v, version, "round {round}: the tombstone"),
        Row::Frame(v) => assert!(
            v.is_newer_than(&version),
            "round {round}: the stale fill landed in L2 ({v} is not newer than {version})"
        ),
        Row::Absent => panic!("round {round}: the invalidation left no tombstone"),
    }
}

/// Rounds of the `none` table's race.
const PLAIN_ROUNDS: usize = 300;

/// `none` over L2: a fill that read the system of record before a write is
/// held until the write's `invalidate` returned (on the filling node, or on
/// another one), then released. Its stale value must not land in L2: the
/// next fetch on the writing node, and on a node that never held the id,
/// return the new revision. (The filling node's own L1 is kept from it
/// only when the invalidation ran there: `none` carries nothing between
/// nodes but L2.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_racing_an_invalidation_never_lands_in_l2_none() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (filler, mut entered) = gated_node(&server, &sor);
    let (other, _other_entered) = gated_node(&server, &sor);
    let (fresh, _fresh_entered) = gated_node(&server, &sor);
    let mut raw = server.connection().await;

    for round in 0..PLAIN_ROUNDS {
        let writer = if round % 2 == 0 { &filler } else { &other };
        let id = Id::<Plain>::mint();
        let fetch = tokio::spawn({
            let filler = filler.clone();
            async move { filler.fetch(id).await }
        });
        let (_, read, release) = bounded("the loader is called", entered.recv())
            .await
            .expect("the loader is called");
        assert_eq!(read, 0, "round {round}");
        assert_eq!(sor.bump(id.raw()), 1);
        let version = writer.invalidate(id).await.expect("invalidate");
        release.send(()).expect("the loader waits");
        let answered = bounded("the fill answers", fetch).await.unwrap().unwrap();
        assert_eq!(answered.revision, 0, "round {round}: the fill's own answer");

        stale_fill_not_in_l2(&mut raw, id, version, round).await;
        for (node, name) in [(writer, "the writing node"), (&fresh, "a fresh node")] {
            let next = node.fetch(id).await.expect("fetch");
            assert_eq!(
                next.revision,
                1,
                "round {round}: {name} read {:?} revision {}",
                next.source(),
                next.revision
            );
        }
    }
}

/// `tracking`: a node's own fills never evict its own rows. Node A fills
/// `id1` (its L2 write goes on A's link, so `NOLOOP` keeps the server from
/// pushing it back to A); then node B writes `id2` and A observes that
/// eviction, which proves A processed every push the server sent it up to
/// that point; `id1` is still a hit on A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_own_fills_never_evict_its_own_rows_tracking() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = (node(&server, &sor), node(&server, &sor));
    linked(&a).await;
    linked(&b).await;

    for round in 0..20 {
        let (id1, id2) = (Id::<Tracked>::mint(), Id::<Tracked>::mint());
        assert_eq!(a.fetch(id2).await.unwrap().source(), Source::Fill);
        assert_eq!(a.fetch(id2).await.unwrap().source(), Source::Hit);
        let filled = a.fetch(id1).await.unwrap();
        assert_eq!(filled.source(), Source::Fill, "round {round}");

        let before = a.stats::<Tracked>().invalidations;
        sor.bump(id2.raw());
        b.invalidate(id2).await.unwrap();
        // Counted before the row goes (`Table::apply`): both, then.
        eventually("A applies the invalidation of id2", async || {
            a.stats::<Tracked>().invalidations > before && !a.contains(id2)
        })
        .await;
        let evicted = a.fetch(id2).await.unwrap();
        assert!(
            evicted.source() != Source::Hit && evicted.revision == 1,
            "round {round}: A still holds its row of id2: {:?}",
            evicted.source()
        );
        let kept = a.fetch(id1).await.unwrap();
        assert_eq!(
            (kept.source(), kept.version()),
            (Source::Hit, filled.version()),
            "round {round}: A's own fill of id1 evicted its own row"
        );
        assert_eq!(
            a.stats::<Tracked>().invalidations,
            before + 1,
            "round {round}: A applied exactly the invalidation of id2"
        );
    }
}
