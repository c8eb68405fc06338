//! A shard's array of slots: `m · 2^e` slots, aligned so that its size
//! class rides in the pointer's low bits, probed linearly from a start the
//! key's hash scales to the slot count.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use super::{MIN_SLOTS, Slot};
use crate::sync::Ordering::Relaxed;

/// The slots of one shard, `capacity` of them, in one zeroed allocation
/// aligned so that the low bits of its address carry the capacity's
/// [`tag`]: one load of the shard's pointer gives a reader both.
pub(super) struct Array<T> {
    pub(super) slots: NonNull<Slot<T>>,
    /// The slot count's [`tag`].
    pub(super) tag: usize,
}

/// Alignment of arrays: ten free low bits, for the [`tag`] of any
/// capacity below `2^32` slots.
pub(super) const ARRAY_ALIGN: usize = 1024;

/// The slot count `m · 2^e` (`m` from 16 to 31) as `e << 5 | m`: a probe's
/// [`start`] takes `m` with one mask of the shard's pointer.
pub(super) fn tag(capacity: usize) -> usize {
    let e = (usize::BITS - 5).saturating_sub(capacity.leading_zeros());
    let m = capacity >> e;
    debug_assert!((16..32).contains(&m) && m << e == capacity);
    (e as usize) << 5 | m
}

/// Where the probe of `hash` starts in an array of the slot count `m ·
/// 2^e` [`tag`]ged: the hash's low 31 bits scaled to the slot count, `h · m
/// · 2^e / 2^31` computed as `h · m >> (31 - e)`, which a hit reaches in
/// three operations from the shard's pointer.
#[inline]
pub(super) fn start(hash: u64, tag: usize) -> usize {
    let (m, e) = (tag & 31, tag >> 5);
    // The slot count is below 2^32 (`capacity_for`), so `e` < 28 and the
    // result is below it.
    #[allow(clippy::cast_possible_truncation)]
    let start = (((hash & 0x7FFF_FFFF) * m as u64) >> (31 - e)) as usize;
    start
}

/// The slot count of a [`tag`].
#[inline]
pub(super) fn untag(tag: usize) -> usize {
    (tag & 31) << (tag >> 5)
}

/// The least slot count `m · 2^e` (`m` from 16 to 31) of at least `slots`.
pub(super) fn capacity_for(slots: usize) -> usize {
    let slots = slots.max(MIN_SLOTS);
    let e = usize::BITS - 5 - slots.leading_zeros();
    let m = slots.div_ceil(1 << e);
    let capacity = if m == 32 { 16 << (e + 1) } else { m << e };
    assert!(
        u32::try_from(capacity).is_ok(),
        "an L1 shard holds fewer than 2^32 slots"
    );
    capacity
}

impl<T> Array<T> {
    /// The layout of `capacity` slots.
    pub(super) fn layout(capacity: usize) -> Layout {
        Layout::array::<Slot<T>>(capacity)
            .and_then(|slots| slots.align_to(ARRAY_ALIGN))
            .expect("an L1 array fits the address space")
    }

    /// A new array of empty slots, `capacity` of them.
    pub(super) fn new(capacity: usize) -> Array<T> {
        let layout = Array::<T>::layout(capacity);
        #[allow(clippy::cast_ptr_alignment)] // allocated with `ARRAY_ALIGN`
        // SAFETY: the layout is not zero-sized; all zeroes is empty slots.
        let slots = unsafe { alloc::alloc_zeroed(layout) }.cast::<Slot<T>>();
        let Some(slots) = NonNull::new(slots) else {
            alloc::handle_alloc_error(layout)
        };
        let array = Array {
            slots,
            tag: tag(capacity),
        };
        // A loom atomic is a handle into the model, not its value: make them.
        #[cfg(all(test, echo_cache_loom))]
        for i in 0..capacity {
            // SAFETY: inside the allocation, and nothing else sees it yet.
            unsafe { slots.as_ptr().add(i).write(Slot::vacant()) };
        }
        array
    }

    pub(super) fn tagged(&self) -> *mut Slot<T> {
        self.slots.as_ptr().map_addr(|address| address | self.tag)
    }

    /// The array a shard's pointer names, if any.
    ///
    /// # Safety
    ///
    /// `tagged` came from [`tagged`](Self::tagged), and the array is not
    /// freed while the result is used (the caller is pinned, or holds the
    /// shard's lock).
    #[inline]
    pub(super) unsafe fn from_tagged(tagged: *mut Slot<T>) -> Option<Array<T>> {
        let tag = tagged.addr() & (ARRAY_ALIGN - 1);
        let slots = NonNull::new(tagged.map_addr(|address| address & !(ARRAY_ALIGN - 1)))?;
        Some(Array { slots, tag })
    }

    #[inline]
    pub(super) fn capacity(&self) -> usize {
        untag(self.tag)
    }

    /// Where the probe of `hash` starts ([`start`]).
    #[inline]
    pub(super) fn start(&self, hash: u64) -> usize {
        start(hash, self.tag)
    }

    #[inline]
    pub(super) fn slots(&self) -> &[Slot<T>] {
        // SAFETY: `capacity` slots, allocated and initialized in `new`.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.capacity()) }
    }

    /// The slot after `i`, round the end.
    #[inline]
    pub(super) fn next(&self, i: usize) -> usize {
        if i + 1 == self.capacity() { 0 } else { i + 1 }
    }

    /// The index of the slot claimed by `key`, or else of the empty slot
    /// ending its probe. The shard's writer only.
    pub(super) fn find(&self, key: u64, hash: u64) -> (usize, bool) {
        let slots = self.slots();
        let mut i = self.start(hash);
        loop {
            let slot = &slots[i];
            if slot.value.load(Relaxed).is_null() {
                return (i, false);
            }
            if slot.key.load(Relaxed) == key {
                return (i, true);
            }
            i = self.next(i);
        }
    }

    /// The slot claimed by `key`, or else the empty slot ending its probe.
    /// The shard's writer only.
    pub(super) fn probe(&self, key: u64, hash: u64) -> (&Slot<T>, bool) {
        let (i, found) = self.find(key, hash);
        (&self.slots()[i], found)
    }

    /// Frees the slots (not the values they point to).
    ///
    /// # Safety
    ///
    /// No reader or writer can reach the array any more.
    pub(super) unsafe fn free(self) {
        // The model checks what Miri checks: every access to the slots
        // happens before they are freed.
        #[cfg(all(test, echo_cache_loom))]
        for i in 0..self.capacity() {
            // SAFETY: the caller's guarantee; made in `new`.
            let slot = unsafe { &mut *self.slots.as_ptr().add(i) };
            slot.assert_unshared();
            // SAFETY: as above, and never used again.
            unsafe { std::ptr::drop_in_place(slot) };
        }
        let layout = Array::<T>::layout(self.capacity());
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.slots.as_ptr().cast(), layout) };
    }
}

/// Where a hand at slot `hand` of `from` slots stands in an array of `to`
/// slots: the same place in the order of the hashes.
pub(super) fn moved_hand(hand: usize, from: usize, to: usize) -> usize {
    // Both below 2^32 (`capacity_for`): the product fits.
    let moved = hand as u64 * to as u64 / from as u64;
    usize::try_from(moved).expect("below `to`")
}
