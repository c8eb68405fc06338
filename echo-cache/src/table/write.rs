//! This node's writes: `put`, `invalidate` and `invalidate_all` (L2, then
//! L1, then the announcement to the other nodes), and the delivery of what
//! was kept while the server was away.

use std::sync::Arc;

use futures_util::{StreamExt, stream};
use tracing::{Instrument, Span};

use super::Table;
use crate::entity::id::RawId;
use crate::entity::mint::Minter;
use crate::entity::spec::{Cached, Coherence};
use crate::error::Error;
use crate::l1::RemovalCause;
use crate::l2::Write;
use crate::report::stats::Counters;

/// How many kept writes a delivery has under way at once on one server
/// ([`Table::redeliver`]).
const REDELIVERING: usize = 64;

impl<T: Cached> Table<T> {
    /// Writes `value` under a fresh version, living at most `life_ms`
    /// (`u64::MAX`: as the table says): L2 (if no newer version is there),
    /// then this node's L1, then the announcement to other nodes. A flight
    /// of `key` under way will not install its (older) value.
    pub(crate) async fn put(&self, key: u64, value: Arc<T>, life_ms: u64) -> Result<RawId, Error> {
        let version = Minter::global().mint_raw(T::KIND);
        let span = self.write_span("put", key, &version);
        let deadline = self.deadline(life_ms);
        (self.put_at(key, value, deadline, version))
            .instrument(span)
            .await
    }

    pub(super) async fn put_at(
        &self,
        key: u64,
        value: Arc<T>,
        deadline: u64,
        version: RawId,
    ) -> Result<RawId, Error> {
        if self.spec.coherence.versioned() {
            // Our own announcement, when it comes back, is then a repeat.
            self.applied.advance(key, version.payload());
        }
        let stored = match &self.tier {
            Some(tier) => {
                let ttl_ms = self.l2_ttl_ms(deadline.saturating_sub(self.clock.now_ms()));
                let counters = &self.counters;
                (tier
                    .write(key, &version, &value, ttl_ms, Write::Put, counters)
                    .await)
                    .is_ok()
            }
            None => true,
        };
        let now = self.clock.now_ms();
        let tag = Self::tag_of(&value);
        let row = self.row(Some(value), version.payload(), now, deadline);
        self.rows.make_room(now);
        let declined = self.flights.overtake(key, || {
            self.rows.remove_replaced(key, now);
            self.install(key, row, now, tag)
        });
        drop(declined);
        self.rows.collect_if_due();
        Counters::bump(&self.counters.puts);
        self.announce(key, &version, stored).await?;
        Ok(version)
    }

    /// Invalidates `key` under a version minted now, which it returns.
    pub(crate) async fn invalidate_fresh(&self, key: u64) -> Result<RawId, Error> {
        let version = Minter::global().mint_raw(T::KIND);
        self.invalidate(key, &version).await?;
        Ok(version)
    }

    /// Invalidates `key` at `version`: this node's L1 first (a flight under
    /// way will not install), then L2, then the announcement to other nodes.
    /// A version's kind is no part of its order: one of another kind is
    /// written and announced as the same payload under this table's kind,
    /// the only kind its L2 frames and the other nodes' lanes read.
    pub(crate) async fn invalidate(&self, key: u64, version: &RawId) -> Result<(), Error> {
        let version = RawId::new(T::KIND, version.payload());
        let span = self.write_span("invalidate", key, &version);
        self.invalidate_at(key, &version).instrument(span).await
    }

    pub(super) async fn invalidate_at(&self, key: u64, version: &RawId) -> Result<(), Error> {
        let drop_l2 = async {
            match &self.tier {
                Some(tier) => tier.drop(key, version, &self.counters).await.is_ok(),
                None => true,
            }
        };
        let stored = if self.spec.coherence.versioned() {
            self.applied.advance(key, version.payload());
            self.flights.overtake(key, || {
                let cause = RemovalCause::Invalidated;
                self.rows.remove_older(key, Some(version.payload()), cause)
            });
            self.rows.collect_if_due();
            drop_l2.await
        } else {
            // No memory of applied versions: L2 first, so a flight that
            // starts in between reads the tombstone, and one that read
            // before it is detached.
            let stored = drop_l2.await;
            self.flights.overtake(key, || {
                self.rows.remove_older(key, None, RemovalCause::Invalidated)
            });
            self.rows.collect_if_due();
            stored
        };
        Counters::bump(&self.counters.invalidations);
        self.announce(key, version, stored).await
    }

    /// Invalidates every id of the table at `version`: this node's L1 first
    /// (no flight under way will install, and no value older than
    /// `version` is kept afterwards), then L2 (the table's floor: see
    /// `l2::tier`), then the announcement to the other nodes (`tracking`:
    /// the floor's write is pushed). What fails is kept for delivery once
    /// the server is back, as for `invalidate`.
    pub(crate) async fn invalidate_all(&self, version: &RawId) -> Result<(), Error> {
        let version = RawId::new(T::KIND, version.payload());
        let span = tracing::debug_span!(
            "write",
            op = "invalidate_all",
            table = self.spec.name,
            %version,
        );
        async {
            self.flush_at(version.payload());
            let stored = match &self.tier {
                Some(tier) => tier.bury(&version).await.is_ok(),
                None => true,
            };
            self.announce_flush(&version, stored).await
        }
        .instrument(span)
        .await
    }

