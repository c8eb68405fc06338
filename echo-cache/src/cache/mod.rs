//! The cache: one table per declared type, the builder, and the
//! maintenance thread that ticks the clock and runs the sweeper.

mod builder;
pub(crate) mod claim;
mod compute;
pub(crate) mod directory;
pub(crate) mod fetch;
mod inspect;
mod maintenance;
mod ops;
mod tasks;
mod warm;

pub use builder::Builder;
pub use inspect::Snapshot;
pub use ops::TableOps;

use std::any::TypeId;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::mpsc::{self};
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::{Clock, millis};
use crate::entity::id::{IdOf, RawId};
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, TableSpec};
use crate::entity::tag::Tag;
use crate::error::Error;
use crate::report::roster::{Readiness, TableInfo};
use crate::report::stats::Stats;
use crate::table::fetched::Fetched;
use crate::table::{AnyTable, Table};
use directory::Declaration;
use fetch::Fetch;

/// A near-cache: one table for every type declared with `#[near_cache]`
/// (or for those its builder [opens](Builder::open)).
///
/// Cheap to clone; clones share the tables. The maintenance thread stops
/// when the last clone is dropped.
///
/// # Panics
///
/// Every method that names a type (`fetch`, `put`, `invalidate`, `stats`,
/// …) panics if that type's table was left closed by
/// [`Builder::open`]: a bug in the program, like an index out of bounds.
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
    tables: Arc<[Place]>,
    /// The address of the first declaration, which `tables` follows.
    directory: usize,
    fetch_timeout: Option<Duration>,
    inner: Arc<Inner>,
}

struct Inner {
    /// The table of each declaration, at the declaration's position.
    tables: Arc<[Place]>,
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
        for table in open_tables(&self.tables) {
            table.publish_metrics();
        }
    }
}

/// The place of one declaration in a cache: its table if the cache opened
/// it.
struct Place {
    /// The `Table<T>`, for the typed paths: where `erased` points, without
    /// the vtable lookup `Arc::as_ptr` of a `dyn` needs (one load fewer on
    /// every fetch). Dangling in a closed place.
    table: NonNull<()>,
    /// The [`type_tag`] of that `Table<T>`; of [`Closed`] in a closed
    /// place, which no `Table<T>` matches.
    type_tag: u64,
    /// The same table, for the paths that do not know `T`; it keeps the
    /// table alive. `None`: the cache left it closed ([`Builder::open`]).
    erased: Option<Arc<dyn AnyTable>>,
}

/// 64 of a `TypeId`'s 128 bits (those its `Hash` writes), what a fetch
/// compares to find its table open and of its type: one immediate
/// compare, not two (2 instructions a hit, `scripts/instructions`). Two
/// types share a tag with odds of 2^-64, as every `TypeId` did before Rust
/// 1.72; and only a hand-written `Cached` impl, naming another type's
/// declaration, could make a fetch meet another type's table.
#[inline]
fn type_tag(id: TypeId) -> u64 {
    /// Keeps the last word written: `TypeId` writes one `u64`.
    struct Last(u64);
    impl Hasher for Last {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &byte in bytes {
                self.0 = self.0.rotate_left(8) ^ u64::from(byte);
            }
        }
        fn write_u64(&mut self, word: u64) {
            self.0 = word;
        }
    }
    let mut last = Last(0);
    id.hash(&mut last);
    last.finish()
}

/// What a closed place's `TypeId` is of.
struct Closed;

impl Place {
    fn open(erased: Arc<dyn AnyTable>) -> Place {
        let typed = Arc::clone(&erased).into_any();
        Place {
            type_tag: type_tag((*typed).type_id()),
            table: NonNull::from(&*typed).cast(),
            erased: Some(erased),
        }
    }

    fn closed() -> Place {
        Place {
            table: NonNull::dangling(),
            type_tag: type_tag(TypeId::of::<Closed>()),
            erased: None,
        }
    }
}

/// The tables a cache opened, in declaration order.
fn open_tables(places: &[Place]) -> impl Iterator<Item = &Arc<dyn AnyTable>> {
    places.iter().filter_map(|place| place.erased.as_ref())
}

// SAFETY: `table` points into `erased`, which is `Send + Sync`; the rest is.
unsafe impl Send for Place {}
// SAFETY: as for `Send`.
unsafe impl Sync for Place {}

impl Cache {
    /// Starts building a cache.
    #[must_use]
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Reads the value of `id`: from L1 in the caller's thread if it is
    /// there, else through the one flight of `id` (L2, then the loader).
    /// `id` is an [`Id<T>`](crate::Id) ([`IdOf`]): an id of another kind does not
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
            .put(id.__id().payload(), Arc::new(value), u64::MAX)
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
            .put(id.__id().payload(), Arc::new(value), life_ms)
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
        self.table::<T>()
            .invalidate_fresh(id.__id().payload())
            .await
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

