//! The fleet's herd: 4 nodes (`Cache`s of one process sharing one local
//! server) each get 2,500 concurrent fetches of one cold id, and the
//! loader takes 10 ms. A `herd = "fleet"` table (one load across the
//! nodes: the others wait for the holder's frame) against a `node` table
//! (one flight per node: 4 loads side by side).
//!
//! Each round runs one herd of each table, from a rotating start; the
//! bench prints each table's median, fastest and slowest herd (wall time
//! from the first spawn to the last answer) and its loader calls per herd,
//! with the load average before and after.
//!
//! ```sh
//! cargo bench --bench fleet_herd
//! HERDS=31 cargo bench --bench fleet_herd   # 31 rounds (default 15)
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use echo_cache::{Cache, Cached, Id, near_cache};
use echo_cache_testkit::RedisServer;

#[allow(dead_code)]
mod support;

use support::{load_average, median};

#[near_cache(kind = "FLT", ttl_ms = 600_000, name = "bench_fleet", herd = "fleet")]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Fleet {
    id: u64,
}

#[near_cache(kind = "NOD", ttl_ms = 600_000, name = "bench_node")]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Node {
    id: u64,
}

const NODES: usize = 4;
const CALLERS: usize = 2_500;
const LOAD: Duration = Duration::from_millis(10);

fn node(server: &RedisServer, calls: &Arc<AtomicUsize>) -> Cache {
    let (fleet, node) = (Arc::clone(calls), Arc::clone(calls));
    Cache::builder()
        .open::<Fleet>()
        .open::<Node>()
        .l2(server.url())
        .loader(move |id: Id<Fleet>| {
            fleet.fetch_add(1, Relaxed);
            async move {
                tokio::time::sleep(LOAD).await;
                Ok::<_, std::io::Error>(Some(Fleet { id: id.payload() }))
            }
        })
        .loader(move |id: Id<Node>| {
            node.fetch_add(1, Relaxed);
            async move {
                tokio::time::sleep(LOAD).await;
                Ok::<_, std::io::Error>(Some(Node { id: id.payload() }))
            }
        })
        .build()
        .expect("cache builds")
}

/// One herd of `T`: its wall time and loader calls.
async fn herd<T: Cached>(nodes: &[Cache], calls: &AtomicUsize) -> (Duration, usize) {
    let id = Id::<T>::mint();
    let before = calls.load(Relaxed);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(NODES * CALLERS);
    for cache in nodes {
        for _ in 0..CALLERS {
            let cache = cache.clone();
            tasks.push(tokio::spawn(async move { cache.fetch(id).await.is_ok() }));
        }
    }
    for task in tasks {
        assert!(task.await.expect("no panic"), "every fetch answers");
    }
    (start.elapsed(), calls.load(Relaxed) - before)
}

fn main() {
    let rounds: usize = std::env::var("HERDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(15);
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let load_before = load_average();
    let (fleet, node_table) = runtime.block_on(async {
        let calls = Arc::new(AtomicUsize::new(0));
        let nodes: Vec<Cache> = (0..NODES).map(|_| node(&server, &calls)).collect();
        // Warm the connections (and the script cache) first.
        herd::<Fleet>(&nodes, &calls).await;
        herd::<Node>(&nodes, &calls).await;
        let (mut fleet, mut node_table) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                fleet.push(herd::<Fleet>(&nodes, &calls).await);
                node_table.push(herd::<Node>(&nodes, &calls).await);
            } else {
                node_table.push(herd::<Node>(&nodes, &calls).await);
                fleet.push(herd::<Fleet>(&nodes, &calls).await);
            }
        }
        (fleet, node_table)
    });
    println!(
        "fleet herd: {NODES} nodes x {CALLERS} fetches of one cold id, a {} ms loader, {rounds} rounds",
        LOAD.as_millis()
    );
    for (name, herds) in [
        ("herd = \"fleet\"", fleet),
        ("herd = \"node\" ", node_table),
    ] {
        let mut times: Vec<f64> = herds.iter().map(|h| h.0.as_secs_f64() * 1e3).collect();
        times.sort_by(f64::total_cmp);
        let calls: Vec<usize> = herds.iter().map(|h| h.1).collect();
        println!(
            "{name}: median {:>7.2} ms (fastest {:.2}, slowest {:.2}), loader calls per herd {}..={}",
            median(&times),
            times[0],
            times[times.len() - 1],
            calls.iter().min().expect("a herd"),
            calls.iter().max().expect("a herd"),
        );
    }
    println!(
        "load average: before {load_before}, after {}",
        load_average()
    );
}
