//! One table's view of L2: its keys, its frames, its codec.
//!
//! Every table, whatever its coherence mode, writes through
//! [`WRITE_IF_NEWER`]: fills and puts never overwrite a newer frame, and
//! invalidations leave a tombstone carrying their version, so a slow fill
//! that read the system of record before a write cannot land in L2 after
//! that write's invalidation, on any node. (A `none` table too: its
//! entities are immutable, but `invalidate` and `put` are public on every
//! table and promise that the next fetch reads afresh. A plain `SET` would
//! let a slow fill put back what a `DEL` just removed; a `SET NX` against a
//! tombstone would keep every fill out of L2 for the tombstone's life; the
//! script costs the same round trip as a `SET` and neither.) A tombstone
//! lives for the tombstone TTL; a fill whose version is older than half of
//! it does not write L2 at all, so it cannot outlive the tombstone that
//! would have stopped it.
//!
//! A key of another Redis type (a list, a hash left by someone else) reads
//! as a bad frame, and the next fill overwrites it. `MGET` reads it as
//! nothing; the fill that follows overwrites it all the same (a `SET NX`
//! that it refuses looks at its type) and counts it then, as a put or an
//! invalidation that overwrites one does (the script tells).
//!
//! A `tracking` table's fills are written with `SET … NX` instead (see
//! [`How::Vacant`]); its puts and invalidations go through the script, and
//! the server may echo those back to the writing node, which then drops its
//! own fresh row: a wasted L1 row, never a stale one.
//!
//! # The floor: a table-wide invalidation in one key
//!
//! [`Tier::bury`] writes the table's *floor*, `<prefix>*` (no id is `*`):
//! the version of its newest table-wide invalidation. On one server, every
//! read of the table fetches the floor with the frame (`MGET <key> <floor>`, one round
//! trip) and reads a frame older than it as [`Found::Buried`], a miss; the
//! script refuses a write older than it. So a table-wide invalidation
//! costs one key write whatever the table's size, no frame older than it
//! is read again, and a fill that read the system of record before it (and
//! so minted an older version) never lands, on any node. The floor lives
//! as long as a frame written before it may ([`Tier::floor_ttl_ms`]).
//!
//! On a cluster the floor is not read with the frames: a spread table's
//! frames are on other slots, and while a slot migrates, a command on two
//! of its keys, one moved and one not, is refused (`TRYAGAIN`) for as long
//! as the migration lasts (the mid-migration cluster tests saw every L2
//! read of a table fail). Its reads and writes skip the floor, and
//! [`Tier::bury`] writes tombstones over the table's frames first
//! ([`DROP_OLDER`], by `SCAN`), as the backlog's overflow did.

use std::sync::Arc;
use std::time::Duration;

use redis::Cmd;
use tracing::{Instrument, Span, field};

use super::frame::{self, Frame, HEADER};
use super::script::{DROP_OLDER, WRITE_IF_NEWER};
use super::shape;
use super::{Codec, Warning};
use crate::connections::{Failure, Lane, Server};
use crate::entity::id::RawId;
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, Coherence, Placement, TableSpec};
use crate::entity::tag::Tag;
use crate::keyspace;
use crate::report::stats::Counters;

mod batch;
mod hot;
pub(crate) mod lease;
mod tag;
#[cfg(test)]
pub(crate) use hot::DECAY;

pub(crate) struct Tier<T> {
    server: Arc<Server>,
    codec: Arc<dyn Codec<T>>,
    spec: &'static TableSpec,
    prefix: String,
    /// The cluster slot of every key of the table (its hashtag's).
    slot: u16,
    schema: u64,
    max_value_bytes: usize,
    tombstone_ttl: Duration,
    /// `stale_if_error_ms`: frames outlive their logical expiry by it (see
    /// [`frame`]).
    grace_ms: u64,
    /// The table's floor key, `<prefix>*` (see the module doc).
    floor_key: Vec<u8>,
    /// How long a `herd = "fleet"` table's lease lasts (see [`lease`]).
    lease_ms: u64,
    read_warning: Warning,
    write_warning: Warning,
}

/// Which write a frame is: a fill (which read `Found::Bad` in L2 or not),
/// or a put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Write {
    Fill { over_bad: bool },
    Put,
}

