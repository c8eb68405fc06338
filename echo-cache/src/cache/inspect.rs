//! Looking into a table without reading through it: [`Cache::peek`] and
//! [`Cache::contains`] (one id, L1 only, counted nowhere),
//! [`Cache::snapshot`] (the live values, shard by shard), [`Cache::hottest`]
//! and [`Cache::figures`]. See [Inspection](crate#inspection).

use std::fmt;
use std::iter::FusedIterator;
use std::sync::Arc;

use super::Cache;
use crate::entity::id::{Id, IdOf};
use crate::entity::spec::Cached;
use crate::report::figures::{Figures, Hot};
use crate::table::Table;
use crate::table::fetched::{Fetched, Source};

impl Cache {
    /// The value of `id` if this node's L1 holds it alive, without
    /// reading through: never L2, never the loader, never a flight.
    ///
    /// A look, not a read: it counts as no fetch (no hit, no miss in
    /// [`Stats`](crate::Stats)), does not mark the row read for eviction
    /// (a peeked row is no hotter), and does not start its refresh
    /// (`refresh_ms`). A remembered absence (an id the loader did not
    /// find, kept for `absent_ttl_ms`) is no value: `None`, as for an id
    /// L1 does not hold; a [`fetch`](Self::fetch) of it answers
    /// [`Error::NotFound`](crate::Error::NotFound) without loading. The
    /// answer's [`source`](Fetched::source) is [`Source::Hit`], its
    /// version the row's.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Game { pub secret: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .loader(|_: Id<Game>| async { Ok::<_, std::io::Error>(Some(Game { secret: "🍎".into() })) })
    ///     .build()?;
    /// let id = Id::<Game>::mint();
    /// assert!(cache.peek(id).is_none()); // not loaded by a peek
    /// assert!(!cache.contains(id));
    ///
    /// let fetched = cache.fetch(id).await?;
    /// let peeked = cache.peek(id).expect("in L1 now");
    /// assert_eq!(peeked.secret, "🍎");
    /// assert_eq!(peeked.version(), fetched.version());
    /// assert!(cache.contains(id));
    /// assert_eq!(cache.stats::<Game>().hits, 0); // looks are not fetches
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn peek<T: Cached>(&self, id: impl IdOf<T>) -> Option<Fetched<T>> {
        self.table::<T>().peek(id.__id().payload())
    }

