//! A real local cluster of [`RedisServer`]s; see [`RedisCluster`]. This file
//! holds the fixture as its users see it: the cluster, its nodes, the
//! one-cluster-at-a-time turn, and the operations (roles, slots, failover,
//! migration). How it is started is in `builder`, how it knows the nodes
//! agree in `converge`, and how it reads `CLUSTER NODES` in `nodes`.

use std::fmt;
use std::ops::Deref;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::server::describe_command;
use crate::{CLIENT_TIMEOUT, Error, ErrorKind, RedisServer};

mod builder;
mod converge;
mod nodes;

pub use builder::RedisClusterBuilder;
use nodes::{Layout, parse_nodes};

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

impl Drop for RedisCluster {
    /// While a test panics: every node's log, then the panic again (the
    /// nodes drop after this, without printing their logs twice).
    fn drop(&mut self) {
        for node in &self.nodes {
            node.tell_log();
        }
        crate::last_panic::say_again();
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
