//! A table: the L1 rows of one declared type, its flights and its counters.
//!
//! The data path, top to bottom:
//!
//! 1. [`Table::hit`]: a live L1 row answers in the caller's thread.
//! 2. [`Table::miss`]: the caller looks in L1 again under the flight lock
//!    (a flight may have landed since), then joins the key's flight, or
//!    starts one and drives it (handing it to the runtime as its own task if
//!    the caller gives up first); either way it waits for the one answer
//!    ([`answer`]: what a waiter of a herd costs, and its timeout).
//! 3. [`Table::resolve`], in the flight, within its deadline: L2, then the
//!    loader (with its [`token`]); past the table's soft timeout, a stale
//!    value answers the waiters while the loader goes on.
//! 4. [`Table::land`]: install the value in L1 unless a write overtook the
//!    flight, and answer every waiter.
//!
//! [`batch`] runs these steps for many ids at once: each id still has its
//! flight, and the flights one call leads resolve together.
//!
//! [`compute`] reads an id's value as a miss does, and writes a closure's
//! decision on it as a put or an invalidation does, one compute of an id
//! at a time ([`turns`]).
//!
//! A hit on a row due for refresh ([`Table::refresh`]) starts a flight of
//! its own that no caller waits for: the loader (not L2, whose frame is the
//! one the row was filled from, or older), then the landing, under the same
//! overtake rules as a miss's flight.
//!
//! No user code (a loader, a codec, a value's `Drop`) runs under the
//! table's locks: rows a write or a landing declines are dropped, and
//! retired values freed, after the locks are released.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use crate::clock::Clock;
use crate::coherence::Announcer;
use crate::entity::id::RawId;
use crate::entity::spec::{Cached, TableSpec};
use crate::error::Error;
use crate::l1::{self, Rows};
use crate::l2::Tier;
use crate::report::figures::Figures;
use crate::report::roster::{Health, Readiness, TableInfo};
use crate::report::stats::{Counters, Stats, Striped};
use crate::table::backlog::Backlog;
use crate::table::fetched::Fetched;
use crate::table::flight::Flights;
use crate::table::grace::Grace;
use crate::table::stale::Failsafe;
use answer::{Answer, Leading, Wait};
use applied::Applied;
use turns::Turns;

mod answer;
pub(crate) mod applied;
pub(crate) mod backlog;
mod batch;
pub(crate) mod compute;
pub(crate) mod fetched;
pub(crate) mod flight;
pub(crate) mod grace;
mod inspect;
mod land;
mod loader;
mod open;
mod read;
pub(crate) mod stale;
mod tag;
pub(crate) mod token;
mod trust;
mod turns;
mod warm;
mod weight;
mod write;

use land::{Detachable, Joining, Landing, panic_message};
pub(crate) use loader::loader_with_ttl;
pub use loader::{Declared, Loader, loader};
pub(crate) use open::{AnyTable, Opened, Shared, open};
pub use weight::{Weigher, weigher};

pub(crate) use batch::{BatchLoader, batch_loader, batch_loader_with_ttl};

/// What a flight found, before it lands: its answer, and the deadline of
/// its row on the table's clock (`u64::MAX`: as the table says): what its
/// loader gave it, or the end of the L2 frame it was read from.
struct Loaded<T> {
    fetched: Fetched<T>,
    deadline: u64,
}

pub(crate) struct Table<T> {
    /// The table itself, for the tasks it spawns.
    me: Weak<Table<T>>,
    spec: &'static TableSpec,
    /// The deadline of a flight.
    load_timeout: Duration,
    /// When a flight's waiters get a stale value, if the table has one
    /// (`soft_timeout_ms`) and the flight a fallback.
    soft_timeout: Option<Duration>,
    rows: Rows<T>,
    flights: Flights<Arc<Answer<T>>>,
    hits: Striped,
    counters: Counters,
    clock: Clock,
    loader: Option<Loader<T>>,
    tier: Option<Tier<T>>,
    /// How values are weighed, in a table with `max_bytes` only.
    weight: Option<weight::Weight<T>>,
    /// How this node tells the others of its writes (with L2 only).
    announcer: Option<Announcer>,
    runtime: Option<Handle>,
    /// Whether L1 may keep rows. False while the invalidation channel of a
    /// coherent table is down: L1 is then empty (flushed when the channel
    /// was lost) and nothing is installed, so reads bypass it.
    trusted: AtomicBool,
    /// How long L1 keeps serving once the channel is lost.
    grace: Grace,
    /// Newest invalidation applied per id (versioned modes).
    applied: Applied,
    readiness: Arc<Readiness>,
    /// Writes acknowledged while the server was away, to deliver.
    backlog: Backlog,
    /// Wakes the task that delivers backlogs.
    backlog_kick: Arc<Notify>,
    /// Serving stale while the loader fails (`stale_if_error_ms`).
    failsafe: Failsafe,
    /// One compute at a time per id.
    turns: Turns,
    /// The keys of the table's metrics.
    #[cfg(feature = "metrics")]
    metrics: crate::report::metrics::Keys,
    /// The loader of many ids at once, if the builder was given one
    /// (see [`batch`]).
    batch: Option<BatchLoader<T>>,
    /// [`Table::refresh`] and [`Table::miss`], both out of a hit's line,
    /// reached through the table so that the hit and the `Fetch` future
    /// need no `T: Cached` bound: a fetch of a type that declared no cache
    /// is then one compile error, at the call, not three.
    start_refresh: fn(&Table<T>, u64, u64),
    start_miss: StartMiss<T>,
}

