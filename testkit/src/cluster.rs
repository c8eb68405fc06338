//! A real local cluster of [`RedisServer`]s; see [`RedisCluster`].

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::ops::Deref;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::server::describe_command;
use crate::{CLIENT_TIMEOUT, Error, ErrorKind, RedisServer};

/// The number of hash slots of a cluster.
pub const SLOT_COUNT: u16 = 16_384;

/// `cluster-node-timeout` unless [`RedisClusterBuilder::node_timeout`] says
/// otherwise: short, so a killed master's replica takes over within about
/// two seconds.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(1_000);

/// How long every wait of a [`RedisCluster`] (start, failover, migration,
/// [`wait_ok`](RedisCluster::wait_ok)) lets the nodes take to agree, unless
/// [`RedisClusterBuilder::converge_timeout`] says otherwise.
pub const DEFAULT_CONVERGE_TIMEOUT: Duration = Duration::from_secs(15);

/// Each node's cluster state file, in its own temp dir (the server's working
/// dir), so a restarted node rejoins with its id, role and slots.
const CONFIG_FILE: &str = "nodes.conf";

/// Keys per `MIGRATE` of a slot migration.
const MIGRATE_BATCH: usize = 100;

/// Interval of the cluster's state polls.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Configures a [`RedisCluster`] before starting it; see
/// [`RedisCluster::builder`].
#[derive(Debug, Clone)]
pub struct RedisClusterBuilder {
    masters: usize,
    replicas_per_master: usize,
    spare_masters: usize,
    node_timeout: Duration,
    converge_timeout: Duration,
    args: Vec<OsString>,
}

impl RedisClusterBuilder {
    /// The nodes' `cluster-node-timeout` (default [`DEFAULT_NODE_TIMEOUT`]):
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
    /// [`DEFAULT_CONVERGE_TIMEOUT`]).
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

/// A real cluster of `valkey-server` / `redis-server` nodes on loopback,
/// each a [`RedisServer`] with its own reserved port (and cluster bus port);
/// every node is killed on drop. See the [crate docs](crate#cluster).
/// The clusters of one process run one at a time: a start waits for the
/// running one to be dropped.
///
/// Every operation blocks until the cluster agrees, bounded by the converge
/// timeout, and panics naming what did not converge. Roles and slot owners
/// are asked of the cluster (the first running node) at each call.
#[derive(Debug)]
pub struct RedisCluster {
    /// Masters first, then the replicas (replica `i` of master `i % masters`),
    /// then the spare masters.
    nodes: Vec<ClusterNode>,
    node_timeout: Duration,
    converge_timeout: Duration,
    /// The layout of the last wait that saw the nodes agree: which slots a
    /// master owned before it was killed.
    agreed: Mutex<Layout>,
    /// This process's turn to run a cluster, given back once the nodes
    /// above are stopped.
    _turn: Turn,
}

/// Whether a cluster of this process is running, and the wait for it to
/// end: clusters run one at a time. Two clusters of nodes, and the load of
/// their tests, starve each other's timers on a small machine, and cluster
/// tests assert bounds of some tens of milliseconds.
static TURNS: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// A process's turn to run a cluster (see [`TURNS`]).
#[derive(Debug)]
struct Turn;

impl Turn {
    /// Waits for the cluster running, if any, to stop.
    fn take() -> Turn {
        let (running, stopped) = &TURNS;
        let mut running = running.lock().unwrap_or_else(PoisonError::into_inner);
        while *running {
            running = stopped
                .wait(running)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *running = true;
        Turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let (running, stopped) = &TURNS;
        *running.lock().unwrap_or_else(PoisonError::into_inner) = false;
        stopped.notify_one();
    }
}

/// One node of a [`RedisCluster`]: its [`RedisServer`] (through `Deref`, so
/// `node.kill()`, `node.url()`, `node.query(..)` work) and its cluster id.
#[derive(Debug)]
pub struct ClusterNode {
    server: RedisServer,
    id: String,
}

impl ClusterNode {
    /// The node's cluster id (`CLUSTER MYID`), kept across restarts.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Running and not paused: it can answer.
    fn is_live(&self) -> bool {
        self.server.is_running() && !self.server.is_paused()
    }
}

impl Deref for ClusterNode {
    type Target = RedisServer;

