//! The flight registry: at most one joinable flight per key, and the gate
//! that keeps a fill from installing a value a write has overtaken.
//!
//! Each flight gets a fresh token when it starts and stays in the registry,
//! where misses of its key join it, until it lands. An invalidation, a put
//! or a flush *detaches* the key's flight: it leaves the registry, so the
//! next miss starts a fresh flight instead of joining one that may have
//! read before the write; the detached flight still answers the waiters it
//! has, but installs nothing. A flight lands (installs, under the shard
//! lock) only if it is still the registered flight of its key, so there is
//! no moment between "still current" and "installed" for a write to slip
//! into. A shared per-key marker would not do: a marker set for one flight
//! could be cleared, or seen, by the next one (ABA).
//!
//! Hits never take these locks; only misses, landings and writes do. The
//! closures these methods run under a lock are the table's own L1 work: no
//! user code (loader, codec, a value's `Drop`) runs in them.

use std::collections::HashMap;

use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

const SHARDS: usize = 32;

type Shard<W> = HashMap<u64, Slot<W>, foldhash::fast::FixedState>;

struct Slot<W> {
    token: u64,
    waiters: W,
}

/// How a miss joined the flight of its key.
pub(crate) enum Joined<H, R> {
    /// L1 answered after all: a flight landed since the caller's miss.
    Cached(H),
    /// It started the flight and must launch it with this token.
    Leader(u64, R),
    /// A flight was already under way.
    Follower(R),
}

