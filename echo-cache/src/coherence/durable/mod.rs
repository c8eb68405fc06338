//! The durable lane of a node: the messages of every `durable` table, read
//! from the table's stream (`ecc:{<table>}:log`) through the node's own
//! consumer group, applied newer-wins, then acknowledged. At least once: a
//! message is acknowledged only after it was applied, so one read and not
//! applied (the connection was lost, the node stopped) is read again; a
//! repeat is a no-op.
//!
//! # Groups and consumers
//!
//! Each node reads each durable stream through the group `ecc:<node>`, as
//! the consumer `<node>` (`node` is the stable node name of the cache's
//! configuration; two live processes must not share one, or each would see
//! only part of the messages). A group is created at `$`: a node that starts
//! has an empty L1 and needs only what comes after. A node that restarts
//! under the same name finds its group, and with it what it missed.
//!
//! # A session
//!
//! A session opens its own connection (the reads block, so they must not
//! share a connection with other operations), then, for each stream:
//!
//! 1. creates the group (`XGROUP CREATE … $ MKSTREAM`; an existing one is
//!    kept), and destroys the groups of nodes gone for long (below);
//! 2. flushes the table if the stream was trimmed past the group's
//!    last-delivered entry (the node fell behind by more than the stream's
//!    `MAXLEN`: messages were lost before it read them);
//! 3. applies and acknowledges the entries still pending on this consumer
//!    (read but not acknowledged before), then reclaims with `XAUTOCLAIM`
//!    those pending on other consumers of the group for longer than
//!    [`Settings::claim_idle`]. An entry deleted (trimmed) while pending has
//!    lost its content: it is acknowledged and its table flushed;
//! 4. reads (without waiting), applies and acknowledges the entries not yet
//!    delivered to the group, up to the stream's newest entry at step 2:
//!    what was written while the node was away.
//!
//! Only then are the tables trusted. The session then reads new entries
//! (`XREADGROUP … BLOCK`, at most [`Settings::batch`] per stream), applies
//! them and acknowledges each batch; after a batch it checks that the stream
//! was not trimmed up to the batch's first entry (if it was, entries before
//! it may have been trimmed unread: the table is flushed). A connection
//! error, or a reply missing its deadline (a read's is its `BLOCK` time plus
//! [`Settings::deadline`]), ends the session: every table is distrusted
//! (flushed, then bypassed) until the next session, after a backoff, is up.
//!
//! # Groups of nodes gone for long
//!
//! At every session start and every [`Settings::cleanup_every`], the lane
//! lists the groups of each stream and destroys every `ecc:*` group but its
//! own whose consumers have all been idle longer than
//! [`Settings::retention`] (a live node's consumer is never idle longer
//! than its read's `BLOCK` time). A group without consumers (its node died
//! between creating it and reading) is destroyed once this node has seen it
//! without consumers for as long. A node whose group was destroyed while it
//! was away starts afresh at `$`, which is sound: a node away has its tables
//! distrusted, so their L1 is empty.
//!
//! # Bounds
//!
//! Every command has a deadline; nothing is queued: a session reads a batch,
//! applies it in place, acknowledges it, then reads the next. The server
//! keeps at most one batch per stream pending on a live node.

mod reply;

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisResult, Value};
use tokio::sync::watch;

use super::Target;
use super::message;
use crate::clock::millis;
use crate::connections::{Server, TOPOLOGY_EVERY};
use reply::{
    Entry, EntryId, bytes, entries_of, field, int, items, streams, trimmed_past, trimmed_up_to,
};

/// The first backoff between two sessions; it doubles up to [`MAX_BACKOFF`]
/// while sessions fail before they are up.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Settings of the durable lane.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// How long a connect or a command may take (a blocking read: its
    /// `BLOCK` time plus this) before the session is lost.
    pub(crate) deadline: Duration,
    /// How long a read waits for new entries (`BLOCK`). A server that
    /// stopped answering is noticed within `block + deadline`.
    pub(crate) block: Duration,
    /// Entries read at most per stream and per read (`COUNT`).
    pub(crate) batch: usize,
    /// Entries pending on another consumer of this node's group for longer
    /// than this are reclaimed at session start.
    pub(crate) claim_idle: Duration,
    /// A group of another node whose consumers have all been idle longer
    /// than this is destroyed.
    pub(crate) retention: Duration,
    /// How often, besides at session start, groups of nodes gone for long
    /// are looked for.
    pub(crate) cleanup_every: Duration,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            deadline: Duration::from_secs(1),
            block: Duration::from_secs(1),
            batch: 512,
            claim_idle: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 3600),
            cleanup_every: Duration::from_secs(300),
        }
    }
}