/// The miss path of a fetch: boxed, built on the first poll that missed.
pub(crate) type Miss<T> = Pin<Box<dyn Future<Output = Result<Fetched<T>, Error>> + Send>>;

/// What starts the miss path of a key, with the fetch's timeout.
type StartMiss<T> = fn(&Table<T>, u64, Option<Duration>) -> Miss<T>;

impl<T> Table<T> {
    /// The table, shared: for a miss, whose flight may outlive its caller.
    pub(crate) fn shared(&self) -> Arc<Table<T>> {
        self.me.upgrade().expect("a table borrowed is alive")
    }

    /// The miss path of `key`: joins or starts its flight, and waits for
    /// it (at most `timeout`).
    pub(crate) fn start_miss(&self, key: u64, timeout: Option<Duration>) -> Miss<T> {
        (self.start_miss)(self, key, timeout)
    }

    #[inline]
    fn not_found(&self, key: u64) -> Error {
        Error::NotFound {
            table: self.spec.name,
            id: RawId::new(self.spec.kind, key),
        }
    }
}

impl<T: Cached> Table<T> {
    /// Drops every row; no flight under way will install, and the next
    /// misses start fresh flights.
    pub(crate) fn flush(&self) {
        self.flights.overtake_all(|| self.rows.clear());
        self.rows.collect_if_due();
    }

    /// A table-wide invalidation at `version`, newer-wins: raises the
    /// table's floor (no value older than it is kept afterwards, from L2
    /// or a fill) and flushes. A repeat or a late one is a no-op; whether
    /// it was applied.
    pub(crate) fn flush_at(&self, version: u64) -> bool {
        if !self.applied.raise_floor(version) {
            return false;
        }
        // Counted before the rows go, as in `apply`.
        Counters::bump(&self.counters.invalidations);
        self.flush();
        true
    }

    pub(crate) fn stats(&self) -> Stats {
        let rows = &self.rows;
        (self.counters).snapshot(
            self.hits.sum(),
            rows.len(),
            rows.evictions(),
            rows.listener_panics(),
        )
    }

    /// A jittered L2 lifetime, within `life_ms` (see
    /// [`l1::expiry_within`]); the server's clock expires the key.
    fn l2_ttl_ms(&self, life_ms: u64) -> u64 {
        l1::expiry_within(0, self.spec.ttl_ms, self.spec.jitter, life_ms)
    }

    /// How long an L2 command may take (none without L2).
    fn l2_timeout(&self) -> Duration {
        self.tier.as_ref().map_or(Duration::ZERO, Tier::timeout)
    }

    fn crashed(&self, message: &str) -> Error {
        Error::FlightCrashed {
            table: self.spec.name,
            message: Arc::from(message),
        }
    }
}

impl<T: Cached> AnyTable for Table<T> {
    fn trusted(&self) -> bool {
        self.trusted.load(Relaxed)
    }

    fn undelivered(&self) -> bool {
        !self.backlog.is_empty()
    }

    #[cfg(feature = "metrics")]
    fn publish_metrics(&self) {
        self.metrics.publish(&self.stats());
    }

    fn info(&self) -> TableInfo {
        TableInfo {
            spec: self.spec,
            stats: self.stats(),
            health: if self.tier.as_ref().is_some_and(|t| t.server().is_down()) {
                Health::L2Down
            } else if !self.trusted.load(Relaxed) {
                Health::Bypassing
            } else if self.grace.is_unverified() {
                Health::Unverified
            } else if self.rows.is_full() {
                Health::Full
            } else {
                Health::Serving
            },
            has_loader: self.loader.is_some(),
        }
    }

    fn sweep(&self) {
        let swept = self.rows.sweep(self.clock.now_ms());
        self.counters
            .swept
            .fetch_add(swept as u64, std::sync::atomic::Ordering::Relaxed);
        Counters::bump(&self.counters.sweeps);
        self.applied.prune(crate::entity::mint::unix_ms());
        self.failsafe.prune(self.clock.now_ms());
    }

    fn collect(&self) {
        self.rows.collect();
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn flush_l1(&self) {
        Table::flush(self);
    }

    fn invalidate_key(self: Arc<Self>, key: u64) -> BoxFuture<'static, Result<RawId, Error>> {
        Box::pin(async move { self.invalidate_fresh(key).await })
    }

    fn hottest(&self, n: usize) -> Vec<(u64, u8)> {
        Table::hottest(self, n)
    }

    fn figures(&self) -> Figures {
        Table::figures(self)
    }

    fn warm(&self) -> BoxFuture<'_, usize> {
        Box::pin(Table::warm(self))
    }

    fn publish_hot(&self) -> BoxFuture<'_, usize> {
        Box::pin(Table::publish_hot(self))
    }
}
