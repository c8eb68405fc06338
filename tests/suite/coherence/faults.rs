//! Faults of the coherence link, on a real server with two cache nodes:
//! the link killed (`CLIENT KILL`), half-open (the server stops answering),
//! dropped for its output buffer (`client-output-buffer-limit`), the
//! server's `FLUSHALL` and `SCRIPT FLUSH`; and the odd shapes of what the
//! server pushes (malformed messages, several keys in one push).
//!
//! A node that loses its link flushes the L1 of its `tracking` and
//! `broadcast` tables and bypasses it until the link is back: no read
//! afterwards is a hit of a row held before, fetches keep answering, and
//! once the link is back the tables serve (and keep rows) again and other
//! nodes' writes evict them again.

use std::time::Duration;

use crate::coherence_support::{
    Broadcast, Entity, Row, Sor, Tracked, eventually, health, l2_row, link_clients, linked, node,
    query,
};
use echo_cache::{Cache, Cached, Health, Id, RawId, Source, keyspace};
use echo_cache_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

/// Two linked nodes on `server`.
async fn nodes(server: &RedisServer, sor: &Sor) -> (Cache, Cache) {
    let (a, b) = (node(server, sor), node(server, sor));
    linked(&a).await;
    linked(&b).await;
    (a, b)
}

/// One id of each table that `cache` holds a row of (revision 0).
async fn rows(cache: &Cache) -> (Id<Tracked>, Id<Broadcast>) {
    let (t, w) = (Id::<Tracked>::mint(), Id::<Broadcast>::mint());
    cache.fetch(t).await.unwrap();
    cache.fetch(w).await.unwrap();
    assert_eq!(cache.fetch(t).await.unwrap().source(), Source::Hit);
    assert_eq!(cache.fetch(w).await.unwrap().source(), Source::Hit);
    (t, w)
}

fn size<T: Cached>(cache: &Cache) -> u64 {
    cache.stats::<T>().size
}

/// Waits until both coherent tables of `cache` dropped every row.
async fn flushed(cache: &Cache) {
    eventually("L1 of both tables is flushed", async || {
        size::<Tracked>(cache) == 0 && size::<Broadcast>(cache) == 0
    })
    .await;
}

/// The first fetch of `id` on `cache` is not a hit (the row held before is
/// gone); it answers `revision`.
async fn not_a_hit<T: Entity>(cache: &Cache, id: Id<T>, revision: u64) {
    let fetched = cache.fetch(id).await.expect("fetches keep answering");
    assert_ne!(
        fetched.source(),
        Source::Hit,
        "{}: a hit of a row held before the link was lost",
        T::spec().name()
    );
    assert_eq!(fetched.revision(), revision, "{}", T::spec().name());
}

/// Coherence works (again): `b` holds a row of a fresh id, a write on `a`
/// evicts it.
async fn coherent<T: Entity>(a: &Cache, b: &Cache, sor: &Sor) {
    let id = Id::<T>::mint();
    b.fetch(id).await.unwrap();
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    let revision = sor.bump(id.raw());
    a.put(id, T::at(revision)).await.unwrap();
    eventually("B's row is evicted by A's write", async || {
        b.fetch(id).await.unwrap().revision() == revision
    })
    .await;
}

/// Both tables follow writes from A to B and from B to A.
async fn both_coherent(a: &Cache, b: &Cache, sor: &Sor) {
    coherent::<Tracked>(a, b, sor).await;
    coherent::<Broadcast>(a, b, sor).await;
}

/// After a fault on B's link: B flushed, both links are back, B's old rows
/// `rows` are not hits any more, and both tables are coherent again.
async fn recovered(a: &Cache, b: &Cache, sor: &Sor, rows: (Id<Tracked>, Id<Broadcast>)) {
    flushed(b).await;
    linked(b).await;
    linked(a).await;
    not_a_hit(b, rows.0, 0).await;
    not_a_hit(b, rows.1, 0).await;
    both_coherent(a, b, sor).await;
}

