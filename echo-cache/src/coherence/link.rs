//! The coherence link of a node: a RESP3 connection to every node that
//! serves slots (the server, or each master of a cluster) that carries the
//! server's invalidation pushes (`tracking`) and the messages of
//! `broadcast` tables, and that writes and reads the L2 keys of `tracking`
//! tables, so that `NOLOOP` keeps the node's own writes from coming back.
//!
//! A session reads the topology, connects to each master (and to each node
//! that answered a tracking table's command without the link having a
//! connection to it: a migration's target that serves no slot yet),
//! enables tracking on each (`CLIENT TRACKING ON BCAST NOLOOP` with the
//! prefix of every tracking table: the owner of a key pushes its
//! invalidations, and a reshard moves keys between masters), subscribes to
//! the channel of every broadcast table (sharded, on a cluster), then
//! trusts their L1. It ends when a connection is lost (closed by the
//! server, killed, dropped for its output buffer), silent past the PING
//! deadline, when a sharded channel's slot moved, when a master it does not
//! know serves slots (a replica promoted would not push to this node), or
//! when a node it has no connection to answers a tracking table's command;
//! its tables are then flushed and bypassed until the next session is up. Sessions follow each other, with a backoff, until the cache is
//! dropped.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, ConnectionInfo, ProtocolVersion, PushInfo, PushKind,
    RedisResult, Value,
};
use tokio::sync::{mpsc, watch};

use super::Target;
use super::message;
use crate::connections::{Master, NodeConnection, Server, TOPOLOGY_EVERY, Topology};
use crate::entity::spec::Coherence;

/// Settings of the link.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// How often the link checks that the connection is alive.
    pub(crate) ping_every: Duration,
    /// How long a connect or a PING may take before the link is lost.
    pub(crate) deadline: Duration,
}

/// A table of the link and the address its invalidations come by: the key
/// prefix of a tracking table, the channel of a broadcast table. Computed
/// once, not for every push.
struct Route {
    table: Arc<dyn Target>,
    address: Vec<u8>,
}

impl Route {
    fn of(table: &Arc<dyn Target>) -> Route {
        let spec = table.spec();
        let address = match spec.coherence() {
            Coherence::Tracking => crate::keyspace::prefix(spec),
            _ => crate::keyspace::channel(spec),
        };
        Route {
            table: Arc::clone(table),
            address: address.into_bytes(),
        }
    }

    fn tracking(&self) -> bool {
        self.table.spec().coherence() == Coherence::Tracking
    }
}

