//! A table: the L1 rows of one declared type, its flights and its counters.
//!
//! The data path, top to bottom:
//!
//! 1. [`Table::hit`]: a live L1 row answers in the caller's thread.
//! 2. [`Table::miss`]: the caller looks in L1 again under the flight lock
//!    (a flight may have landed since), then joins the key's flight, or
//!    starts one and drives it (handing it to the runtime as its own task if
//!    the caller gives up first); either way it waits for the one answer.
//! 3. [`Table::resolve`], in the flight, within its deadline: L2, then the
//!    loader.
//! 4. [`Table::land`]: install the value in L1 unless a write overtook the
//!    flight, and answer every waiter.
//!
//! [`batch`] runs these steps for many ids at once: each id still has its
//! flight, and the flights one call leads resolve together.
//!
//! A hit on a row due for refresh ([`Table::refresh`]) starts a flight of
//! its own that no caller waits for: the loader (not L2, whose frame is the
//! one the row was filled from, or older), then the landing, under the same
//! overtake rules as a miss's flight.
//!
//! No user code (a loader, a codec, a value's `Drop`) runs under the
//! table's locks: rows a write or a landing declines are dropped, and
//! retired values freed, after the locks are released.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};
use tracing::instrument::Instrumented;
use tracing::{Instrument, Span, field};

use crate::clock::{Clock, millis};
use crate::coherence::{Announcer, Target};
use crate::connections::Server;
use crate::entity::id::{Id, RawId};
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, Coherence, TableSpec};
use crate::error::{BoxError, Error};
use crate::l1::epoch;
use crate::l1::{self, Live, Row, Rows};
use crate::l2::{Codec, Found, Postcard, Tier, Write};
use crate::report::roster::{Health, Readiness, TableInfo};
use crate::report::stats::{Counters, Stats, Striped};
use crate::table::backlog::Backlog;
use crate::table::fetched::{Fetched, Source};
use crate::table::flight::{Flights, Joined};
use crate::table::grace::{Grace, OnLoss, Over};
use crate::table::stale::{Failsafe, Fallback};
use applied::Applied;

pub(crate) mod applied;
pub(crate) mod backlog;
mod batch;
pub(crate) mod fetched;
pub(crate) mod flight;
pub(crate) mod grace;
pub(crate) mod stale;

pub(crate) use batch::{BatchLoader, batch_loader, batch_loader_with_ttl};

/// A declared type: a [`Cached`] type and what its declaration says of how
/// it loads. Implemented by `#[near_cache(...)]` beside `Cached`.
#[doc(hidden)]
pub trait Declared: Cached {
    /// The loader the declaration names (`loader = ...`), if it names one.
    #[must_use]
    fn __loader() -> Option<Loader<Self>> {
        None
    }
}

/// A type-erased loader of `T`: the value found, and how long it may live
/// if the loader says ([`Builder::loader_with_ttl`](crate::Builder::loader_with_ttl)).
#[doc(hidden)]
pub type Loader<T> = Arc<
    dyn Fn(Id<T>) -> BoxFuture<'static, Result<Option<(T, Option<Duration>)>, BoxError>>
        + Send
        + Sync,
>;

/// `load` as a [`Loader<T>`]: its future and its error boxed. Used by
/// [`Builder::loader`](crate::Builder::loader) and by the loader a
/// declaration names (`loader = ...`).
#[doc(hidden)]
pub fn loader<T, F, Fut, E>(load: F) -> Loader<T>
where
    T: Cached,
    F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<T>, E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    Arc::new(move |id| {
        let found = load(id).map(|r| r.map(|found| found.map(|value| (value, None))));
        found.map(|r| r.map_err(Into::into)).boxed()
    })
}

/// `load`, whose values come with their TTLs, as a [`Loader<T>`]. Used by
/// [`Builder::loader_with_ttl`](crate::Builder::loader_with_ttl).
pub(crate) fn loader_with_ttl<T, F, Fut, E>(load: F) -> Loader<T>
where
    T: Cached,
    F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<(T, Duration)>, E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    Arc::new(move |id| {
        let found = load(id).map(|r| r.map(|found| found.map(|(value, ttl)| (value, Some(ttl)))));
        found.map(|r| r.map_err(Into::into)).boxed()
    })
}

/// What a flight found, before it lands: its answer, and the deadline of
/// its row on the table's clock (`u64::MAX`: as the table says): what its
/// loader gave it, or the end of the L2 frame it was read from.
struct Loaded<T> {
    fetched: Fetched<T>,
    deadline: u64,
}

/// What a flight answers: `None` until it lands.
type Answer<T> = Option<Result<Fetched<T>, Error>>;

/// What every table of a cache shares, handed to each when it opens.
pub(crate) struct Shared {
    pub(crate) clock: Clock,
    pub(crate) runtime: Option<Handle>,
    /// The loaders the builder was given, by the `TypeId` of their `T`,
    /// each a boxed `Option<Loader<T>>` (`None`: the table has none, by
    /// [`Builder::without_loader`](crate::Builder::without_loader)).
    pub(crate) loaders: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
    /// The L2 server, if the cache has one.
    pub(crate) l2: Option<Arc<Server>>,
    pub(crate) max_value_bytes: usize,
    pub(crate) tombstone_ttl: Duration,
    /// The deadline of a flight, unless its table declares one.
    pub(crate) load_timeout: Duration,
    pub(crate) readiness: Arc<Readiness>,
    /// Wakes the task that delivers the tables' backlogs.
    pub(crate) backlog_kick: Arc<Notify>,
    /// Ids a table's backlog keeps at most.
    pub(crate) backlog_limit: usize,
    /// Codecs other than the default, by `TypeId`, each an `Arc<dyn Codec<T>>`.
    pub(crate) codecs: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
    /// The `node` label of the tables' metrics: the node name, if given.
    #[cfg(feature = "metrics")]
    pub(crate) metrics_node: Option<Arc<str>>,
    /// The batch loaders the builder was given, by the `TypeId` of their
    /// `T`, each a boxed [`BatchLoader<T>`].
    pub(crate) batch_loaders: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
}

