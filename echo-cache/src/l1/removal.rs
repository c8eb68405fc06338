//! Telling a table's listener when a row leaves L1: why it left
//! ([`RemovalCause`]), and the queue of removals ([`Removals`]) that
//! writers fill under their shard's lock and that is delivered to the
//! listener once every lock is released.
//!
//! A table without a listener has no queue: a removal costs it one test of
//! an `Option`, no allocation and no reference count. With one, a removal
//! costs a reference to the value (an atomic increment, under the shard's
//! lock) and a push onto the queue (its own mutex, taken after the
//! shard's, never before); the value's `Arc` goes to the listener, and the
//! row's own reference is retired to the epochs as before.
//!
//! Delivery: whoever removed rows calls [`Removals::deliver`] after
//! releasing its locks (through [`Rows::collect_if_due`](super::Rows::collect_if_due),
//! the sweep and a full table's reclaiming). One thread delivers a table's
//! removals at a time, in the order they were queued; a thread that finds
//! another delivering leaves its removals to it, which takes them before
//! it stops. So a write that removed a row returns once the listener was
//! told, unless another thread was delivering the table's removals then
//! (a concurrent write, fill or sweep of the table), which tells it
//! instead, after those it holds.
//! That is what makes calls ordered and reentrant: a listener that removes
//! rows of its own table (a flush, an invalidation) finds its own thread
//! delivering, and its removals are delivered after it returns. No lock is
//! held while the listener runs: the queue's mutex is taken only to push
//! or to take what is queued, and the "delivering" mark is a flag under it
//! that no thread waits for.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, PoisonError};

use crate::entity::id::Id;
use crate::sync::Mutex;
use crate::sync::Ordering::Relaxed;
use crate::sync::{AtomicU64, MutexGuard};

/// Why a row left a table's L1, as its listener is told
/// ([`Builder::listener`](crate::Builder::listener), or `listener = path`
/// in the declaration).
///
/// See [Listeners](crate#listeners) in the crate docs for when each is
/// delivered.
///
/// ```standalone_crate
/// use std::sync::Arc;
/// use echo_cache::{near_cache, Cache, Id, RemovalCause};
///
/// #[near_cache(kind = "GAM", ttl_ms = 600_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Game { title: String }
///
/// let cache = Cache::builder()
///     .without_loader::<Game>()
///     .listener(|id: Id<Game>, game: Arc<Game>, cause: RemovalCause| {
///         if cause == RemovalCause::Evicted {
///             println!("{id} ({}) made room for a hotter game", game.title);
///         }
///     })
///     .build()?;
/// assert_eq!(RemovalCause::Evicted.as_str(), "evicted");
/// # Ok::<(), echo_cache::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemovalCause {
    /// The row outlived its TTL (or the deadline its loader or writer gave
    /// it): reclaimed by the sweeper, by a full table making room, or
    /// replaced by a new value of its id once dead.
    Expired,
    /// A full table (`eviction = "hot"`) gave the live row's place to a
    /// more asked-for one ([`Stats::evictions`](crate::Stats::evictions)).
    Evicted,
    /// This node invalidated the id ([`Cache::invalidate`](crate::Cache::invalidate),
    /// or a [`Change::Invalidate`](crate::Change::Invalidate) of
    /// [`Cache::compute`](crate::Cache::compute)).
    Invalidated,
    /// Another node's write (an invalidation or a put), told by the
    /// table's coherence channel, or found in L2 while verifying the rows
    /// kept through a lost channel's grace.
    InvalidatedRemotely,
    /// A newer value of the id took the live row's place: this node's
    /// [`Cache::put`](crate::Cache::put) (or a compute's put), or a fill
    /// or refresh that landed over it.
    Replaced,
    /// The whole table's L1 was dropped: [`Cache::flush`](crate::Cache::flush),
    /// [`Cache::invalidate_all`](crate::Cache::invalidate_all) on this
    /// node or another, or the table's invalidation channel lost (its
    /// rows may have missed invalidations).
    Flushed,
}

