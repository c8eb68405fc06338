//! The cache: one table per declared type, the builder, and the
//! maintenance thread that ticks the clock and runs the sweeper.

pub(crate) mod claim;
pub(crate) mod directory;
pub(crate) mod fetch;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};

use crate::clock::{Clock, MAX_TICK, millis};
use crate::coherence::{Target, durable, link};
use crate::connections::{Address, Server};
use crate::entity::id::{Id, IdOf, RawId};
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, Coherence, TableSpec};
use crate::error::{BoxError, Error};
use crate::l1;
use crate::l2::Codec;
use crate::report::roster::{Readiness, TableInfo};
use crate::report::stats::Stats;
use crate::table::fetched::Fetched;
use crate::table::{self, AnyTable, Loader, Shared, Table};
use directory::{DECLARATIONS, Declaration};
use fetch::Fetch;

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
    /// `inner.tables`, held here too: a fetch finds its table without
    /// first loading `inner`.
    tables: Arc<[Slot]>,
    /// The address of the first declaration, which `tables` follows.
    directory: usize,
    fetch_timeout: Option<Duration>,
    inner: Arc<Inner>,
}

struct Inner {
    /// The table of each declaration, at the declaration's position.
    tables: Arc<[Slot]>,
    clock: Clock,
    readiness: Arc<Readiness>,
    /// Wakes the maintenance thread, which stops once `Inner` is gone.
    wake: mpsc::Sender<()>,
    /// Dropping it stops the coherence lanes.
    _stop_coherence: watch::Sender<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.wake.send(());
    }
}

#[cfg(feature = "metrics")]
impl Inner {
    fn publish_metrics(&self) {
        crate::report::metrics::describe();
        for slot in self.tables.iter() {
            slot.erased.publish_metrics();
        }
    }
}

struct Slot {
    /// The `Table<T>`, for the typed paths: where `erased` points, without
    /// the vtable lookup `Arc::as_ptr` of a `dyn` needs (one load fewer on
    /// every fetch).
    table: NonNull<()>,
    /// The `TypeId` of that `Table<T>`.
    type_id: TypeId,
    /// The same table, for the paths that do not know `T`; it keeps the
    /// table alive.
    erased: Arc<dyn AnyTable>,
}

// SAFETY: `table` points into `erased`, which is `Send + Sync`; the rest is.
unsafe impl Send for Slot {}
unsafe impl Sync for Slot {}