impl Shared {
    fn take<V: 'static>(
        map: &Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
        key: TypeId,
    ) -> Option<V> {
        map.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&key)
            .map(|boxed| *boxed.downcast::<V>().expect("keyed by TypeId"))
    }
}

/// The operations of a table that do not depend on its type; those the
/// coherence lanes use are [`Target`]'s.
pub(crate) trait AnyTable: Target {
    fn info(&self) -> TableInfo;
    fn sweep(&self);
    /// Frees what L1's writers removed, once no reader can hold it.
    fn collect(&self);
    /// Whether L1 is trusted: the table's invalidation channel, if it
    /// needs one, is up.
    fn trusted(&self) -> bool;
    /// Whether writes wait for delivery (see [`Backlog`]).
    fn undelivered(&self) -> bool;
    /// Publishes the table's counters through the `metrics` facade.
    #[cfg(feature = "metrics")]
    fn publish_metrics(&self);
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// An opened table, or the spec of a table refused for want of a loader.
pub(crate) type Opened = Result<Arc<dyn AnyTable>, &'static TableSpec>;

/// Opens the table of `T` (the `open` of its declaration), with the loader
/// the builder gave it, else the one it declared.
///
/// # Errors
///
/// The table's spec, if it has neither and the builder did not say it
/// needs none.
pub(crate) fn open<T: Declared>(spec: &'static TableSpec, shared: &Shared) -> Opened {
    let batch = Shared::take::<BatchLoader<T>>(&shared.batch_loaders, TypeId::of::<T>());
    let loader = match Shared::take::<Option<Loader<T>>>(&shared.loaders, TypeId::of::<T>()) {
        Some(given) => given,
        // A table given only a batch loader loads one id as a batch of one.
        None => Some(
            (T::__loader())
                .or_else(|| batch.as_ref().map(batch::single))
                .ok_or(spec)?,
        ),
    };
    let load_timeout = spec
        .load_timeout_ms
        .map_or(shared.load_timeout, Duration::from_millis);
    let tombstone_ttl = tombstone_ttl(spec, shared.tombstone_ttl, load_timeout);
    let tier = shared.l2.as_ref().map(|server| {
        let codec = Shared::take::<Arc<dyn Codec<T>>>(&shared.codecs, TypeId::of::<T>())
            .unwrap_or_else(|| Arc::new(Postcard));
        Tier::new(
            Arc::clone(server),
            codec,
            spec,
            shared.max_value_bytes,
            tombstone_ttl,
        )
    });
    let announcer = shared
        .l2
        .as_ref()
        .map(|server| Announcer::new(Arc::clone(server), spec, tombstone_ttl));
    // A coherent table trusts L1 only once its invalidation channel is up.
    let coherent = tier.is_some() && spec.coherence.versioned();
    Ok(Arc::new_cyclic(|me| Table::<T> {
        me: me.clone(),
        spec,
        load_timeout,
        rows: Rows::new(spec),
        flights: Flights::new(),
        hits: Striped::new(),
        counters: Counters::default(),
        clock: shared.clock.clone(),
        loader,
        tier,
        announcer,
        runtime: shared.runtime.clone(),
        trusted: AtomicBool::new(!coherent),
        grace: Grace::new(spec.lost_grace_ms),
        applied: Applied::new(),
        readiness: Arc::clone(&shared.readiness),
        backlog: Backlog::new(shared.backlog_limit),
        backlog_kick: Arc::clone(&shared.backlog_kick),
        failsafe: Failsafe::new(spec.stale_if_error_ms),
        #[cfg(feature = "metrics")]
        metrics: crate::report::metrics::Keys::new(spec.name, shared.metrics_node.as_ref()),
        batch,
    }))
}

/// How long the table's L2 tombstones live: the builder's `tombstone_ttl`,
/// and on a `none` table that serves stale values (whose nodes learn of
/// each other's invalidations only from the tombstones) at least as long
/// as a row filled before the invalidation may still answer, live or
/// stale: its longest TTL, a flight's deadline (the fill may land after
/// the invalidation) and the grace.
fn tombstone_ttl(spec: &TableSpec, given: Duration, load_timeout: Duration) -> Duration {
    if spec.coherence != Coherence::None || spec.stale_if_error_ms == 0 {
        return given;
    }
    let longest_row = l1::longest_lifetime(spec.ttl_ms, spec.jitter);
    let buried = Duration::from_millis(longest_row.saturating_add(spec.stale_if_error_ms));
    given.max(buried.saturating_add(load_timeout))
}

/// L2 reads in flight at once while verifying the rows kept through a
/// lost channel's grace.
const VERIFY_CONCURRENCY: usize = 64;

/// The longest pause before a failed refresh may be tried again
/// ([`Table::refresh_retry`]).
const REFRESH_RETRY_MAX_MS: u64 = 1_000;

pub(crate) struct Table<T> {
    /// The table itself, for the tasks it spawns.
    me: Weak<Table<T>>,
    spec: &'static TableSpec,
    /// The deadline of a flight.
    load_timeout: Duration,
    rows: Rows<T>,
    flights: Flights<watch::Receiver<Answer<T>>>,
    hits: Striped,
    counters: Counters,
    clock: Clock,
    loader: Option<Loader<T>>,
    tier: Option<Tier<T>>,
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
    /// The keys of the table's metrics.
    #[cfg(feature = "metrics")]
    metrics: crate::report::metrics::Keys,
    /// The loader of many ids at once, if the builder was given one
    /// (see [`batch`]).
    batch: Option<BatchLoader<T>>,
}

impl<T: Cached> Table<T> {
    /// The table, shared: for a miss, whose flight may outlive its caller.
    pub(crate) fn shared(&self) -> Arc<Table<T>> {
        self.me.upgrade().expect("a table borrowed is alive")
    }

