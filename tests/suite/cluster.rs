//! L2 on a real local Valkey/Redis Cluster (three masters on loopback, and
//! replicas where a test fails one over): keys on the slot and the node that
//! own them, the stale-read checker of every coherence mode, a herd across
//! two nodes, one master down while the others serve, a write that lands
//! once a slot's owners stop redirecting it to each other, a slot held
//! halfway migrated while one node writes and another reads, and a live
//! reshard and a failover under a read/write load with no caller error and
//! no read staler than the delivery bound; and `invalidate_all` and
//! `invalidate_tag`, alone and mixed into the stale-read checker.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coherence_support;
use crate::coherence_support::checker::{self, Bulk, D, RUN_FOR};
use crate::coherence_support::{
    Broadcast, Durable, Entity, Plain, Sor, Tracked, bounded, eventually,
};
use crate::tags::{self, TagBroadcast, TagDurable, TagTracked, read};
use echo_cache::{Builder, Cache, Cached, Coherence, Id, Source, keyspace, near_cache};
use echo_cache_testkit::{ClusterNode, RedisCluster};

/// `builder` with loaders of every table here that read `sor`.
fn loaders(builder: Builder, sor: &Sor) -> Builder {
    coherence_support::with_loaders(builder, sor)
        .open::<Durable>()
        .loader(coherence_support::reads::<Durable>(sor))
        .open::<Plain>()
        .loader(coherence_support::reads::<Plain>(sor))
        .open::<Spread>()
        .loader(coherence_support::reads::<Spread>(sor))
}

/// The builder of a node on `cluster` whose loaders read `sor`, with short
/// L2 bounds (a dead master costs a fetch that much before the loader
/// answers).
fn on(cluster: &RedisCluster, sor: &Sor) -> Builder {
    let builder: Builder = Cache::builder()
        .l2_cluster(cluster.urls())
        .l2_timeout(Duration::from_millis(500))
        .fetch_timeout(Some(coherence_support::BOUND))
        .coherence_ping_every(coherence_support::PING_EVERY);
    loaders(builder, sor)
}

/// A node of [`on`].
fn node(cluster: &RedisCluster, sor: &Sor) -> Cache {
    on(cluster, sor).build().expect("cache builds")
}

/// A node of [`on`] with `T`'s table too (a tagged one of `tags.rs`).
fn node_with<T: Entity>(cluster: &RedisCluster, sor: &Sor) -> Cache {
    on(cluster, sor)
        .open::<T>()
        .loader(coherence_support::reads::<T>(sor))
        .build()
        .expect("cache builds")
}

async fn ready(nodes: &[Cache]) {
    for node in nodes {
        bounded("the node to be ready", node.ready()).await;
    }
}

