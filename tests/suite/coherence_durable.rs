//! Coherence across nodes, `durable`: cache handles on one real server, each
//! reading the table's stream through the consumer group of its node name.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echo_cache::{Cache, Cached, Health, Id, Kind, RawId, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;

use crate::common::{eventually_within, health};

#[near_cache(
    kind = "LED",
    ttl_ms = 600_000,
    coherence = "durable",
    name = "ledgers"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Ledger {
    revision: u64,
}

/// The longest any wait for a condition lasts before the test fails.
const BOUND: Duration = Duration::from_secs(10);
/// How often a wait polls: some probes open a connection (`XPENDING`).
const POLL: Duration = Duration::from_millis(5);

/// The system of record: one revision counter shared by every entity.
#[derive(Clone, Default)]
struct Store(Arc<AtomicU64>);

impl Store {
    fn node(&self, server: &RedisServer, name: &str) -> Cache {
        let store = self.clone();
        cache_builder()
            .l2(server.url())
            .l2_timeout(Duration::from_secs(2))
            .coherence_ping_every(Duration::from_millis(200))
            .node_name(name)
            .loader(move |_: Id<Ledger>| {
                let revision = store.0.load(SeqCst);
                async move { Ok::<_, Infallible>(Some(Ledger { revision })) }
            })
            .build()
            .expect("cache builds")
    }
}

async fn serving(cache: &Cache) {
    eventually_within(BOUND, POLL, "the durable lane is up", async || {
        health::<Ledger>(cache) == Health::Serving
    })
    .await;
}

fn stream() -> String {
    keyspace::stream(Ledger::spec())
}

/// The entries of the stream.
fn entries(server: &RedisServer) -> u64 {
    server.query(redis::cmd("XLEN").arg(stream()))
}

/// Whether the group of `node` was handed every entry of the stream and
/// acknowledged each (the lane acknowledges what it applied).
fn caught_up(server: &RedisServer, node: &str) -> bool {
    let groups: Vec<HashMap<String, redis::Value>> =
        server.query(redis::cmd("XINFO").arg("GROUPS").arg(stream()));
    let name = format!("ecc:{node}");
    let group = groups
        .iter()
        .find(|group| {
            let named = group.get("name").map(redis::from_redis_value_ref::<String>);
            matches!(named, Some(Ok(named)) if named == name)
        })
        .expect("the node's group");
    let zero = |field| group.get(field) == Some(&redis::Value::Int(0));
    zero("lag") && zero("pending")
}

/// Kills the connection of the durable lane of `node`.
fn kill_lane(server: &RedisServer, node: &str) {
    let clients: String = server.query(redis::cmd("CLIENT").arg("LIST"));
    let id = clients
        .lines()
        .find(|line| line.contains(&format!("name=ecc-durable:{node} ")))
        .and_then(|line| line.split(' ').find_map(|kv| kv.strip_prefix("id=")))
        .expect("the lane's connection is named")
        .to_owned();
    let killed: i64 = server.query(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id));
    assert_eq!(killed, 1);
}

#[tokio::test]
async fn a_write_on_one_node_evicts_the_row_on_another() {
    let server = RedisServer::start();
    let store = Store::default();
    let (a, b) = (store.node(&server, "a"), store.node(&server, "b"));
    serving(&a).await;
    serving(&b).await;
    let id = Id::<Ledger>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision, 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    store.0.store(1, SeqCst);
    a.put(id, Ledger { revision: 1 }).await.unwrap();
    assert_eq!(a.fetch(id).await.unwrap().revision, 1, "read your writes");
    eventually_within(BOUND, POLL, "B drops its old row", async || {
        b.fetch(id).await.unwrap().revision == 1
    })
    .await;

    store.0.store(2, SeqCst);
    let version = a.invalidate(id).await.unwrap();
    eventually_within(BOUND, POLL, "B drops its row again", async || {
        b.fetch(id).await.unwrap().revision == 2
    })
    .await;
    // A repeated message changes nothing: B keeps its new row.
    let before = b.stats::<Ledger>().invalidations;
    let sent = entries(&server);
    a.invalidate_at(id, version).await.unwrap();
    eventually_within(BOUND, POLL, "B handed the repeat, and done", async || {
        entries(&server) > sent && caught_up(&server, "b")
    })
    .await;
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    assert_eq!(b.stats::<Ledger>().invalidations, before);
}