    /// Step 1: the answer of a live L1 row, if there is one.
    #[allow(clippy::inline_always)] // the hot path: see `Fetch::poll`
    #[inline(always)]
    pub(crate) fn hit(&self, key: u64) -> Option<Result<Fetched<T>, Error>> {
        let pin = epoch::pin();
        let now = self.clock.now_ms();
        let live = self
            .rows
            .get(&pin, key, now, |version| self.refresh(key, version))?;
        self.hits.incr(pin.index());
        Some(self.answer(key, live))
    }

    /// Starts the refresh of `key`, whose row a hit found due, unless a
    /// flight of `key` is under way: a flight on the cache's runtime (the
    /// current one if it has none) that no caller waits for. Without a
    /// runtime the row is not refreshed, and dies as it would have.
    #[cold]
    #[inline(never)]
    fn refresh(&self, key: u64, version: u64) {
        let runtime = self.runtime.clone().or_else(|| Handle::try_current().ok());
        let (Some(table), Some(runtime)) = (self.me.upgrade(), runtime) else {
            return;
        };
        let mut sender = None;
        let joined = self.flights.join(
            key,
            || None::<()>,
            |_| (),
            || {
                let (answer, waiters) = watch::channel(None);
                sender = Some(answer);
                (waiters, ())
            },
        );
        let Joined::Leader(token, ()) = joined else {
            return;
        };
        Counters::bump(&self.counters.refreshes);
        Counters::bump(&self.counters.running);
        let sender = sender.take().expect("a new flight's sender");
        let mut landing = Landing::new(table, key, token, sender);
        landing.refreshing = Some(version);
        runtime.spawn(landing.launch());
    }

    /// How long after a failed refresh a read may start the row's refresh
    /// again: a quarter of `refresh_ms`, at most 1 s, so that several tries
    /// fit before the row dies, and a failing loader is called at most once
    /// a pause for each id.
    fn refresh_retry(&self) -> Duration {
        Duration::from_millis((self.spec.refresh_ms / 4).clamp(1, REFRESH_RETRY_MAX_MS))
    }

    /// The answer of a live L1 row: its value, or the remembered absence.
    #[inline]
    fn answer(&self, key: u64, live: Live<T>) -> Result<Fetched<T>, Error> {
        match live.value {
            Some(value) => Ok(Fetched::new(value, Source::Hit, live.version)),
            None => Err(self.not_found(key)),
        }
    }

    /// How a miss of `key` meets the flights, counted: answered from L1 (a
    /// flight landed since the miss), joined to the flight under way, or
    /// leading a new one (not launched yet).
    fn join(self: &Arc<Self>, key: u64) -> Joining<T> {
        let mut sender = None;
        let joined = self.flights.join(
            key,
            || self.hit(key),
            watch::Receiver::clone,
            || {
                let (answer, waiters) = watch::channel(None);
                sender = Some(answer);
                (waiters.clone(), waiters)
            },
        );
        match joined {
            Joined::Cached(hit) => Joining::Cached(hit),
            Joined::Follower(answer) => {
                self.counters.coalesced.incr(epoch::pin().index());
                Joining::Follower(answer)
            }
            Joined::Leader(token, answer) => {
                Counters::bump(&self.counters.flights);
                Counters::bump(&self.counters.running);
                let sender = sender.take().expect("a new flight's sender");
                Joining::Leader(Landing::new(Arc::clone(self), key, token, sender), answer)
            }
        }
    }

    /// Step 2: answers from L1 if a flight landed since the caller's miss,
    /// else joins or starts the flight of `key` and waits for its answer
    /// (at most `timeout`).
    pub(crate) async fn miss(
        self: Arc<Self>,
        key: u64,
        timeout: Option<Duration>,
    ) -> Result<Fetched<T>, Error> {
        let current = Handle::try_current().ok();
        let in_runtime = current.is_some();
        let runtime = current
            .or_else(|| self.runtime.clone())
            .ok_or(Error::NoRuntime)?;
        let (mut answer, flight) = match self.join(key) {
            Joining::Cached(hit) => return hit,
            Joining::Follower(answer) => (answer, None),
            Joining::Leader(landing, answer) => {
                let flight = Detachable::new(landing.launch(), runtime.clone());
                if in_runtime {
                    (answer, Some(flight))
                } else {
                    // Outside the runtime the flight cannot run here:
                    // dropping it hands it to the runtime.
                    drop(flight);
                    (answer, None)
                }
            }
        };
        let landed = async {
            // The leader drives the flight in its own task (no hop to another
            // thread); if it gives up first, the flight goes on detached.
            if let Some(flight) = flight {
                flight.await;
            }
            match answer.wait_for(Option::is_some).await {
                Ok(answer) => answer.clone().expect("waited for Some"),
                // Unreachable while `Landing` answers on drop; never hang anyway.
                Err(_) => Err(self.crashed("the flight ended without an answer")),
            }
        };
        self.wait(landed, timeout, &runtime).await
    }

    async fn wait(
        &self,
        landed: impl Future<Output = Result<Fetched<T>, Error>>,
        timeout: Option<Duration>,
        runtime: &Handle,
    ) -> Result<Fetched<T>, Error> {
        match timeout {
            None => landed.await,
            Some(after) => {
                // The timer is the runtime's: a fetch from outside any
                // runtime (see `Builder::runtime`) has none of its own.
                let timed = {
                    let _entered = runtime.enter();
                    tokio::time::timeout(after, landed)
                };
                timed.await.unwrap_or(Err(Error::Timeout {
                    table: self.spec.name,
                    after,
                }))
            }
        }
    }

