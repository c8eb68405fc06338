//! Versions are unique across the processes sharing an L2, with nothing
//! configured: two OS processes (this test binary, run again as children
//! through the ignored test `minting_child`) build a cache on one server,
//! wait until it is ready (their node numbers claimed), then mint as fast
//! as they can over the same wall-clock window. No version may be minted
//! twice.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::BOUND;
use echo_cache::{Cache, Kind, Minter, RawId, near_cache};
use echo_cache_testkit::RedisServer;

/// The one table of the children's caches (the suite's binary declares
/// many; a cache opens what it is told to).
#[near_cache(kind = "VRS", ttl_ms = 60_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Minted;

/// Set in a child's environment: `<server url> <start, unix ms> <output file>`.
const CHILD_ENV: &str = "ECHO_CACHE_MINTING_CHILD";
/// How long each child mints, in bursts.
const WINDOW: Duration = Duration::from_millis(300);
const KIND: Kind = Kind::new("VER");

fn unix_ms() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(now.as_millis()).expect("in range")
}

#[test]
fn two_processes_on_one_l2_never_mint_the_same_version() {
    let server = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("echo-versions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    // Late enough for both children to start and claim a number.
    let start = unix_ms() + 3_000;
    let outputs: Vec<_> = (0..2).map(|i| dir.join(format!("child-{i}"))).collect();
    let mut children: Vec<_> = outputs
        .iter()
        .map(|output| {
            Command::new(std::env::current_exe().expect("the test binary"))
                .args([
                    "versions::minting_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                ])
                .env(
                    CHILD_ENV,
                    format!("{} {start} {}", server.url(), output.display()),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("a child starts")
        })
        .collect();
    let deadline = std::time::Instant::now() + BOUND;
    for child in &mut children {
        let status = loop {
            if let Some(status) = child.try_wait().expect("the child's status") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("a child did not finish within {BOUND:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "a child failed: {status}");
    }

    let mut seen = HashSet::new();
    let mut nodes = Vec::new();
    for output in &outputs {
        let bytes = std::fs::read(output).expect("the child's versions");
        let payloads: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("8 bytes")))
            .collect();
        assert!(payloads.len() > 1_000, "a child minted {}", payloads.len());
        nodes.push(Minter::node_of(&RawId::new(KIND, payloads[0])));
        for payload in payloads {
            assert!(
                seen.insert(payload),
                "version {} minted twice (nodes {nodes:?})",
                RawId::new(KIND, payload)
            );
        }
    }
    assert_ne!(nodes[0], nodes[1], "each process claimed its own number");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child of `two_processes_on_one_l2_never_mint_the_same_version` (does
/// nothing without its environment).
#[tokio::test]
#[ignore = "the child process of two_processes_on_one_l2_never_mint_the_same_version"]
async fn minting_child() {
    let Ok(setting) = std::env::var(CHILD_ENV) else {
        return;
    };
    let words: Vec<&str> = setting.split(' ').collect();
    let [url, start, output] = words[..] else {
        panic!("{CHILD_ENV}={setting:?}: expected a URL, a time and a path");
    };
    let start: u64 = start.parse().expect("a time");
    let cache = (Cache::builder().open::<Minted>())
        .without_loader::<Minted>()
        .l2(url)
        .build()
        .expect("cache builds");
    tokio::time::timeout(BOUND, cache.ready())
        .await
        .expect("the cache is ready");
    tokio::time::sleep(Duration::from_millis(start.saturating_sub(unix_ms()))).await;
    let until = std::time::Instant::now() + WINDOW;
    let mut minted = Vec::new();
    // Bursts of 200 a millisecond: the two children share milliseconds.
    while std::time::Instant::now() < until {
        for _ in 0..200 {
            minted.extend_from_slice(&Minter::global().mint_raw(KIND).payload().to_le_bytes());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::fs::write(output, minted).expect("write the versions");
    drop(cache);
}
