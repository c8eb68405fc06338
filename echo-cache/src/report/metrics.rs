//! The tables' counters through the `metrics` facade (the `metrics`
//! feature), for whatever exporter the program installs.
//!
//! Nothing here runs on a hit: the counters are read from a table's
//! snapshot ([`Stats`]) and published as totals (`Counter::absolute`, which
//! the facade defines for exactly this: keeping a counter in step with one
//! kept elsewhere), by the maintenance thread every [`PUBLISH_EVERY`] and
//! by [`Cache::publish_metrics`](crate::Cache::publish_metrics). Totals, not
//! increments: publishing twice, or from two threads at once, counts
//! nothing twice, and a recorder installed after the cache was built still
//! gets every count. The flight histogram is recorded by each flight as it
//! lands, off the hit path too. The names and labels are documented in the
//! crate docs ("Metrics"); [`SOURCES`] and [`COUNTERS`] are their one list.

use std::sync::Arc;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, SharedString, Unit};

use crate::report::stats::Stats;

/// How often the maintenance thread publishes every table's counters.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// The fetches of a table, by where each was answered.
pub(crate) const FETCHES: &str = "echo_cache_fetches_total";
/// How long each flight took, by its outcome.
pub(crate) const FLIGHT_SECONDS: &str = "echo_cache_flight_seconds";
/// Rows in L1.
pub(crate) const ROWS: &str = "echo_cache_rows";
/// Flights under way.
pub(crate) const IN_FLIGHT: &str = "echo_cache_in_flight";

/// How a count is read off a snapshot.
type Count = fn(&Stats) -> u64;

/// The `source` of each fetch and the count of it in a snapshot: an L1
/// hit, a miss that joined a flight, or the outcome of the flight the
/// fetch started (the same values label [`FLIGHT_SECONDS`]).
const SOURCES: [(&str, Count); 8] = [
    ("hit", |s| s.hits),
    ("coalesced", |s| s.coalesced),
    ("l2", |s| s.l2_hits),
    ("fill", |s| s.fills),
    ("not_found", |s| s.not_found),
    ("load_error", |s| s.load_errors),
    ("load_timeout", |s| s.load_timeouts),
    ("stale", |s| s.stale_served),
];

/// The other counters of a table: name, description, count in a snapshot.
const COUNTERS: [(&str, &str, Count); 17] = [
    (
        "echo_cache_swept_total",
        "expired rows reclaimed by the sweeper",
        |s| s.swept,
    ),
    ("echo_cache_sweeps_total", "sweeper passes", |s| s.sweeps),
    (
        "echo_cache_full_skips_total",
        "values served but not kept: L1 was full",
        |s| s.full_skips,
    ),
    (
        "echo_cache_evictions_total",
        "live rows evicted from a full L1 for more asked-for ones",
        |s| s.evictions,
    ),
    (
        "echo_cache_refreshes_total",
        "refreshes started: rows read when due for refresh-ahead",
        |s| s.refreshes,
    ),
    (
        "echo_cache_invalidations_total",
        "invalidations applied, this node's and other nodes'",
        |s| s.invalidations,
    ),
    ("echo_cache_puts_total", "values written with put", |s| {
        s.puts
    }),
    (
        "echo_cache_l2_errors_total",
        "L2 reads that failed or were not tried (server down)",
        |s| s.l2_errors,
    ),
    (
        "echo_cache_decode_errors_total",
        "L2 frames that were not a value of the table",
        |s| s.decode_errors,
    ),
    (
        "echo_cache_oversized_total",
        "values too large for L2, kept in L1 only",
        |s| s.oversized,
    ),
    (
        "echo_cache_l2_writes_dropped_total",
        "L2 writes and deletes the server did not take",
        |s| s.l2_writes_dropped,
    ),
    (
        "echo_cache_announcements_dropped_total",
        "announcements of writes that did not reach the server",
        |s| s.announcements_dropped,
    ),
    (
        "echo_cache_listener_panics_total",
        "calls of the table's removal listener that panicked",
        |s| s.listener_panics,
    ),
    (
        "echo_cache_redeliveries_total",
        "deliveries of the writes kept while the server was away",
        |s| s.redeliveries,
    ),
    (
        "echo_cache_malformed_messages_total",
        "invalidation messages that were not well-formed",
        |s| s.malformed_messages,
    ),
    (
        "echo_cache_stale_backoffs_total",
        "expired values served without calling a loader that just failed",
        |s| s.stale_backoffs,
    ),
    (
        "echo_cache_soft_timeouts_total",
        "flights answered with an expired value at their soft timeout",
        |s| s.soft_timeouts,
    ),
];

