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
//! A row with a deadline of its own (a loader's or a `put`'s TTL, what is
//! left of an L2 frame) must not outlive it: it is installed to die one tick
//! early, and the clock [follows](Clock::follow) it, ticking every 1% of its
//! life until it is over, so it dies at most that early.
//!
//! The clock is injectable: a [`Clock::manual`] clock only moves when a test
//! advances it, so no test sleeps to wait for an expiry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// The coarsest the clock's tick gets: a row outlives its expiry by at most
/// this (or by 1% of the shortest declared TTL, if less).
pub(crate) const MAX_TICK: Duration = Duration::from_millis(100);

/// The low bits of [`Inner::fine`], which hold the tick in milliseconds.
const TICK_BITS: u32 = 16;
const TICK_MASK: u64 = (1 << TICK_BITS) - 1;

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
    /// The tick in force for the declared TTLs, in milliseconds.
    coarse_ms: AtomicU64,
    /// A finer tick that rows with deadlines of their own asked for, and
    /// until when (clock ms): `until << TICK_BITS | tick`; 0 for none.
    fine: AtomicU64,
    /// Wakes the thread that ticks the clock when a finer tick is asked
    /// for (the first cache's, if caches share the clock: the others'
    /// threads take the finer tick at their next wake).
    ticker: OnceLock<mpsc::Sender<()>>,
}

impl Inner {
    fn new(origin: Option<Instant>, now_ms: u64) -> Inner {
        Inner {
            now_ms: AtomicU64::new(now_ms),
            origin,
            coarse_ms: AtomicU64::new(millis(MAX_TICK)),
            fine: AtomicU64::new(0),
            ticker: OnceLock::new(),
        }
    }
}

impl Clock {
    /// The monotonic system clock, read at millisecond resolution.
    #[must_use]
    pub fn system() -> Clock {
        let clock = Clock {
            inner: Arc::new(Inner::new(Some(Instant::now()), 0)),
        };
        clock.tick();
        clock
    }

    /// A clock that moves only when [`advance`](Self::advance)d.
    #[must_use]
    pub fn manual() -> Clock {
        Clock {
            inner: Arc::new(Inner::new(None, 1)),
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

    /// The thread that ticks the clock every `coarse` (the declared TTLs'
    /// tick) and is woken through `ticker` when rows need a finer one.
    pub(crate) fn ticked_by(&self, coarse: Duration, ticker: mpsc::Sender<()>) {
        (self.inner.coarse_ms).fetch_min(millis(coarse), Ordering::Relaxed);
        let _ = self.inner.ticker.set(ticker);
    }

    /// How often the clock must tick now: the declared TTLs' tick, or the
    /// finer one rows still living asked for.
    pub(crate) fn tick_every(&self) -> Duration {
        let coarse = self.inner.coarse_ms.load(Ordering::Relaxed);
        let fine = self.inner.fine.load(Ordering::Relaxed);
        let wanted = fine >> TICK_BITS >= self.now_ms() && fine != 0;
        let tick = if wanted {
            coarse.min(fine & TICK_MASK)
        } else {
            coarse
        };
        Duration::from_millis(tick)
    }

    /// A row is installed at `now` with a deadline `life_ms` later: the
    /// clock ticks every 1% of that life (at least every millisecond) until
    /// the deadline, waking its thread if that is finer than it ticks.
    /// Returns how late a reading may then be, at most: how much earlier
    /// the row must die not to outlive its deadline (0 on a manual clock,
    /// which is never late).
    pub(crate) fn follow(&self, now: u64, life_ms: u64) -> u64 {
        if self.is_manual() {
            return 0;
        }
        let coarse = self.inner.coarse_ms.load(Ordering::Relaxed);
        let tick = (life_ms / 100).clamp(1, coarse);
        if tick == coarse {
            return coarse;
        }
        let until = now.saturating_add(life_ms).min(u64::MAX >> TICK_BITS);
        let mut fine = self.inner.fine.load(Ordering::Relaxed);
        loop {
            let (fine_until, fine_tick) = (fine >> TICK_BITS, fine & TICK_MASK);
            let wanted = fine != 0 && fine_until >= now;
            if wanted && fine_until >= until && fine_tick <= tick {
                return fine_tick;
            }
            let next = if wanted {
                fine_until.max(until) << TICK_BITS | fine_tick.min(tick)
            } else {
                until << TICK_BITS | tick
            };
            match (self.inner.fine).compare_exchange_weak(
                fine,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    if !wanted || tick < fine_tick {
                        // A thread asleep for a coarse tick takes the fine
                        // one now, not at its next wake.
                        if let Some(ticker) = self.inner.ticker.get() {
                            let _ = ticker.send(());
                        }
                    }
                    return next & TICK_MASK;
                }
                Err(now_fine) => fine = now_fine,
            }
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
