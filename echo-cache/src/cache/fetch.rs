//! The future of a fetch.
//!
//! A hit must cost a lookup, not a state machine: [`Fetch`] is a small
//! hand-written future whose first poll looks in L1 and, on a hit, is ready
//! at once. Only a miss builds (and boxes) the miss path's future, which
//! joins or starts the flight and waits for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::entity::id::Id;
use crate::entity::spec::Cached;
use crate::error::Error;
use crate::l1::epoch;
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
    /// changes nothing in the future, and neither the future's address
    /// nor the context's leaves this function on a hit's way (the miss
    /// path is handed the boxed future and the waker, not `self` or `cx`):
    /// a future polled where it was made (`pin!`, then `poll`) can then
    /// live in registers, not in memory written before each hit.
    #[allow(clippy::inline_always)] // a hit is a few loads; a call would double it
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let key = this.id.payload();
        let miss = match &mut this.miss {
            Some(miss) => miss,
            none => {
                // A thread without a fast pin reads out of this line, so
                // the usual hit's unpin and count test nothing (4
                // instructions a hit, `scripts/instructions`).
                if let Some(pin) = epoch::pin_fast() {
                    if let Some(live) = this.table.hit_row(&pin, key) {
                        drop(pin);
                        return Poll::Ready(this.table.answer(key, live));
                    }
                } else if let Some(answer) = hit_unpinned(this.table, key) {
                    return unbox(Poll::Ready(answer));
                }
                none.insert(start_miss(this.table, key, this.timeout))
            }
        };
        unbox(poll_miss(miss.as_mut(), cx.waker()))
    }
}

/// The miss path's error comes boxed, unboxed here: its answer is then
/// three words read back, not an `Error`'s 48 bytes written where the hit
/// writes its own, which made every caller's match on a hit's answer go
/// through memory (10 instructions a hit, `scripts/instructions`). A box
/// per failed miss is the price.
#[allow(clippy::inline_always)] // the hot path: see `Fetch::poll`
#[inline(always)]
fn unbox<T>(answer: Poll<Result<Fetched<T>, Box<Error>>>) -> Poll<Result<Fetched<T>, Error>> {
    match answer {
        Poll::Ready(Ok(fetched)) => Poll::Ready(Ok(fetched)),
        Poll::Ready(Err(error)) => Poll::Ready(Err(*error)),
        Poll::Pending => Poll::Pending,
    }
}

/// The hit of a thread without a fast pin ([`epoch::pin_fast`]), with an
/// ordinary pin; its error boxed (see [`unbox`]).
#[cold]
#[inline(never)]
fn hit_unpinned<T>(table: &Table<T>, key: u64) -> Option<Result<Fetched<T>, Box<Error>>> {
    table.hit(key).map(|answer| answer.map_err(Box::new))
}
/// The miss path of `key` (on the first poll that missed): joins or starts
/// its flight.
#[cold]
#[inline(never)]
fn start_miss<T>(table: &Table<T>, key: u64, timeout: Option<Duration>) -> Miss<T> {
    table.start_miss(key, timeout)
}

/// Polls the miss path: waits for the flight; its error boxed (see
/// [`Fetch::poll`]). With a context of `waker` alone: what a hit's caller
/// gave besides its waker (the context's extensions, unstable) does not
/// reach the flight.
#[inline(never)]
fn poll_miss<T>(
    miss: Pin<&mut (dyn Future<Output = Result<Fetched<T>, Error>> + Send)>,
    waker: &Waker,
) -> Poll<Result<Fetched<T>, Box<Error>>> {
    miss.poll(&mut Context::from_waker(waker))
        .map(|answer| answer.map_err(Box::new))
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
