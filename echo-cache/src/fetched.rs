//! What a fetch returns: the value, where it came from and its version.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::id::RawId;
use crate::spec::Cached;

/// Where a fetched value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// L1, in the caller's thread.
    Hit,
    /// The shared L2 server, by a flight.
    L2,
    /// The loader (the system of record), by a flight.
    Fill,
}

/// A value read through the cache.
///
/// Dereferences to the value; [`value`](Self::value) is the shared
/// `Arc` itself.
pub struct Fetched<T> {
    value: Arc<T>,
    source: Source,
    /// The payload of the version; its kind is `T`'s.
    version: u64,
}

impl<T> Fetched<T> {
    #[inline]
    pub(crate) fn new(value: Arc<T>, source: Source, version: u64) -> Fetched<T> {
        Fetched {
            value,
            source,
            version,
        }
    }

    /// The value, shared with L1 and every other reader.
    #[must_use]
    pub fn value(&self) -> &Arc<T> {
        &self.value
    }

    /// The value, without the rest.
    #[must_use]
    pub fn into_value(self) -> Arc<T> {
        self.value
    }

    /// Where the value came from.
    #[must_use]
    pub fn source(&self) -> Source {
        self.source
    }
}

impl<T: Cached> Fetched<T> {
    /// The version of the value: an id of the table's kind, minted when the
    /// value was written: by the fill that loaded it (just before it read
    /// the system of record) or by the [`put`](crate::Cache::put) that
    /// wrote it.
    #[must_use]
    pub fn version(&self) -> RawId {
        RawId::new(T::KIND, self.version)
    }
}

impl<T> Clone for Fetched<T> {
    fn clone(&self) -> Self {
        Fetched {
            value: Arc::clone(&self.value),
            source: self.source,
            version: self.version,
        }
    }
}

impl<T> Deref for Fetched<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Cached + fmt::Debug> fmt::Debug for Fetched<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetched")
            .field("value", &self.value)
            .field("source", &self.source)
            .field("version", &self.version())
            .finish()
    }
}
