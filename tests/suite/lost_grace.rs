//! A table that declares `lost_grace_ms` keeps serving L1 while its
//! invalidation channel is down, for at most the grace; when the channel is
//! back, the rows it kept are verified against L2 (a row another node wrote
//! meanwhile is dropped, the others stay); past the grace it is flushed and
//! bypassed as a table without one. On a real server, two nodes.

use crate::coherence_support;
use crate::coherence_support::{
    Entity, Sor, eventually, health, link_clients, linked, query, reads, with_loaders,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use echo_cache::{Cache, Cached, Error, Health, Id, Source, keyspace, near_cache};
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
graced!(Ledger, "LGL", "durable", "grace_ledger", 60_000);
graced!(Brief, "BRF", "broadcast", "brief", 300);

/// Rows (and frames) that live 300 ms, then answer stale for a minute while
/// the loader fails (`stale_if_error_ms`); without a lost-channel grace.
#[near_cache(
    kind = "FSB",
    ttl_ms = 300,
    jitter = 0.0,
    coherence = "broadcast",
    stale_if_error_ms = 60_000
)]
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Failsafe {
    pub revision: u64,
}

/// The same with a lost-channel grace.
#[near_cache(
    kind = "FSG",
    ttl_ms = 300,
    jitter = 0.0,
    coherence = "broadcast",
    stale_if_error_ms = 60_000,
    lost_grace_ms = 60_000
)]
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FailsafeGraced {
    pub revision: u64,
}

/// A loader of `T` that answers revision 0, or fails once `failing` is set.
fn switchable<T: Default + Send + 'static>(
    failing: &Arc<AtomicBool>,
) -> impl Fn(Id<T>) -> std::future::Ready<Result<Option<T>, std::io::Error>> + Send + Sync + 'static
{
    let failing = Arc::clone(failing);
    move |_| {
        std::future::ready(if failing.load(SeqCst) {
            Err(std::io::Error::other("the store is down"))
        } else {
            Ok(Some(T::default()))
        })
    }
}

/// Two linked nodes on `server`, every table with a loader that reads
/// `sor` (the fail-safe tables' fail once `failing` is set).
async fn nodes(server: &RedisServer, sor: &Sor) -> (Cache, Cache) {
    nodes_failing(server, sor, &Arc::default()).await
}

async fn nodes_failing(
    server: &RedisServer,
    sor: &Sor,
    failing: &Arc<AtomicBool>,
) -> (Cache, Cache) {
    let node = || {
        with_loaders(coherence_support::builder(server), sor)
            .open::<Failsafe>()
            .loader(switchable::<Failsafe>(failing))
            .open::<FailsafeGraced>()
            .loader(switchable::<FailsafeGraced>(failing))
            .open::<Catalogue>()
            .loader(reads::<Catalogue>(sor))
            .open::<Prices>()
            .loader(reads::<Prices>(sor))
            .open::<Ledger>()
            .loader(reads::<Ledger>(sor))
            .open::<Brief>()
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
    // Bypassing from the moment the table is distrusted, flushed right
    // after: both, then.
    eventually("the brief grace runs out, L1 flushed", async || {
        health::<Brief>(&b) == Health::Bypassing && b.stats::<Brief>().size == 0
    })
    .await;
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

/// An expired value is never served stale by a node that cannot hear
/// invalidations: not while it bypasses L1 (no grace), not while it serves
/// unverified rows (within a grace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_served_stale_while_the_channel_is_lost() {
    let server = RedisServer::start();
    let (sor, failing) = (Sor::default(), Arc::new(AtomicBool::new(false)));
    let (_a, b) = nodes_failing(&server, &sor, &failing).await;
    let (bypassed, unverified) = (Id::<Failsafe>::mint(), Id::<FailsafeGraced>::mint());
    b.fetch(bypassed).await.unwrap();
    b.fetch(unverified).await.unwrap();
    // L1's rows die a TTL (jitter 0) after their insert on B's clock, which
    // comes after the frames' SET and may lag the server's.
    let l1_dead_at = b.clock().now_ms() + FailsafeGraced::spec().ttl_ms();
    let mut raw = server.connection().await;

    cut_links(&server, &mut raw).await;
    eventually(
        "one table bypasses, the other serves unverified",
        async || {
            health::<Failsafe>(&b) == Health::Bypassing
                && health::<FailsafeGraced>(&b) == Health::Unverified
        },
    )
    .await;
    // Both frames past their 300 ms: PX = ttl + grace leaves less than the
    // grace.
    for key in [
        keyspace::key(Failsafe::spec(), &bypassed.raw()),
        keyspace::key(FailsafeGraced::spec(), &unverified.raw()),
    ] {
        eventually("the frame's logical expiry", async || {
            query::<i64>(&mut raw, redis::cmd("PTTL").arg(&key)).await < 60_000
        })
        .await;
    }
    eventually("the L1 row's expiry", async || {
        b.clock().now_ms() > l1_dead_at
    })
    .await;
    failing.store(true, SeqCst);
    let got = b.fetch(bypassed).await;
    assert!(
        matches!(got, Err(Error::Load { .. })),
        "bypassing: the loader's error, not L2's expired frame; got {got:?}"
    );
    let got = b.fetch(unverified).await;
    assert!(
        matches!(got, Err(Error::Load { .. })),
        "unverified: the loader's error, not a stale value; got {got:?}"
    );
    assert_eq!(
        b.stats::<Failsafe>().stale_served + b.stats::<FailsafeGraced>().stale_served,
        0
    );
    let_in(&mut raw).await;
    linked(&b).await;
    assert_eq!(
        b.fetch(bypassed).await.expect("back: stale again").source(),
        Source::Stale,
        "the same fetch with the channel up serves stale"
    );
}