    /// Whether this node's L1 holds a live value of `id`: whether
    /// [`peek`](Self::peek) would answer one, and like it, a look that
    /// counts nothing and changes nothing.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "USR", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct User { pub name: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder().without_loader::<User>().build()?;
    /// let id = Id::<User>::mint();
    /// cache.put(id, User { name: "ada".into() }).await?;
    /// assert!(cache.contains(id));
    /// cache.invalidate(id).await?;
    /// assert!(!cache.contains(id));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn contains<T: Cached>(&self, id: impl IdOf<T>) -> bool {
        self.peek::<T>(id).is_some()
    }

    /// The live values of `T`'s table in this node's L1, as an iterator
    /// of ids and values ([`Fetched`], as [`peek`](Self::peek) answers
    /// them). Remembered absences are left out. Like `peek`, it counts
    /// nothing and marks nothing.
    ///
    /// It copies the table's rows out one shard (a sixteenth of the table)
    /// at a time, as it goes: a clone of each value's `Arc`, read without
    /// a lock (writers never wait for it), its memory one shard's rows at
    /// most. Weakly consistent, as a concurrent map's iterator: each row
    /// was alive at some moment of the walk, and a row written or removed
    /// during it may or may not be in it; no id comes twice. The order is
    /// L1's, neither the ids' nor the rows' age.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "DOC", ttl_ms = 60_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Doc { pub words: usize }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder().without_loader::<Doc>().build()?;
    /// for words in [3, 5, 8] {
    ///     cache.put(Id::<Doc>::mint(), Doc { words }).await?;
    /// }
    /// let mut words: Vec<usize> = cache.snapshot::<Doc>().map(|(_, doc)| doc.words).collect();
    /// words.sort_unstable();
    /// assert_eq!(words, [3, 5, 8]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn snapshot<T: Cached>(&self) -> Snapshot<'_, T> {
        Snapshot {
            table: self.table::<T>(),
            shard: 0,
            rows: Vec::new().into_iter(),
        }
    }

    /// The `n` live rows of `T`'s table that its eviction policy ranks
    /// hottest in this node's L1, the hottest first, each with its heat
    /// ([`Hot`]: what the heat counts). Counted nowhere, and changes
    /// nothing.
    ///
    /// The policy counts only what it needs: nothing until the table first
    /// holds `max_size` rows (a table below its bound evicts nothing, so
    /// it ranks nothing), and with `eviction = "none"` nothing ever. Before
    /// that the list is empty; from three quarters full on it holds the
    /// rows read since the table's clock hand last passed them (heat 1),
    /// and once the table is full, every row the policy counted. Remembered
    /// absences are rows here: an id asked for often that the store lacks
    /// is worth seeing. Ties come in the order of the ids' payloads.
    ///
    /// Reads each shard's slots without its lock, and copies its sketch
    /// (12 bytes a row of its share of `max_size`) under the lock.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "SNG", ttl_ms = 600_000, max_size = 100)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Song { pub plays: u64 }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .loader(|id: Id<Song>| async move { Ok::<_, std::io::Error>(Some(Song { plays: id.payload() })) })
    ///     .build()?;
    /// assert!(cache.hottest::<Song>(3).is_empty()); // nothing counted yet
    /// // Past its bound, the table counts the ids it is asked for.
    /// for _ in 0..150 {
    ///     cache.fetch(Id::<Song>::mint()).await?;
    /// }
    /// let hit = Id::<Song>::mint();
    /// for _ in 0..3 {
    ///     cache.fetch(hit).await?;
    /// }
    /// let hottest = cache.hottest::<Song>(3);
    /// assert_eq!(hottest[0].id, hit);
    /// assert!(hottest[0].heat >= 2);
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn hottest<T: Cached>(&self, n: usize) -> Vec<Hot<Id<T>>> {
        let hottest = self.table::<T>().hottest(n).into_iter();
        hottest
            .map(|(key, heat)| Hot::new(Id::from_payload(key), heat))
            .collect()
    }

    /// The figures of `T`'s table in this node's L1 now: its live rows,
    /// dead rows, bytes and next expiry ([`Figures`]), beside its counters
    /// ([`stats`](Self::stats)). A walk of the table's slots without a
    /// lock (about 1 ms for 100,000 rows).
    ///
    /// ```standalone_crate
    /// use std::time::Duration;
    /// use echo_cache::{near_cache, Cache, Clock, Id};
    ///
    /// #[near_cache(kind = "TOK", ttl_ms = 60_000, jitter = 0.0)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Token { pub scope: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let clock = Clock::manual();
    /// let cache = Cache::builder().clock(clock.clone()).without_loader::<Token>().build()?;
    /// cache.put(Id::<Token>::mint(), Token { scope: "read".into() }).await?;
    /// clock.advance(Duration::from_secs(20));
    /// cache.put(Id::<Token>::mint(), Token { scope: "write".into() }).await?;
    ///
    /// let figures = cache.figures::<Token>();
    /// assert_eq!(figures.rows, 2);
    /// assert!(figures.bytes > 0);
    /// // The older token dies first, in 40 s.
    /// assert_eq!(figures.next_expiry, Some(Duration::from_secs(40)));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn figures<T: Cached>(&self) -> Figures {
        self.table::<T>().figures()
    }
}

/// The live values of a table, as [`Cache::snapshot`] walks them: an
/// iterator of ids and values, copied out one shard at a time.
#[must_use = "iterators do nothing unless iterated"]
pub struct Snapshot<'c, T> {
    table: &'c Table<T>,
    /// The next shard to copy out.
    shard: usize,
    /// The rows of the shard copied last, not yet handed out.
    rows: std::vec::IntoIter<(u64, Arc<T>, u64)>,
}

impl<T: Cached> Iterator for Snapshot<'_, T> {
    type Item = (Id<T>, Fetched<T>);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((key, value, version)) = self.rows.next() {
                let fetched = Fetched::new(value, Source::Hit, version);
                return Some((Id::from_payload(key), fetched));
            }
            self.rows = self.table.values_of_shard(self.shard)?.into_iter();
            self.shard += 1;
        }
    }
}

impl<T: Cached> FusedIterator for Snapshot<'_, T> {}

impl<T: Cached> fmt::Debug for Snapshot<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("table", &T::spec().name())
            .field("shard", &self.shard)
            .finish_non_exhaustive()
    }
}
