//! L2 outages against a real server: killed, restarted, paused. No error
//! reaches a caller while the loader is healthy, no caller waits past the
//! L2 timeout plus the loader, and L2 is used again when it comes back.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use echo_cache::{Cache, Health, Id, Source, near_cache};
use echo_cache_testkit::RedisServer;

use crate::common::{eventually_within, health};

#[near_cache(kind = "OUT", ttl_ms = 60_000, name = "outage_games")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

const L2_TIMEOUT: Duration = Duration::from_millis(100);
const LOADER_TIME: Duration = Duration::from_millis(20);
/// What a fetch may take at most: an L2 read that times out, the loader,
/// and slack for a loaded machine.
const BOUND: Duration = Duration::from_secs(3);

fn node(server: &RedisServer) -> Cache {
    node_timed(server, L2_TIMEOUT)
}

/// A node whose L2 commands time out after `l2_timeout`.
fn node_timed(server: &RedisServer, l2_timeout: Duration) -> Cache {
    cache_builder()
        .l2(server.url())
        .l2_timeout(l2_timeout)
        .l2_probe_every(Duration::from_millis(100))
        .loader(|id: Id<Game>| async move {
            tokio::time::sleep(LOADER_TIME).await;
            Ok::<_, Infallible>(Some(Game {
                secret: id.to_string(),
            }))
        })
        .build()
        .expect("cache builds")
}

/// Fetches a fresh id within [`BOUND`]; the loader must answer it.
async fn fetch_fresh(cache: &Cache) -> Source {
    let id = Id::<Game>::mint();
    let fetched = tokio::time::timeout(BOUND, cache.fetch(id))
        .await
        .expect("answered within the bound")
        .expect("no error reaches the caller");
    assert_eq!(fetched.secret, id.to_string());
    fetched.source()
}

/// How long a wait for L2 to be used again (or a write dropped) lasts at
/// most, and how often it polls: each probe is a fetch, which may wait out
/// the L2 timeout.
const RECOVERY: Duration = Duration::from_secs(10);
const RECOVERY_POLL: Duration = Duration::from_millis(20);

/// Waits until a fill by `cache` lands in L2 again: a fresh node reads it
/// from there.
async fn l2_used_again(server: &RedisServer, cache: &Cache, what: &str) {
    eventually_within(RECOVERY, RECOVERY_POLL, what, async || {
        let id = Id::<Game>::mint();
        cache.fetch(id).await.expect("loader answers");
        node(server).fetch(id).await.expect("answers").source() == Source::L2
    })
    .await;
}

#[tokio::test]
async fn a_killed_server_falls_through_to_the_loader_and_is_used_again_after_restart() {
    let server = RedisServer::start();
    let cache = node(&server);
    assert_eq!(fetch_fresh(&cache).await, Source::Fill);
    assert_eq!(cache.stats::<Game>().l2_errors, 0);

    server.kill();
    for _ in 0..20 {
        assert_eq!(fetch_fresh(&cache).await, Source::Fill);
    }
    let stats = cache.stats::<Game>();
    assert!(stats.l2_errors > 0, "{stats:?}");
    assert!(
        stats.l2_writes_dropped > 0,
        "writes during the outage are dropped and counted"
    );
    assert_eq!(health::<Game>(&cache), Health::L2Down);

    server.restart();
    // A fill by this node lands in L2 again: a fresh node reads it from there.
    l2_used_again(&server, &cache, "L2 is used again").await;
    assert_eq!(health::<Game>(&cache), Health::Serving);
}

#[tokio::test]
async fn a_paused_server_costs_at_most_the_l2_timeout() {
    let server = RedisServer::start();
    let cache = node(&server);
    assert_eq!(fetch_fresh(&cache).await, Source::Fill);

    server.pause();
    for _ in 0..5 {
        assert_eq!(fetch_fresh(&cache).await, Source::Fill);
    }
    assert!(cache.stats::<Game>().l2_errors > 0);
    server.resume();

    l2_used_again(&server, &cache, "L2 is used again after the pause").await;
}

/// The first fetch of an outage (the breaker still closed) is answered
/// once the loader has, its L2 read having timed out: its L2 write, which
/// times out too, goes on without the caller, and is dropped (counted).
#[tokio::test]
async fn a_fetch_during_an_outage_waits_for_one_l2_timeout_not_two() {
    let l2_timeout = Duration::from_millis(300);
    let server = RedisServer::start();
    let cache = node_timed(&server, l2_timeout);
    assert_eq!(fetch_fresh(&cache).await, Source::Fill);

    server.pause();
    let started = Instant::now();
    assert_eq!(fetch_fresh(&cache).await, Source::Fill);
    let took = started.elapsed();
    // Slack for a loaded machine: half a timeout.
    assert!(
        took < l2_timeout + LOADER_TIME + l2_timeout / 2,
        "answered after {took:?}: the read's timeout, the loader, and the write's"
    );
    eventually_within(
        RECOVERY,
        RECOVERY_POLL,
        "the write to be dropped",
        async || cache.stats::<Game>().l2_writes_dropped > 0,
    )
    .await;
    server.resume();
}

#[tokio::test]
async fn a_cache_built_while_the_server_is_down_serves_and_catches_up() {
    let server = RedisServer::start();
    server.kill();
    let cache = node(&server);
    assert_eq!(fetch_fresh(&cache).await, Source::Fill);
    server.restart();
    l2_used_again(&server, &cache, "L2 is used once the server is up").await;
}

#[tokio::test]
async fn a_bad_l2_address_is_refused_at_build() {
    let error = cache_builder().l2("not a url").build().unwrap_err();
    assert!(matches!(error, echo_cache::Error::Config(_)), "{error}");
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Game>()
}
