//! A circuit breaker: stop hammering a server that does not answer.
//!
//! Closed, it lets every operation through and counts failures in a row;
//! after [`TRIP_AFTER`] it opens. Open, it refuses operations (they fall
//! through to the loader at once), except one probe per `probe_every`. A
//! probe that succeeds closes it. So a dead server sees at most one attempt
//! per interval, and a server that comes back is used again by itself. A
//! probe that never reports (its caller was dropped) costs one interval.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::clock::millis;

/// Failures in a row that open the breaker.
pub(crate) const TRIP_AFTER: u32 = 3;

pub(crate) struct Breaker {
    open: AtomicBool,
    failures: AtomicU32,
    /// When an open breaker lets the next probe through (ms since `origin`).
    probe_at: AtomicU64,
    probe_every_ms: u64,
    origin: Instant,
}

impl Breaker {
    pub(crate) fn new(probe_every: Duration) -> Breaker {
        Breaker {
            open: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            probe_at: AtomicU64::new(0),
            probe_every_ms: millis(probe_every),
            origin: Instant::now(),
        }
    }

    /// Whether an operation may go to the server now.
    pub(crate) fn allow(&self) -> bool {
        // Closed, the common case: no clock read.
        !self.open.load(Relaxed) || self.allow_at(self.now_ms())
    }

    /// Records a success; whether it closed the breaker.
    pub(crate) fn success(&self) -> bool {
        self.failures.store(0, Relaxed);
        // Read first: the common case (closed) writes nothing more.
        self.open.load(Relaxed) && self.open.swap(false, Relaxed)
    }

    /// Records a failure; whether it opened the breaker.
    pub(crate) fn failure(&self) -> bool {
        self.failure_at(self.now_ms())
    }

    /// Whether the breaker is refusing operations.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Relaxed)
    }

    fn allow_at(&self, now: u64) -> bool {
        if !self.open.load(Relaxed) {
            return true;
        }
        // One probe per interval: the caller that moves `probe_at` wins.
        let at = self.probe_at.load(Relaxed);
        now >= at
            && self
                .probe_at
                .compare_exchange(
                    at,
                    now.saturating_add(self.probe_every_ms),
                    Relaxed,
                    Relaxed,
                )
                .is_ok()
    }

    fn failure_at(&self, now: u64) -> bool {
        let failures = self.failures.fetch_add(1, Relaxed) + 1;
        let opened = failures >= TRIP_AFTER && !self.open.swap(true, Relaxed);
        if opened {
            self.probe_at
                .store(now.saturating_add(self.probe_every_ms), Relaxed);
        }
        opened
    }

    pub(crate) fn probe_every(&self) -> Duration {
        Duration::from_millis(self.probe_every_ms)
    }

    fn now_ms(&self) -> u64 {
        millis(self.origin.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trips_then_probes_once_per_interval_and_recovers() {
        let breaker = Breaker::new(Duration::from_millis(100));
        for failure in 1..=TRIP_AFTER {
            assert!(breaker.allow_at(0));
            assert_eq!(breaker.failure_at(0), failure == TRIP_AFTER, "opens once");
        }
        assert!(breaker.is_open());
        assert!(!breaker.allow_at(99), "no probe before the interval");
        assert!(breaker.allow_at(100), "one probe once it passed");
        assert!(!breaker.allow_at(100), "only one probe per interval");
        assert!(!breaker.failure_at(100), "already open");
        assert!(!breaker.allow_at(150));
        assert!(breaker.allow_at(200), "the next interval probes again");
        assert!(breaker.success(), "closes");
        assert!(!breaker.success(), "already closed");
        assert!(!breaker.is_open());
        assert!(breaker.allow_at(200) && breaker.allow_at(200));
    }
}