impl Cache {
    /// Starts building a cache.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Reads the value of `id`: from L1 in the caller's thread if it is
    /// there, else through the one flight of `id` (L2, then the loader).
    /// `id` is an [`Id<T>`] ([`IdOf`]): an id of another kind does not
    /// compile.
    ///
    /// Waits at most the cache's fetch timeout (see
    /// [`Builder::fetch_timeout`]).
    ///
    /// # Concurrent calls on the same id
    ///
    /// Misses of one id share one flight: the loader runs once however many
    /// callers wait. The first caller drives the flight in its own task; if
    /// it gives up (a timeout, a dropped future), the flight goes on as a
    /// task of its own, so no caller cancels anything for the others.
    ///
    /// # Errors
    ///
    /// [`Error::NotFound`] if the loader found nothing, [`Error::Load`] if
    /// it failed, [`Error::FlightCrashed`] if it panicked,
    /// [`Error::Timeout`], [`Error::NoLoader`], [`Error::NoRuntime`].
    #[inline]
    pub fn fetch<T: Cached>(&self, id: impl IdOf<T>) -> Fetch<'_, T> {
        Fetch::new(self.table::<T>(), id.__id(), self.fetch_timeout)
    }

    /// [`fetch`](Self::fetch) with its own timeout (`None`: wait as long as
    /// the flight takes).
    ///
    /// # Errors
    ///
    /// As [`fetch`](Self::fetch).
    pub fn fetch_within<T: Cached>(
        &self,
        id: impl IdOf<T>,
        timeout: Option<Duration>,
    ) -> Fetch<'_, T> {
        Fetch::new(self.table::<T>(), id.__id(), timeout)
    }

    /// Reads the values of many ids of `T` at once: one answer per id, in
    /// the order of `ids`, each what [`fetch`](Self::fetch) of the id would
    /// answer, in fewer round trips.
    ///
    /// - Ids in L1 are answered in the caller's thread.
    /// - Each other id joins the flight of its id if one is under way (a
    ///   [`fetch`](Self::fetch) of it, another batch): the herd rules hold
    ///   per id.
    /// - The rest are read from L2 together: one `MGET` for a table's keys
    ///   (they share a slot), one per slot, sent at once, for a
    ///   [spread](crate::Placement::Spread) table on a cluster.
    /// - What L2 has not got is loaded by one call of the table's batch
    ///   loader ([`Builder::loader_many`]), or by its loader once per id,
    ///   all at once, if it has none.
    ///
    /// An id given twice is read once and answered in both places. Every
    /// id read is installed in L1 and L2 and counted ([`Stats`]) as a
    /// fetch of it would be; an invalidation or a put of an id while the
    /// batch loads it wins, as with `fetch`. `ids` is read when this is
    /// called; nothing else happens until the future is polled.
    ///
    /// Waits at most the cache's fetch timeout (see
    /// [`Builder::fetch_timeout`]) for all of them: an id not answered by
    /// then answers [`Error::Timeout`], and its flight goes on.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id, Source};
    ///
    /// #[near_cache(kind = "USR", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct User { pub name: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .loader(|id: Id<User>| async move {
    ///         Ok::<_, std::io::Error>(Some(User { name: format!("user {id}") }))
    ///     })
    ///     .build()?;
    /// let (ada, bob) = (Id::<User>::mint(), Id::<User>::mint());
    /// let hit = cache.fetch(ada).await?;
    ///
    /// let users = cache.fetch_many([bob, ada, bob]).await;
    /// let users: Vec<_> = users.into_iter().collect::<Result<_, _>>()?;
    /// assert_eq!(users[0].name, format!("user {bob}"));
    /// assert_eq!(users[0].source(), Source::Fill); // loaded once…
    /// assert_eq!(users[2].version(), users[0].version()); // …answered twice
    /// assert_eq!(users[1].source(), Source::Hit);
    /// assert_eq!(users[1].version(), hit.version());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Each id's own, as [`fetch`](Self::fetch)'s: [`Error::NotFound`] for
    /// an id the loader did not find, [`Error::Load`] for each id of a
    /// batch whose loader failed, and so on.
    pub fn fetch_many<T: Cached, I>(
        &self,
        ids: I,
    ) -> impl Future<Output = Vec<Result<Fetched<T>, Error>>> + Send + 'static
    where
        I: IntoIterator,
        I::Item: IdOf<T>,
    {
        self.fetch_many_within(ids, self.fetch_timeout)
    }

    /// [`fetch_many`](Self::fetch_many) with its own timeout (`None`: wait
    /// as long as the flights take).
    ///
    /// # Errors
    ///
    /// As [`fetch_many`](Self::fetch_many).
    pub fn fetch_many_within<T: Cached, I>(
        &self,
        ids: I,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Vec<Result<Fetched<T>, Error>>> + Send + 'static
    where
        I: IntoIterator,
        I::Item: IdOf<T>,
    {
        let keys: Vec<u64> = ids.into_iter().map(|id| id.__id().payload()).collect();
        self.table::<T>().shared().fetch_many(keys, timeout)
    }

    /// Writes `value` as the value of `id` under a fresh version, through L2
    /// and this node's L1, tells the other nodes (per the table's coherence
    /// mode), and returns the version.
    ///
    /// A fill of `id` under way will not overwrite it in L1. If L2 does not
    /// take the write (an outage), it is dropped and counted
    /// ([`Stats::l2_writes_dropped`]); L1 still holds the new value.
    ///
    /// # Errors
    ///
    /// [`Error::NotDelivered`] if the table is `durable` and the
    /// invalidation could not be recorded for the other nodes.
    pub async fn put<T: Cached>(&self, id: impl IdOf<T>, value: T) -> Result<RawId, Error> {
        self.table::<T>()
            .put(id.__id().payload(), value, u64::MAX)
            .await
    }

    /// [`put`](Self::put)s `value`, to live at most `ttl` (capped at the
    /// table's `ttl_ms`) in L1 and L2, on every node that reads it: a new
    /// session with its own lifetime, say. The TTL is a deadline, jittered
    /// down only, as a loader's ([`Builder::loader_with_ttl`]).
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::{near_cache, Cache, Clock, Id, Source};
    ///
    /// #[near_cache(kind = "SES", ttl_ms = 3_600_000, jitter = 0.0)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Session { user: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let clock = Clock::manual();
    /// let cache = Cache::builder()
    ///     .clock(clock.clone())
    ///     .without_loader::<Session>()
    ///     .build()?;
    /// let id = Id::<Session>::mint();
    /// let session = Session { user: "ada".into() };
    /// cache.put_with_ttl(id, session, Duration::from_secs(300)).await?;
    /// clock.advance(Duration::from_secs(299));
    /// assert_eq!(cache.fetch(id).await?.source(), Source::Hit);
    /// clock.advance(Duration::from_secs(1)); // its 5 minutes are up
    /// assert!(cache.fetch(id).await.is_err()); // and nothing can load it
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub async fn put_with_ttl<T: Cached>(
        &self,
        id: impl IdOf<T>,
        value: T,
        ttl: Duration,
    ) -> Result<RawId, Error> {
        let life_ms = millis(ttl);
        self.table::<T>()
            .put(id.__id().payload(), value, life_ms)
            .await
    }

    /// Drops the value of `id` from this node's L1 (before it returns) and
    /// from L2, and tells the other nodes, under a fresh version, which it
    /// returns. A fill of `id` under way will not install its value; the
    /// next fetch reads afresh.
    ///
    /// Call it after writing the entity to the system of record.
    ///
    /// # Errors
    ///
    /// [`Error::NotDelivered`] if the table is `durable` and the
    /// invalidation could not be recorded for the other nodes.
    pub async fn invalidate<T: Cached>(&self, id: impl IdOf<T>) -> Result<RawId, Error> {
        let version = Minter::global().mint_raw(T::KIND);
        self.invalidate_at(id, version).await?;
        Ok(version)
    }

    /// Invalidates `id` at `version`: the version of the write that made the
    /// cached value stale (minted by the writer when it wrote the system of
    /// record, say). Newer wins: rows and L2 frames older than `version` are
    /// dropped, newer ones are kept, and a repeated or late invalidation
    /// changes nothing.
    ///
    /// Versions compare by payload (see [`newer`](crate::newer)): `version`
    /// may be of any kind, and is written to L2 and announced to the other
    /// nodes as the same payload under `T`'s kind.
    ///
    /// # Errors
    ///
    /// As [`invalidate`](Self::invalidate).
    pub async fn invalidate_at<T: Cached>(
        &self,
        id: impl IdOf<T>,
        version: RawId,
    ) -> Result<(), Error> {
        self.table::<T>()
            .invalidate(id.__id().payload(), &version)
            .await
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

    /// Waits until the cache serves as declared: the node number of its
    /// versions is claimed on L2 (see
    /// [node numbers](crate::Minter#node-numbers)) and every coherent
    /// table's invalidation channel is up ([`Health::Bypassing`](crate::Health::Bypassing)
    /// no more). Without L2 it is ready at once.
    ///
    /// A cache serves before it is ready, safely: a coherent table reads
    /// around its L1 until its channel is up. Await this where a service
    /// should not take traffic before its cache is at full speed, or in a
    /// test before it counts hits. While the L2 server is away it waits:
    /// bound it with a timeout.
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::Cache;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder().build()?;
    /// tokio::time::timeout(Duration::from_secs(5), cache.ready())
    ///     .await
    ///     .expect("the cache is ready within 5 s");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ready(&self) {
        let inner = &self.inner;
        inner
            .readiness
            .until(|| {
                inner.readiness.is_claimed() && inner.tables.iter().all(|t| t.erased.trusted())
            })
            .await;
    }

    /// The clock rows expire by.
    #[must_use]
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Publishes every table's counters through the `metrics` facade now
    /// (see the crate docs, [Metrics](crate#metrics)). The cache does it
    /// by itself every second; call this where a reader must see the
    /// latest counts at once: before a final scrape, or in a test.
    /// Available with the `metrics` feature.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "DOC", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Doc { body: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// // The program installs a recorder (an exporter) first, e.g.
    /// // `metrics_exporter_prometheus::PrometheusBuilder::new().install()`.
    /// let cache = Cache::builder()
    ///     .loader(|_: Id<Doc>| async { Ok::<_, std::io::Error>(Some(Doc { body: "hi".into() })) })
    ///     .build()?;
    /// cache.fetch(Id::<Doc>::mint()).await?;
    /// // echo_cache_fetches_total{table="doc",source="fill"} is 1 from now on.
    /// cache.publish_metrics();
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        self.inner.publish_metrics();
    }

    /// The slot of `T`'s table: its declaration's position in the
    /// directory, found by address (the hot path of every fetch).
    #[inline]
    fn slot<T: Cached>(&self) -> &Slot {
        // The spec is the first field of its `repr(C)` declaration.
        let declaration = std::ptr::from_ref(T::__spec()) as usize;
        &self.tables[(declaration - self.directory) / size_of::<Declaration>()]
    }

    #[inline]
    pub(crate) fn table<T: Cached>(&self) -> &Table<T> {
        let slot = self.slot::<T>();
        assert!(
            slot.type_id == TypeId::of::<Table<T>>(),
            "the slot of T holds the table of T"
        );
        let table = slot.table.cast::<Table<T>>();
        // SAFETY: `table` points to a live `Table<T>` (so it is aligned for
        // one): its `TypeId` was just compared, which is what `downcast_ref`
        // does, without the virtual call; `slot.erased` keeps it alive
        // as long as `self` is borrowed.
        unsafe { table.as_ref() }
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
    /// Batch loaders, by `TypeId`, each a `BatchLoader<T>`.
    batch_loaders: HashMap<TypeId, Box<dyn Any + Send>>,
    codecs: HashMap<TypeId, Box<dyn Any + Send>>,
    clock: Clock,
    fetch_timeout: Option<Duration>,
    load_timeout: Duration,
    runtime: Option<Handle>,
    l2: Option<Address>,
    /// Root certificates (PEM) a `rediss://` L2 trusts instead of the
    /// system's; set only with the `tls` feature.
    l2_tls_root: Option<Vec<u8>>,
    l2_timeout: Duration,
    l2_probe_every: Duration,
    max_value_bytes: usize,
    tombstone_ttl: Duration,
    coherence_ping_every: Duration,
    node_name: Option<String>,
    backlog_limit: usize,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            loaders: HashMap::new(),
            batch_loaders: HashMap::new(),
            codecs: HashMap::new(),
            clock: Clock::system(),
            fetch_timeout: Some(Builder::DEFAULT_FETCH_TIMEOUT),
            load_timeout: Builder::DEFAULT_LOAD_TIMEOUT,
            runtime: None,
            l2: None,
            l2_tls_root: None,
            l2_timeout: Builder::DEFAULT_L2_TIMEOUT,
            l2_probe_every: Builder::DEFAULT_L2_PROBE_EVERY,
            max_value_bytes: Builder::DEFAULT_MAX_VALUE_BYTES,
            tombstone_ttl: Builder::DEFAULT_TOMBSTONE_TTL,
            coherence_ping_every: Builder::DEFAULT_COHERENCE_PING_EVERY,
            node_name: None,
            backlog_limit: Builder::DEFAULT_BACKLOG_LIMIT,
        }
    }
}

