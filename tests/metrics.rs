//! The `metrics` feature: every table's counters published through the
//! `metrics` facade equal its `Cache::stats`, name by name, whether asked
//! (`publish_metrics`) or not (the maintenance thread), and each flight
//! is timed once in the flight histogram, by its outcome.
//!
//! The recorder is a minimal one of the test's own ([`Captured`]): it keeps
//! what the facade hands it, as the facade's own atomics do (a counter's
//! `absolute` is a `fetch_max`), so what it holds is what any exporter is
//! given. Each test names its cache (`node`), so the tests of this binary,
//! which share the process's recorder, read their own series.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use common::{Calls, Gate, bounded, eventually};
use echo_cache::{Cache, Id, Stats, near_cache};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

// No sweep while a test runs: its counters hold still between a snapshot
// and its publication.
#[near_cache(
    kind = "MET",
    ttl_ms = 600_000,
    sweep_ms = 3_600_000,
    name = "met_docs"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Doc {
    id: u64,
}

/// What the recorder was given: counters and gauges (`f64` bits) by their
/// name and labels, and every value each histogram recorded.
#[derive(Default)]
struct Captured {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// `name{label=value,...}`, the labels sorted.
fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{name}{{{}}}", labels.join(","))
}

fn series_of(key: &Key) -> String {
    let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
    series(key.name(), &labels)
}

fn handle<T: Default>(map: &Mutex<HashMap<String, Arc<T>>>, key: &Key) -> Arc<T> {
    Arc::clone(map.lock().unwrap().entry(series_of(key)).or_default())
}

impl Recorder for Captured {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(handle(&self.counters, key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(handle(&self.gauges, key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(handle(&self.histograms, key))
    }
}

/// The process's recorder, installed by the first test that asks.
fn recorder() -> &'static Captured {
    static RECORDER: OnceLock<&'static Captured> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let captured: &'static Captured = Box::leak(Box::default());
        metrics::set_global_recorder(captured).expect("no other recorder in this binary");
        captured
    })
}

impl Captured {
    /// The counter `name` of `node`'s table, with `extra` labels (0 if it
    /// was never published).
    fn counter(&self, name: &str, node: &str, extra: &[(&str, &str)]) -> u64 {
        let mut labels = vec![("table", "met_docs"), ("node", node)];
        labels.extend_from_slice(extra);
        let counters = self.counters.lock().unwrap();
        counters
            .get(&series(name, &labels))
            .map_or(0, |c| c.load(Relaxed))
    }

    fn gauge(&self, name: &str, node: &str) -> Option<f64> {
        let gauges = self.gauges.lock().unwrap();
        let key = series(name, &[("table", "met_docs"), ("node", node)]);
        gauges.get(&key).map(|g| f64::from_bits(g.load(Relaxed)))
    }

    /// How many flights of `node`'s table ending as `source` were timed.
    fn flights_timed(&self, node: &str, source: &str) -> usize {
        let histograms = self.histograms.lock().unwrap();
        let key = series(
            "echo_cache_flight_seconds",
            &[("table", "met_docs"), ("node", node), ("source", source)],
        );
        histograms
            .get(&key)
            .map_or(0, |samples| samples.0.lock().unwrap().len())
    }

    /// Every series of `node`'s histogram.
    fn histogram_series(&self, node: &str) -> Vec<String> {
        let histograms = self.histograms.lock().unwrap();
        let node = format!("node={node}");
        let mut found: Vec<String> = histograms
            .keys()
            .filter(|key| key.contains(&node))
            .cloned()
            .collect();
        found.sort();
        found
    }
}

/// Ids the loader finds, finds absent, or fails on; one it holds at a gate.
#[derive(Clone)]
struct Ids {
    found: Vec<Id<Doc>>,
    absent: Id<Doc>,
    broken: Id<Doc>,
    gated: Id<Doc>,
}

impl Ids {
    fn mint() -> Ids {
        Ids {
            found: (0..5).map(|_| Id::mint()).collect(),
            absent: Id::mint(),
            broken: Id::mint(),
            gated: Id::mint(),
        }
    }
}

type Load = BoxFuture<'static, Result<Option<Doc>, std::io::Error>>;

fn cache(node: &str, ids: &Ids, gate: &Gate, calls: &Calls) -> Cache {
    let (ids, gate, calls) = (ids.clone(), gate.clone(), calls.clone());
    Cache::builder()
        .node_name(node)
        .fetch_timeout(None)
        .loader(move |id: Id<Doc>| -> Load {
            let (ids, gate, calls) = (ids.clone(), gate.clone(), calls.clone());
            async move {
                if id == ids.gated {
                    calls.count();
                    gate.pass().await;
                }
                if id == ids.absent {
                    Ok(None)
                } else if id == ids.broken {
                    Err(std::io::Error::other("the store is on fire"))
                } else {
                    Ok(Some(Doc { id: id.payload() }))
                }
            }
            .boxed()
        })
        .build()
        .expect("one declaration")
}

/// Every kind of fetch: fills then hits, a not-found, a load error, and a
/// miss that joins a flight under way (coalesced).
async fn fetch_every_way(cache: &Cache, ids: &Ids, gate: &Gate, calls: &Calls) {
    for _ in 0..3 {
        for &id in &ids.found {
            cache.fetch(id).await.expect("found");
        }
    }
    assert!(cache.fetch(ids.absent).await.unwrap_err().is_not_found());
    assert!(cache.fetch(ids.broken).await.is_err());
    let leader = tokio::spawn({
        let (cache, id) = (cache.clone(), ids.gated);
        async move { cache.fetch(id).await.map(drop) }
    });
    eventually("the gated flight reaches its loader", async || {
        calls.get() == 1
    })
    .await;
    let follower = tokio::spawn({
        let (cache, id) = (cache.clone(), ids.gated);
        async move { cache.fetch(id).await.map(drop) }
    });
    eventually("the second fetch joins the flight", async || {
        cache.stats::<Doc>().coalesced == 1
    })
    .await;
    gate.open();
    bounded("the gated flight", leader).await.unwrap().unwrap();
    bounded("its follower", follower).await.unwrap().unwrap();
}

