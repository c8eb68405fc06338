//! Connections to the L2 server: the layer below L2 and coherence, which
//! both use and neither owns.
//!
//! One [`Server`] per cache: the client of the server's URL, the shared
//! command connection (the `redis` crate's `ConnectionManager`, which
//! reconnects by itself), a bound on every operation
//! ([`Builder::l2_timeout`](crate::Builder::l2_timeout)), a
//! [circuit breaker](breaker), and the slot where the coherence link
//! publishes its connection (a `tracking` table's commands run on it, so
//! that `NOLOOP` keeps the node's own writes from coming back to it). The
//! coherence lanes open their own push connections from its client, and
//! report to it when the server answers them.

mod blocking;
mod breaker;
mod client;
mod lane;
mod push;
pub(crate) mod topology;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionInfo, FromRedisValue, PushInfo, RedisError, Script, Value};
use tokio::sync::OnceCell;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::Error;
use breaker::Breaker;
use client::{client, cluster_client, redacted};
pub(crate) use lane::{Connection, Lane, Linked};
pub(crate) use push::{LinkConnections, NodeConnection};
pub(crate) use topology::{Master, Topology};

/// Why an L2 operation did not happen.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The breaker is open: the server is not answering.
    Refused,
    /// No answer within the L2 timeout.
    Timeout,
    /// The server or the connection said no.
    Redis(RedisError),
    /// The cluster's topology could not be read.
    Topology(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused => {
                f.write_str("not tried: the server is not answering (breaker open)")
            }
            Failure::Timeout => f.write_str("no answer within the L2 timeout"),
            Failure::Redis(error) => write!(f, "{error}"),
            Failure::Topology(why) => write!(f, "the cluster's topology: {why}"),
        }
    }
}

/// Where L2 is: one server, or a cluster reached through seed nodes.
#[derive(Clone, Debug)]
pub(crate) enum Address {
    Server(String),
    Cluster(Vec<String>),
}

/// The command path: one connection that every operation shares.
#[allow(clippy::large_enum_variant)] // one per cache
enum Commands {
    /// One server: a connection that reconnects by itself.
    Server {
        client: redis::Client,
        connection: OnceCell<ConnectionManager>,
    },
    /// A cluster: the `redis` crate's cluster connection, which routes each
    /// command to the owner of its slot, follows `MOVED` and `ASK`, and
    /// re-reads the topology when it changes.
    Cluster {
        client: ClusterClient,
        connection: OnceCell<ClusterConnection>,
        /// How the cluster was given, for the lanes' clients of their own.
        seeds: Vec<String>,
        tls_root: Option<Vec<u8>>,
    },
}

/// The L2 server (or cluster) of a cache.
pub(crate) struct Server {
    commands: Commands,
    /// The connection settings of the server, or of the cluster's first
    /// seed: the lanes reach each node with them, at the node's address.
    seed: ConnectionInfo,
    /// The coherence link's connection, for the tracking tables.
    link: Arc<LinkConnections>,
    timeout: Duration,
    breaker: Breaker,
    /// The idle connections of blocking commands.
    idle: blocking::Idle,
}

