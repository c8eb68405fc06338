//! The coherence link of a node: one RESP3 connection that carries the
//! server's invalidation pushes (`tracking`) and the messages of
//! `broadcast` tables, and that writes and reads the L2 keys of `tracking`
//! tables, so that `NOLOOP` keeps the node's own writes from coming back.
//!
//! A session connects, enables tracking (`CLIENT TRACKING ON BCAST NOLOOP`
//! with the prefix of every tracking table), subscribes to the channel of
//! every broadcast table, then trusts their L1. It ends when the connection
//! is lost (closed by the server, killed, dropped for its output buffer) or
//! silent past the PING deadline; its tables are then flushed and bypassed
//! until the next session is up. Sessions follow each other, with a backoff,
//! until the cache is dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

use super::message;
use crate::spec::Coherence;
use crate::table::AnyTable;

/// Settings of the link.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// How often the link checks that the connection is alive.
    pub(crate) ping_every: Duration,
    /// How long a connect or a PING may take before the link is lost.
    pub(crate) deadline: Duration,
}

/// The connection of the current session, for the tracking tables' L2
/// operations. `None` between sessions.
#[derive(Default)]
pub(crate) struct Current(Mutex<Option<MultiplexedConnection>>);

impl Current {
    pub(crate) fn get(&self) -> Option<MultiplexedConnection> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, connection: Option<MultiplexedConnection>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = connection;
    }
}

/// Runs sessions until `stop` is dropped.
pub(crate) async fn run(
    client: Client,
    tables: Vec<Arc<dyn AnyTable>>,
    current: Arc<Current>,
    settings: Settings,
    mut stop: watch::Receiver<()>,
) {
    let client = match resp3(&client) {
        Ok(client) => client,
        Err(error) => {
            tracing::error!("coherence link: cannot make a RESP3 client: {error}");
            return;
        }
    };
    let mut backoff = Duration::from_millis(10);
    loop {
        let outcome = tokio::select! {
            outcome = session(&client, &tables, &current, &settings) => outcome,
            _ = stop.changed() => return,
        };
        current.set(None);
        for table in &tables {
            table.distrust();
        }
        match outcome {
            Ok(()) => backoff = Duration::from_millis(10),
            Err(reason) => {
                tracing::warn!("coherence link lost, L1 of its tables flushed: {reason}");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// One session: connect, subscribe, trust, then apply pushes until the
/// connection is lost. Returns why it ended.
async fn session(
    client: &Client,
    tables: &[Arc<dyn AnyTable>],
    current: &Current,
    settings: &Settings,
) -> Result<(), String> {
    let (pushes, mut received) = mpsc::unbounded_channel();
    let config = AsyncConnectionConfig::new()
        .set_push_sender(pushes)
        .set_connection_timeout(Some(settings.deadline))
        .set_response_timeout(Some(settings.deadline));
    let mut connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| format!("connect: {e}"))?;

    let mut tracking = redis::cmd("CLIENT");
    tracking
        .arg("TRACKING")
        .arg("ON")
        .arg("BCAST")
        .arg("NOLOOP");
    let mut tracked = false;
    for table in tables {
        let spec = table.spec();
        match spec.coherence() {
            Coherence::Tracking => {
                tracking.arg("PREFIX").arg(crate::keyspace::prefix(spec));
                tracked = true;
            }
            Coherence::Broadcast => connection
                .subscribe(crate::keyspace::channel(spec))
                .await
                .map_err(|e| format!("subscribe: {e}"))?,
            _ => {}
        }
    }
    if tracked {
        tracking
            .query_async::<()>(&mut connection)
            .await
            .map_err(|e| format!("CLIENT TRACKING: {e}"))?;
    }
    current.set(Some(connection.clone()));
    for table in tables {
        table.trust();
    }

    let mut ping = tokio::time::interval(settings.ping_every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            push = received.recv() => match push {
                None => return Err("the connection ended".into()),
                Some(push) if push.kind == PushKind::Disconnection => {
                    return Err("the server closed the connection".into());
                }
                Some(push) => apply(tables, &push),
            },
            _ = ping.tick() => {
                let command = redis::cmd("PING");
                let reply = command.query_async::<Value>(&mut connection);
                match tokio::time::timeout(settings.deadline, reply).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Err(format!("PING: {e}")),
                    Err(_) => return Err(format!("no PONG within {:?}", settings.deadline)),
                }
            }
        }
    }
}

/// Applies one push: an invalidation of tracked keys (or of everything,
/// after FLUSHALL/FLUSHDB), or a broadcast message.
fn apply(tables: &[Arc<dyn AnyTable>], push: &PushInfo) {
    match push.kind {
        PushKind::Invalidate => match push.data.first() {
            Some(Value::Array(keys)) => {
                for key in keys {
                    invalidate_key(tables, key);
                }
            }
            // A NULL list: the server flushed its keys.
            _ => tables
                .iter()
                .filter(|t| t.spec().coherence() == Coherence::Tracking)
                .for_each(|table| table.flush()),
        },
        PushKind::Message => {
            let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
                (push.data.first(), push.data.get(1))
            else {
                return;
            };
            let Some(table) = tables
                .iter()
                .find(|t| crate::keyspace::channel(t.spec()).as_bytes() == channel.as_slice())
            else {
                return;
            };
            match message::decode(payload, table.spec().kind()) {
                Some((key, version)) => table.apply(key, Some(version)),
                None => table.malformed(),
            }
        }
        _ => {}
    }
}

fn invalidate_key(tables: &[Arc<dyn AnyTable>], key: &Value) {
    let Value::BulkString(key) = key else { return };
    for table in tables
        .iter()
        .filter(|t| t.spec().coherence() == Coherence::Tracking)
    {
        let prefix = crate::keyspace::prefix(table.spec());
        if let Some(id) = key.strip_prefix(prefix.as_bytes()) {
            match crate::RawId::parse(id) {
                Ok(id) if id.kind() == table.spec().kind() => table.apply(id.payload(), None),
                _ => table.malformed(),
            }
            return;
        }
    }
}

/// The same server, spoken to in RESP3 (pushes need it).
fn resp3(client: &Client) -> redis::RedisResult<Client> {
    let info = client.get_connection_info().clone();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    Client::open(info.set_redis_settings(settings))
}
