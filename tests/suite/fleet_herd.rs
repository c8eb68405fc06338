//! One load per herd across the fleet (`herd = "fleet"`), on a real
//! server: nodes here are `Cache`s of one process sharing L2 (the OS
//! processes' herd is `tests/fleet_processes.rs`). A herd of every node on
//! one cold id calls the loader once; a `node` table calls it once per
//! node; a lease whose holder is gone lets the next node load; an
//! invalidation racing the lease never leaves the value read before it.
//!
//! A waiting node blocks on the id's wake list (`BLMOVE`): the server
//! counts it in `blocked_clients`, which the tests await before they let
//! the holder's loader go, so "every node waits" is a fact, not a hope.

use std::convert::Infallible;
use std::time::Duration;

use echo_cache::{Builder, Cache, Cached, Error, Fetched, Herd, Id, Source, keyspace, near_cache};
use echo_cache_testkit::{RedisCluster, RedisServer};

use crate::common::{Calls, Gate, bounded, eventually, query};

#[near_cache(kind = "FHG", ttl_ms = 600_000, name = "fleet_games", herd = "fleet")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Game {
    rev: u64,
}

#[near_cache(
    kind = "FHS",
    ttl_ms = 600_000,
    name = "fleet_spread",
    herd = "fleet",
    placement = "spread"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Spot {
    rev: u64,
}

#[near_cache(
    kind = "FHT",
    ttl_ms = 600_000,
    name = "fleet_tracked",
    herd = "fleet",
    coherence = "tracking"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tracked {
    rev: u64,
}

#[near_cache(kind = "FHN", ttl_ms = 600_000, name = "node_games")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Rule {
    rev: u64,
}

const NODES: usize = 4;
const CALLERS: usize = 250;

/// What the loaders read: the system of record's revision, and a gate
/// each load waits on.
#[derive(Clone)]
struct Record {
    rev: std::sync::Arc<std::sync::atomic::AtomicU64>,
    gate: Gate,
    calls: Calls,
}

impl Record {
    fn new() -> Record {
        Record {
            rev: std::sync::Arc::default(),
            gate: Gate::closed(),
            calls: Calls::default(),
        }
    }

    /// Reads the revision, then waits at the gate: a load that read
    /// before a write and lands after it.
    async fn load(&self) -> u64 {
        self.calls.count();
        let rev = self.rev.load(std::sync::atomic::Ordering::SeqCst);
        self.gate.pass().await;
        rev
    }
}

/// Where the nodes' L2 is.
#[derive(Clone, Copy)]
enum L2<'a> {
    Server(&'a RedisServer),
    Cluster(&'a RedisCluster),
}

impl L2<'_> {
    fn builder(self) -> Builder {
        let builder = Cache::builder()
            .open::<Game>()
            .open::<Spot>()
            .open::<Tracked>()
            .open::<Rule>();
        match self {
            L2::Server(server) => builder.l2(server.url()),
            L2::Cluster(cluster) => builder.l2_cluster(cluster.urls()),
        }
    }

    /// How many clients the servers hold blocked (the nodes waiting for a
    /// lease's release).
    async fn blocked(self) -> usize {
        match self {
            L2::Server(server) => blocked(server).await,
            L2::Cluster(cluster) => {
                let mut sum = 0;
                for master in cluster.masters() {
                    sum += blocked(master).await;
                }
                sum
            }
        }
    }
}

/// A node of `l2` whose loaders read `record`, with flights of
/// `load_timeout` (its leases last half of it).
fn node(l2: L2<'_>, record: &Record, load_timeout: Duration) -> Cache {
    let (game, spot, rule) = (record.clone(), record.clone(), record.clone());
    let tracked = record.clone();
    l2.builder()
        .l2_timeout(Duration::from_secs(2))
        .load_timeout(load_timeout)
        .fetch_timeout(None)
        .loader(move |_: Id<Game>| {
            let game = game.clone();
            async move {
                Ok::<_, Infallible>(Some(Game {
                    rev: game.load().await,
                }))
            }
        })
        .loader(move |_: Id<Spot>| {
            let spot = spot.clone();
            async move {
                Ok::<_, Infallible>(Some(Spot {
                    rev: spot.load().await,
                }))
            }
        })
        .loader(move |_: Id<Tracked>| {
            let tracked = tracked.clone();
            async move {
                Ok::<_, Infallible>(Some(Tracked {
                    rev: tracked.load().await,
                }))
            }
        })
        .loader(move |_: Id<Rule>| {
            let rule = rule.clone();
            async move {
                Ok::<_, Infallible>(Some(Rule {
                    rev: rule.load().await,
                }))
            }
        })
        .build()
        .expect("cache builds")
}

