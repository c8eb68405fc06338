//! A slot and what it holds: the 32 bytes of a row (key, value pointer,
//! version, stamp), the stamp's layout (expiry, mark, write count) and the
//! sentinels a value pointer may be instead of a row's `Arc`.

use std::ptr;
use std::sync::Arc;

use crate::sync::Ordering::{Relaxed, Release};
use crate::sync::{AtomicPtr, AtomicU64, fence};

/// Expiries are kept in the top 40 bits of a slot's stamp (34 years of
/// milliseconds on the cache's clock, which starts at 0; later is "never");
/// the low 24 bits hold the row's mark and count its writes, two per
/// write (odd while under way).
///
/// A reader checks the stamp before and after loading a row, so it could
/// pair a value with another write's version only if, between its two
/// stamp loads (a few nanoseconds), the slot were written a multiple of
/// 2^18 times (the count's 19 bits, less the odd bit; the row's mark takes
/// 5 of the 24 bits below the expiry), the last write drawing the same
/// expiry as the first. That takes 262,144 writes of one id (44 ms at the
/// 6 million a second one writer manages into one id, measured) while the
/// reader stays descheduled right there, and an expiry drawn again to the
/// millisecond: `ttl ± ttl·jitter` gives 1 in 120,001 for 10-minute rows
/// at the default 10 % jitter; without jitter the clock (ticking at least every 100 ms)
/// must not have moved in those 44 ms; rows that never expire share one
/// expiry, and only the count guards them. Even then the read is sound:
/// the pin keeps alive every value unlinked since it began, and both
/// halves come from writes made during that one read.
pub(super) const SEQ_BITS: u32 = 24;

/// Where a row's mark (5 bits) sits in its stamp: above the write count,
/// below the expiry. A hit reads it with the stamp it loads anyway.
pub(super) const MARK_SHIFT: u32 = 19;

pub(super) const MARK_BITS: u64 = 0x1F << MARK_SHIFT;

pub(super) const SEQ_MASK: u64 = (1 << MARK_SHIFT) - 1;

pub(super) const MAX_EXPIRY: u64 = u64::MAX >> SEQ_BITS;

/// One cached row: the value (or the remembered absence of one), its version
/// payload and when it dies.
pub(crate) struct Row<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
    pub(crate) expires_at: u64,
    /// Whether a read may start its refresh once it is due (`refresh_ms`):
    /// not an absence, nor a value whose loader gave it a whole life within
    /// `refresh_ms`, which would be due at once, every time.
    pub(crate) refreshable: bool,
    /// Its weight in bytes, in a table with a byte bound (`max_bytes`);
    /// else 0, and not kept.
    pub(crate) weight: usize,
}

/// The mark in a slot's stamp.
pub(super) fn mark_of(stamp: u64) -> u8 {
    #[allow(clippy::cast_possible_truncation)] // masked to the mark's 5 bits
    let mark = ((stamp & MARK_BITS) >> MARK_SHIFT) as u8;
    mark
}

/// `stamp` with its mark replaced by `mark`.
pub(super) fn with_mark(stamp: u64, mark: u8) -> u64 {
    stamp & !MARK_BITS | u64::from(mark) << MARK_SHIFT
}

/// Whether two stamps are of the same write of a slot (marks aside): no
/// write began or ended between their loads.
pub(super) fn same_write(a: u64, b: u64) -> bool {
    (a ^ b) & !MARK_BITS == 0
}

/// Whether two stamps are of the same write of a slot, whose expiry a
/// read may have extended since (a table with a time-to-idle): the same
/// write count.
pub(super) fn same_row(a: u64, b: u64) -> bool {
    (a ^ b) & SEQ_MASK == 0
}

/// Sets the mark of a slot's `stamp`, read as `read`, to `to(mark)`;
/// returns the mark it replaced, or `None` if the slot was written since
/// `read` (another row, or a write under way: not the caller's to mark).
/// An expiry a read extended meanwhile ([`extend`]) is kept.
/// Compare and swap, not a load and a store: a mark written meanwhile (a
/// hit's read bit, the hand's count, a failed refresh's re-arm clearing
/// [`REFRESHING`]) is seen by `to`, not undone.
pub(super) fn update_mark(stamp: &AtomicU64, read: u64, to: impl Fn(u8) -> u8) -> Option<u8> {
    let mut seen = read;
    loop {
        let mark = mark_of(seen);
        let wanted = with_mark(seen, to(mark));
        if wanted == seen {
            return Some(mark);
        }
        match stamp.compare_exchange_weak(seen, wanted, Relaxed, Relaxed) {
            Ok(_) => return Some(mark),
            Err(current) if !same_row(current, read) => return None,
            Err(current) => seen = current,
        }
    }
}

/// Moves the expiry of a slot's `stamp`, read as `read`, to `until` if
/// that is later, keeping its mark; nothing if the slot was written since
/// `read`. A read of a row in a table with a time-to-idle: compare and
/// swap, as [`update_mark`], whose marks it keeps.
pub(super) fn extend(stamp: &AtomicU64, read: u64, until: u64) {
    let until = until.min(MAX_EXPIRY);
    let mut seen = read;
    while seen >> SEQ_BITS < until {
        let wanted = until << SEQ_BITS | seen & (MARK_BITS | SEQ_MASK);
        match stamp.compare_exchange_weak(seen, wanted, Relaxed, Relaxed) {
            Ok(_) => return,
            Err(current) if !same_row(current, read) => return,
            Err(current) => seen = current,
        }
    }
}

/// What a live row holds.
pub(crate) struct Live<T> {
    pub(crate) value: Option<Arc<T>>,
    pub(crate) version: u64,
}