    /// Step 3: L2, then the loader; a `refresh`, the loader only. On the
    /// way, gathers in `fallback` what may answer if the loader fails
    /// (`stale_if_error_ms`), and skips the loader if it failed on `key` a
    /// moment ago and there is a fallback.
    async fn resolve(
        &self,
        key: u64,
        refresh: bool,
        fallback: &mut Fallback<T>,
    ) -> Result<Loaded<T>, Error> {
        let stale = self.failsafe.enabled() && self.verified();
        if stale && let Some(dead) = self.rows.stale(key, self.clock.now_ms()) {
            fallback.offer(dead.value.expect("a value"), dead.version);
        }
        let mut over_bad = false;
        let mut l2_left = self.l2_timeout();
        if let Some(tier) = self.tier.as_ref().filter(|_| !refresh) {
            let reading = Instant::now();
            let found = tier.read(key, &self.counters).await;
            l2_left = l2_left.saturating_sub(reading.elapsed());
            match found {
                // A frame older than an applied invalidation is stale (its
                // conditional drop did not reach L2): load instead.
                Found::Value(version, value, left_ms)
                    if !self.applied.overtakes(key, version.payload()) =>
                {
                    let fetched = Fetched::new(Arc::new(value), Source::L2, version.payload());
                    let deadline = self.deadline(left_ms);
                    return Ok(Loaded { fetched, deadline });
                }
                Found::Expired(version, value)
                    if stale && !self.applied.overtakes(key, version.payload()) =>
                {
                    fallback.offer(Arc::new(value), version.payload());
                }
                Found::Tombstone(version) => fallback.invalidated(version.payload()),
                Found::Bad => over_bad = true,
                Found::Failed if self.buried_in_l2() => fallback.unproven(),
                _ => {}
            }
        }
        if fallback.is_some()
            && let Some(failed) = self.failsafe.backing_off(key, self.clock.now_ms())
        {
            fallback.backoff = true;
            return Err(failed);
        }
        self.load(key, over_bad, l2_left).await
    }

    /// Whether other nodes' invalidations reach this table only as L2's
    /// tombstones (`none`, with L2): a value L1 kept past its expiry may
    /// then be served stale only once L2 has answered without burying it.
    fn buried_in_l2(&self) -> bool {
        self.tier.is_some() && self.spec.coherence == Coherence::None
    }

    /// Step 3's second half: the loader, whose value is written to L2
    /// (`over_bad`: over the bad frame L2 held; the answer waits for that
    /// write at most `l2_left`, what the flight's read left of the L2
    /// timeout).
    async fn load(&self, key: u64, over_bad: bool, l2_left: Duration) -> Result<Loaded<T>, Error> {
        let loader = self.loader.as_ref().ok_or(Error::NoLoader {
            table: self.spec.name,
        })?;
        // Minted before the system of record is read, so it orders the read
        // against writes: L2 refuses the fill if an invalidation newer than
        // it is there (every mode, `none` included).
        let version = Minter::global().mint_raw(T::KIND);
        match loader(Id::from_payload(key)).await {
            Ok(Some((value, ttl))) => {
                let deadline = self.deadline(ttl.map_or(u64::MAX, millis));
                Ok(self
                    .fill(key, version, value, deadline, over_bad, l2_left)
                    .await)
            }
            Ok(None) => Err(self.not_found(key)),
            Err(source) => Err(Error::Load {
                table: self.spec.name,
                source: Arc::from(source),
            }),
        }
    }

    /// A loaded `value`, minted `version` before the load, living until
    /// `deadline` at most (`u64::MAX`: as the table says): written to L2,
    /// answered as a fill. The answer waits for the write at most `l2_left`
    /// (the flight's L2 time is one L2 timeout, its read's and its write's):
    /// past that the write goes on as a task of its own.
    async fn fill(
        &self,
        key: u64,
        version: RawId,
        value: T,
        deadline: u64,
        over_bad: bool,
        l2_left: Duration,
    ) -> Loaded<T> {
        let value = Arc::new(value);
        if let Some(table) = self.me.upgrade().filter(|table| table.tier.is_some()) {
            let life_ms = deadline.saturating_sub(self.clock.now_ms());
            let (write, ttl_ms) = (Write::Fill { over_bad }, self.l2_ttl_ms(life_ms));
            let value = Arc::clone(&value);
            let mut written = Box::pin(async move {
                let tier = table.tier.as_ref().expect("filtered");
                // A fill the server did not take is only a lost chance to
                // share it (counted): nothing to deliver later.
                let written = tier.write(key, &version, &value, ttl_ms, write, &table.counters);
                let _ = written.await;
            });
            if tokio::time::timeout(l2_left, &mut written).await.is_err() {
                tokio::spawn(written);
            }
        }
        let fetched = Fetched::new(value, Source::Fill, version.payload());
        Loaded { fetched, deadline }
    }

    /// Step 4: installs the outcome unless overtaken, answers every waiter;
    /// returns how the flight ended.
    fn land(
        &self,
        key: u64,
        token: u64,
        outcome: Result<Loaded<T>, Error>,
        fallback: Fallback<T>,
        answer: &watch::Sender<Answer<T>>,
    ) -> Ended {
        let (outcome, deadline) = match outcome {
            Ok(Loaded { fetched, deadline }) => (Ok(fetched), deadline),
            Err(error) => (Err(error), u64::MAX),
        };
        let now = self.clock.now_ms();
        let backoff = fallback.backoff;
        if self.failsafe.enabled() && !backoff {
            self.failsafe.landed(key, now, &outcome);
        }
        let row = match &outcome {
            Ok(fetched) => {
                let value = Some(Arc::clone(fetched.value()));
                let version = fetched.version().payload();
                let mut row = self.row(value, version, now, deadline);
                // What is left of an L2 frame is not its whole life: a row
                // read late in it is refreshed as any other.
                row.refreshable |= fetched.source() == Source::L2;
                Some(row)
            }
            Err(Error::NotFound { .. }) if self.spec.absent_ttl_ms > 0 => {
                Some(self.row(None, key, now, u64::MAX))
            }
            _ => None,
        };
        if row.is_some() {
            self.rows.make_room(now);
        }
        let mut declined = None;
        let landed = self.flights.land(key, token, || {
            declined = row.and_then(|row| self.install(key, row, now));
        });
        drop(declined);
        self.rows.collect_if_due();
        let outcome = match outcome {
            // Not if a write overtook the flight, or the channel that
            // tells of invalidations went down meanwhile.
            Err(error) if landed && self.serves_stale(key, &fallback, &error) => {
                Ok(fallback.take().expect("a fallback"))
            }
            outcome => outcome,
        };
        let ended = Ended::of(&outcome);
        if ended == Ended::Stale && backoff {
            Counters::bump(&self.counters.stale_backoffs);
        }
        Counters::bump(match ended {
            Ended::L2 => &self.counters.l2_hits,
            Ended::Fill => &self.counters.fills,
            Ended::Stale => &self.counters.stale_served,
            Ended::NotFound => &self.counters.not_found,
            Ended::LoadTimeout => &self.counters.load_timeouts,
            Ended::LoadError | Ended::Crashed => &self.counters.load_errors,
        });
        self.counters.running.fetch_sub(1, Relaxed);
        answer.send_replace(Some(outcome));
        ended
    }

