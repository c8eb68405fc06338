//! Writers in any language: `tests/wire/writer.py`, a Python program that
//! knows only `docs/wire.md` and redis-py, puts one entity and invalidates
//! another while two echo-cache nodes read, in each coherence mode that
//! carries invalidations (`broadcast`, `durable`, `tracking`). The nodes
//! must read the Python frame as an L2 hit and drop the Python-invalidated
//! row; and a Python flush of the table must empty every node's L1.
//!
//! The writer runs under `python3` (or `ECHO_CACHE_TEST_PYTHON`); a missing
//! interpreter or redis-py fails the test, it is never skipped
//! (`scripts/test` installs both).

use std::convert::Infallible;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;

use echo_cache::{Cache, Cached, Health, Id, RawId, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;

use crate::common::{eventually, health};

/// A value a Python writer can encode: `{ n: u32, name: String }` in
/// postcard (docs/wire.md, section 3).
trait Wired: Cached + Clone + Send + Sync + 'static {
    fn new(n: u32, name: &str) -> Self;
    fn n(&self) -> u32;
    fn name(&self) -> &str;
}

macro_rules! wired {
    ($ty:ident, $kind:literal, $name:literal, $coherence:literal) => {
        #[near_cache(kind = $kind, ttl_ms = 600_000, coherence = $coherence, name = $name)]
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct $ty {
            n: u32,
            name: String,
        }

        impl Wired for $ty {
            fn new(n: u32, name: &str) -> Self {
                $ty {
                    n,
                    name: name.to_owned(),
                }
            }
            fn n(&self) -> u32 {
                self.n
            }
            fn name(&self) -> &str {
                &self.name
            }
        }
    };
}

wired!(WiredBroadcast, "WIB", "wire_broadcast", "broadcast");
wired!(WiredDurable, "WID", "wire_durable", "durable");
wired!(WiredTracking, "WIT", "wire_tracking", "tracking");

/// A node whose loader answers `{ n: <loads so far>, name: "loaded" }`.
fn node<T: Wired>(server: &RedisServer, name: &str, loads: &Arc<AtomicU32>) -> Cache {
    let loads = Arc::clone(loads);
    Cache::builder()
        .open::<T>()
        .l2(server.url())
        .l2_timeout(Duration::from_secs(2))
        .coherence_ping_every(Duration::from_millis(200))
        .node_name(name)
        .loader(move |_: Id<T>| {
            let n = loads.fetch_add(1, SeqCst) + 1;
            async move { Ok::<_, Infallible>(Some(T::new(n, "loaded"))) }
        })
        .build()
        .expect("cache builds")
}

/// What the writer printed for one write: its version and the script's
/// reply.
struct Written {
    version: RawId,
    reply: String,
}

