//! Who serves which slots: the masters of a cluster and their slot ranges
//! (`CLUSTER SLOTS`), or the one server, which serves them all.
//!
//! The coherence lanes open a connection of their own to each master (a
//! tracking table's invalidations come from the node that owns its keys;
//! a sharded channel lives on the owner of its slot), and end their session
//! when the topology they were built on is no longer the cluster's.

use redis::{ConnectionAddr, ConnectionInfo, Value};

/// Number of hash slots of a Valkey/Redis cluster.
pub const SLOTS: u16 = 16_384;

/// One node that serves slots, and how to reach it.
#[derive(Clone, Debug)]
pub(crate) struct Master {
    /// The node's address, as the cluster names it (`host:port`).
    pub(crate) name: String,
    /// Its connection settings: the seed's, at the node's address.
    pub(crate) info: ConnectionInfo,
    /// The slot ranges it serves, inclusive.
    pub(crate) slots: Vec<(u16, u16)>,
}

impl Master {
    /// The node `name` (`host:port`), reached with `seed`'s settings, as
    /// serving no slot.
    pub(crate) fn named(name: &str, seed: &ConnectionInfo) -> Option<Master> {
        let (host, port) = name.rsplit_once(':')?;
        Some(Master {
            info: at(seed, host, port.parse().ok()?),
            name: name.to_owned(),
            slots: Vec::new(),
        })
    }
}

/// The masters of a cluster, or the one server.
#[derive(Clone, Debug)]
pub(crate) struct Topology {
    pub(crate) masters: Vec<Master>,
}

impl Topology {
    /// The one server at `info`: it serves every slot.
    pub(crate) fn single(info: ConnectionInfo) -> Topology {
        let name = name_of(info.addr());
        Topology {
            masters: vec![Master {
                name,
                info,
                slots: vec![(0, SLOTS - 1)],
            }],
        }
    }

    /// The topology a `CLUSTER SLOTS` reply describes; each master reached
    /// with `seed`'s settings (credentials, database, TLS) at its own
    /// address.
    pub(crate) fn of_cluster(slots: &Value, seed: &ConnectionInfo) -> Result<Topology, String> {
        let Value::Array(ranges) = slots else {
            return Err(format!("CLUSTER SLOTS: not an array: {slots:?}"));
        };
        let mut masters: Vec<Master> = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err("CLUSTER SLOTS: a range is not an array".to_owned());
            };
            let (Some(from), Some(to), Some(Value::Array(node))) =
                (slot(fields.first()), slot(fields.get(1)), fields.get(2))
            else {
                return Err("CLUSTER SLOTS: a range without slots or master".to_owned());
            };
            let (Some(host), Some(port)) = (text(node.first()), port(node.get(1))) else {
                return Err("CLUSTER SLOTS: a master without host or port".to_owned());
            };
            let name = format!("{host}:{port}");
            match masters.iter_mut().find(|master| master.name == name) {
                Some(master) => master.slots.push((from, to)),
                None => masters.push(Master {
                    info: at(seed, host, port),
                    name,
                    slots: vec![(from, to)],
                }),
            }
        }
        masters.sort_by(|a, b| a.name.cmp(&b.name));
        for master in &mut masters {
            master.slots.sort_unstable();
        }
        Ok(Topology { masters })
    }

    /// The master that serves `slot`.
    pub(crate) fn owner(&self, slot: u16) -> Option<&Master> {
        self.masters.iter().find(|master| {
            master
                .slots
                .iter()
                .any(|&(from, to)| (from..=to).contains(&slot))
        })
    }

    /// Whether `other` names the same masters (whatever slots they serve).
    pub(crate) fn same_masters(&self, other: &Topology) -> bool {
        self.masters.len() == other.masters.len()
            && self
                .masters
                .iter()
                .zip(&other.masters)
                .all(|(a, b)| a.name == b.name)
    }

    /// Whether `other` assigns the slots to the same masters.
    pub(crate) fn same(&self, other: &Topology) -> bool {
        self.masters.len() == other.masters.len()
            && self
                .masters
                .iter()
                .zip(&other.masters)
                .all(|(a, b)| a.name == b.name && a.slots == b.slots)
    }
}

/// `seed`'s settings at `host:port`.
fn at(seed: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match seed.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    seed.clone().set_addr(addr)
}

fn name_of(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            format!("{host}:{port}")
        }
        other => format!("{other:?}"),
    }
}

fn slot(value: Option<&Value>) -> Option<u16> {
    match value? {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

fn port(value: Option<&Value>) -> Option<u16> {
    slot(value)
}

fn text(value: Option<&Value>) -> Option<&str> {
    match value? {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn a_cluster_slots_reply_names_each_master_and_its_ranges() {
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(0), Value::Int(99), node("127.0.0.1", 7001)]),
            Value::Array(vec![
                Value::Int(100),
                Value::Int(16383),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5), Value::Int(5), node("127.0.0.1", 7001)]),
        ]);
        let seed =
            redis::IntoConnectionInfo::into_connection_info("redis://user:pw@127.0.0.1:7000/0")
                .unwrap();
        let topology = Topology::of_cluster(&reply, &seed).unwrap();
        let names: Vec<&str> = topology.masters.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert_eq!(topology.masters[1].slots, [(0, 99), (5, 5)]);
        assert_eq!(topology.masters[0].slots, [(100, 16383)]);
        assert_eq!(topology.owner(100).unwrap().name, "127.0.0.1:7000");
        assert_eq!(topology.owner(5).unwrap().name, "127.0.0.1:7001");
        let info = &topology.masters[1].info;
        assert_eq!(info.addr(), &ConnectionAddr::Tcp("127.0.0.1".into(), 7001));
        assert_eq!(info.redis_settings().username(), Some("user"));
        assert!(topology.same(&topology.clone()));
        assert!(Topology::of_cluster(&Value::Nil, &seed).is_err());
    }
}