    /// Whether a flight of `key` that failed with `error` answers its
    /// fallback instead (see [`crate::stale`]).
    fn serves_stale(&self, key: u64, fallback: &Fallback<T>, error: &Error) -> bool {
        Failsafe::covers(error)
            && self.verified()
            && fallback
                .version()
                .is_some_and(|version| !self.applied.overtakes(key, version))
    }

    /// Whether no invalidation can have been missed: the channel is up
    /// and what L1 kept through a loss is verified. Stale values are served
    /// only then.
    fn verified(&self) -> bool {
        self.trusted.load(Relaxed) && !self.grace.is_unverified()
    }

    /// The deadline, on the table's clock, of a row that may live `life_ms`
    /// from now (`u64::MAX`: as the table says).
    fn deadline(&self, life_ms: u64) -> u64 {
        match life_ms {
            u64::MAX => u64::MAX,
            life_ms => self.clock.now_ms().saturating_add(life_ms),
        }
    }

    /// A row of `value` (or of an absence) at `version`, inserted at `now`:
    /// it dies a jittered TTL later (the absence TTL for an absence), and
    /// by `deadline` (see [`l1::expiry_within`]). A deadline shorter than
    /// the TTL is one of the row's own: the row dies a clock tick before
    /// it, since a reading may be a tick late, and the clock ticks finely
    /// until then ([`Clock::follow`]).
    fn row(&self, value: Option<Arc<T>>, version: u64, now: u64, deadline: u64) -> Row<T> {
        let ttl_ms = if value.is_some() {
            self.spec.ttl_ms
        } else {
            self.spec.absent_ttl_ms
        };
        let life_ms = deadline.saturating_sub(now);
        let mut expires_at = l1::expiry_within(now, ttl_ms, self.spec.jitter, life_ms);
        if life_ms < ttl_ms {
            expires_at = expires_at.saturating_sub(self.clock.follow(now, life_ms));
        }
        Row {
            refreshable: value.is_some() && life_ms > self.spec.refresh_ms,
            value,
            version,
            expires_at,
        }
    }

    /// Installs `row` unless L1 is not trusted, an invalidation newer than
    /// the row was applied, or the table is full and keeps what it has (see
    /// [`Rows::insert`]); returns the row it did not install, for the
    /// caller to drop once it has released its locks. Call with the key's
    /// flight lock held.
    #[must_use]
    fn install(&self, key: u64, row: Row<T>, now: u64) -> Option<Row<T>> {
        if !self.trusted.load(Relaxed) || self.applied.overtakes(key, row.version) {
            return Some(row);
        }
        let full = self.rows.insert(key, row, now).err();
        if full.is_some() {
            Counters::bump(&self.counters.full_skips);
        }
        full
    }

    /// Writes `value` under a fresh version, living at most `life_ms`
    /// (`u64::MAX`: as the table says): L2 (if no newer version is there),
    /// then this node's L1, then the announcement to other nodes. A flight
    /// of `key` under way will not install its (older) value.
    pub(crate) async fn put(&self, key: u64, value: T, life_ms: u64) -> Result<RawId, Error> {
        let version = Minter::global().mint_raw(T::KIND);
        let span = self.write_span("put", key, &version);
        let deadline = self.deadline(life_ms);
        (self.put_at(key, value, deadline, version))
            .instrument(span)
            .await
    }

    async fn put_at(
        &self,
        key: u64,
        value: T,
        deadline: u64,
        version: RawId,
    ) -> Result<RawId, Error> {
        if self.spec.coherence.versioned() {
            // Our own announcement, when it comes back, is then a repeat.
            self.applied.advance(key, version.payload());
        }
        let stored = match &self.tier {
            Some(tier) => {
                let ttl_ms = self.l2_ttl_ms(deadline.saturating_sub(self.clock.now_ms()));
                let counters = &self.counters;
                (tier
                    .write(key, &version, &value, ttl_ms, Write::Put, counters)
                    .await)
                    .is_ok()
            }
            None => true,
        };
        let now = self.clock.now_ms();
        let row = self.row(Some(Arc::new(value)), version.payload(), now, deadline);
        self.rows.make_room(now);
        let declined = self.flights.overtake(key, || {
            self.rows.remove_older(key, None);
            self.install(key, row, now)
        });
        drop(declined);
        self.rows.collect_if_due();
        Counters::bump(&self.counters.puts);
        self.announce(key, &version, stored).await?;
        Ok(version)
    }

    /// Invalidates `key` at `version`: this node's L1 first (a flight under
    /// way will not install), then L2, then the announcement to other nodes.
    /// A version's kind is no part of its order: one of another kind is
    /// written and announced as the same payload under this table's kind,
    /// the only kind its L2 frames and the other nodes' lanes read.
    pub(crate) async fn invalidate(&self, key: u64, version: &RawId) -> Result<(), Error> {
        let version = RawId::new(T::KIND, version.payload());
        let span = self.write_span("invalidate", key, &version);
        self.invalidate_at(key, &version).instrument(span).await
    }

