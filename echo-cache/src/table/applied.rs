//! Newer-wins memory: the newest invalidation version applied per id, and
//! the table's floor: the newest table-wide invalidation applied.
//!
//! A row in L1 carries its version, so "drop it if the invalidation is
//! newer" needs no memory. What does is a value that is not in L1 yet: a
//! fill under way, or a frame read from L2 after the invalidation's L2 drop
//! failed. Each is refused if its version is older than the newest
//! invalidation applied to its id, which this remembers.
//!
//! The memory is bounded by time: an entry is forgotten [`RETAIN`] after the
//! version it holds was minted (the sweeper prunes it), so its size is the
//! number of ids invalidated in that window. A value older than a forgotten
//! invalidation can then only come from L2 if the conditional L2 drop of
//! that invalidation failed too, and the tombstone TTL bounds even that.
//!
//! The floor is one number, never forgotten: a value of any id older than
//! it is refused.
//!
//! A tagged table also remembers, per tag, its newest tag-wide
//! invalidation (`Cache::invalidate_tag`): a value of that tag older than
//! it is refused. Forgotten like the ids' after [`RETAIN`]; past that, L2
//! refuses such a value by itself (the tag's floor, `l2::tier`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use scc::HashMap;

use crate::clock::millis;
use crate::entity::mint::{EPOCH_MS, unix_ms_of_payload};
use crate::entity::tag::Tag;

/// How long an applied version is remembered after it was minted.
pub(crate) const RETAIN: Duration = Duration::from_secs(60);

pub(crate) struct Applied {
    newest: HashMap<u64, u64, foldhash::fast::RandomState>,
    /// The newest table-wide invalidation applied (0: none).
    floor: AtomicU64,
    /// The newest tag-wide invalidation applied, per tag.
    tags: HashMap<Tag, u64, foldhash::fast::RandomState>,
}

impl Applied {
    pub(crate) fn new() -> Applied {
        Applied {
            newest: HashMap::with_hasher(foldhash::fast::RandomState::default()),
            floor: AtomicU64::new(0),
            tags: HashMap::with_hasher(foldhash::fast::RandomState::default()),
        }
    }

    /// Records an invalidation of `key` at `version`; whether it is newer
    /// than every one applied before (a repeat or a late message is not).
    pub(crate) fn advance(&self, key: u64, version: u64) -> bool {
        newer(&self.newest, key, version)
    }

    /// Records an invalidation of every row of `tag` at `version`; whether
    /// it is newer than every one applied to `tag` before.
    pub(crate) fn advance_tag(&self, tag: Tag, version: u64) -> bool {
        newer(&self.tags, tag, version)
    }

    /// Whether a value of `tag` at `version` is older than an invalidation
    /// applied to `tag`.
    pub(crate) fn overtakes_tag(&self, tag: Tag, version: u64) -> bool {
        self.tags
            .read_sync(&tag, |_, &newest| newest > version)
            .unwrap_or(false)
    }

    /// Records a table-wide invalidation at `version`; whether it is newer
    /// than every one applied before.
    pub(crate) fn raise_floor(&self, version: u64) -> bool {
        self.floor.fetch_max(version, Relaxed) < version
    }

    /// Whether a value of `key` at `version` is older than an invalidation
    /// applied to `key`, or to the whole table.
    pub(crate) fn overtakes(&self, key: u64, version: u64) -> bool {
        version < self.floor.load(Relaxed)
            || self
                .newest
                .read_sync(&key, |_, &newest| newest > version)
                .unwrap_or(false)
    }

    /// Forgets the versions minted more than [`RETAIN`] before `unix_ms`.
    pub(crate) fn prune(&self, unix_ms: u64) {
        let retain = millis(RETAIN);
        let horizon = unix_ms.saturating_sub(retain).max(EPOCH_MS);
        self.newest
            .retain_sync(|_, version| unix_ms_of_payload(*version) >= horizon);
        self.tags
            .retain_sync(|_, version| unix_ms_of_payload(*version) >= horizon);
    }
}

/// Records `version` for `name` in `newest`; whether it is newer than the
/// one there.
fn newer<K: Eq + std::hash::Hash>(
    newest: &HashMap<K, u64, foldhash::fast::RandomState>,
    name: K,
    version: u64,
) -> bool {
    match newest.entry_sync(name) {
        scc::hash_map::Entry::Occupied(newest) if *newest.get() >= version => false,
        scc::hash_map::Entry::Occupied(mut newest) => {
            *newest.get_mut() = version;
            true
        }
        scc::hash_map::Entry::Vacant(vacant) => {
            vacant.insert_entry(version);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_wins_and_repeats_are_no_ops() {
        let applied = Applied::new();
        assert!(applied.advance(1, 10));
        assert!(!applied.advance(1, 10), "a repeat");
        assert!(!applied.advance(1, 9), "a late message");
        assert!(applied.overtakes(1, 9));
        assert!(!applied.overtakes(1, 10));
        assert!(!applied.overtakes(2, 0), "nothing applied to 2");
        assert!(applied.advance(1, 11));
    }

    #[test]
    fn the_floor_overtakes_every_id_and_never_goes_back() {
        let applied = Applied::new();
        assert!(applied.raise_floor(20));
        assert!(!applied.raise_floor(20), "a repeat");
        assert!(!applied.raise_floor(19), "a late one");
        assert!(applied.overtakes(7, 19), "any id");
        assert!(!applied.overtakes(7, 20));
        applied.prune(u64::MAX);
        assert!(applied.overtakes(8, 19), "never pruned");
    }
}
