//! A full table keeps the hot rows (`eviction = "hot"`, the default), or
//! keeps what it has (`eviction = "none"`, the seed's rule); either way it
//! never holds more than `max_size` rows and never refuses a read.
//!
//! Every clock here is [`Clock::manual`] and rows live an hour: nothing
//! dies unless a test moves the clock.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{bounded, eventually, health};
use echo_cache::{Cache, Cached, Clock, Eviction, Health, Id, Source, near_cache};

/// A hundred rows at most, evicting the cold ones (the default).
#[near_cache(kind = "HOT", ttl_ms = 3_600_000, jitter = 0.0, max_size = 100)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hot {
    n: u64,
}

/// A hundred rows at most, and a full table evicts nothing.
#[near_cache(
    kind = "KPT",
    ttl_ms = 3_600_000,
    jitter = 0.0,
    max_size = 100,
    eviction = "none"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Kept {
    n: u64,
}

/// Values whose drop, once the test arms it, flushes their own table: that
/// takes every flight lock of the table, so a drop under one of the
/// table's locks would deadlock.
#[near_cache(kind = "DRP", ttl_ms = 3_600_000, max_size = 10)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Dropped {
    n: u64,
}

static CACHE: OnceLock<Cache> = OnceLock::new();
static ARMED: AtomicBool = AtomicBool::new(false);
static REENTERED: AtomicUsize = AtomicUsize::new(0);

impl Drop for Dropped {
    fn drop(&mut self) {
        if ARMED.load(SeqCst)
            && let Some(cache) = CACHE.get()
        {
            cache.flush::<Dropped>();
            let _ = cache.stats::<Dropped>();
            REENTERED.fetch_add(1, SeqCst);
        }
    }
}

/// A cache whose loader finds every id, on a manual clock.
fn cache() -> Cache {
    fn load<T: Send + 'static>(make: fn(u64) -> T) -> impl Fn(Id<T>) -> LoadOf<T> + Send + Sync {
        move |id| Box::pin(async move { Ok(Some(make(id.payload()))) })
    }
    cache_builder()
        .clock(Clock::manual())
        .loader(load(|n| Hot { n }))
        .loader(load(|n| Kept { n }))
        .loader(load(|n| Dropped { n }))
        .build()
        .expect("the cache builds")
}

type LoadOf<T> = std::pin::Pin<Box<dyn Future<Output = Result<Option<T>, std::io::Error>> + Send>>;

/// Fetches `id`, checking the value; its source. Checks the bound too.
async fn fetch<T: Cached + Number>(cache: &Cache, id: Id<T>) -> Source {
    let fetched = cache.fetch(id).await.expect("the loader finds every id");
    assert_eq!(fetched.number(), id.payload());
    let size = cache.stats::<T>().size;
    assert!(size <= T::spec().max_size() as u64, "{size} rows");
    fetched.source()
}

trait Number {
    fn number(&self) -> u64;
}

impl Number for Hot {
    fn number(&self) -> u64 {
        self.n
    }
}

impl Number for Kept {
    fn number(&self) -> u64 {
        self.n
    }
}

/// Ids `from..from + n`.
fn ids<T>(from: u64, n: u64) -> Vec<Id<T>> {
    (from..from + n).map(Id::from_payload).collect()
}

#[tokio::test]
async fn a_full_table_of_cold_rows_admits_hot_ids_and_keeps_serving_them() {
    let cache = cache();
    assert_eq!(Hot::spec().eviction(), Eviction::Hot, "the default");
    for id in ids::<Hot>(0, 100) {
        assert_eq!(fetch(&cache, id).await, Source::Fill);
    }
    assert_eq!(health::<Hot>(&cache), Health::Full);

    // Twenty hot ids, read round after round. The first round's fills are
    // served without being kept (each id asked for once: it could be a
    // scan); from the second on, each evicts a cold row.
    let hot = ids::<Hot>(1_000, 20);
    let mut rounds = Vec::new();
    for _ in 0..6 {
        let mut hits = 0;
        for &id in &hot {
            hits += usize::from(fetch(&cache, id).await == Source::Hit);
        }
        rounds.push(hits);
    }
    assert_eq!(rounds[0], 0, "every hot id missed once");
    assert_eq!(
        rounds[5],
        20,
        "every hot id is kept and hit: {rounds:?} {:?}",
        cache.stats::<Hot>()
    );

    let stats = cache.stats::<Hot>();
    assert_eq!(stats.size, 100);
    assert!(stats.evictions >= 20, "{} evictions", stats.evictions);
    assert!(stats.full_skips >= 20, "{} skips", stats.full_skips);
    // Every fill was kept (the first hundred, then one per eviction) or
    // skipped.
    assert_eq!(stats.fills, 100 + stats.evictions + stats.full_skips);
    // The cold rows that are left still answer as hits.
    let mut cold_hits = 0;
    for id in ids::<Hot>(0, 100) {
        cold_hits += usize::from(fetch(&cache, id).await == Source::Hit);
    }
    assert_eq!(cold_hits as u64, 100 - stats.evictions);
}