    async fn invalidate_at(&self, key: u64, version: &RawId) -> Result<(), Error> {
        let drop_l2 = async {
            match &self.tier {
                Some(tier) => tier.drop(key, version, &self.counters).await.is_ok(),
                None => true,
            }
        };
        let stored = if self.spec.coherence.versioned() {
            self.applied.advance(key, version.payload());
            self.flights
                .overtake(key, || self.rows.remove_older(key, Some(version.payload())));
            self.rows.collect_if_due();
            drop_l2.await
        } else {
            // No memory of applied versions: L2 first, so a flight that
            // starts in between reads the tombstone, and one that read
            // before it is detached.
            let stored = drop_l2.await;
            self.flights
                .overtake(key, || self.rows.remove_older(key, None));
            self.rows.collect_if_due();
            stored
        };
        Counters::bump(&self.counters.invalidations);
        self.announce(key, version, stored).await
    }

    /// The span of a write (`put` or `invalidate`) of `key` at `version`.
    fn write_span(&self, op: &'static str, key: u64, version: &RawId) -> Span {
        tracing::debug_span!(
            "write",
            op,
            table = self.spec.name,
            id = %RawId::new(T::KIND, key),
            %version,
        )
    }

    /// Tells the other nodes (broadcast, durable; tracking needs nothing:
    /// the server tells them). If that, or the write's L2 part (`stored`),
    /// failed, the write is kept for delivery once the server is back.
    async fn announce(&self, key: u64, version: &RawId, stored: bool) -> Result<(), Error> {
        let Some(announcer) = &self.announcer else {
            return Ok(());
        };
        let sent = announcer.row(key, version).await;
        if stored && sent.is_ok() {
            // It supersedes what an older write of `key` left undelivered.
            self.backlog.delivered(key, version.payload());
            tracing::debug!("write delivered: L2 and the announcement, if any");
        } else {
            self.backlog.keep(key, version.payload());
            self.backlog_kick.notify_one();
            tracing::debug!(
                stored,
                sent = sent.is_ok(),
                "kept for delivery once L2 is back"
            );
        }
        match (self.spec.coherence, sent) {
            (_, Ok(())) => Ok(()),
            (Coherence::Durable, Err(failure)) => Err(Error::NotDelivered {
                table: self.spec.name,
                reason: Arc::from(failure.to_string()),
            }),
            (_, Err(_)) => {
                Counters::bump(&self.counters.announcements_dropped);
                Ok(())
            }
        }
    }

    /// Delivers the writes kept while the server was away, oldest version
    /// first: each as a conditional L2 drop and an announcement, then a
    /// table-wide flush if the backlog overflowed. Whether all of it was
    /// delivered (it stops at the first failure).
    pub(crate) async fn redeliver(&self) -> bool {
        let (Some(tier), Some(announcer)) = (&self.tier, &self.announcer) else {
            return true;
        };
        if self.backlog.is_empty() {
            return true;
        }
        let undelivered = self.backlog.undelivered();
        let (writes, flush) = (undelivered.writes.len(), undelivered.flush.is_some());
        for (key, version) in undelivered.writes {
            let version = RawId::new(T::KIND, version);
            if tier.drop(key, &version, &self.counters).await.is_err()
                || announcer.row(key, &version).await.is_err()
            {
                return false;
            }
            self.backlog.delivered(key, version.payload());
        }
        if let Some(flush) = undelivered.flush {
            let version = RawId::new(T::KIND, flush);
            if tier.drop_older(&version).await.is_err() || announcer.flush(&version).await.is_err()
            {
                return false;
            }
            self.backlog.flushed(flush);
        }
        Counters::bump(&self.counters.redeliveries);
        tracing::info!(
            table = self.spec.name,
            writes,
            flush,
            "delivered the writes kept while L2 was away"
        );
        true
    }

    /// Applies an invalidation from another node (or the server): drops the
    /// row of `key` if it is older than `version` (any row, without a
    /// version), and keeps a flight under way from installing. A repeat or a
    /// late message is a no-op.
    pub(crate) fn apply(&self, key: u64, version: Option<u64>) {
        if let Some(version) = version
            && !self.applied.advance(key, version)
        {
            return;
        }
        self.flights
            .overtake(key, || self.rows.remove_older(key, version));
        self.rows.collect_if_due();
        Counters::bump(&self.counters.invalidations);
        tracing::debug!(
            table = self.spec.name,
            id = %RawId::new(T::KIND, key),
            version = version.map(|v| tracing::field::display(RawId::new(T::KIND, v))),
            "invalidation applied"
        );
    }

    /// The invalidation channel is lost: invalidations may be missed from
    /// now on, so drop every row and keep none until it is back; or, with a
    /// grace, keep serving them, unverified, for at most the grace.
    pub(crate) fn distrust(&self) {
        match self.grace.lost(self.trusted.load(Relaxed)) {
            OnLoss::Bypass => self.bypass(),
            OnLoss::Serving => {}
            OnLoss::Serve(generation) => {
                let Some(runtime) = &self.runtime else {
                    self.grace.over(generation);
                    return self.bypass();
                };
                tracing::warn!(
                    table = self.spec.name,
                    grace_ms = self.grace.ms,
                    "invalidation channel lost: L1 keeps serving, unverified, for the grace"
                );
                self.readiness.changed();
                // A weak handle: a cache dropped meanwhile is not kept alive
                // for the grace.
                let (me, grace) = (self.me.clone(), Duration::from_millis(self.grace.ms));
                runtime.spawn(async move {
                    tokio::time::sleep(grace).await;
                    if let Some(me) = me.upgrade() {
                        me.grace_over(generation);
                    }
                });
            }
        }
    }

    /// Flushes L1 and keeps no row until the channel is back.
    fn bypass(&self) {
        let was = self.trusted.swap(false, Relaxed);
        self.flush();
        self.readiness.changed();
        if was {
            tracing::warn!(
                table = self.spec.name,
                "invalidation channel lost: L1 flushed, reads bypass it until it is back"
            );
        }
    }

