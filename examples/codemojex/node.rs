//! A node of the service: one cache (its own L1, maybe a shared L2) whose
//! loaders read the store, and the scorer over it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use echo_cache::{BoxError, Cache, Cached, Clock, Id, RemovalCause};

use crate::model::{Board, EmojiSet, Game, Score, Session, Verdict};
use crate::store::{Store, StoreError};

/// What a loader returns: the row, if the store has it.
type LoadFuture<T> = Pin<Box<dyn Future<Output = Result<Option<T>, BoxError>> + Send>>;

/// One node: a cache over the store. Clones share it.
#[derive(Clone)]
pub struct Node {
    /// What the narration calls it.
    pub name: &'static str,
    /// Its cache.
    pub cache: Cache,
    store: Store,
    fallbacks: Arc<AtomicU64>,
}

/// Told of every leaderboard that leaves a node's L1, and why.
pub type BoardListener = Arc<dyn Fn(Id<Board>, RemovalCause) + Send + Sync>;

/// Where a node's cache sits.
#[derive(Clone, Default)]
pub struct Options {
    /// The L2 server's URL; `None` for L1 only.
    pub l2: Option<String>,
    /// A manual clock, to move time by hand (move 3).
    pub clock: Option<Clock>,
    /// Whether it opens the leaderboards too (move 4's processes): the
    /// scorer's nodes open only the three tables a guess reads.
    pub boards: bool,
    /// With `boards`: told of every board that leaves its L1.
    pub board_listener: Option<BoardListener>,
}

impl Node {
    /// Builds a node whose loaders read `store`, with a table for each
    /// entity it reads (`open`). They need the
    /// store, so the builder gives them: a declaration's `loader = ...`
    /// names a function that needs nothing but the id.
    pub fn open(
        name: &'static str,
        store: &Store,
        options: Options,
    ) -> Result<Node, echo_cache::Error> {
        let mut builder = Cache::builder()
            .node_name(name)
            .open::<Game>()
            .loader(read(store, Store::game))
            .open::<EmojiSet>()
            .loader(read(store, Store::emoji_set))
            .open::<Session>()
            .loader(read(store, Store::session));
        if options.boards {
            builder = builder.open::<Board>().loader(read(store, Store::board));
            if let Some(listen) = options.board_listener {
                builder = builder.listener(move |id, _: Arc<Board>, cause| listen(id, cause));
            }
        }
        if let Some(url) = options.l2 {
            builder = builder.l2(url);
        }
        if let Some(clock) = options.clock {
            builder = builder.clock(clock);
        }
        Ok(Node {
            name,
            cache: builder.build()?,
            store: store.clone(),
            fallbacks: Arc::default(),
        })
    }

    /// Scores one guess: three cached reads, then pure computation.
    pub async fn score(
        &self,
        game: Id<Game>,
        session: Id<Session>,
        guess: &str,
    ) -> Result<Verdict, StoreError> {
        match self.read(session, Store::session).await? {
            Some(session) if !session.revoked => {}
            _ => return Ok(Verdict::Refused),
        }
        let Some(game) = self.read(game, Store::game).await? else {
            return Ok(Verdict::Refused);
        };
        // The emoji set is read as the scorer of the seed does, though the
        // score needs only the secret: it is the third hot read.
        self.read(game.emoji_set, Store::emoji_set).await?;
        Ok(Verdict::Scored(Score::of(guess, &game.secret)))
    }

    /// Reads `id` through the cache. If the cache errs (anything but "not
    /// found": the loader failed, a deadline passed), the read falls back to
    /// the store directly, and is counted in [`fallbacks`](Self::fallbacks).
    pub async fn read<T: Cached + Clone>(
        &self,
        id: Id<T>,
        from_store: fn(&Store, Id<T>) -> Result<Option<T>, StoreError>,
    ) -> Result<Option<Arc<T>>, StoreError> {
        match self.cache.fetch(id).await {
            Ok(fetched) => Ok(Some(fetched.into_value())),
            Err(err) if err.is_not_found() => Ok(None),
            Err(err) => {
                self.fallbacks.fetch_add(1, Relaxed);
                tracing::warn!(node = self.name, %id, "cache read failed, reading the store: {err}");
                let store = self.store.clone();
                let value = tokio::task::spawn_blocking(move || from_store(&store, id))
                    .await
                    .expect("a store read panicked")?;
                Ok(value.map(Arc::new))
            }
        }
    }

    /// Reads that fell back to the store because the cache erred.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Relaxed)
    }
}

/// A loader that runs a blocking store read on tokio's blocking pool.
fn read<T: Cached>(
    store: &Store,
    from_store: fn(&Store, Id<T>) -> Result<Option<T>, StoreError>,
) -> impl Fn(Id<T>) -> LoadFuture<T> + Send + Sync + 'static {
    let store = store.clone();
    move |id| {
        let store = store.clone();
        Box::pin(
            async move { Ok(tokio::task::spawn_blocking(move || from_store(&store, id)).await??) },
        )
    }
}