impl RemovalCause {
    /// The cause as one word: `expired`, `evicted`, `invalidated`,
    /// `invalidated_remotely`, `replaced`, `flushed`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            RemovalCause::Expired => "expired",
            RemovalCause::Evicted => "evicted",
            RemovalCause::Invalidated => "invalidated",
            RemovalCause::InvalidatedRemotely => "invalidated_remotely",
            RemovalCause::Replaced => "replaced",
            RemovalCause::Flushed => "flushed",
        }
    }
}

impl fmt::Display for RemovalCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A table's removal listener, type-erased: the id, the value it held,
/// and why it left.
#[doc(hidden)]
pub type Listener<T> = Arc<dyn Fn(Id<T>, Arc<T>, RemovalCause) + Send + Sync>;

/// `listen` as a [`Listener<T>`]. Used by
/// [`Builder::listener`](crate::Builder::listener) and by the listener a
/// declaration names (`listener = ...`).
#[doc(hidden)]
pub fn listener<T, F>(listen: F) -> Listener<T>
where
    F: Fn(Id<T>, Arc<T>, RemovalCause) + Send + Sync + 'static,
{
    Arc::new(listen)
}

/// One row removed: its key, its value, why.
struct Removed<T> {
    key: u64,
    value: Arc<T>,
    cause: RemovalCause,
}

/// What is queued, and whether a thread is delivering it.
struct Queue<T> {
    removed: Vec<Removed<T>>,
    delivering: bool,
}

/// The removals of a table with a listener, waiting for delivery.
pub(super) struct Removals<T> {
    listener: Listener<T>,
    queue: Mutex<Queue<T>>,
    /// Calls of the listener that panicked.
    panics: AtomicU64,
    /// The table's name, for the panic's report.
    table: &'static str,
}

impl<T> Removals<T> {
    pub(super) fn new(listener: Listener<T>, table: &'static str) -> Removals<T> {
        Removals {
            listener,
            queue: Mutex::new(Queue {
                removed: Vec::new(),
                delivering: false,
            }),
            panics: AtomicU64::new(0),
            table,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues the removal of `key`'s row, which held `value`. Called under
    /// the row's shard lock, so a key's removals queue in their order.
    pub(super) fn push(&self, key: u64, value: Arc<T>, cause: RemovalCause) {
        self.lock().removed.push(Removed { key, value, cause });
    }

    /// Calls the listener with every removal queued, in order, unless
    /// another thread (or this one, further up its stack) is delivering:
    /// that one takes them before it stops. Runs user code: never call it
    /// under a lock.
    pub(super) fn deliver(&self) {
        let mut batch = {
            let mut queue = self.lock();
            if queue.delivering || queue.removed.is_empty() {
                return;
            }
            queue.delivering = true;
            std::mem::take(&mut queue.removed)
        };
        loop {
            for removed in batch.drain(..) {
                self.call(removed);
            }
            let mut queue = self.lock();
            if queue.removed.is_empty() {
                queue.delivering = false;
                // Keeps the allocation for the next removals.
                if queue.removed.capacity() == 0 {
                    queue.removed = batch;
                }
                return;
            }
            std::mem::swap(&mut queue.removed, &mut batch);
        }
    }

    /// One call of the listener; a panic is caught and counted. The value
    /// is the listener's: a `Drop` of it runs in the call (caught with
    /// it), outside every lock too.
    fn call(&self, removed: Removed<T>) {
        let Removed { key, value, cause } = removed;
        let called = std::panic::catch_unwind(AssertUnwindSafe(|| {
            (self.listener)(Id::from_payload(key), value, cause);
        }));
        if called.is_err() {
            self.panics.fetch_add(1, Relaxed);
            tracing::error!(
                table = self.table,
                %cause,
                "the table's removal listener panicked; the panic is counted and the cache goes on"
            );
        }
    }

    /// Calls of the listener that panicked, so far.
    pub(super) fn panics(&self) -> u64 {
        self.panics.load(Relaxed)
    }
}