    /// The grace of loss `generation` ran out.
    fn grace_over(&self, generation: u64) {
        match self.grace.over(generation) {
            Over::Nothing => {}
            Over::Flush => {
                self.flush();
                self.readiness.changed();
                tracing::warn!(
                    table = self.spec.name,
                    "lost-channel grace over before L1 was verified: L1 flushed"
                );
            }
            Over::Bypass => self.bypass(),
        }
    }

    /// The invalidation channel is (back) up: flights that read during the
    /// gap are overtaken, and L1 keeps rows again. Rows kept through a
    /// grace are verified: by the lane's catch-up (`durable`, done before
    /// this), else against L2.
    pub(crate) fn trust(&self) {
        let was = self
            .flights
            .overtake_all(|| self.trusted.swap(true, Relaxed));
        if let Some(generation) = self.grace.up() {
            match (self.spec.coherence, &self.runtime, self.me.upgrade()) {
                (Coherence::Durable, ..) => {
                    self.grace.verified(generation);
                }
                (_, Some(runtime), Some(me)) => {
                    runtime.spawn(async move { me.verify(generation).await });
                }
                _ => self.grace_over(generation),
            }
        }
        self.readiness.changed();
        if !was {
            tracing::info!(table = self.spec.name, "invalidation channel up: L1 in use");
        }
    }

    /// Verifies the rows kept through the grace of loss `generation`
    /// against L2: a row older than L2's frame or tombstone, or without
    /// one, is dropped. A failure flushes them all.
    async fn verify(&self, generation: u64) {
        let Some(tier) = &self.tier else {
            return;
        };
        let rows = self.rows.versions();
        let checked = rows.len();
        let checks = futures_util::stream::iter(rows)
            .map(|(key, version)| async move { (key, version, tier.version(key).await) })
            .buffer_unordered(VERIFY_CONCURRENCY);
        futures_util::pin_mut!(checks);
        let mut dropped = 0;
        while let Some((key, version, l2)) = checks.next().await {
            let newer = match l2 {
                Ok(l2) => l2.unwrap_or(version + 1),
                Err(failure) => {
                    tracing::warn!(table = self.spec.name, %failure, "verifying L1 failed");
                    return self.grace_over(generation);
                }
            };
            if newer > version
                && self
                    .flights
                    .overtake(key, || self.rows.remove_older(key, Some(newer)))
            {
                dropped += 1;
            }
        }
        self.rows.collect_if_due();
        if self.grace.verified(generation) {
            self.readiness.changed();
            tracing::info!(
                table = self.spec.name,
                checked,
                dropped,
                "L1 kept through the lost channel verified against L2"
            );
        }
    }

    /// Drops every row; no flight under way will install, and the next
    /// misses start fresh flights.
    pub(crate) fn flush(&self) {
        self.flights.overtake_all(|| self.rows.clear());
        self.rows.collect_if_due();
    }

    pub(crate) fn stats(&self) -> Stats {
        self.counters
            .snapshot(self.hits.sum(), self.rows.len(), self.rows.evictions())
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

    fn not_found(&self, key: u64) -> Error {
        Error::NotFound {
            table: self.spec.name,
            id: RawId::new(T::KIND, key),
        }
    }

    fn crashed(&self, message: &str) -> Error {
        Error::FlightCrashed {
            table: self.spec.name,
            message: Arc::from(message),
        }
    }
}

impl<T: Cached> Target for Table<T> {
    fn spec(&self) -> &'static TableSpec {
        self.spec
    }

    fn flush(&self) {
        Table::flush(self);
        tracing::debug!(table = self.spec.name, "L1 flushed by the coherence lane");
    }

    fn apply(&self, key: u64, version: Option<u64>) {
        Table::apply(self, key, version);
    }

    fn distrust(&self) {
        Table::distrust(self);
    }

    fn trust(&self) {
        Table::trust(self);
    }

    fn malformed(&self) {
        Counters::bump(&self.counters.malformed_messages);
    }

    fn redeliver(&self) -> BoxFuture<'_, bool> {
        Table::redeliver(self).boxed()
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
}

/// What [`Table::join`] made of a miss.
enum Joining<T: Cached> {
    Cached(Result<Fetched<T>, Error>),
    Follower(watch::Receiver<Answer<T>>),
    Leader(Landing<T>, watch::Receiver<Answer<T>>),
}

/// A flight driven by the caller that started it, until that caller gives
/// up (times out, or is dropped): then it is handed to the runtime as its
/// own task, so it still lands and answers the other waiters.
struct Detachable {
    flight: Option<Flight>,
    runtime: Handle,
}

/// A launched flight: boxed, and run in its span.
type Flight = Instrumented<Pin<Box<dyn Future<Output = ()> + Send>>>;

impl Detachable {
    fn new(flight: Flight, runtime: Handle) -> Detachable {
        Detachable {
            flight: Some(flight),
            runtime,
        }
    }
}

impl Future for Detachable {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(flight) = self.flight.as_mut() else {
            return Poll::Ready(());
        };
        let landed = Pin::new(flight).poll(cx);
        if landed.is_ready() {
            self.flight = None;
        }
        landed
    }
}

impl Drop for Detachable {
    fn drop(&mut self) {
        if let Some(flight) = self.flight.take() {
            self.runtime.spawn(flight);
        }
    }
}

/// A launched flight. If it is dropped before it lands (its task was
/// cancelled, its runtime shut down, even before its first poll), it lands a
/// crash, so no waiter waits for ever and no flight entry is left behind.
struct Landing<T: Cached> {
    table: Option<Arc<Table<T>>>,
    key: u64,
    token: u64,
    answer: watch::Sender<Answer<T>>,
    /// A refresh ([`Table::refresh`]) of the row at this version: it reads
    /// the loader, not L2, and if it fails, reads may start it again after
    /// [`Table::refresh_retry`].
    refreshing: Option<u64>,
    /// When it started, if its span or its metrics want its duration:
    /// reading the clock is not free.
    started: Option<Instant>,
    /// The flight's `tracing` span (disabled unless a subscriber wants it).
    span: Span,
}

