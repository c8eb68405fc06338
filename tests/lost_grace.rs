//! A table that declares `lost_grace_ms` keeps serving L1 while its
//! invalidation channel is down, for at most the grace; when the channel is
//! back, the rows it kept are verified against L2 (a row another node wrote
//! meanwhile is dropped, the others stay); past the grace it is flushed and
//! bypassed as a table without one. On a real server, two nodes.

mod coherence_support;

use coherence_support::{
    Entity, Sor, eventually, health, link_clients, linked, reads, with_loaders,
};
use echo_cache::{Cache, Cached, Health, Id, Source};
use echo_cache_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

/// A grace longer than any test here.
const LONG: u64 = 60_000;

#[rustfmt::skip]
macro_rules! graced {
    ($entity:ident, $kind:literal, $coherence:literal, $table:literal, $grace:expr) => {
        #[echo_cache::near_cache(kind = $kind, ttl_ms = 600_000, coherence = $coherence, name = $table, lost_grace_ms = $grace)]
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $entity {
            pub revision: u64,
        }

        impl Entity for $entity {
            fn at(revision: u64) -> $entity {
                $entity { revision }
            }
            fn revision(&self) -> u64 {
                self.revision
            }
        }
    };
}

graced!(Catalogue, "CAT", "broadcast", "catalogue", 60_000);
graced!(Prices, "PRI", "tracking", "prices", 60_000);
graced!(Ledger, "LED", "durable", "ledger", 60_000);
graced!(Brief, "BRF", "broadcast", "brief", 300);

/// Two linked nodes on `server`, every table with a loader that reads
/// `sor`.
async fn nodes(server: &RedisServer, sor: &Sor) -> (Cache, Cache) {
    let node = || {
        with_loaders(coherence_support::builder(server), sor)
            .loader(reads::<Catalogue>(sor))
            .loader(reads::<Prices>(sor))
            .loader(reads::<Ledger>(sor))
            .loader(reads::<Brief>(sor))
            .build()
            .expect("cache builds")
    };
    let (a, b) = (node(), node());
    linked(&a).await;
    linked(&b).await;
    (a, b)
}

/// An id of `T` that `cache` holds a row of (revision 0).
async fn held<T: Entity>(cache: &Cache) -> Id<T> {
    let id = Id::<T>::mint();
    cache.fetch(id).await.unwrap();
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
    id
}

/// Kills every node's link and durable lane, and keeps new connections out
/// (`maxclients`), so they stay down until [`let_in`]; `raw` is a
/// connection made before.
async fn cut_links(server: &RedisServer, raw: &mut MultiplexedConnection) {
    let list: String = query(raw, redis::cmd("CLIENT").arg("LIST")).await;
    let lanes: Vec<u64> = list
        .lines()
        .filter(|line| line.contains(" name=ecc-durable:"))
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect();
    let links = link_clients(server);
    assert_eq!(
        (links.len(), lanes.len()),
        (2, 2),
        "one link and one lane per node"
    );
    let keep = list.lines().count() - links.len() - lanes.len();
    let () = query(
        raw,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(keep.to_string()),
    )
    .await;
    for client in links.into_iter().chain(lanes) {
        let killed: i64 = query(
            raw,
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(client.to_string()),
        )
        .await;
        assert_eq!(killed, 1);
    }
}

async fn let_in(raw: &mut MultiplexedConnection) {
    let () = query(
        raw,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg("10000"),
    )
    .await;
}

async fn query<T: redis::FromRedisValue>(raw: &mut MultiplexedConnection, cmd: &redis::Cmd) -> T {
    cmd.query_async(raw).await.expect("the server answers")
}

