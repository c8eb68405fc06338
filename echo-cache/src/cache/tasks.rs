//! The background tasks of a cache with L2: the claim of its node number,
//! the delivery of the writes kept while the server was away, the warm
//! start of its `warm` tables, and the coherence lanes that carry other
//! nodes' invalidations to its tables.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{Notify, watch};

use super::claim;
use crate::coherence::{Target, durable, link};
use crate::connections::Server;
use crate::entity::spec::{Coherence, Warm};
use crate::error::Error;
use crate::report::roster::Readiness;
use crate::table::AnyTable;

/// The tasks of a cache with L2: the claim of its node number, the
/// delivery of the writes its tables kept while the server was away, and
/// the coherence lanes that carry other nodes' invalidations to its tables.
pub(super) struct Tasks {
    pub(super) tables: Vec<Arc<dyn AnyTable>>,
    pub(super) server: Arc<Server>,
    pub(super) link: link::Settings,
    /// The node's name, for the consumer groups of durable tables.
    pub(super) node_name: String,
    /// How often `warm` tables merge their hottest ids into L2.
    pub(super) hot_publish_every: Duration,
    pub(super) readiness: Arc<Readiness>,
    pub(super) backlog_kick: Arc<Notify>,
    pub(super) stop: watch::Receiver<()>,
}

impl Tasks {
    /// Starts the tasks its tables need, on `runtime`. Without one, a cache
    /// with coherent tables cannot work ([`Error::NoRuntime`]); one without
    /// keeps its random node number and drops what the server did not take.
    pub(super) fn start(self, runtime: Option<&Handle>) -> Result<(), Error> {
        if let Some(runtime) = runtime {
            let (server, stop) = (&self.server, self.stop.clone());
            let readiness = Arc::clone(&self.readiness);
            runtime.spawn(claim::keep(Arc::clone(server), readiness, stop));
            runtime.spawn(deliver(
                self.tables.clone(),
                Arc::clone(server),
                Arc::clone(&self.backlog_kick),
                self.stop.clone(),
            ));
            for table in self.tables.iter().filter(|t| t.spec().warm() != Warm::Off) {
                if table.spec().warm() == Warm::Ready {
                    self.readiness.warming();
                }
                runtime.spawn(super::warm::keep(
                    Arc::clone(table),
                    Arc::clone(&self.readiness),
                    self.hot_publish_every,
                    self.stop.clone(),
                ));
            }
        }
        let of = |modes: &[Coherence]| -> Vec<Arc<dyn Target>> {
            let tables = self.tables.iter();
            tables
                .filter(|t| modes.contains(&t.spec().coherence()))
                .map(|t| Arc::clone(t) as Arc<dyn Target>)
                .collect()
        };
        let linked = of(&[Coherence::Tracking, Coherence::Broadcast]);
        let durable = of(&[Coherence::Durable]);
        if linked.is_empty() && durable.is_empty() {
            return Ok(());
        }
        let runtime = runtime.ok_or(Error::NoRuntime)?;
        if !durable.is_empty() {
            let settings = durable::Settings {
                deadline: self.link.deadline,
                block: self.link.ping_every,
                ..durable::Settings::default()
            };
            // A cluster serves each table's stream on the node of its slot: a
            // lane per table there, one for all on a server.
            let lanes = if self.server.is_cluster() {
                durable.into_iter().map(|table| vec![table]).collect()
            } else {
                vec![durable]
            };
            for tables in lanes {
                runtime.spawn(durable::run(
                    Arc::clone(&self.server),
                    tables,
                    self.node_name.clone(),
                    settings.clone(),
                    self.stop.clone(),
                ));
            }
        }
        if !linked.is_empty() {
            runtime.spawn(link::run(
                Arc::clone(&self.server),
                linked,
                self.link,
                self.stop,
            ));
        }
        Ok(())
    }
}

/// How soon a delivery that failed (the server is still away) is tried
/// again.
const REDELIVER_EVERY: Duration = Duration::from_millis(100);

/// Delivers the backlogs of `tables` (the writes they kept while the server
/// was away): woken when a table keeps a write, it tries every
/// [`REDELIVER_EVERY`] until every backlog is empty, probing the server
/// itself while the breaker is open, so a backlog is delivered within that
/// interval of the server's return.
async fn deliver(
    tables: Vec<Arc<dyn AnyTable>>,
    server: Arc<Server>,
    kick: Arc<Notify>,
    mut stop: watch::Receiver<()>,
) {
    loop {
        tokio::select! {
            () = kick.notified() => {}
            _ = stop.changed() => return,
        }
        while tables.iter().any(|table| table.undelivered()) {
            let mut delivered = !server.is_down() || server.probe().await;
            for table in &tables {
                if delivered {
                    delivered = table.redeliver().await;
                }
            }
            if delivered {
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(REDELIVER_EVERY) => {}
                _ = stop.changed() => return,
            }
        }
    }
}
