//! The writes a table acknowledged while the L2 server was away, kept until
//! they are delivered.
//!
//! A `put` or an `invalidate` returns once this node's L1 holds the write;
//! its L2 conditional drop and its announcement to the other nodes (a
//! message, or the server's tracking push) may fail while the server is
//! away. The table then keeps the write here: the newest version per id,
//! at most [`Builder::backlog_limit`](crate::Builder::backlog_limit) ids. When the server answers again, the
//! backlog is delivered in version order, each id as a conditional L2 drop
//! (a tombstone of its version) and an announcement, newer-wins everywhere,
//! so a write delivered late never undoes a newer one. Past the limit the
//! table stops keeping ids and remembers the newest version it lost:
//! delivering that is a table-wide flush (every node drops the table's L1,
//! and L2 drops every frame older than it).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// What a backlog holds, to deliver.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Undelivered {
    /// `(id, version)` payloads, oldest version first.
    pub(crate) writes: Vec<(u64, u64)>,
    /// The newest version of a write the backlog could not keep: a
    /// table-wide flush at that version.
    pub(crate) flush: Option<u64>,
}

pub(crate) struct Backlog {
    kept: Mutex<Kept>,
    /// Whether anything is kept: read without the lock on every write.
    any: AtomicBool,
    /// Ids kept at most; past it, a table-wide flush.
    limit: usize,
}

#[derive(Default)]
struct Kept {
    newest: HashMap<u64, u64, foldhash::fast::RandomState>,
    flush: Option<u64>,
}

impl Backlog {
    /// A backlog that keeps at most `limit` ids.
    pub(crate) fn new(limit: usize) -> Backlog {
        Backlog {
            kept: Mutex::default(),
            any: AtomicBool::new(false),
            limit,
        }
    }

    /// Keeps the write of `key` at `version` (the newest per id).
    pub(crate) fn keep(&self, key: u64, version: u64) {
        let mut kept = self.lock();
        let room = kept.newest.len() < self.limit;
        match kept.newest.entry(key) {
            Entry::Occupied(mut newest) => *newest.get_mut() = (*newest.get()).max(version),
            Entry::Vacant(vacant) if room => drop(vacant.insert(version)),
            Entry::Vacant(_) => kept.flush = kept.flush.max(Some(version)),
        }
        self.any.store(true, Relaxed);
    }

    /// Whether anything waits for delivery.
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Relaxed)
    }

    /// What waits for delivery now (it stays kept until [`delivered`]).
    ///
    /// [`delivered`]: Self::delivered
    pub(crate) fn undelivered(&self) -> Undelivered {
        let kept = self.lock();
        let mut writes: Vec<(u64, u64)> = kept.newest.iter().map(|(&k, &v)| (k, v)).collect();
        writes.sort_unstable_by_key(|&(_, version)| version);
        Undelivered {
            writes,
            flush: kept.flush,
        }
    }

    /// The write of `key` at `version` reached the server (a later write of
    /// the same id did, which supersedes it): forgets it unless a newer one
    /// is kept.
    pub(crate) fn delivered(&self, key: u64, version: u64) {
        if self.is_empty() {
            return;
        }
        let mut kept = self.lock();
        if kept
            .newest
            .get(&key)
            .is_some_and(|&newest| newest <= version)
        {
            kept.newest.remove(&key);
        }
        self.settle(&kept);
    }

    /// Keeps a table-wide invalidation at `version`, undelivered.
    pub(crate) fn keep_flush(&self, version: u64) {
        let mut kept = self.lock();
        kept.flush = kept.flush.max(Some(version));
        self.any.store(true, Relaxed);
    }

    /// The table-wide flush at `version` was delivered.
    pub(crate) fn flushed(&self, version: u64) {
        let mut kept = self.lock();
        if kept.flush.is_some_and(|flush| flush <= version) {
            kept.flush = None;
        }
        self.settle(&kept);
    }

    fn settle(&self, kept: &Kept) {
        self.any
            .store(!kept.newest.is_empty() || kept.flush.is_some(), Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_write_per_id_in_version_order() {
        let backlog = Backlog::new(10);
        assert!(backlog.is_empty());
        backlog.keep(1, 30);
        backlog.keep(2, 10);
        backlog.keep(1, 20);
        assert!(!backlog.is_empty());
        assert_eq!(
            backlog.undelivered(),
            Undelivered {
                writes: vec![(2, 10), (1, 30)],
                flush: None
            }
        );
        backlog.delivered(1, 29);
        assert_eq!(backlog.undelivered().writes.len(), 2, "an older delivery");
        backlog.delivered(1, 30);
        backlog.delivered(2, 11);
        assert!(backlog.is_empty());
    }

    #[test]
    fn past_the_limit_it_keeps_a_flush() {
        let backlog = Backlog::new(10);
        for key in 0..12 {
            backlog.keep(key, key + 1);
        }
        let undelivered = backlog.undelivered();
        assert_eq!(undelivered.writes.len(), 10);
        assert_eq!(undelivered.flush, Some(12));
        backlog.flushed(12);
        for (key, version) in undelivered.writes {
            backlog.delivered(key, version);
        }
        assert!(backlog.is_empty());
    }

    #[test]
    fn keeps_the_newest_table_wide_invalidation() {
        let backlog = Backlog::new(10);
        backlog.keep_flush(5);
        backlog.keep_flush(3);
        assert_eq!(backlog.undelivered().flush, Some(5));
        backlog.flushed(4);
        assert!(!backlog.is_empty(), "an older one delivered");
        backlog.flushed(5);
        assert!(backlog.is_empty());
    }
}
