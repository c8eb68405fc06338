//! When L1 may free what a writer removed: epoch-based reclamation whose
//! read side writes only to its own thread's cell.
//!
//! A reader [`pin`]s before it looks into a table and unpins after: two
//! plain stores to a cache line its thread owns. A writer that unlinks a
//! value or an array hands it to a [`Garbage`] list; the list frees it two
//! epochs later, once every reader pinned at the time of the unlinking has
//! unpinned. The epoch advances only when every pinned reader has seen the
//! current one.
//!
//! The usual scheme makes each pin a full memory fence (a locked
//! instruction, a third of a hit's time). Here the fence is *asymmetric*: on
//! Linux the reader's store is followed by a compiler fence only, and the
//! rare reclaimer calls `membarrier(2)`, which runs a full fence on every
//! thread of the process. Where that call is missing (other systems, some
//! sandboxes, Miri, loom) both sides use ordinary `SeqCst` fences.
//!
//! Threads lease their cell for as long as they live; the lease index also
//! stripes the hit counters ([`crate::stats`]).
//!
//! # Why a reader's loads happen before the free
//!
//! A reader R loads a pointer `p` from a table while pinned. A writer
//! unlinks `p` (the slot or the shard now points elsewhere) and retires it;
//! a collection seals it in a batch stamped `s`, the epoch read after the
//! retirement (the list's lock orders the two, the registry's lock makes
//! `s` current); the batch is freed once the epoch is `s + 2`. Every
//! advance holds the registry's lock, which chains them and the collectors
//! that see their epochs: the advance A1 to `s + 1` comes after the
//! unlinking, the advance A2 to `s + 2` after A1, the free after A2.
//!
//! 1. *The fences: A1's scan sees R's pin, or R never saw `p`.* R stores its
//!    pin, fences (light half), then loads; A1 fences (heavy half), then
//!    scans. With `SeqCst` fences on both sides, one fence precedes the
//!    other: if R's, the scan reads R's pin or a later store of its cell;
//!    if A1's, R's loads read the unlinking or later, and never `p`. With
//!    `membarrier(2)`, the heavy half runs a full fence on R's CPU between
//!    its call and its return, and R's compiler fence keeps its store
//!    before its loads: the same two cases, argued on the hardware (the
//!    language's memory model has no asymmetric fence; Miri and loom check
//!    the `SeqCst` fallback).
//! 2. *The epochs: R held `p` pinned at `s`.* A1 advances only past a pin
//!    at `s` (a pin that read an older epoch holds it back). A2 advances
//!    only if R's cell shows `s + 1` or nothing, so its scan, later than
//!    A1's (the lock, and coherence), read a store of R's cell made after
//!    the pin at `s`: its unpin, or a later pin.
//! 3. *Acquire after the scan.* Unpins and pins are release stores, after
//!    R's loads of `p` in its program. The scan reads them relaxed, then
//!    fences with `Acquire`: whichever it read synchronizes with that
//!    fence, so R's loads happen before A2's epoch store, and through the
//!    registry's lock before the free. (A relaxed pin would not do: a scan
//!    that read R's next pin would synchronize with nothing. On x86 both
//!    are the same plain store.)
//!
//! Readers without a cell are counted in `SHARED` instead, by
//! read-modify-writes: while one is pinned the epoch stands still, and a
//! scan that reads zero synchronizes with every release decrement.
//!
//! Checked under Miri (`scripts/miri`, with and without weak-memory
//! emulation: a directed test in `l1.rs` fails as a data race between a
//! reader's load and the free without the acquire fence) and by loom
//! models of the table (`l1.rs`), which fail without either fence half,
//! the acquire fence or the release unpin, or one epoch of the two.
//!
//! # What a stalled reader costs
//!
//! The epoch is global. One thread stalled while pinned (descheduled, or
//! stopped in a debugger mid-hit) lets the epoch advance once more, then
//! holds every allocation any table in the process retires until it
//! unpins: each replaced, removed or expired value (its `Arc` and all it
//! owns, plus 16 bytes of list) and each rebuilt array. That is about
//! `write rate × stall × (value size + 16 B)`: measured, one writer
//! replacing 1 KiB values as fast as it could (0.75 million a second while
//! a reader slept pinned, 4.7 million without) held 0.9 GB per second of
//! stall; at 10,000 writes a second of 1 KiB values, 11 MB a second.
//! Writers are not slowed beyond the allocator's pace (one batch per
//! epoch keeps the list short), and the first collection after the unpin
//! frees it all (3 million values in 0.43 s, on whichever writer or
//! maintenance thread collects). It is not bounded: advancing past a
//! stalled reader would free what it may still read.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::compiler_fence;