/// How a frame is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// `SET … PX NX`: a tracking table's fill. The server does not echo a
    /// plain command back to the connection that sent it (`NOLOOP`), but it
    /// does echo a script's writes (Redis 7.0, Valkey 8.0), and a node's own fills must
    /// not evict its own rows; NX never overwrites a frame or a tombstone,
    /// newer or not, so it is as safe as the script for a fill.
    Vacant,
    /// Through [`WRITE_IF_NEWER`].
    Versioned,
}

/// What L2 holds for a key.
pub(crate) enum Found<T> {
    /// No key.
    Nothing,
    /// L2 did not answer (it is down, slow, or refused the read).
    Failed,
    /// A frame that is not a value of this table (counted and logged).
    Bad,
    /// A value, its version, and what is left of its life in milliseconds
    /// (the frame's logical expiry, less now): its L1 row lives no longer.
    Value(RawId, T, u64),
    /// A value past its logical expiry, kept for the table's grace
    /// (`stale_if_error_ms`): a miss, but a fallback if the load fails.
    Expired(RawId, T),
    /// The tombstone of an invalidation at this version: a miss.
    Tombstone(RawId),
    /// A frame older than the table's floor, this version (a table-wide
    /// invalidation): a miss, which the fill replaces.
    Buried(RawId),
}

/// The traced shape of `T`'s values, for its schema stamp; `None`, with a
/// warning, if it cannot be traced: the stamp then sees only the declared
/// type's own fields (see the crate docs, "L2").
fn traced<T: Cached>(spec: &TableSpec) -> Option<u64> {
    shape::trace::<T>()
        .inspect_err(|why| {
            tracing::warn!(
                table = spec.name(),
                "the schema stamp of `{}` sees only its own fields, not inside nested \
                 types: its shape cannot be traced ({why})",
                spec.type_name()
            );
        })
        .ok()
}