/// Where the cache's metrics come from, for recorders that filter on it.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The keys (name and labels) of one table's metrics, made once when the
/// table opens: publishing and timing a flight build no key, allocate
/// nothing. Every key is labelled `table`, and `node` if the cache was
/// given a node name.
pub(crate) struct Keys {
    /// [`FETCHES`] by `source`, in [`SOURCES`] order.
    fetches: Vec<Key>,
    /// [`FLIGHT_SECONDS`] by `source`, in [`SOURCES`] order from `l2` on
    /// (a flight's outcomes).
    flights: Vec<Key>,
    /// In [`COUNTERS`] order.
    counters: Vec<Key>,
    rows: Key,
    in_flight: Key,
}

/// Where the flights' outcomes start in [`SOURCES`].
const FIRST_OUTCOME: usize = 2;

impl Keys {
    pub(crate) fn new(table: &'static str, node: Option<&Arc<str>>) -> Keys {
        let mut labels = vec![Label::from_static_parts("table", table)];
        if let Some(node) = node {
            labels.push(Label::new("node", SharedString::from(Arc::clone(node))));
        }
        let key = |name: &'static str| Key::from_parts(name, labels.clone());
        let by_source = |name: &'static str, sources: &[(&'static str, Count)]| {
            let with = |source| {
                let mut labels = labels.clone();
                labels.push(Label::from_static_parts("source", source));
                Key::from_parts(name, labels)
            };
            sources.iter().map(|&(source, _)| with(source)).collect()
        };
        Keys {
            fetches: by_source(FETCHES, &SOURCES),
            flights: by_source(FLIGHT_SECONDS, &SOURCES[FIRST_OUTCOME..]),
            counters: COUNTERS.iter().map(|&(name, _, _)| key(name)).collect(),
            rows: key(ROWS),
            in_flight: key(IN_FLIGHT),
        }
    }

    /// Publishes the totals of `stats`.
    pub(crate) fn publish(&self, stats: &Stats) {
        metrics::with_recorder(|recorder| {
            let counter = |key, count| recorder.register_counter(key, &METADATA).absolute(count);
            for (key, (_, count)) in self.fetches.iter().zip(SOURCES) {
                counter(key, count(stats));
            }
            for (key, (_, _, count)) in self.counters.iter().zip(COUNTERS) {
                counter(key, count(stats));
            }
            #[allow(clippy::cast_precision_loss)] // exact below 2^53 rows
            let gauges = [
                (&self.rows, stats.size as f64),
                (&self.in_flight, stats.in_flight as f64),
            ];
            for (key, value) in gauges {
                recorder.register_gauge(key, &METADATA).set(value);
            }
        });
    }

    /// Records the time a flight took, by its outcome (a [`SOURCES`] name
    /// from `l2` on).
    pub(crate) fn flight(&self, outcome: &'static str, took: Duration) {
        let at = SOURCES[FIRST_OUTCOME..]
            .iter()
            .position(|&(source, _)| source == outcome)
            .expect("a flight's outcome is a source");
        metrics::with_recorder(|recorder| {
            recorder
                .register_histogram(&self.flights[at], &METADATA)
                .record(took);
        });
    }
}

/// Describes every metric to the recorder (its help text and unit).
pub(crate) fn describe() {
    metrics::describe_counter!(
        FETCHES,
        Unit::Count,
        "fetches by source: hit (L1), coalesced (joined a flight), or the outcome \
         of the flight the fetch started (l2, fill, not_found, load_error, load_timeout)"
    );
    metrics::describe_histogram!(
        FLIGHT_SECONDS,
        Unit::Seconds,
        "how long each flight took, start to landing, by outcome (L1 hits are not timed)"
    );
    metrics::describe_gauge!(ROWS, Unit::Count, "rows in L1 (live or not yet swept)");
    metrics::describe_gauge!(IN_FLIGHT, Unit::Count, "flights under way");
    for (name, help, _) in COUNTERS {
        metrics::describe_counter!(name, Unit::Count, help);
    }
}
