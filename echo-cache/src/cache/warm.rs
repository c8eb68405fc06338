//! The warm start of each table declared `warm`, and its share of the
//! fleet's hot list: one task per table, on the cache's runtime (see
//! [Warm start](crate#warm-start) and the table's `warm`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Cache;
use crate::entity::spec::{Cached, Warm};
use crate::report::roster::Readiness;
use crate::table::AnyTable;

impl Cache {
    /// Merges this node's hottest ids of `T` into the fleet's hot list in
    /// L2 now, as the cache does by itself every
    /// [`hot_publish_every`](crate::Builder::hot_publish_every); how many
    /// ids it merged. 0 if `T` is not declared `warm`, the cache has no
    /// L2, L1 holds nothing of `T`, or L2 did not take it (counted in
    /// [`Stats::l2_errors`](crate::Stats::l2_errors)). See
    /// [Warm start](crate#warm-start).
    ///
    /// For a node about to stop (a deploy drains it): its latest heat is
    /// in the list the nodes that replace it warm from.
    ///
    /// ```no_run
    /// use echo_cache::{near_cache, Cache, Id};
    ///
    /// #[near_cache(kind = "GAM", ttl_ms = 600_000, warm = "ready")]
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// pub struct Game { pub name: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), echo_cache::Error> {
    /// let cache = Cache::builder()
    ///     .l2("redis://127.0.0.1:6379")
    ///     .loader(|_: Id<Game>| async { Ok::<_, std::io::Error>(Some(Game { name: "go".into() })) })
    ///     .build()?;
    /// cache.ready().await; // the hot games of the fleet are in L1
    /// // … serve; then, draining:
    /// let merged = cache.publish_hot::<Game>().await;
    /// println!("{merged} hot games listed for the next node");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn publish_hot<T: Cached>(&self) -> usize {
        self.table::<T>().publish_hot().await
    }
}

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
            _ = table.publish_hot() => {}
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