/// Runs sessions on `server` until `stop` is dropped.
pub(crate) async fn run(
    server: Arc<Server>,
    tables: Vec<Arc<dyn Target>>,
    settings: Settings,
    mut stop: watch::Receiver<()>,
) {
    let routes: Vec<Route> = tables.iter().map(Route::of).collect();
    let mut backoff = Duration::from_millis(10);
    loop {
        let outcome = tokio::select! {
            outcome = session(&server, &routes, &settings) => outcome,
            _ = stop.changed() => return,
        };
        server.link().set(Vec::new());
        for table in &tables {
            table.distrust();
        }
        let Err(reason) = outcome;
        tracing::warn!("coherence link lost, L1 of its tables flushed: {reason}");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// One session: a connection to every node that serves slots (the server,
/// or each master of a cluster), tracking on each, the broadcast channels
/// subscribed on one (a message reaches every node's subscribers); then
/// deliver what the tables kept while the server was away, trust, and apply
/// pushes until a connection is lost, a PING goes unanswered, or the
/// cluster's topology is no longer the one the session was built on.
/// Returns why it ended.
async fn session(
    server: &Server,
    routes: &[Route],
    settings: &Settings,
) -> Result<Infallible, String> {
    let topology = server.topology().await?;
    let (pushes, mut received) = mpsc::unbounded_channel();
    let config = AsyncConnectionConfig::new()
        .set_push_sender(pushes.clone())
        .set_connection_timeout(Some(settings.deadline))
        .set_response_timeout(Some(settings.deadline));
    let strangers = server.strangers(&topology);
    let mut connections = Vec::with_capacity(topology.masters.len() + strangers.len());
    for master in &topology.masters {
        connections.push(connect(master, &config, routes).await?);
    }
    // Tracked too, though they serve no slot yet: a migration's target
    // answers for the keys it imported (`ASK`).
    for stranger in &strangers {
        match connect(stranger, &config, routes).await {
            Ok(connection) => connections.push(connection),
            // Met again, it is tried again.
            Err(error) => {
                tracing::debug!("a node that answered for a slot: {error}");
                server.link().forget(&stranger.name);
            }
        }
    }
    let _subscriber = subscribe(server, &mut connections, routes, &pushes).await?;
    server.link().set(connections.clone());
    // The server is back: what this node's writes could not deliver while
    // it was away goes out before its tables are trusted (the delivery task
    // retries what fails here).
    server.answered();
    for route in routes {
        route.table.redeliver().await;
    }
    for route in routes {
        route.table.trust();
    }

    let mut ping = tokio::time::interval(settings.ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watch = tokio::time::interval(TOPOLOGY_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut topology = topology;
    loop {
        tokio::select! {
            push = received.recv() => match push {
                None => return Err("the connection ended".into()),
                Some(push) if push.kind == PushKind::Disconnection => {
                    return Err("the server closed a connection".into());
                }
                // A sharded channel's slot moved (a reshard, a failover):
                // messages may have gone to its new owner meanwhile.
                Some(push) if push.kind == PushKind::SUnsubscribe => {
                    return Err("a broadcast channel's slot moved".into());
                }
                Some(push) => apply(routes, &push),
            },
            _ = ping.tick() => {
                let ping = redis::cmd("PING");
                for node in &mut connections {
                    let reply = ping.query_async::<Value>(&mut node.connection);
                    match tokio::time::timeout(settings.deadline, reply).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Err(format!("PING: {e}")),
                        Err(_) => return Err(format!("no PONG within {:?}", settings.deadline)),
                    }
                }
                server.answered();
            }
            () = server.link().met() => {
                // A node this session has no connection to answered a
                // tracking table's command: what was read from it is not
                // tracked.
                let untracked = server.link().strangers().into_iter().find(|name| {
                    !connections.iter().any(|node| node.name == *name)
                });
                if let Some(name) = untracked {
                    return Err(format!("{name}, which this link does not track, \
                                        answered for a slot (a migration's target)"));
                }
            }
            _ = watch.tick(), if server.is_cluster() => {
                let now = server.topology().await?;
                if now.same(&topology) {
                    continue;
                }
                if !now.same_masters(&topology) {
                    // A failover or a new master: one this link has no
                    // tracking connection to may serve keys now.
                    return Err("the cluster's masters changed".into());
                }
                if moved_channel(routes, &topology, &now) {
                    // Writers may publish to the new owner before the old
                    // one unsubscribes this link (`SUNSUBSCRIBE`, above):
                    // do not wait for it.
                    return Err("a broadcast channel's slot moved".into());
                }
                // A reshard among the masters this link tracks: pushes keep
                // coming; only the routes of the tracking tables' commands
                // follow the slots.
                connections = remap(connections, &now);
                server.link().set(connections.clone());
                topology = now;
            }
        }
    }
}

/// A connection to `master`, tracking the tables' prefixes.
async fn connect(
    master: &Master,
    config: &AsyncConnectionConfig,
    routes: &[Route],
) -> Result<NodeConnection, String> {
    let client = resp3(&master.info).map_err(|e| format!("{}: {e}", master.name))?;
    let mut connection = client
        .get_multiplexed_async_connection_with_config(config)
        .await
        .map_err(|e| format!("connect to {}: {e}", master.name))?;
    track(&mut connection, routes)
        .await
        .map_err(|e| format!("CLIENT TRACKING on {}: {e}", master.name))?;
    Ok(NodeConnection {
        name: master.name.clone(),
        slots: master.slots.clone(),
        connection,
    })
}

/// Whether a broadcast table's channel is served by another master in `to`
/// than in `from`.
fn moved_channel(routes: &[Route], from: &Topology, to: &Topology) -> bool {
    routes
        .iter()
        .filter(|route| !route.tracking())
        .map(|route| crate::keyspace::slot(&route.address))
        .any(|slot| {
            let (was, is) = (from.owner(slot), to.owner(slot));
            was.map(|master| &master.name) != is.map(|master| &master.name)
        })
}

/// `connections`, each with the slots its node serves in `to` (the same
/// masters).
fn remap(connections: Vec<NodeConnection>, to: &Topology) -> Vec<NodeConnection> {
    connections
        .into_iter()
        .map(|node| {
            let slots = to
                .masters
                .iter()
                .find(|now| now.name == node.name)
                .map(|now| now.slots.clone())
                .unwrap_or_default();
            NodeConnection { slots, ..node }
        })
        .collect()
}

/// Subscribes every broadcast table's channel: on a cluster, a sharded
/// subscription (`SSUBSCRIBE`) through a cluster connection of its own,
/// which routes it to the owner of the channel's slot, where `SPUBLISH`
/// lands, so a message never crosses the cluster bus (that connection is
/// returned, to live as long as the session); on one server, a plain
/// subscription on the link's connection.
async fn subscribe(
    server: &Server,
    connections: &mut [NodeConnection],
    routes: &[Route],
    pushes: &mpsc::UnboundedSender<PushInfo>,
) -> Result<Option<ClusterConnection>, String> {
    let channels: Vec<&[u8]> = routes
        .iter()
        .filter(|route| !route.tracking())
        .map(|route| route.address.as_slice())
        .collect();
    if channels.is_empty() {
        return Ok(None);
    }
    if let Some(subscriber) = server.subscriber(pushes.clone()).await {
        let mut subscriber = subscriber?;
        for channel in channels {
            (subscriber.ssubscribe(channel).await).map_err(|e| format!("SSUBSCRIBE: {e}"))?;
        }
        return Ok(Some(subscriber));
    }
    let node = connections.first_mut().ok_or("no node serves slots")?;
    for channel in channels {
        (node.connection.subscribe(channel).await).map_err(|e| format!("subscribe: {e}"))?;
    }
    Ok(None)
}

/// Turns on tracking of the tracking tables' prefixes on `connection`,
/// if there are any: every write of another client under them is pushed.
async fn track(connection: &mut MultiplexedConnection, routes: &[Route]) -> RedisResult<()> {
    let mut tracking = redis::cmd("CLIENT");
    tracking
        .arg("TRACKING")
        .arg("ON")
        .arg("BCAST")
        .arg("NOLOOP");
    let mut tracked = false;
    for route in routes.iter().filter(|route| route.tracking()) {
        tracking.arg("PREFIX").arg(&route.address);
        tracked = true;
    }
    if tracked {
        tracking.query_async::<()>(connection).await?;
    }
    Ok(())
}

/// Applies one push: an invalidation of tracked keys (or of everything,
/// after FLUSHALL/FLUSHDB), or a broadcast message.
fn apply(routes: &[Route], push: &PushInfo) {
    match push.kind {
        PushKind::Invalidate => match push.data.first() {
            Some(Value::Array(keys)) => {
                for key in keys {
                    invalidate_key(routes, key);
                }
            }
            // A NULL list: the server flushed its keys.
            _ => routes
                .iter()
                .filter(|route| route.tracking())
                .for_each(|route| route.table.flush()),
        },
        PushKind::Message | PushKind::SMessage => {
            let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
                (push.data.first(), push.data.get(1))
            else {
                return;
            };
            let Some(route) = routes
                .iter()
                .find(|route| !route.tracking() && route.address == *channel)
            else {
                return;
            };
            route
                .table
                .receive(message::decode(payload, route.table.spec().kind()));
        }
        _ => {}
    }
}

fn invalidate_key(routes: &[Route], key: &Value) {
    let Value::BulkString(key) = key else { return };
    for route in routes.iter().filter(|route| route.tracking()) {
        if let Some(id) = key.strip_prefix(route.address.as_slice()) {
            let table = &route.table;
            match crate::entity::id::RawId::parse(id) {
                Ok(id) if id.kind() == table.spec().kind() => table.apply(id.payload(), None),
                // A writer's table-wide flush (see `backlog`).
                _ if id == crate::keyspace::EVERY_ID.as_bytes() => table.flush(),
                // A tag's floor (see `l2::tier::tag`): its invalidation.
                _ if let Some(tag) = id
                    .strip_prefix(crate::keyspace::TAG.as_bytes())
                    .and_then(crate::entity::tag::Tag::parse) =>
                {
                    table.drop_tag(tag, None);
                }
                // The fleet's hot list, under the same prefix: no row.
                _ if id == crate::keyspace::HOT.as_bytes() => {}
                // A fleet herd's lease and wake list, beside a frame: no row.
                _ if id.ends_with(crate::keyspace::LEASE_SUFFIX)
                    || id.ends_with(crate::keyspace::WAKE_SUFFIX) => {}
                _ => table.malformed(),
            }
            return;
        }
    }
}

/// A client of the node `info` names, spoken to in RESP3 (pushes need it).
fn resp3(info: &ConnectionInfo) -> RedisResult<Client> {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    Client::open(info.clone().set_redis_settings(settings))
}
