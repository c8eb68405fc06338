//! Opening a table: what every table of a cache shares ([`Shared`]), the
//! face the cache holds of it without knowing its type ([`AnyTable`]), and
//! [`open`], which the directory calls once per declaration.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::applied::Applied;
use super::batch::{self, BatchLoader};
use super::weight::Weight;
use super::{Declared, Loader, Table};
use crate::clock::Clock;
use crate::coherence::{Announcer, Target};
use crate::connections::Server;
use crate::entity::id::RawId;
use crate::entity::spec::{Coherence, TableSpec};
use crate::error::Error;
use crate::l1::{self, Rows};
use crate::l2::{Codec, Postcard, Tier};
use crate::report::figures::Figures;
use crate::report::roster::{Readiness, TableInfo};
use crate::report::stats::{Counters, Striped};
use crate::table::backlog::Backlog;
use crate::table::flight::Flights;
use crate::table::grace::Grace;
use crate::table::stale::Failsafe;

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
    /// The removal listeners the builder was given, by the `TypeId` of
    /// their `T`, each a boxed [`Listener<T>`](l1::Listener).
    pub(crate) listeners: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
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
    /// Drops every row of L1, as [`Cache::flush`](crate::Cache::flush).
    fn flush_l1(&self);
    /// Invalidates `key` under a fresh version, as
    /// [`Cache::invalidate`](crate::Cache::invalidate); the version.
    fn invalidate_key(self: Arc<Self>, key: u64) -> BoxFuture<'static, Result<RawId, Error>>;
    /// The keys of the `n` live rows the eviction policy ranks hottest,
    /// with their heat, the hottest first.
    fn hottest(&self, n: usize) -> Vec<(u64, u8)>;
    /// The table's figures now.
    fn figures(&self) -> Figures;
    /// Warms L1 from the fleet's hot list in L2 (see [`warm`](super::warm));
    /// how many rows it installed.
    fn warm(&self) -> BoxFuture<'_, usize>;
    /// Merges this node's hottest ids into the fleet's hot list, if the
    /// table is declared `warm`; how many.
    fn publish_hot(&self) -> BoxFuture<'_, usize>;
}

/// An opened table, or the spec of a table refused for want of a loader.
pub(crate) type Opened = Result<Arc<dyn AnyTable>, &'static TableSpec>;

/// Opens the table of `T` (the `open` of its declaration), with the loader
/// the builder gave it, else the one it declared; and so for its removal
/// listener.
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
    // The builder's listener, else the declared one.
    let listener = Shared::take::<l1::Listener<T>>(&shared.listeners, TypeId::of::<T>())
        .or_else(T::__listener);
    let load_timeout = spec
        .load_timeout_ms
        .map_or(shared.load_timeout, Duration::from_millis);
    let tombstone_ttl = tombstone_ttl(spec, shared.tombstone_ttl, load_timeout);
    let codec = Shared::take::<Arc<dyn Codec<T>>>(&shared.codecs, TypeId::of::<T>())
        .unwrap_or_else(|| Arc::new(Postcard));
    // A byte-bounded table weighs by its weigher, else by its codec.
    let weight = spec.max_bytes.map(|_| match T::__weigher() {
        Some(weigher) => Weight::Declared(weigher),
        None => Weight::Encoded(Arc::clone(&codec)),
    });
    let tier = shared.l2.as_ref().map(|server| {
        Tier::new(
            Arc::clone(server),
            codec,
            spec,
            shared.max_value_bytes,
            tombstone_ttl,
            lease(load_timeout),
        )
    });
    let announcer = shared
        .l2
        .as_ref()
        .map(|server| Announcer::new(Arc::clone(server), spec));
    // A coherent table trusts L1 only once its invalidation channel is up.
    let coherent = tier.is_some() && spec.coherence.versioned();
    Ok(Arc::new_cyclic(|me| Table::<T> {
        me: me.clone(),
        spec,
        load_timeout,
        soft_timeout: spec.soft_timeout_ms.map(Duration::from_millis),
        rows: Rows::with_listener(spec, listener),
        flights: Flights::new(),
        hits: Striped::new(),
        counters: Counters::default(),
        clock: shared.clock.clone(),
        loader,
        tier,
        weight,
        announcer,
        runtime: shared.runtime.clone(),
        trusted: AtomicBool::new(!coherent),
        grace: Grace::new(spec.lost_grace_ms),
        applied: Applied::new(),
        readiness: Arc::clone(&shared.readiness),
        backlog: Backlog::new(shared.backlog_limit),
        backlog_kick: Arc::clone(&shared.backlog_kick),
        failsafe: Failsafe::new(spec.stale_if_error_ms),
        turns: super::turns::Turns::new(),
        #[cfg(feature = "metrics")]
        metrics: crate::report::metrics::Keys::new(spec.name, shared.metrics_node.as_ref()),
        batch,
        start_refresh: Table::<T>::refresh,
        start_miss: Table::<T>::miss,
    }))
}

/// How long the table's L2 tombstones live: the builder's `tombstone_ttl`,
/// and on a `none` table that serves stale values (whose nodes learn of
/// each other's invalidations only from the tombstones) at least as long
/// as a row filled before the invalidation may still answer, live or
/// stale: its longest TTL, a flight's deadline (the fill may land after
/// the invalidation) and the grace.
/// How long a `herd = "fleet"` table's lease lasts: half its load
/// deadline, so that a waiter whose holder died still has the other half
/// to load before its own flight's deadline.
fn lease(load_timeout: Duration) -> Duration {
    load_timeout / 2
}

fn tombstone_ttl(spec: &TableSpec, given: Duration, load_timeout: Duration) -> Duration {
    if spec.coherence != Coherence::None || spec.stale_if_error_ms == 0 {
        return given;
    }
    let longest_row = l1::longest_lifetime(spec.ttl_ms, spec.jitter);
    let buried = Duration::from_millis(longest_row.saturating_add(spec.stale_if_error_ms));
    given.max(buried.saturating_add(load_timeout))
}