/// `CLIENT KILL` of both nodes' links, while the server refuses new
/// connections (`maxclients`) so that they stay down: both nodes flush and
/// report `Bypassing`; their reads bypass L1 (never a hit, always an
/// answer) and see a write whose message they missed; once the links are
/// back they serve, keep rows, and follow writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_link_flushes_and_bypasses_l1_until_it_is_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (t, w) = rows(&b).await;
    rows(&a).await;
    let mut raw = server.connection().await;
    // B's other connection, for its broadcast table's L2 reads, exists
    // before new connections are refused.
    b.fetch(Id::<Broadcast>::mint()).await.unwrap();

    let links = link_clients(&server);
    assert_eq!(links.len(), 2, "one link per node");
    let connected: String = query(&mut raw, redis::cmd("CLIENT").arg("LIST")).await;
    let keep = connected.lines().count() - links.len();
    let () = query(
        &mut raw,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(keep.to_string()),
    )
    .await;
    for link in &links {
        let killed: i64 = query(
            &mut raw,
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(link.to_string()),
        )
        .await;
        assert_eq!(killed, 1);
    }

    for node in [&a, &b] {
        eventually("both tables bypass L1", async || {
            health::<Tracked>(node) == Health::Bypassing
                && health::<Broadcast>(node) == Health::Bypassing
        })
        .await;
        flushed(node).await;
    }
    // A write whose invalidation B cannot receive: B reads through.
    let revision = sor.bump(t.raw());
    a.put(t, Tracked::at(revision)).await.unwrap();
    let revision = sor.bump(w.raw());
    a.put(w, Broadcast::at(revision)).await.unwrap();
    for _ in 0..3 {
        not_a_hit(&b, t, 1).await;
        not_a_hit(&b, w, 1).await;
    }
    assert_eq!((size::<Tracked>(&b), size::<Broadcast>(&b)), (0, 0));

    let () = query(
        &mut raw,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg("10000"),
    )
    .await;
    linked(&a).await;
    linked(&b).await;
    b.fetch(t).await.unwrap();
    assert_eq!(
        b.fetch(t).await.unwrap().source(),
        Source::Hit,
        "L1 keeps rows again"
    );
    both_coherent(&a, &b, &sor).await;
    coherent::<Tracked>(&b, &a, &sor).await;
    coherent::<Broadcast>(&b, &a, &sor).await;
}

/// `CLIENT KILL TYPE pubsub`: the links (subscribed) are killed; each node
/// flushes, reconnects by itself, and serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_type_pubsub_flushes_and_the_link_comes_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (t, w) = rows(&b).await;

    let killed: i64 = server.query(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"));
    assert_eq!(killed, 2, "both links are subscribed");
    flushed(&b).await;
    linked(&b).await;
    not_a_hit(&b, t, 0).await;
    not_a_hit(&b, w, 0).await;
    both_coherent(&a, &b, &sor).await;
}

/// A half-open link: the server stops answering (`SIGSTOP`), the link's
/// PING misses its deadline, the node flushes and bypasses L1; when the
/// server answers again the link comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_link_is_lost_at_its_ping_deadline() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (t, w) = rows(&b).await;

    server.pause();
    // No L2 operation runs meanwhile, so the breaker stays closed and the
    // health says why L1 is bypassed.
    let lost = eventually("B's link misses its PING deadline", async || {
        health::<Tracked>(&b) == Health::Bypassing && health::<Broadcast>(&b) == Health::Bypassing
    });
    let bypassing = tokio::time::timeout(Duration::from_secs(15), lost).await;
    server.resume();
    assert!(
        bypassing.is_ok(),
        "B never bypassed L1 while the server was stopped"
    );
    recovered(&a, &b, &sor, (t, w)).await;
}

/// A link dropped by the server for its output buffer: with a tiny
/// `pubsub` limit (the links are subscribed, so they are of that class
/// even for their tracking pushes), a burst of large messages on the
/// broadcast table's channel makes the server close them. Both nodes flush
/// (the burst's messages, if any arrive, are malformed: dropped and
/// counted), reconnect, and serve again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_dropped_for_its_output_buffer_flushes_and_comes_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (t, w) = rows(&b).await;
    let mut raw = server.connection().await;
    let before = link_clients(&server);

    server.config_set("client-output-buffer-limit", "pubsub 1kb 1kb 0");
    let channel = keyspace::channel(Broadcast::spec());
    let large = vec![b'x'; 256 * 1024];
    let mut burst = redis::pipe();
    for _ in 0..16 {
        burst.cmd("PUBLISH").arg(&channel).arg(&large[..]).ignore();
    }
    let () = burst.query_async(&mut raw).await.expect("the burst");
    server.config_set("client-output-buffer-limit", "pubsub 32mb 8mb 60");
    eventually("the server dropped both links", async || {
        let now = link_clients(&server);
        before.iter().all(|id| !now.contains(id))
    })
    .await;
    let log = server.log_tail(100);
    assert_eq!(
        log.matches("output buffer limits").count(),
        2,
        "the server closed both links for their output buffer:\n{log}"
    );

    recovered(&a, &b, &sor, (t, w)).await;
}

/// `FLUSHALL` empties L2, tombstones included; the server pushes a NULL
/// invalidation to every tracking client and each node flushes every
/// `tracking` table. The link stays up; fetches go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_flushes_the_tracking_tables() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (t, w) = rows(&b).await;
    let (at, _) = rows(&a).await;
    let links = link_clients(&server);

    let () = server.query(&redis::cmd("FLUSHALL"));
    for node in [&a, &b] {
        eventually("the tracking table is flushed", async || {
            size::<Tracked>(node) == 0
        })
        .await;
    }
    not_a_hit(&b, t, 0).await;
    not_a_hit(&a, at, 0).await;
    assert_eq!(
        b.fetch(w).await.unwrap().source(),
        Source::Hit,
        "a broadcast table missed no message: it keeps its rows"
    );
    assert_eq!(link_clients(&server), links, "the links stayed up");
    assert_eq!(health::<Tracked>(&b), Health::Serving);
    both_coherent(&a, &b, &sor).await;
}

