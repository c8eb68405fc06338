//! The tables of the cluster bench and what its parts ask of a table: the
//! six tables of parts 2 and 3 (one per coherence mode and part, each a
//! revision loaded as the id's payload, declared together so that their
//! kinds and names are seen to differ), a loader that counts its calls
//! ([`with_loader`]), and a table's slot, health and wait for `Serving`.
//! Part 1's table, `clu_profile`, is in [`crate::fill`].

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use echo_cache::{Builder, Cache, Cached, Health, Id, keyspace, near_cache};
use tokio::runtime::Runtime;

/// A table of parts 2 and 3: a revision, loaded as the id's payload.
pub trait Revised: Cached {
    fn at(revision: u64) -> Self;
}

macro_rules! revised {
    ($($(#[$doc:meta])* $name:ident: $kind:literal, $coherence:literal, $table:literal;)*) => {$(
        $(#[$doc])*
        #[near_cache(
            kind = $kind,
            ttl_ms = 600_000,
            coherence = $coherence,
            name = $table,
            loader = load_revised::<$name>
        )]
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
        pub struct $name {
            /// A payload.
            pub revision: u64,
        }

        impl Revised for $name {
            fn at(revision: u64) -> Self {
                $name { revision }
            }
        }
    )*};
}

revised! {
    /// Part 2, `tracking`.
    CluTracked: "CLT", "tracking", "clu_tracked";
    /// Part 2, `broadcast`.
    CluBroadcast: "CLB", "broadcast", "clu_broadcast";
    /// Part 2, `durable`.
    CluDurable: "CLD", "durable", "clu_durable";
    /// Part 3, `tracking`.
    RshTracked: "RST", "tracking", "rsh_tracked";
    /// Part 3, `broadcast`.
    RshBroadcast: "RSB", "broadcast", "rsh_broadcast";
    /// Part 3, `durable`.
    RshDurable: "RSD", "durable", "rsh_durable";
}

/// The loader a table of parts 2 and 3 declares. Each part counts the
/// loads of the tables it reads with [`with_loader`], which overrides it.
fn load_revised<T: Revised>(id: Id<T>) -> std::future::Ready<Result<Option<T>, Infallible>> {
    std::future::ready(Ok(Some(T::at(id.payload()))))
}

/// `builder` with a loader of `T` that counts its calls in `calls`.
pub fn with_loader<T: Revised>(builder: Builder, calls: &Arc<AtomicU64>) -> Builder {
    let calls = Arc::clone(calls);
    builder.loader(move |id: Id<T>| {
        calls.fetch_add(1, Relaxed);
        async move { Ok::<_, Infallible>(Some(T::at(id.payload()))) }
    })
}

/// The slot of `T`'s keys.
pub fn slot_of<T: Cached>() -> u16 {
    keyspace::slot(keyspace::prefix(T::spec()).as_bytes())
}

/// `T`'s health on `cache`.
pub fn health_of<T: Cached>(cache: &Cache) -> Option<Health> {
    cache
        .tables()
        .into_iter()
        .find(|t| t.spec.name() == T::spec().name())
        .map(|t| t.health)
}

/// Waits (on `rt`) until `T` is `Serving` on every cache; false after
/// `within`.
pub fn serving<T: Cached>(rt: &Runtime, caches: &[&Cache], within: Duration) -> bool {
    rt.block_on(async {
        let deadline = Instant::now() + within;
        loop {
            if caches
                .iter()
                .all(|c| health_of::<T>(c) == Some(Health::Serving))
            {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}
