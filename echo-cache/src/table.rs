//! A table: the L1 rows of one declared type, its flights and its counters.
//!
//! The data path, top to bottom:
//!
//! 1. [`Table::hit`]: a live L1 row answers in the caller's thread.
//! 2. [`Table::miss`]: the caller joins the key's flight, or starts one and
//!    launches it as a detached task; either way it waits for the one answer.
//! 3. [`Table::resolve`], in the flight: re-check L1, then L2, then the
//!    loader.
//! 4. [`Table::land`]: install the value in L1 unless a write overtook the
//!    flight, and answer every waiter.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::directory::Declaration;
use crate::error::{BoxError, Error};
use crate::fetched::{Fetched, Source};
use crate::flight::{Flights, Joined};
use crate::id::{Id, RawId};
use crate::l1::{self, Kept, Row, Rows};
use crate::l2::{self, Codec, Postcard, Tier};
use crate::mint::Minter;
use crate::roster::{Health, TableInfo};
use crate::spec::{Cached, Coherence, TableSpec};
use crate::stats::{Counters, Stats, Striped};

/// A type-erased loader of `T`.
pub(crate) type Loader<T> =
    Arc<dyn Fn(Id<T>) -> BoxFuture<'static, Result<Option<T>, BoxError>> + Send + Sync>;

/// What a flight answers: `None` until it lands.
type Answer<T> = Option<Result<Fetched<T>, Error>>;

/// What every table of a cache shares, handed to each when it opens.
pub(crate) struct Shared {
    pub(crate) clock: Clock,
    pub(crate) runtime: Option<Handle>,
    /// Loaders by the `TypeId` of their `T`, each a boxed [`Loader<T>`].
    pub(crate) loaders: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
    /// The L2 server, if the cache has one.
    pub(crate) l2: Option<Arc<l2::Server>>,
    pub(crate) max_value_bytes: usize,
    /// Codecs other than the default, by `TypeId`, each an `Arc<dyn Codec<T>>`.
    pub(crate) codecs: Mutex<HashMap<TypeId, Box<dyn Any + Send>>>,
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

/// The operations of a table that do not depend on its type.
pub(crate) trait AnyTable: Send + Sync {
    fn info(&self) -> TableInfo;
    fn sweep(&self);
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// Opens the table of `T` (the `open` of its declaration).
pub(crate) fn open<T: Cached>(decl: &'static Declaration, shared: &Shared) -> Arc<dyn AnyTable> {
    let loader = Shared::take::<Loader<T>>(&shared.loaders, TypeId::of::<T>());
    let tier = shared.l2.as_ref().map(|server| {
        let codec = Shared::take::<Arc<dyn Codec<T>>>(&shared.codecs, TypeId::of::<T>())
            .unwrap_or_else(|| Arc::new(Postcard));
        Tier::new(
            Arc::clone(server),
            codec,
            &decl.spec,
            shared.max_value_bytes,
        )
    });
    Arc::new(Table::<T> {
        spec: &decl.spec,
        rows: Rows::new(&decl.spec),
        flights: Flights::new(),
        hits: Striped::new(),
        counters: Counters::default(),
        clock: shared.clock.clone(),
        loader,
        tier,
        runtime: shared.runtime.clone(),
    })
}

pub(crate) struct Table<T> {
    spec: &'static TableSpec,
    rows: Rows<T>,
    flights: Flights<watch::Sender<Answer<T>>>,
    hits: Striped,
    counters: Counters,
    clock: Clock,
    loader: Option<Loader<T>>,
    tier: Option<Tier<T>>,
    runtime: Option<Handle>,
}

impl<T: Cached> Table<T> {
    /// Step 1: the answer of a live L1 row, if there is one.
    #[inline]
    pub(crate) fn hit(&self, key: u64) -> Option<Result<Fetched<T>, Error>> {
        let live = self.rows.get(key, self.clock.now_ms())?;
        self.hits.incr();
        let version = RawId::new(T::KIND, live.version);
        Some(match live.value {
            Some(value) => Ok(Fetched::new(value, Source::Hit, version)),
            None => Err(self.not_found(key)),
        })
    }

