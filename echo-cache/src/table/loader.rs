//! Loaders: the type-erased loader a table calls on a miss, and the hidden
//! [`Declared`] trait through which a declaration names its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::entity::id::Id;
use crate::entity::spec::Cached;
use crate::error::BoxError;

/// A declared type: a [`Cached`] type and what its declaration says of how
/// it loads. Implemented by `#[near_cache(...)]` beside `Cached`.
#[doc(hidden)]
pub trait Declared: Cached {
    /// The loader the declaration names (`loader = ...`), if it names one.
    #[must_use]
    fn __loader() -> Option<Loader<Self>> {
        None
    }

    /// The removal listener the declaration names (`listener = ...`), if
    /// it names one.
    #[must_use]
    fn __listener() -> Option<crate::l1::Listener<Self>> {
        None
    }

    /// The weigher the declaration names (`weigher = ...`), if it names
    /// one.
    #[must_use]
    fn __weigher() -> Option<super::Weigher<Self>> {
        None
    }
}

/// A type-erased loader of `T`: the value found, and how long it may live
/// if the loader says ([`Builder::loader_with_ttl`](crate::Builder::loader_with_ttl)).
#[doc(hidden)]
pub type Loader<T> = Arc<
    dyn Fn(Id<T>) -> BoxFuture<'static, Result<Option<(T, Option<Duration>)>, BoxError>>
        + Send
        + Sync,
>;

/// `load` as a [`Loader<T>`]: its future and its error boxed. Used by
/// [`Builder::loader`](crate::Builder::loader) and by the loader a
/// declaration names (`loader = ...`).
#[doc(hidden)]
pub fn loader<T, F, Fut, E>(load: F) -> Loader<T>
where
    T: Cached,
    F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<T>, E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    Arc::new(move |id| {
        let found = load(id).map(|r| r.map(|found| found.map(|value| (value, None))));
        found.map(|r| r.map_err(Into::into)).boxed()
    })
}

/// `load`, whose values come with their TTLs, as a [`Loader<T>`]. Used by
/// [`Builder::loader_with_ttl`](crate::Builder::loader_with_ttl).
pub(crate) fn loader_with_ttl<T, F, Fut, E>(load: F) -> Loader<T>
where
    T: Cached,
    F: Fn(Id<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<(T, Duration)>, E>> + Send + 'static,
    E: Into<BoxError> + 'static,
{
    Arc::new(move |id| {
        let found = load(id).map(|r| r.map(|found| found.map(|(value, ttl)| (value, Some(ttl)))));
        found.map(|r| r.map_err(Into::into)).boxed()
    })
}