/// Runs sessions on `server` until `stop`'s sender is dropped. `tables` are
/// the durable tables of the cache, `node` the stable node name.
pub(crate) async fn run(
    server: Arc<Server>,
    tables: Vec<Arc<dyn Target>>,
    node: String,
    settings: Settings,
    mut stop: watch::Receiver<()>,
) {
    if tables.is_empty() {
        return;
    }
    let mut lane = Reader::new(tables, &node, settings);
    let mut backoff = MIN_BACKOFF;
    loop {
        let mut up = false;
        let outcome = tokio::select! {
            outcome = lane.session(&server, &mut up) => outcome,
            _ = stop.changed() => return,
        };
        lane.tables.iter().for_each(|table| table.distrust());
        let Err(reason) = outcome;
        tracing::warn!(
            node = lane.node,
            "durable lane lost, L1 of its tables flushed: {reason}"
        );
        if up {
            backoff = MIN_BACKOFF;
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The lane's state across sessions.
struct Reader {
    tables: Vec<Arc<dyn Target>>,
    /// The stream of each table, at the table's index.
    streams: Vec<String>,
    node: String,
    /// `ecc:<node>`.
    group: String,
    settings: Settings,
    /// Groups of other nodes (stream index, name) seen without consumers,
    /// and since when.
    consumerless: HashMap<(usize, Vec<u8>), Instant>,
}

impl Reader {
    fn new(tables: Vec<Arc<dyn Target>>, node: &str, settings: Settings) -> Reader {
        let streams = tables
            .iter()
            .map(|table| crate::keyspace::stream(table.spec()))
            .collect();
        Reader {
            tables,
            streams,
            node: node.to_owned(),
            group: format!("ecc:{node}"),
            settings,
            consumerless: HashMap::new(),
        }
    }

    /// One session: connect, create the groups, catch up, trust, then read
    /// until the connection is lost. Sets `up` once the tables are trusted.
    async fn session(&mut self, server: &Server, up: &mut bool) -> Result<Infallible, String> {
        // On a cluster a lane reads one table's stream (a read of streams
        // on several slots would be refused): on the node that serves it.
        let slot = crate::keyspace::slot(self.streams[0].as_bytes());
        let owner = server.owner(slot).await?;
        let client = redis::Client::open(owner.info.clone()).map_err(|e| e.to_string())?;
        let deadline = self.settings.deadline;
        let read_deadline = self.settings.block + deadline;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(deadline))
            .set_response_timeout(Some(read_deadline));
        let mut connection = bounded(
            "connect",
            deadline,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await?
        .map_err(|e| format!("connect: {e}"))?;
        let mut name = redis::cmd("CLIENT");
        name.arg("SETNAME").arg(client_name(&self.node));
        query(&mut connection, "CLIENT SETNAME", deadline, &name).await?;

        // The newest entry of each stream now, if it was not delivered to
        // the group yet: what the node catches up to before its tables are
        // trusted.
        let mut newest = Vec::with_capacity(self.streams.len());
        for index in 0..self.streams.len() {
            self.create_group(&mut connection, index).await?;
            let delivered = self.survey(&mut connection, index).await?;
            let mut info = redis::cmd("XINFO");
            info.arg("STREAM").arg(&self.streams[index]);
            let info = query(&mut connection, "XINFO STREAM", deadline, &info).await?;
            if delivered.is_some_and(|delivered| trimmed_past(&info, delivered)) {
                self.tables[index].flush();
            }
            let last = field(&info, "last-generated-id")
                .and_then(bytes)
                .and_then(EntryId::parse);
            newest.push(last.filter(|&last| delivered.is_some_and(|d| d < last)));
        }
        self.drain_own(&mut connection).await?;
        for index in 0..self.streams.len() {
            self.reclaim(&mut connection, index).await?;
        }
        self.catch_up(&mut connection, &newest).await?;
        // The server is back: what this node's writes could not deliver
        // while it was away goes out before its tables are trusted (the
        // delivery task retries what fails here).
        server.answered();
        for table in &self.tables {
            table.redeliver().await;
        }
        self.tables.iter().for_each(|table| table.trust());
        *up = true;

        let read = self.read_new(Some(self.settings.block));
        let mut next_cleanup = Instant::now() + self.settings.cleanup_every;
        let mut watch = tokio::time::interval(TOPOLOGY_EVERY);
        loop {
            // The topology is watched while the read blocks: after a
            // failover, writes reach the new master at once, while a read
            // blocked on the old one is redirected only by its cron.
            let reply = {
                let reading = query(&mut connection, "XREADGROUP", read_deadline, &read);
                tokio::pin!(reading);
                loop {
                    tokio::select! {
                        reply = &mut reading => break reply?,
                        _ = watch.tick(), if server.is_cluster() => {
                            if server.owner(slot).await?.name != owner.name {
                                return Err(format!("the slot of {} moved", self.streams[0]));
                            }
                        }
                    }
                }
            };
            self.apply_new(&mut connection, &reply).await?;
            if Instant::now() >= next_cleanup {
                for index in 0..self.streams.len() {
                    self.survey(&mut connection, index).await?;
                }
                next_cleanup = Instant::now() + self.settings.cleanup_every;
            }
        }
    }

    /// Creates this node's group on stream `index`, at `$`, unless it
    /// exists.
    async fn create_group(
        &self,
        connection: &mut MultiplexedConnection,
        index: usize,
    ) -> Result<(), String> {
        let mut create = redis::cmd("XGROUP");
        create
            .arg("CREATE")
            .arg(&self.streams[index])
            .arg(&self.group)
            .arg("$")
            .arg("MKSTREAM");
        let created = bounded(
            "XGROUP CREATE",
            self.settings.deadline,
            create.query_async::<Value>(connection),
        )
        .await?;
        match created {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(format!("XGROUP CREATE: {e}")),
        }
    }

    /// Lists the groups of stream `index`: destroys those of nodes gone for
    /// long, and returns the last-delivered id of this node's group.
    async fn survey(
        &mut self,
        connection: &mut MultiplexedConnection,
        index: usize,
    ) -> Result<Option<EntryId>, String> {
        let deadline = self.settings.deadline;
        let stream = self.streams[index].clone();
        let stream = stream.as_str();
        let mut list = redis::cmd("XINFO");
        list.arg("GROUPS").arg(stream);
        let groups = query(connection, "XINFO GROUPS", deadline, &list).await?;
        let now = Instant::now();
        let retention = millis(self.settings.retention);
        let mut ours = None;
        let mut gone = Vec::new();
        let mut consumerless = HashSet::new();
        for group in items(&groups) {
            let Some(name) = field(group, "name").and_then(bytes) else {
                continue;
            };
            if name == self.group.as_bytes() {
                ours = field(group, "last-delivered-id")
                    .and_then(bytes)
                    .and_then(EntryId::parse);
                continue;
            }
            if !name.starts_with(b"ecc:") {
                continue;
            }
            let mut list = redis::cmd("XINFO");
            list.arg("CONSUMERS").arg(stream).arg(name);
            let consumers =
                match bounded("XINFO CONSUMERS", deadline, list.query_async(connection)).await? {
                    Ok(consumers) => consumers,
                    // Destroyed meanwhile (by another node's cleanup).
                    Err(e) if e.code() == Some("NOGROUP") => continue,
                    Err(e) => return Err(format!("XINFO CONSUMERS: {e}")),
                };
            let consumers = items(&consumers);
            if consumers.is_empty() {
                // Its node died before it read: gone once seen so for long.
                let since = *self
                    .consumerless
                    .entry((index, name.to_vec()))
                    .or_insert(now);
                consumerless.insert(name.to_vec());
                if now.duration_since(since) > self.settings.retention {
                    gone.push(name.to_vec());
                }
                continue;
            }
            let idle = consumers.iter().all(|consumer| {
                field(consumer, "idle")
                    .and_then(int)
                    .and_then(|idle| u64::try_from(idle).ok())
                    .is_some_and(|idle| idle > retention)
            });
            if idle {
                gone.push(name.to_vec());
            }
        }
        self.consumerless
            .retain(|(at, name), _| *at != index || consumerless.contains(name));
        for name in gone {
            let mut destroy = redis::cmd("XGROUP");
            destroy.arg("DESTROY").arg(stream).arg(&name);
            query(connection, "XGROUP DESTROY", deadline, &destroy).await?;
            self.consumerless.remove(&(index, name.clone()));
            tracing::info!(
                node = self.node,
                stream,
                group = %String::from_utf8_lossy(&name),
                "destroyed the consumer group of a node gone for long"
            );
        }
        Ok(ours)
    }

    /// Applies and acknowledges every entry pending on this consumer.
    async fn drain_own(&self, connection: &mut MultiplexedConnection) -> Result<(), String> {
        // Where each stream's pending list is read from next; `None` once
        // it is drained.
        let mut cursors = vec![Some(EntryId::ZERO); self.streams.len()];
        loop {
            let open: Vec<usize> = (0..cursors.len())
                .filter(|&i| cursors[i].is_some())
                .collect();
            if open.is_empty() {
                return Ok(());
            }
            let mut read = self.read_group();
            read.arg("STREAMS");
            for &index in &open {
                read.arg(&self.streams[index]);
            }
            for &index in &open {
                read.arg(cursors[index].unwrap_or_default().to_string());
            }
            let reply = query(connection, "XREADGROUP", self.settings.deadline, &read).await?;
            let replies = streams(&reply)?;
            let mut acks = redis::pipe();
            for &index in &open {
                let entries = match replies
                    .iter()
                    .find(|(name, _)| *name == self.streams[index].as_bytes())
                {
                    Some((_, entries)) => entries_of(entries)?,
                    None => Vec::new(),
                };
                let Some(last) = entries.last() else {
                    cursors[index] = None;
                    continue;
                };
                cursors[index] = Some(last.id);
                let ids = apply_all(&*self.tables[index], &entries);
                self.ack(&mut acks, index, &ids);
            }
            send(connection, "XACK", self.settings.deadline, &acks).await?;
        }
    }

    /// Reclaims, applies and acknowledges the entries pending on other
    /// consumers of this node's group on stream `index` for longer than
    /// [`Settings::claim_idle`].
    async fn reclaim(
        &self,
        connection: &mut MultiplexedConnection,
        index: usize,
    ) -> Result<(), String> {
        let min_idle = millis(self.settings.claim_idle);
        let mut cursor = EntryId::ZERO;
        loop {
            let mut claim = redis::cmd("XAUTOCLAIM");
            claim
                .arg(&self.streams[index])
                .arg(&self.group)
                .arg(&self.node)
                .arg(min_idle)
                .arg(cursor.to_string())
                .arg("COUNT")
                .arg(self.settings.batch);
            let reply = query(connection, "XAUTOCLAIM", self.settings.deadline, &claim).await?;
            let parts = items(&reply);
            let next = parts
                .first()
                .and_then(bytes)
                .and_then(EntryId::parse)
                .ok_or("XAUTOCLAIM: a reply without a cursor")?;
            let claimed = match parts.get(1) {
                Some(entries) => entries_of(entries)?,
                None => Vec::new(),
            };
            let mut ids = apply_all(&*self.tables[index], &claimed);
            // Redis 7+: the entries deleted while pending (already removed
            // from the pending list). Their content is lost.
            let deleted: Vec<EntryId> = parts
                .get(2)
                .map(items)
                .unwrap_or_default()
                .iter()
                .filter_map(|id| bytes(id).and_then(EntryId::parse))
                .collect();
            if !deleted.is_empty() {
                self.tables[index].flush();
                ids.extend(deleted);
            }
            let mut acks = redis::pipe();
            self.ack(&mut acks, index, &ids);
            send(connection, "XACK", self.settings.deadline, &acks).await?;
            if next == EntryId::ZERO {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Reads, applies and acknowledges the entries not yet delivered to the
    /// group, without waiting, until the reads of each stream reach its
    /// entry of `newest` (or nothing is left to read).
    async fn catch_up(
        &self,
        connection: &mut MultiplexedConnection,
        newest: &[Option<EntryId>],
    ) -> Result<(), String> {
        let read = self.read_new(None);
        let mut behind: Vec<Option<EntryId>> = newest.to_vec();
        while behind.iter().any(Option::is_some) {
            let reply = query(connection, "XREADGROUP", self.settings.deadline, &read).await?;
            let read = self.apply_new(connection, &reply).await?;
            if read.is_empty() {
                return Ok(());
            }
            for (index, last) in read {
                behind[index] = behind[index].filter(|&newest| last < newest);
            }
        }
        Ok(())
    }

    /// Applies a reply of the read of new entries, acknowledges them, and
    /// flushes a table whose stream was trimmed up to what was read. Returns
    /// the last entry read of each stream that had any.
    async fn apply_new(
        &self,
        connection: &mut MultiplexedConnection,
        reply: &Value,
    ) -> Result<Vec<(usize, EntryId)>, String> {
        let mut acks = redis::pipe();
        let mut checks = Vec::new();
        for (name, entries) in streams(reply)? {
            let Some(index) = self.streams.iter().position(|s| s.as_bytes() == name) else {
                continue;
            };
            let entries = entries_of(entries)?;
            let Some(first) = entries.first() else {
                continue;
            };
            checks.push((index, first.id, entries.last().map_or(first.id, |e| e.id)));
            let ids = apply_all(&*self.tables[index], &entries);
            self.ack(&mut acks, index, &ids);
            acks.cmd("XINFO").arg("STREAM").arg(&self.streams[index]);
        }
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let replies = send(connection, "XACK", self.settings.deadline, &acks).await?;
        let mut read = Vec::with_capacity(checks.len());
        for (n, (index, first, last)) in checks.into_iter().enumerate() {
            let info = replies
                .get(2 * n + 1)
                .ok_or("XINFO STREAM: no reply in the pipeline")?;
            if trimmed_up_to(info, first) {
                self.tables[index].flush();
            }
            read.push((index, last));
        }
        Ok(read)
    }

    /// `XREADGROUP GROUP <group> <node> COUNT <batch>`.
    fn read_group(&self) -> Cmd {
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(&self.group)
            .arg(&self.node)
            .arg("COUNT")
            .arg(self.settings.batch.max(1));
        read
    }

    /// The read of new entries of every stream, waiting at most `block`
    /// for one if given.
    fn read_new(&self, block: Option<Duration>) -> Cmd {
        let mut read = self.read_group();
        if let Some(block) = block {
            let block = millis(block);
            // `BLOCK 0` would wait for ever.
            read.arg("BLOCK").arg(block.max(1));
        }
        read.arg("STREAMS");
        for stream in &self.streams {
            read.arg(stream);
        }
        for _ in &self.streams {
            read.arg(">");
        }
        read
    }

    /// Adds to `acks` the acknowledgment of `ids` on stream `index`.
    fn ack(&self, acks: &mut Pipeline, index: usize, ids: &[EntryId]) {
        if ids.is_empty() {
            return;
        }
        let ack = acks.cmd("XACK").arg(&self.streams[index]).arg(&self.group);
        for id in ids {
            ack.arg(id.to_string());
        }
    }
}

/// Applies `entries` to `table`, newer-wins (a repeat is a no-op); returns
/// their ids, to acknowledge. A malformed message is counted and dropped; a
/// deleted entry, whose content is lost, flushes the table.
fn apply_all(table: &dyn Target, entries: &[Entry<'_>]) -> Vec<EntryId> {
    let kind = table.spec().kind();
    let mut lost = false;
    for entry in entries {
        let Some(fields) = entry.fields else {
            lost = true;
            continue;
        };
        let decoded = field(fields, "m")
            .and_then(bytes)
            .and_then(|m| message::decode(m, kind));
        table.receive(decoded);
    }
    if lost {
        table.flush();
    }
    entries.iter().map(|entry| entry.id).collect()
}

/// The name of the lane's connection (`CLIENT LIST`), for operators:
/// `ecc-durable:<node>`, with characters a client name cannot hold replaced.
fn client_name(node: &str) -> String {
    let node: String = node
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    format!("ecc-durable:{node}")
}

/// `request`'s outcome, if it comes within `within`.
async fn bounded<T>(
    what: &str,
    within: Duration,
    request: impl Future<Output = RedisResult<T>>,
) -> Result<RedisResult<T>, String> {
    tokio::time::timeout(within, request)
        .await
        .map_err(|_| format!("{what}: no answer within {within:?}"))
}

async fn query(
    connection: &mut MultiplexedConnection,
    what: &str,
    within: Duration,
    cmd: &Cmd,
) -> Result<Value, String> {
    bounded(what, within, cmd.query_async::<Value>(connection))
        .await?
        .map_err(|e| format!("{what}: {e}"))
}

/// Sends `pipeline` (if it holds anything); the reply of each command.
async fn send(
    connection: &mut MultiplexedConnection,
    what: &str,
    within: Duration,
    pipeline: &Pipeline,
) -> Result<Vec<Value>, String> {
    if pipeline.is_empty() {
        return Ok(Vec::new());
    }
    bounded(what, within, pipeline.query_async::<Vec<Value>>(connection))
        .await?
        .map_err(|e| format!("{what}: {e}"))
}

#[cfg(test)]
mod tests;
