//! The lost-channel grace of a table (`lost_grace_ms`): while its
//! invalidation channel is down, L1 keeps serving, unverified, for at most
//! the grace; then it is flushed and bypassed as without one. When the
//! channel is back within the grace, the rows kept are verified against L2
//! (or, for `durable`, by the lane's catch-up) before the table is trusted
//! as verified again.
//!
//! This module decides; the table acts on the decisions outside the lock,
//! since a flush runs the values' destructors.

use std::sync::Mutex;

pub(crate) struct Grace {
    /// The grace, in milliseconds; 0: none.
    pub(crate) ms: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Whether the channel is up.
    up: bool,
    /// The loss whose rows are unverified, if any.
    unverified: Option<u64>,
    /// Losses served through so far: each grace's generation.
    losses: u64,
}

/// What a lost channel does to the table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OnLoss {
    /// Flush and bypass L1 now.
    Bypass,
    /// Keep serving; the grace of this generation starts.
    Serve(u64),
    /// Keep serving: the grace of an earlier loss runs.
    Serving,
}

/// What the end of a grace does.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Over {
    /// Nothing: the rows were verified, or a newer loss has its own grace.
    Nothing,
    /// The channel is back but the rows are not verified yet: flush them.
    Flush,
    /// The channel is still down: flush and bypass L1.
    Bypass,
}

impl Grace {
    pub(crate) fn new(ms: u64) -> Grace {
        Grace {
            ms,
            state: Mutex::default(),
        }
    }

    /// The channel is lost; `trusted`: whether L1 is in use.
    pub(crate) fn lost(&self, trusted: bool) -> OnLoss {
        let mut state = self.lock();
        state.up = false;
        if state.unverified.is_some() {
            return OnLoss::Serving;
        }
        if self.ms == 0 || !trusted {
            return OnLoss::Bypass;
        }
        state.losses += 1;
        state.unverified = Some(state.losses);
        OnLoss::Serve(state.losses)
    }

    /// The channel is up: the generation whose rows need verifying, if any.
    pub(crate) fn up(&self) -> Option<u64> {
        let mut state = self.lock();
        state.up = true;
        state.unverified
    }

    /// The grace of `generation` ran out.
    pub(crate) fn over(&self, generation: u64) -> Over {
        let mut state = self.lock();
        if state.unverified != Some(generation) {
            return Over::Nothing;
        }
        state.unverified = None;
        if state.up { Over::Flush } else { Over::Bypass }
    }

    /// The rows of `generation` were verified; whether they still needed
    /// it (the grace did not run out meanwhile).
    pub(crate) fn verified(&self, generation: u64) -> bool {
        let mut state = self.lock();
        let current = state.unverified == Some(generation) && state.up;
        if current {
            state.unverified = None;
        }
        current
    }

    /// Whether L1 serves unverified rows now.
    pub(crate) fn is_unverified(&self) -> bool {
        self.lock().unverified.is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the state whole: a panic elsewhere cannot
        // have left it half-written.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_grace_a_loss_bypasses() {
        let grace = Grace::new(0);
        assert_eq!(grace.lost(true), OnLoss::Bypass);
        assert_eq!(grace.up(), None);
    }

    #[test]
    fn a_loss_serves_until_verified_or_over() {
        let grace = Grace::new(1_000);
        assert_eq!(grace.lost(false), OnLoss::Bypass, "nothing to keep");
        assert_eq!(grace.up(), None);
        assert_eq!(grace.lost(true), OnLoss::Serve(1));
        assert_eq!(grace.lost(true), OnLoss::Serving, "a failed reconnection");
        assert!(grace.is_unverified());
        assert_eq!(grace.up(), Some(1));
        assert!(grace.verified(1));
        assert_eq!(grace.over(1), Over::Nothing, "verified in time");
        assert!(!grace.is_unverified());

        assert_eq!(grace.lost(true), OnLoss::Serve(2));
        assert_eq!(grace.over(2), Over::Bypass, "still down");
        assert_eq!(grace.up(), None, "flushed: nothing to verify");

        assert_eq!(grace.lost(true), OnLoss::Serve(3));
        assert_eq!(grace.up(), Some(3));
        assert_eq!(grace.over(3), Over::Flush, "back, not verified in time");
        assert!(!grace.verified(3));
    }
}
