//! A byte bound (`max_bytes`): L1 keeps at most that many bytes of
//! values, weighed by the table's weigher or else by their encoded size;
//! a large cold row yields before small hot ones, and a value larger than
//! a shard's share (a sixteenth of the bound) is served but not kept.
//!
//! Every clock here is [`Clock::manual`] and rows live an hour: nothing
//! dies unless a test moves the clock.

use echo_cache::{Cache, Cached, Clock, Error, Id, Limits, Source, near_cache};

/// 4 MiB of values (256 KiB a shard), weighed by their encoded size.
#[near_cache(kind = "BLB", ttl_ms = 3_600_000, jitter = 0.0, max_bytes = 4_194_304)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Blob {
    n: u64,
    data: Vec<u8>,
}

/// What `weigh` says of a value: 1,000 bytes, whatever it holds.
const WEIGHT: usize = 1_000;

fn weigh(counted: &Counted) -> usize {
    assert!(counted.n != PANICS, "a weigher's bug");
    WEIGHT
}

/// The id whose value `weigh` panics on.
const PANICS: u64 = 13;

/// 80,000 bytes by its weigher (5,000 a shard: five rows), and 100 rows
/// at most (seven a shard).
#[near_cache(
    kind = "WGH",
    ttl_ms = 3_600_000,
    jitter = 0.0,
    max_size = 100,
    max_bytes = 80_000,
    weigher = weigh
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Counted {
    n: u64,
}

/// Declared without a byte bound: the builder sets one.
#[near_cache(
    kind = "UNB",
    ttl_ms = 3_600_000,
    jitter = 0.0,
    name = "max_bytes_unbounded"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Unbounded {
    data: Vec<u8>,
}

const SMALL: usize = 100;
const LARGE: usize = 100 * 1024;

/// Blobs of 100 KiB for ids that are multiples of 10, else of 100 B.
fn blob(n: u64) -> Blob {
    let len = if n.is_multiple_of(10) { LARGE } else { SMALL };
    Blob {
        n,
        data: vec![7; len],
    }
}

type LoadOf<T> = std::pin::Pin<Box<dyn Future<Output = Result<Option<T>, std::io::Error>> + Send>>;

fn load<T: Send + 'static>(make: fn(u64) -> T) -> impl Fn(Id<T>) -> LoadOf<T> + Send + Sync {
    move |id| Box::pin(async move { Ok(Some(make(id.payload()))) })
}

fn builder() -> echo_cache::Builder {
    Cache::builder()
        .open::<Blob>()
        .open::<Counted>()
        .open::<Unbounded>()
        .clock(Clock::manual())
        .loader(load(blob))
        .loader(load(|n| Counted { n }))
        .loader(load(|n| Unbounded {
            data: vec![1; usize::try_from(n).expect("small ids")],
        }))
}

fn cache() -> Cache {
    builder().build().expect("the cache builds")
}

/// The weight of `T`'s rows, as its byte bound counts it.
fn weight<T: Cached>(cache: &Cache) -> u64 {
    cache
        .figures::<T>()
        .weight
        .expect("a table with a byte bound")
}

async fn source<T: Cached>(cache: &Cache, id: u64) -> Source {
    let id = Id::<T>::from_payload(id);
    cache
        .fetch(id)
        .await
        .expect("the loader finds every id")
        .source()
}

#[tokio::test]
async fn a_table_of_mixed_values_stays_under_its_bound_and_its_hot_small_rows_stay_hits() {
    let cache = cache();
    let bound = Blob::spec().max_bytes().expect("declared") as u64;
    // Fifty small hot ids, filled and read once more: hits.
    let hot: Vec<u64> = (1..).filter(|n| n % 10 != 0).take(50).collect();
    for &n in &hot {
        assert_eq!(source::<Blob>(&cache, n).await, Source::Fill);
        assert_eq!(source::<Blob>(&cache, n).await, Source::Hit);
    }
    // Four hundred large cold ids, 40 MiB in all, ten times the bound; the
    // hot set read between every two.
    let mut missed = 0;
    for large in (1_000..1_400).map(|n| n * 10) {
        assert_eq!(source::<Blob>(&cache, large).await, Source::Fill);
        assert!(weight::<Blob>(&cache) <= bound, "over the bound");
        for &n in &hot {
            if source::<Blob>(&cache, n).await != Source::Hit {
                missed += 1;
            }
        }
    }
    assert_eq!(missed, 0, "a hot small row gave way to a large cold one");
    // The large rows kept fill what the small ones leave.
    let figures = cache.figures::<Blob>();
    assert!(figures.weight.expect("bounded") > bound / 2, "{figures:?}");
    assert!(figures.rows > 50, "large rows are kept too: {figures:?}");
}

#[tokio::test]
async fn a_weigher_weighs_every_row_and_both_bounds_hold() {
    let cache = cache();
    for n in 100..600 {
        assert_eq!(source::<Counted>(&cache, n).await, Source::Fill);
        let rows = cache.stats::<Counted>().size;
        assert_eq!(weight::<Counted>(&cache), rows * WEIGHT as u64);
        assert!(weight::<Counted>(&cache) <= 80_000);
        assert!(rows <= 100, "max_size holds too: {rows}");
    }
    assert!(cache.stats::<Counted>().size > 0);
}

#[tokio::test]
async fn a_weigher_that_panics_has_its_value_served_and_not_kept() {
    let cache = cache();
    assert_eq!(source::<Counted>(&cache, PANICS).await, Source::Fill);
    assert_eq!(source::<Counted>(&cache, PANICS).await, Source::Fill);
    assert_eq!(cache.stats::<Counted>().size, 0);
    assert_eq!(source::<Counted>(&cache, PANICS + 1).await, Source::Fill);
    assert_eq!(source::<Counted>(&cache, PANICS + 1).await, Source::Hit);
}

#[tokio::test]
async fn a_value_larger_than_a_shards_share_is_served_and_not_kept() {
    let cache = builder()
        .limits::<Unbounded>(Limits::new().max_bytes(16 * 1_000))
        .build()
        .expect("the cache builds");
    // 1,000 bytes a shard: 900 bytes fit, 2,000 do not.
    assert_eq!(source::<Unbounded>(&cache, 900).await, Source::Fill);
    assert_eq!(source::<Unbounded>(&cache, 900).await, Source::Hit);
    for _ in 0..2 {
        assert_eq!(source::<Unbounded>(&cache, 2_000).await, Source::Fill);
    }
    assert_eq!(cache.stats::<Unbounded>().size, 1);
}

#[tokio::test]
async fn limits_set_a_byte_bound_on_a_table_declared_without_one() {
    assert_eq!(Unbounded::spec().max_bytes(), None);
    let cache = builder()
        .limits::<Unbounded>(Limits::new().max_bytes(16 * 10_000))
        .build()
        .expect("the cache builds");
    let info = cache.tables();
    let info = info.iter().find(|t| t.spec.name() == "max_bytes_unbounded");
    assert_eq!(info.and_then(|t| t.spec.max_bytes()), Some(160_000));
    for n in 1_000..1_500 {
        assert_eq!(source::<Unbounded>(&cache, n).await, Source::Fill);
        assert!(weight::<Unbounded>(&cache) <= 160_000);
    }
    // Unbounded as declared: no weight counted.
    assert_eq!(self::cache().figures::<Unbounded>().weight, None);
    let refused = builder()
        .limits::<Unbounded>(Limits::new().max_bytes(0))
        .build();
    assert!(
        matches!(&refused, Err(Error::Config(why)) if why.contains("`max_bytes` may not be 0")),
        "{:?}",
        refused.err()
    );
}
