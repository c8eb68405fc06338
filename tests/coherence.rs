//! Coherence across nodes, `tracking` and `broadcast`: two cache handles on
//! one real server, each with its own coherence link.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use echo_cache::{Cache, Cached, Health, Id, Source, near_cache};
use echo_cache_testkit::RedisServer;

#[near_cache(
    kind = "SES",
    ttl_ms = 600_000,
    coherence = "tracking",
    name = "sessions"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Session {
    revision: u64,
}

#[near_cache(
    kind = "WAL",
    ttl_ms = 600_000,
    coherence = "broadcast",
    name = "wallets"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Wallet {
    revision: u64,
}

/// The system of record: one revision counter shared by every entity.
#[derive(Clone, Default)]
struct Store(Arc<AtomicU64>);

impl Store {
    fn node(&self, server: &RedisServer) -> Cache {
        let (sessions, wallets) = (self.clone(), self.clone());
        Cache::builder()
            .l2(server.url())
            .l2_timeout(Duration::from_secs(2))
            .coherence_ping_every(Duration::from_millis(200))
            .loader(move |_: Id<Session>| {
                let revision = sessions.0.load(SeqCst);
                async move { Ok::<_, Infallible>(Some(Session { revision })) }
            })
            .loader(move |_: Id<Wallet>| {
                let revision = wallets.0.load(SeqCst);
                async move { Ok::<_, Infallible>(Some(Wallet { revision })) }
            })
            .build()
            .expect("cache builds")
    }
}

fn health<T: Cached>(cache: &Cache) -> Health {
    let name = T::spec().name();
    cache
        .tables()
        .iter()
        .find(|t| t.spec.name() == name)
        .unwrap()
        .health
}

/// Polls `probe` until it holds, for at most ten seconds.
async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !probe().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn linked(cache: &Cache) {
    eventually("the coherence link is up", async || {
        health::<Session>(cache) == Health::Serving && health::<Wallet>(cache) == Health::Serving
    })
    .await;
}

#[tokio::test]
async fn a_put_on_one_node_evicts_the_row_on_the_other_tracking() {
    let server = RedisServer::start();
    let store = Store::default();
    let (a, b) = (store.node(&server), store.node(&server));
    linked(&a).await;
    linked(&b).await;
    let id = Id::<Session>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision, 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    store.0.store(1, SeqCst);
    a.put(id, Session { revision: 1 }).await.unwrap();
    assert_eq!(a.fetch(id).await.unwrap().revision, 1, "read your writes");
    eventually("B drops its old row", async || {
        b.fetch(id).await.unwrap().revision == 1
    })
    .await;
}

#[tokio::test]
async fn a_put_on_one_node_evicts_the_row_on_the_other_broadcast() {
    let server = RedisServer::start();
    let store = Store::default();
    let (a, b) = (store.node(&server), store.node(&server));
    linked(&a).await;
    linked(&b).await;
    let id = Id::<Wallet>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision, 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    store.0.store(1, SeqCst);
    let version = a.invalidate(id).await.unwrap();
    assert_eq!(a.fetch(id).await.unwrap().revision, 1, "read your writes");
    eventually("B drops its old row", async || {
        b.fetch(id).await.unwrap().revision == 1
    })
    .await;
    // A repeated, late message changes nothing: B keeps its new row.
    let before = b.stats::<Wallet>().invalidations;
    a.invalidate_at(id, version).await.unwrap();
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    assert_eq!(b.stats::<Wallet>().invalidations, before);
}