#[tokio::test]
async fn rows_read_since_the_hand_passed_stay_while_unread_ones_go() {
    let cache = cache();
    let (read, unread) = (ids::<Hot>(0, 50), ids::<Hot>(50, 50));
    for &id in read.iter().chain(&unread) {
        fetch(&cache, id).await;
    }
    // Half the rows are read (marked); then forty new ids, each asked for
    // twice, take places. The hand spares a read row (it unmarks it, and
    // counts the read), so an id asked for twice outranks only unread rows.
    for &id in &read {
        assert_eq!(fetch(&cache, id).await, Source::Hit);
    }
    for id in ids::<Hot>(1_000, 40) {
        fetch(&cache, id).await;
        fetch(&cache, id).await;
    }
    let stats = cache.stats::<Hot>();
    assert_eq!(stats.size, 100);
    let mut kept = [0; 2];
    for (which, ids) in [&read, &unread].into_iter().enumerate() {
        for &id in ids {
            kept[which] += usize::from(fetch(&cache, id).await == Source::Hit);
        }
    }
    let [read_kept, unread_kept] = kept;
    // (A read row goes only if the sketch mistakes a new id for one asked
    // for three times: a rare collision.)
    assert!(read_kept >= 48, "{read_kept} of 50 read rows kept");
    assert!(unread_kept <= 35, "{unread_kept} of 50 unread rows kept");
    assert_eq!(stats.evictions as usize, 100 - read_kept - unread_kept);
}

#[tokio::test]
async fn a_one_off_scan_evicts_next_to_nothing() {
    let cache = cache();
    for id in ids::<Hot>(0, 100) {
        fetch(&cache, id).await;
    }
    // As many ids as the table holds, each read once. (An id passes for
    // one asked for twice only if each of its sketch counters is shared
    // with another id's: here about one chance in ten thousand.)
    for id in ids::<Hot>(10_000, 100) {
        assert_eq!(fetch(&cache, id).await, Source::Fill);
    }
    let stats = cache.stats::<Hot>();
    assert_eq!(stats.size, 100);
    assert!(
        stats.evictions <= 2,
        "the scan evicted {} rows",
        stats.evictions
    );
    assert_eq!(stats.full_skips + stats.evictions, 100);
    let mut hits = 0;
    for id in ids::<Hot>(0, 100) {
        hits += u64::from(fetch(&cache, id).await == Source::Hit);
    }
    assert_eq!(hits, 100 - stats.evictions);
}

#[tokio::test]
async fn dead_rows_make_room_first_without_counting_as_evictions() {
    let cache = cache();
    for id in ids::<Hot>(0, 100) {
        fetch(&cache, id).await;
    }
    cache.clock().advance(Duration::from_secs(3_600));
    // Every row is dead: a new id asked for once is kept.
    let fresh = Id::<Hot>::from_payload(5_000);
    assert_eq!(fetch(&cache, fresh).await, Source::Fill);
    assert_eq!(fetch(&cache, fresh).await, Source::Hit);
    let stats = cache.stats::<Hot>();
    assert_eq!((stats.evictions, stats.full_skips), (0, 0));
}

#[tokio::test]
async fn eviction_none_keeps_what_it_has_however_often_an_id_is_asked_for() {
    let cache = cache();
    assert_eq!(Kept::spec().eviction(), Eviction::None);
    for id in ids::<Kept>(0, 100) {
        fetch(&cache, id).await;
    }
    assert_eq!(health::<Kept>(&cache), Health::Full);
    let hot = Id::<Kept>::from_payload(1_000);
    for skips in 1..=5 {
        assert_eq!(fetch(&cache, hot).await, Source::Fill);
        assert_eq!(cache.stats::<Kept>().full_skips, skips);
    }
    for id in ids::<Kept>(0, 100) {
        assert_eq!(fetch(&cache, id).await, Source::Hit);
    }
    assert_eq!(cache.stats::<Kept>().evictions, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_size_never_exceeds_max_size_under_concurrent_churn() {
    let cache = std::sync::Arc::new(cache());
    let tasks: Vec<_> = (0..4_u64)
        .map(|task| {
            let cache = std::sync::Arc::clone(&cache);
            tokio::spawn(async move {
                // Each task reads its ids 1 to 3 times, and some of the
                // others' too: a churn of admissions and evictions.
                for n in 0..2_000_u64 {
                    let id = Id::<Hot>::from_payload(n * 4 + task);
                    for _ in 0..(n % 3 + 1) {
                        fetch(&cache, id).await;
                    }
                    fetch(&cache, Id::<Hot>::from_payload(n * 4 + (task + 1) % 4)).await;
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a churning task", task).await.expect("no panic");
    }
    let stats = cache.stats::<Hot>();
    assert_eq!(stats.size, 100);
    assert!(stats.evictions > 0);
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test]
async fn an_evicted_value_is_dropped_outside_the_tables_locks() {
    let cache = CACHE.get_or_init(cache);
    for id in ids::<Dropped>(0, 10) {
        cache.fetch(id).await.unwrap();
    }
    // A new id, asked for once (served, not kept: its value is dropped
    // here), then again: it evicts a row, whose value is dropped by
    // whichever writer or maintenance pass frees it, and flushes the table.
    let new = Id::<Dropped>::from_payload(100);
    assert_eq!(cache.fetch(new).await.unwrap().source(), Source::Fill);
    ARMED.store(true, SeqCst);
    assert_eq!(cache.fetch(new).await.unwrap().source(), Source::Fill);
    assert_eq!(cache.stats::<Dropped>().evictions, 1);
    eventually("the evicted value's drop to call back", async || {
        REENTERED.load(SeqCst) >= 1
    })
    .await;
    // The cache goes on: the flush emptied the table, a fetch fills it.
    let after = bounded("a fetch after the drops", cache.fetch(new)).await;
    assert_eq!(after.unwrap().source(), Source::Fill);
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    echo_cache::Cache::builder()
        .open::<Hot>()
        .open::<Kept>()
        .open::<Dropped>()
}