/// The slot of `T`'s keys (and of its channel and stream).
fn slot_of<T: Cached>() -> u16 {
    keyspace::table_slot(T::spec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_on_the_slot_and_the_node_that_own_them() {
    let cluster = RedisCluster::start(3, 0);
    let sor = Sor::default();
    let cache = node(&cluster, &sor);
    let id = Id::<Plain>::mint();
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);

    let key = keyspace::key(Plain::spec(), &id.raw());
    let slot = cluster.slot_of(&key);
    assert_eq!(
        slot,
        keyspace::slot(key.as_bytes()),
        "CLUSTER KEYSLOT agrees"
    );
    let owner = cluster.node_of_slot(slot);
    let frame: Option<Vec<u8>> = owner.query(redis::cmd("GET").arg(&key));
    assert!(
        frame.is_some(),
        "the frame is on {owner}, the owner of slot {slot}"
    );
    let stats = cache.stats::<Plain>();
    assert_eq!((stats.fills, stats.l2_errors), (1, 0));

    let second = node(&cluster, &sor);
    assert_eq!(second.fetch(id).await.unwrap().source(), Source::L2);
}

async fn stale_read_checker<T: Entity>() {
    let cluster = RedisCluster::start(3, 0);
    checker::two_nodes::<T>(|sor| node(&cluster, sor), ready).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_tracking_on_a_cluster() {
    stale_read_checker::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_broadcast_on_a_cluster() {
    stale_read_checker::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_durable_on_a_cluster() {
    stale_read_checker::<Durable>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_across_two_nodes_loads_once_per_node_at_most() {
    let cluster = RedisCluster::start(3, 0);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Loaders wait until the gate opens: every caller joins first.
    let gate = Arc::new(tokio::sync::watch::Sender::new(false));
    let counted = |calls: &Arc<std::sync::atomic::AtomicUsize>| {
        let (calls, gate) = (Arc::clone(calls), Arc::clone(&gate));
        let builder = Cache::builder()
            .l2_cluster(cluster.urls())
            .l2_timeout(Duration::from_secs(2));
        // Only `Plain` is read: its counted loader replaces the one given.
        loaders(builder, &Sor::default())
            .loader(move |id: Id<Plain>| {
                let (calls, mut open) = (Arc::clone(&calls), gate.subscribe());
                async move {
                    calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = open.wait_for(|&open| open).await;
                    Ok::<_, Infallible>(Some(Plain {
                        revision: id.payload(),
                    }))
                }
            })
            .build()
            .expect("cache builds")
    };
    let nodes = [counted(&calls), counted(&calls)];
    let id = Id::<Plain>::mint();
    let herd: Vec<_> = (0..200)
        .map(|i| {
            let node = nodes[i % 2].clone();
            tokio::spawn(async move { node.fetch(id).await })
        })
        .collect();
    eventually("every caller to join a flight", async || {
        nodes.iter().map(|n| n.stats::<Plain>().misses).sum::<u64>() == 200
    })
    .await;
    gate.send_replace(true);
    for caller in herd {
        let fetched = bounded("a caller", caller)
            .await
            .unwrap()
            .expect("the value");
        assert_eq!(fetched.revision, id.payload());
    }
    let loads = calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=2).contains(&loads),
        "{loads} loads for a herd on two nodes"
    );
    let third = counted(&calls);
    assert_eq!(third.fetch(id).await.unwrap().source(), Source::L2);
}

/// One master down (the one of the broadcast table's slot): that table's
/// fetches go to the loader, with no caller error; the plain table, on
/// another master, keeps its L2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_down_the_others_keep_serving_l2() {
    let cluster = RedisCluster::builder(3, 0)
        .args(["--cluster-require-full-coverage", "no"])
        .start();
    let sor = Sor::default();
    let (a, b) = (node(&cluster, &sor), node(&cluster, &sor));
    let down = cluster.node_of_slot(slot_of::<Broadcast>());
    assert_ne!(
        cluster.node_of_slot(slot_of::<Plain>()).id(),
        down.id(),
        "the two tables live on different masters"
    );
    let id = Id::<Plain>::mint();
    a.fetch(id).await.expect("a fill");

    down.kill();
    for _ in 0..5 {
        let fetched = a.fetch(Id::<Broadcast>::mint()).await;
        assert_eq!(fetched.expect("no caller error").source(), Source::Fill);
    }
    assert!(a.stats::<Broadcast>().l2_errors > 0, "its L2 is down");
    assert_eq!(
        b.fetch(id).await.expect("no caller error").source(),
        Source::L2,
        "the plain table's master still serves its L2"
    );
}

/// The stale-read checker of `T` on two nodes of a 3-master cluster (with
/// `replicas` each), `disturb`ing, `after` its start, the cluster on a
/// blocking thread with the slot of `T` (the outage it caused, if any).
async fn under_load<T: Entity>(
    replicas: usize,
    run_for: Duration,
    after: Duration,
    disturb: impl FnOnce(&RedisCluster, u16) -> Option<checker::Outage> + Send + 'static,
) {
    let cluster = Arc::new(RedisCluster::start(3, replicas));
    let sor = Sor::default();
    let nodes = [node(&cluster, &sor), node(&cluster, &sor)];
    ready(&nodes).await;
    // The cluster outlives the checker: the disturbance holds a clone.
    let disturbed = Arc::clone(&cluster);
    let disturbance = async move {
        tokio::time::sleep(after).await;
        let done = tokio::task::spawn_blocking(move || disturb(&disturbed, slot_of::<T>()));
        done.await.expect("the disturbance")
    };
    checker::run::<T>(&nodes, &sor, run_for, D, disturbance).await;
    drop(cluster);
}

/// A live reshard of a table's slot under the stale-read checker's load:
/// no caller error, no read staler than `D`.
async fn reshard_under_load<T: Entity>() {
    under_load::<T>(0, RUN_FOR, RUN_FOR / 3, |cluster, slot| {
        let owner = cluster.node_of_slot(slot).id().to_owned();
        let to = *cluster
            .masters()
            .iter()
            .find(|m| m.id() != owner)
            .expect("another master");
        cluster.migrate_slot(slot, to);
        assert_ne!(cluster.node_of_slot(slot).id(), owner, "the slot moved");
        None
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reshard_under_load_tracking() {
    reshard_under_load::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reshard_under_load_broadcast() {
    reshard_under_load::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reshard_under_load_durable() {
    reshard_under_load::<Durable>().await;
}

/// The master of a table's slot fails over (`CLUSTER FAILOVER` on its
/// replica) under the checker's load: no caller error, no read staler
/// than `D`.
async fn failover_under_load<T: Entity>() {
    under_load::<T>(1, RUN_FOR, RUN_FOR / 3, |cluster, slot| {
        let master = cluster.node_of_slot(slot);
        let owner = master.id().to_owned();
        cluster.failover(cluster.replicas_of(master)[0]);
        assert_ne!(
            cluster.node_of_slot(slot).id(),
            owner,
            "the replica took over"
        );
        None
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_load_tracking() {
    failover_under_load::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_load_broadcast() {
    failover_under_load::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_load_durable() {
    failover_under_load::<Durable>().await;
}

/// While two masters each say the other serves a slot (as they may for a
/// moment of a failover), a write keeps trying and lands once they agree:
/// not dropped, not left to the backlog, whose late delivery readers on
/// other nodes would see as a stale L2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_cluster_keeps_redirecting_lands_once_the_slot_settles() {
    let cluster = RedisCluster::start(3, 0);
    let sor = Sor::default();
    let cache = node(&cluster, &sor);
    let slot = slot_of::<Plain>();
    let owner = cluster.node_of_slot(slot);
    let other = *cluster
        .masters()
        .iter()
        .find(|master| master.id() != owner.id())
        .expect("another master");
    let give = |to: &ClusterNode| {
        let () = owner.query(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(to.id()),
        );
    };
    // The owner hands its (empty) slot to `other`, which does not take it.
    give(other);
    let id = Id::<Plain>::mint();
    let put = tokio::spawn({
        let cache = cache.clone();
        async move { cache.put(id, Plain::at(7)).await }
    });
    // The disagreement lasts longer than ten quick retries (the old budget).
    tokio::time::sleep(Duration::from_millis(300)).await;
    give(owner);
    bounded("the put", put)
        .await
        .expect("the put's task")
        .expect("the put");

    let stats = cache.stats::<Plain>();
    assert_eq!(
        (stats.l2_writes_dropped, stats.redeliveries),
        (0, 0),
        "the write landed when made"
    );
    let key = keyspace::key(Plain::spec(), &id.raw());
    let frame: Option<Vec<u8>> = owner.query(redis::cmd("GET").arg(&key));
    assert!(frame.is_some(), "the frame is on {owner}");
}

/// How long a table's slot is held halfway through its migration.
const HELD_FOR: Duration = Duration::from_secs(1);

/// Ids written while the slot is held: half moved to the target before the
/// writes, half left on the source, and some new (no key yet: the source
/// answers `ASK` for them too).
const HELD_IDS: usize = 12;

/// `T`'s slot held halfway through a migration for [`HELD_FOR`] (the source
/// `MIGRATING`, the target `IMPORTING`, half the table's keys moved, so the
/// source answers `ASK` for those and for new ones) while node A puts and
/// invalidates and node B reads: B reads every write within `D` of its
/// return, and no operation spends the redirect budget (each is a
/// one-command redirect, not a wait: none dropped, none failed, each well
/// under the budget's second). The target is another master, or, `to_new`,
/// a master that serves no slot yet (`CLUSTER SLOTS` does not list it: a
/// scale-out).
async fn a_slot_held_mid_migration<T: Entity>(to_new: bool) {
    let cluster = RedisCluster::builder(3, 0).spare_masters(usize::from(to_new));
    let cluster = Arc::new(cluster.start());
    let sor = Sor::default();
    let (a, b) = (node(&cluster, &sor), node(&cluster, &sor));
    ready(&[a.clone(), b.clone()]).await;
    let slot = slot_of::<T>();
    let ids: Vec<Id<T>> = (0..HELD_IDS).map(|_| Id::mint()).collect();
    // B holds the first two thirds in L1 (the last third has no key yet).
    let filled = HELD_IDS * 2 / 3;
    for &id in &ids[..filled] {
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::Fill);
    }
    let source = cluster.node_of_slot(slot);
    let target = if to_new {
        &cluster.nodes()[3]
    } else {
        cluster.nodes()[..3]
            .iter()
            .find(|m| m.id() != source.id())
            .expect("another master")
    };
    let migration = cluster.begin_migration(slot, target);
    // Half the filled ids move; the table's other keys (a stream) stay.
    let moved: Vec<String> = ids[..filled / 2]
        .iter()
        .map(|id| keyspace::key(T::spec(), &id.raw()))
        .collect();
    let _: String = source.query(
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(target.port())
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(&moved),
    );
    let mut plain = redis::Client::open(source.url())
        .and_then(|client| client.get_connection())
        .expect("a connection to the source");
    let asked = (redis::cmd("GET").arg(&moved[0]))
        .query::<Option<Vec<u8>>>(&mut plain)
        .expect_err("the source redirects a moved key");
    assert_eq!(asked.code(), Some("ASK"), "{asked}");

    let mut writes = 0;
    // The slowest write and read, and the longest from a write's return to
    // the end of the read that saw it.
    let (mut slowest_write, mut slowest_read) = (Duration::ZERO, Duration::ZERO);
    let mut latest = Duration::ZERO;
    let held = Instant::now();
    while held.elapsed() < HELD_FOR {
        let id = ids[writes % HELD_IDS];
        let revision = sor.bump(id.raw());
        let began = Instant::now();
        if writes % 2 == 0 {
            a.put(id, T::at(revision)).await.expect("the put");
        } else {
            a.invalidate(id).await.expect("the invalidation");
        }
        let written = Instant::now();
        slowest_write = slowest_write.max(written - began);
        loop {
            let began = Instant::now();
            let read = b.fetch(id).await.expect("B's read");
            slowest_read = slowest_read.max(began.elapsed());
            if read.revision() == revision {
                latest = latest.max(written.elapsed());
                break;
            }
            // As the stale-read checker judges: by when the read began.
            assert!(
                began - written <= D,
                "write {writes}: B read revision {} of {id:?} (written: {revision}) \
                 in a read begun {:?} after A's write returned, past D = {D:?}",
                read.revision(),
                began - written
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        writes += 1;
    }
    eprintln!(
        "{}: {writes} writes with the slot held; slowest write {slowest_write:?}, \
         slowest read {slowest_read:?}, B read each within {latest:?}",
        T::spec().name()
    );
    let (sa, sb) = (a.stats::<T>(), b.stats::<T>());
    assert_eq!(
        (sa.l2_errors, sb.l2_errors),
        (0, 0),
        "every L2 read was answered while the slot was held"
    );
    // Not yet to a new master: the cluster client loads the write script
    // (`SCRIPT LOAD`) on the masters it knows, which serve slots, so a
    // write it redirects there fails `NOSCRIPT` (the message still reaches
    // B; a tracking table's writes, once its link tracks the new master,
    // load it there themselves).
    if !to_new {
        assert_eq!(
            (sa.l2_writes_dropped, sa.redeliveries),
            (0, 0),
            "every L2 write was answered while the slot was held"
        );
    }
    // Not a wait for the slot to settle: a redirect costs a round trip, and
    // the budget for a cluster that keeps redirecting is a second.
    assert!(
        slowest_write.max(slowest_read) < Duration::from_millis(250),
        "the slowest write took {slowest_write:?}, the slowest read {slowest_read:?}"
    );
    let finish = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || finish.finish_migration(migration))
        .await
        .expect("the migration ends");
    assert_eq!(
        cluster.node_of_slot(slot).id(),
        target.id(),
        "the slot moved"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_mid_migration_tracking() {
    a_slot_held_mid_migration::<Tracked>(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_mid_migration_broadcast() {
    a_slot_held_mid_migration::<Broadcast>(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_mid_migration_durable() {
    a_slot_held_mid_migration::<Durable>(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_mid_migration_to_a_new_master_tracking() {
    a_slot_held_mid_migration::<Tracked>(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_mid_migration_to_a_new_master_broadcast() {
    a_slot_held_mid_migration::<Broadcast>(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_held_mid_migration_to_a_new_master_durable() {
    a_slot_held_mid_migration::<Durable>(true).await;
}

/// A spread table: each id on its own slot, so its ids land on every
/// master, and a write on one node still evicts the row on another.
#[near_cache(
    kind = "SPR",
    ttl_ms = 600_000,
    coherence = "tracking",
    placement = "spread",
    name = "spread"
)]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Spread {
    revision: u64,
}

impl Entity for Spread {
    fn at(revision: u64) -> Spread {
        Spread { revision }
    }
    fn revision(&self) -> u64 {
        self.revision
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spread_table_keys_its_ids_on_every_master_and_stays_coherent() {
    let cluster = RedisCluster::start(3, 0);
    let sor = Sor::default();
    let spread = |sor: &Sor| {
        let builder = Cache::builder()
            .l2_cluster(cluster.urls())
            .coherence_ping_every(coherence_support::PING_EVERY);
        loaders(builder, sor).build().expect("cache builds")
    };
    let (a, b) = (spread(&sor), spread(&sor));
    ready(&[a.clone(), b.clone()]).await;

    let ids: Vec<Id<Spread>> = (0..30).map(|_| Id::mint()).collect();
    let mut owners = std::collections::HashSet::new();
    for &id in &ids {
        assert_eq!(a.fetch(id).await.unwrap().source(), Source::Fill);
        let key = keyspace::key(Spread::spec(), &id.raw());
        assert!(key.starts_with("ecc:spread:"), "{key}");
        let owner = cluster.node_of_slot(cluster.slot_of(&key));
        let frame: Option<Vec<u8>> = owner.query(redis::cmd("GET").arg(&key));
        assert!(frame.is_some(), "{key} is on {owner}, its slot's owner");
        owners.insert(owner.id().to_owned());
    }
    assert_eq!(owners.len(), 3, "30 ids spread over the 3 masters");
    // B hears of A's 30 fills (from the three masters) before it reads.
    eventually("B to apply the pushes of A's fills", async || {
        b.stats::<Spread>().invalidations == 30
    })
    .await;
    for &id in &ids {
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::L2);
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
        sor.bump(id.raw());
        a.invalidate(id).await.expect("invalidate");
    }
    for &id in &ids {
        eventually("B reads the write", async || {
            b.fetch(id).await.unwrap().revision == 1
        })
        .await;
    }
}

/// How long after the end of an outage a write acknowledged during it
/// reaches every node: the writer's delivery task probes every 100 ms and
/// delivers its backlog (as in `coherence_outage.rs`).
const RECOVERY: Duration = Duration::from_millis(1_500);

/// The master of a table's slot is killed under the checker's load, and
/// the cluster promotes its replica after the node timeout: no caller
/// error, no read staler than `D` but for writes acknowledged during the
/// outage, which every node reads within [`RECOVERY`] after it ended (a
/// durable append that failed was not acknowledged).
async fn master_killed_under_load<T: Entity>() {
    let run_for = Duration::from_secs(6);
    under_load::<T>(1, run_for, Duration::from_millis(500), |cluster, slot| {
        let began = std::time::Instant::now();
        let master = cluster.node_of_slot(slot);
        let owner = master.id().to_owned();
        master.kill();
        assert_ne!(
            cluster.wait_for_failover(master).id(),
            owner,
            "the replica took over"
        );
        Some(checker::Outage {
            began,
            ended: std::time::Instant::now(),
            recovery: RECOVERY,
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_tracking() {
    master_killed_under_load::<Tracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_broadcast() {
    master_killed_under_load::<Broadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_under_load_durable() {
    master_killed_under_load::<Durable>().await;
}

/// The sum over the nodes of a `CLUSTER INFO` counter of bus messages.
fn bus_messages(cluster: &RedisCluster, field: &str) -> u64 {
    cluster
        .nodes()
        .iter()
        .map(|node| {
            let info: String = node.query(redis::cmd("CLUSTER").arg("INFO"));
            info.lines()
                .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
                .map_or(0, |n| n.trim().parse().expect("a count"))
        })
        .sum()
}

/// A broadcast message is published on its channel's shard and subscribed
/// there: it never crosses the cluster bus (no classic `PUBLISH` fans out to
/// every node), and it still reaches the other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_messages_stay_on_their_shard() {
    let cluster = RedisCluster::start(3, 0);
    let sor = Sor::default();
    let (a, b) = (node(&cluster, &sor), node(&cluster, &sor));
    ready(&[a.clone(), b.clone()]).await;
    let ids: Vec<Id<Broadcast>> = (0..50).map(|_| Id::mint()).collect();
    for &id in &ids {
        b.fetch(id).await.unwrap();
    }
    let sent = |field| bus_messages(&cluster, field);
    let before = (
        sent("cluster_stats_messages_publish_sent"),
        sent("cluster_stats_messages_publishshard_sent"),
    );
    let applied = b.stats::<Broadcast>().invalidations;
    for &id in &ids {
        sor.bump(id.raw());
        a.invalidate(id).await.expect("invalidate");
    }
    eventually("B applies the 50 messages", async || {
        b.stats::<Broadcast>().invalidations == applied + 50
    })
    .await;
    let after = (
        sent("cluster_stats_messages_publish_sent"),
        sent("cluster_stats_messages_publishshard_sent"),
    );
    assert_eq!(after, before, "no publish message crossed the cluster bus");
}

/// `invalidate_all` on a cluster: node A fills ids of `T` and B holds them;
/// the system of record moves them all to revision 1 and A invalidates the
/// table. A and a third node read revision 1 at once (L2 buries every
/// frame, on whichever master it is), B within the delivery bound.
async fn invalidate_all_on_a_cluster<T: Entity>() {
    let cluster = RedisCluster::start(3, 0);
    let sor = Sor::default();
    let nodes = [node(&cluster, &sor), node(&cluster, &sor)];
    ready(&nodes).await;
    let [a, b] = &nodes;
    let ids: Vec<Id<T>> = (0..30).map(|_| Id::mint()).collect();
    for &id in &ids {
        assert_eq!(a.fetch(id).await.unwrap().revision(), 0);
        assert_eq!(b.fetch(id).await.unwrap().source(), Source::L2);
        sor.bump(id.raw());
    }
    a.invalidate_all::<T>().await.expect("invalidate_all");
    let c = node(&cluster, &sor);
    ready(std::slice::from_ref(&c)).await;
    for &id in &ids {
        assert_eq!(a.fetch(id).await.unwrap().revision(), 1, "A reads its own");
        let fetched = c.fetch(id).await.unwrap();
        assert_eq!(fetched.revision(), 1, "L2 serves no older frame");
    }
    for &id in &ids {
        eventually("B reads afresh", async || {
            b.fetch(id).await.unwrap().revision() == 1
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_on_a_cluster_broadcast() {
    invalidate_all_on_a_cluster::<Broadcast>().await;
}

/// A spread table's frames are on every master and its floor on one: its
/// table-wide invalidation writes tombstones over its frames instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_all_on_a_cluster_spread() {
    invalidate_all_on_a_cluster::<Spread>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_durable_with_invalidate_all_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    checker::two_nodes_bulk::<Durable>(|sor| node(&cluster, sor), ready, Bulk::All).await;
}

/// `invalidate_tag` on a cluster: node A fills ids of two tags of `T` and
/// B holds them (read from L2); the system of record moves them all to
/// revision 1 and A invalidates the first tag. A and a third node read its
/// ids afresh at once (L2 tombstones the tag's frames, on the table's
/// slot), B within the delivery bound; every node keeps the other tag's
/// rows.
async fn invalidate_tag_on_a_cluster<T: Entity>() {
    let cluster = RedisCluster::start(3, 0);
    let sor = Sor::default();
    let nodes = [
        node_with::<T>(&cluster, &sor),
        node_with::<T>(&cluster, &sor),
    ];
    ready(&nodes).await;
    let [a, b] = &nodes;
    let tagged: Vec<Id<T>> = (0..15).map(|_| tags::id_in(0)).collect();
    let others: Vec<Id<T>> = (0..15).map(|_| tags::id_in(1)).collect();
    let ids = || tagged.iter().chain(&others).copied();
    for id in ids() {
        assert_eq!(read(a, id).await, (0, Source::Fill));
    }
    if T::spec().coherence() == Coherence::Tracking {
        // The push of each of A's fills, which would drop B's row of it
        // were it to come after B read the frame.
        eventually("B to apply the pushes of A's fills", async || {
            b.stats::<T>().invalidations == 30
        })
        .await;
    }
    for id in ids() {
        assert_eq!(read(b, id).await, (0, Source::L2));
        sor.bump(id.raw());
    }
    a.invalidate_tag::<T>(0).await.expect("invalidate_tag");
    let c = node_with::<T>(&cluster, &sor);
    ready(std::slice::from_ref(&c)).await;
    for &id in &tagged {
        assert_eq!(read(a, id).await, (1, Source::Fill), "A reads its own");
        assert_eq!(
            read(&c, id).await.0,
            1,
            "L2 serves no frame of the tag older than the invalidation"
        );
    }
    for &id in &tagged {
        eventually("B reads afresh", async || read(b, id).await.0 == 1).await;
    }
    for &id in &others {
        let expected = [
            ("A", a, Source::Hit),
            ("B", b, Source::Hit),
            ("C", &c, Source::L2),
        ];
        for (name, node, from) in expected {
            assert_eq!(
                read(node, id).await,
                (0, from),
                "{name} keeps another tag's row"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_tag_on_a_cluster_tracking() {
    invalidate_tag_on_a_cluster::<TagTracked>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_tag_on_a_cluster_broadcast() {
    invalidate_tag_on_a_cluster::<TagBroadcast>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidate_tag_on_a_cluster_durable() {
    invalidate_tag_on_a_cluster::<TagDurable>().await;
}

/// The stale-read checker with tag invalidations mixed in, on a cluster:
/// in `tracking`, whose nodes hear of a tag's invalidation not from a
/// message but from the pushes of the slot's master (of the tag's floor
/// and of its members' tombstones).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_read_checker_tracking_with_invalidate_tag_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    checker::two_nodes_bulk::<TagTracked>(
        |sor| node_with::<TagTracked>(&cluster, sor),
        ready,
        Bulk::Tag(tags::group_of::<TagTracked>),
    )
    .await;
}
