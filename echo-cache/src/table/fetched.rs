//! What a fetch returns: the value, where it came from and its version.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::entity::id::RawId;
use crate::entity::spec::Cached;

/// Where a fetched value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// L1, in the caller's thread.
    Hit,
    /// The shared L2 server, by a flight.
    L2,
    /// The loader (the system of record), by a flight.
    Fill,
    /// An expired value, by a flight whose loader failed or timed out (or
    /// failed on this id a moment ago): served for the table's declared
    /// grace (`stale_if_error_ms`), never after an invalidation of the id.
    /// See [Serving stale](crate#serving-stale-while-the-store-fails).
    Stale,
    /// The value a [`Cache::compute`](crate::Cache::compute) (or
    /// [`upsert`](crate::Cache::upsert)) just wrote; never a fetch's.
    Put,
}

/// A value read through the cache.
///
/// Dereferences to the value; [`value`](Self::value) is the shared
/// `Arc` itself.
///
/// ```standalone_crate
/// use std::sync::Arc;
/// use echo_cache::{near_cache, Cache, Cached, Id, Source};
///
/// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Game {
///     pub secret: String,
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), echo_cache::Error> {
/// let cache = Cache::builder()
///     .loader(|_: Id<Game>| async { Ok::<_, std::io::Error>(Some(Game { secret: "🍎".into() })) })
///     .build()?;
/// let id = Id::<Game>::mint();
///
/// let first = cache.fetch(id).await?;
/// assert_eq!(first.secret, "🍎"); // a `Fetched<Game>` derefs to the `Game`
/// assert_eq!(first.source(), Source::Fill);
/// assert_eq!(first.version().kind(), Game::KIND); // versions are ids of the table's kind
///
/// let again = cache.fetch(id).await?;
/// assert_eq!(again.source(), Source::Hit);
/// assert_eq!(again.version(), first.version());
/// // A hit hands out the row's `Arc`: no copy of the value.
/// assert!(Arc::ptr_eq(again.value(), first.value()));
/// let game: Arc<Game> = again.into_value();
/// # let _ = game;
/// # Ok(())
/// # }
/// ```
pub struct Fetched<T> {
    value: Arc<T>,
    /// The [`Source`], a whole word: a `Fetched` has no padding, so a
    /// hit's answer moves as three words, not as words and bytes (its
    /// `Result`'s error would otherwise own the bytes after a one-byte
    /// field, which every move then copies).
    source: usize,
    /// The payload of the version; its kind is `T`'s.
    version: u64,
}

impl<T> Fetched<T> {
    #[inline]
    pub(crate) fn new(value: Arc<T>, source: Source, version: u64) -> Fetched<T> {
        Fetched {
            value,
            source: source as usize,
            version,
        }
    }

    /// The value, shared with L1 and every other reader.
    #[must_use]
    pub fn value(&self) -> &Arc<T> {
        &self.value
    }

    /// The value, without the rest.
    #[must_use]
    pub fn into_value(self) -> Arc<T> {
        self.value
    }

    /// Where the value came from.
    #[must_use]
    pub fn source(&self) -> Source {
        const HIT: usize = Source::Hit as usize;
        const L2: usize = Source::L2 as usize;
        const FILL: usize = Source::Fill as usize;
        const STALE: usize = Source::Stale as usize;
        match self.source {
            HIT => Source::Hit,
            L2 => Source::L2,
            FILL => Source::Fill,
            STALE => Source::Stale,
            _ => Source::Put,
        }
    }
}

impl<T: Cached> Fetched<T> {
    /// The version of the value: an id of the table's kind, minted when the
    /// value was written: by the fill that loaded it (just before it read
    /// the system of record) or by the [`put`](crate::Cache::put) that
    /// wrote it.
    #[must_use]
    pub fn version(&self) -> RawId {
        RawId::new(T::KIND, self.version)
    }
}

impl<T> Clone for Fetched<T> {
    fn clone(&self) -> Self {
        Fetched {
            value: Arc::clone(&self.value),
            source: self.source,
            version: self.version,
        }
    }
}

impl<T> Deref for Fetched<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Cached + fmt::Debug> fmt::Debug for Fetched<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetched")
            .field("value", &self.value)
            .field("source", &self.source())
            .field("version", &self.version())
            .finish()
    }
}
