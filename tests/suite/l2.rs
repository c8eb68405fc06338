//! The L2 tier against a real server: sharing between nodes, the frame on
//! the wire, bad frames, oversized values, the keyspace's cluster slots.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use echo_cache::{Cache, Cached, Id, RawId, Source, keyspace, near_cache};
use echo_cache_testkit::RedisServer;
use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;

#[near_cache(kind = "LGA", ttl_ms = 60_000, jitter = 0.1, name = "l2_games")]
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
    level: u32,
}

fn game_of(id: Id<Game>) -> Game {
    Game {
        secret: format!("secret of {id}"),
        level: 7,
    }
}

/// A cache handle, as one node would build it, counting its loader calls.
fn node(server: &RedisServer) -> (Cache, Arc<AtomicUsize>) {
    node_with(server, |builder| builder)
}

fn node_with(
    server: &RedisServer,
    configure: impl FnOnce(echo_cache::Builder) -> echo_cache::Builder,
) -> (Cache, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let builder = cache_builder()
        .l2(server.url())
        // Generous: these tests assert L2 hits, a loaded CI must not time out.
        .l2_timeout(Duration::from_secs(2))
        .loader(move |id: Id<Game>| {
            counted.fetch_add(1, SeqCst);
            async move { Ok::<_, Infallible>(Some(game_of(id))) }
        });
    (configure(builder).build().expect("cache builds"), calls)
}

fn key(id: Id<Game>) -> String {
    keyspace::key(Game::spec(), &id.raw())
}

#[tokio::test]
async fn a_second_node_reads_what_the_first_filled_from_l2() {
    let server = RedisServer::start();
    let (a, a_calls) = node(&server);
    let (b, b_calls) = node(&server);
    let id = Id::<Game>::mint();

    let filled = a.fetch(id).await.unwrap();
    assert_eq!(filled.source(), Source::Fill);
    let shared = b.fetch(id).await.unwrap();
    assert_eq!(shared.source(), Source::L2);
    assert_eq!(*shared, *filled);
    assert_eq!(shared.version(), filled.version(), "the fill's version");
    assert_eq!((a_calls.load(SeqCst), b_calls.load(SeqCst)), (1, 0));
    assert_eq!(b.stats::<Game>().l2_hits, 1);
    assert_eq!(b.fetch(id).await.unwrap().source(), Source::Hit);
}

