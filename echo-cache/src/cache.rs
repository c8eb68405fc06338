//! The cache: one table per declared type, the builder, and the
//! maintenance thread that ticks the clock and runs the sweeper.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::runtime::Handle;

use crate::clock::Clock;
use crate::directory::{self, DECLARATIONS};
use crate::error::{BoxError, Error};
use crate::fetched::Fetched;
use crate::id::{Id, RawId};
use crate::l2::{self, Codec};
use crate::roster::TableInfo;
use crate::spec::Cached;
use crate::stats::Stats;
use crate::table::{AnyTable, Loader, Shared, Table};

/// How often the maintenance thread ticks the clock.
const TICK: Duration = Duration::from_millis(1);

/// A near-cache: one table for every type declared with `#[near_cache]`.
///
/// Cheap to clone; clones share the tables. The maintenance thread stops
/// when the last clone is dropped.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cache, Id, Source};
///
/// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// pub struct Game { pub secret: String }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), echo_cache::Error> {
/// let cache = Cache::builder()
///     .loader(|id: Id<Game>| async move {
///         Ok::<_, std::io::Error>(Some(Game { secret: format!("secret of {id}") }))
///     })
///     .build()?;
///
/// let id = Id::<Game>::mint();
/// let first = cache.fetch(id).await?;
/// assert_eq!(first.source(), Source::Fill);
/// let again = Game::fetch(&cache, id).await?;
/// assert_eq!(again.source(), Source::Hit);
/// assert_eq!(again.secret, first.secret);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    /// The table of each declaration, at the declaration's position.
    tables: Box<[Slot]>,
    clock: Clock,
    fetch_timeout: Option<Duration>,
    /// Dropping it stops the maintenance thread.
    _stop: mpsc::Sender<()>,
}

struct Slot {
    /// The `Table<T>`, for the typed paths.
    typed: Arc<dyn Any + Send + Sync>,
    /// The same table, for the paths that do not know `T`.
    erased: Arc<dyn AnyTable>,
}

impl Cache {
    /// Starts building a cache.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Reads the value of `id`: from L1 in the caller's thread if it is
    /// there, else through the one flight of `id` (L2, then the loader).
    ///
    /// Waits at most the cache's fetch timeout (see
    /// [`Builder::fetch_timeout`]).
    ///
    /// # Concurrent calls on the same id
    ///
    /// Misses of one id share one flight, which runs as its own task: the
    /// loader runs once however many callers wait, and a caller that gives
    /// up cancels nothing for the others.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if the loader found nothing, [`Error::Load`] if
    /// it failed, [`Error::FlightCrashed`] if it panicked,
    /// [`Error::Timeout`], [`Error::NoLoader`], [`Error::NoRuntime`].
    pub async fn fetch<T: Cached>(&self, id: Id<T>) -> Result<Fetched<T>, Error> {
        self.fetch_within(id, self.inner.fetch_timeout).await
    }

    /// [`fetch`](Self::fetch) with its own timeout (`None`: wait as long as
    /// the flight takes).
    ///
    /// # Errors
    ///
    /// As [`fetch`](Self::fetch).
    pub async fn fetch_within<T: Cached>(
        &self,
        id: Id<T>,
        timeout: Option<Duration>,
    ) -> Result<Fetched<T>, Error> {
        let table = self.table::<T>();
        if let Some(hit) = table.hit(id.payload()) {
            return hit;
        }
        self.shared_table::<T>().miss(id.payload(), timeout).await
    }

    /// Writes `value` as the value of `id`, through L2 and L1, and returns
    /// its new version.
    ///
    /// A fill of `id` under way will not overwrite it in L1. If L2 does not
    /// take the write (an outage), it is dropped and counted
    /// ([`Stats::l2_writes_dropped`]); L1 still holds the new value.
    ///
    /// # Errors
    ///
    /// None today; coherence modes that must deliver an invalidation will
    /// report here when they cannot.
    pub async fn put<T: Cached>(&self, id: Id<T>, value: T) -> Result<RawId, Error> {
        Ok(self.table::<T>().put(id.payload(), value).await)
    }

    /// Drops the value of `id` from L2 and L1. A fill of `id` under way will
    /// not install its value in L1; the next fetch reads afresh.
    ///
    /// # Errors
    ///
    /// None today; coherence modes that must deliver an invalidation will
    /// report here when they cannot.
    pub async fn invalidate<T: Cached>(&self, id: Id<T>) -> Result<(), Error> {
        self.table::<T>().invalidate(id.payload()).await;
        Ok(())
    }