use crossbeam_utils::CachePadded;

use crate::report::stats::CELLS;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering, fence, statics};

statics! {
    /// The epoch; a pinned reader's cell holds `epoch << 1 | 1`.
    static EPOCH: AtomicU64 = AtomicU64::new(0);
    /// Readers pinned without a cell (a thread whose thread-locals are
    /// gone): while there are any, the epoch stands still.
    static SHARED: AtomicUsize = AtomicUsize::new(0);
    static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
        cells: Vec::new(),
        free: Vec::new(),
    });
}

struct Registry {
    /// Every cell ever leased, by index; leaked so pins can hold `'static`.
    cells: Vec<&'static CachePadded<AtomicU64>>,
    /// Indexes of cells whose thread has ended.
    free: Vec<usize>,
}

const UNPINNED: u64 = 0;

/// A reader's protection: what it loaded from a table stays allocated
/// until it is dropped.
pub(crate) struct Pin {
    cell: Option<&'static AtomicU64>,
    index: usize,
    /// Unpinning writes this thread's cell: the pin stays on its thread.
    _not_send: PhantomData<*const ()>,
}

/// Pins the calling thread. A thread with a fast lease pins in its hit's
/// line ([`pin_fast`]); every other pin (the thread's first, a fallback
/// fence, a thread without a cell) takes [`pin_slow`].
#[inline]
pub(crate) fn pin() -> Pin {
    match lease::fast() {
        Some((index, cell)) => {
            pin_fast_lease(cell);
            Pin {
                cell: Some(cell),
                index,
                _not_send: PhantomData,
            }
        }
        None => pin_slow(),
    }
}

/// Pins the calling thread if its lease is fast ([`lease::fast`]); `None`
/// for every other thread, which then takes [`pin`].
#[inline]
pub(crate) fn pin_fast() -> Option<FastPin> {
    let (index, cell) = lease::fast()?;
    pin_fast_lease(cell);
    Some(FastPin {
        cell,
        index,
        _not_send: PhantomData,
    })
}

/// The pin of a fast lease, where `membarrier(2)` does the heavy half:
/// a store to its cell and a compiler fence, no test of which fence to
/// use (its lease is there only if it is that one).
#[inline]
fn pin_fast_lease(cell: &AtomicU64) {
    // Release: as in `pin_slow`.
    cell.store(EPOCH.load(Ordering::Relaxed) << 1 | 1, Ordering::Release);
    // The light half of the asymmetric fence (`barrier::light`), which the
    // fast lease implies.
    compiler_fence(Ordering::SeqCst);
}

/// [`pin`] out of the hit's line: leases the thread's cell on its first
/// pin, and fences as [`barrier::light`] says.
#[cold]
#[inline(never)]
fn pin_slow() -> Pin {
    if let Some((index, cell)) = lease::current() {
        // Release: a reclaimer that reads this pin in place of the unpin
        // before it still orders this thread's earlier reads (module docs).
        cell.store(EPOCH.load(Ordering::Relaxed) << 1 | 1, Ordering::Release);
        barrier::light();
        Pin {
            cell: Some(cell),
            index,
            _not_send: PhantomData,
        }
    } else {
        SHARED.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        Pin {
            cell: None,
            index: usize::MAX,
            _not_send: PhantomData,
        }
    }
}

