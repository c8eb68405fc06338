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

use crate::cache::Cache;
use crate::error::Error;
use crate::fetched::Fetched;
use crate::id::Id;
use crate::spec::Cached;

type Miss<T> = Pin<Box<dyn Future<Output = Result<Fetched<T>, Error>> + Send>>;

/// The future returned by [`Cache::fetch`] and [`Cache::fetch_within`].
///
/// Nothing happens until it is polled. Its first poll answers an L1 hit in
/// the caller's thread; on a miss it joins or starts the flight of the id.
#[must_use = "futures do nothing unless polled"]
pub struct Fetch<'c, T: Cached> {
    state: State<'c, T>,
}

enum State<'c, T: Cached> {
    Start {
        cache: &'c Cache,
        id: Id<T>,
        timeout: Option<Duration>,
    },
    Miss(Miss<T>),
    Done,
}

impl<'c, T: Cached> Fetch<'c, T> {
    pub(crate) fn new(cache: &'c Cache, id: Id<T>, timeout: Option<Duration>) -> Fetch<'c, T> {
        Fetch {
            state: State::Start { cache, id, timeout },
        }
    }
}

impl<T: Cached> Future for Fetch<'_, T> {
    type Output = Result<Fetched<T>, Error>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let State::Start { cache, id, timeout } = self.state {
            if let Some(hit) = cache.table::<T>().hit(id.payload()) {
                self.state = State::Done;
                return Poll::Ready(hit);
            }
            let miss = cache.shared_table::<T>().miss(id.payload(), timeout);
            self.state = State::Miss(Box::pin(miss));
        }
        match &mut self.state {
            State::Miss(miss) => {
                let answer = miss.as_mut().poll(cx);
                if answer.is_ready() {
                    self.state = State::Done;
                }
                answer
            }
            State::Start { .. } => unreachable!("left above"),
            State::Done => panic!("`Fetch` polled after completion"),
        }
    }
}

impl<T: Cached> fmt::Debug for Fetch<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Start { .. } => "start",
            State::Miss(_) => "waiting for its flight",
            State::Done => "done",
        };
        f.debug_struct("Fetch").field("state", &state).finish()
    }
}