    /// Drops every row of `T`'s table (in L1). Fills under way will not
    /// install; the next fetches load afresh.
    pub fn flush<T: Cached>(&self) {
        self.table::<T>().flush();
    }

    /// The counters of `T`'s table.
    #[must_use]
    pub fn stats<T: Cached>(&self) -> Stats {
        self.table::<T>().stats()
    }

    /// The live roster: every table with its spec, counters and health,
    /// sorted by table name.
    #[must_use]
    pub fn tables(&self) -> Vec<TableInfo> {
        let mut roster: Vec<TableInfo> = self
            .inner
            .tables
            .iter()
            .map(|slot| slot.erased.info())
            .collect();
        roster.sort_by_key(|info| info.spec.name());
        roster
    }

    /// The clock rows expire by.
    #[must_use]
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    #[inline]
    fn table<T: Cached>(&self) -> &Table<T> {
        self.inner.tables[T::__declaration().slot()]
            .typed
            .downcast_ref()
            .expect("the slot of T holds the table of T")
    }

    fn shared_table<T: Cached>(&self) -> Arc<Table<T>> {
        Arc::clone(&self.inner.tables[T::__declaration().slot()].typed)
            .downcast()
            .expect("the slot of T holds the table of T")
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("tables", &self.tables())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Cache`]: loaders, clock, timeouts.
pub struct Builder {
    loaders: HashMap<TypeId, Box<dyn Any + Send>>,
    codecs: HashMap<TypeId, Box<dyn Any + Send>>,
    clock: Clock,
    fetch_timeout: Option<Duration>,
    runtime: Option<Handle>,
    l2_url: Option<String>,
    l2_timeout: Duration,
    l2_probe_every: Duration,
    max_value_bytes: usize,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            loaders: HashMap::new(),
            codecs: HashMap::new(),
            clock: Clock::system(),
            fetch_timeout: Some(Builder::DEFAULT_FETCH_TIMEOUT),
            runtime: None,
            l2_url: None,
            l2_timeout: Builder::DEFAULT_L2_TIMEOUT,
            l2_probe_every: Builder::DEFAULT_L2_PROBE_EVERY,
            max_value_bytes: Builder::DEFAULT_MAX_VALUE_BYTES,
        }
    }
}

impl Builder {
    /// How long a fetch waits for its flight unless told otherwise.
    pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
    /// How long one L2 operation may take before the fetch goes on without
    /// it, unless told otherwise.
    pub const DEFAULT_L2_TIMEOUT: Duration = Duration::from_millis(50);
    /// How often a server that stopped answering is probed, unless told
    /// otherwise.
    pub const DEFAULT_L2_PROBE_EVERY: Duration = Duration::from_secs(1);
    /// The largest L2 frame written, unless told otherwise: 1 MiB.
    pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;

    /// Puts every table behind the Valkey/Redis server at `url`:
    /// `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS).
    ///
    /// The connection is made on first use and remade by itself after a
    /// failure; while the server does not answer, fetches go to the loader.
    /// Without an L2 address the cache runs L1-only.
    #[must_use]
    pub fn l2(mut self, url: impl Into<String>) -> Builder {
        self.l2_url = Some(url.into());
        self
    }

    /// How long one L2 operation may take before a fetch goes on without
    /// it ([`DEFAULT_L2_TIMEOUT`](Self::DEFAULT_L2_TIMEOUT) unless set).
    #[must_use]
    pub fn l2_timeout(mut self, timeout: Duration) -> Builder {
        self.l2_timeout = timeout;
        self
    }

    /// How often a server that stopped answering is probed
    /// ([`DEFAULT_L2_PROBE_EVERY`](Self::DEFAULT_L2_PROBE_EVERY) unless set).
    #[must_use]
    pub fn l2_probe_every(mut self, every: Duration) -> Builder {
        self.l2_probe_every = every;
        self
    }

    /// The largest frame written to L2
    /// ([`DEFAULT_MAX_VALUE_BYTES`](Self::DEFAULT_MAX_VALUE_BYTES) unless
    /// set). Larger values are served and kept in L1 only, and counted
    /// ([`Stats::oversized`]).
    #[must_use]
    pub fn max_value_bytes(mut self, bytes: usize) -> Builder {
        self.max_value_bytes = bytes;
        self
    }

