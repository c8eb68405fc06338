//! The synchronization primitives of the flight registry, L1 and its
//! epochs, swapped for loom's when the model checker runs (`--cfg
//! echo_cache_loom`).

#[cfg(all(test, echo_cache_loom))]
pub(crate) use loom::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(all(test, echo_cache_loom))]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(all(test, echo_cache_loom)))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(all(test, echo_cache_loom)))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Process-wide statics built from the primitives above: plain statics, or
/// under loom lazy ones, which the model checker makes afresh for each
/// execution (its atomics are not `const`, and belong to one execution).
#[cfg(not(all(test, echo_cache_loom)))]
macro_rules! statics {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        $($(#[$attr])* static $name: $t = $init;)*
    };
}
#[cfg(all(test, echo_cache_loom))]
macro_rules! statics {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;)*) => {
        loom::lazy_static! { $($(#[$attr])* static ref $name: $t = $init;)* }
    };
}
pub(crate) use statics;

/// `std::thread_local!`, or under loom its own, whose values live for one
/// execution (and which takes no `const` initializer).
#[cfg(not(all(test, echo_cache_loom)))]
macro_rules! thread_locals {
    ($($t:tt)*) => { std::thread_local! { $($t)* } };
}
#[cfg(all(test, echo_cache_loom))]
macro_rules! thread_locals {
    ($($(#[$attr:meta])* static $name:ident: $t:ty = const { $init:expr };)*) => {
        loom::thread_local! { $($(#[$attr])* static $name: $t = $init;)* }
    };
}
pub(crate) use thread_locals;
