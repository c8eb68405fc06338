//! Helpers shared by the integration tests: a gate a loader waits on, a
//! counter of loader calls, bounded waits for a condition or a future, a
//! table's health, a raw command on the test's own connection, and the checks of the
//! `conflict_*` binaries ([`conflict`]).
//!
//! Nothing here sleeps to let time pass: every wait polls a condition and
//! gives up (failing the test) after [`BOUND`].
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use echo_cache::{Cache, Cached, Health};
use tokio::sync::watch;

pub mod conflict;

/// The longest any test waits for a condition before it fails.
pub const BOUND: Duration = Duration::from_secs(20);

/// Waits until `probe` holds, polling it every millisecond; panics naming
/// `what` if it does not hold within [`BOUND`]. See [`eventually_within`].
pub async fn eventually(what: &str, probe: impl AsyncFnMut() -> bool) {
    eventually_within(BOUND, Duration::from_millis(1), what, probe).await;
}

/// Waits until `probe` holds, polling it every `poll`; panics naming `what`
/// if it does not hold within `bound` (a probe that hangs counts against
/// the bound too). For a test whose probe is costly (a fresh connection, a
/// fetch that may wait on L2) and so polls less often, or that waits less
/// than [`BOUND`].
///
/// The probe may await (`async || cache.fetch(id).await…`) or not
/// (`async || calls.get() == 1`).
pub async fn eventually_within(
    bound: Duration,
    poll: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> bool,
) {
    let polled = tokio::time::timeout(bound, async {
        while !probe().await {
            tokio::time::sleep(poll).await;
        }
    })
    .await;
    assert!(
        polled.is_ok(),
        "timed out after {bound:?} waiting for {what}"
    );
}

/// Awaits `future`, failing the test if it takes longer than [`BOUND`].
pub async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(BOUND, future).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {BOUND:?} waiting for {what}"),
    }
}

/// The health of `T`'s table in `cache`.
pub fn health<T: Cached>(cache: &Cache) -> Health {
    let name = T::spec().name();
    let table = cache.tables().into_iter().find(|t| t.spec.name() == name);
    table.expect("the table is declared").health
}

/// Runs one command on `connection` (the test's own, not a cache's) and
/// converts the reply; panics if the server does not answer.
pub async fn query<T: redis::FromRedisValue>(
    connection: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> T {
    cmd.query_async(connection)
        .await
        .expect("the server answers")
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
