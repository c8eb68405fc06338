//! The coarse monotonic clock that L1 expiry is measured on.
//!
//! A hit must not read the OS clock (a `clock_gettime` costs more than the
//! whole hit), so a cache reads a millisecond counter that its maintenance
//! thread advances. The thread ticks it every 1% of the shortest TTL the
//! program declares (absence TTLs included), at least every 100 ms and at
//! most every millisecond: a row may live up to one tick past its expiry
//! (100 ms for 10-minute rows, 1% of any TTL under 10 s), and an idle cache
//! does not wake its thread a thousand times a second.
//!
//! The clock is injectable: a [`Clock::manual`] clock only moves when a test
//! advances it, so no test sleeps to wait for an expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic millisecond clock, shared by the tables of a cache.
///
/// ```
/// use std::time::Duration;
/// use echo_cache::Clock;
///
/// let clock = Clock::manual();
/// let start = clock.now_ms();
/// clock.advance(Duration::from_secs(60));
/// assert_eq!(clock.now_ms(), start + 60_000);
/// ```
#[derive(Clone, Debug)]
pub struct Clock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    now_ms: AtomicU64,
    /// `None` for a manual clock.
    origin: Option<Instant>,
}

impl Clock {
    /// The monotonic system clock, read at millisecond resolution.
    #[must_use]
    pub fn system() -> Clock {
        let clock = Clock {
            inner: Arc::new(Inner {
                now_ms: AtomicU64::new(0),
                origin: Some(Instant::now()),
            }),
        };
        clock.tick();
        clock
    }

    /// A clock that moves only when [`advance`](Self::advance)d.
    #[must_use]
    pub fn manual() -> Clock {
        Clock {
            inner: Arc::new(Inner {
                now_ms: AtomicU64::new(1),
                origin: None,
            }),
        }
    }

    /// Milliseconds since the clock started.
    #[inline]
    #[must_use]
    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms.load(Ordering::Relaxed)
    }

    /// Moves a manual clock forward by `by`, up to `u64::MAX` ms (past
    /// every deadline), where it stays.
    ///
    /// # Panics
    ///
    /// Panics on the system clock, which only the OS moves.
    pub fn advance(&self, by: Duration) {
        assert!(self.is_manual(), "only a manual clock can be advanced");
        let by = millis(by);
        // Saturating: a wrapped sum would take the clock back to the start.
        let _ = self
            .inner
            .now_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Whether this is a [`manual`](Self::manual) clock.
    #[must_use]
    pub fn is_manual(&self) -> bool {
        self.inner.origin.is_none()
    }

    /// Brings the system clock up to date (a no-op on a manual clock).
    pub(crate) fn tick(&self) {
        if let Some(origin) = self.inner.origin {
            // +1 so that 0 is never a reading: rows may use it as "long dead".
            let elapsed = millis(origin.elapsed());
            self.inner.now_ms.fetch_max(elapsed + 1, Ordering::Relaxed);
        }
    }
}

/// `d` in whole milliseconds, saturating at `u64::MAX` (some 584 million
/// years: a "never" for every deadline of the crate).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}