    fn deref(&self) -> &RedisServer {
        &self.server
    }
}

impl fmt::Display for ClusterNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "127.0.0.1:{}", self.server.port())
    }
}

/// A slot migration in progress, from [`RedisCluster::begin_migration`]:
/// the slot is `MIGRATING` on its owner and `IMPORTING` on the target until
/// [`RedisCluster::finish_migration`]. Plain data (`Send`), so the steps can
/// run on different blocking threads.
#[derive(Debug)]
pub struct SlotMigration {
    slot: u16,
    source: usize,
    target: usize,
}

impl SlotMigration {
    /// The slot being migrated.
    pub fn slot(&self) -> u16 {
        self.slot
    }
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each and
    /// the default settings; see [`RedisClusterBuilder::try_start`]. A
    /// failover needs a majority of the masters alive to vote: 3 masters
    /// or more.
    #[track_caller]
    pub fn start(masters: usize, replicas_per_master: usize) -> Self {
        Self::builder(masters, replicas_per_master).start()
    }

    /// A builder for another node timeout, converge timeout or extra flags.
    /// Panics unless `1 <= masters <= 16384`.
    #[track_caller]
    pub fn builder(masters: usize, replicas_per_master: usize) -> RedisClusterBuilder {
        assert!(
            (1..=usize::from(SLOT_COUNT)).contains(&masters),
            "a cluster has 1 to {SLOT_COUNT} masters, not {masters}"
        );
        RedisClusterBuilder {
            masters,
            replicas_per_master,
            spare_masters: 0,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            converge_timeout: DEFAULT_CONVERGE_TIMEOUT,
            args: Vec::new(),
        }
    }