#[tokio::test]
async fn the_frame_is_a_version_then_the_payload_with_a_jittered_expiry() {
    let server = RedisServer::start();
    let (cache, _) = node(&server);
    let id = Id::<Game>::mint();
    let filled = cache.fetch(id).await.unwrap();

    let mut raw = server.connection().await;
    let frame: Vec<u8> = raw.get(key(id)).await.unwrap();
    let version =
        RawId::parse(&frame[..echo_cache::ID_LEN]).expect("a well-formed 14-byte version");
    assert_eq!(version, filled.version(), "minted by the fill");
    assert!(version.is_newer_than(&id.raw()));
    let pttl: i64 = raw.pttl(key(id)).await.unwrap();
    // ttl 60 s ± 10 %, less what elapsed since the write.
    assert!(
        (50_000..=66_000).contains(&pttl),
        "PTTL {pttl} outside the band"
    );
    // Then the schema stamp (8 bytes) and the frame's logical expiry: the
    // same band, in Unix milliseconds.
    let at = echo_cache::ID_LEN + 8;
    let expiry = u64::from_be_bytes(frame[at..at + 8].try_into().unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let left = i128::from(expiry) - i128::try_from(now).unwrap();
    assert!(
        (50_000..=66_000).contains(&left),
        "expiry {left} ms away: outside the band"
    );
}

/// Rewrites the frame of `id` with `corrupt` and checks that a fresh node
/// refills from the loader, counts a decode error and writes a good frame.
async fn refills_over(corrupt: impl FnOnce(Vec<u8>) -> Vec<u8>) {
    let server = RedisServer::start();
    let (id, frame, mut raw) = filled(&server).await;
    let _: () = raw.set(key(id), corrupt(frame.clone())).await.unwrap();
    refills(&server, id, &frame).await;
}

/// A fresh id filled into L2 by a node: the id, its frame, and a raw
/// connection to the server.
async fn filled(server: &RedisServer) -> (Id<Game>, Vec<u8>, MultiplexedConnection) {
    let (writer, _) = node(server);
    let id = Id::<Game>::mint();
    writer.fetch(id).await.unwrap();
    let mut raw = server.connection().await;
    let frame: Vec<u8> = raw.get(key(id)).await.unwrap();
    (id, frame, raw)
}

/// A fresh node's fetch of `id` refills from the loader, counts a decode
/// error, and writes back a good frame: `frame`'s schema stamp and body,
/// at the refill's version (and with the refill's expiry).
async fn refills(server: &RedisServer, id: Id<Game>, frame: &[u8]) {
    let (reader, calls) = node(server);
    let fetched = reader.fetch(id).await.unwrap();
    assert_eq!(fetched.source(), Source::Fill);
    assert_eq!(*fetched, game_of(id));
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(reader.stats::<Game>().decode_errors, 1);
    let mut raw = server.connection().await;
    let rewritten: Vec<u8> = raw.get(key(id)).await.unwrap();
    // version (14 bytes) ++ schema (8) ++ expiry (8) ++ body
    let (version, rest) = rewritten.split_at(echo_cache::ID_LEN);
    let (schema, body) = (&rest[..8], &rest[16..]);
    let (_, good) = frame.split_at(echo_cache::ID_LEN);
    assert_eq!(
        (version, schema, body),
        (&fetched.version().to_bytes()[..], &good[..8], &good[16..]),
        "the refill wrote a good frame back"
    );
}

#[tokio::test]
async fn a_garbage_frame_is_refilled() {
    refills_over(|_| b"garbage".to_vec()).await;
}

#[tokio::test]
async fn a_truncated_frame_is_refilled() {
    refills_over(|frame| frame[..frame.len() - 3].to_vec()).await;
}

#[tokio::test]
async fn a_frame_with_a_malformed_version_is_refilled() {
    refills_over(|mut frame| {
        frame[4] = b'-';
        frame
    })
    .await;
}

#[tokio::test]
async fn a_frame_of_another_schema_is_refilled() {
    refills_over(|mut frame| {
        frame[echo_cache::ID_LEN] ^= 0xff;
        frame
    })
    .await;
}

#[tokio::test]
async fn a_key_of_another_type_is_refilled_over() {
    let server = RedisServer::start();
    let (id, frame, mut raw) = filled(&server).await;
    // Someone else's list at the key.
    let _: () = raw.del(key(id)).await.unwrap();
    let _: () = raw.rpush(key(id), "not a frame").await.unwrap();
    refills(&server, id, &frame).await;
}

/// A reader whose wall clock runs ahead of the writer's sees a frame past
/// its logical expiry while the server still keeps it: without a grace the
/// server's clock rules, so it is an L2 hit (no load), served and not kept.
#[tokio::test]
async fn a_frame_past_its_expiry_by_this_nodes_clock_is_served_not_kept() {
    let server = RedisServer::start();
    let (id, mut frame, mut raw) = filled(&server).await;
    // The expiry (after the version and the schema stamp): a minute ago.
    let at = echo_cache::ID_LEN + 8;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let past = u64::try_from(now.as_millis()).unwrap() - 60_000;
    frame[at..at + 8].copy_from_slice(&past.to_be_bytes());
    let _: () = raw.set(key(id), frame).await.unwrap();

    let (reader, calls) = node(&server);
    for _ in 0..2 {
        let read = reader.fetch(id).await.unwrap();
        assert_eq!(read.source(), Source::L2, "kept in L1, or loaded");
    }
    assert_eq!(calls.load(SeqCst), 0);
}

#[tokio::test]
async fn a_value_over_max_value_bytes_is_kept_in_l1_only() {
    let server = RedisServer::start();
    let (cache, calls) = node_with(&server, |b| b.max_value_bytes(16));
    let id = Id::<Game>::mint();
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);
    assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Hit);
    assert_eq!(calls.load(SeqCst), 1);
    assert_eq!(cache.stats::<Game>().oversized, 1);
    let mut raw = server.connection().await;
    let exists: bool = raw.exists(key(id)).await.unwrap();
    assert!(!exists, "not written to L2");
}