/// A version minted under another kind (the writer's own scheme, say) is
/// the same payload to every node: B applies it, refuses no message.
#[tokio::test]
async fn an_invalidation_at_a_version_of_another_kind_reaches_the_other_node() {
    let server = RedisServer::start();
    let store = Store::default();
    let (a, b) = (store.node(&server, "a"), store.node(&server, "b"));
    serving(&a).await;
    serving(&b).await;
    let id = Id::<Ledger>::mint();

    assert_eq!(b.fetch(id).await.unwrap().revision, 0);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
    store.0.store(1, SeqCst);
    let version = Id::<Ledger>::mint().payload();
    a.invalidate_at(id, RawId::new(Kind::new("ORD"), version))
        .await
        .unwrap();
    assert_eq!(a.fetch(id).await.unwrap().revision, 1, "read your writes");
    eventually_within(BOUND, POLL, "B drops its old row", async || {
        b.fetch(id).await.unwrap().revision == 1
    })
    .await;
    assert_eq!(b.stats::<Ledger>().malformed_messages, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_mid_batch_applies_every_message_and_drains_its_pending_list() {
    let server = RedisServer::start();
    let store = Store::default();
    let (a, b) = (store.node(&server, "a"), store.node(&server, "b"));
    serving(&a).await;
    serving(&b).await;
    let ids: Vec<Id<Ledger>> = (0..100).map(|_| Id::mint()).collect();
    for &id in &ids {
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::Fill);
    }
    let before = b.stats::<Ledger>().invalidations;

    // A reader on B: per id, the versions it reads never go backwards.
    let reader = {
        let (b, ids) = (b.clone(), ids.clone());
        tokio::spawn(async move {
            let mut newest: HashMap<Id<Ledger>, RawId> = HashMap::new();
            let mut reads = 0u64;
            let start = tokio::time::Instant::now();
            while start.elapsed() < Duration::from_millis(1_500) {
                for &id in &ids {
                    let fetched = b.fetch(id).await.unwrap();
                    if let Some(seen) = newest.insert(id, fetched.version()) {
                        assert!(
                            !echo_cache::newer(&seen, &fetched.version()),
                            "{id}: read {} after {seen}",
                            fetched.version()
                        );
                    }
                    reads += 1;
                }
                tokio::task::yield_now().await;
            }
            reads
        })
    };

    // A writes 5 rounds over the 100 ids; B's lane is killed mid-way.
    let written = Arc::new(Mutex::new(0u64));
    for round in 1..=5u64 {
        store.0.store(round, SeqCst);
        for &id in &ids {
            a.invalidate(id).await.unwrap();
            *written.lock().unwrap() += 1;
        }
        if round == 2 {
            kill_lane(&server, "b");
        }
    }
    assert!(reader.await.unwrap() > 0);

    eventually_within(BOUND, POLL, "every message applied on B", async || {
        b.stats::<Ledger>().invalidations - before == *written.lock().unwrap()
    })
    .await;
    eventually_within(BOUND, POLL, "B's pending list drained", async || {
        caught_up(&server, "b")
    })
    .await;
    serving(&b).await;
    for &id in &ids {
        assert_eq!(b.fetch(id).await.unwrap().revision, 5, "{id}");
    }
}

#[tokio::test]
async fn a_node_restarted_under_its_name_catches_up_on_what_it_missed() {
    let server = RedisServer::start();
    let store = Store::default();
    let a = store.node(&server, "a");
    let b = store.node(&server, "b");
    serving(&a).await;
    serving(&b).await;
    drop(b);
    eventually_within(BOUND, POLL, "B's lane is gone", async || {
        let clients: String = server.query(redis::cmd("CLIENT").arg("LIST"));
        !clients.contains("name=ecc-durable:b ")
    })
    .await;

    let ids: Vec<Id<Ledger>> = (0..50).map(|_| Id::mint()).collect();
    for &id in &ids {
        a.invalidate(id).await.unwrap();
    }
    // A node that starts afresh reads only what comes after it.
    let c = store.node(&server, "c");
    serving(&c).await;

    let b = store.node(&server, "b");
    serving(&b).await;
    assert_eq!(
        b.stats::<Ledger>().invalidations,
        50,
        "B caught up before it served from L1"
    );
    assert!(caught_up(&server, "b"), "B acknowledged what it read");
    assert_eq!(c.stats::<Ledger>().invalidations, 0);

    let id = Id::<Ledger>::mint();
    a.invalidate(id).await.unwrap();
    eventually_within(BOUND, POLL, "C reads what comes after it", async || {
        c.stats::<Ledger>().invalidations == 1
    })
    .await;
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Ledger>()
}