/// A pinned thread: what a table's reads take as proof of it.
pub(crate) trait Pinned {
    /// The calling thread's lease index: unique among living threads, small
    /// (threads alive at once), `usize::MAX` if the thread has none.
    fn index(&self) -> usize;
}

impl Pinned for Pin {
    #[inline]
    fn index(&self) -> usize {
        self.index
    }
}

/// A [`Pin`] of a thread with a fast lease: its unpin is one store, with
/// no test of whether it has a cell, and its index is below [`CELLS`] (a
/// striped counter's cell of its own, with no bounds test). A fetch's hit
/// pins with it and leaves every other pin out of its line
/// (`Fetch::poll`): 4 instructions a hit.
pub(crate) struct FastPin {
    cell: &'static AtomicU64,
    index: usize,
    _not_send: PhantomData<*const ()>,
}

impl Pinned for FastPin {
    #[inline]
    fn index(&self) -> usize {
        // SAFETY: only leases below `CELLS` are fast (`lease::take`).
        unsafe { std::hint::assert_unchecked(self.index < CELLS) };
        self.index
    }
}

impl Drop for FastPin {
    #[inline]
    fn drop(&mut self) {
        // Release: as in `Pin`'s.
        self.cell.store(UNPINNED, Ordering::Release);
    }
}

impl Drop for Pin {
    #[inline]
    fn drop(&mut self) {
        // Release: the reader's loads happen before it is seen unpinned.
        match self.cell {
            Some(cell) => cell.store(UNPINNED, Ordering::Release),
            None => {
                SHARED.fetch_sub(1, Ordering::Release);
            }
        }
    }
}

/// The registry, locked.
fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Advances the epoch if every pinned reader has seen it; the epoch after.
fn try_advance(registry: &Registry) -> u64 {
    let epoch = EPOCH.load(Ordering::Relaxed);
    // After this, a reader either shows its pin below or, pinned later,
    // sees every unlinking that came before.
    barrier::heavy();
    if SHARED.load(Ordering::Relaxed) != 0 {
        return epoch;
    }
    let behind = registry.cells.iter().any(|cell| {
        let state = cell.load(Ordering::Relaxed);
        state != UNPINNED && state >> 1 != epoch
    });
    if behind {
        return epoch;
    }
    // Acquire, pairing with each release store (an unpin, or a later pin)
    // that the relaxed scan above read: the reads a reader made while
    // pinned happen before everything this reclaimer does next, the frees
    // included (crossbeam-epoch fences the same way).
    fence(Ordering::Acquire);
    // Release: what the reclaimer saw comes before readers pinning at the
    // new epoch.
    EPOCH.store(epoch + 1, Ordering::Release);
    epoch + 1
}

/// Something unlinked, and how to free it.
struct Retired {
    ptr: *mut (),
    free: unsafe fn(*mut ()),
}

/// The unlinked allocations of one table, freed once no reader can hold
/// them.
pub(crate) struct Garbage {
    lists: Mutex<Lists>,
}

#[derive(Default)]
struct Lists {
    /// Unlinked since the last collection.
    pending: Vec<Retired>,
    /// Batches stamped with the epoch of their collection: free at
    /// `stamp + 2`.
    sealed: Vec<(u64, Vec<Retired>)>,
}

// SAFETY: a `Retired` is an owned allocation of a `Send` value (the tables
// hold `Send + Sync` values), freed on whichever thread collects.
unsafe impl Send for Retired {}

/// Pending allocations that make a writer collect.
const COLLECT_AT: usize = 64;

impl Garbage {
    pub(crate) fn new() -> Garbage {
        Garbage {
            lists: Mutex::new(Lists::default()),
        }
    }

