//! What one node says of the cluster: the lines of `CLUSTER NODES` parsed
//! into [`NodeEntry`]s, the [`Layout`] (roles and slot owners) they make,
//! and `INFO` fields. Plain data and parsing, tested on replies as Redis 7.0
//! and Valkey 8 print them.

use std::collections::BTreeMap;

/// The roles and slot owners as one node sees them: what all must agree on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) nodes: BTreeMap<String, Placement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placement {
    pub(super) port: u16,
    /// The master's id, for a replica.
    pub(super) master: Option<String>,
    /// Inclusive slot ranges, for a master.
    pub(super) slots: Vec<(u16, u16)>,
}

impl Layout {
    pub(super) fn of(entries: &[NodeEntry]) -> Self {
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

    pub(super) fn owner_of(&self, slot: u16) -> Option<&str> {
        self.nodes.iter().find_map(|(id, placement)| {
            let owns = placement
                .slots
                .iter()
                .any(|&(first, last)| (first..=last).contains(&slot));
            owns.then_some(id.as_str())
        })
    }

    pub(super) fn slots_of(&self, id: &str) -> Vec<(u16, u16)> {
        self.nodes
            .get(id)
            .map(|p| p.slots.clone())
            .unwrap_or_default()
    }

    pub(super) fn master_of(&self, id: &str) -> Option<&str> {
        self.nodes.get(id)?.master.as_deref()
    }

    /// The first node id whose placement differs between the two layouts.
    pub(super) fn first_difference<'a>(&'a self, other: &'a Self) -> Option<&'a str> {
        let ids = self.nodes.keys().chain(other.nodes.keys());
        ids.map(String::as_str)
            .find(|id| self.nodes.get(*id) != other.nodes.get(*id))
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct NodeEntry {
    pub(super) id: String,
    pub(super) port: u16,
    pub(super) myself: bool,
    /// Flagged `fail`: a majority of the masters agree it is down.
    pub(super) failed: bool,
    /// Flagged `fail?` (PFAIL): this node alone finds it unreachable.
    pub(super) suspected: bool,
    /// Still in the handshake (or without an address): not a member yet.
    pub(super) handshake: bool,
    pub(super) master: Option<String>,
    pub(super) slots: Vec<(u16, u16)>,
    /// Slots this node holds migrating or importing (its own line only).
    pub(super) open_slots: Vec<u16>,
}

pub(super) fn parse_nodes(text: &str) -> Result<Vec<NodeEntry>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            parse_node_line(line).ok_or_else(|| format!("unparsable CLUSTER NODES line {line:?}"))
        })
        .collect()
}

/// `<id> <ip:port@cport[,hostname...]> <flags> <master> <ping-sent>
/// <pong-recv> <config-epoch> <link-state> <slot>...`
pub(super) fn parse_node_line(line: &str) -> Option<NodeEntry> {
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
pub(super) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
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
