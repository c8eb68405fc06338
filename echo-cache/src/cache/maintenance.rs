//! The maintenance thread: it ticks the clock, sweeps the tables and frees
//! what L1's writers removed, and stops once the cache is dropped.

use std::panic::AssertUnwindSafe;
use std::sync::Weak;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::Inner;
use super::directory::DECLARATIONS;
use crate::clock::MAX_TICK;
use crate::entity::spec::TableSpec;
use crate::error::Error;
use crate::l1;

/// Ticks the clock, sweeps each table every `sweep_ms`, frees what L1's
/// writers removed and, with the `metrics` feature, publishes the tables'
/// counters every [`PUBLISH_EVERY`](crate::report::metrics::PUBLISH_EVERY), until
/// the cache is dropped.
///
/// The thread sleeps until its next duty: the clock's tick is 1% of the
/// shortest TTL of the tables open (absence TTLs included; the limits in
/// force, see [`Builder::limits`](crate::Builder::limits)), between 1 ms and
/// [`MAX_TICK`], so an idle cache of 10-minute rows wakes ten times a second,
/// not a thousand; finer while rows with deadlines of their own ask for it
/// (see [`Clock::follow`]), which wakes it. A manual clock needs no tick at
/// all. User code reached from here (a value's `Drop`) cannot stop the
/// thread: a panic is caught, reported, and the next duty runs.
pub(super) fn spawn_maintenance(
    cache: Weak<Inner>,
    woken: mpsc::Receiver<()>,
) -> Result<(), Error> {
    let Some(inner) = cache.upgrade() else {
        return Ok(());
    };
    let (clock, wake) = (inner.clock.clone(), inner.wake.clone());
    // A manual clock is not ticked: the thread still wakes to free garbage.
    let manual = clock.is_manual();
    if !manual {
        // By the limits in force of the tables open (see `Builder::limits`).
        let specs = super::open_tables(&inner.tables).map(|table| table.spec());
        clock.ticked_by(tick_of(specs), wake);
    }
    drop(inner);
    let start = Instant::now();
    let mut next_sweeps: Vec<Instant> = DECLARATIONS
        .iter()
        .map(|decl| start + Duration::from_millis(decl.spec.sweep_ms))
        .collect();
    #[cfg(feature = "metrics")]
    let mut next_publish = start;
    let run = move || {
        let mut ticked = start;
        loop {
            let tick = if manual { MAX_TICK } else { clock.tick_every() };
            let next_sweep = next_sweeps.iter().min().copied();
            let wake = next_sweep.map_or(ticked + tick, |sweep| sweep.min(ticked + tick));
            let sleep = wake.saturating_duration_since(Instant::now());
            // Woken early: a finer tick is asked for, or the cache is gone.
            if let Err(RecvTimeoutError::Disconnected) = woken.recv_timeout(sleep) {
                return;
            }
            let Some(cache) = cache.upgrade() else { return };
            let now = Instant::now();
            if now >= ticked + clock.tick_every() {
                clock.tick();
                ticked = now;
            }
            let tables = cache.tables.iter().zip(DECLARATIONS.iter());
            for ((place, decl), next) in tables.zip(&mut next_sweeps) {
                let Some(table) = &place.erased else { continue };
                let duty = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    if now >= *next {
                        table.sweep();
                    } else {
                        table.collect();
                    }
                }));
                if now >= *next {
                    *next = now + Duration::from_millis(decl.spec.sweep_ms);
                }
                if duty.is_err() {
                    tracing::error!(
                        table = decl.spec.name,
                        "the maintenance of a table panicked; it goes on"
                    );
                }
            }
            // The thread wakes at least every `MAX_TICK`: publishing is at
            // most that late.
            #[cfg(feature = "metrics")]
            if now >= next_publish {
                next_publish = now + crate::report::metrics::PUBLISH_EVERY;
                // A recorder is user code: its panic must not stop the thread.
                let published =
                    std::panic::catch_unwind(AssertUnwindSafe(|| cache.publish_metrics()));
                if published.is_err() {
                    tracing::error!("publishing the metrics panicked; it goes on");
                }
            }
        }
    };
    std::thread::Builder::new()
        .name("echo-cache-maintenance".into())
        .spawn(run)
        .map(drop)
        .map_err(|e| Error::Config(format!("cannot start the maintenance thread: {e}")))
}

/// The clock's tick: 1% of the shortest lifetime a row may be drawn, within
/// 1 ms..=[`MAX_TICK`].
pub(super) fn tick_of(specs: impl Iterator<Item = &'static TableSpec>) -> Duration {
    let shortest = specs
        .flat_map(|spec| {
            [spec.ttl_ms, spec.absent_ttl_ms].map(|ttl| l1::shortest_lifetime(ttl, spec.jitter))
        })
        .filter(|&ms| ms > 0)
        .min();
    shortest.map_or(MAX_TICK, |ms| {
        Duration::from_millis(ms / 100).clamp(Duration::from_millis(1), MAX_TICK)
    })
}