impl Builder {
    /// How long a fetch waits for its flight unless told otherwise.
    pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
    /// The deadline of a flight unless told otherwise (here or by the
    /// table's `load_timeout_ms`).
    pub const DEFAULT_LOAD_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long one L2 operation may take before the fetch goes on without
    /// it, unless told otherwise.
    pub const DEFAULT_L2_TIMEOUT: Duration = Duration::from_millis(50);
    /// How often a server that stopped answering is probed, unless told
    /// otherwise.
    pub const DEFAULT_L2_PROBE_EVERY: Duration = Duration::from_secs(1);
    /// The largest L2 frame written, unless told otherwise: 1 MiB.
    pub const DEFAULT_MAX_VALUE_BYTES: usize = 1 << 20;
    /// How long the L2 tombstone of an invalidation lives, unless told
    /// otherwise.
    pub const DEFAULT_TOMBSTONE_TTL: Duration = Duration::from_secs(60);

    /// How many ids a table keeps for delivery while the server is away,
    /// unless told otherwise.
    pub const DEFAULT_BACKLOG_LIMIT: usize = 100_000;

    /// How often the coherence link checks that its connection is alive,
    /// unless told otherwise; a PING unanswered for as long loses the link.
    pub const DEFAULT_COHERENCE_PING_EVERY: Duration = Duration::from_millis(500);

    /// How often the coherence link of `tracking` and `broadcast` tables
    /// PINGs the server, and how long it waits for the PONG
    /// ([`DEFAULT_COHERENCE_PING_EVERY`](Self::DEFAULT_COHERENCE_PING_EVERY)
    /// unless set). A link that misses the deadline is lost: its tables'
    /// L1 is flushed and bypassed until it is back. This bounds how long a
    /// half-open connection can hide missed invalidations.
    #[must_use]
    pub fn coherence_ping_every(mut self, every: Duration) -> Builder {
        self.coherence_ping_every = every;
        self
    }

