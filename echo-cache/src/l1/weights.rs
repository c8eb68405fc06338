//! The weights of a shard's rows, in a table with a byte bound
//! (`max_bytes`): beside the slots, not in them, so that a table without
//! one pays nothing a row (a slot stays 32 bytes) and nothing on a hit.
//! Read and written under the shard's lock only.

use std::collections::HashMap;

use super::{Rows, Shard, Tally};
use crate::entity::spec::Eviction;
use crate::sync::MutexGuard;

/// The weight of each row of a shard that has one, and their sum.
#[derive(Default)]
pub(super) struct Weights {
    bytes: usize,
    of: HashMap<u64, usize, foldhash::fast::RandomState>,
}

impl Weights {
    /// The weight of the shard's rows.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The weight of `key`'s row (1 if it has none: an absence).
    pub(super) fn of(&self, key: u64) -> usize {
        self.of.get(&key).copied().unwrap_or(1)
    }

    /// `key`'s row now weighs `weight` (replacing its old row's).
    pub(super) fn set(&mut self, key: u64, weight: usize) {
        self.forget(key);
        if weight > 0 {
            self.of.insert(key, weight);
            self.bytes += weight;
        }
    }

    /// `key`'s row left.
    pub(super) fn forget(&mut self, key: u64) {
        if let Some(weight) = self.of.remove(&key) {
            self.bytes -= weight;
        }
    }

    /// The bytes it holds itself (about: a map's entry and control byte).
    pub(super) fn overhead(&self) -> usize {
        size_of::<Weights>() + self.of.capacity() * (size_of::<(u64, usize)>() + 1)
    }
}

impl<T> Rows<T> {
    /// Whether a row of `key` weighing `weight` may be kept: always
    /// without a byte bound; never if it outweighs a shard's whole share
    /// of `max_bytes`; in a table that evicts nothing, only if the shard's
    /// rows (less `key`'s old one) leave room for it.
    pub(super) fn fits(&self, tally: &Tally, key: u64, weight: usize) -> bool {
        let Some(weights) = &tally.weights else {
            return true;
        };
        if weight > self.byte_share {
            return false;
        }
        match self.eviction {
            Eviction::Hot => true,
            Eviction::None => {
                let others = weights.bytes() - weights.of(key).min(weights.bytes());
                others + weight <= self.byte_share
            }
        }
    }

    /// Counts the weight of `key`'s row, just written, and evicts other
    /// rows of its shard while it is over its share of `max_bytes`.
    pub(super) fn weigh(
        &self,
        shard: &Shard<T>,
        tally: &mut MutexGuard<'_, Tally>,
        key: u64,
        weight: usize,
        now: u64,
    ) {
        let Some(weights) = &mut tally.weights else {
            return;
        };
        weights.set(key, weight);
        if let Some(array) = shard.array(tally) {
            self.shed(&array, tally, key, now);
        }
    }
}

impl Tally {
    /// Forgets the weight of `key`'s row, which left.
    pub(super) fn forget(&mut self, key: u64) {
        if let Some(weights) = &mut self.weights {
            weights.forget(key);
        }
    }
}
