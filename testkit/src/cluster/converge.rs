//! How a [`RedisCluster`] knows its nodes agree: it forms a fresh cluster,
//! then polls every live node (`CLUSTER INFO`, `CLUSTER NODES`, `INFO
//! replication`) until their views agree and a check on the agreed view
//! passes, or fails after the converge timeout naming what did not
//! converge, with each node's `CLUSTER NODES`. Every blocking operation of
//! the fixture ends in one of these waits.

use std::collections::HashSet;
use std::thread;
use std::time::Instant;

use super::nodes::{Layout, NodeEntry, Placement, info_field, parse_nodes};
use super::{CONFIG_FILE, ClusterNode, POLL_INTERVAL, RedisCluster, SLOT_COUNT, run};
use crate::{Error, ErrorKind};

impl RedisCluster {
    /// Joins freshly started nodes: epochs, slots, `CLUSTER MEET`, replicas
    /// (the nodes after them are spare masters).
    pub(super) fn form(&self, masters: usize, replicas: usize) -> Result<(), Error> {
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
    pub(super) fn converge<T>(
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
    pub(super) fn owns_all(
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
pub(super) struct Agreed {
    pub(super) layout: Layout,
    /// `(node index, slot)` of each slot a node holds migrating or importing.
    pub(super) open_slots: Vec<(usize, u16)>,
}