    /// How many ids each table keeps while the L2 server is away
    /// ([`DEFAULT_BACKLOG_LIMIT`](Self::DEFAULT_BACKLOG_LIMIT) unless set):
    /// a `put` or `invalidate` whose L2 part or announcement the server did
    /// not take is kept (the newest version per id, at most 40 bytes an id)
    /// and delivered, in version order, once the server is back. Past the
    /// limit, a table keeps one table-wide invalidation instead: when it is
    /// delivered every node flushes the table's L1, and every L2 frame of
    /// the table older than it is replaced by a tombstone.
    #[must_use]
    pub fn backlog_limit(mut self, ids: usize) -> Builder {
        self.backlog_limit = ids;
        self
    }

    /// The name of this node, stable across its restarts: `durable` tables
    /// read their invalidation streams through a consumer group of this name,
    /// so a node that was away catches up on what it missed. Without one, a
    /// name unique to this process is made up, and a restarted node starts
    /// from the newest messages.
    ///
    /// A node name is 1 to 64 ASCII letters, digits, `-`, `_` and `.` (no
    /// spaces: it names a consumer group and a client). [`build`](Self::build)
    /// refuses any other with [`Error::Config`], naming what is wrong.
    ///
    /// ```standalone_crate
    /// use echo_cache::{Cache, Error};
    ///
    /// let refused = Cache::builder().node_name("web 1").build();
    /// assert!(matches!(refused, Err(Error::Config(why)) if why.contains("' ' is not allowed")));
    /// assert!(Cache::builder().node_name("web-1.eu_west").build().is_ok());
    /// ```
    #[must_use]
    pub fn node_name(mut self, name: impl Into<String>) -> Builder {
        self.node_name = Some(name.into());
        self
    }

    /// How long the L2 tombstone of an invalidation of a versioned table
    /// lives ([`DEFAULT_TOMBSTONE_TTL`](Self::DEFAULT_TOMBSTONE_TTL) unless
    /// set). While it lives, no fill older than the invalidation can write
    /// L2; a fill whose version is older than half of it does not write L2
    /// at all. Set it well above your slowest loader.
    #[must_use]
    pub fn tombstone_ttl(mut self, ttl: Duration) -> Builder {
        self.tombstone_ttl = ttl;
        self
    }

    /// Puts every table behind the Valkey/Redis server at `url`:
    /// `redis://[[user]:password@]host[:port][/db]`, or `rediss://…` for
    /// TLS (with the `tls` feature). See the [crate docs](crate#l2).
    ///
    /// - `user:password` logs in as an ACL user (`AUTH user password`);
    ///   `:password@` alone uses the `default` user (`requirepass`).
    ///   Percent-encode reserved characters in either.
    /// - `/db` selects a database (`SELECT db`, default 0) on every
    ///   connection.
    /// - `rediss://` verifies the server's certificate against the system's
    ///   root certificates, or those given to `l2_tls_root` (`tls` feature).
    ///
    /// [`build`](Self::build) only checks the URL: the connection is made on
    /// first use and remade by itself after a failure. A server that is
    /// down, refuses the credentials or the database, or fails the TLS
    /// handshake is an outage like any other: fetches go to the loader, no
    /// error reaches the caller, and [`Stats::l2_errors`] counts it (see the
    /// [crate docs](crate#l2)). Without an L2 address the cache runs
    /// L1-only.
    #[must_use]
    pub fn l2(mut self, url: impl Into<String>) -> Builder {
        self.l2 = Some(Address::Server(url.into()));
        self
    }