/// A row's mark, its top bit: its refresh was started, or it is not to be
/// refreshed. The other bits are eviction's ([`evict::READ`]), which leaves
/// this one as it is.
pub(super) const REFRESHING: u8 = 0x10;

/// A slot no key has claimed: the end of a probe. All zeroes, like a fresh
/// slot.
pub(super) fn empty<T>() -> *mut T {
    ptr::null_mut()
}

/// A claimed slot whose row was removed.
pub(super) fn tombstone<T>() -> *mut T {
    ptr::without_provenance_mut(1)
}

/// A row remembering that the system of record has no such id.
pub(super) fn absent<T>() -> *mut T {
    ptr::without_provenance_mut(2)
}

/// Whether a slot's value pointer is a row (a value or an absence).
pub(super) fn is_row<T>(value: *mut T) -> bool {
    value != empty() && value != tombstone()
}

/// One slot. All zeroes is an empty slot.
#[repr(C, align(32))]
pub(super) struct Slot<T> {
    /// Written once, when the slot is claimed, before `value`.
    pub(super) key: AtomicU64,
    /// `Arc::into_raw` of the value, or one of the markers above.
    pub(super) value: AtomicPtr<T>,
    pub(super) version: AtomicU64,
    /// `expires_at << SEQ_BITS | mark << MARK_SHIFT | writes`; odd while a
    /// write is under way. The mark (see [`REFRESHING`], [`evict::READ`])
    /// changes without a write: a reader's check ignores it.
    pub(super) stamp: AtomicU64,
}

impl<T> Slot<T> {
    /// An empty slot, under loom (elsewhere zeroed memory is one).
    #[cfg(all(test, echo_cache_loom))]
    pub(super) fn vacant() -> Slot<T> {
        Slot {
            key: AtomicU64::new(0),
            value: AtomicPtr::new(empty()),
            version: AtomicU64::new(0),
            stamp: AtomicU64::new(0),
        }
    }

    /// Fails the model unless every access to the slot happens before
    /// this call (loom checks it on a mutable access).
    #[cfg(all(test, echo_cache_loom))]
    pub(super) fn assert_unshared(&mut self) {
        self.key.with_mut(|_| ());
        self.value.with_mut(|_| ());
        self.version.with_mut(|_| ());
        self.stamp.with_mut(|_| ());
    }

    pub(super) fn expires_at(&self) -> u64 {
        self.stamp.load(Relaxed) >> SEQ_BITS
    }

    pub(super) fn mark(&self) -> u8 {
        mark_of(self.stamp.load(Relaxed))
    }

    /// Claims an empty slot for `key`; `deadline`: its place among the
    /// array's deadlines and the row's ([`Array::deadlines`](super::Array::deadlines)).
    /// The shard's writer only.
    pub(super) fn claim(
        &self,
        key: u64,
        value: *mut T,
        version: u64,
        expires_at: u64,
        mark: u8,
        deadline: Option<(&AtomicU64, u64)>,
    ) {
        self.key.store(key, Relaxed);
        self.version.store(version, Relaxed);
        if let Some((place, deadline)) = deadline {
            place.store(deadline, Relaxed);
        }
        let stamp = expires_at.min(MAX_EXPIRY) << SEQ_BITS;
        self.stamp.store(with_mark(stamp, mark), Relaxed);
        self.value.store(value, Release);
    }

    /// Writes a row (or a tombstone) into a claimed slot, with its `mark`.
    /// The shard's writer only. A hit marking the old row meanwhile is
    /// overwritten; once the stamp is odd, no hit marks. While the write
    /// is under way the stamp shows no expiry (0), as a tombstone's: a
    /// hit's test of the expiry fails on both (see `Rows::get`). A
    /// tombstone is written with an expiry of 0 (its callers pass it).
    /// `deadline` as for [`claim`](Self::claim): written once the stamp is
    /// odd, so that a read that loads it (acquiring) and then extends the
    /// expiry by compare and swap finds the slot written since if it saw
    /// this write's deadline.
    pub(super) fn write(
        &self,
        value: *mut T,
        version: u64,
        expires_at: u64,
        mark: u8,
        deadline: Option<(&AtomicU64, u64)>,
    ) {
        debug_assert!(is_row(value) || expires_at == 0);
        let stamp = self.stamp.load(Relaxed);
        self.stamp
            .store(stamp & (MARK_BITS | SEQ_MASK) | 1, Relaxed);
        fence(Release);
        if let Some((place, deadline)) = deadline {
            place.store(deadline, Relaxed);
        }
        self.value.store(value, Relaxed);
        self.version.store(version, Relaxed);
        let writes = (stamp + 2) & SEQ_MASK;
        let stamp = expires_at.min(MAX_EXPIRY) << SEQ_BITS | writes;
        self.stamp.store(with_mark(stamp, mark), Release);
    }
}

/// A new reference to a row's value, or `None` for a remembered absence.
///
/// # Safety
///
/// `value` is a row's value pointer ([`is_row`]), whose `Arc` is alive (the
/// caller is pinned, or holds the shard's lock).
#[inline]
pub(super) unsafe fn share<T>(value: *mut T) -> Option<Arc<T>> {
    (value != absent()).then(|| {
        // SAFETY: the caller's guarantee; it came from `Arc::into_raw`.
        unsafe {
            Arc::increment_strong_count(value);
            Arc::from_raw(value)
        }
    })
}

pub(super) fn into_raw<T>(value: Option<Arc<T>>) -> *mut T {
    value.map_or(absent(), |value| Arc::into_raw(value).cast_mut())
}
