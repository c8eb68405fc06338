//! Coherence across nodes: how a write on one node evicts the rows of
//! every other.
//!
//! # The modes
//!
//! - `none`: TTL only, for entities that never change.
//! - `tracking`: RESP3 client tracking. Every node's coherence link asks the
//!   server (`CLIENT TRACKING ON BCAST NOLOOP PREFIX ecc:{<table>}:`) to
//!   push an invalidation whenever another client writes a key of a
//!   tracking table; the node evicts the named rows.
//! - `broadcast`: versioned messages, at most once. A write publishes
//!   `<id>:<version>` on `ecc:{<table>}:coh`; every node applies it
//!   newer-wins.
//! - `durable`: the same messages through a stream per table
//!   (`ecc:{<table>}:log`), read by every node through its own consumer
//!   group and acknowledged after they are applied: at least once.
//!
//! # The rules, and where each is kept
//!
//! - *The writer's own node evicts its row before the write returns*:
//!   [`Cache::put`](crate::Cache::put) and
//!   [`Cache::invalidate`](crate::Cache::invalidate) evict (or replace) the
//!   local row first, whatever the server pushes later.
//! - *A node's own fills never evict its own rows*: fills announce nothing;
//!   tracking is enabled with `NOLOOP` on the connection that writes, so the
//!   server does not echo a node's own writes back to it; a node's own
//!   broadcast or durable message comes back as a repeat, a no-op.
//! - *Versions come from write order*: a fill of a versioned table mints its
//!   version before it reads the system of record, and a write mints its
//!   version when it is called, after the caller wrote the system of
//!   record. So a fill that read before a write carries an older version
//!   than the write's invalidation. Versions are snowflakes: across nodes
//!   their order is the order of the nodes' wall clocks. Clock skew between
//!   nodes of `s` ms means a fill may be judged newer than a write that
//!   happened up to `s` ms before it, and refused if older by less than
//!   that: keep clocks synchronised (NTP keeps them within milliseconds).
//! - *L2 writes are versioned*: fills and puts write through a server-side
//!   script that never overwrites a newer frame, and an invalidation leaves
//!   a tombstone carrying its version (see `l2::script`).
//! - *Fills racing an invalidation never install*: the flight registry's
//!   per-fill token (see `flight`), plus, for versioned modes, newer-wins
//!   memory of the versions applied per id ([`Applied`]).
//! - *Losing the channel flushes*: when the connection that carries a
//!   table's invalidations is lost (closed, killed, or silent past its
//!   PING deadline), the table's L1 is flushed and its reads bypass L1 until
//!   the channel is back.
//! - *Writes reach the other nodes after an outage*: a write whose L2 drop
//!   or announcement failed is kept by its table and delivered, newer-wins,
//!   once the server answers (see `backlog`); a lane that reconnects
//!   delivers its tables' backlogs before it trusts them again.
//! - Malformed messages (a wrong shape, an id or a version of another
//!   kind) are dropped and counted, never a panic.
//!
//! # Tracking: why a GET reply and an invalidation push cannot cross
//!
//! Replies and pushes on one RESP3 connection arrive in the server's order.
//! A flight's L2 read of a tracking table and the server's invalidations
//! travel on the same link: if the GET was served before a write, its reply
//! comes before that write's invalidation push; the push then evicts the
//! row (or, if the flight has not landed yet, overtakes it through its
//! token, so it does not install). Across two connections that order is
//! lost, and the per-fill token is what closes the gap: any invalidation
//! processed between a flight's start and its landing stops the install.
//! The other order costs a row, never a stale one: the push of a write made
//! before a GET is queued to the link's task, and may be applied after
//! the flight that read the newer value landed, evicting that row.
//!
//! # Delivery bound of `tracking` and `broadcast`
//!
//! A write is acknowledged when its `put` or `invalidate` returns; by then
//! the server has queued its push (`tracking`) or its message
//! (`broadcast`) to every other node's link. A node whose link is up
//! applies it within a one-way trip plus the time its link task waits to be
//! scheduled: well under a millisecond on loopback (the coherence
//! benchmark measures it). The stale-read checker
//! (`tests/coherence_races.rs`) holds both modes to **D = 100 ms**: no read
//! that begins more than D after a write was acknowledged returns a value
//! that write replaced. Three things stretch the bound:
//!
//! - a read on another node that joins a flight started there before the
//!   write's message arrived gets what that flight read (the message
//!   detaches the flight, so it installs nothing and later reads start
//!   afresh): add the longest fill;
//! - a write acknowledged while the server was away is delivered when it
//!   is back (see the crate docs' "Convergence after an outage");
//! - a link that dies silently (half-open) delivers nothing until it is
//!   given up, within `2 × coherence_ping_every` (the next PING goes out at
//!   most one interval later and waits one more for its PONG); until then
//!   the node may serve rows older than D, from then on it bypasses L1.
//!
//! # Durable: at least once, through a consumer group per node
//!
//! A write to a `durable` table appends `<id>:<version>` to the table's
//! stream (`XADD ecc:{<table>}:log MAXLEN ~ N`); the write fails with
//! [`Error::NotDelivered`](crate::Error::NotDelivered) if the append does.
//! Each node's durable lane ([`durable`]) reads every durable stream through
//! its own consumer group, `ecc:<node name>`, on a connection of its own
//! (its reads block), applies each message newer-wins, then acknowledges
//! it: a message read and not acknowledged (connection lost, node stopped)
//! is read again, and the repeat is a no-op. A node that restarts under the
//! same name finds its group, and catches up: first the entries still
//! pending on it, then those pending on other consumers of its group
//! (`XAUTOCLAIM`), then what was written while it was away. Only then are
//! its tables trusted. What the lane cannot deliver, it flushes: an entry
//! trimmed while pending (its content is lost), or a group the stream was
//! trimmed past (the node fell more than `N` entries behind). Losing the
//! lane's connection, or a reply missing its deadline, distrusts the
//! tables as for the link. Groups of nodes gone for long (every consumer
//! idle past a retention, 24 h by default) are destroyed by the nodes that
//! remain. Delivery bound: a live node reads a message as soon as it is
//! appended (its read is blocked on the stream; after a cluster failover,
//! within the 50 ms the lane takes to see the new owner); a node that cannot read
//! stops serving the table from L1 within the read's `BLOCK` time plus the
//! deadline. The stale-read checker holds `durable` to the same D as the
//! link's modes (100 ms, above).