impl Server {
    /// Checks the URL (and the TLS roots, PEM, if given); connects on first
    /// use, inside a runtime. Credentials are checked by the server then,
    /// not here.
    pub(crate) fn open(
        address: &Address,
        tls_root: Option<&[u8]>,
        timeout: Duration,
        probe_every: Duration,
    ) -> Result<Server, Error> {
        let urls = match address {
            Address::Server(url) => std::slice::from_ref(url),
            Address::Cluster(seeds) if seeds.is_empty() => {
                return Err(Error::Config("an L2 cluster needs a seed node".to_owned()));
            }
            Address::Cluster(seeds) => seeds.as_slice(),
        };
        let nodes = urls
            .iter()
            .map(|url| {
                client(url, tls_root)
                    .map_err(|e| Error::Config(format!("L2 address {}: {e}", redacted(url))))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let commands = match address {
            Address::Server(_) => Commands::Server {
                client: nodes[0].clone(),
                connection: OnceCell::new(),
            },
            Address::Cluster(seeds) => Commands::Cluster {
                client: cluster_client(seeds, tls_root, timeout, None).map_err(|e| {
                    Error::Config(format!("L2 cluster {}: {e}", redacted(&seeds[0])))
                })?,
                connection: OnceCell::new(),
                seeds: seeds.clone(),
                tls_root: tls_root.map(<[u8]>::to_vec),
            },
        };
        Ok(Server {
            commands,
            seed: nodes[0].get_connection_info().clone(),
            link: Arc::default(),
            timeout,
            breaker: Breaker::new(probe_every),
            idle: blocking::Idle::default(),
        })
    }

    /// How long one command may take (`Builder::l2_timeout`).
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether L2 is a cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.commands, Commands::Cluster { .. })
    }

    /// The slot the coherence link publishes its connection in.
    pub(crate) fn link(&self) -> &Arc<LinkConnections> {
        &self.link
    }

    /// Whether the breaker is refusing operations now.
    pub(crate) fn is_down(&self) -> bool {
        self.breaker.is_open()
    }

    /// The server answered on another connection (the coherence lanes'):
    /// it is back, whatever the breaker thought.
    pub(crate) fn answered(&self) {
        self.succeeded();
    }

    /// Feeds the breaker a success, and says when it closes.
    fn succeeded(&self) {
        if self.breaker.success() {
            tracing::info!(server = %self.seed.addr(), "L2 answers again: breaker closed");
        }
    }

    /// Feeds the breaker a failure, and says when it opens.
    fn failed(&self) {
        if self.breaker.failure() {
            tracing::warn!(
                server = %self.seed.addr(),
                "L2 is not answering: breaker open, fetches go to the loader, \
                 one probe every {:?}",
                self.breaker.probe_every()
            );
        }
    }

    /// Sends a PING whatever the breaker says (feeding it the outcome):
    /// whether the server answered. For a task that must know as soon as
    /// the server is back; it is one attempt, bounded by the timeout.
    pub(crate) async fn probe(&self) -> bool {
        let ping = async {
            let mut connection = self.connection().await?;
            redis::cmd("PING")
                .query_async::<Value>(&mut connection)
                .await
        };
        let answered = matches!(tokio::time::timeout(self.timeout, ping).await, Ok(Ok(_)));
        if answered {
            self.succeeded();
        } else {
            self.failed();
        }
        answered
    }

    /// Runs `cmd`, within the timeout, unless the breaker refuses.
    pub(crate) async fn query<R: FromRedisValue>(
        &self,
        lane: Lane,
        cmd: Cmd,
    ) -> Result<R, Failure> {
        let mut settle = Settle::new();
        loop {
            let cmd = &cmd;
            let done = self
                .run(lane, async move |mut connection| {
                    cmd.query_async(&mut connection).await
                })
                .await;
            if !settle.again(&done).await {
                return done;
            }
        }
    }