    /// Step 2: joins or starts the flight of `key` and waits for its answer
    /// (at most `timeout`).
    pub(crate) async fn miss(
        self: Arc<Self>,
        key: u64,
        timeout: Option<Duration>,
    ) -> Result<Fetched<T>, Error> {
        Counters::bump(&self.counters.misses);
        let runtime = Handle::try_current()
            .ok()
            .or_else(|| self.runtime.clone())
            .ok_or(Error::NoRuntime)?;
        let joined = self.flights.join(key, watch::Sender::subscribe, || {
            let (sender, receiver) = watch::channel(None);
            (sender, receiver)
        });
        let answer = match joined {
            Joined::Follower(answer) => {
                Counters::bump(&self.counters.coalesced);
                answer
            }
            Joined::Leader(token, answer) => {
                let flight = Landing {
                    table: Some(Arc::clone(&self)),
                    key,
                    token,
                };
                // Detached: dropping or timing out the callers cancels nothing.
                runtime.spawn(flight.fly());
                answer
            }
        };
        self.wait(answer, timeout).await
    }

    async fn wait(
        &self,
        mut answer: watch::Receiver<Answer<T>>,
        timeout: Option<Duration>,
    ) -> Result<Fetched<T>, Error> {
        let landed = async {
            match answer.wait_for(Option::is_some).await {
                Ok(answer) => answer.clone().expect("waited for Some"),
                // Unreachable while `Landing` answers on drop; never hang anyway.
                Err(_) => Err(self.crashed("the flight ended without an answer")),
            }
        };
        match timeout {
            None => landed.await,
            Some(after) => {
                tokio::time::timeout(after, landed)
                    .await
                    .unwrap_or(Err(Error::Timeout {
                        table: self.spec.name,
                        after,
                    }))
            }
        }
    }

    /// Step 3: L1 again (a flight may have landed since the miss), then L2,
    /// then the loader.
    async fn resolve(&self, key: u64) -> Result<Fetched<T>, Error> {
        if let Some(live) = self.rows.get(key, self.clock.now_ms()) {
            let version = RawId::new(T::KIND, live.version);
            return match live.value {
                Some(value) => Ok(Fetched::new(value, Source::Hit, version)),
                None => Err(self.not_found(key)),
            };
        }
        if let Some(tier) = &self.tier {
            if let Some((version, value)) = tier.read(key, &self.counters).await {
                return Ok(Fetched::new(Arc::new(value), Source::L2, version));
            }
        }
        let loader = self.loader.as_ref().ok_or(Error::NoLoader {
            table: self.spec.name,
        })?;
        // An immutable entity's version is its own id; a mutable one's is
        // minted before the system of record is read, so it orders the read.
        let version = match self.spec.coherence {
            Coherence::None => RawId::new(T::KIND, key),
            _ => Minter::global().mint_raw(T::KIND),
        };
        match loader(Id::from_payload(key)).await {
            Ok(Some(value)) => {
                if let Some(tier) = &self.tier {
                    tier.write(key, &version, &value, self.l2_ttl_ms(), &self.counters)
                        .await;
                }
                Ok(Fetched::new(Arc::new(value), Source::Fill, version))
            }
            Ok(None) => Err(self.not_found(key)),
            Err(source) => Err(Error::Load {
                table: self.spec.name,
                source: Arc::from(source),
            }),
        }
    }

    /// Step 4: installs the outcome unless overtaken, answers every waiter.
    fn land(&self, key: u64, token: u64, outcome: Result<Fetched<T>, Error>) {
        let now = self.clock.now_ms();
        let row = match &outcome {
            Ok(fetched) if fetched.source() != Source::Hit => Some(Row {
                value: Some(Arc::clone(fetched.value())),
                version: fetched.version().payload(),
                expires_at: l1::expiry(now, self.spec.ttl_ms, self.spec.jitter),
            }),
            Err(Error::NotFound { .. }) if self.spec.absent_ttl_ms > 0 => Some(Row {
                value: None,
                version: key,
                expires_at: l1::expiry(now, self.spec.absent_ttl_ms, self.spec.jitter),
            }),
            _ => None,
        };
        if row.is_some() {
            self.rows.make_room(now);
        }
        let waiters = self.flights.land(key, token, || {
            if let Some(row) = row {
                self.count_kept(self.rows.insert(key, row));
            }
        });
        match &outcome {
            Ok(fetched) if fetched.source() == Source::Fill => {
                Counters::bump(&self.counters.fills);
            }
            Ok(fetched) if fetched.source() == Source::L2 => {
                Counters::bump(&self.counters.l2_hits);
            }
            Ok(_) => {}
            Err(Error::NotFound { .. }) => Counters::bump(&self.counters.not_found),
            Err(_) => Counters::bump(&self.counters.load_errors),
        }
        if let Some(waiters) = waiters {
            waiters.send_replace(Some(outcome));
        }
    }