mod announcer;
pub(crate) mod durable;
pub(crate) mod link;
pub(crate) mod message;

pub(crate) use announcer::Announcer;

use futures_util::future::BoxFuture;

use crate::entity::spec::TableSpec;
use message::Message;

/// A table, as the lanes that carry its invalidations see it.
pub(crate) trait Target: Send + Sync {
    fn spec(&self) -> &'static TableSpec;
    /// Drops every row; no flight under way will install.
    fn flush(&self);
    /// Applies a table-wide invalidation at `version`: newer-wins, a
    /// repeat or a late one is a no-op; else as [`flush`](Self::flush), and
    /// no value older than `version` is kept afterwards.
    fn flush_at(&self, version: u64) {
        let _ = version;
        self.flush();
    }
    /// Applies an invalidation of every row of `tag` (at `version`, if it
    /// has one: newer-wins).
    fn drop_tag(&self, tag: crate::entity::tag::Tag, version: Option<u64>);
    /// Applies an invalidation of `key` (at `version`, if it has one).
    fn apply(&self, key: u64, version: Option<u64>);
    /// The invalidation channel is lost: flush and bypass L1.
    fn distrust(&self);
    /// The invalidation channel is up: use L1 again.
    fn trust(&self);
    /// Counts a malformed invalidation message, which was dropped.
    fn malformed(&self);
    /// Delivers the writes this node kept while the server was away;
    /// whether all were.
    fn redeliver(&self) -> BoxFuture<'_, bool>;
    /// Applies a message of another node: an invalidation of a row, or a
    /// table-wide flush; counts one that is not well-formed (`None`).
    fn receive(&self, message: Option<Message>) {
        match message {
            Some(Message::Row { key, version }) => self.apply(key, Some(version)),
            Some(Message::Flush { version }) => self.flush_at(version),
            Some(Message::Tag { tag, version }) => self.drop_tag(tag, Some(version)),
            None => self.malformed(),
        }
    }
}