    /// Runs `script` on `keys` and `args` (EVALSHA, loading the script again
    /// if the server's script cache was flushed), like [`query`](Self::query).
    pub(crate) async fn eval<R: FromRedisValue>(
        &self,
        lane: Lane,
        script: &Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<R, Failure> {
        let mut settle = Settle::new();
        loop {
            let done = self
                .run(lane, async move |mut connection| {
                    let mut invocation = script.prepare_invoke();
                    for key in keys {
                        invocation.key(*key);
                    }
                    for arg in args {
                        invocation.arg(*arg);
                    }
                    invocation.invoke_async(&mut connection).await
                })
                .await;
            if !settle.again(&done).await {
                return done;
            }
        }
    }

    /// On a cluster, a connection of its own, in RESP3, that sends its
    /// pushes (and its nodes' disconnections) to `pushes`: for the sharded
    /// subscriptions of the coherence link, which it routes to the owner of
    /// each channel's slot. `None` on one server.
    pub(crate) async fn subscriber(
        &self,
        pushes: UnboundedSender<PushInfo>,
    ) -> Option<Result<ClusterConnection, String>> {
        let Commands::Cluster {
            seeds, tls_root, ..
        } = &self.commands
        else {
            return None;
        };
        let connect = async {
            let client = cluster_client(seeds, tls_root.as_deref(), self.timeout, Some(pushes))
                .map_err(|e| e.to_string())?;
            client
                .get_async_connection()
                .await
                .map_err(|e| e.to_string())
        };
        Some(match tokio::time::timeout(self.timeout, connect).await {
            Ok(connected) => connected,
            Err(_) => Err(format!("no cluster connection within {:?}", self.timeout)),
        })
    }

    /// Who serves which slots now: the masters of the cluster (asked of a
    /// node, within the timeout), or the one server.
    pub(crate) async fn topology(&self) -> Result<Topology, String> {
        let seed = &self.seed;
        let Commands::Cluster { .. } = &self.commands else {
            return Ok(Topology::single(seed.clone()));
        };
        let asked = async {
            let Connection::Cluster(mut cluster) = self.connection().await? else {
                unreachable!("a cluster's command connection is a cluster connection");
            };
            let slots = redis::cmd("CLUSTER").arg("SLOTS").clone();
            let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
            cluster.route_command(slots, random).await
        };
        match tokio::time::timeout(self.timeout, asked).await {
            Ok(Ok(slots)) => Topology::of_cluster(&slots, seed),
            Ok(Err(error)) => Err(format!("CLUSTER SLOTS: {error}")),
            Err(_) => Err(format!(
                "CLUSTER SLOTS: no answer within {:?}",
                self.timeout
            )),
        }
    }

    /// The nodes a tracking table's command was sent to that `topology`
    /// does not name (see [`LinkConnections`]), each reached with the seed's
    /// settings; those it names are strangers no more.
    pub(crate) fn strangers(&self, topology: &Topology) -> Vec<Master> {
        let mut strangers = Vec::new();
        for name in self.link.strangers() {
            let master = (!topology.masters.iter().any(|m| m.name == name))
                .then(|| Master::named(&name, &self.seed))
                .flatten();
            match master {
                Some(master) => strangers.push(master),
                None => self.link.forget(&name),
            }
        }
        strangers
    }

    /// The master that serves `slot` now (the server, if not a cluster).
    pub(crate) async fn owner(&self, slot: u16) -> Result<Master, String> {
        self.topology()
            .await?
            .owner(slot)
            .cloned()
            .ok_or_else(|| format!("no node serves slot {slot}"))
    }

    /// `SCAN cursor MATCH pattern COUNT count` on the node that owns `slot`
    /// (on a cluster; the server itself otherwise): the next cursor and the
    /// keys of this step.
    pub(crate) async fn scan(
        &self,
        lane: Lane,
        slot: u16,
        cursor: u64,
        pattern: &str,
        count: usize,
    ) -> Result<(u64, Vec<Vec<u8>>), Failure> {
        self.run(lane, async move |mut connection| {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(count);
            match &mut connection {
                Connection::Cluster(cluster) => {
                    let owner = Route::new(slot, SlotAddr::Master);
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(owner));
                    redis::from_redis_value(cluster.route_command(scan, route).await?)
                        .map_err(RedisError::from)
                }
                _ => scan.query_async(&mut connection).await,
            }
        })
        .await
    }