/// Every published series of `node`'s table that differs from `stats`:
/// `name: published != expected`.
fn mismatches(recorder: &Captured, node: &str, stats: &Stats) -> Vec<String> {
    let fetches =
        |source| recorder.counter("echo_cache_fetches_total", node, &[("source", source)]);
    let by_source = [
        ("hit", stats.hits),
        ("coalesced", stats.coalesced),
        ("l2", stats.l2_hits),
        ("fill", stats.fills),
        ("not_found", stats.not_found),
        ("load_error", stats.load_errors),
        ("load_timeout", stats.load_timeouts),
        ("stale", stats.stale_served),
    ];
    let mut published: Vec<(String, f64, f64)> = by_source
        .iter()
        .map(|&(source, n)| (format!("fetches source={source}"), fetches(source), n))
        .map(|(name, got, n)| (name, got as f64, n as f64))
        .collect();
    let others = [
        ("echo_cache_swept_total", stats.swept),
        ("echo_cache_sweeps_total", stats.sweeps),
        ("echo_cache_full_skips_total", stats.full_skips),
        ("echo_cache_evictions_total", stats.evictions),
        ("echo_cache_refreshes_total", stats.refreshes),
        ("echo_cache_invalidations_total", stats.invalidations),
        ("echo_cache_puts_total", stats.puts),
        ("echo_cache_l2_errors_total", stats.l2_errors),
        ("echo_cache_decode_errors_total", stats.decode_errors),
        ("echo_cache_oversized_total", stats.oversized),
        (
            "echo_cache_l2_writes_dropped_total",
            stats.l2_writes_dropped,
        ),
        (
            "echo_cache_announcements_dropped_total",
            stats.announcements_dropped,
        ),
        ("echo_cache_redeliveries_total", stats.redeliveries),
        (
            "echo_cache_malformed_messages_total",
            stats.malformed_messages,
        ),
        ("echo_cache_stale_backoffs_total", stats.stale_backoffs),
        ("echo_cache_soft_timeouts_total", stats.soft_timeouts),
    ];
    for (name, n) in others {
        published.push((
            name.to_owned(),
            recorder.counter(name, node, &[]) as f64,
            n as f64,
        ));
    }
    for (name, n) in [
        ("echo_cache_rows", stats.size),
        ("echo_cache_in_flight", stats.in_flight),
    ] {
        let got = recorder.gauge(name, node).unwrap_or(f64::NAN);
        published.push((name.to_owned(), got, n as f64));
    }
    published
        .into_iter()
        .filter(|(_, got, expected)| got != expected)
        .map(|(name, got, expected)| format!("{name}: published {got} != {expected}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_counters_equal_the_stats_and_each_flight_is_timed_once() {
    let recorder = recorder();
    let (ids, gate, calls) = (Ids::mint(), Gate::closed(), Calls::default());
    let cache = cache("asked", &ids, &gate, &calls);
    fetch_every_way(&cache, &ids, &gate, &calls).await;
    cache.invalidate(ids.found[0]).await.unwrap();
    cache.put(ids.found[1], Doc { id: 1 }).await.unwrap();

    cache.publish_metrics();
    let stats = cache.stats::<Doc>();
    assert_eq!(
        (
            stats.hits,
            stats.fills,
            stats.coalesced,
            stats.not_found,
            stats.load_errors
        ),
        (10, 6, 1, 1, 1),
        "the fetches this test made: {stats:?}"
    );
    assert_eq!((stats.invalidations, stats.puts), (1, 1));
    let fetched: u64 = [
        "hit",
        "coalesced",
        "l2",
        "fill",
        "not_found",
        "load_error",
        "load_timeout",
        "stale",
    ]
    .map(|source| recorder.counter("echo_cache_fetches_total", "asked", &[("source", source)]))
    .iter()
    .sum();
    assert_eq!(
        fetched,
        stats.hits + stats.misses,
        "every fetch once, none under way"
    );
    assert_eq!(mismatches(recorder, "asked", &stats), Vec::<String>::new());

    // One sample per flight, by outcome; hits and coalesced misses are not
    // timed (they start no flight).
    assert_eq!(recorder.flights_timed("asked", "fill"), 6);
    assert_eq!(recorder.flights_timed("asked", "not_found"), 1);
    assert_eq!(recorder.flights_timed("asked", "load_error"), 1);
    assert_eq!(
        recorder.histogram_series("asked"),
        ["fill", "load_error", "not_found"]
            .map(|source| series(
                "echo_cache_flight_seconds",
                &[("node", "asked"), ("source", source), ("table", "met_docs")]
            ))
            .to_vec()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maintenance_thread_publishes_unasked() {
    let recorder = recorder();
    let (ids, gate, calls) = (Ids::mint(), Gate::closed(), Calls::default());
    let cache = cache("unasked", &ids, &gate, &calls);
    fetch_every_way(&cache, &ids, &gate, &calls).await;
    let stats = cache.stats::<Doc>();
    assert_eq!(stats.in_flight, 0);
    eventually("the maintenance thread publishes the stats", async || {
        mismatches(recorder, "unasked", &stats).is_empty()
    })
    .await;
}
