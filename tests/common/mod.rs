//! Helpers shared by the integration tests: a gate a loader waits on, a
//! counter of loader calls, bounded waits for a condition or a future, and
//! the checks of the `conflict_*` binaries ([`conflict`]).
//!
//! Nothing here sleeps to let time pass: every wait polls a condition and
//! gives up (failing the test) after [`BOUND`].
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

pub mod conflict;

/// The longest any test waits for a condition before it fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// Waits until `probe` holds, polling it every millisecond; panics naming
/// `what` if it does not hold within [`BOUND`] (a probe that hangs counts
/// against the bound too).
///
/// The probe may await (`async || cache.fetch(id).await…`) or not
/// (`async || calls.get() == 1`).
pub async fn eventually(what: &str, mut probe: impl AsyncFnMut() -> bool) {
    let polled = tokio::time::timeout(BOUND, async {
        while !probe().await {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert!(
        polled.is_ok(),
        "timed out after {BOUND:?} waiting for {what}"
    );
}

/// Awaits `future`, failing the test if it takes longer than [`BOUND`].
pub async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(BOUND, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {BOUND:?} waiting for {what}"),
    }
}

/// A gate loaders wait on until the test opens it.
#[derive(Clone)]
pub struct Gate {
    open: Arc<watch::Sender<bool>>,
}

impl Gate {
    /// A closed gate.
    pub fn closed() -> Gate {
        Gate {
            open: Arc::new(watch::channel(false).0),
        }
    }

    /// Lets every waiter (present and future) through.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Waits until the gate is open.
    pub async fn pass(&self) {
        let mut open = self.open.subscribe();
        open.wait_for(|&open| open)
            .await
            .expect("the gate's sender lives as long as the gate");
    }
}

/// Counts loader calls.
#[derive(Clone, Default)]
pub struct Calls(Arc<AtomicUsize>);

impl Calls {
    /// Counts one call; returns how many came before it.
    pub fn count(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst)
    }

    /// Calls so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