    /// Hands over `ptr`, which no reader pinning from now on can reach, to
    /// be freed by `free` once the readers pinned before are gone. Writers
    /// call [`collect_if_due`](Self::collect_if_due) afterwards, outside
    /// their locks.
    ///
    /// # Safety
    ///
    /// `ptr` is unlinked and `free(ptr)` frees it; it is retired once.
    pub(crate) unsafe fn retire(&self, ptr: *mut (), free: unsafe fn(*mut ())) {
        self.lock().pending.push(Retired { ptr, free });
    }

    /// Collects if enough has been retired since the last collection.
    pub(crate) fn collect_if_due(&self) {
        if self.lock().pending.len() >= COLLECT_AT {
            self.collect();
        }
    }

    /// Frees what no reader can hold any more; advances the epoch if it can.
    pub(crate) fn collect(&self) {
        {
            let mut lists = self.lock();
            if lists.pending.is_empty() && lists.sealed.is_empty() {
                return;
            }
            let mut pending = std::mem::take(&mut lists.pending);
            if !pending.is_empty() {
                // Read under the registry's lock, which every advance holds:
                // the stamp is the epoch at sealing, never an older one.
                let stamp = {
                    let _registry = registry();
                    EPOCH.load(Ordering::Relaxed)
                };
                // One batch per epoch: while a stalled reader holds the
                // epoch, the list stays a batch or two long instead of
                // growing with every collection (each one scans it).
                match lists.sealed.last_mut() {
                    Some((last, batch)) if *last == stamp => batch.append(&mut pending),
                    _ => lists.sealed.push((stamp, pending)),
                }
            }
        }
        // Outside the list's lock: writers retiring meanwhile do not wait
        // for the heavy fence.
        let epoch = try_advance(&registry());
        let freeable: Vec<_> = {
            let mut lists = self.lock();
            let (freeable, kept) = std::mem::take(&mut lists.sealed)
                .into_iter()
                .partition(|(stamp, _)| stamp + 2 <= epoch);
            lists.sealed = kept;
            freeable
        };
        // Outside the locks: freeing runs the values' destructors.
        for (_, batch) in freeable {
            free(batch);
        }
    }

    /// Allocations retired and not yet freed.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        let lists = self.lock();
        lists.pending.len()
            + lists
                .sealed
                .iter()
                .map(|(_, batch)| batch.len())
                .sum::<usize>()
    }

    fn lock(&self) -> MutexGuard<'_, Lists> {
        self.lists
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Frees a batch. A value's `Drop` is user code: one that panics is
/// reported and the rest of the batch is still freed, so the thread that
/// collects (a writer, the maintenance thread) goes on.
fn free(batch: Vec<Retired>) {
    for retired in batch {
        // SAFETY: retired once with its own `free`, and no reader holds it.
        let freed = std::panic::catch_unwind(|| unsafe { (retired.free)(retired.ptr) });
        if let Err(panic) = freed {
            if cfg!(all(test, echo_cache_loom)) {
                // The model checker's verdicts are panics: let them through.
                std::panic::resume_unwind(panic);
            }
            tracing::error!("a cached value's Drop panicked while L1 freed it");
        }
    }
}

impl Drop for Garbage {
    fn drop(&mut self) {
        // The table is gone, and with it every reader that could reach these.
        let lists = std::mem::take(
            self.lists
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        free(lists.pending);
        for (_, batch) in lists.sealed {
            free(batch);
        }
    }
}

/// The per-thread lease of a reader cell.
mod lease {
    use super::{AtomicU64, CELLS, CachePadded, Cell, UNPINNED};
    use crate::sync::thread_locals;