impl<T: Cached> Landing<T> {
    fn new(
        table: Arc<Table<T>>,
        key: u64,
        token: u64,
        answer: watch::Sender<Answer<T>>,
    ) -> Landing<T> {
        let span = tracing::debug_span!(
            "flight",
            table = table.spec.name,
            id = %RawId::new(T::KIND, key),
            source = field::Empty,
            outcome = field::Empty,
            error = field::Empty,
            duration = field::Empty,
        );
        let timed = cfg!(feature = "metrics") || !span.is_disabled();
        Landing {
            table: Some(table),
            key,
            token,
            answer,
            refreshing: None,
            started: timed.then(Instant::now),
            span,
        }
    }

    /// The flight, ready to be driven or spawned: boxed, then run in its
    /// span (wrapping the box, not the flight, so that the span costs no
    /// copy of the flight's state, which is large).
    fn launch(self) -> Flight {
        let span = self.span.clone();
        let flight: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(self.fly());
        flight.instrument(span)
    }

    /// Resolves the key within the table's deadline and lands, whatever
    /// happens on the way. Past the deadline the resolution is dropped
    /// (cancelled where it awaits), so its late result goes nowhere.
    async fn fly(mut self) {
        let table = Arc::clone(self.table.as_ref().expect("lands once"));
        // Filled as the flight goes: still there if it times out.
        let mut fallback = Fallback::none();
        let resolved =
            AssertUnwindSafe(table.resolve(self.key, self.refreshing.is_some(), &mut fallback))
                .catch_unwind();
        let deadline = table.load_timeout;
        let outcome = match tokio::time::timeout(deadline, resolved).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(panic)) => Err(table.crashed(&panic_message(&*panic))),
            Err(_) => Err(Error::LoadTimeout {
                table: table.spec.name,
                after: deadline,
            }),
        };
        let ended = self.land(outcome, fallback);
        if let Some(version) = self.refreshing
            && ended.is_some_and(Ended::failed)
        {
            let (key, pause) = (self.key, table.refresh_retry());
            let table = Arc::downgrade(&table);
            drop(self);
            tokio::time::sleep(pause).await;
            if let Some(table) = table.upgrade() {
                table.rows.rearm_refresh(key, version);
            }
        }
    }

    /// Lands `outcome`, then tells the span and the flight histogram; how
    /// the flight ended, unless it had landed already.
    fn land(&mut self, outcome: Result<Loaded<T>, Error>, fallback: Fallback<T>) -> Option<Ended> {
        let table = self.table.take()?;
        if let Err(error) = &outcome
            && !error.is_not_found()
        {
            self.span.record("error", field::display(error));
        }
        let ended = table.land(self.key, self.token, outcome, fallback, &self.answer);
        let Some(took) = self.started.map(|started| started.elapsed()) else {
            return Some(ended);
        };
        if let Some(source) = ended.source() {
            self.span.record("source", source);
        }
        self.span.record("outcome", ended.outcome());
        self.span.record("duration", field::debug(took));
        tracing::debug!(parent: &self.span, "flight landed");
        #[cfg(feature = "metrics")]
        table.metrics.flight(ended.metric(), took);
        Some(ended)
    }
}

/// How a flight ended: what its counter, its span and its metrics say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    L2,
    Fill,
    /// An expired value, the loader having failed (`stale_if_error_ms`).
    Stale,
    NotFound,
    LoadTimeout,
    /// The loader failed (or there is none).
    LoadError,
    /// The loader panicked, or the flight was dropped before it answered.
    Crashed,
}

impl Ended {
    /// The loader failed, timed out or crashed (whether or not an expired
    /// value answered instead).
    fn failed(self) -> bool {
        matches!(
            self,
            Ended::Stale | Ended::LoadTimeout | Ended::LoadError | Ended::Crashed
        )
    }

    fn of<T>(outcome: &Result<Fetched<T>, Error>) -> Ended {
        match outcome {
            Ok(fetched) if fetched.source() == Source::L2 => Ended::L2,
            Ok(fetched) if fetched.source() == Source::Stale => Ended::Stale,
            Ok(_) => Ended::Fill,
            Err(Error::NotFound { .. }) => Ended::NotFound,
            Err(Error::LoadTimeout { .. }) => Ended::LoadTimeout,
            Err(Error::FlightCrashed { .. }) => Ended::Crashed,
            Err(_) => Ended::LoadError,
        }
    }

    /// Where the value came from, if there is one.
    fn source(self) -> Option<&'static str> {
        match self {
            Ended::L2 => Some("l2"),
            Ended::Fill => Some("fill"),
            Ended::Stale => Some("stale"),
            _ => None,
        }
    }

    fn outcome(self) -> &'static str {
        match self {
            Ended::L2 | Ended::Fill => "ok",
            Ended::Stale => "stale",
            Ended::NotFound => "not_found",
            Ended::LoadTimeout => "load_timeout",
            Ended::LoadError => "load_error",
            Ended::Crashed => "crashed",
        }
    }

    /// The `source` label of its metrics (a crash counts as a load error,
    /// as in [`Stats::load_errors`]).
    #[cfg(feature = "metrics")]
    fn metric(self) -> &'static str {
        match self {
            Ended::L2 => "l2",
            Ended::Fill => "fill",
            Ended::Stale => "stale",
            Ended::NotFound => "not_found",
            Ended::LoadTimeout => "load_timeout",
            Ended::LoadError | Ended::Crashed => "load_error",
        }
    }
}

impl<T: Cached> Drop for Landing<T> {
    fn drop(&mut self) {
        if let Some(table) = &self.table {
            let crashed = table.crashed("the flight was dropped before it answered");
            self.land(Err(crashed), Fallback::none());
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the loader panicked".to_owned())
}