fn nodes(l2: L2<'_>, record: &Record) -> Vec<Cache> {
    (0..NODES)
        .map(|_| node(l2, record, Duration::from_secs(30)))
        .collect()
}

type Answer<T> = tokio::task::JoinHandle<Result<Fetched<T>, Error>>;

/// `CALLERS` fetches of `id` on each of `nodes`, each in its own task.
fn herd<T: Cached>(nodes: &[Cache], id: Id<T>) -> Vec<Answer<T>> {
    let mut callers = Vec::new();
    for cache in nodes {
        for _ in 0..CALLERS {
            let cache = cache.clone();
            callers.push(tokio::spawn(async move { cache.fetch(id).await }));
        }
    }
    callers
}

async fn answers<T>(callers: Vec<Answer<T>>) -> Vec<Fetched<T>> {
    let mut answers = Vec::with_capacity(callers.len());
    for caller in callers {
        let answer = bounded("a caller's answer", caller).await;
        answers.push(answer.expect("no panic").expect("a value"));
    }
    answers
}

/// How many clients `server` holds blocked.
async fn blocked(server: &RedisServer) -> usize {
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let info: String = query(&mut connection, redis::cmd("INFO").arg("clients")).await;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"));
    line.expect("INFO clients names blocked_clients")
        .trim()
        .parse()
        .expect("a count")
}

/// Waits until `n` nodes wait for a lease, each blocked on its wake list.
async fn until_waiting(l2: L2<'_>, n: usize) {
    eventually("the other nodes to wait for the lease", async || {
        l2.blocked().await == n
    })
    .await;
}

