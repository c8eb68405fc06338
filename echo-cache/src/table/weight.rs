//! The weight of a value, for a table with a byte bound (`max_bytes`):
//! what its declared weigher says (`weigher = ...`), else the size its
//! codec encodes it to. Weighed before the row is installed, outside every
//! lock.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use crate::l2::Codec;

/// A declared weigher: the bytes a value takes, for `max_bytes`.
#[doc(hidden)]
pub type Weigher<T> = fn(&T) -> usize;

/// `weigh` as a [`Weigher<T>`]: the function a declaration names
/// (`weigher = ...`), checked to be a `fn(&T) -> usize`.
#[doc(hidden)]
pub fn weigher<T>(weigh: fn(&T) -> usize) -> Weigher<T> {
    weigh
}

/// How a byte-bounded table weighs its values.
pub(crate) enum Weight<T> {
    Declared(Weigher<T>),
    /// The codec's encoded size: an encode at each insert, the bytes
    /// dropped (L2 writes encode on their own path).
    Encoded(Arc<dyn Codec<T>>),
}

impl<T: 'static> Weight<T> {
    /// The weight of `value`, at least 1. A weigher that panics, or a
    /// value the codec cannot encode, weighs `usize::MAX`: more than any
    /// shard's share, so the value is served but not kept in L1.
    pub(crate) fn of(&self, value: &T) -> usize {
        let weighed = catch_unwind(AssertUnwindSafe(|| match self {
            Weight::Declared(weigh) => Some(weigh(value)),
            Weight::Encoded(codec) => codec.encode(value).ok().map(|bytes| bytes.len()),
        }));
        match weighed {
            Ok(Some(weight)) => weight.max(1),
            Ok(None) | Err(_) => usize::MAX,
        }
    }
}