    /// Invalidates every id of `T`'s table, on every node, under a fresh
    /// version, which it returns: [`invalidate`](Self::invalidate) for the
    /// whole table. This node's L1 is emptied before it returns, and no
    /// fill under way installs; L2 buries every frame older than the
    /// version (one key written, whatever the table's size); the other
    /// nodes drop their L1 of the table as the table's coherence mode
    /// delivers (see the crate docs, "A whole table"). Newer wins: a fill
    /// that read the system of record before the call never lands, in L1
    /// or L2, on any node once it has the news; a repeated or late
    /// table-wide invalidation changes nothing.
    ///
    /// Call it after a change to the system of record that touches more
    /// ids than you can name (a migration, a bulk update).
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Game { title: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .loader(|_id: Id<Game>| async { Ok::<_, std::io::Error>(Some(Game { title: "Go".into() })) })
    ///     .build()?;
    /// let id = Id::<Game>::mint();
    /// cache.fetch(id).await?;
    /// cache.invalidate_all::<Game>().await?;
    /// assert_eq!(cache.stats::<Game>().size, 0);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NotDelivered`] if the table is `durable` and the
    /// invalidation could not be recorded for the other nodes. Otherwise a
    /// server away is no error: the invalidation is kept and delivered
    /// once it is back, as an `invalidate`'s.
    pub async fn invalidate_all<T: Cached>(&self) -> Result<RawId, Error> {
        let version = Minter::global().mint_raw(T::KIND);
        self.table::<T>().invalidate_all(&version).await?;
        Ok(version)
    }

    /// Invalidates every row of `T`'s table whose value names `tag` (by
    /// the declared `tag` function) under a version minted now, which it
    /// returns: [`invalidate_all`](Self::invalidate_all) for one group of
    /// rows. This node's L1 holds no row of `tag` older than the version
    /// before it returns, and no fill under way installs one; L2 refuses
    /// and tombstones every frame of `tag` older than it; the other nodes
    /// drop their rows of `tag` as the table's coherence mode delivers.
    /// Newer wins, as for `invalidate_all`. Rows of other tags stay. See
    /// the crate docs, "Tags", for what it costs.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id, Tag};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000, tag = Game::tournament)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Game { tournament: u64 }
    ///
    /// impl Game {
    ///     fn tournament(&self) -> u64 {
    ///         self.tournament
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .loader(|id: Id<Game>| async move {
    ///         Ok::<_, std::io::Error>(Some(Game { tournament: id.payload() % 2 }))
    ///     })
    ///     .build()?;
    /// let (even, odd) = (Id::<Game>::from_payload(2), Id::<Game>::from_payload(3));
    /// cache.fetch(even).await?;
    /// cache.fetch(odd).await?;
    /// cache.invalidate_tag::<Game>(Tag::from(0)).await?;
    /// assert_eq!(cache.stats::<Game>().size, 1, "the odd game stays");
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`invalidate_all`](Self::invalidate_all): [`Error::NotDelivered`]
    /// if the table is `durable` and the invalidation could not be
    /// recorded for the other nodes. A server away is no error: the
    /// invalidation is kept, as a table-wide one at the same version, and
    /// delivered once it is back.
    pub async fn invalidate_tag<T: Cached>(&self, tag: impl Into<Tag>) -> Result<RawId, Error> {
        let version = Minter::global().mint_raw(T::KIND);
        self.table::<T>()
            .invalidate_tag(tag.into(), &version)
            .await?;
        Ok(version)
    }

    /// Drops every row of `T`'s table from this node's L1 only (L2 and the
    /// other nodes keep theirs: see [`invalidate_all`](Self::invalidate_all)).
    /// Fills under way will not install; the next fetches read afresh.
    pub fn flush<T: Cached>(&self) {
        self.table::<T>().flush();
    }

    /// The counters of `T`'s table.
    #[must_use]
    pub fn stats<T: Cached>(&self) -> Stats {
        self.table::<T>().stats()
    }

    /// The live roster: every table with its spec, counters and health,
    /// sorted by table name. An operator acts on a table by its name with
    /// [`table_ops`](Self::table_ops): flush it, invalidate an id given as
    /// text, list its hottest ids, count its rows and bytes.
    #[must_use]
    pub fn tables(&self) -> Vec<TableInfo> {
        let mut roster: Vec<TableInfo> = open_tables(&self.inner.tables)
            .map(|table| table.info())
            .collect();
        roster.sort_by_key(|info| info.spec.name());
        roster
    }

    /// Waits until the cache serves as declared: the node number of its
    /// versions is claimed on L2 (see
    /// [node numbers](crate::Minter#node-numbers)), every coherent
    /// table's invalidation channel is up ([`Health::Bypassing`](crate::Health::Bypassing)
    /// no more), and every table declared `warm = "ready"` is warm (see
    /// [Warm start](crate#warm-start)). Without L2 it is ready at once.
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
                inner.readiness.is_claimed()
                    && inner.readiness.is_warm()
                    && open_tables(&inner.tables).all(|table| table.trusted())
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

    /// The place of `T`'s table: its declaration's position in the
    /// directory, found by address (the hot path of every fetch).
    #[inline]
    fn place<T: Cached>(&self) -> &Place {
        // The spec is the first field of its `repr(C)` declaration.
        let declaration = std::ptr::from_ref(T::__spec()) as usize;
        &self.tables[(declaration - self.directory) / size_of::<Declaration>()]
    }

    #[inline]
    pub(crate) fn table<T: Cached>(&self) -> &Table<T> {
        let place = self.place::<T>();
        if place.type_tag != type_tag(TypeId::of::<Table<T>>()) {
            closed(T::__spec());
        }
        let table = place.table.cast::<Table<T>>();
        // SAFETY: `table` points to a live `Table<T>` (so it is aligned for
        // one): its `TypeId` was just compared, which is what `downcast_ref`
        // does, without the virtual call; `place.erased` keeps it alive
        // as long as `self` is borrowed.
        unsafe { table.as_ref() }
    }
}

/// The panic of a typed method on a table the cache left closed.
#[cold]
#[inline(never)]
fn closed(spec: &TableSpec) -> ! {
    panic!(
        "the table {:?} of `{}` is not open in this cache: the builder named other tables \
         with `Builder::open`; name this one too",
        spec.name(),
        spec.type_name()
    )
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("tables", &self.tables())
            .finish_non_exhaustive()
    }
}
