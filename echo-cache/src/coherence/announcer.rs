//! How a writing node tells the others: a message `<id>:<version>` on the
//! table's channel (`broadcast`) or in its stream (`durable`). A `tracking`
//! table needs none (the server pushes its writes), except for a
//! table-wide flush (see `backlog`), which is a write of the table's flush
//! key under its tracked prefix.

use std::sync::Arc;
use std::time::Duration;

use redis::Cmd;

use super::message;
use crate::clock::millis;
use crate::connections::{Failure, Lane, Server};
use crate::entity::id::RawId;
use crate::entity::spec::{Coherence, TableSpec};
use crate::keyspace;

/// Messages kept in a durable table's stream (approximately: `MAXLEN ~`).
/// A node that falls further behind than this flushes its L1 of the table.
pub(crate) const STREAM_MAXLEN: u64 = 100_000;

/// The announcements of one table.
pub(crate) struct Announcer {
    server: Arc<Server>,
    spec: &'static TableSpec,
    /// How long a tracking table's flush key lives.
    flush_ttl: Duration,
}

impl Announcer {
    pub(crate) fn new(server: Arc<Server>, spec: &'static TableSpec, flush_ttl: Duration) -> Self {
        Announcer {
            server,
            spec,
            flush_ttl,
        }
    }

    /// Tells the other nodes that `key` changed at `version`.
    pub(crate) async fn row(&self, key: u64, version: &RawId) -> Result<(), Failure> {
        let id = RawId::new(self.spec.kind(), key);
        self.send(&message::encode(&id, version)).await
    }

    /// Tells the other nodes that every row of the table older than
    /// `version` may be stale.
    pub(crate) async fn flush(&self, version: &RawId) -> Result<(), Failure> {
        if self.spec.coherence() != Coherence::Tracking {
            return self.send(&message::encode_flush(version)).await;
        }
        let key = format!("{}{}", keyspace::prefix(self.spec), keyspace::EVERY_ID);
        let ttl_ms = millis(self.flush_ttl);
        let mut set = Cmd::new();
        set.arg("SET").arg(&key).arg(&version.to_bytes()[..]);
        set.arg("PX").arg(ttl_ms.max(1));
        let slot = keyspace::slot(key.as_bytes());
        self.server.query(Lane::Linked(slot), set).await
    }

    /// Sends `message` on the table's channel or stream, if it has one.
    async fn send(&self, message: &[u8]) -> Result<(), Failure> {
        let mut command = Cmd::new();
        match self.spec.coherence() {
            // On a cluster, sharded: to the owner of the channel's slot,
            // where the nodes subscribe, and nowhere else.
            Coherence::Broadcast if self.server.is_cluster() => {
                command.arg("SPUBLISH").arg(keyspace::channel(self.spec));
            }
            Coherence::Broadcast => {
                command.arg("PUBLISH").arg(keyspace::channel(self.spec));
            }
            Coherence::Durable => {
                command.arg("XADD").arg(keyspace::stream(self.spec));
                command
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(STREAM_MAXLEN)
                    .arg("*")
                    .arg("m");
            }
            Coherence::None | Coherence::Tracking => return Ok(()),
        }
        command.arg(message);
        self.server
            .query::<redis::Value>(Lane::Managed, command)
            .await
            .map(drop)
    }
}