    /// Puts every table behind the Valkey/Redis Cluster that `seeds`
    /// belong to: the URLs of some of its nodes (one is enough; more let the
    /// cache start while one is down), each in the form [`l2`](Self::l2)
    /// takes, sharing the scheme and the credentials. The cache discovers
    /// the other nodes, routes each command to the owner of its slot, and
    /// follows the cluster through resharding and failover (the `redis`
    /// crate's cluster client).
    ///
    /// A table keeps its keys on one slot (`ecc:{<table>}:<id>`), so every
    /// operation stays on one node, and every coherence mode works on a
    /// cluster (see the [crate docs](crate#l2)).
    ///
    /// ```standalone_crate
    /// use echo_cache::Cache;
    ///
    /// let cache = Cache::builder()
    ///     .l2_cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"])
    ///     .build()?;
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    #[must_use]
    pub fn l2_cluster<S: Into<String>>(mut self, seeds: impl IntoIterator<Item = S>) -> Builder {
        self.l2 = Some(Address::Cluster(
            seeds.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// Trusts the root certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks), instead of the system's, to verify a
    /// `rediss://` L2 server: for a server with a private CA. Needs the
    /// `tls` feature; [`build`](Self::build) fails with [`Error::Config`] if
    /// `pem` holds no certificate or the L2 address is not `rediss://`.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn l2_tls_root(mut self, pem: impl Into<Vec<u8>>) -> Builder {
        self.l2_tls_root = Some(pem.into());
        self
    }

    /// How long one L2 operation may take before a fetch goes on without
    /// it ([`DEFAULT_L2_TIMEOUT`](Self::DEFAULT_L2_TIMEOUT) unless set).
    /// It bounds each try: on a cluster, an operation redirected while a
    /// slot changes hands is tried again for up to 1 s (see
    /// [Cluster](crate#cluster)).
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
    /// A loader given here overrides the one `T` declares
    /// (`#[near_cache(..., loader = load_fn)]`), in this cache only: use it
    /// for a loader that needs state the declaration cannot reach (a
    /// connection pool, a client), or to replace the declared one in a
    /// test. A table with neither is refused by [`build`](Self::build),
    /// unless [`without_loader`](Self::without_loader) says it needs none.
    #[must_use]
    pub fn loader<T, F, Fut, E>(mut self, load: F) -> Builder
    where
        T: Cached,
        F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<T>, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let loader: Option<Loader<T>> = Some(table::loader(load));
        self.loaders.insert(TypeId::of::<T>(), Box::new(loader));
        self
    }

    /// Sets the loader of `T`, like [`loader`](Self::loader), for values
    /// that know how long they may live: a session's remaining lifetime, a
    /// token's expiry. `Ok(Some((value, ttl)))`: the value's L1 row and its
    /// L2 key (`PX`) live at most `ttl`, and no longer than the declared
    /// `ttl_ms` (a longer `ttl` is capped, and jittered as `ttl_ms` is).
    /// A `ttl` shorter than `ttl_ms` is a deadline: it is jittered down
    /// only, from `ttl − ttl·jitter` to `ttl`, so a cohort given one
    /// deadline does not die together, and none outlives it. A row read
    /// back from L2 lives no longer than what is left of its frame. The
    /// deadline counts from the loader's answer: L1's coarse clock may read
    /// a tick late, so such a row is kept to die a tick early, and the
    /// clock ticks every 1% of the row's life (at least every millisecond)
    /// until its deadline: no answer begins past it, but for the
    /// maintenance thread being scheduled late (none in 1,600 answers of
    /// 300 ms rows, two nodes, in the tests).
    ///
    /// A zero `ttl` is served, not kept. A row whose whole life is within
    /// the table's `refresh_ms` is not refreshed ahead
    /// ([Refresh-ahead](crate#refresh-ahead)). A writer gives a value its
    /// TTL with [`Cache::put_with_ttl`].
    /// The attribute's `loader = ...` takes a plain loader only: give a
    /// loader of values with TTLs here.
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::{near_cache, Cache, Clock, Id, Source};
    ///
    /// #[near_cache(kind = "SES", ttl_ms = 3_600_000, jitter = 0.0)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Session { user: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let clock = Clock::manual();
    /// let cache = Cache::builder()
    ///     .clock(clock.clone())
    ///     .loader_with_ttl(|_: Id<Session>| async {
    ///         // This session ends in 5 minutes: cache it no longer.
    ///         let session = Session { user: "ada".into() };
    ///         Ok::<_, std::io::Error>(Some((session, Duration::from_secs(300))))
    ///     })
    ///     .build()?;
    /// let id = Id::<Session>::mint();
    /// cache.fetch(id).await?;
    /// clock.advance(Duration::from_secs(299));
    /// assert_eq!(cache.fetch(id).await?.source(), Source::Hit);
    /// clock.advance(Duration::from_secs(1)); // its 5 minutes are up
    /// assert_eq!(cache.fetch(id).await?.source(), Source::Fill);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn loader_with_ttl<T, F, Fut, E>(mut self, load: F) -> Builder
    where
        T: Cached,
        F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<(T, Duration)>, E>> + Send + 'static,
        E: Into<BoxError> + 'static,
    {
        let loader: Option<Loader<T>> = Some(table::loader_with_ttl(load));
        self.loaders.insert(TypeId::of::<T>(), Box::new(loader));
        self
    }

    /// Sets the batch loader of `T`: the system of record, asked once for
    /// all the ids a [`Cache::fetch_many`] could not answer from L1, a
    /// flight or L2 (a `WHERE id = ANY($1)` query, say). It answers the
    /// values it found, by id, as any `IntoIterator` of `(Id<T>, T)` (a
    /// `Vec`, a `HashMap`); an id it leaves out is not found
    /// ([`Error::NotFound`]), an id it was not asked for is ignored, and
    /// of an id answered twice the first value is kept. Its error fails
    /// every id of the call ([`Error::Load`]), as a loader's fails its id;
    /// so does its panic ([`Error::FlightCrashed`]), and the table's load
    /// timeout bounds the call as it bounds a flight.
    ///
    /// A table with a batch loader and no loader (neither given nor
    /// declared) loads a [`fetch`](Cache::fetch)'s id as a batch of one.
    /// Without a batch loader, `fetch_many` calls the loader once per id,
    /// all at once. The batch loader is given the ids in the order of the
    /// call, each once, and is never called with none.
    ///
    /// ```standalone_crate
    /// use std::collections::HashMap;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "USR", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct User { pub name: String }
    ///
    /// static QUERIES: AtomicUsize = AtomicUsize::new(0);
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .loader_many(|ids: Vec<Id<User>>| async move {
    ///         QUERIES.fetch_add(1, Ordering::Relaxed); // one query for all
    ///         let found: HashMap<Id<User>, User> = (ids.into_iter())
    ///             .filter(|id| id.payload() % 2 == 0) // odd ids do not exist
    ///             .map(|id| (id, User { name: format!("user {id}") }))
    ///             .collect();
    ///         Ok::<_, std::io::Error>(found)
    ///     })
    ///     .build()?;
    ///
    /// let ids = (1..=10).map(Id::<User>::from_payload);
    /// let users = cache.fetch_many(ids).await;
    /// assert_eq!(QUERIES.load(Ordering::Relaxed), 1);
    /// assert_eq!(users[1].as_ref().unwrap().name, format!("user {}", Id::<User>::from_payload(2)));
    /// assert!(users[0].as_ref().is_err_and(|e| e.is_not_found()));
    ///
    /// // A single fetch of a table with only a batch loader: a batch of one.
    /// let user = cache.fetch(Id::<User>::from_payload(12)).await?;
    /// assert_eq!(QUERIES.load(Ordering::Relaxed), 2);
    /// # let _ = user;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn loader_many<T, F, Fut, R, E>(self, load: F) -> Builder
    where
        T: Cached,
        F: Fn(Vec<Id<T>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: IntoIterator<Item = (Id<T>, T)>,
        E: Into<BoxError> + 'static,
    {
        self.batch_loader(table::batch_loader(load))
    }

    /// Sets the batch loader of `T`, like [`loader_many`](Self::loader_many),
    /// for values that come with their own TTL, as with
    /// [`loader_with_ttl`](Self::loader_with_ttl): each found value is
    /// answered as `(id, (value, ttl))`, and its L1 row and L2 key live no
    /// longer than `ttl` (nor than the table's `ttl_ms`), on every node that
    /// reads it.
    ///
    /// ```standalone_crate
    /// use std::collections::HashMap;
    /// use std::time::Duration;
    /// use echo_cache::{near_cache, Cache, Clock, Id, Source};
    ///
    /// #[near_cache(kind = "SES", ttl_ms = 3_600_000, jitter = 0.0)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Session { user: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let clock = Clock::manual();
    /// let cache = Cache::builder()
    ///     .clock(clock.clone())
    ///     .loader_many_with_ttl(|ids: Vec<Id<Session>>| async move {
    ///         // Each session ends 5 minutes from now: cache it no longer.
    ///         let left = Duration::from_secs(300);
    ///         let found: HashMap<Id<Session>, (Session, Duration)> = (ids.into_iter())
    ///             .map(|id| (id, (Session { user: "ada".into() }, left)))
    ///             .collect();
    ///         Ok::<_, std::io::Error>(found)
    ///     })
    ///     .build()?;
    /// let ids = [Id::<Session>::mint(), Id::<Session>::mint()];
    /// cache.fetch_many(ids).await;
    /// clock.advance(Duration::from_secs(299));
    /// assert_eq!(cache.fetch(ids[0]).await?.source(), Source::Hit);
    /// clock.advance(Duration::from_secs(1)); // their 5 minutes are up
    /// assert_eq!(cache.fetch(ids[0]).await?.source(), Source::Fill);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn loader_many_with_ttl<T, F, Fut, R, E>(self, load: F) -> Builder
    where
        T: Cached,
        F: Fn(Vec<Id<T>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
        R: IntoIterator<Item = (Id<T>, (T, Duration))>,
        E: Into<BoxError> + 'static,
    {
        self.batch_loader(table::batch_loader_with_ttl(load))
    }

    /// Sets `batch` as `T`'s batch loader.
    fn batch_loader<T: Cached>(mut self, batch: table::BatchLoader<T>) -> Builder {
        self.batch_loaders
            .insert(TypeId::of::<T>(), Box::new(batch));
        // It undoes a `without_loader::<T>()`, as `loader` does.
        let unloaded = (self.loaders.get(&TypeId::of::<T>()))
            .and_then(|given| given.downcast_ref::<Option<Loader<T>>>())
            .is_some_and(Option::is_none);
        if unloaded {
            self.loaders.remove(&TypeId::of::<T>());
        }
        self
    }

    /// Builds `T`'s table with no loader: for a table filled only by
    /// [`Cache::put`]. It serves what is cached and put; any other miss
    /// answers [`Error::NoLoader`]. This overrides a declared loader too,
    /// and, like [`loader`](Self::loader), the last of the two calls for
    /// `T` wins.
    ///
    /// Without a loader and without this, [`build`](Self::build) refuses
    /// the table ([`Error::MissingLoader`]), so a table that cannot load is
    /// found at start-up, not at its first miss.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Error, Id};
    ///
    /// #[near_cache(kind = "TOK", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Token { owner: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let refused = Cache::builder().build();
    /// assert!(matches!(refused, Err(Error::MissingLoader { .. })));
    ///
    /// let cache = Cache::builder().without_loader::<Token>().build()?;
    /// let id = Id::<Token>::mint();
    /// assert!(matches!(cache.fetch(id).await, Err(Error::NoLoader { .. })));
    /// cache.put(id, Token { owner: "ada".into() }).await?;
    /// assert_eq!(cache.fetch(id).await?.owner, "ada");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn without_loader<T: Cached>(mut self) -> Builder {
        self.loaders
            .insert(TypeId::of::<T>(), Box::new(None::<Loader<T>>));
        self.batch_loaders.remove(&TypeId::of::<T>());
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

    /// The deadline of every flight, for tables that do not declare their
    /// own `load_timeout_ms`
    /// ([`DEFAULT_LOAD_TIMEOUT`](Self::DEFAULT_LOAD_TIMEOUT) unless set).
    ///
    /// A flight (the L2 read, the loader, the L2 write) that has not
    /// answered by then is abandoned: every waiter gets
    /// [`Error::LoadTimeout`], the flight leaves the registry (the next
    /// fetch of the id starts afresh), its loader future is dropped, and a
    /// late result installs nowhere. So a loader that hangs (a database
    /// call without a timeout) costs each herd of its id at most this, and
    /// never blocks the id for good. Keep it above the
    /// [`fetch_timeout`](Self::fetch_timeout) if callers should see their
    /// own timeout first, and below half the
    /// [`tombstone_ttl`](Self::tombstone_ttl).
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::Cache;
    ///
    /// let cache = Cache::builder()
    ///     .load_timeout(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok::<(), echo_cache::Error>(())
    /// ```
    #[must_use]
    pub fn load_timeout(mut self, deadline: Duration) -> Builder {
        self.load_timeout = deadline;
        self
    }

    /// The runtime flights run on when a fetch comes from outside any Tokio
    /// runtime. By default, the runtime `build` is called in, if any.
    #[must_use]
    pub fn runtime(mut self, runtime: Handle) -> Builder {
        self.runtime = Some(runtime);
        self
    }

    /// Opens a table for every declared type, each with its loader (the
    /// one given to [`loader`](Self::loader), else the one it declares),
    /// and starts the maintenance thread.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] if two declarations share a table name or a kind,
    /// [`Error::MissingLoader`] if tables have no loader (neither declared
    /// nor given to [`loader`](Self::loader)) and were not built
    /// [`without_loader`](Self::without_loader),
    /// [`Error::Config`] if the node name is not valid,
    /// [`Error::NoRuntime`] if the cache has L2 and coherent tables and no
    /// runtime to run their coherence lanes on,
    /// [`Error::Config`] if the L2 address is not a valid URL (or is
    /// `rediss://` without the `tls` feature, or its TLS roots are unusable).
    /// Nothing is sent to the server here: bad credentials show up later as
    /// L2 errors.
    pub fn build(self) -> Result<Cache, Error> {
        directory::check_unique()?;
        #[cfg(feature = "metrics")]
        let metrics_node = self.node_name.as_deref().map(Arc::from);
        let node_name = match self.node_name {
            Some(name) => match node_name_fault(&name) {
                None => name,
                Some(fault) => {
                    return Err(Error::Config(format!(
                        "node name {name:?}: {fault}; a node name is 1 to {MAX_NODE_NAME} \
                         ASCII letters, digits, `-`, `_` and `.`"
                    )));
                }
            },
            None => format!("node-{}-{:08x}", std::process::id(), fastrand::u32(..)),
        };
        let l2 = self
            .l2
            .map(|address| {
                let tls_root = self.l2_tls_root.as_deref();
                Server::open(&address, tls_root, self.l2_timeout, self.l2_probe_every)
            })
            .transpose()?;
        let runtime = self.runtime.or_else(|| Handle::try_current().ok());
        // The node number needs claiming if there is a server to claim it
        // on, and a runtime to claim it from.
        let readiness = Arc::new(Readiness::new(l2.is_none() || runtime.is_none()));
        let shared = Shared {
            clock: self.clock.clone(),
            runtime,
            readiness: Arc::clone(&readiness),
            backlog_kick: Arc::default(),
            backlog_limit: self.backlog_limit,
            loaders: Mutex::new(self.loaders),
            l2: l2.map(Arc::new),
            max_value_bytes: self.max_value_bytes,
            tombstone_ttl: self.tombstone_ttl,
            load_timeout: self.load_timeout,
            codecs: Mutex::new(self.codecs),
            #[cfg(feature = "metrics")]
            metrics_node,
            batch_loaders: Mutex::new(self.batch_loaders),
        };
        let (opened, missing): (Vec<_>, Vec<_>) = DECLARATIONS
            .iter()
            .map(|decl| (decl.open)(&decl.spec, &shared))
            .partition(Result::is_ok);
        if !missing.is_empty() {
            let mut tables: Vec<&'static TableSpec> =
                missing.into_iter().filter_map(Result::err).collect();
            tables.sort_by_key(|spec| spec.name());
            return Err(Error::MissingLoader {
                tables: tables.into(),
            });
        }
        let tables: Arc<[Slot]> = opened
            .into_iter()
            .flatten()
            .map(|erased| {
                let typed = Arc::clone(&erased).into_any();
                let type_id = (*typed).type_id();
                let table = NonNull::from(&*typed).cast();
                Slot {
                    table,
                    type_id,
                    erased,
                }
            })
            .collect();
        let (stop_coherence, coherence_stopped) = watch::channel(());
        if let Some(server) = &shared.l2 {
            let lanes = Lanes {
                tables: tables.iter().map(|slot| Arc::clone(&slot.erased)).collect(),
                server: Arc::clone(server),
                link: link::Settings {
                    ping_every: self.coherence_ping_every,
                    deadline: self.coherence_ping_every,
                },
                node_name,
                readiness: Arc::clone(&readiness),
                backlog_kick: Arc::clone(&shared.backlog_kick),
                stop: coherence_stopped,
            };
            lanes.start(shared.runtime.as_ref())?;
        }
        let (wake, woken) = mpsc::channel();
        let inner = Arc::new(Inner {
            tables: Arc::clone(&tables),
            clock: self.clock,
            readiness,
            wake,
            _stop_coherence: stop_coherence,
        });
        spawn_maintenance(Arc::downgrade(&inner), woken)?;
        Ok(Cache {
            tables,
            directory: DECLARATIONS.as_ptr() as usize,
            fetch_timeout: self.fetch_timeout,
            inner,
        })
    }
}

/// Ticks the clock, sweeps each table every `sweep_ms`, frees what L1's
/// writers removed and, with the `metrics` feature, publishes the tables'
/// counters every [`PUBLISH_EVERY`](crate::report::metrics::PUBLISH_EVERY), until
/// the cache is dropped.
///
/// The thread sleeps until its next duty: the clock's tick is 1% of the
/// shortest TTL declared (absence TTLs included), between 1 ms and
/// [`MAX_TICK`], so an idle cache of 10-minute rows wakes ten times a second,
/// not a thousand; finer while rows with deadlines of their own ask for it
/// (see [`Clock::follow`]), which wakes it. A manual clock needs no tick at
/// all. User code reached from here (a value's `Drop`) cannot stop the
/// thread: a panic is caught, reported, and the next duty runs.
fn spawn_maintenance(cache: Weak<Inner>, woken: mpsc::Receiver<()>) -> Result<(), Error> {
    let Some((clock, wake)) = cache.upgrade().map(|c| (c.clock.clone(), c.wake.clone())) else {
        return Ok(());
    };
    // A manual clock is not ticked: the thread still wakes to free garbage.
    let manual = clock.is_manual();
    if !manual {
        clock.ticked_by(tick_of(DECLARATIONS.iter().map(|decl| &decl.spec)), wake);
    }
    let start = Instant::now();
    let mut next_sweeps: Vec<Instant> = DECLARATIONS
        .iter()
        .map(|decl| start + Duration::from_millis(decl.spec.sweep_ms))
        .collect();
    #[cfg(feature = "metrics")]
    let mut next_publish = start;
    let run = move || {
        let mut ticked = start;
        loop {
            let tick = if manual { MAX_TICK } else { clock.tick_every() };
            let next_sweep = next_sweeps.iter().min().copied();
            let wake = next_sweep.map_or(ticked + tick, |sweep| sweep.min(ticked + tick));
            let sleep = wake.saturating_duration_since(Instant::now());
            // Woken early: a finer tick is asked for, or the cache is gone.
            if let Err(RecvTimeoutError::Disconnected) = woken.recv_timeout(sleep) {
                return;
            }
            let Some(cache) = cache.upgrade() else { return };
            let now = Instant::now();
            if now >= ticked + clock.tick_every() {
                clock.tick();
                ticked = now;
            }
            let tables = cache.tables.iter().zip(DECLARATIONS.iter());
            for ((slot, decl), next) in tables.zip(&mut next_sweeps) {
                let duty = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    if now >= *next {
                        slot.erased.sweep();
                    } else {
                        slot.erased.collect();
                    }
                }));
                if now >= *next {
                    *next = now + Duration::from_millis(decl.spec.sweep_ms);
                }
                if duty.is_err() {
                    tracing::error!(
                        table = decl.spec.name,
                        "the maintenance of a table panicked; it goes on"
                    );
                }
            }
            // The thread wakes at least every `MAX_TICK`: publishing is at
            // most that late.
            #[cfg(feature = "metrics")]
            if now >= next_publish {
                next_publish = now + crate::report::metrics::PUBLISH_EVERY;
                // A recorder is user code: its panic must not stop the thread.
                let published =
                    std::panic::catch_unwind(AssertUnwindSafe(|| cache.publish_metrics()));
                if published.is_err() {
                    tracing::error!("publishing the metrics panicked; it goes on");
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

/// The clock's tick: 1% of the shortest lifetime a row may be drawn, within
/// 1 ms..=[`MAX_TICK`].
fn tick_of<'a>(specs: impl Iterator<Item = &'a TableSpec>) -> Duration {
    let shortest = specs
        .flat_map(|spec| {
            [spec.ttl_ms, spec.absent_ttl_ms].map(|ttl| l1::shortest_lifetime(ttl, spec.jitter))
        })
        .filter(|&ms| ms > 0)
        .min();
    shortest.map_or(MAX_TICK, |ms| {
        Duration::from_millis(ms / 100).clamp(Duration::from_millis(1), MAX_TICK)
    })
}

/// The longest node name: it names a consumer group and a client.
const MAX_NODE_NAME: usize = 64;

/// What is wrong with a node name, if anything.
fn node_name_fault(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".to_owned());
    }
    if name.len() > MAX_NODE_NAME {
        return Some(format!("it is {} bytes long", name.len()));
    }
    name.chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .map(|c| format!("{c:?} is not allowed"))
}

/// The tasks of a cache with L2: the claim of its node number, the
/// delivery of the writes its tables kept while the server was away, and
/// the coherence lanes that carry other nodes' invalidations to its tables.
struct Lanes {
    tables: Vec<Arc<dyn AnyTable>>,
    server: Arc<Server>,
    link: link::Settings,
    /// The node's name, for the consumer groups of durable tables.
    node_name: String,
    readiness: Arc<Readiness>,
    backlog_kick: Arc<Notify>,
    stop: watch::Receiver<()>,
}

impl Lanes {
    /// Starts the tasks its tables need, on `runtime`. Without one, a cache
    /// with coherent tables cannot work ([`Error::NoRuntime`]); one without
    /// keeps its random node number and drops what the server did not take.
    fn start(self, runtime: Option<&Handle>) -> Result<(), Error> {
        if let Some(runtime) = runtime {
            let (server, stop) = (&self.server, self.stop.clone());
            let readiness = Arc::clone(&self.readiness);
            runtime.spawn(claim::keep(Arc::clone(server), readiness, stop));
            runtime.spawn(deliver(
                self.tables.clone(),
                Arc::clone(server),
                Arc::clone(&self.backlog_kick),
                self.stop.clone(),
            ));
        }
        let of = |modes: &[Coherence]| -> Vec<Arc<dyn Target>> {
            let tables = self.tables.iter();
            tables
                .filter(|t| modes.contains(&t.spec().coherence()))
                .map(|t| Arc::clone(t) as Arc<dyn Target>)
                .collect()
        };
        let linked = of(&[Coherence::Tracking, Coherence::Broadcast]);
        let durable = of(&[Coherence::Durable]);
        if linked.is_empty() && durable.is_empty() {
            return Ok(());
        }
        let runtime = runtime.ok_or(Error::NoRuntime)?;
        if !durable.is_empty() {
            let settings = durable::Settings {
                deadline: self.link.deadline,
                block: self.link.ping_every,
                ..durable::Settings::default()
            };
            // A cluster serves each table's stream on the node of its slot: a
            // lane per table there, one for all on a server.
            let lanes = if self.server.is_cluster() {
                durable.into_iter().map(|table| vec![table]).collect()
            } else {
                vec![durable]
            };
            for tables in lanes {
                runtime.spawn(durable::run(
                    Arc::clone(&self.server),
                    tables,
                    self.node_name.clone(),
                    settings.clone(),
                    self.stop.clone(),
                ));
            }
        }
        if !linked.is_empty() {
            runtime.spawn(link::run(
                Arc::clone(&self.server),
                linked,
                self.link,
                self.stop,
            ));
        }
        Ok(())
    }
}

/// How soon a delivery that failed (the server is still away) is tried
/// again.
const REDELIVER_EVERY: Duration = Duration::from_millis(100);

/// Delivers the backlogs of `tables` (the writes they kept while the server
/// was away): woken when a table keeps a write, it tries every
/// [`REDELIVER_EVERY`] until every backlog is empty, probing the server
/// itself while the breaker is open, so a backlog is delivered within that
/// interval of the server's return.
async fn deliver(
    tables: Vec<Arc<dyn AnyTable>>,
    server: Arc<Server>,
    kick: Arc<Notify>,
    mut stop: watch::Receiver<()>,
) {
    loop {
        tokio::select! {
            () = kick.notified() => {}
            _ = stop.changed() => return,
        }
        while tables.iter().any(|table| table.undelivered()) {
            let mut delivered = !server.is_down() || server.probe().await;
            for table in &tables {
                if delivered {
                    delivered = table.redeliver().await;
                }
            }
            if delivered {
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(REDELIVER_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }
}
