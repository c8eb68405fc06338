//! Which connection an L2 command runs on ([`Lane`]): the shared command
//! connection, or a tracking table's own on the coherence link, which
//! follows the cluster's redirects itself (`ASK`, `MOVED`).

use std::sync::Arc;

use redis::RedisFuture;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, RedisError, Value};

use super::LinkConnections;

/// Which connection an operation takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The shared command connection.
    Managed,
    /// The coherence link's connection to the node that serves this slot,
    /// while the link is up (else the shared one): a tracking table's
    /// writes must not come back to its own node.
    Linked(u16),
}

/// The connection an operation runs on.
pub(crate) enum Connection {
    Managed(ConnectionManager),
    Cluster(ClusterConnection),
    /// The link's connection to a node (see [`Linked`]).
    Linked(Box<Linked>),
}

/// A tracking table's operation on the link's connection to the node that
/// serves its slot, following the node's redirects itself: a plain
/// connection answers them as a value (`Value::ServerError`), which
/// becomes an error only once `Cmd::query_async` reads it, past any
/// fallback that waits for one.
///
/// `ASK` (the slot is migrating, and the key is on the target, or new) is
/// a one-command redirect: `ASKING` and the command, in one write, on the
/// link's connection to the target. `MOVED` (the slot moved since the link
/// last read the topology): the command on the link's connection to the
/// new owner. Either way the node's tracking there (BCAST, on every master
/// of the link) covers what is read, and `NOLOOP` keeps what is written
/// from coming back. The rest of the operation (a script's `SCRIPT LOAD`
/// and retry) follows the first redirect. A second redirect, and the
/// operation goes on the command path, which follows the cluster; so does
/// one to a node the link has no connection to (a migration's target that
/// serves no slot yet), which the link is told of: nothing read from that
/// node is tracked, so the link starts afresh (flush, bypass) with a
/// connection to it too.
pub(crate) struct Linked {
    /// The node the operation's commands go to now.
    pub(super) node: MultiplexedConnection,
    /// Whether `node` imports the slot: each command goes after `ASKING`.
    pub(super) asking: bool,
    /// Whether a redirect was followed already.
    pub(super) redirected: bool,
    pub(super) link: Arc<LinkConnections>,
    /// Whether the operation runs on the command path now.
    pub(super) followed_by_cluster: bool,
    /// The command path.
    pub(super) commands: Connection,
}

impl Linked {
    async fn send(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        if !self.followed_by_cluster {
            let reply = self.on_node(cmd).await;
            let Some(redirect) = Redirect::of(&reply) else {
                return reply;
            };
            if !self.redirected {
                self.redirected = true;
                match self.link.node(&redirect.node) {
                    Some(to) => {
                        (self.node, self.asking) = (to, redirect.ask);
                        let reply = self.on_node(cmd).await;
                        if Redirect::of(&reply).is_none() {
                            return reply;
                        }
                    }
                    None => self.link.meet(&redirect.node),
                }
            }
            self.followed_by_cluster = true;
        }
        self.commands.req_packed_command(cmd).await
    }

    /// `cmd` on `node`, after `ASKING` if it imports the slot.
    async fn on_node(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        if !self.asking {
            return self.node.req_packed_command(cmd).await;
        }
        let mut asked = redis::pipe();
        asked.cmd("ASKING").add_command(cmd.clone());
        let mut replies = self.node.req_packed_commands(&asked, 1, 1).await?;
        replies
            .pop()
            .ok_or_else(|| RedisError::from((redis::ErrorKind::Client, "no reply after ASKING")))
    }
}

/// Where a node sent a command: another node, for this command (`ASK`) or
/// for the slot (`MOVED`).
struct Redirect {
    ask: bool,
    /// `host:port`, as `CLUSTER SLOTS` names it.
    node: String,
}

impl Redirect {
    fn of(reply: &redis::RedisResult<Value>) -> Option<Redirect> {
        let of = |error: &RedisError| {
            let (node, _slot) = error.redirect_node()?;
            Some(Redirect {
                ask: error.code() == Some("ASK"),
                node: node.to_owned(),
            })
        };
        match reply {
            Ok(Value::ServerError(error)) => of(&RedisError::from(error.clone())),
            Err(error) => of(error),
            Ok(_) => None,
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, redis::Value> {
        match self {
            Connection::Managed(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
            Connection::Linked(linked) => Box::pin(linked.send(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Connection::Managed(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            // No tracking table's operation is a pipeline.
            Connection::Linked(linked) => linked.node.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Managed(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
            Connection::Linked(linked) => linked.node.get_db(),
        }
    }
}
