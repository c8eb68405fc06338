//! One compute at a time per id: the turns that serialise
//! [`Cache::compute`](crate::Cache::compute)s of one id on this node.
//!
//! A compute takes the turn of its id before it reads the current value,
//! and gives it back once its write returned: the next compute of the id
//! reads after that write (a node reads its own writes). The turn is a fair
//! (first come, first served) async lock per id, in a map sharded like the
//! flights; an id's entry lives while a compute holds or awaits its turn,
//! and is removed by the last one, whether it ran or was dropped while
//! waiting.
//!
//! Fetches, puts and invalidations take no turn: a compute serialises
//! with computes only. No user code runs under the map's locks; the
//! compute's closure runs while its turn is held (it is sync: it cannot
//! await another compute of the id).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::OwnedMutexGuard;

const SHARDS: usize = 32;

/// The turn of an id, and how many computes hold or await it.
struct Slot {
    turn: Arc<tokio::sync::Mutex<()>>,
    users: usize,
}

type Shard = HashMap<u64, Slot, foldhash::fast::FixedState>;

/// The turns of a table's ids.
pub(crate) struct Turns {
    shards: Box<[Mutex<Shard>]>,
}

/// The turn of an id, held until dropped (or being awaited, inside
/// [`Turns::take`]'s future).
pub(crate) struct Turn<'t> {
    turns: &'t Turns,
    key: u64,
    held: Option<OwnedMutexGuard<()>>,
}

impl Turns {
    pub(crate) fn new() -> Turns {
        Turns {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Shard> {
        // Keys are snowflakes: the low bits (sequence, node) vary the most.
        #[allow(clippy::cast_possible_truncation)]
        let index = (key ^ (key >> 22)) as usize % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the turn of `key`: after every compute of `key` that
    /// asked before.
    pub(crate) async fn take(&self, key: u64) -> Turn<'_> {
        let turn = {
            let mut shard = self.shard(key);
            let slot = shard.entry(key).or_insert_with(|| Slot {
                turn: Arc::default(),
                users: 0,
            });
            slot.users += 1;
            Arc::clone(&slot.turn)
        };
        // Counted from here: dropped while it waits, it counts itself out.
        let mut taken = Turn {
            turns: self,
            key,
            held: None,
        };
        taken.held = Some(turn.lock_owned().await);
        taken
    }

    /// Ids with a compute holding or awaiting their turn.
    #[cfg(test)]
    fn len(&self) -> usize {
        (0..SHARDS)
            .map(|i| self.shards[i].lock().unwrap().len())
            .sum()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut shard = self.turns.shard(self.key);
        if let Entry::Occupied(mut slot) = shard.entry(self.key) {
            slot.get_mut().users -= 1;
            if slot.get().users == 0 {
                slot.remove();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    #[test]
    fn a_turn_waits_for_the_one_before_and_the_last_one_out_removes_the_id() {
        let turns = Turns::new();
        let mut cx = Context::from_waker(Waker::noop());
        let Poll::Ready(first) = pin!(turns.take(7)).poll(&mut cx) else {
            panic!("a free turn is taken at once");
        };
        {
            let mut second = pin!(turns.take(7));
            assert!(second.as_mut().poll(&mut cx).is_pending(), "7 is held");
            let Poll::Ready(other) = pin!(turns.take(8)).poll(&mut cx) else {
                panic!("another id's turn is free");
            };
            assert_eq!(turns.len(), 2);
            drop(other);
            // Dropped while it waits: it counts itself out.
        }
        assert_eq!(turns.len(), 1, "7, held");
        drop(first);
        assert_eq!(turns.len(), 0, "no entry left behind");

        let Poll::Ready(again) = pin!(turns.take(7)).poll(&mut cx) else {
            panic!("7 is free again");
        };
        drop(again);
        assert_eq!(turns.len(), 0);
    }
}
