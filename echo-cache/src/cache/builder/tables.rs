//! What a builder is told about each table: its loader (single or batch,
//! with or without TTLs) or that it has none, its codec, its removal
//! listener, and whether the cache opens it at all.

use std::any::TypeId;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::Builder;
#[cfg(doc)]
use crate::cache::Cache;
use crate::entity::id::Id;
use crate::entity::spec::{Cached, TableSpec};
use crate::error::{BoxError, Error};
use crate::l1::{self, Listener, RemovalCause};
use crate::l2::Codec;
use crate::table::{self, Loader};

impl Builder {
    /// Writes `T`'s L2 frames with `codec` instead of [`Postcard`](crate::Postcard).
    #[must_use]
    pub fn codec<T: Cached>(mut self, codec: impl Codec<T>) -> Builder {
        let codec: Arc<dyn Codec<T>> = Arc::new(codec);
        self.configure(T::__spec());
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
        self.configure(T::__spec());
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
        self.configure(T::__spec());
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
    /// use std::collections::{HashMap, HashSet};
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
    /// use std::collections::{HashMap, HashSet};
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
        self.configure(T::__spec());
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
        self.configure(T::__spec());
        self.loaders
            .insert(TypeId::of::<T>(), Box::new(None::<Loader<T>>));
        self.batch_loaders.remove(&TypeId::of::<T>());
        self
    }

    /// Tells `listen` of every row of `T` that leaves this cache's L1:
    /// its id, the value it held, and why it left ([`RemovalCause`]:
    /// expired, evicted, invalidated here or by another node, replaced,
    /// flushed). See [Listeners](crate#listeners) in the crate docs for
    /// when each is delivered and what is not.
    ///
    /// A listener given here overrides the one `T` declares
    /// (`#[near_cache(..., listener = on_removed)]`), in this cache only,
    /// as [`loader`](Self::loader) does; the last of two calls for `T`
    /// wins.
    ///
    /// It is called after the row is gone, with no lock of the cache held
    /// (it may read and write the cache, its own table included), one call
    /// at a time per table, in the order the rows left, and never on the
    /// hit path: on the thread whose write, fill or flush removed the row,
    /// or the maintenance thread (the sweeper's expired rows). Keep it
    /// short: it delays that thread. A panic in it is caught and counted
    /// ([`Stats::listener_panics`](crate::Stats::listener_panics)); the
    /// next removals are delivered as usual.
    ///
    /// ```standalone_crate
    /// use std::sync::{Arc, Mutex};
    /// use echo_cache::{near_cache, Cache, Id, RemovalCause};
    ///
    /// #[near_cache(kind = "SES", ttl_ms = 3_600_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Session { user: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let left = Arc::new(Mutex::new(Vec::new()));
    /// let seen = Arc::clone(&left);
    /// let cache = Cache::builder()
    ///     .without_loader::<Session>()
    ///     .listener(move |id: Id<Session>, session: Arc<Session>, cause| {
    ///         seen.lock().unwrap().push((id, session.user.clone(), cause));
    ///     })
    ///     .build()?;
    /// let id = Id::<Session>::mint();
    /// cache.put(id, Session { user: "ada".into() }).await?;
    /// cache.put(id, Session { user: "grace".into() }).await?;
    /// cache.invalidate(id).await?;
    /// assert_eq!(
    ///     *left.lock().unwrap(),
    ///     [
    ///         (id, "ada".to_owned(), RemovalCause::Replaced),
    ///         (id, "grace".to_owned(), RemovalCause::Invalidated),
    ///     ]
    /// );
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn listener<T, F>(mut self, listen: F) -> Builder
    where
        T: Cached,
        F: Fn(Id<T>, Arc<T>, RemovalCause) + Send + Sync + 'static,
    {
        let listener: Listener<T> = l1::listener(listen);
        self.configure(T::__spec());
        self.listeners.insert(TypeId::of::<T>(), Box::new(listener));
        self
    }

    /// Opens `T`'s table, and, once any table is named here, only the
    /// tables named here: for a program with several caches, or one that
    /// links declarations (a library's) it does not serve from this cache.
    /// Without it, [`build`](Self::build) opens a table for every type
    /// declared in the program.
    ///
    /// A table left closed costs nothing (no rows, no L2 traffic, no
    /// coherence), needs no loader, and is no part of
    /// [`tables`](Cache::tables) or [`ready`](Cache::ready). Reading or
    /// writing it through this cache is a bug, not a runtime condition:
    /// every typed method of [`Cache`] panics on a type whose table is
    /// closed, saying so. Giving a closed table a loader, batch loader,
    /// codec or limits is refused by `build` ([`Error::Config`]).
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Error, Id};
    ///
    /// #[near_cache(kind = "ART", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Article { title: String }
    ///
    /// // Declared in the program, served by another cache.
    /// #[near_cache(kind = "INV", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Invoice { total: u64 }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let articles = Cache::builder()
    ///     .open::<Article>()
    ///     .loader(|_: Id<Article>| async {
    ///         Ok::<_, std::io::Error>(Some(Article { title: "Hello".into() }))
    ///     })
    ///     .build()?; // no loader asked for `Invoice`
    /// assert_eq!(articles.tables().len(), 1);
    /// assert_eq!(articles.fetch(Id::<Article>::mint()).await?.title, "Hello");
    ///
    /// let refused = Cache::builder()
    ///     .open::<Article>()
    ///     .without_loader::<Article>()
    ///     .without_loader::<Invoice>()
    ///     .build();
    /// assert!(matches!(refused, Err(Error::Config(_))));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn open<T: Cached>(mut self) -> Builder {
        self.open.insert(std::ptr::from_ref(T::__spec()) as usize);
        self
    }

    /// Records that `spec`'s table was given something (a loader, a
    /// codec, a listener, limits): see [`check_open`](Self::check_open).
    pub(super) fn configure(&mut self, spec: &'static TableSpec) {
        self.configured.insert(super::limits::address(spec), spec);
    }

    /// Refuses a loader, a codec, a listener or limits given to a table the builder
    /// leaves closed: a mistake, said at build.
    pub(super) fn check_open(&self) -> Result<(), Error> {
        let mut closed: Vec<&str> = (self.configured.values())
            .filter(|spec| !opens(&self.open, spec))
            .map(|spec| spec.type_name())
            .collect();
        if closed.is_empty() {
            return Ok(());
        }
        closed.sort_unstable();
        Err(Error::Config(format!(
            "{} given a loader, a codec, a listener or limits, but the builder opens other tables only: \
             name each with `open` too, or give it nothing",
            closed.join(", ")
        )))
    }
}

/// Whether a builder that names `open` tables opens `spec`'s.
pub(super) fn opens(open: &HashSet<usize>, spec: &TableSpec) -> bool {
    open.is_empty() || open.contains(&(std::ptr::from_ref(spec) as usize))
}
