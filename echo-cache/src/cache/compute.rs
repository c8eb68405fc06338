//! The read-modify-write of one id: [`Cache::compute`] and
//! [`Cache::upsert`] (the table's side is `table/compute.rs`).

use super::Cache;
use crate::entity::id::IdOf;
use crate::entity::spec::Cached;
use crate::error::Error;
use crate::table::compute::Change;
use crate::table::fetched::Fetched;

impl Cache {
    /// Reads the current value of `id`, lets `change` decide what becomes
    /// of it, and writes that through the table's usual write path; one
    /// compute of an id at a time on this node. Answers the value in
    /// force once done: the one written ([`Change::Put`], marked
    /// [`Source::Put`](crate::Source::Put), with the put's version), the
    /// current one ([`Change::Keep`]), or `None` (an invalidation, or
    /// nothing there to keep).
    ///
    /// 1. **The read** is a [`fetch`](Self::fetch): L1, else the id's
    ///    flight (L2, then the loader), within the fetch timeout. `change`
    ///    is given `None` if there is nothing to find: the loader found
    ///    nothing, or the table has no loader and neither layer holds it
    ///    (a cache forgets: an expired or evicted value is absent here).
    /// 2. **`change`** runs in the caller's task, under no lock of the
    ///    cache's: it may call back into the cache, but for a compute of
    ///    the same id, which waits for this one. It is sync: read what it
    ///    needs before the call.
    /// 3. **The write** is [`put`](Self::put) or
    ///    [`invalidate`](Self::invalidate), with all they do: a fresh
    ///    version, L2, this node's L1 (a flight under way installs
    ///    nothing), the other nodes told per the coherence mode.
    ///
    /// **On one node**, computes of one id run one after another, first
    /// come first served, each reading what the one before wrote (a node
    /// reads its own writes): `n` computes that increment a counter
    /// together add `n`. Fetches, puts and invalidations do not wait for
    /// computes: a fetch during a compute answers the value before it or
    /// the one it wrote; a `put` of the id meanwhile is overwritten by the
    /// compute's, which is newer.
    ///
    /// **Across nodes** there is no atomicity: computes of one id on two
    /// nodes may both read the same value, and both write; the one whose
    /// version is newer wins everywhere (in L2, by the version-checking
    /// script; in each node's L1, newer-wins, within the coherence mode's
    /// delivery bound), and the other's write is lost. A counter
    /// incremented on several nodes at once needs one writer per id, or
    /// the system of record's own atomic update and an
    /// [`invalidate`](Self::invalidate).
    ///
    /// A panic in `change` unwinds to the caller: nothing is written, and
    /// the id's next compute goes ahead. A compute dropped before its
    /// write began writes nothing; one dropped during its write may have
    /// written (as a dropped `put` may have).
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Change, Id, Source};
    ///
    /// /// A counter kept in the cache alone: no system of record.
    /// #[near_cache(kind = "HIT", ttl_ms = 86_400_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Visits { count: u64 }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder().without_loader::<Visits>().build()?;
    /// let page = Id::<Visits>::mint();
    /// let visit = |visits: Option<&Visits>| {
    ///     Change::Put(Visits { count: visits.map_or(0, |v| v.count) + 1 })
    /// };
    /// let counts = tokio::join!(cache.compute(page, visit), cache.compute(page, visit));
    /// let mut counts = [counts.0?.unwrap().count, counts.1?.unwrap().count];
    /// counts.sort_unstable();
    /// assert_eq!(counts, [1, 2]); // one after the other
    ///
    /// let now = cache.fetch(page).await?;
    /// assert_eq!((now.count, now.source()), (2, Source::Hit));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The read's, as [`fetch`](Self::fetch)'s ([`Error::Load`],
    /// [`Error::Timeout`], …), but for "not found" and "no loader" (which
    /// are `None`); [`Error::Load`] too if the read answered a stale value
    /// (`stale_if_error_ms`), which no compute builds on. `change` is not
    /// run then. The write's, as [`put`](Self::put)'s or
    /// [`invalidate`](Self::invalidate)'s ([`Error::NotDelivered`]: the
    /// write was made on this node and L2, not announced).
    pub async fn compute<T: Cached>(
        &self,
        id: impl IdOf<T>,
        change: impl FnOnce(Option<&T>) -> Change<T>,
    ) -> Result<Option<Fetched<T>>, Error> {
        let key = id.__id().payload();
        (self.table::<T>())
            .compute(key, self.fetch_timeout, change)
            .await
    }

    /// Writes `absent` as the value of `id` if it has none, else what
    /// `update` makes of its current value: a [`compute`](Self::compute)
    /// that always puts, with its guarantees. Answers the value written.
    ///
    /// ```standalone_crate
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "CRT", ttl_ms = 3_600_000)]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Cart { items: Vec<String> }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder().without_loader::<Cart>().build()?;
    /// let cart = Id::<Cart>::mint();
    /// for item in ["tea", "milk"] {
    ///     cache
    ///         .upsert(cart, Cart { items: vec![item.into()] }, |cart| {
    ///             let mut items = cart.items.clone();
    ///             items.push(item.into());
    ///             Cart { items }
    ///         })
    ///         .await?;
    /// }
    /// assert_eq!(cache.fetch(cart).await?.items, ["tea", "milk"]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`compute`](Self::compute).
    #[allow(clippy::missing_panics_doc)] // a put answers the value it wrote
    pub async fn upsert<T: Cached>(
        &self,
        id: impl IdOf<T>,
        absent: T,
        update: impl FnOnce(&T) -> T,
    ) -> Result<Fetched<T>, Error> {
        let computed = self
            .compute(id, |current| {
                Change::Put(match current {
                    Some(current) => update(current),
                    None => absent,
                })
            })
            .await?;
        Ok(computed.expect("a put answers the value it wrote"))
    }
}