/// Runs `tests/wire/writer.py` against `server`; panics, with what it
/// said, unless it succeeds.
fn python_writer<T: Cached>(server: &RedisServer, args: &[String]) -> Vec<(String, Written)> {
    let python = std::env::var("ECHO_CACHE_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("wire/writer.py");
    let spec = T::spec();
    let output = Command::new(&python)
        .arg(&script)
        .args(["--url", &server.url()])
        .args(["--table", spec.name()])
        .args(["--kind", spec.kind().as_str()])
        .args(["--coherence", &spec.coherence().to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{python}` for the Python wire writer ({e}): install python3 \
                 and redis-py (`apt-get install python3-redis` or \
                 `python3 -m pip install redis`; scripts/test does), or point \
                 ECHO_CACHE_TEST_PYTHON at an interpreter"
            )
        });
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "the Python wire writer failed ({}):\n{stderr}{stdout}",
        output.status
    );
    stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let [op, id, version, reply] = fields[..] else {
                panic!("the writer printed `{line}`")
            };
            let version = version.parse().expect("the writer's version is an id");
            let reply = reply.to_owned();
            (format!("{op} {id}"), Written { version, reply })
        })
        .collect()
}

async fn serving<T: Cached>(cache: &Cache) {
    eventually("the coherence lane is up", async || {
        health::<T>(cache) == Health::Serving
    })
    .await;
}

/// Python puts `written` and invalidates `dropped` while two nodes hold
/// `dropped` in L1: both read the Python frame as an L2 hit, and both drop
/// their row of `dropped` and load it afresh.
async fn a_python_writer_is_read_and_obeyed<T: Wired>() {
    let server = RedisServer::start();
    let loads = Arc::new(AtomicU32::new(0));
    let table = T::spec().name();
    let (a, b) = (
        node::<T>(&server, &format!("{table}-a"), &loads),
        node::<T>(&server, &format!("{table}-b"), &loads),
    );
    serving::<T>(&a).await;
    serving::<T>(&b).await;

    // A frame written by a node, for the writer to copy the stamp from.
    let seed = Id::<T>::mint();
    assert_eq!(a.fetch(seed).await.unwrap().source(), Source::Fill);
    // A row both nodes hold in L1.
    let dropped = Id::<T>::mint();
    let held = a.fetch(dropped).await.unwrap();
    assert_eq!(b.fetch(dropped).await.unwrap().source(), Source::L2);
    assert_eq!(a.fetch(dropped).await.unwrap().source(), Source::Hit);
    assert_eq!(b.fetch(dropped).await.unwrap().source(), Source::Hit);
    let loaded = loads.load(SeqCst);

    let written = Id::<T>::mint();
    let writes = python_writer::<T>(
        &server,
        &[
            "--put".into(),
            written.to_string(),
            "300".into(),
            "py".into(),
            "--invalidate".into(),
            dropped.to_string(),
        ],
    );
    let [(put, put_at), (invalidate, invalidated_at)] = &writes[..] else {
        panic!("two writes expected")
    };
    assert_eq!(put, &format!("put {written}"));
    assert_eq!(invalidate, &format!("invalidate {dropped}"));
    assert_eq!(
        (put_at.reply.as_str(), invalidated_at.reply.as_str()),
        ("1", "1")
    );
    assert!(invalidated_at.version.is_newer_than(&held.version()));

    // The Python frame: an L2 hit on each node, not a load.
    for cache in [&a, &b] {
        let read = cache.fetch(written).await.unwrap();
        assert_eq!(read.source(), Source::L2);
        assert_eq!((read.n(), read.name()), (300, "py"));
        assert_eq!(read.version(), put_at.version);
        assert_eq!(cache.stats::<T>().decode_errors, 0);
    }
    assert_eq!(loads.load(SeqCst), loaded, "the put was read, not loaded");

    // The Python tombstone: in L2, and the row gone from both nodes.
    let key = keyspace::key(T::spec(), &dropped.raw());
    let tombstone: Vec<u8> = server.query(redis::cmd("GET").arg(&key));
    assert_eq!(tombstone, invalidated_at.version.to_bytes());
    for cache in [&a, &b] {
        eventually("the Python invalidation drops the row", async || {
            cache.fetch(dropped).await.unwrap().source() != Source::Hit
        })
        .await;
        let fresh = cache.fetch(dropped).await.unwrap();
        assert!(fresh.n() > held.n(), "loaded afresh, not the old row");
        assert!(fresh.version().is_newer_than(&invalidated_at.version));
    }
}

/// Python flushes the table: every node drops every row it holds.
async fn a_python_flush_empties_every_node<T: Wired>() {
    let server = RedisServer::start();
    let loads = Arc::new(AtomicU32::new(0));
    let table = T::spec().name();
    let (a, b) = (
        node::<T>(&server, &format!("{table}-fa"), &loads),
        node::<T>(&server, &format!("{table}-fb"), &loads),
    );
    serving::<T>(&a).await;
    serving::<T>(&b).await;
    let ids = [Id::<T>::mint(), Id::<T>::mint()];
    for id in ids {
        for cache in [&a, &b] {
            cache.fetch(id).await.unwrap();
            assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
        }
    }

    let writes = python_writer::<T>(&server, &["--flush".into()]);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].0, "flush *");
    for id in ids {
        for cache in [&a, &b] {
            eventually("the Python flush drops the row", async || {
                cache.fetch(id).await.unwrap().source() != Source::Hit
            })
            .await;
        }
    }
}

#[tokio::test]
async fn a_python_flush_on_a_broadcast_table() {
    a_python_flush_empties_every_node::<WiredBroadcast>().await;
}

#[tokio::test]
async fn a_python_flush_on_a_durable_table() {
    a_python_flush_empties_every_node::<WiredDurable>().await;
}

#[tokio::test]
async fn a_python_flush_on_a_tracking_table() {
    a_python_flush_empties_every_node::<WiredTracking>().await;
}

#[tokio::test]
async fn a_python_writer_on_a_broadcast_table() {
    a_python_writer_is_read_and_obeyed::<WiredBroadcast>().await;
}

#[tokio::test]
async fn a_python_writer_on_a_durable_table() {
    a_python_writer_is_read_and_obeyed::<WiredDurable>().await;
}

#[tokio::test]
async fn a_python_writer_on_a_tracking_table() {
    a_python_writer_is_read_and_obeyed::<WiredTracking>().await;
}
