//! L1: the rows of one table, read lock-free in the caller's thread.
//!
//! The map is [`scc::HashIndex`], a hash table whose reads take no lock and
//! write nothing shared (epoch-based reclamation keeps a row alive while a
//! reader looks at it). Values are stored decoded, as `Arc<T>`; a hit clones
//! the `Arc` and nothing else.
//!
//! Each row carries its own expiry, drawn at insertion from
//! `ttl ± ttl·jitter` on the cache's coarse [`Clock`](crate::Clock), so a
//! cohort filled together does not expire together. Dead rows stay until the
//! sweeper (or a full table) reclaims them; a dead row is never served.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use scc::HashIndex;

use crate::spec::TableSpec;

type Hasher = foldhash::fast::RandomState;

/// One cached row: the value (or the remembered absence of one), its version
/// payload and when it dies.
pub(crate) struct Row<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
    pub(crate) expires_at: u64,
}

/// What a live row holds.
pub(crate) struct Live<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
}

/// Whether an insertion kept the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    Yes,
    /// The table was full of live rows: the value was served, not kept.
    Full,
}

pub(crate) struct Rows<T> {
    map: HashIndex<u64, Row<T>, Hasher>,
    /// Rows in the map, live or dead (`HashIndex::len` scans the table).
    size: AtomicUsize,
    max_size: usize,
    /// When a full table last looked for dead rows to reclaim.
    last_reclaim: AtomicU64,
    reclaim_every_ms: u64,
}

impl<T> Rows<T> {
    pub(crate) fn new(spec: &TableSpec) -> Rows<T> {
        Rows {
            map: HashIndex::with_hasher(Hasher::default()),
            size: AtomicUsize::new(0),
            max_size: spec.max_size,
            last_reclaim: AtomicU64::new(0),
            // A full table of live rows must not rescan on every miss.
            reclaim_every_ms: (spec.sweep_ms / 8).max(1),
        }
    }

    /// The row of `key` if it is alive at `now`.
    #[inline]
    pub(crate) fn get(&self, key: u64, now: u64) -> Option<Live<T>> {
        self.map
            .peek_with(&key, |_, row| {
                (now < row.expires_at).then(|| Live {
                    value: row.value.clone(),
                    version: row.version,
                })
            })
            .flatten()
    }

    /// Inserts or replaces the row of `key`, unless the table is full of
    /// live rows. Call [`make_room`](Self::make_room) first.
    pub(crate) fn insert(&self, key: u64, row: Row<T>) -> Kept {
        match self.map.entry_sync(key) {
            scc::hash_index::Entry::Occupied(mut occupied) => occupied.update(row),
            scc::hash_index::Entry::Vacant(vacant) => {
                let reserved = self.size.fetch_update(Relaxed, Relaxed, |size| {
                    (size < self.max_size).then_some(size + 1)
                });
                if reserved.is_err() {
                    return Kept::Full;
                }
                vacant.insert_entry(row);
            }
        }
        Kept::Yes
    }

    /// When the table is full, reclaims its dead rows (at most once every
    /// few milliseconds). Returns how many it reclaimed.
    pub(crate) fn make_room(&self, now: u64) -> usize {
        if self.size.load(Relaxed) < self.max_size {
            return 0;
        }
        let last = self.last_reclaim.load(Relaxed);
        if now.saturating_sub(last) < self.reclaim_every_ms
            || self
                .last_reclaim
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            return 0;
        }
        self.sweep(now)
    }

    /// Removes the row of `key` if it is older than `version` (any row
    /// when `version` is `None`); whether it did.
    pub(crate) fn remove_older(&self, key: u64, version: Option<u64>) -> bool {
        let removed = self
            .map
            .remove_if_sync(&key, |row| version.is_none_or(|v| row.version < v));
        if removed {
            self.size.fetch_sub(1, Relaxed);
        }
        removed
    }

    /// Removes every row dead at `now`; how many.
    pub(crate) fn sweep(&self, now: u64) -> usize {
        let mut swept = 0;
        self.map.retain_sync(|_, row| {
            let alive = now < row.expires_at;
            swept += usize::from(!alive);
            alive
        });
        self.size.fetch_sub(swept, Relaxed);
        swept
    }

    /// Removes every row.
    pub(crate) fn clear(&self) {
        let mut removed = 0;
        self.map.retain_sync(|_, _| {
            removed += 1;
            false
        });
        self.size.fetch_sub(removed, Relaxed);
    }

    /// Rows in the table, live or not yet swept.
    pub(crate) fn len(&self) -> usize {
        self.size.load(Relaxed)
    }

    pub(crate) fn is_full(&self) -> bool {
        self.len() >= self.max_size
    }
}

/// When a row inserted at `now` with `ttl_ms` dies: uniform in
/// `ttl ± ttl·jitter`, exactly `ttl` when the jitter is 0.
pub(crate) fn expiry(now: u64, ttl_ms: u64, jitter: f64) -> u64 {
    // Jitter is at most 0.5 and TTLs fit f64's 53-bit mantissa in practice.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let spread = (ttl_ms as f64 * jitter) as u64;
    let lifetime = if spread == 0 {
        ttl_ms
    } else {
        fastrand::u64(ttl_ms - spread..=ttl_ms + spread)
    };
    now.saturating_add(lifetime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_fall_inside_the_band_and_spread() {
        let expiries: Vec<u64> = (0..10_000).map(|_| expiry(1_000, 600_000, 0.1)).collect();
        assert!(
            expiries
                .iter()
                .all(|e| (1_000 + 540_000..=1_000 + 660_000).contains(e))
        );
        assert!(expiries.iter().any(|&e| e != expiries[0]));
        assert_eq!(expiry(1_000, 600_000, 0.0), 601_000);
    }
}
