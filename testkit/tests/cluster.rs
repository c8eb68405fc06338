//! Behaviour of the real-cluster fixture, against the real binary.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use echo_cache_testkit::{ClusterNode, RedisCluster, RedisServer, SLOT_COUNT};
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// A `CLUSTER INFO` field of `node`.
fn cluster_info(node: &RedisServer, field: &str) -> String {
    let info: String = node.query(redis::cmd("CLUSTER").arg("INFO"));
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in CLUSTER INFO:\n{info}"))
        .trim()
        .to_owned()
}

/// Runs `cmd` on `node`, returning the error instead of panicking.
fn try_query<T: redis::FromRedisValue>(
    node: &RedisServer,
    cmd: &redis::Cmd,
) -> Result<T, RedisError> {
    cmd.query(&mut node.blocking_connection())
}

/// Asserts that `err` is a `kind` redirect (MOVED or ASK) of `slot` to `to`.
#[track_caller]
fn assert_redirect(err: &RedisError, kind: ServerErrorKind, slot: u16, to: &ClusterNode) {
    assert_eq!(err.kind(), ErrorKind::Server(kind), "{err}");
    let expected = format!("127.0.0.1:{}", to.port());
    assert_eq!(
        err.redirect_node(),
        Some((expected.as_str(), slot)),
        "{err}"
    );
}

/// Runs `cmd` on `key`'s node the way a cluster client does: on the slot's
/// owner, following MOVED, and ASK (with `ASKING`) to the importing node.
/// Returns the reply and whether an ASK was followed.
fn on_cluster<T: redis::FromRedisValue>(
    cluster: &RedisCluster,
    key: &str,
    cmd: &redis::Cmd,
) -> (T, bool) {
    let mut node = cluster.node_of_slot(cluster.slot_of(key));
    let mut asked = false;
    for _ in 0..5 {
        let mut conn = node.blocking_connection();
        if asked {
            let () = redis::cmd("ASKING").query(&mut conn).unwrap();
        }
        let err = match cmd.query(&mut conn) {
            Ok(reply) => return (reply, asked),
            Err(err) => err,
        };
        let (addr, _) = err
            .redirect_node()
            .unwrap_or_else(|| panic!("{key} on {node}: {err}"));
        asked = err.kind() == ErrorKind::Server(ServerErrorKind::Ask);
        node = cluster
            .nodes()
            .iter()
            .find(|n| n.to_string() == addr)
            .unwrap_or_else(|| panic!("redirected to {addr}, not a node of the cluster"));
    }
    panic!("{key}: more than 5 redirects");
}

/// Polls (bounded) until `count` reaches `at_least`.
fn wait_for_count(count: &AtomicUsize, at_least: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while count.load(Ordering::Acquire) < at_least {
        assert!(Instant::now() < deadline, "the load stalled");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn three_masters_come_up_ok_and_own_every_slot() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 0);
    eprintln!("3 masters up in {:?}", started.elapsed());

    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.masters().len(), 3);
    assert!(cluster.replicas().is_empty());
    for node in cluster.nodes() {
        assert_eq!(cluster_info(node, "cluster_state"), "ok", "{node}");
        assert_eq!(cluster_info(node, "cluster_slots_assigned"), "16384");
        assert_eq!(cluster_info(node, "cluster_slots_ok"), "16384");
        assert_eq!(cluster_info(node, "cluster_known_nodes"), "3");
        let id: String = node.query(redis::cmd("CLUSTER").arg("MYID"));
        assert_eq!(id, node.id());
    }
    let urls: Vec<String> = cluster.nodes().iter().map(|n| n.url()).collect();
    assert_eq!(cluster.urls(), urls);
    // Equal shares, in start order.
    let owners: Vec<&str> = [0, SLOT_COUNT / 2, SLOT_COUNT - 1]
        .into_iter()
        .map(|slot| cluster.node_of_slot(slot).id())
        .collect();
    let masters: Vec<&str> = cluster.masters().iter().map(|m| m.id()).collect();
    assert_eq!(owners, masters);
}

