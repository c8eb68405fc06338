//! Fail-safe: an expired value answers while the loader fails
//! (`stale_if_error_ms`, the table's grace).
//!
//! A flight looks for a fallback as it goes: the id's dead row in L1, if it
//! died less than the grace ago, and its expired frame in L2 (frames
//! outlive their TTL by the grace), the newer of the two. If the loader
//! then fails or times out, the flight answers the fallback
//! ([`Source::Stale`]) instead of the error, unless it was overtaken by an
//! invalidation of the id meanwhile; it never installs it.
//!
//! Never after an invalidation: invalidations remove dead rows like live
//! ones, L2 holds the tombstone of an invalidation in place of the frame (a
//! fallback older than a tombstone the flight read is dropped), a frame
//! older than an invalidation applied on this node is no fallback, and a
//! table whose invalidation channel is down serves nothing stale, whether
//! it bypasses L1 or keeps serving it unverified (`lost_grace_ms`):
//! invalidations may have been missed, and an expired value is older than
//! anything else it could serve.
//!
//! After a failure, the loader is not called again for that id for
//! [`backoff`](Failsafe::backoff) (the grace, at most [`MAX_BACKOFF_MS`]):
//! flights in that window answer the fallback at once, so a failing store
//! is not hammered by every miss. A flight with no fallback calls the
//! loader as ever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::Error;
use crate::table::fetched::{Fetched, Source};

/// The longest backoff after a failed load: 1 s.
pub(crate) const MAX_BACKOFF_MS: u64 = 1_000;

/// What a flight may answer if its loader fails.
pub(crate) struct Fallback<T> {
    /// The value and its version.
    value: Option<(Arc<T>, u64)>,
    /// The flight did not call the loader: it failed on this id less than
    /// the backoff ago.
    pub(crate) backoff: bool,
}

impl<T> Fallback<T> {
    pub(crate) fn none() -> Fallback<T> {
        Fallback {
            value: None,
            backoff: false,
        }
    }

    /// Offers an expired value at `version`; the newest offer is kept.
    pub(crate) fn offer(&mut self, value: Arc<T>, version: u64) {
        if self.value.as_ref().is_none_or(|&(_, v)| v < version) {
            self.value = Some((value, version));
        }
    }

    /// An invalidation at `version` was seen: what it overtook is no
    /// fallback.
    pub(crate) fn invalidated(&mut self, version: u64) {
        if self.value.as_ref().is_some_and(|&(_, v)| v < version) {
            self.value = None;
        }
    }

    /// Nothing could prove the fallback was not invalidated: it is none.
    pub(crate) fn unproven(&mut self) {
        self.value = None;
    }

    pub(crate) fn is_some(&self) -> bool {
        self.value.is_some()
    }

    /// The fallback's version, if there is one.
    pub(crate) fn version(&self) -> Option<u64> {
        self.value.as_ref().map(|&(_, v)| v)
    }

    /// Whether there is a value and `holds` says it still may answer.
    pub(crate) fn holds(&self, holds: impl FnOnce(&Arc<T>, u64) -> bool) -> bool {
        (self.value.as_ref()).is_some_and(|(value, version)| holds(value, *version))
    }

    /// The answer it makes, if there is one, keeping it.
    pub(crate) fn answer(&self) -> Option<Fetched<T>> {
        (self.value.as_ref())
            .map(|(value, version)| Fetched::new(Arc::clone(value), Source::Stale, *version))
    }

    /// The answer it makes, if there is one.
    pub(crate) fn take(self) -> Option<Fetched<T>> {
        (self.value).map(|(value, version)| Fetched::new(value, Source::Stale, version))
    }
}

/// A table's grace and the ids whose loader failed lately.
pub(crate) struct Failsafe {
    grace_ms: u64,
    failing: Mutex<Failing>,
}

/// The ids whose loader failed lately.
struct Failing {
    /// By id: until when (on the table's clock) the loader is not called
    /// again, and the error it answered.
    ids: HashMap<u64, (u64, Error)>,
    /// The size at which a failure first forgets the backoffs that are
    /// over: the sweeper does too, but a long `sweep_ms` must not let a
    /// store that fails under many ids grow the map for that long.
    prune_at: usize,
}

/// The least [`Failing::prune_at`].
const PRUNE_FROM: usize = 1_024;

impl Failing {
    fn prune(&mut self, now: u64) {
        if !self.ids.is_empty() {
            self.ids.retain(|_, (until, _)| now < *until);
        }
        // Twice what is left: pruning costs a constant per failure.
        self.prune_at = (2 * self.ids.len()).max(PRUNE_FROM);
    }
}

impl Failsafe {
    pub(crate) fn new(grace_ms: u64) -> Failsafe {
        Failsafe {
            grace_ms,
            failing: Mutex::new(Failing {
                ids: HashMap::new(),
                prune_at: PRUNE_FROM,
            }),
        }
    }

    /// Whether the table serves stale values at all.
    pub(crate) fn enabled(&self) -> bool {
        self.grace_ms > 0
    }

    /// How long the loader is left alone after it failed on an id.
    pub(crate) fn backoff(&self) -> u64 {
        self.grace_ms.min(MAX_BACKOFF_MS)
    }

    /// Whether a flight that ended in `error` may answer a fallback: the
    /// loader failed or timed out (not "not found", not a panic).
    pub(crate) fn covers(error: &Error) -> bool {
        matches!(error, Error::Load { .. } | Error::LoadTimeout { .. })
    }

    fn failing(&self) -> std::sync::MutexGuard<'_, Failing> {
        self.failing.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The error the loader answered for `key` less than the backoff
    /// before `now`, if it did.
    pub(crate) fn backing_off(&self, key: u64, now: u64) -> Option<Error> {
        let failing = self.failing();
        let (until, error) = failing.ids.get(&key)?;
        (now < *until).then(|| error.clone())
    }

    /// A flight of `key` ended at `now`: a failure starts the backoff, an
    /// answer of the loader ends it.
    pub(crate) fn landed<T>(&self, key: u64, now: u64, outcome: &Result<Fetched<T>, Error>) {
        match outcome {
            Err(error) if Failsafe::covers(error) => {
                let mut failing = self.failing();
                if failing.ids.len() >= failing.prune_at {
                    failing.prune(now);
                }
                let until = now.saturating_add(self.backoff());
                failing.ids.insert(key, (until, error.clone()));
            }
            Ok(fetched) if fetched.source() == Source::Stale => {}
            Ok(_) | Err(Error::NotFound { .. }) => {
                let mut failing = self.failing();
                if !failing.ids.is_empty() {
                    failing.ids.remove(&key);
                }
            }
            Err(_) => {}
        }
    }

    /// Forgets the failures whose backoff is over.
    pub(crate) fn prune(&self, now: u64) {
        self.failing().prune(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_forget_the_backoffs_that_are_over_without_the_sweeper() {
        let failsafe = Failsafe::new(100);
        let failed: Result<Fetched<()>, Error> = Err(Error::LoadTimeout {
            table: "t",
            after: std::time::Duration::from_millis(1),
        });
        // Ten backoffs in a row, 5,000 new ids failing in each.
        for round in 0..10u64 {
            for i in 0..5_000 {
                failsafe.landed(round << 32 | i, round * 100, &failed);
            }
        }
        let held = failsafe.failing().ids.len();
        assert!(held < 3 * 5_000, "{held} failures held");
        assert!(
            failsafe.backing_off(9 << 32, 900).is_some(),
            "the last kept"
        );
    }
}
