//! The warm start of each table declared `warm`, and its share of the
//! fleet's hot list: one task per table, on the cache's runtime (see
//! [Warm start](crate#warm-start) and the table's `warm`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::entity::spec::Warm;
use crate::report::roster::Readiness;
use crate::table::AnyTable;

/// Warms `table` once its L1 is trusted (a coherent table's channel is
/// up: rows installed before would be refused), tells `readiness` if the
/// table warms before `ready()`, then merges the node's hottest ids into
/// the fleet's list every `every`, until `stop`.
pub(super) async fn keep(
    table: Arc<dyn AnyTable>,
    readiness: Arc<Readiness>,
    every: Duration,
    mut stop: watch::Receiver<()>,
) {
    let before_ready = table.spec().warm() == Warm::Ready;
    // Tells `readiness` once, whatever ends this task (a stop, or the
    // runtime dropping it).
    let mut told = before_ready.then(|| Told(&readiness));
    tokio::select! {
        () = readiness.until(|| table.trusted()) => {}
        _ = stop.changed() => return,
    }
    tokio::select! {
        _ = table.warm() => {}
        _ = stop.changed() => return,
    }
    drop(told.take());
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        tokio::select! {
            () = table.publish_hot() => {}
            _ = stop.changed() => return,
        }
    }
}

/// Tells its readiness that a table to warm before `ready()` is done
/// warming, when dropped.
struct Told<'r>(&'r Readiness);

impl Drop for Told<'_> {
    fn drop(&mut self) {
        self.0.warmed();
    }
}
