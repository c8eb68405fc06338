//! The synchronization primitives of the flight registry, swapped for
//! loom's when the model checker runs (`--cfg echo_cache_loom`).

#[cfg(all(test, echo_cache_loom))]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(all(test, echo_cache_loom))]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(all(test, echo_cache_loom)))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(all(test, echo_cache_loom)))]
pub(crate) use std::sync::{Mutex, MutexGuard};