/// The fetch of `id` on `cache`: its source and revision.
async fn read<T: Entity>(cache: &Cache, id: Id<T>) -> (Source, u64) {
    let fetched = cache.fetch(id).await.expect("fetches keep answering");
    (fetched.source(), fetched.revision())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn within_the_grace_l1_keeps_serving_and_is_verified_when_the_channel_is_back() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (a, b) = nodes(&server, &sor).await;
    let (written, untouched) = (held::<Catalogue>(&b).await, held::<Catalogue>(&b).await);
    let (put, invalidated) = (held::<Prices>(&b).await, held::<Prices>(&b).await);
    let entry = held::<Ledger>(&b).await;

    let mut raw = server.connection().await;
    cut_links(&server, &mut raw).await;
    eventually("the graced tables serve unverified", async || {
        [
            health::<Catalogue>(&b),
            health::<Prices>(&b),
            health::<Ledger>(&b),
        ] == [Health::Unverified; 3]
    })
    .await;
    // A write B cannot hear of: within the grace B keeps its row (the
    // trade-off the table declared).
    a.put(written, Catalogue::at(sor.bump(written.raw())))
        .await
        .unwrap();
    a.put(put, Prices::at(sor.bump(put.raw()))).await.unwrap();
    sor.bump(invalidated.raw());
    a.invalidate(invalidated).await.unwrap();
    assert_eq!(
        read(&b, written).await,
        (Source::Hit, 0),
        "kept through the loss"
    );
    assert_eq!(
        read(&b, put).await,
        (Source::Hit, 0),
        "kept through the loss"
    );
    assert_eq!(read(&b, untouched).await, (Source::Hit, 0));
    a.put(entry, Ledger::at(sor.bump(entry.raw())))
        .await
        .unwrap();
    assert_eq!(
        read(&b, entry).await,
        (Source::Hit, 0),
        "kept through the loss"
    );

    let_in(&mut raw).await;
    eventually("the kept rows are verified", async || {
        [
            health::<Catalogue>(&b),
            health::<Prices>(&b),
            health::<Ledger>(&b),
        ] == [Health::Serving; 3]
    })
    .await;
    // A's broadcast write reached L2 (its own connection stayed up); only
    // B's verification can have dropped B's row.
    assert_eq!(
        read(&b, written).await,
        (Source::L2, 1),
        "dropped: L2 holds a newer frame"
    );
    assert_eq!(
        read(&b, untouched).await,
        (Source::Hit, 0),
        "verified, kept"
    );
    // A's tracking writes ran on its link, down too: A delivers them once
    // its link is back, and either that or B's verification drops B's rows.
    eventually("B reads A's tracking writes", async || {
        read(&b, put).await.1 == 1 && read(&b, invalidated).await.1 == 1
    })
    .await;
    // And the channel carries writes again.
    a.put(untouched, Catalogue::at(sor.bump(untouched.raw())))
        .await
        .unwrap();
    eventually("B hears of A's write", async || {
        read(&b, untouched).await.1 == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_grace_l1_is_flushed_and_bypassed() {
    let server = RedisServer::start();
    let sor = Sor::default();
    let (_a, b) = nodes(&server, &sor).await;
    let (brief, catalogue) = (held::<Brief>(&b).await, held::<Catalogue>(&b).await);

    let mut raw = server.connection().await;
    cut_links(&server, &mut raw).await;
    eventually("the brief grace runs out", async || {
        health::<Brief>(&b) == Health::Bypassing
    })
    .await;
    assert_eq!(b.stats::<Brief>().size, 0, "flushed");
    assert_ne!(read(&b, brief).await.0, Source::Hit, "bypassed");
    assert_eq!(b.stats::<Brief>().size, 0, "nothing kept while bypassing");
    assert_eq!(
        health::<Catalogue>(&b),
        Health::Unverified,
        "a longer grace runs on"
    );
    assert_eq!(read(&b, catalogue).await.0, Source::Hit);
    // The default: no grace at all.
    assert_eq!(
        health::<coherence_support::Broadcast>(&b),
        Health::Bypassing
    );

    let_in(&mut raw).await;
    linked(&b).await;
    b.fetch(brief).await.unwrap();
    assert_eq!(read(&b, brief).await.0, Source::Hit, "L1 keeps rows again");
    assert_eq!(Brief::spec().lost_grace_ms(), 300);
    assert_eq!(Catalogue::spec().lost_grace_ms(), LONG);
}
