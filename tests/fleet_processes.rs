//! One load per herd across OS processes (`herd = "fleet"`): the nodes are
//! processes of their own, this test binary run again with a role
//! ([`ROLE`]) by the parent tests, each connecting to the parent's server
//! on loopback.
//!
//! - 4 processes × 2,500 concurrent fetches of one cold id: one loader call.
//! - The lease holder killed mid-load: another process loads, and every
//!   caller is answered within the lease plus the load deadline (each
//!   child's fetch timeout).
//!
//! A child's loader lets its load finish only once the other children wait
//! for its lease (the server's `blocked_clients`), so the herd overlaps in
//! fact. A child prints `FLEET loads=<n> ok=<n>` and exits.

use std::convert::Infallible;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use echo_cache::{Cache, Cached, Id, keyspace, near_cache};
use echo_cache_testkit::RedisServer;

#[path = "common/mod.rs"]
mod common;

use common::{Calls, eventually};

#[near_cache(
    kind = "FPG",
    ttl_ms = 600_000,
    name = "fleet_process_games",
    herd = "fleet"
)]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Game {
    rev: u64,
}

/// The child's role: `load` (its loader finishes once `WAITERS` other
/// processes wait) or `hang` (its loader never finishes).
const ROLE: &str = "ECHO_FLEET_ROLE";
const URL: &str = "ECHO_FLEET_URL";
const ID: &str = "ECHO_FLEET_ID";
const WAITERS: &str = "ECHO_FLEET_WAITERS";

const CALLERS: usize = 2_500;
/// Each node's load deadline: its leases last half of it.
const LOAD_TIMEOUT: Duration = Duration::from_secs(4);
const LEASE: Duration = Duration::from_secs(2);

/// How many clients `server` holds blocked (nodes waiting for a lease).
async fn blocked(url: &str) -> usize {
    let client = redis::Client::open(url).expect("a URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut connection)
        .await
        .expect("INFO");
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"));
    line.expect("blocked_clients")
        .trim()
        .parse()
        .expect("a count")
}

/// A child process's work (a no-op in the parent's test run): a node that
/// fetches the id `CALLERS` times at once and prints what it got.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL).expect("the server's URL");
    let id: Id<Game> = std::env::var(ID).expect("the id").parse().expect("an id");
    let waiters: usize = std::env::var(WAITERS)
        .expect("waiters")
        .parse()
        .expect("a count");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let calls = Calls::default();
        let loads = calls.clone();
        let loader_url = url.clone();
        let cache = Cache::builder()
            .open::<Game>()
            .l2(&url)
            .l2_timeout(Duration::from_secs(2))
            .load_timeout(LOAD_TIMEOUT)
            .fetch_timeout(Some(LEASE + LOAD_TIMEOUT))
            .loader(move |_: Id<Game>| {
                loads.count();
                let (hang, url) = (role == "hang", loader_url.clone());
                async move {
                    if hang {
                        std::future::pending::<()>().await;
                    }
                    // Bounded by the flight's deadline.
                    while blocked(&url).await < waiters {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Ok::<_, Infallible>(Some(Game { rev: 7 }))
                }
            })
            .build()
            .expect("cache builds");
        let fetches: Vec<_> = (0..CALLERS)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.fetch(id).await })
            })
            .collect();
        let mut ok = 0;
        for fetch in fetches {
            if fetch
                .await
                .expect("no panic")
                .is_ok_and(|f| f.value().rev == 7)
            {
                ok += 1;
            }
        }
        println!("FLEET loads={} ok={ok}", calls.get());
    });
}

/// Starts a child node of `role` on `id`.
fn spawn(server: &RedisServer, id: Id<Game>, role: &str, waiters: usize) -> Child {
    Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(URL, server.url())
        .env(ID, id.to_string())
        .env(WAITERS, waiters.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child starts")
}

/// A child's report: its loader calls and its callers answered.
fn report(child: Child) -> (usize, usize) {
    let output = child.wait_with_output().expect("the child ends");
    assert!(
        output.status.success(),
        "the child fails: {:?}",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("FLEET ").map(|(_, report)| report))
        .expect("the child reports");
    let field = |name: &str| -> usize {
        let value = line.split(' ').find_map(|f| f.strip_prefix(name));
        value.expect("a field").parse().expect("a count")
    };
    (field("loads="), field("ok="))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_herding_on_one_cold_id_call_the_loader_once() {
    let server = RedisServer::start();
    let id = Id::<Game>::mint();
    let children: Vec<_> = (0..4).map(|_| spawn(&server, id, "load", 3)).collect();
    let reports =
        tokio::task::spawn_blocking(move || children.into_iter().map(report).collect::<Vec<_>>());
    let reports = reports.await.unwrap();
    let loads: usize = reports.iter().map(|r| r.0).sum();
    assert_eq!(loads, 1, "one loader call across 4 processes: {reports:?}");
    assert!(
        reports.iter().all(|r| r.1 == CALLERS),
        "every caller answered: {reports:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_holder_killed_mid_load_lets_another_process_load() {
    let server = RedisServer::start();
    let id = Id::<Game>::mint();
    let mut holder = spawn(&server, id, "hang", 0);
    let lease = format!("{}:lease", keyspace::key(Game::spec(), &id.raw()));
    let client = server.client();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    eventually("the holder to take the lease", async || {
        let exists: u64 = redis::cmd("EXISTS")
            .arg(&lease)
            .query_async(&mut connection)
            .await
            .unwrap();
        exists == 1
    })
    .await;
    let waiters: Vec<_> = (0..3).map(|_| spawn(&server, id, "load", 2)).collect();
    let url = server.url();
    eventually("the others to wait for it", async || {
        blocked(&url).await == 3
    })
    .await;
    holder.kill().expect("the holder dies");
    holder.wait().expect("reaped");

    let reports =
        tokio::task::spawn_blocking(move || waiters.into_iter().map(report).collect::<Vec<_>>());
    let reports = reports.await.unwrap();
    let loads: usize = reports.iter().map(|r| r.0).sum();
    assert_eq!(
        loads, 1,
        "one of the others loads once the lease is out: {reports:?}"
    );
    assert!(
        reports.iter().all(|r| r.1 == CALLERS),
        "every caller answered within the lease plus the deadline: {reports:?}"
    );
}