    /// [`announce`](Self::announce) for a table-wide invalidation.
    async fn announce_flush(&self, version: &RawId, stored: bool) -> Result<(), Error> {
        let Some(announcer) = &self.announcer else {
            return Ok(());
        };
        let sent = announcer.flush(version).await;
        if stored && sent.is_ok() {
            self.backlog.flushed(version.payload());
        } else {
            self.backlog.keep_flush(version.payload());
            self.backlog_kick.notify_one();
            tracing::debug!(
                stored,
                sent = sent.is_ok(),
                "kept for delivery once L2 is back"
            );
        }
        self.delivery(sent)
    }

    /// The span of a write (`put` or `invalidate`) of `key` at `version`.
    pub(super) fn write_span(&self, op: &'static str, key: u64, version: &RawId) -> Span {
        tracing::debug_span!(
            "write",
            op,
            table = self.spec.name,
            id = %RawId::new(T::KIND, key),
            %version,
        )
    }

    /// Tells the other nodes (broadcast, durable; tracking needs nothing:
    /// the server tells them). If that, or the write's L2 part (`stored`),
    /// failed, the write is kept for delivery once the server is back.
    pub(super) async fn announce(
        &self,
        key: u64,
        version: &RawId,
        stored: bool,
    ) -> Result<(), Error> {
        let Some(announcer) = &self.announcer else {
            return Ok(());
        };
        let sent = announcer.row(key, version).await;
        if stored && sent.is_ok() {
            // It supersedes what an older write of `key` left undelivered.
            self.backlog.delivered(key, version.payload());
            tracing::debug!("write delivered: L2 and the announcement, if any");
        } else {
            self.backlog.keep(key, version.payload());
            self.backlog_kick.notify_one();
            tracing::debug!(
                stored,
                sent = sent.is_ok(),
                "kept for delivery once L2 is back"
            );
        }
        self.delivery(sent)
    }

    /// What a write answers once its announcement was `sent` (or not): an
    /// error only for a `durable` table, whose writes promise it.
    pub(super) fn delivery(
        &self,
        sent: Result<(), crate::connections::Failure>,
    ) -> Result<(), Error> {
        match (self.spec.coherence, sent) {
            (_, Ok(())) => Ok(()),
            (Coherence::Durable, Err(failure)) => Err(Error::NotDelivered {
                table: self.spec.name,
                reason: Arc::from(failure.to_string()),
            }),
            (_, Err(_)) => {
                Counters::bump(&self.counters.announcements_dropped);
                Ok(())
            }
        }
    }

    /// Delivers the writes kept while the server was away, started oldest
    /// version first, [`REDELIVERING`] at once on one server: each as a conditional L2
    /// drop and then an announcement; then a table-wide flush if the
    /// backlog overflowed. Whether all of it was delivered (it stops at
    /// the first failure).
    pub(crate) async fn redeliver(&self) -> bool {
        let (Some(tier), Some(announcer)) = (&self.tier, &self.announcer) else {
            return true;
        };
        if self.backlog.is_empty() {
            return true;
        }
        let undelivered = self.backlog.undelivered();
        let (writes, flush) = (undelivered.writes.len(), undelivered.flush.is_some());
        // Each id's drop, then its announcement; on one server
        // [`REDELIVERING`] ids at once, started in version order, over the
        // multiplexed connection: a thousand ids one round trip after
        // another kept readers of the L2 frames they replace waiting over a
        // second past an outage. On a cluster one after another: 64 at
        // once while a master failed over left the nodes' clients failing
        // (`cluster::a_master_killed_under_load_*`).
        let at_once = if tier.on_cluster() { 1 } else { REDELIVERING };
        let deliveries = stream::iter(undelivered.writes).map(|(key, version)| async move {
            let version = RawId::new(T::KIND, version);
            tier.drop(key, &version, &self.counters).await.ok()?;
            announcer.row(key, &version).await.ok()?;
            self.backlog.delivered(key, version.payload());
            Some(())
        });
        let mut deliveries = deliveries.buffer_unordered(at_once);
        while let Some(delivered) = deliveries.next().await {
            if delivered.is_none() {
                return false;
            }
        }
        if let Some(flush) = undelivered.flush {
            let version = RawId::new(T::KIND, flush);
            if tier.bury(&version).await.is_err() || announcer.flush(&version).await.is_err() {
                return false;
            }
            self.backlog.flushed(flush);
        }
        Counters::bump(&self.counters.redeliveries);
        tracing::info!(
            table = self.spec.name,
            writes,
            flush,
            "delivered the writes kept while L2 was away"
        );
        true
    }
}