#[test]
fn a_keys_slot_is_served_by_its_owner_and_moved_elsewhere() {
    let cluster = RedisCluster::start(3, 0);
    let key = "ecc:{GAM}:42";
    let slot = cluster.slot_of(key);
    let expected: u16 = cluster.nodes()[2].query(redis::cmd("CLUSTER").arg("KEYSLOT").arg("GAM"));
    assert_eq!(slot, expected, "the hash tag decides the slot");

    let owner = cluster.node_of_slot(slot);
    let () = owner.query(redis::cmd("SET").arg(key).arg("v"));
    let value: String = owner.query(redis::cmd("GET").arg(key));
    assert_eq!(value, "v");
    let others: Vec<_> = cluster
        .masters()
        .into_iter()
        .filter(|n| n.id() != owner.id())
        .collect();
    assert_eq!(others.len(), 2);
    for other in others {
        let err = try_query::<()>(other, redis::cmd("SET").arg(key).arg("w")).unwrap_err();
        assert_redirect(&err, ServerErrorKind::Moved, slot, owner);
    }
}

#[test]
fn migrate_slot_moves_a_slot_with_its_keys_under_load() {
    let cluster = Arc::new(RedisCluster::start(3, 0));
    let keys: Vec<String> = (0..2_000).map(|i| format!("ecc:{{GAM}}:{i}")).collect();
    let slot = cluster.slot_of(&keys[0]);
    let source = cluster.node_of_slot(slot);
    let pairs: Vec<(&String, &str)> = keys.iter().map(|key| (key, "before")).collect();
    let () = source.query(redis::cmd("MSET").arg(&pairs));
    let target = cluster
        .masters()
        .into_iter()
        .find(|n| n.id() != source.id())
        .unwrap();

    // A client writes and reads the slot's keys before, during and after
    // the reshard, following MOVED and ASK; every read sees its write.
    let writes = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let load = thread::spawn({
        let (cluster, keys) = (Arc::clone(&cluster), keys.clone());
        let (writes, stop) = (Arc::clone(&writes), Arc::clone(&stop));
        move || {
            let mut asks = 0;
            let mut last = HashMap::new();
            for n in 0.. {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let key = &keys[(n * 7) % keys.len()];
                let value = format!("w{n}");
                let ((), asked) = on_cluster(&cluster, key, redis::cmd("SET").arg(key).arg(&value));
                let (read, _): (String, _) = on_cluster(&cluster, key, redis::cmd("GET").arg(key));
                assert_eq!(read, value, "{key}");
                asks += usize::from(asked);
                last.insert(key.clone(), value);
                writes.fetch_add(1, Ordering::Release);
            }
            (last, asks)
        }
    });
    wait_for_count(&writes, 20);
    let started = Instant::now();
    cluster.migrate_slot(slot, target);
    let took = started.elapsed();
    wait_for_count(&writes, writes.load(Ordering::Acquire) + 20);
    stop.store(true, Ordering::Release);
    let (last, asks) = load.join().unwrap();
    eprintln!(
        "slot {slot} ({} keys) migrated in {took:?} under {} writes ({asks} ASKed)",
        keys.len(),
        writes.load(Ordering::Acquire)
    );

    assert_eq!(cluster.node_of_slot(slot).id(), target.id());
    let on_target: usize = target.query(redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot));
    assert_eq!(on_target, keys.len());
    let on_source: usize = source.query(redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot));
    assert_eq!(on_source, 0);
    let values: Vec<String> = target.query(redis::cmd("MGET").arg(&keys));
    for (key, value) in keys.iter().zip(&values) {
        let expected = last.get(key).map_or("before", String::as_str);
        assert_eq!(value, expected, "{key}");
    }
    let err = try_query::<String>(source, redis::cmd("GET").arg(&keys[0])).unwrap_err();
    assert_redirect(&err, ServerErrorKind::Moved, slot, target);
}

