//! How a writing node tells the others: a message `<id>:<version>` on the
//! table's channel (`broadcast`) or in its stream (`durable`). A `tracking`
//! table needs none: the server pushes its writes, a table-wide
//! invalidation's too (the write of the table's floor key, under its
//! tracked prefix).

use std::sync::Arc;

use redis::Cmd;

use super::message;
use crate::connections::{Failure, Lane, Server};
use crate::entity::id::RawId;
use crate::entity::spec::{Coherence, TableSpec};
use crate::entity::tag::Tag;
use crate::keyspace;

/// Messages kept in a durable table's stream (approximately: `MAXLEN ~`).
/// A node that falls further behind than this flushes its L1 of the table.
pub(crate) const STREAM_MAXLEN: u64 = 100_000;

/// The announcements of one table.
pub(crate) struct Announcer {
    server: Arc<Server>,
    spec: &'static TableSpec,
}

impl Announcer {
    pub(crate) fn new(server: Arc<Server>, spec: &'static TableSpec) -> Self {
        Announcer { server, spec }
    }

    /// Tells the other nodes that `key` changed at `version`.
    pub(crate) async fn row(&self, key: u64, version: &RawId) -> Result<(), Failure> {
        let id = RawId::new(self.spec.kind(), key);
        self.send(&message::encode(&id, version)).await
    }

    /// Tells the other nodes that every row of the table older than
    /// `version` is stale (`tracking`: nothing to send, the write of the
    /// table's floor was pushed).
    pub(crate) async fn flush(&self, version: &RawId) -> Result<(), Failure> {
        self.send(&message::encode_flush(version)).await
    }

    /// Tells the other nodes that every row of `tag` older than `version`
    /// is stale (`tracking`: nothing to send, the write of the tag's floor
    /// was pushed).
    pub(crate) async fn tag(&self, tag: Tag, version: &RawId) -> Result<(), Failure> {
        self.send(&message::encode_tag(tag, version)).await
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