    /// Leased: (index, cell). `None` before the first pin and after the
    /// lease is returned at thread exit.
    type Leased = Option<(usize, &'static AtomicU64)>;

    thread_locals! {
        static LEASE: Cell<Leased> = const { Cell::new(None) };
        /// The lease again, if the light half of the fence is a compiler
        /// fence ([`barrier::asymmetric`](super::barrier::asymmetric)):
        /// what [`fast`] reads. Set with `LEASE`, cleared with it.
        static FAST: Cell<Leased> = const { Cell::new(None) };
        static RETURNED: Cell<bool> = const { Cell::new(false) };
        static GUARD: Guard = const { Guard };
    }

    /// Returns the lease when its thread ends.
    struct Guard;

    impl Drop for Guard {
        fn drop(&mut self) {
            // `try_with`: std never destroys the two cells (no `Drop`), but
            // loom destroys all of a thread's at once; the lease of a
            // model's thread is then not reused, which is harmless.
            let _ = RETURNED.try_with(|r| r.set(true));
            let _ = FAST.try_with(|f| f.set(None));
            if let Ok(Some((index, _))) = LEASE.try_with(|l| l.replace(None)) {
                super::registry().free.push(index);
            }
        }
    }

    /// This thread's lease if it has one and the light half of the fence
    /// is a compiler fence; else `None` (then see [`current`]).
    #[inline]
    pub(super) fn fast() -> Leased {
        FAST.with(Cell::get)
    }

    /// This thread's lease; `None` while the thread is exiting.
    pub(super) fn current() -> Leased {
        match LEASE.with(Cell::get) {
            Some(leased) => Some(leased),
            None => take(),
        }
    }

    #[cold]
    fn take() -> Leased {
        // Register the guard first; if this thread is already exiting, share.
        if RETURNED.with(Cell::get) || GUARD.try_with(|_| ()).is_err() {
            return None;
        }
        super::barrier::detect();
        let mut registry = super::registry();
        let leased = if let Some(index) = registry.free.pop() {
            (index, &**registry.cells[index])
        } else {
            let cell: &'static CachePadded<AtomicU64> =
                Box::leak(Box::new(CachePadded::new(AtomicU64::new(UNPINNED))));
            registry.cells.push(cell);
            (registry.cells.len() - 1, &**cell)
        };
        LEASE.with(|l| l.set(Some(leased)));
        // A lease past the striped counters' cells keeps the slow path,
        // whose counters test the index (`FastPin::index`).
        if super::barrier::asymmetric() && leased.0 < CELLS {
            FAST.with(|f| f.set(Some(leased)));
        }
        Some(leased)
    }
}

/// The two halves of the asymmetric fence.
mod barrier {
    use super::{Ordering, compiler_fence, fence};
    // Not a model's atomic: set once per process, false under loom.
    use std::sync::atomic::AtomicBool;

    /// Whether `membarrier(2)` does the heavy half. Set once, before any
    /// thread leases a cell (so before any light half relies on it).
    static ASYMMETRIC: AtomicBool = AtomicBool::new(false);