/// Every node's herd on one cold id of `T`: one loader call, whose value
/// (`rev` 0) answers every caller.
async fn one_load_per_fleet<T: Cached>(l2: L2<'_>, rev: fn(&T) -> u64) {
    let record = Record::new();
    let nodes = nodes(l2, &record);
    let id = Id::<T>::mint();

    let callers = herd(&nodes, id);
    until_waiting(l2, NODES - 1).await;
    // The lease's holder calls its loader once its flight runs on, which
    // the others do not wait for.
    eventually("the lease's holder to load", async || {
        record.calls.get() > 0
    })
    .await;
    assert_eq!(record.calls.get(), 1, "one node loads, the others wait");
    record.gate.open();

    let answers = answers(callers).await;
    assert_eq!(answers.len(), NODES * CALLERS);
    assert!(answers.iter().all(|a| rev(a.value().as_ref()) == 0));
    assert_eq!(record.calls.get(), 1, "one loader call across the fleet");
    let fills = answers
        .iter()
        .filter(|a| a.source() == Source::Fill)
        .count();
    assert!(
        fills <= CALLERS,
        "only the holder's callers answered by its fill: {fills}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_of_every_node_on_one_cold_id_loads_once() {
    assert_eq!(Game::spec().herd(), Herd::Fleet);
    let server = RedisServer::start();
    one_load_per_fleet::<Game>(L2::Server(&server), |g| g.rev).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_table_leases_on_the_ids_slot_and_loads_once() {
    let server = RedisServer::start();
    one_load_per_fleet::<Spot>(L2::Server(&server), |s| s.rev).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tracking_table_herds_once_and_its_lease_keys_push_no_row() {
    let server = RedisServer::start();
    let record = Record::new();
    let nodes = nodes(L2::Server(&server), &record);
    for node in &nodes {
        bounded("the node to be ready", node.ready()).await;
    }
    let id = Id::<Tracked>::mint();

    let callers = herd(&nodes, id);
    until_waiting(L2::Server(&server), NODES - 1).await;
    record.gate.open();
    answers(callers).await;

    assert_eq!(record.calls.get(), 1, "one loader call across the fleet");

    // A node applies its pushes in the server's order: once each node has
    // dropped its row for a write made after the herd, it has been told of
    // every lease and wake list key the herd wrote. Two writers, as a
    // write is pushed to every node but its own.
    let marker = Id::<Tracked>::mint();
    for (writer, rev) in [(0, 1), (1, 2)] {
        let others = || (0..NODES).filter(move |&i| i != writer).map(|i| &nodes[i]);
        for node in others() {
            bounded("the marker read", node.fetch(marker))
                .await
                .unwrap();
            assert!(node.contains(marker));
        }
        nodes[writer].put(marker, Tracked { rev }).await.unwrap();
        eventually("the others to drop the marker", async || {
            others().all(|node| !node.contains(marker))
        })
        .await;
    }
    for node in &nodes {
        let stats = node.stats::<Tracked>();
        assert_eq!(stats.malformed_messages, 0, "the lease's pushes are no row");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_on_a_cluster_loads_once_in_either_placement() {
    let cluster = RedisCluster::start(3, 0);
    one_load_per_fleet::<Game>(L2::Cluster(&cluster), |g| g.rev).await;
    one_load_per_fleet::<Spot>(L2::Cluster(&cluster), |s| s.rev).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_herd_loads_once_per_node_and_takes_no_lease() {
    assert_eq!(Rule::spec().herd(), Herd::Node);
    let server = RedisServer::start();
    let record = Record::new();
    let nodes = nodes(L2::Server(&server), &record);
    let id = Id::<Rule>::mint();

    let callers = herd(&nodes, id);
    eventually("every node to load", async || record.calls.get() == NODES).await;
    record.gate.open();
    answers(callers).await;

    assert_eq!(record.calls.get(), NODES, "one flight per node, as ever");
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lease = format!("{}:lease", keyspace::key(Rule::spec(), &id.raw()));
    let exists: u64 = query(&mut connection, redis::cmd("EXISTS").arg(lease)).await;
    assert_eq!(exists, 0, "no key beside the frame");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_holder_is_gone_lets_the_next_node_load() {
    let server = RedisServer::start();
    let record = Record::new();
    record.gate.open();
    let waiter = node(L2::Server(&server), &record, Duration::from_secs(30));
    let id = Id::<Game>::mint();
    // A node took the lease (for 2 s) and died: nobody releases it.
    let mut connection = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lease = format!("{}:lease", keyspace::key(Game::spec(), &id.raw()));
    let set = redis::cmd("SET")
        .arg(&lease)
        .arg("a dead node")
        .arg("PX")
        .arg(2_000)
        .clone();
    let _: () = query(&mut connection, &set).await;

    let answer = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.fetch(id).await }
    });
    until_waiting(L2::Server(&server), 1).await;
    assert_eq!(record.calls.get(), 0, "it waits for the holder first");
    let answer = bounded("the waiter's answer", answer).await.unwrap();

    let answer = answer.expect("the waiter loads once the lease is out");
    assert_eq!(answer.source(), Source::Fill);
    assert_eq!(record.calls.get(), 1);
    let holder: Option<String> = query(&mut connection, redis::cmd("GET").arg(&lease)).await;
    assert_eq!(holder, None, "the waiter took the lease, then released it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalidation_racing_the_lease_never_leaves_the_value_read_before_it() {
    let server = RedisServer::start();
    let record = Record::new();
    let (holder, waiter, writer) = (
        node(L2::Server(&server), &record, Duration::from_secs(30)),
        node(L2::Server(&server), &record, Duration::from_secs(30)),
        node(L2::Server(&server), &record, Duration::from_secs(30)),
    );
    let id = Id::<Game>::mint();

    let first = {
        let holder = holder.clone();
        tokio::spawn(async move { holder.fetch(id).await })
    };
    eventually("the holder to read rev 0", async || record.calls.get() == 1).await;
    let second = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.fetch(id).await })
    };
    until_waiting(L2::Server(&server), 1).await;
    // The write: the record moves on, then the id is invalidated, while
    // the holder's load (of rev 0) is under way.
    record.rev.store(1, std::sync::atomic::Ordering::SeqCst);
    writer.invalidate(id).await.expect("invalidates");
    record.gate.open();

    let first = bounded("the holder's answer", first)
        .await
        .unwrap()
        .unwrap();
    let second = bounded("the waiter's answer", second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.value().rev, 0, "the holder answers what it read");
    assert_eq!(
        second.value().rev,
        1,
        "the waiter does not take the overtaken value"
    );
    assert_eq!(record.calls.get(), 2, "the waiter loaded again");
    let after = bounded("a later fetch", writer.fetch(id)).await.unwrap();
    assert_eq!(after.value().rev, 1);
}