#[test]
fn a_slot_in_migration_splits_its_keys_and_asks() {
    let cluster = RedisCluster::start(3, 0);
    let keys: Vec<String> = (0..20).map(|i| format!("{{user}}:{i}")).collect();
    let slot = cluster.slot_of(&keys[0]);
    let source = cluster.node_of_slot(slot);
    for key in &keys {
        let () = source.query(redis::cmd("SET").arg(key).arg(key));
    }
    let target = cluster
        .masters()
        .into_iter()
        .find(|n| n.id() != source.id())
        .unwrap();

    let migration = cluster.begin_migration(slot, target);
    assert_eq!(migration.slot(), slot);
    assert_eq!(cluster.migrate_keys(&migration, 5), 5);
    // The source still owns the slot: it serves the keys it has and ASKs
    // for the others; the target serves those only after ASKING.
    assert_eq!(cluster.node_of_slot(slot).id(), source.id());
    let mut moved = Vec::new();
    for key in &keys {
        match try_query::<String>(source, redis::cmd("GET").arg(key)) {
            Ok(value) => assert_eq!(&value, key),
            Err(err) => {
                assert_redirect(&err, ServerErrorKind::Ask, slot, target);
                moved.push(key);
            }
        }
    }
    assert_eq!(moved.len(), 5, "{moved:?}");
    let err = try_query::<String>(target, redis::cmd("GET").arg(moved[0])).unwrap_err();
    assert_redirect(&err, ServerErrorKind::Moved, slot, source);
    let mut conn = target.blocking_connection();
    let () = redis::cmd("ASKING").query(&mut conn).unwrap();
    let value: String = redis::cmd("GET").arg(moved[0]).query(&mut conn).unwrap();
    assert_eq!(&value, moved[0]);

    cluster.finish_migration(migration);
    assert_eq!(cluster.node_of_slot(slot).id(), target.id());
    for key in &keys {
        let value: String = target.query(redis::cmd("GET").arg(key));
        assert_eq!(&value, key);
    }
}

#[test]
fn a_replica_takes_over_on_cluster_failover_and_when_its_master_is_killed() {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1);
    eprintln!("3 masters + 3 replicas up in {:?}", started.elapsed());
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);

    let key = "ecc:{GAM}:1";
    let slot = cluster.slot_of(key);
    let first = cluster.node_of_slot(slot);
    let () = first.query(redis::cmd("SET").arg(key).arg("v"));
    let [second] = cluster.replicas_of(first)[..] else {
        panic!("one replica per master");
    };

    // CLUSTER FAILOVER: the replica takes over, its master becomes its
    // replica.
    let started = Instant::now();
    cluster.failover(second);
    eprintln!("CLUSTER FAILOVER in {:?}", started.elapsed());
    assert_eq!(cluster.node_of_slot(slot).id(), second.id());
    let value: String = second.query(redis::cmd("GET").arg(key));
    assert_eq!(value, "v");
    let demoted: Vec<&str> = cluster.replicas_of(second).iter().map(|n| n.id()).collect();
    assert_eq!(demoted, [first.id()]);
    let err = try_query::<()>(first, redis::cmd("SET").arg(key).arg("w")).unwrap_err();
    assert_redirect(&err, ServerErrorKind::Moved, slot, second);

    // The new master killed: the old one takes over again, by election.
    let () = second.query(redis::cmd("SET").arg(key).arg("w"));
    let acked: u32 = second.query(redis::cmd("WAIT").arg(1).arg(2_000));
    assert_eq!(acked, 1, "the write reached the replica before the kill");
    let started = Instant::now();
    second.kill();
    let heir = cluster.wait_for_failover(second);
    eprintln!(
        "failover after a kill in {:?} (node timeout {:?})",
        started.elapsed(),
        cluster.node_timeout()
    );
    assert_eq!(heir.id(), first.id());
    assert_eq!(cluster.node_of_slot(slot).id(), first.id());
    let value: String = first.query(redis::cmd("GET").arg(key));
    assert_eq!(value, "w");
    assert_eq!(cluster.masters().len(), 3);
    assert_eq!(cluster.replicas().len(), 2);

    // Restarted with its id (nodes.conf), it rejoins as the heir's replica.
    let started = Instant::now();
    second.restart();
    cluster.wait_ok();
    eprintln!("the killed master rejoined in {:?}", started.elapsed());
    let replicas: Vec<&str> = cluster.replicas_of(first).iter().map(|n| n.id()).collect();
    assert_eq!(replicas, [second.id()]);
}
