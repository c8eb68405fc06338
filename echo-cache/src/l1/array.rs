//! A shard's array of slots: `m · 2^e` slots after a header that holds
//! their count, probed linearly from a start the key's hash scales to the
//! slot count.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use super::{MIN_SLOTS, Slot};
use crate::sync::AtomicU64;
use crate::sync::Ordering::Relaxed;

/// The slots of one shard, `capacity` of them, in one zeroed allocation
/// after a header of one slot's size whose last word is `capacity`: a
/// shard's pointer is the first slot's address, and a reader that loaded
/// it reads the count one word before it (written before the array was
/// published, never changed). A table with a time-to-idle has the slots
/// followed by each row's hard deadline ([`deadlines`](Array::deadlines)),
/// which the header's word before the count says.
pub(super) struct Array<T> {
    pub(super) slots: NonNull<Slot<T>>,
    capacity: usize,
}

/// Where the probe of `hash` starts in an array of `capacity` slots: the
/// hash's low 32 bits scaled to the slot count, `h · capacity / 2^32`
/// (one multiply and one shift).
#[inline]
pub(super) fn start(hash: u64, capacity: usize) -> usize {
    // The slot count is below 2^32 (`capacity_for`): the product fits, and
    // the result is below the count.
    #[allow(clippy::cast_possible_truncation)]
    let start = (((hash & 0xFFFF_FFFF) * capacity as u64) >> 32) as usize;
    start
}

/// The least slot count `m · 2^e` (`m` from 16 to 31) of at least `slots`:
/// at most 6.25 % over, where the next power of two may be 100 % over.
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
    /// The layout of `capacity` slots and the header before them, then as
    /// many deadlines if the table has a time-to-idle (`deadlines`).
    pub(super) fn layout(capacity: usize, deadlines: bool) -> Layout {
        let slots = Layout::array::<Slot<T>>(capacity + 1);
        let layout = slots.and_then(|slots| {
            let deadlines = Layout::array::<AtomicU64>(if deadlines { capacity } else { 0 })?;
            Ok(slots.extend(deadlines)?.0)
        });
        layout.expect("an L1 array fits the address space")
    }

    /// A new array of empty slots, `capacity` of them, and of their rows'
    /// hard deadlines if `deadlines` (a table with a time-to-idle).
    pub(super) fn new(capacity: usize, deadlines: bool) -> Array<T> {
        let layout = Array::<T>::layout(capacity, deadlines);
        #[allow(clippy::cast_ptr_alignment)] // allocated with a slot's alignment
        // SAFETY: the layout is not zero-sized; all zeroes is empty slots.
        let header = unsafe { alloc::alloc_zeroed(layout) }.cast::<Slot<T>>();
        let Some(header) = NonNull::new(header) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: the slots follow the header, inside the allocation.
        let slots = unsafe { header.add(1) };
        // SAFETY: the header's last word, inside the allocation, aligned
        // (a slot's alignment is a word's at least); nothing else sees it.
        unsafe { slots.cast::<usize>().sub(1).write(capacity) };
        // SAFETY: as above, the word before it.
        unsafe { slots.cast::<usize>().sub(2).write(usize::from(deadlines)) };
        // A loom atomic is a handle into the model, not its value: make them.
        #[cfg(all(test, echo_cache_loom))]
        for i in 0..capacity {
            // SAFETY: inside the allocation, and nothing else sees it yet.
            unsafe { slots.as_ptr().add(i).write(Slot::vacant()) };
            if deadlines {
                // SAFETY: as above, past the slots.
                unsafe {
                    let deadline = slots.as_ptr().add(capacity).cast::<AtomicU64>().add(i);
                    deadline.write(AtomicU64::new(0));
                }
            }
        }
        Array { slots, capacity }
    }

    /// Whether the slots are followed by deadlines (`new`).
    fn has_deadlines(&self) -> bool {
        // SAFETY: the header's word before the count, written in `new`
        // before the array was published and never since.
        unsafe { self.slots.cast::<usize>().sub(2).read() != 0 }
    }

    /// The hard deadline of each slot's row (its TTL's expiry, which a
    /// read does not extend), in a table with a time-to-idle: the stamp's
    /// expiry is the nearer of it and the idle deadline. Written by the
    /// shard's writer within the write of the row ([`Slot::write`]).
    pub(super) fn deadlines(&self) -> Option<&[AtomicU64]> {
        if !self.has_deadlines() {
            return None;
        }
        // SAFETY: `capacity` deadlines follow the slots (`new`): the
        // layout's second part starts right after them, a slot's size
        // being a multiple of a word's.
        Some(unsafe {
            let first = self.slots.as_ptr().add(self.capacity).cast::<AtomicU64>();
            std::slice::from_raw_parts(first, self.capacity)
        })
    }

    /// The shard's pointer to the array: its first slot's address.
    pub(super) fn tagged(&self) -> *mut Slot<T> {
        self.slots.as_ptr()
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
        let slots = NonNull::new(tagged)?;
        // SAFETY: the header's last word (`new`), written before the array
        // was published and never since; the caller keeps it allocated.
        let capacity = unsafe { slots.cast::<usize>().sub(1).read() };
        Some(Array { slots, capacity })
    }

    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Where the probe of `hash` starts ([`start`]).
    #[inline]
    pub(super) fn start(&self, hash: u64) -> usize {
        start(hash, self.capacity)
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
        let layout = Array::<T>::layout(self.capacity(), self.has_deadlines());
        // SAFETY: allocated in `new` with this layout, from the header on,
        // which is the slot before the first.
        unsafe { alloc::dealloc(self.slots.as_ptr().sub(1).cast(), layout) };
    }
}

/// Where a hand at slot `hand` of `from` slots stands in an array of `to`
/// slots: the same place in the order of the hashes.
pub(super) fn moved_hand(hand: usize, from: usize, to: usize) -> usize {
    // Both below 2^32 (`capacity_for`): the product fits.
    let moved = hand as u64 * to as u64 / from as u64;
    usize::try_from(moved).expect("below `to`")
}
