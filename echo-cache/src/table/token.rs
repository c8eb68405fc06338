//! The loader's token: how a load learns that nobody waits for it any more
//! ([`LoadToken`]).
//!
//! A flight runs detached from its callers (one that gives up does not
//! cancel it for the others), so its loader goes on until it answers or
//! the flight's deadline drops it. A long query whose answer nobody waits
//! for may rather stop: the token says when that is. It is the flight's
//! answer cell seen through [`Watched`] (no allocation: the flight's `Arc`,
//! cloned), set as a task-local around the loader's call, so that every
//! loader, declared or given, reaches it without another signature.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::answer::Watched;

tokio::task_local! {
    static CURRENT: LoadToken;
}

/// What a running load can learn of the fetches waiting for it: whether
/// anybody still does.
///
/// Inside a loader called by a flight of one id (a [`Cache::fetch`], a
/// refresh-ahead, or an id of [`Cache::fetch_many`] loaded by the single
/// loader), [`LoadToken::current`] is the token of that flight. Nobody
/// waits for it once every caller that waited was answered (an expired
/// value at the table's soft timeout, see
/// [Soft timeouts](crate#soft-timeouts)), gave up at its own timeout, or
/// was dropped. A loader may then stop and answer an error of its own:
/// nobody waits to see it; it ends the flight as a failed load (a load
/// error, or for a table with a grace, a stale one and the backoff) and
/// nothing is cached (the next miss loads again). A loader that goes on
/// lands its value as ever (L1, L2), for the next reader: the token
/// advises, it cancels nothing. A waiter counts from its first poll.
///
/// A refresh-ahead load is waited for by nobody from its start (until a
/// miss joins it). A loader that stops whenever nobody waits gives up
/// refresh-ahead: its rows die and the next read misses, as without
/// `refresh_ms`.
///
/// The flight's deadline (`load_timeout_ms`, else
/// [`Builder::load_timeout`]) does cancel: the loader's future is dropped
/// there, whether anybody waits or not.
///
/// The token follows the loader's own task: take it with
/// [`current`](Self::current) before spawning work that should see it.
///
/// ```standalone_crate
/// use std::time::Duration;
/// use echo_cache::{near_cache, Cache, Id, LoadToken};
///
/// #[near_cache(kind = "RPT", ttl_ms = 60_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// pub struct Report { pub rows: u64 }
///
/// /// A long query, stopped once nobody waits for its answer.
/// async fn load_report(_: Id<Report>) -> Result<Option<Report>, std::io::Error> {
///     let query = async {
///         tokio::time::sleep(Duration::from_secs(60)).await; // your database here
///         Ok(Some(Report { rows: 7 }))
///     };
///     let Some(token) = LoadToken::current() else {
///         return query.await;
///     };
///     tokio::select! {
///         found = query => found,
///         () = token.unwaited() => Err(std::io::Error::other("nobody waits: stopped")),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), echo_cache::Error> {
/// let cache = Cache::builder().loader(load_report).build()?;
/// let id = Id::<Report>::mint();
/// // The caller gives up after 1 s; nobody else waits: the query stops.
/// let gave_up = cache.fetch_within(id, Some(Duration::from_secs(1))).await;
/// assert!(matches!(gave_up, Err(echo_cache::Error::Timeout { .. })));
/// tokio::time::sleep(Duration::from_millis(1)).await;
/// assert_eq!(cache.stats::<Report>().load_errors, 1);
/// # Ok(())
/// # }
/// ```
///
/// [`Cache::fetch`]: crate::Cache::fetch
/// [`Cache::fetch_many`]: crate::Cache::fetch_many
/// [`Builder::load_timeout`]: crate::Builder::load_timeout
#[derive(Clone)]
pub struct LoadToken {
    flight: Arc<dyn Watched>,
}

impl LoadToken {
    pub(crate) fn new(flight: Arc<dyn Watched>) -> LoadToken {
        LoadToken { flight }
    }

    /// The token of the load the calling code runs in: `Some` inside a
    /// loader a flight of one id called (in its future, or in the call
    /// that makes it); `None` elsewhere, in a batch loader
    /// ([`Builder::loader_many`](crate::Builder::loader_many)) too.
    #[must_use]
    pub fn current() -> Option<LoadToken> {
        CURRENT.try_with(LoadToken::clone).ok()
    }

    /// Whether nobody waits for the load's answer now.
    #[must_use]
    pub fn is_unwaited(&self) -> bool {
        self.flight.is_unwaited()
    }

    /// Completes once nobody waits for the load's answer (at once if
    /// nobody does now). A waiter that comes afterwards (a miss that joins
    /// the flight) does not undo it.
    pub fn unwaited(&self) -> Unwaited {
        Unwaited {
            flight: Arc::clone(&self.flight),
        }
    }

    /// Runs `load` with `self` as the [`current`](Self::current) token.
    pub(crate) async fn scope<F: Future>(self, load: impl FnOnce() -> F) -> F::Output {
        CURRENT.scope(self, async move { load().await }).await
    }
}

impl fmt::Debug for LoadToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadToken")
            .field("unwaited", &self.is_unwaited())
            .finish()
    }
}

/// The future of [`LoadToken::unwaited`].
#[must_use = "futures do nothing unless polled"]
pub struct Unwaited {
    flight: Arc<dyn Watched>,
}

impl Future for Unwaited {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.flight.poll_unwaited(cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl fmt::Debug for Unwaited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unwaited").finish_non_exhaustive()
    }
}