    /// After a reader's pin store.
    #[inline]
    pub(super) fn light() {
        if ASYMMETRIC.load(Ordering::Relaxed) {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// Whether the light half is a compiler fence (`membarrier(2)` does
    /// the heavy one). Decided by [`detect`], before any thread leases a
    /// cell, and never changed.
    pub(super) fn asymmetric() -> bool {
        ASYMMETRIC.load(Ordering::Relaxed)
    }

    /// Before a reclaimer reads the readers' cells.
    pub(super) fn heavy() {
        if ASYMMETRIC.load(Ordering::Relaxed) {
            membarrier::expedited();
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// Chooses the fence, once per process.
    pub(super) fn detect() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| ASYMMETRIC.store(membarrier::register(), Ordering::Relaxed));
    }

    #[cfg(all(target_os = "linux", not(miri), not(echo_cache_loom)))]
    mod membarrier {
        // From linux/membarrier.h (the `libc` crate does not name them).
        const QUERY: libc::c_int = 0;
        const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        fn membarrier(command: libc::c_int) -> libc::c_long {
            // SAFETY: membarrier takes two integers and touches no memory.
            unsafe { libc::syscall(libc::SYS_membarrier, command, 0 as libc::c_int) }
        }

        /// Whether this process may use expedited barriers (registering it).
        pub(super) fn register() -> bool {
            let supported = membarrier(QUERY);
            let wanted = libc::c_long::from(PRIVATE_EXPEDITED | REGISTER_PRIVATE_EXPEDITED);
            supported >= 0
                && supported & wanted == wanted
                && membarrier(REGISTER_PRIVATE_EXPEDITED) == 0
        }

        pub(super) fn expedited() {
            // Registered in `register`; it cannot fail afterwards, and
            // going on without the fence would free memory readers hold.
            if membarrier(PRIVATE_EXPEDITED) != 0 {
                std::process::abort();
            }
        }
    }

    #[cfg(not(all(target_os = "linux", not(miri), not(echo_cache_loom))))]
    mod membarrier {
        pub(super) fn register() -> bool {
            false
        }

        pub(super) fn expedited() {
            unreachable!("only called when `register` succeeded");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// Retires a box that sets `freed` when it is dropped.
    fn retire_flag(garbage: &Garbage, freed: &Arc<AtomicBool>) {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        unsafe fn free_flag(ptr: *mut ()) {
            // SAFETY: `ptr` is the `Box` made below, freed once.
            drop(unsafe { Box::from_raw(ptr.cast::<Flag>()) });
        }
        let ptr = Box::into_raw(Box::new(Flag(Arc::clone(freed))));
        // SAFETY: nothing else knows the pointer.
        unsafe { garbage.retire(ptr.cast(), free_flag) };
    }

    /// Collects until `freed`, a bounded number of times.
    fn collect_until(garbage: &Garbage, freed: &AtomicBool) -> bool {
        for _ in 0..10_000 {
            garbage.collect();
            if freed.load(Ordering::SeqCst) {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    #[test]
    fn nothing_is_freed_while_a_reader_pinned_before_it_was_retired() {
        let garbage = Garbage::new();
        let freed = Arc::new(AtomicBool::new(false));
        let (pinned, hold) = (mpsc::channel(), mpsc::channel::<()>());
        let reader = std::thread::spawn(move || {
            let pin = pin();
            pinned.0.send(()).unwrap();
            hold.1.recv().unwrap();
            drop(pin);
        });
        pinned.1.recv().unwrap();
        retire_flag(&garbage, &freed);
        for _ in 0..100 {
            garbage.collect();
        }
        assert!(!freed.load(Ordering::SeqCst), "freed under a pinned reader");
        hold.0.send(()).unwrap();
        reader.join().unwrap();
        assert!(
            collect_until(&garbage, &freed),
            "never freed after unpinning"
        );
    }

    #[test]
    fn a_dropped_list_frees_what_it_holds() {
        let freed = Arc::new(AtomicBool::new(false));
        let garbage = Garbage::new();
        let _pin = pin();
        retire_flag(&garbage, &freed);
        drop(garbage);
        assert!(freed.load(Ordering::SeqCst));
    }

    #[test]
    fn living_threads_hold_distinct_lease_indexes() {
        let (indexes, wait) = (mpsc::channel(), Arc::new(std::sync::Barrier::new(8)));
        std::thread::scope(|s| {
            for _ in 0..8 {
                let (sender, wait) = (indexes.0.clone(), Arc::clone(&wait));
                s.spawn(move || {
                    sender.send(pin().index()).unwrap();
                    wait.wait();
                });
            }
        });
        drop(indexes.0);
        let mut indexes: Vec<usize> = indexes.1.iter().collect();
        indexes.sort_unstable();
        indexes.dedup();
        assert_eq!(indexes.len(), 8);
        assert!(indexes.iter().all(|&i| i != usize::MAX));
    }
}
