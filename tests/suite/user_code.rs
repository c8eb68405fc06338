//! User code never runs under an internal lock, and a panic in it leaves
//! the cache working: a value's `Drop` may call back into the cache, and
//! one that panics stops neither the writer that freed it nor the
//! maintenance thread (the clock, the sweeper, reclamation).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{BOUND, eventually};
use echo_cache::{Cache, Id, Source, near_cache};

/// The cache the values' destructors call back into.
static CACHE: OnceLock<Cache> = OnceLock::new();
static REENTERED: AtomicUsize = AtomicUsize::new(0);
static EXPLODED: AtomicUsize = AtomicUsize::new(0);

/// A value whose `Drop` uses the cache: it flushes its own table (which
/// takes every flight lock of the table) and reads its counters.
#[near_cache(kind = "RNT", ttl_ms = 600_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Reentrant {
    n: u64,
}

impl Drop for Reentrant {
    fn drop(&mut self) {
        if let Some(cache) = CACHE.get() {
            cache.flush::<Reentrant>();
            let _ = cache.stats::<Reentrant>();
            REENTERED.fetch_add(1, SeqCst);
        }
    }
}

/// A value whose `Drop` panics.
#[near_cache(kind = "BMB", ttl_ms = 600_000)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Bomb {
    n: u64,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        // Only the values L1 held: the test's own copies are forgotten.
        EXPLODED.fetch_add(1, SeqCst);
        panic!("a Drop that panics");
    }
}

/// Rows that die fast, to see the clock and the sweeper at work.
#[near_cache(kind = "SHT", ttl_ms = 50, jitter = 0.0, sweep_ms = 10)]
#[derive(serde::Serialize, serde::Deserialize)]
struct Short {
    n: u64,
}

fn cache() -> &'static Cache {
    CACHE.get_or_init(|| {
        cache_builder()
            .loader(|id: Id<Short>| async move {
                Ok::<_, std::io::Error>(Some(Short { n: id.payload() }))
            })
            .without_loader::<Reentrant>()
            .without_loader::<Bomb>()
            .build()
            .expect("no conflict, and every table loads or is put-only")
    })
}

/// Runs `work` on a thread of its own with a runtime of its own; fails the
/// test if it does not finish within [`BOUND`] (a deadlock).
fn finishes(what: &str, work: impl AsyncFnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(work());
        let _ = done.send(());
    });
    assert!(
        finished.recv_timeout(BOUND).is_ok(),
        "{what} did not finish within {BOUND:?}: deadlocked, or panicked"
    );
}

#[test]
fn a_values_drop_may_call_back_into_the_cache() {
    let cache = cache();
    finishes("puts whose replaced values flush the table", async || {
        let id = Id::<Reentrant>::mint();
        for n in 0..500 {
            cache.put(id, Reentrant { n }).await.expect("put");
            cache.invalidate(id).await.expect("invalidate");
        }
    });
    assert!(
        REENTERED.load(SeqCst) > 0,
        "the values were freed while the test ran"
    );
}

#[test]
fn a_drop_that_panics_stops_neither_writers_nor_the_maintenance_thread() {
    let cache = cache();
    finishes(
        "puts and invalidations of values that panic when dropped",
        async || {
            for n in 0..200 {
                let id = Id::<Bomb>::mint();
                cache.put(id, Bomb { n }).await.expect("put");
                cache.invalidate(id).await.expect("invalidate");
            }
        },
    );
    finishes("the maintenance thread frees them", async || {
        eventually("every value L1 held to be freed", async || {
            EXPLODED.load(SeqCst) >= 200
        })
        .await;
    });

    // The maintenance thread still ticks the clock and sweeps.
    finishes("a row expires and is swept", async || {
        let id = Id::<Short>::mint();
        assert_eq!(cache.fetch(id).await.unwrap().source(), Source::Fill);
        let swept = cache.stats::<Short>().swept;
        eventually("the row to expire", async || {
            cache.fetch(id).await.unwrap().source() == Source::Fill
        })
        .await;
        eventually("the sweeper to run", async || {
            tokio::time::sleep(Duration::from_millis(5)).await;
            cache.stats::<Short>().swept > swept
        })
        .await;
    });
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Reentrant>()
        .open::<Bomb>()
        .open::<Short>()
}
