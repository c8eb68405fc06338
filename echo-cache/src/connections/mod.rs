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

mod breaker;
pub(crate) mod topology;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::RedisFuture;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionInfo, FromRedisValue, PushInfo, RedisError, Script, Value};
use tokio::sync::OnceCell;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::Error;
use breaker::Breaker;
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
    link: Arc<LinkSlot>,
    timeout: Duration,
    breaker: Breaker,
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
    pub(crate) fn link(&self) -> &Arc<LinkSlot> {
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
    /// does not name (see [`LinkSlot`]), each reached with the seed's
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

/// The cluster client of `seeds`: every seed must share the scheme and the
/// credentials (the cluster's nodes are reached with the seeds' settings).
/// With `pushes`, it speaks RESP3 and sends its pushes there.
fn cluster_client(
    seeds: &[String],
    tls_root: Option<&[u8]>,
    timeout: Duration,
    pushes: Option<UnboundedSender<PushInfo>>,
) -> Result<ClusterClient, RedisError> {
    let builder = ClusterClient::builder(seeds.iter().map(String::as_str))
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .retries(3)
        .min_retry_wait(5)
        .max_retry_wait(50);
    let builder = match pushes {
        Some(pushes) => builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes),
        None => builder,
    };
    #[cfg(feature = "tls")]
    let builder = match tls_root {
        Some(pem) => builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.to_vec()),
        }),
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    debug_assert!(tls_root.is_none(), "TLS roots need the tls feature");
    builder.build()
}

/// The client of `url`. A `rediss://` one trusts `tls_root` (PEM) if given,
/// else the system's root certificates.
fn client(url: &str, tls_root: Option<&[u8]>) -> Result<redis::Client, String> {
    #[cfg(feature = "tls")]
    let client = match tls_root {
        Some(pem) => {
            use rustls::pki_types::{CertificateDer, pem::PemObject};
            if CertificateDer::pem_slice_iter(pem).next().is_none() {
                return Err("the TLS roots hold no PEM certificate".to_owned());
            }
            let roots = redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            };
            redis::Client::build_with_tls(url, roots)
        }
        None => redis::Client::open(url),
    };
    #[cfg(not(feature = "tls"))]
    let client = {
        debug_assert!(tls_root.is_none(), "TLS roots need the tls feature");
        redis::Client::open(url)
    };
    let client = client.map_err(|e| {
        let tls = url.split_once("://").is_some_and(|(scheme, _)| {
            scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
        });
        if tls && cfg!(not(feature = "tls")) {
            format!("{e} (a rediss:// address needs echo-cache's `tls` feature)")
        } else {
            e.to_string()
        }
    })?;
    // Without the feature a TLS address does not parse.
    #[cfg(feature = "tls")]
    if let redis::ConnectionAddr::TcpTls { insecure, .. } = client.get_connection_info().addr() {
        if *insecure {
            return Err("#insecure (no certificate check) is not supported; \
                        give the server's CA with Builder::l2_tls_root"
                .to_owned());
        }
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // The program chose no rustls crypto provider: ring, which the
            // `tls` feature builds. Losing a race to another installer is as
            // good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    }
    Ok(client)
}

/// `url` with its credentials, if any, masked: `redis://user:***@host`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => format!("{scheme}://***@{host}"),
        },
        None => url.to_owned(),
    }
}

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
    node: MultiplexedConnection,
    /// Whether `node` imports the slot: each command goes after `ASKING`.
    asking: bool,
    /// Whether a redirect was followed already.
    redirected: bool,
    link: Arc<LinkSlot>,
    /// Whether the operation runs on the command path now.
    followed_by_cluster: bool,
    /// The command path.
    commands: Connection,
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

/// The coherence link's connections while a session is up, one per node
/// with the slots it serves, for the `tracking` tables' commands (empty
/// between sessions); and the nodes that answered for a slot without the
/// link having a connection to them.
#[derive(Default)]
pub(crate) struct LinkSlot {
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

impl LinkSlot {
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
    fn node(&self, name: &str) -> Option<MultiplexedConnection> {
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
    fn meet(&self, name: &str) {
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

#[cfg(test)]
mod connect_tests {
    use super::redacted;

    #[test]
    fn credentials_are_masked_in_messages() {
        assert_eq!(redacted("redis://app:pw@h:1/3"), "redis://app:***@h:1/3");
        assert_eq!(redacted("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redacted("rediss://pw@h"), "rediss://***@h");
        assert_eq!(redacted("redis://app:p@w@h"), "redis://app:***@h");
        assert_eq!(redacted("redis://h:1/3"), "redis://h:1/3");
        assert_eq!(redacted("not a url"), "not a url");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_needs_the_tls_feature() {
        let error = super::client("rediss://127.0.0.1:6380", None).unwrap_err();
        assert!(error.contains("`tls` feature"), "{error}");
    }
}