/// Flights under way, by key. `W` is what new waiters subscribe to.
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

    /// Answers from L1 if `cached` finds the row now (under the lock every
    /// landing takes, so a flight that landed since the caller's miss is
    /// seen), else joins the flight of `key`, or starts one.
    ///
    /// `subscribe` makes a waiter of an existing flight; `start` makes the
    /// subscription point of a new one and its first waiter.
    pub(crate) fn join<H, R>(
        &self,
        key: u64,
        cached: impl FnOnce() -> Option<H>,
        subscribe: impl FnOnce(&W) -> R,
        start: impl FnOnce() -> (W, R),
    ) -> Joined<H, R> {
        let mut shard = self.shard(key);
        if let Some(slot) = shard.get(&key) {
            return Joined::Follower(subscribe(&slot.waiters));
        }
        if let Some(hit) = cached() {
            return Joined::Cached(hit);
        }
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let (waiters, first) = start();
        shard.insert(key, Slot { token, waiters });
        Joined::Leader(token, first)
    }

    /// Ends the flight `token` of `key`. If it is still the key's flight
    /// (no write detached it), removes it and runs `install` under the
    /// lock; returns whether it did. An `install` not run (and what it
    /// holds) is dropped after the lock is released: parameters outlive
    /// locals.
    pub(crate) fn land(&self, key: u64, token: u64, install: impl FnOnce()) -> bool {
        let mut shard = self.shard(key);
        let current = shard.get(&key).is_some_and(|slot| slot.token == token);
        if current {
            shard.remove(&key);
            install();
        }
        current
    }

    /// Ends the flight `token` of `key` without installing anything, if it
    /// is still the key's flight and `alone(waiters)` says nobody else
    /// waits for it; whether it did. (A warm start's slot that found
    /// nothing: a miss that joins afterwards starts a flight of its own.)
    pub(crate) fn abandon(&self, key: u64, token: u64, alone: impl FnOnce(&W) -> bool) -> bool {
        let mut shard = self.shard(key);
        let current = shard.get(&key).filter(|slot| slot.token == token);
        if current.is_some_and(|slot| alone(&slot.waiters)) {
            shard.remove(&key);
            return true;
        }
        false
    }

    /// Whether the flight `token` is still the flight of `key` (no write
    /// detached it).
    pub(crate) fn is_current(&self, key: u64, token: u64) -> bool {
        self.shard(key)
            .get(&key)
            .is_some_and(|slot| slot.token == token)
    }

    /// Detaches the flight of `key`, if one is under way (it will not
    /// install, and new misses start afresh), and runs `write` (an eviction
    /// or a put) under the same lock.
    pub(crate) fn overtake<R>(&self, key: u64, write: impl FnOnce() -> R) -> R {
        let mut shard = self.shard(key);
        shard.remove(&key);
        write()
    }

    /// Returns once every landing under way when it was called has ended:
    /// each shard's lock taken and released in turn, no flight detached.
    pub(crate) fn settle(&self) {
        for shard in &self.shards {
            drop(
                shard
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
        }
    }

    /// Detaches every flight under way, and runs `write` (a flush) while
    /// every shard is held.
    pub(crate) fn overtake_all<R>(&self, write: impl FnOnce() -> R) -> R {
        let mut shards: Vec<_> = (0..SHARDS)
            .map(|i| {
                self.shards[i]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect();
        for shard in &mut shards {
            shard.clear();
        }
        write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flight that starts as `Arc<()>`s do in a table: the registry
    /// holds one, the leader another, each follower one more.
    fn lead(flights: &Flights<std::sync::Arc<()>>, key: u64) -> (u64, std::sync::Arc<()>) {
        let start = || {
            let answer = std::sync::Arc::new(());
            (std::sync::Arc::clone(&answer), answer)
        };
        match flights.join(key, || None::<()>, |_| unreachable!("no flight"), start) {
            Joined::Leader(token, answer) => (token, answer),
            _ => unreachable!("the first miss leads"),
        }
    }

    #[test]
    fn a_flight_is_abandoned_only_if_current_and_nobody_else_waits() {
        let flights = Flights::new();
        let alone = |answer: &std::sync::Arc<()>| std::sync::Arc::strong_count(answer) <= 2;

        let (token, _answer) = lead(&flights, 7);
        assert!(flights.abandon(7, token, alone), "alone: abandoned");
        let (again, _) = lead(&flights, 7);
        assert_ne!(again, token, "the next miss starts a fresh flight");

        let (token, _answer) = lead(&flights, 8);
        let follower = flights.join(8, || None::<()>, std::sync::Arc::clone, || unreachable!());
        assert!(!flights.abandon(8, token, alone), "a follower waits: kept");
        drop(follower);
        assert!(flights.abandon(8, token, alone), "the follower left");

        let (token, _answer) = lead(&flights, 9);
        flights.overtake(9, || ());
        assert!(
            !flights.abandon(9, token, alone),
            "detached: not its to abandon"
        );
    }
}

#[cfg(all(test, echo_cache_loom))]
mod model {
    //! Run with `RUSTFLAGS="--cfg echo_cache_loom" cargo test -p echo-cache --lib model`.
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicU64 as Db;

    type L1 = Arc<loom::sync::Mutex<Option<u64>>>;

    /// A fill of key 7: joins (or finds L1 filled), reads the database and
    /// lands. What it read, if it led a flight.
    fn fill(flights: &Flights<()>, db: &Db, l1: &L1) -> Option<u64> {
        let cached = || *l1.lock().unwrap();
        match flights.join(7, cached, |()| (), || ((), ())) {
            Joined::Leader(token, ()) => {
                let read = db.load(Ordering::SeqCst);
                flights.land(7, token, || *l1.lock().unwrap() = Some(read));
                Some(read)
            }
            Joined::Cached(_) | Joined::Follower(()) => None,
        }
    }

    /// Two fills and a write + invalidate of one key, in every interleaving:
    /// afterwards L1 holds nothing or the latest version, never one a fill
    /// read before the write.
    #[test]
    fn two_fills_and_an_invalidate() {
        loom::model(|| {
            let flights = Arc::new(Flights::<()>::new());
            let db = Arc::new(Db::new(1));
            let l1: L1 = Arc::new(loom::sync::Mutex::new(None));

            let fills = [(); 2].map(|()| {
                let (flights, db, l1) = (flights.clone(), db.clone(), l1.clone());
                loom::thread::spawn(move || {
                    fill(&flights, &db, &l1);
                })
            });
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

    /// A miss that comes after an invalidate returned never gets a value read
    /// before it: it finds the new value in L1, leads a flight of its own,
    /// or joins one that started after the invalidate (whose answer it
    /// checks once that flight's leader is done).
    #[test]
    fn a_miss_after_an_invalidate_reads_after_it() {
        loom::model(|| {
            let flights = Arc::new(Flights::<Arc<Db>>::new());
            let db = Arc::new(Db::new(1));
            let l1: L1 = Arc::new(loom::sync::Mutex::new(None));
            let no_answer = u64::MAX;

            let early = {
                let (flights, db, l1) = (flights.clone(), db.clone(), l1.clone());
                loom::thread::spawn(move || {
                    let answer = Arc::new(Db::new(no_answer));
                    let start = || (Arc::clone(&answer), ());
                    if let Joined::Leader(token, ()) = flights.join(7, || None::<()>, |_| (), start)
                    {
                        let read = db.load(Ordering::SeqCst);
                        flights.land(7, token, || *l1.lock().unwrap() = Some(read));
                        answer.store(read, Ordering::SeqCst);
                    }
                })
            };
            db.store(2, Ordering::SeqCst);
            flights.overtake(7, || *l1.lock().unwrap() = None);
            let cached = || *l1.lock().unwrap();
            let start = || (Arc::new(Db::new(no_answer)), None);
            match flights.join(7, cached, |answer| Some(Arc::clone(answer)), start) {
                Joined::Cached(value) => assert_eq!(value, 2),
                Joined::Leader(token, _) => {
                    assert_eq!(db.load(Ordering::SeqCst), 2);
                    flights.land(7, token, || ());
                }
                Joined::Follower(answer) => {
                    early.join().unwrap();
                    let answer = answer.expect("a follower's answer").load(Ordering::SeqCst);
                    assert_eq!(answer, 2, "joined a flight that read before the write");
                    return;
                }
            }
            early.join().unwrap();
        });
    }
}
