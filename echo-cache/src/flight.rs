//! The flight registry: one fill per key at a time, and the gate that keeps
//! a fill from installing a value an invalidation has overtaken.
//!
//! Each flight gets a fresh token when it starts. An invalidation (or a put)
//! of the key marks *that* flight stale; when the flight lands it installs
//! its value only if it is not stale. Landing, invalidating and putting all
//! hold the key's shard lock while they look at the mark and touch L1, so
//! there is no moment between "not stale" and "installed" for an
//! invalidation to slip into. A shared per-key marker would not do: a marker
//! set for one flight could be cleared, or seen, by the next one (ABA).
//!
//! Hits never take these locks; only misses, landings and writes do.

use std::collections::HashMap;

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

const SHARDS: usize = 32;

type Shard<W> = HashMap<u64, Slot<W>, foldhash::fast::FixedState>;

struct Slot<W> {
    token: u64,
    stale: bool,
    waiters: W,
}

/// How a miss joined the flight of its key.
pub(crate) enum Joined<R> {
    /// It started the flight and must launch it with this token.
    Leader(u64, R),
    /// A flight was already under way.
    Follower(R),
}

/// Flights under way, by key. `W` is what their waiters wait on.
pub(crate) struct Flights<W> {
    shards: Box<[Mutex<Shard<W>>]>,
    tokens: AtomicU64,
}

impl<W> Flights<W> {
    pub(crate) fn new() -> Flights<W> {
        Flights {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            tokens: AtomicU64::new(1),
        }
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Shard<W>> {
        // Keys are snowflakes: the low bits (sequence, node) vary the most.
        #[allow(clippy::cast_possible_truncation)]
        let index = (key ^ (key >> 22)) as usize % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Joins the flight of `key`, or starts one.
    ///
    /// `subscribe` makes a waiter of an existing flight; `start` makes the
    /// waiters of a new one and its first waiter.
    pub(crate) fn join<R>(
        &self,
        key: u64,
        subscribe: impl FnOnce(&W) -> R,
        start: impl FnOnce() -> (W, R),
    ) -> Joined<R> {
        let mut shard = self.shard(key);
        if let Some(slot) = shard.get(&key) {
            return Joined::Follower(subscribe(&slot.waiters));
        }
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let (waiters, first) = start();
        shard.insert(
            key,
            Slot {
                token,
                stale: false,
                waiters,
            },
        );
        Joined::Leader(token, first)
    }

    /// Ends the flight `token` of `key` and returns its waiters. Runs
    /// `install` first, under the lock, unless an invalidation or a put of
    /// `key` came after the flight started.
    pub(crate) fn land(&self, key: u64, token: u64, install: impl FnOnce()) -> Option<W> {
        let mut shard = self.shard(key);
        if shard.get(&key).is_none_or(|slot| slot.token != token) {
            return None;
        }
        let slot = shard.remove(&key).expect("checked above");
        if !slot.stale {
            install();
        }
        Some(slot.waiters)
    }

    /// Marks the flight of `key`, if one is under way, so it will not
    /// install, and runs `write` (an eviction or a put) under the same lock.
    pub(crate) fn overtake<R>(&self, key: u64, write: impl FnOnce() -> R) -> R {
        let mut shard = self.shard(key);
        if let Some(slot) = shard.get_mut(&key) {
            slot.stale = true;
        }
        write()
    }

    /// Marks every flight under way so none will install, and runs `write`
    /// (a flush) while every shard is held.
    pub(crate) fn overtake_all<R>(&self, write: impl FnOnce() -> R) -> R {
        let mut shards: Vec<_> = (0..SHARDS)
            .map(|i| {
                self.shards[i]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect();
        for shard in &mut shards {
            shard.values_mut().for_each(|slot| slot.stale = true);
        }
        write()
    }

    /// Flights under way.
    pub(crate) fn len(&self) -> usize {
        (0..SHARDS)
            .map(|i| {
                self.shards[i]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .len()
            })
            .sum()
    }
}

#[cfg(all(test, echo_cache_loom))]
mod model {
    //! Run with `RUSTFLAGS="--cfg echo_cache_loom" cargo test -p echo-cache --lib model`.
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU64 as Db;

    /// Two fills and a write + invalidate of one key, in every interleaving:
    /// afterwards L1 holds nothing or the latest version, never one a fill
    /// read before the write.
    #[test]
    fn two_fills_and_an_invalidate() {
        loom::model(|| {
            let flights = Arc::new(Flights::<()>::new());
            let db = Arc::new(Db::new(1));
            let l1 = Arc::new(loom::sync::Mutex::new(None::<u64>));

            let fill = |flights: Arc<Flights<()>>, db: Arc<Db>, l1: Arc<loom::sync::Mutex<_>>| {
                move || {
                    if let Joined::Leader(token, ()) = flights.join(7, |()| (), || ((), ())) {
                        let read = db.load(Ordering::SeqCst);
                        flights.land(7, token, || *l1.lock().unwrap() = Some(read));
                    }
                }
            };
            let fills = [
                loom::thread::spawn(fill(flights.clone(), db.clone(), l1.clone())),
                loom::thread::spawn(fill(flights.clone(), db.clone(), l1.clone())),
            ];
            db.store(2, Ordering::SeqCst);
            flights.overtake(7, || *l1.lock().unwrap() = None);
            for fill in fills {
                fill.join().unwrap();
            }
            let cached = *l1.lock().unwrap();
            assert!(
                cached.is_none() || cached == Some(2),
                "stale {cached:?} installed"
            );
        });
    }
}
