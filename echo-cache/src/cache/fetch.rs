//! The future of a fetch.
//!
//! A hit must cost a lookup, not a state machine: [`Fetch`] is a small
//! hand-written future whose first poll looks in L1 and, on a hit, is ready
//! at once. Only a miss builds (and boxes) the miss path's future, which
//! joins or starts the flight and waits for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::entity::id::Id;
use crate::entity::spec::Cached;
use crate::error::Error;
use crate::table::fetched::Fetched;
use crate::table::{Miss, Table};

/// The future returned by [`Cache::fetch`](crate::Cache::fetch) and
/// [`Cache::fetch_within`](crate::Cache::fetch_within).
///
/// Nothing happens until it is polled. Its first poll answers an L1 hit in
/// the caller's thread; on a miss it joins or starts the flight of the id.
/// Like most futures, it is not to be polled again once it is ready.
#[must_use = "futures do nothing unless polled"]
pub struct Fetch<'c, T> {
    /// The table of `T`, found when the fetch was made.
    table: &'c Table<T>,
    id: Id<T>,
    timeout: Option<Duration>,
    /// The miss path, once a poll missed.
    miss: Option<Miss<T>>,
}

impl<'c, T> Fetch<'c, T> {
    pub(crate) fn new(table: &'c Table<T>, id: Id<T>, timeout: Option<Duration>) -> Fetch<'c, T> {
        Fetch {
            table,
            id,
            timeout,
            miss: None,
        }
    }
}

impl<T> Future for Fetch<'_, T> {
    type Output = Result<Fetched<T>, Error>;

    /// Inlined into the caller: the hit, and a call to the miss path. A hit
    /// changes nothing in the future.
    #[allow(clippy::inline_always)] // a hit is a few loads; a call would double it
    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.miss.is_none()
            && let Some(hit) = self.table.hit(self.id.payload())
        {
            return Poll::Ready(hit);
        }
        self.poll_miss(cx)
    }
}

impl<T> Fetch<'_, T> {
    /// Joins or starts the flight (on the first poll that missed), then
    /// waits for it.
    #[inline(never)]
    fn poll_miss(&mut self, cx: &mut Context<'_>) -> Poll<Result<Fetched<T>, Error>> {
        let (table, id, timeout) = (self.table, self.id, self.timeout);
        self.miss
            .get_or_insert_with(|| table.start_miss(id.payload(), timeout))
            .as_mut()
            .poll(cx)
    }
}

impl<T: Cached> fmt::Debug for Fetch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.miss.is_some() {
            "waiting for its flight"
        } else {
            "start"
        };
        f.debug_struct("Fetch")
            .field("id", &self.id)
            .field("state", &state)
            .finish()
    }
}