    /// Writes `value` under a fresh version, to L2 then L1; a flight of
    /// `key` under way will not install its (older) value in L1.
    pub(crate) async fn put(&self, key: u64, value: T) -> RawId {
        let version = Minter::global().mint_raw(T::KIND);
        if let Some(tier) = &self.tier {
            tier.write(key, &version, &value, self.l2_ttl_ms(), &self.counters)
                .await;
        }
        let value = Arc::new(value);
        let now = self.clock.now_ms();
        let row = Row {
            value: Some(value),
            version: version.payload(),
            expires_at: l1::expiry(now, self.spec.ttl_ms, self.spec.jitter),
        };
        self.rows.make_room(now);
        let kept = self.flights.overtake(key, || self.rows.insert(key, row));
        self.count_kept(kept);
        Counters::bump(&self.counters.puts);
        version
    }

    /// Drops `key` from L2 then L1; a flight of `key` under way will not
    /// install. (L2 first: a flight that starts in between reads L2 after the
    /// delete, and one that read L2 before it is overtaken.)
    pub(crate) async fn invalidate(&self, key: u64) {
        if let Some(tier) = &self.tier {
            tier.delete(key, &self.counters).await;
        }
        self.flights.overtake(key, || self.rows.remove(key));
        Counters::bump(&self.counters.invalidations);
    }

    /// Drops every row; no flight under way will install.
    pub(crate) fn flush(&self) {
        self.flights.overtake_all(|| self.rows.clear());
    }

    pub(crate) fn stats(&self) -> Stats {
        self.counters
            .snapshot(self.hits.sum(), self.rows.len(), self.flights.len())
    }

    /// A jittered L2 lifetime; the server's clock expires the key.
    fn l2_ttl_ms(&self) -> u64 {
        l1::expiry(0, self.spec.ttl_ms, self.spec.jitter)
    }

    fn count_kept(&self, kept: Kept) {
        if kept == Kept::Full {
            Counters::bump(&self.counters.full_skips);
        }
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

impl<T: Cached> AnyTable for Table<T> {
    fn info(&self) -> TableInfo {
        TableInfo {
            spec: self.spec,
            stats: self.stats(),
            health: if self.tier.as_ref().is_some_and(|t| t.server().is_down()) {
                Health::L2Down
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
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// A launched flight. If it is dropped before it lands (its task was
/// cancelled, its runtime shut down, even before its first poll), it lands a
/// crash, so no waiter waits for ever and no flight entry is left behind.
struct Landing<T: Cached> {
    table: Option<Arc<Table<T>>>,
    key: u64,
    token: u64,
}

impl<T: Cached> Landing<T> {
    /// Resolves the key and lands, whatever happens on the way.
    async fn fly(mut self) {
        let table = Arc::clone(self.table.as_ref().expect("lands once"));
        let outcome = AssertUnwindSafe(table.resolve(self.key))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Err(table.crashed(&panic_message(&*panic))));
        self.land(outcome);
    }

    fn land(&mut self, outcome: Result<Fetched<T>, Error>) {
        if let Some(table) = self.table.take() {
            table.land(self.key, self.token, outcome);
        }
    }
}

impl<T: Cached> Drop for Landing<T> {
    fn drop(&mut self) {
        if let Some(table) = &self.table {
            let crashed = table.crashed("the flight was dropped before it answered");
            self.land(Err(crashed));
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