    /// Runs `op` on the connection, within the timeout, unless the breaker
    /// refuses; feeds the breaker with the outcome.
    async fn run<R>(
        &self,
        lane: Lane,
        op: impl AsyncFnOnce(Connection) -> Result<R, RedisError>,
    ) -> Result<R, Failure> {
        if !self.breaker.allow() {
            return Err(Failure::Refused);
        }
        let attempt = async {
            let linked = match lane {
                Lane::Linked(slot) => self.link.get(slot),
                Lane::Managed => None,
            };
            let commands = self.connection().await?;
            match linked {
                Some(node) => {
                    op(Connection::Linked(Box::new(Linked {
                        node,
                        asking: false,
                        redirected: false,
                        link: Arc::clone(&self.link),
                        followed_by_cluster: false,
                        commands,
                    })))
                    .await
                }
                None => op(commands).await,
            }
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(reply)) => {
                self.succeeded();
                Ok(reply)
            }
            Ok(Err(error)) => {
                if is_outage(&error) {
                    self.failed();
                } else {
                    // The server answered, with an error of its own.
                    self.succeeded();
                }
                Err(Failure::Redis(error))
            }
            Err(_) => {
                self.failed();
                Err(Failure::Timeout)
            }
        }
    }

    /// The command connection, made on first use.
    async fn connection(&self) -> Result<Connection, RedisError> {
        match &self.commands {
            Commands::Server { client, connection } => {
                let connection = connection
                    .get_or_try_init(|| async {
                        let config = ConnectionManagerConfig::new()
                            .set_connection_timeout(Some(self.timeout))
                            .set_number_of_retries(2)
                            .set_min_delay(Duration::from_millis(10))
                            .set_max_delay(Duration::from_secs(1));
                        ConnectionManager::new_lazy_with_config(client.clone(), config)
                    })
                    .await?;
                Ok(Connection::Managed(connection.clone()))
            }
            Commands::Cluster {
                client, connection, ..
            } => {
                let connection = connection
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                Ok(Connection::Cluster(connection.clone()))
            }
        }
    }
}

/// How often a coherence link or a durable lane on a cluster reads the
/// topology: within this one starts afresh after a failover (a promoted
/// replica pushes nothing to a link not connected to it, and a lane's read
/// blocked on the old master is redirected only by the server's cron, up
/// to `1 / hz` = 100 ms later) and a link routes its tables' commands to a
/// slot's new owner after a reshard.
pub(crate) const TOPOLOGY_EVERY: Duration = Duration::from_millis(50);

/// How long an operation the cluster keeps redirecting is tried again: a
/// slot's owners agree within milliseconds after a reshard, but after a
/// `CLUSTER FAILOVER` on a loaded host they were seen to disagree for 80 ms
/// (a write given up then is acknowledged into the backlog, and read stale
/// elsewhere until it is delivered).
const SETTLE_WITHIN: Duration = Duration::from_secs(1);
/// The first pause between tries of a redirected operation; it doubles up
/// to [`SETTLE_PAUSE_MAX`].
const SETTLE_PAUSE: Duration = Duration::from_millis(5);
const SETTLE_PAUSE_MAX: Duration = Duration::from_millis(50);

/// The tries of one operation while the cluster redirects it: while a slot
/// changes hands, its nodes disagree for a moment on who serves it, and the
/// cluster client's immediate redirects can bounce between them until it
/// gives up.
struct Settle {
    began: tokio::time::Instant,
    pause: Duration,
}

impl Settle {
    fn new() -> Settle {
        Settle {
            began: tokio::time::Instant::now(),
            pause: SETTLE_PAUSE,
        }
    }

    /// Whether the operation should run again because the cluster
    /// redirected it (after a pause), within [`SETTLE_WITHIN`] of its first
    /// try.
    async fn again<R>(&mut self, done: &Result<R, Failure>) -> bool {
        let redirected = matches!(done, Err(Failure::Redis(error)) if moved(error));
        if !redirected || self.began.elapsed() + self.pause > SETTLE_WITHIN {
            return false;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(SETTLE_PAUSE_MAX);
        true
    }
}

/// Whether the node said another serves the key (a slot that moved).
fn moved(error: &RedisError) -> bool {
    matches!(error.code(), Some("MOVED" | "ASK" | "TRYAGAIN"))
}

fn is_outage(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
}
