//! [`RedisClusterBuilder`]: the settings of a [`RedisCluster`] (node
//! timeout, converge timeout, spare masters, extra flags) and its start:
//! the nodes in parallel, then their ids, then the forming. Apart from the
//! fixture because it is the one place that makes a `RedisCluster`.

use std::ffi::OsString;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use super::nodes::Layout;
use super::{CONFIG_FILE, ClusterNode, RedisCluster, Turn, run};
use crate::{Error, RedisServer};

/// Configures a [`RedisCluster`] before starting it; see
/// [`RedisCluster::builder`].
#[derive(Debug, Clone)]
pub struct RedisClusterBuilder {
    pub(super) masters: usize,
    pub(super) replicas_per_master: usize,
    pub(super) spare_masters: usize,
    pub(super) node_timeout: Duration,
    pub(super) converge_timeout: Duration,
    pub(super) args: Vec<OsString>,
}

impl RedisClusterBuilder {
    /// The nodes' `cluster-node-timeout` (default [`DEFAULT_NODE_TIMEOUT`](crate::DEFAULT_NODE_TIMEOUT)):
    /// how long a node is unreachable before the cluster fails it over.
    /// Shorter makes failover tests quicker, and a starved node more likely
    /// to be failed over by mistake.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Starts `spares` more nodes that join as masters serving no slot (a
    /// scale-out's new masters, before any slot migrates to them), after
    /// the replicas in [`RedisCluster::nodes`].
    pub fn spare_masters(mut self, spares: usize) -> Self {
        self.spare_masters = spares;
        self
    }

    /// How long each wait lets the nodes take to agree (default
    /// [`DEFAULT_CONVERGE_TIMEOUT`](crate::DEFAULT_CONVERGE_TIMEOUT)).
    pub fn converge_timeout(mut self, timeout: Duration) -> Self {
        self.converge_timeout = timeout;
        self
    }

    /// Appends one flag of every node, after the cluster's own (so it
    /// overrides them), e.g. `.args(["--cluster-require-full-coverage",
    /// "no"])` for a test where the other masters keep serving while one is
    /// down. The flags of [`RedisServerBuilder::arg`](crate::RedisServerBuilder::arg)
    /// are refused the same way.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several flags of every node; see [`arg`](Self::arg).
    pub fn args<I, S>(self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        args.into_iter().fold(self, |b, a| b.arg(a))
    }

    /// Starts the cluster; panics with the reason if it can't.
    #[track_caller]
    pub fn start(self) -> RedisCluster {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `masters * (1 + replicas_per_master)` nodes and the spare
    /// masters, gives the masters equal shares of the slots, joins the
    /// nodes, attaches the replicas and waits until the cluster agrees (see [`RedisCluster::wait_ok`]).
    pub fn try_start(self) -> Result<RedisCluster, Error> {
        let turn = Turn::take();
        let masters = self.masters;
        let replicas = masters * self.replicas_per_master;
        let count = masters + replicas + self.spare_masters;
        let node_timeout_ms = self.node_timeout.as_millis().max(1).to_string();
        let server = RedisServer::builder()
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", CONFIG_FILE])
            .args(["--cluster-node-timeout", &node_timeout_ms])
            // Replicas stay with the master they were given, and a master
            // that migrates its last slot away stays a master.
            .args(["--cluster-allow-replica-migration", "no"])
            // A replica takes over however long its master link was down.
            .args(["--cluster-replica-validity-factor", "0"])
            // Replicas sync at once, not after the default 5 s.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(self.args);
        // In parallel: a master reports cluster_state:ok no sooner than 2 s
        // after its own start (Redis's CLUSTER_WRITABLE_DELAY).
        let servers = thread::scope(|scope| {
            let starts: Vec<_> = (0..count)
                .map(|_| {
                    let server = server.clone();
                    scope.spawn(move || server.try_start())
                })
                .collect();
            starts
                .into_iter()
                .map(|start| {
                    start
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p))
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        let nodes = servers
            .into_iter()
            .map(|server| {
                let id = run(&server, redis::cmd("CLUSTER").arg("MYID"))?;
                Ok(ClusterNode { server, id })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let cluster = RedisCluster {
            nodes,
            node_timeout: self.node_timeout,
            converge_timeout: self.converge_timeout,
            agreed: Mutex::new(Layout::default()),
            _turn: turn,
        };
        cluster.form(masters, replicas)?;
        Ok(cluster)
    }
}
