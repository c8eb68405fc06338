//! Shared by the coherence tests (`coherence/`, `coherence_*.rs`,
//! `lost_grace.rs`, `cluster.rs`): one `tracking` and one `broadcast`
//! table, which every node built here opens (one coherence link carries
//! both), a `durable` and a `none` one for the tests that open them, a
//! system of record that holds a revision per id, cache nodes built on one
//! real server, and the bounded waits of `tests/common` (re-exported).
#![allow(dead_code)]

pub mod checker;

// Each binary uses part of these; like `dead_code` above, an unused one
// must not warn.
#[allow(unused_imports)]
pub use crate::common::{BOUND, bounded, eventually, health, query};

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echo_cache::{Builder, Cache, Cached, Health, Id, RawId, keyspace};
use echo_cache_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

/// How often the coherence links PING (and how long they wait for a PONG).
pub const PING_EVERY: Duration = Duration::from_millis(200);

/// A cached entity that is nothing but its revision in the system of record.
pub trait Entity: Cached + Clone + Debug + PartialEq {
    fn at(revision: u64) -> Self;
    fn revision(&self) -> u64;

    /// The value of `id` at `revision`: [`at`](Entity::at), unless the
    /// row carries more that its id decides (a tagged table's group).
    fn of(id: Id<Self>, revision: u64) -> Self {
        let _ = id;
        Self::at(revision)
    }
}

/// Declares an [`Entity`]: a table of `$coherence` (a 10-minute TTL)
/// whose value is a revision. Each test binary declares the tables it needs
/// beyond the two below.
// rustfmt re-indents an attribute of a macro's body at every run.
#[rustfmt::skip]
macro_rules! entity {
    ($entity:ident, $kind:literal, $coherence:literal, $table:literal) => {
        #[echo_cache::near_cache(kind = $kind, ttl_ms = 600_000, coherence = $coherence, name = $table)]
        #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        pub struct $entity {
            pub revision: u64,
        }

        impl $crate::coherence_support::Entity for $entity {
            fn at(revision: u64) -> $entity {
                $entity { revision }
            }
            fn revision(&self) -> u64 {
                self.revision
            }
        }
    };
}
// Each module declares its own extra tables, or none.
#[allow(unused_imports)]
pub(crate) use entity;

entity!(Tracked, "TRK", "tracking", "tracked");
entity!(Broadcast, "BRD", "broadcast", "broadcast");
// Opened only by the tests that ask for them (`Builder::open`).
entity!(Durable, "DUR", "durable", "durable");
entity!(Plain, "PLN", "none", "plain");

/// The system of record: the revision of every id (0 until written).
#[derive(Clone, Default)]
pub struct Sor(Arc<Mutex<HashMap<RawId, u64>>>);

impl Sor {
    pub fn get(&self, id: RawId) -> u64 {
        self.lock().get(&id).copied().unwrap_or(0)
    }

    /// Writes the next revision of `id`; returns it.
    pub fn bump(&self, id: RawId) -> u64 {
        let mut map = self.lock();
        let revision = map.entry(id).or_insert(0);
        *revision += 1;
        *revision
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RawId, u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The builder of a node on `server`, with bounds generous enough for a
/// loaded CI machine and a short PING interval.
pub fn builder(server: &RedisServer) -> Builder {
    builder_for(&server.url())
}

/// [`builder`] for the server at `url`.
pub fn builder_for(url: &str) -> Builder {
    Cache::builder()
        .open::<Tracked>()
        .open::<Broadcast>()
        .l2(url)
        .l2_timeout(Duration::from_secs(2))
        .fetch_timeout(Some(BOUND))
        .coherence_ping_every(PING_EVERY)
}

/// A node whose loaders read the system of record (when called: the
/// version of the fill is minted just before).
pub fn node(server: &RedisServer, sor: &Sor) -> Cache {
    with_loaders(builder(server), sor)
        .build()
        .expect("cache builds")
}

/// `builder` with loaders of both tables that read `sor`.
pub fn with_loaders(builder: Builder, sor: &Sor) -> Builder {
    (builder.open::<Tracked>().open::<Broadcast>())
        .loader(reads::<Tracked>(sor))
        .loader(reads::<Broadcast>(sor))
}

/// A loader of `T` that reads the revision in `sor` when it is called.
pub fn reads<T: Entity>(
    sor: &Sor,
) -> impl Fn(Id<T>) -> std::future::Ready<Result<Option<T>, Infallible>> + Send + Sync + 'static {
    let sor = sor.clone();
    move |id| std::future::ready(Ok(Some(T::of(id, sor.get(id.raw())))))
}

/// Waits until the coherence link of `cache` is up ([`Cache::ready`]):
/// both tables serve.
pub async fn linked(cache: &Cache) {
    bounded("the cache to be ready", cache.ready()).await;
    assert_eq!(
        (health::<Tracked>(cache), health::<Broadcast>(cache)),
        (Health::Serving, Health::Serving),
        "a ready cache serves every table"
    );
}

/// The L2 key of `id`.
pub fn key<T: Cached>(id: Id<T>) -> String {
    keyspace::key(T::spec(), &id.raw())
}

/// What L2 holds for a key, read raw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row {
    Absent,
    /// A tombstone: exactly the 14 bytes of a version.
    Tombstone(RawId),
    /// A frame: a version, then a schema stamp and a body.
    Frame(RawId),
}

impl Row {
    pub fn version(self) -> Option<RawId> {
        match self {
            Row::Absent => None,
            Row::Tombstone(version) | Row::Frame(version) => Some(version),
        }
    }
}

/// Reads the L2 row of `id` on `connection`.
pub async fn l2_row<T: Cached>(connection: &mut MultiplexedConnection, id: Id<T>) -> Row {
    let raw: Option<Vec<u8>> = query(connection, redis::cmd("GET").arg(key(id))).await;
    match raw {
        None => Row::Absent,
        Some(bytes) => {
            assert!(bytes.len() >= echo_cache::ID_LEN, "a short L2 value");
            let version = RawId::parse(&bytes[..echo_cache::ID_LEN]).expect("a version");
            assert_eq!(version.kind(), T::KIND, "the version of a frame of T");
            if bytes.len() == echo_cache::ID_LEN {
                Row::Tombstone(version)
            } else {
                Row::Frame(version)
            }
        }
    }
}

/// The ids of the server's clients that carry coherence (tracking on, or
/// subscribed to channels): the coherence links of every node.
pub fn link_clients(server: &RedisServer) -> Vec<u64> {
    let list: String = server.query(redis::cmd("CLIENT").arg("LIST"));
    list.lines()
        .filter(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name))
                    .unwrap_or("")
                    .to_owned()
            };
            field("flags=").contains('t') || field("sub=").parse::<u64>().unwrap_or(0) > 0
        })
        .filter_map(|line| {
            line.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .and_then(|id| id.parse().ok())
        })
        .collect()
}