/// `SCRIPT FLUSH` empties the server's script cache: the next versioned
/// write gets `NOSCRIPT` for its `EVALSHA`, loads the script again and
/// retries; no write is lost and coherence goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_after_script_flush() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let mut raw = server.connection().await;
    let (t, w) = rows(&b).await;

    async fn written<T: Entity>(
        a: &Cache,
        raw: &mut MultiplexedConnection,
        server: &RedisServer,
        id: Id<T>,
        sor: &Sor,
    ) -> RawId {
        let () = server.query(redis::cmd("SCRIPT").arg("FLUSH"));
        let revision = sor.bump(id.raw());
        let version = a.put(id, T::at(revision)).await.unwrap();
        assert_eq!(
            l2_row(raw, id).await,
            Row::Frame(version),
            "the put reached L2"
        );
        let () = server.query(redis::cmd("SCRIPT").arg("FLUSH"));
        sor.bump(id.raw());
        let version = a.invalidate(id).await.unwrap();
        assert_eq!(
            l2_row(raw, id).await,
            Row::Tombstone(version),
            "the invalidation reached L2"
        );
        version
    }

    written(&a, &mut raw, &server, t, &sor).await;
    written(&a, &mut raw, &server, w, &sor).await;
    let dropped = |node: &Cache| {
        node.stats::<Tracked>().l2_writes_dropped + node.stats::<Broadcast>().l2_writes_dropped
    };
    assert_eq!(dropped(&a), 0, "no L2 write was dropped");
    eventually("B follows both writes", async || {
        b.fetch(t).await.unwrap().revision == 2 && b.fetch(w).await.unwrap().revision == 2
    })
    .await;

    // A fill of B (a script for the broadcast table) after another flush.
    let () = server.query(redis::cmd("SCRIPT").arg("FLUSH"));
    let fresh = Id::<Broadcast>::mint();
    let filled = b.fetch(fresh).await.unwrap();
    assert_eq!(l2_row(&mut raw, fresh).await, Row::Frame(filled.version()));
    assert_eq!(dropped(&b), 0, "no L2 write was dropped");
    both_coherent(&a, &b, &sor).await;
}

/// Malformed invalidations are dropped and counted, never a panic: a
/// message of the wrong shape on a broadcast table's channel, and a write
/// of a key under a tracking table's prefix that names no id of it. The
/// link stays up and later invalidations apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_invalidations_are_dropped_and_counted() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (t, w) = rows(&b).await;
    let links = link_clients(&server);

    let channel = keyspace::channel(Broadcast::spec());
    let foreign = Id::<Tracked>::mint();
    let foreign = format!("{foreign}:{}", foreign.raw());
    // (A version of another kind is no fault: versions compare by payload.)
    let messages: [&[u8]; 4] = [
        b"",
        b"not a message",
        // Well formed, but about an id of another kind.
        foreign.as_bytes(),
        &[b'B'; 29],
    ];
    for message in messages {
        let _: i64 = server.query(redis::cmd("PUBLISH").arg(&channel).arg(message));
    }
    let prefix = keyspace::prefix(Tracked::spec());
    let () = server.query(redis::cmd("SET").arg(format!("{prefix}not-an-id")).arg("x"));
    let () = server.query(redis::cmd("SET").arg(format!("{prefix}{w}")).arg("x"));
    eventually("B counts the malformed messages", async || {
        b.stats::<Broadcast>().malformed_messages == 4
            && b.stats::<Tracked>().malformed_messages == 2
    })
    .await;
    assert_eq!(link_clients(&server), links, "the links stayed up");
    assert_eq!(b.fetch(t).await.unwrap().source(), Source::Hit);
    assert_eq!(b.fetch(w).await.unwrap().source(), Source::Hit);
    both_coherent(&a, &b, &sor).await;
}

/// One push naming several keys (the server gathers the keys written under
/// a tracked prefix between two turns of its event loop; `MSET` writes two
/// at once): the node evicts every row named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_naming_several_keys_evicts_every_row() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (_a, b) = nodes(&server, &sor).await;
    let ids: Vec<Id<Tracked>> = (0..4).map(|_| Id::mint()).collect();
    for &id in &ids {
        b.fetch(id).await.unwrap();
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    }
    let before = b.stats::<Tracked>().invalidations;

    let mut mset = redis::cmd("MSET");
    for &id in &ids[..3] {
        mset.arg(crate::coherence_support::key(id))
            .arg("not a frame");
    }
    let () = server.query(&mset);
    // Counted before each row goes (`Table::apply`): both, then.
    eventually("B applies the three invalidations", async || {
        b.stats::<Tracked>().invalidations == before + 3
            && ids[..3].iter().all(|&id| !b.contains(id))
    })
    .await;
    for &id in &ids[..3] {
        let fetched = b.fetch(id).await.unwrap();
        assert_eq!(fetched.source(), Source::Fill, "refilled over a bad frame");
    }
    assert_eq!(b.fetch(ids[3]).await.unwrap().source(), Source::Hit);
}
