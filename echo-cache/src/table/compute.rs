//! Compute: a read of an id's current value, a closure's decision on it
//! ([`Change`]), and its write through the table's usual write path,
//! one compute of an id at a time on this node ([`turns`](super::turns)).

use std::sync::Arc;
use std::time::Duration;

use super::Table;
use crate::entity::mint::Minter;
use crate::entity::spec::Cached;
use crate::error::Error;
use crate::table::fetched::{Fetched, Source};

/// What a [`Cache::compute`](crate::Cache::compute) does with its id, once
/// its closure has seen the current value.
///
/// ```standalone_crate
/// use echo_cache::{near_cache, Cache, Change, Id};
///
/// #[near_cache(kind = "QTA", ttl_ms = 3_600_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Quota { left: u32 }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), echo_cache::Error> {
/// let cache = Cache::builder().without_loader::<Quota>().build()?;
/// let id = Id::<Quota>::mint();
/// // Spend one unit of a quota of 2: a new quota, a put, and then none.
/// let spend = |quota: Option<&Quota>| match quota {
///     None => Change::Put(Quota { left: 1 }),
///     Some(quota) if quota.left > 1 => Change::Put(Quota { left: quota.left - 1 }),
///     Some(_) => Change::Invalidate, // spent: forget it
/// };
/// assert_eq!(cache.compute(id, spend).await?.map(|q| q.left), Some(1));
/// assert!(cache.compute(id, spend).await?.is_none()); // the last unit
/// assert_eq!(cache.compute(id, |_| Change::Keep).await?.map(|q| q.left), None);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change<T> {
    /// Writes this value as the id's, as [`Cache::put`](crate::Cache::put)
    /// does: a fresh version, L2, this node's L1, the other nodes told.
    Put(T),
    /// Drops the id's value, as [`Cache::invalidate`](crate::Cache::invalidate)
    /// does: the next fetch reads afresh (from the loader, if the table
    /// has one).
    Invalidate,
    /// Writes nothing.
    Keep,
}

impl<T: Cached> Table<T> {
    /// Takes the turn of `key`, reads its current value (waiting at most
    /// `timeout` for a flight), runs `change` on it with no lock but the
    /// turn held, and writes what it says through the usual write path.
    /// The value in force once done: the new value, the current one
    /// ([`Change::Keep`]), or none.
    pub(crate) async fn compute(
        &self,
        key: u64,
        timeout: Option<Duration>,
        change: impl FnOnce(Option<&T>) -> Change<T>,
    ) -> Result<Option<Fetched<T>>, Error> {
        let _turn = self.turns.take(key).await;
        let current = self.current(key, timeout).await?;
        match change(current.as_deref()) {
            Change::Keep => Ok(current),
            Change::Put(value) => {
                drop(current);
                let value = Arc::new(value);
                let version = self.put(key, Arc::clone(&value), u64::MAX).await?;
                Ok(Some(Fetched::new(value, Source::Put, version.payload())))
            }
            Change::Invalidate => {
                drop(current);
                let version = Minter::global().mint_raw(T::KIND);
                self.invalidate(key, &version).await?;
                Ok(None)
            }
        }
    }

    /// The current value of `key`, as a fetch reads it (L1, or its flight:
    /// L2, then the loader); `None` if there is none to find (not found, or
    /// no loader to ask).
    ///
    /// # Errors
    ///
    /// The fetch's, and a stale answer's: an expired value served because
    /// the loader fails is no current value to build on.
    async fn current(
        &self,
        key: u64,
        timeout: Option<Duration>,
    ) -> Result<Option<Fetched<T>>, Error> {
        let read = match self.hit(key) {
            Some(hit) => hit,
            None => self.shared().miss(key, timeout).await,
        };
        match read {
            Ok(fetched) if fetched.source() == Source::Stale => Err(Error::Load {
                table: self.spec.name,
                source: Arc::new(std::io::Error::other(
                    "the loader failed, and only an expired value (stale_if_error_ms) answered: \
                     compute does not build on it",
                )),
            }),
            Ok(fetched) => Ok(Some(fetched)),
            Err(Error::NotFound { .. } | Error::NoLoader { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}