#[tokio::test]
async fn put_writes_through_and_invalidate_drops_both_layers() {
    let server = RedisServer::start();
    let (a, _) = node(&server);
    let (b, b_calls) = node(&server);
    let id = Id::<Game>::mint();
    let written = Game {
        secret: "put".into(),
        level: 1,
    };

    let version = a.put(id, written.clone()).await.unwrap();
    assert_ne!(version, id.raw(), "a write mints a new version");
    let read = b.fetch(id).await.unwrap();
    assert_eq!(
        (read.source(), &*read, read.version()),
        (Source::L2, &written, version)
    );

    let invalidated = a.invalidate(id).await.unwrap();
    let mut raw = server.connection().await;
    let tombstone: Vec<u8> = raw.get(key(id)).await.unwrap();
    assert_eq!(
        tombstone,
        invalidated.to_bytes(),
        "invalidate left the tombstone of its version in place of the frame"
    );
    let c = node(&server).0;
    assert_eq!(c.fetch(id).await.unwrap().source(), Source::Fill);
    assert_eq!(b_calls.load(SeqCst), 0);
}

#[tokio::test]
async fn herd_across_two_nodes_loads_at_most_once_per_node() {
    let server = RedisServer::start();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let gated_node = |gate: Arc<tokio::sync::Semaphore>| {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let cache = cache_builder()
            .l2(server.url())
            .l2_timeout(Duration::from_secs(2))
            .loader(move |id: Id<Game>| {
                counted.fetch_add(1, SeqCst);
                let gate = Arc::clone(&gate);
                async move {
                    let _pass = gate.acquire().await.expect("gate open");
                    Ok::<_, Infallible>(Some(game_of(id)))
                }
            })
            .build()
            .unwrap();
        (cache, calls)
    };
    let (a, a_calls) = gated_node(Arc::clone(&gate));
    let (b, b_calls) = gated_node(Arc::clone(&gate));
    let id = Id::<Game>::mint();

    let herd: Vec<_> = (0..1_000)
        .map(|i| {
            let node = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move { node.fetch(id).await })
        })
        .collect();
    gate.add_permits(2);
    for caller in herd {
        assert_eq!(*caller.await.unwrap().unwrap(), game_of(id));
    }
    assert!(a_calls.load(SeqCst) <= 1 && b_calls.load(SeqCst) <= 1);

    // Once a fill has landed in L2, a third node's herd is served from it.
    let (c, c_calls) = gated_node(Arc::clone(&gate));
    let herd: Vec<_> = (0..500)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.fetch(id).await })
        })
        .collect();
    for caller in herd {
        let fetched = caller.await.unwrap().unwrap();
        assert!(matches!(fetched.source(), Source::L2 | Source::Hit));
    }
    assert_eq!(c_calls.load(SeqCst), 0);
    assert_eq!(c.stats::<Game>().l2_hits, 1);
}

#[tokio::test]
async fn slots_match_cluster_keyslot_of_a_real_server() {
    let server = RedisServer::builder()
        .args(["--cluster-enabled", "yes"])
        .start();
    let mut raw = server.connection().await;
    for i in 0..2_000u64 {
        let id = RawId::new(
            echo_cache::Kind::new("GAM"),
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let keys = [
            keyspace::key(Game::spec(), &id),
            format!("plain-key-{i}"),
            format!("{{}}{i}"),
            format!("a{{b{i}}}c{{d}}"),
        ];
        for key in keys {
            let expected: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert_eq!(keyspace::slot(key.as_bytes()), expected, "{key}");
        }
    }
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder().open::<Game>()
}