    /// Writes `T`'s L2 frames with `codec` instead of [`Postcard`](crate::Postcard).
    #[must_use]
    pub fn codec<T: Cached>(mut self, codec: impl Codec<T>) -> Builder {
        let codec: Arc<dyn Codec<T>> = Arc::new(codec);
        self.codecs.insert(TypeId::of::<T>(), Box::new(codec));
        self
    }

    /// Sets the loader of `T`: the system of record, called once per herd
    /// of misses that neither L1 nor L2 can answer. `Ok(None)` means the
    /// entity does not exist ([`Error::NotFound`]).
    ///
    /// A table without a loader serves what is cached and put, and answers
    /// other misses with [`Error::NoLoader`].
    #[must_use]
    pub fn loader<T, F, Fut, E>(mut self, load: F) -> Builder
    where
        T: Cached,
        F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<T>, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let loader: Loader<T> = Arc::new(move |id| load(id).map(|r| r.map_err(Into::into)).boxed());
        self.loaders.insert(TypeId::of::<T>(), Box::new(loader));
        self
    }

    /// The clock rows expire by; [`Clock::manual`] in tests.
    #[must_use]
    pub fn clock(mut self, clock: Clock) -> Builder {
        self.clock = clock;
        self
    }

    /// How long a fetch waits for its flight before it gives up with
    /// [`Error::Timeout`] ([`DEFAULT_FETCH_TIMEOUT`](Self::DEFAULT_FETCH_TIMEOUT)
    /// unless set; `None`: as long as the flight takes). The flight itself
    /// goes on. Timeouts need a Tokio runtime with its timer enabled.
    #[must_use]
    pub fn fetch_timeout(mut self, timeout: Option<Duration>) -> Builder {
        self.fetch_timeout = timeout;
        self
    }

    /// The runtime flights run on when a fetch comes from outside any Tokio
    /// runtime. By default, the runtime `build` is called in, if any.
    #[must_use]
    pub fn runtime(mut self, runtime: Handle) -> Builder {
        self.runtime = Some(runtime);
        self
    }

    /// Opens a table for every declared type and starts the maintenance
    /// thread.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if two declarations share a table name or a kind,
    /// [`Error::Config`] if the L2 address is not a valid URL.
    pub fn build(self) -> Result<Cache, Error> {
        directory::check_unique()?;
        let l2 = self
            .l2_url
            .map(|url| l2::Server::open(&url, self.l2_timeout, self.l2_probe_every))
            .transpose()?;
        let shared = Shared {
            clock: self.clock.clone(),
            runtime: self.runtime.or_else(|| Handle::try_current().ok()),
            loaders: Mutex::new(self.loaders),
            l2: l2.map(Arc::new),
            max_value_bytes: self.max_value_bytes,
            codecs: Mutex::new(self.codecs),
        };
        let tables = DECLARATIONS
            .iter()
            .map(|decl| {
                let erased = (decl.open)(decl, &shared);
                let typed = Arc::clone(&erased).into_any();
                Slot { typed, erased }
            })
            .collect();
        let (stop, stopped) = mpsc::channel();
        let inner = Arc::new(Inner {
            tables,
            clock: self.clock,
            fetch_timeout: self.fetch_timeout,
            _stop: stop,
        });
        spawn_maintenance(Arc::downgrade(&inner), stopped)?;
        Ok(Cache { inner })
    }
}

/// Ticks the clock every millisecond and sweeps each table every `sweep_ms`,
/// until the cache is dropped.
fn spawn_maintenance(cache: Weak<Inner>, stopped: mpsc::Receiver<()>) -> Result<(), Error> {
    let start = Instant::now();
    let mut next_sweeps: Vec<Instant> = DECLARATIONS
        .iter()
        .map(|decl| start + Duration::from_millis(decl.spec.sweep_ms))
        .collect();
    let run = move || {
        while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(TICK) {
            let Some(cache) = cache.upgrade() else { return };
            cache.clock.tick();
            let now = Instant::now();
            let tables = cache.tables.iter().zip(DECLARATIONS.iter());
            for ((slot, decl), next) in tables.zip(&mut next_sweeps) {
                if now >= *next {
                    slot.erased.sweep();
                    *next = now + Duration::from_millis(decl.spec.sweep_ms);
                }
            }
        }
    };
    std::thread::Builder::new()
        .name("echo-cache-maintenance".into())
        .spawn(run)
        .map(drop)
        .map_err(|e| Error::Config(format!("cannot start the maintenance thread: {e}")))
}
