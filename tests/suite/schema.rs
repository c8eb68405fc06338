//! The schema stamp sees inside nested types: a frame written by a build
//! whose value differs only inside a nested type (`Game { rules: Rules }`
//! and a change to `Rules`) is refused and refilled, not decoded into
//! wrong values.
//!
//! Two builds of one table cannot be declared in one program (a shared
//! table name or kind refuses every build), so each build here is its own
//! table: `v1` is the old build, and its frame is moved, byte for byte
//! (stamp, expiry, body), to the key of a newer build's table, under a
//! version of that table's kind. Nothing in a frame's stamp or body depends
//! on the table's name or kind, so that is the frame the old binary would
//! have left under the shared key; `same` (the old build again, under
//! another name) shows it: it reads the moved frame as its own.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use echo_cache::{Builder, Cache, Cached, Id, Source, keyspace};
use echo_cache_testkit::RedisServer;
use redis::AsyncCommands;

/// An entity the builds' values hold an id of: an id is text to the probe
/// that traces a value's shape, whatever it holds.
#[echo_cache::near_cache(kind = "SOW", ttl_ms = 60_000, name = "schema_owner")]
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Owner;

/// The old build.
mod v1 {
    use echo_cache::{Id, near_cache};

    #[near_cache(kind = "GVA", ttl_ms = 60_000, name = "schema_v1")]
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Game {
        pub rules: Rules,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Rules {
        pub lives: u32,
        pub score: u32,
        pub moves: Vec<Move>,
        pub owner: Id<super::Owner>,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub enum Move {
        Pass,
        Swap { from: u8, to: u8 },
    }

    pub fn game() -> Game {
        Game {
            rules: Rules {
                lives: 3,
                score: 1_200,
                moves: vec![Move::Swap { from: 1, to: 2 }],
                owner: Id::from_payload(7),
            },
        }
    }
}

/// The old build again, as another table: the same stamp.
mod same {
    use echo_cache::{Id, near_cache};

    #[near_cache(kind = "GSA", ttl_ms = 60_000, name = "schema_same")]
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Game {
        pub rules: Rules,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Rules {
        pub lives: u32,
        pub score: u32,
        pub moves: Vec<Move>,
        pub owner: Id<super::Owner>,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub enum Move {
        Pass,
        Swap { from: u8, to: u8 },
    }

    pub fn game() -> Game {
        Game {
            rules: Rules {
                lives: 30,
                score: 12,
                moves: vec![],
                owner: Id::from_payload(7),
            },
        }
    }
}

/// A newer build: the fields of `Rules` reordered. The old bytes would
/// decode, with `lives` and `score` swapped.
mod reordered {
    use echo_cache::{Id, near_cache};

    #[near_cache(kind = "GRO", ttl_ms = 60_000, name = "schema_reordered")]
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Game {
        pub rules: Rules,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Rules {
        pub score: u32,
        pub lives: u32,
        pub moves: Vec<Move>,
        pub owner: Id<super::Owner>,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub enum Move {
        Pass,
        Swap { from: u8, to: u8 },
    }

    pub fn game() -> Game {
        Game {
            rules: Rules {
                score: 1_200,
                lives: 3,
                moves: vec![Move::Swap { from: 1, to: 2 }],
                owner: Id::from_payload(7),
            },
        }
    }
}

/// A newer build: the fields of a variant of an enum in a `Vec` inside
/// `Rules` reordered (not its first variant). The old bytes would decode,
/// with `from` and `to` swapped.
mod variant {
    use echo_cache::{Id, near_cache};

    #[near_cache(kind = "GVR", ttl_ms = 60_000, name = "schema_variant")]
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Game {
        pub rules: Rules,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Rules {
        pub lives: u32,
        pub score: u32,
        pub moves: Vec<Move>,
        pub owner: Id<super::Owner>,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub enum Move {
        Pass,
        Swap { to: u8, from: u8 },
    }

    pub fn game() -> Game {
        Game {
            rules: Rules {
                lives: 3,
                score: 1_200,
                moves: vec![Move::Swap { to: 2, from: 1 }],
                owner: Id::from_payload(7),
            },
        }
    }
}

/// A value whose shape cannot be traced: its `Deserialize` refuses every
/// text the probe offers. Its stamp is the attribute's fingerprint alone.
mod opaque {
    use echo_cache::near_cache;

    #[near_cache(kind = "GOP", ttl_ms = 60_000, name = "schema_opaque")]
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct Note {
        pub greeting: Greeting,
    }

    #[derive(Clone, Debug, PartialEq, serde::Serialize)]
    pub struct Greeting(pub String);

    impl<'de> serde::Deserialize<'de> for Greeting {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let text = String::deserialize(deserializer)?;
            if text.starts_with("hello") {
                Ok(Greeting(text))
            } else {
                Err(serde::de::Error::custom("not a greeting"))
            }
        }
    }

    pub fn note() -> Note {
        Note {
            greeting: Greeting("hello, world".into()),
        }
    }
}

/// A loader of `T` that answers `value` and counts its calls.
fn counted<T: Cached + Clone>(
    builder: Builder,
    value: fn() -> T,
    calls: &Arc<AtomicUsize>,
) -> Builder {
    let calls = Arc::clone(calls);
    builder.loader(move |_: Id<T>| {
        calls.fetch_add(1, SeqCst);
        async move { Ok::<_, Infallible>(Some(value())) }
    })
}

/// A node with every table, and the loader calls of the newer build `T`.
fn node<T: Cached + Clone>(server: &RedisServer) -> (Cache, Arc<AtomicUsize>) {
    let (calls, others) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let count = |name: &str| {
        if name == T::spec().name() {
            &calls
        } else {
            &others
        }
    };
    let builder = cache_builder()
        .l2(server.url())
        // Generous: these tests assert L2 hits, a loaded CI must not time out.
        .l2_timeout(Duration::from_secs(2));
    let builder = counted(builder, v1::game, count("schema_v1"));
    let builder = counted(builder, same::game, count("schema_same"));
    let builder = counted(builder, reordered::game, count("schema_reordered"));
    let builder = counted(builder, variant::game, count("schema_variant"));
    let builder = counted(builder, opaque::note, count("schema_opaque"));
    (builder.build().expect("cache builds"), calls)
}

/// The old build fills a value into L2; its frame is moved to the key of
/// a fresh id of `T`, under a version of `T`'s kind, and a node reads it.
async fn moved_to<T: Cached + Clone>(
    server: &RedisServer,
) -> (echo_cache::Fetched<T>, Cache, usize) {
    let (old, _) = node::<v1::Game>(server);
    let written = Id::<v1::Game>::mint();
    assert_eq!(old.fetch(written).await.unwrap().source(), Source::Fill);
    let mut raw = server.connection().await;
    let frame: Vec<u8> = raw
        .get(keyspace::key(v1::Game::spec(), &written.raw()))
        .await
        .unwrap();

    let id = Id::<T>::mint();
    let mut moved = Id::<T>::mint().raw().to_bytes().to_vec();
    moved.extend_from_slice(&frame[echo_cache::ID_LEN..]);
    let _: () = raw
        .set(keyspace::key(T::spec(), &id.raw()), moved)
        .await
        .unwrap();

    let (new, calls) = node::<T>(server);
    let fetched = new.fetch(id).await.unwrap();
    let calls = calls.load(SeqCst);
    (fetched, new, calls)
}

#[tokio::test]
async fn the_same_value_under_another_table_reads_the_moved_frame() {
    let server = RedisServer::start();
    let (fetched, cache, calls) = moved_to::<same::Game>(&server).await;
    assert_eq!(
        fetched.source(),
        Source::L2,
        "the old build's frame is its own"
    );
    let old = v1::game().rules;
    assert_eq!(
        (fetched.rules.lives, fetched.rules.score),
        (old.lives, old.score)
    );
    assert_eq!(calls, 0);
    assert_eq!(cache.stats::<same::Game>().decode_errors, 0);
}

/// Before the value's shape was traced, this read `lives: 1200, score: 3`
/// from L2.
#[tokio::test]
async fn a_build_with_a_nested_struct_reordered_refuses_and_refills() {
    let server = RedisServer::start();
    let (fetched, cache, calls) = moved_to::<reordered::Game>(&server).await;
    assert_eq!(fetched.source(), Source::Fill, "{:?}", *fetched);
    assert_eq!(*fetched, reordered::game());
    assert_eq!(calls, 1);
    assert_eq!(cache.stats::<reordered::Game>().decode_errors, 1);
}

/// Before the value's shape was traced, this read `Swap { to: 1, from: 2 }`
/// from L2.
#[tokio::test]
async fn a_build_with_a_nested_enum_variant_changed_refuses_and_refills() {
    let server = RedisServer::start();
    let (fetched, cache, calls) = moved_to::<variant::Game>(&server).await;
    assert_eq!(fetched.source(), Source::Fill, "{:?}", *fetched);
    assert_eq!(*fetched, variant::game());
    assert_eq!(calls, 1);
    assert_eq!(cache.stats::<variant::Game>().decode_errors, 1);
}

/// A table whose value cannot be traced still opens, and its nodes share
/// its frames: its stamp (the fingerprint alone) is the same in each.
#[tokio::test]
async fn a_value_that_cannot_be_traced_still_shares_its_frames() {
    let server = RedisServer::start();
    let (a, a_calls) = node::<opaque::Note>(&server);
    let (b, b_calls) = node::<opaque::Note>(&server);
    let id = Id::<opaque::Note>::mint();
    assert_eq!(a.fetch(id).await.unwrap().source(), Source::Fill);
    let read = b.fetch(id).await.unwrap();
    assert_eq!((read.source(), &*read), (Source::L2, &opaque::note()));
    assert_eq!((a_calls.load(SeqCst), b_calls.load(SeqCst)), (1, 0));
    assert_eq!(b.stats::<opaque::Note>().decode_errors, 0);
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<v1::Game>()
        .open::<same::Game>()
        .open::<reordered::Game>()
        .open::<variant::Game>()
        .open::<opaque::Note>()
}