impl<T: Cached> Tier<T> {
    pub(crate) fn new(
        server: Arc<Server>,
        codec: Arc<dyn Codec<T>>,
        spec: &'static TableSpec,
        max_value_bytes: usize,
        tombstone_ttl: Duration,
        lease: Duration,
    ) -> Tier<T> {
        Tier {
            schema: frame::schema(spec.fingerprint(), traced::<T>(spec), codec.name()),
            grace_ms: spec.stale_if_error_ms(),
            prefix: keyspace::prefix(spec),
            floor_key: format!("{}{}", keyspace::prefix(spec), keyspace::EVERY_ID).into_bytes(),
            slot: keyspace::slot(keyspace::prefix(spec).as_bytes()),
            server,
            codec,
            spec,
            max_value_bytes,
            tombstone_ttl,
            lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1),
            read_warning: Warning::new(),
            write_warning: Warning::new(),
        }
    }

    pub(crate) fn server(&self) -> &Server {
        &self.server
    }

    /// How long one L2 command may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.server.timeout()
    }

    /// Tracking tables go through the coherence link, so that the server does
    /// not push their own writes back to them (`NOLOOP`).
    fn lane(&self, key: &[u8]) -> Lane {
        self.lane_of(self.slot_of(key))
    }

    /// The cluster slot of `key`, one of this table's.
    fn slot_of(&self, key: &[u8]) -> u16 {
        match self.spec.placement() {
            Placement::Table => self.slot,
            Placement::Spread => keyspace::slot(key),
        }
    }

    fn key(&self, key: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + crate::entity::id::ID_LEN);
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(&RawId::new(T::KIND, key).to_bytes());
        out
    }

    /// What L2 holds for `key`. Failures ([`Found::Failed`]) and bad frames
    /// are counted: the flight goes on to the loader.
    pub(crate) async fn read(&self, key: u64, counters: &Counters) -> Found<T> {
        let span = self.span("read", key);
        let found = self.read_in(key, counters).instrument(span.clone()).await;
        let outcome = match &found {
            Found::Nothing => "nothing",
            Found::Failed => "failed",
            Found::Bad => "bad",
            Found::Value(..) => "value",
            Found::Expired(..) => "expired",
            Found::Tombstone(..) => "tombstone",
            Found::Buried(..) => "buried",
        };
        span.record("outcome", outcome);
        found
    }

    /// The span of an L2 operation on `key`; its `outcome` is recorded when
    /// it is done.
    fn span(&self, op: &'static str, key: u64) -> Span {
        tracing::debug_span!(
            "l2",
            op,
            table = self.spec.name(),
            id = %RawId::new(T::KIND, key),
            outcome = field::Empty,
        )
    }

    async fn read_in(&self, key: u64, counters: &Counters) -> Found<T> {
        let id_key = self.key(key);
        let read = match self.read_frame(&id_key).await {
            Ok(read) => read,
            Err(Failure::Redis(error)) if error.code() == Some("WRONGTYPE") => {
                self.bad_frame(key, "a key of another type", counters);
                return Found::Bad;
            }
            Err(failure) => {
                Counters::bump(&counters.l2_errors);
                tracing::debug!(%failure, "L2 read failed");
                self.read_warning
                    .emit(|n| self.warn_failure("read", &failure, n));
                return Found::Failed;
            }
        };
        self.found(key, read.frame, read.floor, counters)
    }

    /// Whether L2 is a cluster.
    pub(crate) fn on_cluster(&self) -> bool {
        self.server.is_cluster()
    }

    /// Whether the table's reads and writes check its floor: on one
    /// server, not on a cluster (see the module doc).
    pub(crate) fn floored(&self) -> bool {
        !self.server.is_cluster()
    }

    /// The frame at `id_key` and, if [`floored`](Self::floored), the
    /// table's floor, in one round trip.
    async fn read_frame(&self, id_key: &[u8]) -> Result<Read, Failure> {
        let lane = self.lane(id_key);
        if !self.floored() {
            let get = Cmd::new().arg("GET").arg(id_key).clone();
            let frame = self.server.query(lane, get).await?;
            return Ok(Read { frame, floor: None });
        }
        let mget = Cmd::new()
            .arg("MGET")
            .arg(id_key)
            .arg(&self.floor_key)
            .clone();
        let (frame, floor): (Option<Vec<u8>>, Option<Vec<u8>>) =
            self.server.query(lane, mget).await?;
        Ok(Read {
            frame,
            floor: floor_of(floor.as_deref()),
        })
    }

    /// What the frame L2 holds for `key` (if any) says, under the table's
    /// `floor` (if read): a value, live or past its logical expiry, a
    /// tombstone, a frame buried by the floor, or a bad frame (counted and
    /// logged).
    fn found(
        &self,
        key: u64,
        frame: Option<Vec<u8>>,
        floor: Option<RawId>,
        counters: &Counters,
    ) -> Found<T> {
        let Some(frame) = frame else {
            return Found::Nothing;
        };
        let decoded = frame::decode(&frame, T::KIND, self.schema);
        if let (Ok(Frame::Value(version, ..) | Frame::Tombstone(version)), Some(floor)) =
            (&decoded, floor)
            && version.payload() < floor.payload()
        {
            return Found::Buried(floor);
        }
        let decoded = match decoded {
            Ok(Frame::Tombstone(version)) => return Found::Tombstone(version),
            Ok(Frame::Value(version, expiry, body)) => self
                .codec
                .decode(body)
                .map(|value| (version, expiry, value))
                .map_err(|e| format!("undecodable body: {e}")),
            Err(error) => Err(error.to_string()),
        };
        match decoded {
            Ok((version, expiry, value)) => {
                match expiry.checked_sub(crate::entity::mint::unix_ms()) {
                    Some(left_ms) if left_ms > 0 => Found::Value(version, value, left_ms),
                    // Without a grace the server expires the frame at its
                    // logical expiry: one still there is alive on the server's
                    // clock, whatever this node's says (skew). Served, not kept.
                    _ if self.grace_ms == 0 => Found::Value(version, value, 0),
                    _ => Found::Expired(version, value),
                }
            }
            Err(reason) => {
                self.bad_frame(key, &reason, counters);
                Found::Bad
            }
        }
    }

    /// The version of what L2 holds for `key`: a value's or a tombstone's,
    /// `None` for no key or a frame that is not this table's.
    /// The table's floor counts as a version of every key.
    pub(crate) async fn version(&self, key: u64) -> Result<Option<u64>, Failure> {
        let Read { frame, floor } = self.read_frame(&self.key(key)).await?;
        let framed = match frame
            .as_deref()
            .map(|f| frame::decode(f, T::KIND, self.schema))
        {
            Some(Ok(Frame::Value(version, ..) | Frame::Tombstone(version))) => {
                Some(version.payload())
            }
            Some(Err(_)) | None => None,
        };
        Ok(framed.max(floor.map(|floor| floor.payload())))
    }

    fn bad_frame(&self, key: u64, reason: &str, counters: &Counters) {
        Counters::bump(&counters.decode_errors);
        self.read_warning.emit(|n| {
            tracing::warn!(
                table = self.spec.name(),
                id = %RawId::new(T::KIND, key),
                occurrences = n,
                "refilling over a bad L2 frame: {reason}"
            );
        });
    }

    /// Writes `value` under `version`, logically expiring in `ttl_ms` (the
    /// server keeps it the table's grace longer: see [`frame`]), if no newer
    /// version is there, unless it is larger than `max_value_bytes`: then it is only
    /// kept in L1 (counted as oversized). Fails only if the server did not
    /// take it (counted as dropped); a frame it chose not to write is `Ok`.
    pub(crate) async fn write(
        &self,
        key: u64,
        version: &RawId,
        value: &T,
        ttl_ms: u64,
        write: Write,
        counters: &Counters,
    ) -> Result<(), Failure> {
        if write != Write::Put && self.too_old(version) {
            Counters::bump(&counters.l2_writes_dropped);
            return Ok(());
        }
        let body = match self.codec.encode(value) {
            Ok(body) => body,
            Err(error) => {
                Counters::bump(&counters.l2_writes_dropped);
                self.write_warning.emit(|n| {
                    tracing::warn!(
                        table = self.spec.name(),
                        occurrences = n,
                        "cannot encode a value for L2: {error}"
                    );
                });
                return Ok(());
            }
        };
        if HEADER + body.len() > self.max_value_bytes {
            Counters::bump(&counters.oversized);
            return Ok(());
        }
        let expires = crate::entity::mint::unix_ms().saturating_add(ttl_ms);
        let frame = frame::encode(version, self.schema, expires, &body);
        let how = match (self.spec.coherence(), write) {
            (Coherence::Tracking, Write::Fill { over_bad: false }) => How::Vacant,
            _ => How::Versioned,
        };
        let px = ttl_ms.saturating_add(self.grace_ms).max(1);
        // A fill over a bad frame counted it when it read it.
        let counted = write == (Write::Fill { over_bad: true });
        let tag = if T::__TAGGED { value.__tag() } else { None };
        self.put_frame(key, &frame, px, how, counted, counters, tag)
            .await
    }

    /// Drops `key`: leaves a tombstone of `version` unless a newer value is
    /// there. Fails if the server did not take it (counted as dropped).
    pub(crate) async fn drop(
        &self,
        key: u64,
        version: &RawId,
        counters: &Counters,
    ) -> Result<(), Failure> {
        let tombstone = version.to_bytes();
        let ttl_ms = self.tombstone_ttl_ms();
        self.put_frame(
            key,
            &tombstone,
            ttl_ms,
            How::Versioned,
            false,
            counters,
            None,
        )
        .await
    }

    /// A table-wide invalidation at `version`: no frame of the table older
    /// than it is read again, nor written. Raises the table's floor to
    /// `version` (never lowers it); a table that cannot read its floor
    /// ([`floored`](Self::floored) not) first has its frames older than
    /// `version` replaced by tombstones, scanned in batches, each checked
    /// and written by one script. On a `tracking` table the floor's write
    /// is what the server pushes to every node (its own too: a script's
    /// writes are echoed despite `NOLOOP`, a wasted flush).
    pub(crate) async fn bury(&self, version: &RawId) -> Result<(), Failure> {
        let span = tracing::debug_span!("l2", op = "bury", table = self.spec.name(), %version);
        async {
            if !self.floored() {
                self.drop_older(version).await?;
            }
            let ttl = self.floor_ttl_ms().to_string();
            let args: [&[u8]; 2] = [&version.to_bytes(), ttl.as_bytes()];
            let lane = self.lane(&self.floor_key);
            (self.server)
                .eval::<i64>(lane, &WRITE_IF_NEWER, &[&self.floor_key], &args)
                .await
                .map(drop)
        }
        .instrument(span)
        .await
    }

    /// How long the floor lives: as long as a frame written before it may
    /// (the longest TTL and the grace), or a fill that read before it may
    /// still try to write (half the tombstone TTL, see [`Tier::too_old`]),
    /// whichever is longer, with the other as margin.
    pub(crate) fn floor_ttl_ms(&self) -> u64 {
        let longest = crate::l1::longest_lifetime(self.spec.ttl_ms(), self.spec.jitter());
        (longest.saturating_add(self.grace_ms)).saturating_add(self.tombstone_ttl_ms())
    }

    /// Drops every frame of the table older than `version`, leaving
    /// tombstones of `version` in their place.
    async fn drop_older(&self, version: &RawId) -> Result<(), Failure> {
        let span =
            tracing::debug_span!("l2", op = "drop_older", table = self.spec.name(), %version);
        self.drop_older_in(version).instrument(span).await
    }

    async fn drop_older_in(&self, version: &RawId) -> Result<(), Failure> {
        // The node of the table's slot, or, spread, every master.
        let nodes = match self.spec.placement() {
            Placement::Table => vec![self.slot],
            Placement::Spread => (self.server.topology().await)
                .map_err(Failure::Topology)?
                .masters
                .iter()
                .filter_map(|master| master.slots.first().map(|&(from, _)| from))
                .collect(),
        };
        for node in nodes {
            self.drop_older_on(node, version).await?;
        }
        Ok(())
    }

    /// [`drop_older`](Self::drop_older) on the node that serves `slot`:
    /// its keys of the table, scanned in batches, each batch's keys of one
    /// slot written by one script.
    async fn drop_older_on(&self, slot: u16, version: &RawId) -> Result<(), Failure> {
        let pattern = format!("{}*", self.prefix);
        let (tombstone, ttl) = (version.to_bytes(), self.tombstone_ttl_ms().to_string());
        let args: [&[u8]; 2] = [&tombstone, ttl.as_bytes()];
        let mut cursor = 0_u64;
        loop {
            let scanned = self
                .server
                .scan(self.lane_of(slot), slot, cursor, &pattern, 1_000);
            let (next, mut keys) = scanned.await?;
            keys.sort_by_key(|key| self.slot_of(key));
            for batch in keys.chunk_by(|a, b| self.slot_of(a) == self.slot_of(b)) {
                let batch: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                let lane = self.lane(batch[0]);
                self.server
                    .eval::<i64>(lane, &DROP_OLDER, &batch, &args)
                    .await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The lane of commands on the node that serves `slot`.
    fn lane_of(&self, slot: u16) -> Lane {
        if self.spec.coherence() == Coherence::Tracking {
            Lane::Linked(slot)
        } else {
            Lane::Managed
        }
    }

    /// Writes `frame` (of `tag`, if it has one) as `how` says. A key of
    /// another type that it replaces is counted as a bad frame, unless
    /// `counted` already.
    #[expect(clippy::too_many_arguments, reason = "the parts of one write")]
    async fn put_frame(
        &self,
        key: u64,
        frame: &[u8],
        ttl_ms: u64,
        how: How,
        counted: bool,
        counters: &Counters,
        tag: Option<Tag>,
    ) -> Result<(), Failure> {
        // A tombstone is a bare version.
        let op = if frame.len() == crate::entity::id::ID_LEN {
            "drop"
        } else {
            "write"
        };
        let span = self.span(op, key);
        let written = (self.put_frame_in(key, frame, ttl_ms, how, counted, counters, tag))
            .instrument(span.clone())
            .await;
        if let Err(failure) = &written {
            span.record("outcome", field::display(failure));
        } else {
            span.record("outcome", "ok");
        }
        written
    }

    #[expect(clippy::too_many_arguments, reason = "the parts of one write")]
    async fn put_frame_in(
        &self,
        key: u64,
        frame: &[u8],
        ttl_ms: u64,
        how: How,
        counted: bool,
        counters: &Counters,
        tag: Option<Tag>,
    ) -> Result<(), Failure> {
        let written = match how {
            How::Versioned => self.write_if_newer(key, frame, ttl_ms, tag).await,
            How::Vacant => self.write_if_vacant(key, frame, ttl_ms, tag).await,
        };
        match &written {
            Ok(true) if !counted => self.bad_frame(key, "a key of another type", counters),
            Ok(_) => {}
            Err(failure) => self.dropped_write(failure, counters),
        }
        written.map(drop)
    }

    /// [`WRITE_IF_NEWER`] of `key` (with its tag's keys, if it has one);
    /// whether it replaced a key of another type.
    async fn write_if_newer(
        &self,
        key: u64,
        frame: &[u8],
        ttl_ms: u64,
        tag: Option<Tag>,
    ) -> Result<bool, Failure> {
        let id_key = self.key(key);
        let ttl = ttl_ms.to_string();
        let id = RawId::new(T::KIND, key).to_bytes();
        let mut args = vec![frame, ttl.as_bytes()];
        let lane = self.lane(&id_key);
        let mut keys = vec![id_key.as_slice()];
        if self.floored() {
            keys.push(&self.floor_key);
        }
        let tag_keys = tag.map(|tag| self.tag_keys(tag));
        if let Some(tag_keys) = &tag_keys {
            keys.extend([tag_keys.floor.as_slice(), tag_keys.members.as_slice()]);
            args.push(&id);
        }
        (self
            .server
            .eval::<i64>(lane, &WRITE_IF_NEWER, &keys, &args)
            .await)
            .map(|written| written == 2)
    }

    /// `SET … NX`. Refused, it looks at the key's type: a key of another
    /// type (which `MGET` reads as nothing) would refuse every fill, so it
    /// is overwritten, as a `GET` that meets it has its fill do; whether it
    /// was.
    async fn write_if_vacant(
        &self,
        key: u64,
        frame: &[u8],
        ttl_ms: u64,
        tag: Option<Tag>,
    ) -> Result<bool, Failure> {
        let id_key = &self.key(key)[..];
        let lane = self.lane(id_key);
        let mut set = Cmd::new();
        set.arg("SET")
            .arg(id_key)
            .arg(frame)
            .arg("PX")
            .arg(ttl_ms)
            .arg("NX");
        if self.server.query::<redis::Value>(lane, set).await? != redis::Value::Nil {
            if let Some(tag) = tag {
                let version = RawId::parse(&frame[..crate::entity::id::ID_LEN])
                    .expect("a frame starts with its version");
                self.mark_tag(key, tag, &version, ttl_ms).await?;
            }
            return Ok(false);
        }
        let kind = Cmd::new().arg("TYPE").arg(id_key).clone();
        let kind: String = self.server.query(lane, kind).await?;
        if kind == "string" || kind == "none" {
            // Another fill or a write got there first: theirs stands.
            return Ok(false);
        }
        self.write_if_newer(key, frame, ttl_ms, tag).await
    }

    pub(crate) fn tombstone_ttl_ms(&self) -> u64 {
        u64::try_from(self.tombstone_ttl.as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Whether a fill minted `version` so long ago that a tombstone that
    /// should stop it may have expired.
    fn too_old(&self, version: &RawId) -> bool {
        let minted = Minter::unix_ms_of(version);
        let now = crate::entity::mint::unix_ms();
        let half = u64::try_from(self.tombstone_ttl.as_millis() / 2).unwrap_or(u64::MAX);
        now.saturating_sub(minted) > half
    }

    fn dropped_write(&self, failure: &Failure, counters: &Counters) {
        Counters::bump(&counters.l2_writes_dropped);
        self.write_warning
            .emit(|n| self.warn_failure("write", failure, n));
    }

    fn warn_failure(&self, what: &str, failure: &Failure, occurrences: u64) {
        tracing::warn!(
            table = self.spec.name(),
            occurrences,
            "L2 {what} skipped, going on without it: {failure}"
        );
    }
}

/// A frame read, with the table's floor if it was read too.
struct Read {
    frame: Option<Vec<u8>>,
    floor: Option<RawId>,
}

/// The version a floor key holds, if it holds one (any kind: versions
/// compare by payload).
fn floor_of(value: Option<&[u8]>) -> Option<RawId> {
    RawId::parse(value?.get(..crate::entity::id::ID_LEN)?).ok()
}