    /// Every node, in start order: the masters first, then the replicas (the
    /// roles at start; they change with failovers).
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// `redis://127.0.0.1:<port>` of every node, in start order: the seeds
    /// of a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|node| node.url()).collect()
    }

    /// The nodes' `cluster-node-timeout`.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout
    }

    /// The running nodes the cluster sees as masters now, in start order.
    #[track_caller]
    pub fn masters(&self) -> Vec<&ClusterNode> {
        let layout = self.current_layout();
        self.running_where(|node| layout.master_of(&node.id).is_none())
    }

    /// The running nodes the cluster sees as replicas now, in start order.
    #[track_caller]
    pub fn replicas(&self) -> Vec<&ClusterNode> {
        let layout = self.current_layout();
        self.running_where(|node| layout.master_of(&node.id).is_some())
    }

    /// The running nodes the cluster sees as replicas of `master` now.
    #[track_caller]
    pub fn replicas_of(&self, master: &ClusterNode) -> Vec<&ClusterNode> {
        let layout = self.current_layout();
        self.running_where(|node| layout.master_of(&node.id) == Some(master.id()))
    }

    /// The master that owns `slot` now, as the first running node sees it.
    #[track_caller]
    pub fn node_of_slot(&self, slot: u16) -> &ClusterNode {
        let layout = self.current_layout();
        let owner = layout
            .owner_of(slot)
            .unwrap_or_else(|| panic!("slot {slot} has no owner: {layout:?}"));
        self.node(owner)
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of the first running
    /// node).
    #[track_caller]
    pub fn slot_of(&self, key: impl AsRef<[u8]>) -> u16 {
        self.first_live()
            .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key.as_ref()))
    }

    /// Waits until the cluster agrees: every running (unpaused) node reports
    /// `cluster_state:ok` and `cluster_known_nodes` of all nodes, sees the
    /// same roles and slot owners as the others, flags every killed or
    /// paused node `fail` (so the cluster has noticed each outage: after a
    /// kill this takes about the node timeout) and no running node as
    /// failing; each running replica of a running master has its
    /// replication link up. E.g. after a node's
    /// [`restart`](RedisServer::restart). Panics naming what did not
    /// converge (a master killed without a replica leaves
    /// `cluster_state:fail`, unless `--cluster-require-full-coverage no`).
    #[track_caller]
    pub fn wait_ok(&self) {
        self.converge("cluster_state:ok everywhere", |_| Ok(()))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A manual failover: `CLUSTER FAILOVER` on `replica` (its master must be
    /// up), then waits until every running node agrees that `replica` owns
    /// its master's slots (the old master becomes its replica). Panics if
    /// `replica` is not a replica, or naming what did not converge.
    #[track_caller]
    pub fn failover(&self, replica: &ClusterNode) {
        let layout = self.current_layout();
        let master = layout
            .master_of(&replica.id)
            .unwrap_or_else(|| panic!("failover: {replica} is not a replica"));
        let master = self.node(master);
        let slots = layout.slots_of(&master.id);
        let () = replica.query(redis::cmd("CLUSTER").arg("FAILOVER"));
        self.converge(&format!("{replica} takes over from {master}"), |agreed| {
            if agreed.layout.master_of(&replica.id).is_some() {
                return Err(format!("{replica} is still a replica"));
            }
            self.owns_all(&agreed.layout, replica, &slots)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// After `master` was killed (or paused): waits until the cluster has
    /// promoted one of its replicas (after the node timeout, and an
    /// election), every running node agrees that it owns the slots `master`
    /// owned when the cluster last agreed, and reports `cluster_state:ok`.
    /// Returns the new master. Panics naming what did not converge.
    #[track_caller]
    pub fn wait_for_failover(&self, master: &ClusterNode) -> &ClusterNode {
        let slots = self.lock_agreed().slots_of(&master.id);
        assert!(
            !slots.is_empty(),
            "wait_for_failover: {master} owned no slots when the cluster last agreed"
        );
        self.converge(&format!("a replica takes over from {master}"), |agreed| {
            let owner = agreed
                .layout
                .owner_of(slots[0].0)
                .ok_or_else(|| format!("slot {} has no owner", slots[0].0))?;
            let owner = self.node(owner);
            if owner.id == master.id {
                return Err(format!("{master} still owns its slots"));
            }
            self.owns_all(&agreed.layout, owner, &slots)?;
            Ok(owner)
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A live reshard of one slot to the master `to`, keys included:
    /// [`begin_migration`](Self::begin_migration), then
    /// [`finish_migration`](Self::finish_migration). Blocks (run it on a
    /// blocking thread to keep a load going meanwhile); returns once every
    /// running node agrees that `to` owns the slot.
    #[track_caller]
    pub fn migrate_slot(&self, slot: u16, to: &ClusterNode) {
        self.finish_migration(self.begin_migration(slot, to));
    }

    /// Opens the migration of `slot` from its owner to the master `to`:
    /// `CLUSTER SETSLOT <slot> IMPORTING` on `to`, then `MIGRATING` on the
    /// owner. From then on the owner answers `ASK` for the slot's keys it no
    /// longer has. Panics if `to` is not a master or owns the slot already.
    #[track_caller]
    pub fn begin_migration(&self, slot: u16, to: &ClusterNode) -> SlotMigration {
        let layout = self.current_layout();
        assert!(
            layout.master_of(&to.id).is_none(),
            "begin_migration: {to} is not a master"
        );
        let source = layout
            .owner_of(slot)
            .unwrap_or_else(|| panic!("begin_migration: slot {slot} has no owner"));
        let source = self.index_of(source).expect("owners are cluster nodes");
        let target = self.index_of(&to.id).expect("`to` is a cluster node");
        assert_ne!(source, target, "begin_migration: {to} owns slot {slot}");
        let set_slot = |node: &ClusterNode, state: &str, peer: usize| {
            let () = node.query(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(state)
                    .arg(&self.nodes[peer].id),
            );
        };
        set_slot(to, "IMPORTING", source);
        set_slot(&self.nodes[source], "MIGRATING", target);
        SlotMigration {
            slot,
            source,
            target,
        }
    }

    /// Moves up to `max` of the slot's keys still on the source to the
    /// target (`CLUSTER GETKEYSINSLOT`, `MIGRATE ... KEYS`), in batches;
    /// returns how many it moved (fewer than `max` once the source has no
    /// more).
    #[track_caller]
    pub fn migrate_keys(&self, migration: &SlotMigration, max: usize) -> usize {
        let source = &self.nodes[migration.source];
        let target = &self.nodes[migration.target];
        let mut moved = 0;
        while moved < max {
            let keys: Vec<Vec<u8>> = source.query(
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(migration.slot)
                    .arg(MIGRATE_BATCH.min(max - moved)),
            );
            if keys.is_empty() {
                break;
            }
            // "OK", or "NOKEY" if every key of the batch expired or was
            // deleted meanwhile.
            let _: String = source.query(
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(target.port())
                    .arg("")
                    .arg(0)
                    .arg(CLIENT_TIMEOUT.as_millis() as u64)
                    .arg("KEYS")
                    .arg(&keys),
            );
            moved += keys.len();
        }
        moved
    }

    /// Moves the slot's remaining keys, then `CLUSTER SETSLOT <slot> NODE`
    /// on the target, the source and every other master, and waits until
    /// every running node agrees that the target owns the slot and none
    /// holds it open (migrating or importing).
    #[track_caller]
    pub fn finish_migration(&self, migration: SlotMigration) {
        self.migrate_keys(&migration, usize::MAX);
        let slot = migration.slot;
        let target = &self.nodes[migration.target];
        let set_owner = |node: &ClusterNode| {
            let () = node.query(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&target.id),
            );
        };
        set_owner(target);
        set_owner(&self.nodes[migration.source]);
        // The others would learn it from the bus; told, they redirect at once.
        let layout = self.current_layout();
        for (i, node) in self.nodes.iter().enumerate() {
            if i != migration.target
                && i != migration.source
                && node.is_live()
                && layout.master_of(&node.id).is_none()
            {
                set_owner(node);
            }
        }
        let source = &self.nodes[migration.source];
        self.converge(
            &format!("slot {slot} moves from {source} to {target}"),
            |agreed| {
                if agreed.layout.owner_of(slot) != Some(target.id()) {
                    return Err(format!("{target} does not own slot {slot} yet"));
                }
                match agreed.open_slots.iter().find(|(_, open)| *open == slot) {
                    Some((node, _)) => Err(format!(
                        "{} still holds slot {slot} open",
                        self.nodes[*node]
                    )),
                    None => Ok(()),
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Joins freshly started nodes: epochs, slots, `CLUSTER MEET`, replicas
    /// (the nodes after them are spare masters).
    fn form(&self, masters: usize, replicas: usize) -> Result<(), Error> {
        // Distinct config epochs up front, as `redis-cli --cluster create`
        // does, so the nodes need no epoch collision rounds.
        for (epoch, node) in (1_u64..).zip(&self.nodes) {
            let () = run(
                node,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(epoch),
            )?;
        }
        let total = usize::from(SLOT_COUNT);
        for (i, master) in self.nodes[..masters].iter().enumerate() {
            let first = i * total / masters;
            let last = (i + 1) * total / masters - 1;
            let () = run(
                master,
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(first)
                    .arg(last),
            )?;
        }
        let seed = &self.nodes[0];
        for node in &self.nodes[1..] {
            let () = run(
                node,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(seed.port()),
            )?;
        }
        self.poll("every node meets every other", |snapshots| {
            for snapshot in snapshots {
                let node = &self.nodes[snapshot.node];
                if snapshot.entries.len() != self.nodes.len()
                    || snapshot.entries.iter().any(|e| e.handshake)
                {
                    return Err(format!(
                        "{node} knows {} of {} nodes",
                        snapshot.entries.iter().filter(|e| !e.handshake).count(),
                        self.nodes.len()
                    ));
                }
            }
            Ok(())
        })?;
        for (i, replica) in self.nodes[masters..masters + replicas].iter().enumerate() {
            let master = &self.nodes[i % masters];
            let () = run(
                replica,
                redis::cmd("CLUSTER").arg("REPLICATE").arg(&master.id),
            )?;
        }
        self.converge("the new cluster agrees", |_| Ok(()))
    }

    /// Polls every live node until the views agree (see
    /// [`wait_ok`](Self::wait_ok)) and `check` passes on the agreed view;
    /// remembers that view.
    fn converge<T>(
        &self,
        what: &str,
        mut check: impl FnMut(&Agreed) -> Result<T, String>,
    ) -> Result<T, Error> {
        self.poll(what, |snapshots| {
            let agreed = self.agreement(snapshots)?;
            let done = check(&agreed)?;
            *self.lock_agreed() = agreed.layout;
            Ok(done)
        })
    }

    /// Takes a snapshot of every live node until `check` passes, or fails
    /// after the converge timeout with `check`'s last complaint and each
    /// node's last `CLUSTER NODES`.
    fn poll<T>(
        &self,
        what: &str,
        mut check: impl FnMut(&[Snapshot]) -> Result<T, String>,
    ) -> Result<T, Error> {
        let deadline = Instant::now() + self.converge_timeout;
        let mut connections: Vec<Option<redis::Connection>> =
            self.nodes.iter().map(|_| None).collect();
        let mut seen = String::new();
        loop {
            let complaint = match self.snapshots(&mut connections) {
                Ok(snapshots) => match check(&snapshots) {
                    Ok(done) => return Ok(done),
                    Err(complaint) => {
                        seen = snapshots
                            .iter()
                            .map(|s| {
                                format!("{}:\n{}", self.nodes[s.node], s.nodes_text.trim_end())
                            })
                            .collect::<Vec<_>>()
                            .join("\n");
                        complaint
                    }
                },
                Err(complaint) => complaint,
            };
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Cluster,
                    format!(
                        "the cluster did not converge within {:?} ({what}): {complaint}\n\
                         --- CLUSTER NODES as each running node last saw it:\n{seen}\n---",
                        self.converge_timeout
                    ),
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `CLUSTER INFO`, `CLUSTER NODES` and `INFO replication` of every live
    /// node, over connections kept between polls.
    fn snapshots(
        &self,
        connections: &mut [Option<redis::Connection>],
    ) -> Result<Vec<Snapshot>, String> {
        let mut snapshots = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !node.is_live() {
                connections[i] = None;
                continue;
            }
            let reply = match &mut connections[i] {
                Some(conn) => Snapshot::take(conn),
                None => node.try_blocking_connection().and_then(|mut conn| {
                    let reply = Snapshot::take(&mut conn);
                    connections[i] = Some(conn);
                    reply
                }),
            };
            let (info, nodes_text, replication) = reply.map_err(|e| {
                connections[i] = None;
                format!("{node} did not answer: {e}")
            })?;
            let entries = parse_nodes(&nodes_text).map_err(|e| format!("{node}: {e}"))?;
            snapshots.push(Snapshot {
                node: i,
                state_ok: info_field(&info, "cluster_state") == Some("ok"),
                known_nodes: info_field(&info, "cluster_known_nodes")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0),
                link_up: info_field(&replication, "master_link_status") == Some("up"),
                entries,
                nodes_text,
            });
        }
        if snapshots.is_empty() {
            return Err("no node is running".to_owned());
        }
        Ok(snapshots)
    }

    /// The view every live node shares, or what keeps them apart.
    fn agreement(&self, snapshots: &[Snapshot]) -> Result<Agreed, String> {
        let live: HashSet<&str> = snapshots
            .iter()
            .map(|s| self.nodes[s.node].id.as_str())
            .collect();
        for snapshot in snapshots {
            let node = &self.nodes[snapshot.node];
            let myself = snapshot.entries.iter().find(|e| e.myself);
            if myself.is_none_or(|me| me.id != node.id) {
                return Err(format!(
                    "{node} no longer has id {} ({CONFIG_FILE} lost?)",
                    node.id
                ));
            }
            if !snapshot.state_ok {
                return Err(format!("{node} reports cluster_state:fail"));
            }
            if snapshot.known_nodes != self.nodes.len() {
                return Err(format!(
                    "{node} reports cluster_known_nodes:{}, not {}",
                    snapshot.known_nodes,
                    self.nodes.len()
                ));
            }
            for entry in &snapshot.entries {
                if entry.handshake || self.index_of(&entry.id).is_none() {
                    return Err(format!("{node} lists a stranger: {}", entry.id));
                }
                let running = live.contains(entry.id.as_str());
                if running && (entry.failed || entry.suspected) {
                    return Err(format!("{node} flags {} as failing", self.node(&entry.id)));
                }
                if !running && !entry.failed {
                    return Err(format!(
                        "{node} does not flag {} (stopped) as fail yet",
                        self.node(&entry.id)
                    ));
                }
            }
        }
        let first = &snapshots[0];
        let layout = Layout::of(&first.entries);
        for other in &snapshots[1..] {
            let other_layout = Layout::of(&other.entries);
            if let Some(id) = layout.first_difference(&other_layout) {
                return Err(format!(
                    "{} sees {} as {}, {} sees it as {}",
                    self.nodes[first.node],
                    self.node(id),
                    self.describe(&layout, id),
                    self.nodes[other.node],
                    self.describe(&other_layout, id),
                ));
            }
        }
        for snapshot in snapshots {
            let node = &self.nodes[snapshot.node];
            if let Some(master) = layout.master_of(&node.id)
                && live.contains(master)
                && !snapshot.link_up
            {
                return Err(format!(
                    "replica {node}: master_link_status is not up (master {})",
                    self.node(master)
                ));
            }
        }
        let open_slots = snapshots
            .iter()
            .flat_map(|s| {
                let myself = s.entries.iter().filter(|e| e.myself);
                myself.flat_map(|e| e.open_slots.iter().map(|&slot| (s.node, slot)))
            })
            .collect();
        Ok(Agreed { layout, open_slots })
    }

    /// Ok if `owner` owns every slot of `ranges` in `layout`, else which not.
    fn owns_all(
        &self,
        layout: &Layout,
        owner: &ClusterNode,
        ranges: &[(u16, u16)],
    ) -> Result<(), String> {
        for &(first, last) in ranges {
            if let Some(slot) =
                (first..=last).find(|&slot| layout.owner_of(slot) != Some(owner.id()))
            {
                return Err(format!("{owner} does not own slot {slot} yet"));
            }
        }
        Ok(())
    }

    /// A node's role and slots in `layout`, for failure messages.
    fn describe(&self, layout: &Layout, id: &str) -> String {
        match layout.nodes.get(id) {
            None => "unknown".to_owned(),
            Some(Placement {
                master: Some(master),
                ..
            }) => format!("replica of {}", self.node(master)),
            Some(placement) => format!("master of slots {:?}", placement.slots),
        }
    }

    /// The layout as the first live node sees it now.
    #[track_caller]
    fn current_layout(&self) -> Layout {
        let node = self.first_live();
        let text: String = node.query(redis::cmd("CLUSTER").arg("NODES"));
        let entries = parse_nodes(&text).unwrap_or_else(|e| panic!("{node}: {e}"));
        Layout::of(&entries)
    }

    #[track_caller]
    fn first_live(&self) -> &ClusterNode {
        self.nodes
            .iter()
            .find(|node| node.is_live())
            .expect("no node of the cluster is running")
    }

    fn running_where(&self, keep: impl Fn(&ClusterNode) -> bool) -> Vec<&ClusterNode> {
        self.nodes
            .iter()
            .filter(|node| node.is_running() && keep(node))
            .collect()
    }

    fn index_of(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|node| node.id == id)
    }

    /// The node with this id; every id of a checked layout is one of ours.
    fn node(&self, id: &str) -> &ClusterNode {
        let index = self.index_of(id);
        &self.nodes[index.unwrap_or_else(|| panic!("{id} is not a node of this cluster"))]
    }

    fn lock_agreed(&self) -> MutexGuard<'_, Layout> {
        self.agreed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs one setup command; its failure names the command and the node.
fn run<T: redis::FromRedisValue>(node: &RedisServer, cmd: &redis::Cmd) -> Result<T, Error> {
    node.try_blocking_connection()
        .and_then(|mut conn| cmd.query(&mut conn))
        .map_err(|e| {
            Error::new(
                ErrorKind::Cluster,
                format!("{} on {}: {e}", describe_command(cmd), node.url()),
            )
        })
}

/// One live node's answers to a poll.
struct Snapshot {
    /// Index into [`RedisCluster::nodes`].
    node: usize,
    state_ok: bool,
    known_nodes: usize,
    /// `master_link_status:up` (only replicas have one).
    link_up: bool,
    entries: Vec<NodeEntry>,
    nodes_text: String,
}

impl Snapshot {
    fn take(conn: &mut redis::Connection) -> redis::RedisResult<(String, String, String)> {
        redis::pipe()
            .cmd("CLUSTER")
            .arg("INFO")
            .cmd("CLUSTER")
            .arg("NODES")
            .cmd("INFO")
            .arg("replication")
            .query(conn)
    }
}

/// What every live node agreed on in one poll.
struct Agreed {
    layout: Layout,
    /// `(node index, slot)` of each slot a node holds migrating or importing.
    open_slots: Vec<(usize, u16)>,
}

/// The roles and slot owners as one node sees them: what all must agree on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Layout {
    nodes: BTreeMap<String, Placement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Placement {
    port: u16,
    /// The master's id, for a replica.
    master: Option<String>,
    /// Inclusive slot ranges, for a master.
    slots: Vec<(u16, u16)>,
}

impl Layout {
    fn of(entries: &[NodeEntry]) -> Self {
        let nodes = entries
            .iter()
            .map(|e| {
                let placement = Placement {
                    port: e.port,
                    master: e.master.clone(),
                    slots: e.slots.clone(),
                };
                (e.id.clone(), placement)
            })
            .collect();
        Self { nodes }
    }

    fn owner_of(&self, slot: u16) -> Option<&str> {
        self.nodes.iter().find_map(|(id, placement)| {
            let owns = placement
                .slots
                .iter()
                .any(|&(first, last)| (first..=last).contains(&slot));
            owns.then_some(id.as_str())
        })
    }

    fn slots_of(&self, id: &str) -> Vec<(u16, u16)> {
        self.nodes
            .get(id)
            .map(|p| p.slots.clone())
            .unwrap_or_default()
    }

    fn master_of(&self, id: &str) -> Option<&str> {
        self.nodes.get(id)?.master.as_deref()
    }

    /// The first node id whose placement differs between the two layouts.
    fn first_difference<'a>(&'a self, other: &'a Self) -> Option<&'a str> {
        let ids = self.nodes.keys().chain(other.nodes.keys());
        ids.map(String::as_str)
            .find(|id| self.nodes.get(*id) != other.nodes.get(*id))
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, PartialEq, Eq)]
struct NodeEntry {
    id: String,
    port: u16,
    myself: bool,
    /// Flagged `fail`: a majority of the masters agree it is down.
    failed: bool,
    /// Flagged `fail?` (PFAIL): this node alone finds it unreachable.
    suspected: bool,
    /// Still in the handshake (or without an address): not a member yet.
    handshake: bool,
    master: Option<String>,
    slots: Vec<(u16, u16)>,
    /// Slots this node holds migrating or importing (its own line only).
    open_slots: Vec<u16>,
}

fn parse_nodes(text: &str) -> Result<Vec<NodeEntry>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            parse_node_line(line).ok_or_else(|| format!("unparsable CLUSTER NODES line {line:?}"))
        })
        .collect()
}

/// `<id> <ip:port@cport[,hostname...]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>...`
fn parse_node_line(line: &str) -> Option<NodeEntry> {
    let mut fields = line.split_whitespace();
    let id = fields.next()?.to_owned();
    let addr = fields.next()?;
    let flags: Vec<&str> = fields.next()?.split(',').collect();
    let master = fields.next()?;
    let mut fields = fields.skip(4);
    let port = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
    let mut slots = Vec::new();
    let mut open_slots = Vec::new();
    for token in fields.by_ref() {
        if let Some(open) = token.strip_prefix('[') {
            // `[slot->-id]` (migrating) or `[slot-<-id]` (importing).
            open_slots.push(open.split('-').next()?.parse().ok()?);
        } else {
            let (first, last) = token.split_once('-').unwrap_or((token, token));
            slots.push((first.parse().ok()?, last.parse().ok()?));
        }
    }
    Some(NodeEntry {
        id,
        port,
        myself: flags.contains(&"myself"),
        failed: flags.contains(&"fail"),
        suspected: flags.contains(&"fail?"),
        handshake: flags.iter().any(|f| matches!(*f, "handshake" | "noaddr")),
        master: (master != "-").then(|| master.to_owned()),
        slots,
        open_slots,
    })
}

/// The value of `name:` in an `INFO`-style reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        // As Redis 7.0 and Valkey 8.0 print them (a migration open on
        // 30001), then with a hostname and aux fields (7.2+), a PFAIL and a
        // handshake.
        let text = "\
            07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n\
            67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002,,tls-port=0,shard-id=69bc master - 0 1426238316232 2 connected 5461-10922 [5460-<-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]\n\
            e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5459 5460 [5460->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]\n\
            6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005,host5 master,fail? - 1426238316232 0 5 disconnected\n\
            1a2b 127.0.0.1:30006@31006 handshake - 0 0 0 disconnected\n";
        let entries = parse_nodes(text).unwrap();
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[0].port, 30004);
        assert_eq!(
            entries[0].master.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(entries[1].slots, [(5461, 10922)]);
        assert_eq!(entries[1].open_slots, [5460]);
        assert!(entries[2].myself && !entries[2].failed && !entries[2].suspected);
        assert_eq!(entries[2].slots, [(0, 5459), (5460, 5460)]);
        assert_eq!(entries[2].open_slots, [5460]);
        assert!(entries[3].suspected && !entries[3].failed);
        assert!(entries[3].slots.is_empty());
        assert!(entries[4].handshake);

        let layout = Layout::of(&entries);
        assert_eq!(
            layout.owner_of(5460),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(
            layout.owner_of(5461),
            Some("67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1")
        );
        assert_eq!(layout.owner_of(16383), None);
        assert!(parse_nodes("garbage").is_err());
    }

    #[test]
    fn reads_info_fields() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_known_nodes:6\r\n";
        assert_eq!(info_field(info, "cluster_state"), Some("ok"));
        assert_eq!(info_field(info, "cluster_known_nodes"), Some("6"));
        assert_eq!(info_field(info, "cluster_known"), None);
    }
}
