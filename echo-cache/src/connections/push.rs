//! The coherence link's connections, one per node, published for the
//! `tracking` tables' commands while a session is up ([`LinkConnections`]).

use std::sync::Mutex;

use redis::aio::MultiplexedConnection;

/// The coherence link's connections while a session is up, one per node
/// with the slots it serves, for the `tracking` tables' commands (empty
/// between sessions); and the nodes that answered for a slot without the
/// link having a connection to them.
#[derive(Default)]
pub(crate) struct LinkConnections {
    nodes: Mutex<Vec<NodeConnection>>,
    /// By name: a migration's target that serves no slot yet (`CLUSTER
    /// SLOTS` does not list it), or a new owner the link has not read.
    strangers: Mutex<Vec<String>>,
    met: tokio::sync::Notify,
}

/// The link's connection to a node, with the slot ranges the node serves.
#[derive(Clone)]
pub(crate) struct NodeConnection {
    /// The node's `host:port`, as `CLUSTER SLOTS` names it (and redirects).
    pub(crate) name: String,
    pub(crate) slots: Vec<(u16, u16)>,
    pub(crate) connection: MultiplexedConnection,
}

impl LinkConnections {
    /// The connection to the node that serves `slot`.
    pub(crate) fn get(&self, slot: u16) -> Option<MultiplexedConnection> {
        let nodes = lock(&self.nodes);
        nodes
            .iter()
            .find(|node| {
                node.slots
                    .iter()
                    .any(|&(from, to)| (from..=to).contains(&slot))
            })
            .map(|node| node.connection.clone())
    }

    /// The connection to the node named `name` (`host:port`).
    pub(super) fn node(&self, name: &str) -> Option<MultiplexedConnection> {
        let nodes = lock(&self.nodes);
        nodes
            .iter()
            .find(|node| node.name == name)
            .map(|node| node.connection.clone())
    }

    pub(crate) fn set(&self, nodes: Vec<NodeConnection>) {
        *lock(&self.nodes) = nodes;
    }

    /// A node the link has no connection to answered for a slot: what is
    /// read from it is not tracked, so the link must start afresh with it.
    pub(super) fn meet(&self, name: &str) {
        let mut strangers = lock(&self.strangers);
        if !strangers.iter().any(|known| known == name) {
            strangers.push(name.to_owned());
        }
        drop(strangers);
        self.met.notify_one();
    }

    /// Resolves when a stranger was met (or had been, since the last call).
    pub(crate) async fn met(&self) {
        self.met.notified().await;
    }

    /// The strangers met, by name.
    pub(crate) fn strangers(&self) -> Vec<String> {
        lock(&self.strangers).clone()
    }

    /// `name` is a stranger no more: it is a master the link reads, or it
    /// did not answer (met again, it is tried again).
    pub(crate) fn forget(&self, name: &str) {
        lock(&self.strangers).retain(|known| known != name);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
